"""Bad input ends in one line naming the cause and the remedy, exit code 2, no traceback.

Commands run in-process (``harness.cli.main``, what ``python -m harness`` calls); one test runs the
real entry point as a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_harness

REPO = Path(__file__).resolve().parent.parent


def run(*args: str):
    return run_harness(*args, cwd=REPO)


def assert_one_line_error(proc, *fragments: str) -> None:
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
    proc = run(
        "compare",
        "--stock",
        this_python,
        "--patched",
        this_python,
        "--device",
        "cpu",
        "--quick",
        "--dtypes",
        "float8_e4m3fn",
        "--out",
        str(tmp_path),
    )
    assert_one_line_error(proc, "float8_e4m3fn is not supported on cpu for", "drop it from --dtypes")


def test_unknown_dtype_and_config(tmp_path, this_python):
    assert_one_line_error(
        run("bench", "--build", this_python, "--device", "cpu", "--dtypes", "float17", "--out", str(tmp_path)),
        "unknown dtype float17",
    )
    assert_one_line_error(
        run("bench", "--build", this_python, "--device", "cpu", "--configs", "turbo", "--out", str(tmp_path)),
        "unknown env config 'turbo' for device cpu",
    )


def test_missing_wheel(tmp_path):
    proc = run(
        "compare",
        "--stock",
        str(tmp_path / "torch-2.6.0-cp311-cp311-linux_x86_64.whl"),
        "--patched",
        "torch==2.13.0",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "o"),
    )
    assert_one_line_error(proc, "--stock: wheel", "does not exist")


@pytest.mark.slow
def test_requirement_pip_cannot_satisfy(tmp_path, this_python):
    proc = run(
        "compare",
        "--stock",
        this_python,
        "--patched",
        "torch==0.0.1",
        "--device",
        "cpu",
        "--quick",
        "--out",
        str(tmp_path / "o"),
    )
    assert_one_line_error(proc, "pip could not install torch==0.0.1")


@pytest.mark.e2e
def test_the_entry_point_prints_one_line_and_exits_2():
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "frobnicate"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
        timeout=600,
    )
    assert_one_line_error(proc, "unknown command 'frobnicate'")
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""


def test_unknown_command_and_unreadable_results(tmp_path):
    assert_one_line_error(run("frobnicate"), "unknown command 'frobnicate'")
    (tmp_path / "results.json").write_text("{not json")
    assert_one_line_error(run("report", str(tmp_path)), "is not readable JSON")
    assert (tmp_path / "results.json").read_text() == "{not json"  # never overwritten


def test_results_of_another_schema_version_or_incomplete_are_refused_and_kept(tmp_path, this_python):
    future = '{"schema_version": 99, "run": {}, "builds": {}, "configs": {}, "processes": []}'
    (tmp_path / "results.json").write_text(future)
    (tmp_path / "report.md").write_text("earlier report")
    assert_one_line_error(run("report", str(tmp_path)), "has schema version 99; this harness reads version 1")
    # compare into that --out refuses too, before measuring anything
    assert_one_line_error(
        run(
            "compare",
            "--stock",
            this_python,
            "--patched",
            this_python,
            "--device",
            "cpu",
            "--cells",
            "mm/8x8x8/float32",
            "--out",
            str(tmp_path),
        ),
        "has schema version 99",
    )
    assert (tmp_path / "results.json").read_text() == future and (
        tmp_path / "report.md"
    ).read_text() == "earlier report"
    (tmp_path / "results.json").write_text('{"schema_version": 1, "run": {}}')
    assert_one_line_error(
        run("report", str(tmp_path)), "lacks builds, configs, processes (schema version 1 requires them)"
    )


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--rounds", "0"], "--rounds 0: out of range -- give --rounds a whole number of rounds in [1, 1000]"),
        (["--threads", "-1"], "--threads -1: out of range -- give --threads a whole number of threads in [0, 4096]"),
        (["--timeout", "0"], "--timeout 0: out of range -- give --timeout a number of seconds in [1, 86400]"),
        (["--keep-env", "PATH"], "--keep-env PATH: every worker inherits it anyway"),
    ],
)
def test_invalid_numbers_and_names_are_refused_up_front(tmp_path, this_python, extra, fragment):
    proc = run("bench", "--build", this_python, "--device", "cpu", "--out", str(tmp_path / "o"), *extra)
    assert_one_line_error(proc, fragment)
    assert not (tmp_path / "o" / "raw").exists() or not any((tmp_path / "o" / "raw").iterdir())


def test_out_that_is_a_file_or_unwritable_is_one_line(tmp_path, this_python):
    afile = tmp_path / "afile"
    afile.write_text("x")
    proc = run("bench", "--build", this_python, "--device", "cpu", "--cells", "mm/8x8x8/float32", "--out", str(afile))
    assert_one_line_error(proc, str(afile))
    assert afile.read_text() == "x"


def test_target_ci_must_be_a_fraction(tmp_path, this_python):
    proc = run(
        "compare",
        "--stock",
        this_python,
        "--patched",
        this_python,
        "--device",
        "cpu",
        "--target-ci",
        "1.5",
        "--out",
        str(tmp_path / "o"),
    )
    assert_one_line_error(proc, "--target-ci 1.5: out of range -- give --target-ci a number in [0, 1)")


def test_requirement_typo_is_one_line_without_packagings_caret_diagram(tmp_path, this_python):
    proc = run(
        "compare", "--stock", "torch=2.13.0", "--patched", this_python, "--device", "cpu", "--out", str(tmp_path / "o")
    )
    assert_one_line_error(
        proc,
        "--stock: 'torch=2.13.0' is neither a wheel path nor a requirement (Expected ",
        "-- pass e.g. torch==2.13.0",
    )
    assert proc.stderr.count("\n") == 1 and "^" not in proc.stderr  # packaging's 3-line diagram is gone
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "cell, remedy",
    [
        (
            "sdpa/1x8x512/float32",
            "-- write sdpa cells as sdpa/BxHxLxD/dtype (batch, heads, sequence length, head dim), "
            "e.g. sdpa/1x8x512x64/float16",
        ),
        ("sdpa_causal/1x8/float16", "e.g. sdpa_causal/1x8x512x64/float16"),
        (
            "bmm/8x64x64/float32",
            "-- write bmm cells as bmm/BxMxNxK/dtype (batch, rows of the output, columns of the "
            "output, inner dimension), e.g. bmm/8x512x512x512/float16",
        ),
        (
            "mm/64x64/float32",
            "-- write mm cells as mm/MxNxK/dtype (rows of the output, columns of the output, "
            "inner dimension), e.g. mm/512x512x512/float16",
        ),
        ("mm64x64x64", "a cell key has 3 parts separated by '/', got 1 -- write cells as op/MxNxK/dtype"),
    ],
)
def test_bad_cell_remedy_shows_that_ops_layout(tmp_path, this_python, cell, remedy):
    proc = run("bench", "--build", this_python, "--device", "cpu", "--cells", cell, "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, f"error: bad cell {cell!r}: ", remedy)
    assert not (tmp_path / "o").exists()


def test_repeated_list_options_add_up_instead_of_keeping_the_last():
    """``--cells a --cells b`` used to measure only b, silently (the H200 run of 2026-12-01 measured 1
    of the 5 cells it named)."""
    from harness.cli import build_parser
    from harness.commands.run import request

    args = build_parser("compare").parse_args(
        ["--stock", "s", "--patched", "p", "--device", "cuda", "--out", "o"]
        + ["--cells", "mm/8x8x8/float32,sdpa/1x2x16x8/float32", "--cells", "bmm/2x8x8x8/float16"]
        + ["--dtypes", "float16", "--dtypes", "bfloat16,float32", "--configs", "default", "--configs", "cublaslt"]
    )
    req = request(args, {"stock": "s", "patched": "p"})
    assert req.cells == ("mm/8x8x8/float32", "sdpa/1x2x16x8/float32", "bmm/2x8x8x8/float16")
    assert req.dtypes == ("float16", "bfloat16", "float32") and req.configs == "default,cublaslt"
    one = request(build_parser("bench").parse_args(["--build", "b", "--device", "cpu", "--out", "o"]), {"stock": "b"})
    assert one.cells is None and one.dtypes is None and one.configs is None
