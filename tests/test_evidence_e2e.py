"""A second series, on the generated upstream, declares its own contrasts and an upstream test in
series.toml; compare and report run it with no harness change: the test fails on stock, passes on patched."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import small_upstream as su

REPO = Path(__file__).resolve().parent.parent


def _interpreter(tmp_path: Path, name: str, tree: Path) -> Path:
    """This interpreter (it has torch) with the tree's tinyext built and installed on its path."""
    site = tmp_path / f"site-{name}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(tree),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "MAX_JOBS": "2"},
    )
    wrapper = tmp_path / f"python-{name}"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper


def test_second_series_contrasts_and_test_fail_on_stock_pass_on_patched(tmp_path):
    repo = su.make_upstream(tmp_path)
    project = tmp_path / "project"
    series_dir = su.make_evidence_series(repo, project / "patches")
    stock = su.worktree(repo, tmp_path / "work" / "stock")
    patched = su.worktree(repo, tmp_path / "work" / "patched")
    su.apply_series(patched, sorted((series_dir / "v1.4.0").glob("*.patch")))
    pythons = {name: _interpreter(tmp_path, name, tree) for name, tree in (("stock", stock), ("patched", patched))}
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "compare",
            "--stock",
            f"python:{pythons['stock']}",
            "--patched",
            f"python:{pythons['patched']}",
            "--series",
            su.EVIDENCE_SERIES,
            "--tests-source",
            str(patched),
            "--device",
            "cpu",
            "--cells",
            "mm/64x64x64/float32,sdpa/1x2x64x16/float32",
            "--rounds",
            "1",  # what is asserted is the contrasts' and the test's rows, not their verdicts
            "--target-ci",
            "0",
            "--out",
            str(out),
        ],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(REPO), "TORCH_PATCH_HARNESS_CACHE": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    assert data["evidence"]["series"] == su.EVIDENCE_SERIES and data["run"]["configs"] == ["default", "no_vec"]
    (test,) = data["series_tests"]["tests"]
    outcome = {b: (r["outcome"], r["passed"], r["failed"], r["as_expected"]) for b, r in test["builds"].items()}
    assert outcome == {"stock": ("fail", 0, 1, True), "patched": ("pass", 1, 0, True)}
    assert "AssertionError: assert False is" in test["builds"]["stock"]["failures"][0]
    report = (out / "report.md").read_text()
    block = report.split("<details>")[0]
    assert (
        "| the fast path follows the variable | `test/test_fast_path.py` `TINYEXT_PREFER_FAST_PATH=1` "
        "| fail (1 failed): `AssertionError: assert False is ('1' == '1'` ✓ | pass (1 passed) ✓ |"
    ) in block
    assert "**no regression in GEMM**: `patched/default` vs `stock/default` on mm; claim: unchanged:" in block
    assert "`stock/default` vs `stock/no_vec` on sdpa (" in block
    assert "neither build's libraries contain `TINYEXT_PREFER_FAST_PATH`" in block  # torch's libraries, truthfully
