"""`python -m harness doctor`: the two-minute self-test, on this machine's cpu (one subprocess
run of the real workers per env config) and refused in one line for a device it lacks."""

from __future__ import annotations

import sys

import pytest

from harness import cli
from harness.doctor import Row, cells, config_row, render


@pytest.fixture(scope="module")
def doctor_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("doctor")
    code = cli.main(["doctor", "--device", "cpu", "--build", f"python:{sys.executable}", "--out", str(out)])
    return code, out


def test_doctor_on_cpu_runs_every_op_under_every_config_and_writes_doctor_md(doctor_run, capsys):
    code, out = doctor_run
    text = (out / "doctor.md").read_text()
    assert "| device health | ok |" in text
    for config in ("default", "no_vec"):
        assert f"| ops under {config} | ok | 18 cells ok, 0 skipped" in text
        assert f"| timer under {config} | ok | block " in text
    assert "| toolchain: compiler |" in text and "| toolchain: disk |" in text
    # exit 0 only when no row failed (a toolchain row may fail on a machine without a compiler)
    assert (code == 0) == ("| failed |" not in text)


def test_doctor_for_a_device_this_torch_lacks_stops_in_one_line(tmp_path, capsys):
    code = cli.main(["doctor", "--device", "mps", "--build", f"python:{sys.executable}", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error: device mps is not usable in the build (torch ")
    assert "MPS is not built into this torch" in err[0]


def test_a_failed_cell_and_a_missing_timer_record_are_failed_rows():
    from harness.configs import PROFILES

    record = {
        "cells": {
            "mm/16x16x16/float32": {
                "status": "failed",
                "reason": "worker made no progress for 30 s " "(stalled in cell mm/16x16x16/float32, step measure)",
            },
            "bmm/2x16x16x16/float32": {"status": "skipped", "reason": "x"},
        }
    }
    rows = config_row(PROFILES["cpu"][0], record, None)
    assert rows == [
        Row(
            "ops under default",
            "failed",
            "1 of 2 cells failed; mm/16x16x16/float32: worker made no "
            "progress for 30 s (stalled in cell mm/16x16x16/float32, step measure)",
        )
    ]
    ok = {"cells": {"mm/16x16x16/float32": {"status": "ok", "check": {"rel_error": 1e-7, "bound": 1e-6}}}}
    rows = config_row(PROFILES["cpu"][0], ok, None)
    assert rows[1] == Row("timer under default", "failed", "the worker wrote no timer-sanity record")
    assert "worst error 10% of its bound" in rows[0].detail
    assert render(rows, "h").endswith("1 ok or skipped, 1 failed.\n")
    assert len(cells()) == 18
