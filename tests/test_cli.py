"""Bad input ends in one line naming the cause and the remedy, exit code 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ), timeout=600)


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert " -- " in errors[0]  # cause -- remedy
    for fragment in fragments:
        assert fragment in errors[0]


def test_unknown_device(tmp_path, this_python):
    proc = run("compare", "--stock", this_python, "--patched", this_python, "--device", "tpu", "--out", str(tmp_path))
    assert_one_line_error(proc, "invalid choice: 'tpu'")


def test_device_not_in_this_build(tmp_path, this_python):
    proc = run("compare", "--stock", this_python, "--patched", this_python, "--device", "mps", "--out", str(tmp_path))
    assert_one_line_error(proc, "device mps is not usable in build stock", "MPS is not built into this torch")


def test_dtype_the_device_lacks(tmp_path, this_python):
    proc = run("compare", "--stock", this_python, "--patched", this_python, "--device", "cpu", "--quick",
               "--dtypes", "float8_e4m3fn", "--out", str(tmp_path))
    assert_one_line_error(proc, "float8_e4m3fn is not supported on cpu for", "drop it from --dtypes")


def test_unknown_dtype_and_config(tmp_path, this_python):
    assert_one_line_error(run("bench", "--build", this_python, "--device", "cpu", "--dtypes", "float17",
                              "--out", str(tmp_path)), "unknown dtype float17")
    assert_one_line_error(run("bench", "--build", this_python, "--device", "cpu", "--configs", "turbo",
                              "--out", str(tmp_path)), "unknown env config 'turbo' for device cpu")


def test_missing_wheel(tmp_path):
    proc = run("compare", "--stock", str(tmp_path / "torch-2.6.0-cp311-cp311-linux_x86_64.whl"), "--patched",
               "torch==2.13.0", "--device", "cpu", "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, "--stock: wheel", "does not exist")


@pytest.mark.slow
def test_requirement_pip_cannot_satisfy(tmp_path, this_python):
    proc = run("compare", "--stock", this_python, "--patched", "torch==0.0.1", "--device", "cpu", "--quick",
               "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, "pip could not install torch==0.0.1")


def test_unknown_command_and_unreadable_results(tmp_path):
    assert_one_line_error(run("frobnicate"), "unknown command 'frobnicate'")
    (tmp_path / "results.json").write_text("{not json")
    assert_one_line_error(run("report", str(tmp_path)), "is not readable JSON")
    assert (tmp_path / "results.json").read_text() == "{not json"  # never overwritten
