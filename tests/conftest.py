"""Shared fixtures: a tiny generated upstream, a project folder with patches/, Debian's real PyTorch source."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.paths import cache_dir

AUTHOR = {"GIT_AUTHOR_NAME": "Patch Author", "GIT_AUTHOR_EMAIL": "author@example.org",
          "GIT_AUTHOR_DATE": "1700000000 +0000", "GIT_COMMITTER_NAME": "Test Committer",
          "GIT_COMMITTER_EMAIL": "committer@example.org", "GIT_COMMITTER_DATE": "1700000000 +0000"}


def git(cwd: Path, *args: str, env: dict | None = None, check: bool = True) -> str:
    """Run git in ``cwd`` for test set-up (argument list; author/committer fixed); return stdout."""
    result = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **AUTHOR, **(env or {})},
                            capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def _lines(n: int, tag: str = "") -> str:
    return "".join(f"line {i}{tag}\n" for i in range(1, n + 1))


@pytest.fixture(scope="session")
def this_python() -> str:
    """``python:<this interpreter>``: a build input that needs no new environment (it has torch)."""
    return f"python:{sys.executable}"


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch) -> Path:
    """A private harness cache for one test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("TORCH_PATCH_HARNESS_CACHE", str(path))
    return path


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A git repository (the user's project) as cwd, with an empty patches/."""
    path = tmp_path / "project"
    (path / "patches").mkdir(parents=True)
    git(path, "init", "-q")
    git(path, "config", "user.email", "committer@example.org")
    git(path, "config", "user.name", "Test Committer")
    monkeypatch.chdir(path)
    return path


@pytest.fixture
def tiny_upstream(tmp_path) -> Path:
    """A small upstream repository with tags ``v1``, ``v2`` (moves a.txt far from the series' hunk),
    ``v3`` (rewrites the line the series edits: a rebase conflict) and ``v4`` (edits a context line of
    the series' hunk: only a 3-way merge applies it), plus a branch ``feature``
    from v1 with two commits (a.txt line 5; docs/b.md) that tests export as a patch series.
    """
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text(_lines(40))
    (repo / "docs").mkdir()
    (repo / "docs" / "b.md").write_text("# Docs\n\nSome text.\n\nMore text.\n")
    (repo / "version.txt").write_text("1.0.0a0\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    git(repo, "tag", "v1")
    git(repo, "checkout", "-q", "-b", "feature")
    text = (repo / "a.txt").read_text().replace("line 5\n", "line 5 patched\n")
    (repo / "a.txt").write_text(text)
    git(repo, "commit", "-q", "-am", "a: patch line 5\n\nWhy: the test series needs a reason.")
    (repo / "docs" / "b.md").write_text("# Docs\n\nSome text, documented.\n\nMore text.\n")
    git(repo, "commit", "-q", "-am", "docs: document the change")
    git(repo, "checkout", "-q", "main")
    (repo / "a.txt").write_text(_lines(40).replace("line 35\n", "line 35 upstream\n"))
    git(repo, "commit", "-q", "-am", "v2: upstream moves")
    git(repo, "tag", "v2")
    (repo / "a.txt").write_text(_lines(40).replace("line 35\n", "line 35 upstream\n")
                                .replace("line 5\n", "line 5 rewritten upstream\n"))
    git(repo, "commit", "-q", "-am", "v3: upstream rewrites line 5")
    git(repo, "tag", "v3")
    git(repo, "checkout", "-q", "-b", "context", "v1")
    (repo / "a.txt").write_text(_lines(40).replace("line 3\n", "line 3 context moved\n"))
    git(repo, "commit", "-q", "-am", "v4: upstream edits the series' context, not its line")
    git(repo, "tag", "v4")
    git(repo, "checkout", "-q", "main")
    return repo


def export_series(upstream: Path, project: Path, name: str = "demo", base: str = "v1",
                  rev_range: str = "v1..feature", extra: str = "") -> Path:
    """Write ``patches/<name>/series.toml`` + ``<base>/*.patch`` from ``rev_range`` of ``upstream``.

    The patches come from plain ``git format-patch`` (numbered, with signature): what a user has.
    """
    folder = project / "patches" / name
    out = folder / base
    out.mkdir(parents=True)
    git(upstream, "format-patch", "-q", "-o", str(out), rev_range)
    patches = sorted(p.name for p in out.iterdir())
    listed = ", ".join(f'"{p}"' for p in patches)
    (folder / "series.toml").write_text(
        f'name = "{name}"\ntitle = "Demo series"\nupstream = "{upstream}"\n'
        f'env = ["DEMO_ENV"]\n\n[[base]]\nref = "{base}"\npatches = [{listed}]\n{extra}')
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "series")
    return folder


@pytest.fixture(scope="session")
def debian_archive() -> Path:
    """Debian's pytorch 2.6.0+dfsg-7 orig tarball, fetched once with apt-get into the harness cache."""
    from debian_source import Unavailable, fetch_orig_archive

    try:
        return fetch_orig_archive(cache_dir())
    except Unavailable as exc:
        pytest.skip(str(exc))


def fixed_rounds(args: tuple[str, ...]) -> tuple[str, ...]:
    """A compare runs exactly its planned rounds in tests (adaptive rounds are on by default)."""
    return (*args, "--target-ci", "0") if args[:1] == ("compare",) and "--target-ci" not in args else args
