"""Shared fixtures: an isolated harness cache per test session, the interpreter under test."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="session")
def this_python() -> str:
    """``python:<this interpreter>``: a build input that needs no new environment (it has torch)."""
    return f"python:{sys.executable}"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test gets its own harness cache unless it asks for the shared one."""
    monkeypatch.setenv("TORCH_PATCH_HARNESS_CACHE", str(tmp_path_factory.mktemp("cache")))
