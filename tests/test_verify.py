"""Verification always proves the series is in the patched wheel and absent from stock,
and a rejected wheel is moved aside, never left in dist/ under its label."""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

import pytest

from harness import workflow
from harness.build import plan as plan_mod
from harness.build import verify as verify_mod
from harness.build import wheel as wheel_mod
from harness.commands import build as build_command

MARKER = "TINYEXT_PREFER_FAST_PATH"


def fake_wheel(dist: Path, version: str, library: bytes) -> Path:
    """A minimal installable wheel ``tinyext-<version>`` whose one compiled library holds ``library``."""
    dist.mkdir(parents=True, exist_ok=True)
    path = dist / f"tinyext-{version}-py3-none-any.whl"
    info = f"tinyext-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tinyext/__init__.py", f"__version__ = {version!r}\n")
        zf.writestr("tinyext/_core.so", library)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: tinyext\nVersion: {version}\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/top_level.txt", "tinyext\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


def test_patched_wheel_without_the_series_fails_when_the_series_declares_no_markers(tmp_path):
    """Without `env` in series.toml a wheel built from the stock tree was 'verified' as patched."""
    wheel = fake_wheel(tmp_path / "dist", "1.4.0+tiny.fast.path.0123abcd", b"\x7fELF stock code only")
    with pytest.raises(verify_mod.VerifyError) as info:
        verify_mod.verify_wheel(
            wheel,
            "1.4.0+tiny.fast.path.0123abcd",
            platform="linux-cpu",
            markers=(),
            must_contain=True,
            series_files=("src/config.cpp",),
        )
    assert info.value.cause == (
        f"{wheel.name}: the series changes compiled code (src/config.cpp) but series.toml " "declares no markers (env)"
    )


def _run_build(
    monkeypatch, tmp_path, wheel: Path, series: plan_mod.SeriesRef, kind: str = "patched", built=lambda: None
) -> None:
    """run_build with the slow parts (checkout, compile) replaced: the 'build' calls ``built()``, then yields
    ``wheel``."""
    plan = argparse.Namespace(
        version=wheel.name.split("-")[1], dist_dir=wheel.parent, series=series, platform="linux-cpu", kind=kind
    )
    sources = workflow.Sources(tmp_path, tmp_path, "0" * 40, series, "v1")
    monkeypatch.setattr(workflow, "resolve_context", lambda *a, **k: None)  # the series is the SeriesRef above
    monkeypatch.setattr(workflow, "resolve_sources", lambda *a, **k: sources)
    monkeypatch.setattr(workflow, "preflight_build", lambda plan: None)
    monkeypatch.setattr(workflow, "plan_build", lambda *a, **k: plan)
    monkeypatch.setattr(
        workflow,
        "build_wheel",
        lambda plan, force=False: built()
        or wheel_mod.BuildResult(wheel, wheel.with_name(wheel.name + ".build.json"), tmp_path / "log", False, 0.0, 0),
    )
    parser = argparse.ArgumentParser()
    build_command.add_arguments_build(parser)
    build_command.run_build(
        parser.parse_args(["--kind", kind, "--series", "tiny-fast-path", "--platform", "linux-cpu"])
    )


def test_rejected_wheel_and_manifest_are_moved_aside(tmp_path, monkeypatch):
    """A rejected wheel and its manifest stayed in dist/ under the patched label."""
    dist = tmp_path / "dist"
    wheel = fake_wheel(dist, "1.4.0+tiny.fast.path.0123abcd", b"\x7fELF stock code only")
    manifest = wheel.with_name(wheel.name + ".build.json")
    manifest.write_text("{}")
    patch = tmp_path / "0001.patch"
    patch.write_text("diff --git a/src/config.cpp b/src/config.cpp\n--- a/src/config.cpp\n+++ b/src/config.cpp\n")
    series = plan_mod.SeriesRef("tiny-fast-path", (patch,), (MARKER,), ())
    with pytest.raises(verify_mod.VerifyError) as info:
        _run_build(monkeypatch, tmp_path, wheel, series)
    assert f"no compiled library contains the marker '{MARKER}'" in info.value.cause
    assert sorted(p.name for p in dist.iterdir()) == ["rejected"]  # nothing left under the label
    moved = sorted(p.name for p in (dist / "rejected").iterdir())
    assert len(moved) == 2 and moved[0].endswith(wheel.name) and moved[1].endswith(wheel.name + ".build.json")
    assert f"(moved aside to {dist.resolve() / 'rejected' / moved[0]})" in info.value.cause


def test_compiled_series_without_markers_is_refused_before_building(tmp_path, monkeypatch):
    dist = tmp_path / "dist"
    wheel = fake_wheel(dist, "1.4.0+tiny.fast.path.0123abcd", b"x")
    patch = tmp_path / "0001.patch"
    patch.write_text("diff --git a/src/config.cpp b/src/config.cpp\n--- a/src/config.cpp\n+++ b/src/config.cpp\n")
    series = plan_mod.SeriesRef("tiny-fast-path", (patch,), (), ())
    with pytest.raises(verify_mod.VerifyError) as info:  # a build before the refusal fails the test
        _run_build(monkeypatch, tmp_path, wheel, series, built=lambda: pytest.fail("built before refusing"))
    assert info.value.cause == (
        "series tiny-fast-path changes compiled code (src/config.cpp) but declares no "
        "markers (env) to verify the wheels with"
    )
    assert not (dist / "rejected").exists()  # refused before the build: nothing was built or moved
