"""Runs of `compare` on this interpreter's torch, with real worker crashes and hangs.

The driver runs in-process (``harness.cli.main``; its workers are real processes of the build's
interpreter); the shared 4-round run is the end-to-end one, ``python -m harness compare`` as a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fixed_rounds, probes_as, run_harness

from harness.bench.timer import MAX_SAMPLES
from harness.plan import TIMING

CELLS = "mm/64x64x64/float32,sdpa_causal/1x2x64x16/float32"
REPO = Path(__file__).resolve().parent.parent


def harness(*args: str, env: dict | None = None):
    """``python -m harness *args`` in this process (fixed rounds unless the test asks for adaptive ones)."""
    return run_harness(*fixed_rounds(args), env=env, cwd=REPO)


def harness_process(*args: str) -> subprocess.CompletedProcess:
    """``python -m harness *args`` as a real subprocess (the end-to-end path)."""
    return subprocess.run(
        [sys.executable, "-m", "harness", *fixed_rounds(args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
        timeout=600,
    )


def fake_python(tmp_path: Path, worker_code: str) -> str:
    """An interpreter that behaves like this one except that worker processes run ``worker_code``."""
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = harness.bench.worker ]; then exec {sys.executable} -c "{worker_code}"; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    probes_as(script)  # its probe is this interpreter's (replayed in-process, conftest.probe_once)
    return f"python:{script}"


@pytest.fixture(scope="module")
def ab_run(tmp_path_factory, this_python):
    out = tmp_path_factory.mktemp("ab") / "run"
    args = [
        "compare",
        "--stock",
        this_python,
        "--patched",
        this_python,
        "--device",
        "cpu",
        "--configs",
        "default",
        "--cells",
        CELLS,
        "--rounds",
        "4",
        "--out",
        str(out),
    ]
    first = harness_process(*args)
    return out, args, first


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(run, out)
    return out


@pytest.mark.e2e
def test_compare_writes_results_with_raw_samples_of_every_process(ab_run):
    out, _, proc = ab_run
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "results.json").read_text())
    assert data["schema_version"] == 1
    assert data["run"]["builds"] == ["stock", "patched"]
    assert len(data["processes"]) == 2 * 4
    # interleaved: every round holds both builds, and the order differs between rounds
    rounds = [[(p["build"]) for p in data["processes"] if p["round"] == r] for r in range(4)]
    assert all(sorted(r) == ["patched", "stock"] for r in rounds)
    for p in data["processes"]:
        assert p["status"] == "ok" and p["env"] == {}
        for key in CELLS.split(","):
            cell = p["cells"][key]
            assert cell["status"] == "ok"
            m = cell["measurement"]
            # what the cpu timer promises, not a count a loaded machine may miss (9 blocks once under load):
            # at least min_samples blocks, and blocks until measure_s seconds were timed or MAX_SAMPLES blocks
            # were (CI once: 2,000 blocks of one call, 0.14 s, the block sized while the host was descheduled)
            timing = TIMING["full"]["cpu"]
            assert len(m["samples"]) >= timing["min_samples"] and all(s > 0 for s in m["samples"])
            timed = sum(m["samples"]) * m["number"]
            assert timed >= timing["measure_s"] * (1 - 1e-9) or len(m["samples"]) == MAX_SAMPLES, (timed, m["number"])
            assert ("check" in cell) == (p["round"] == 0)
    first_round = [p for p in data["processes"] if p["round"] == 0]
    assert all(p["cells"]["mm/64x64x64/float32"]["check"]["passed"] for p in first_round)


def test_report_names_versions_hashes_and_ratios(ab_run):
    out, _, _ = ab_run
    report = (out / "report.md").read_text()
    import torch

    assert f"torch {torch.__version__}" in report
    assert torch.version.git_version[:12] in report
    assert "speedup [95% CI]" in report
    assert "| mm M64 N64 K64 | float32 |" in report
    # what was compared, said before the numbers
    assert "both builds are the same torch (version, git hash, wheel): an A/A run" in report
    assert "neither build's libraries contain" not in report  # no series, no markers (test_evidence_e2e: with one)
    assert "4 fresh processes per build and config (a verdict needs at least 4)." in report
    # cpu: GFLOP/s, no datasheet peak; per-process spread, full git hash, drift needs >= 5 rounds
    assert "patched/default GFLOP/s (% of peak)" in report
    assert torch.version.git_version in report
    assert "## Drift" in report and "4 round(s) cannot reach p < 0.05" in report
    assert "1 (config, cell) pairs checked in 2 build(s)" not in report  # two cells were checked
    assert "2 (config, cell) pairs checked in 2 build(s): **all within their bounds**." in report
    assert "torch.__config__.show() of stock" in report and "Build manifests: none" in report


def test_rerun_resumes_without_running_workers(ab_run, tmp_path):
    run, args, _ = ab_run
    out = _copy(run, tmp_path)
    before = json.loads((out / "results.json").read_text())
    again = harness(*_on(out, run, args))
    assert again.returncode == 0
    assert again.stderr.count(" kept r") == 8 and " ran r" not in again.stderr
    after = json.loads((out / "results.json").read_text())
    assert [p["cells"] for p in after["processes"]] == [p["cells"] for p in before["processes"]]


def test_report_command_re_renders_report_and_plots_byte_for_byte(ab_run, tmp_path):
    out = _copy(ab_run[0], tmp_path)
    names = ["report.md", "contrast-1.png"]
    original = {n: (out / n).read_bytes() for n in names}
    assert original["contrast-1.png"].startswith(b"\x89PNG") and len(original["contrast-1.png"]) > 10_000
    text = original["report.md"].decode()
    assert "Forest plots of these contrasts, per config: [default](contrast-1.png)" in text
    assert "![patched/default vs stock/default](contrast-1.png)" in text
    # one size per op: no latency-vs-size plot, and no link to one; no stock-vs-patched plot apart from the
    # contrasts' (an earlier render's speedup.png is removed)
    assert not list(out.glob("latency-*.png")) and "(latency-" not in text and not (out / "speedup.png").exists()
    for n in names:
        (out / n).unlink()
    (out / "speedup.png").write_bytes(b"an earlier render's")  # listed in the marker: the harness wrote it
    marker = json.loads((out / ".torch-patch-harness-out.json").read_text())
    (out / ".torch-patch-harness-out.json").write_text(
        json.dumps({**marker, "files": [*marker["files"], "speedup.png"]})
    )
    proc = harness("report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert {n: (out / n).read_bytes() for n in names} == original and not (out / "speedup.png").exists()
    # one the marker does not list may be the user's: it stays
    (out / "speedup.png").write_bytes(b"mine")
    assert harness("report", str(out)).returncode == 0 and (out / "speedup.png").read_bytes() == b"mine"


def test_crashing_worker_marks_its_cells_failed_and_the_run_continues(tmp_path, this_python, monkeypatch):
    """Also the cuda/mps kernel path on cpu: with the trace marked own_process, the first round runs
    probe-<build>-<config> (no timing) before the timed worker; a probe that crashes leaves each cell's
    observation with the reason, never a guessed kernel."""
    from dataclasses import replace

    from harness.bench import kernels

    monkeypatch.setitem(kernels.TRACES, "cpu", replace(kernels.TRACES["cpu"], own_process=True))
    crash = fake_python(tmp_path, "import os; os.abort()")
    proc = harness(
        "compare",
        "--stock",
        this_python,
        "--patched",
        crash,
        "--device",
        "cpu",
        "--configs",
        "default",
        "--cells",
        CELLS,
        "--rounds",
        "1",
        "--out",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 1
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    by_build = {p["build"]: p for p in data["processes"]}
    assert by_build["stock"]["status"] == "ok"
    assert by_build["patched"]["status"] == "failed"
    assert by_build["patched"]["reason"].startswith("worker killed by SIGABRT")
    reason = by_build["patched"]["reason"]
    assert reason == "worker killed by SIGABRT before it started (no cell was begun)"  # no cell is blamed
    assert {c["reason"] for c in by_build["patched"]["cells"].values()} == {reason}
    assert "failed: worker killed by SIGABRT" in (tmp_path / "out" / "report.md").read_text()
    assert sorted(p["name"] for p in data["processes"]) == ["r00-patched-default", "r00-stock-default"]
    assert (tmp_path / "out" / "raw" / "probe-stock-default.status.json").is_file()
    stock = data["kernels"]["stock"]["default"]["mm/64x64x64/float32"]
    assert stock["names"] == ["mkl:SGEMM(N,N,64,64,64)"] and "error" not in stock
    patched = data["kernels"]["patched"]["default"]["mm/64x64x64/float32"]
    assert patched["path"] is None and patched["error"].startswith("worker killed by SIGABRT"), patched
    assert "not observed: worker killed by SIGABRT" in (tmp_path / "out" / "report.md").read_text()


def test_hanging_worker_times_out(tmp_path, this_python):
    hang = fake_python(tmp_path, "import time; time.sleep(60)")
    proc = harness(
        "compare",
        "--stock",
        hang,
        "--patched",
        this_python,
        "--device",
        "cpu",
        "--configs",
        "default",
        "--cells",
        CELLS,
        "--rounds",
        "1",
        "--timeout",
        "3",
        "--out",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 1
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    stock = next(p for p in data["processes"] if p["build"] == "stock")
    # it never started, so no cell is blamed ("... while measuring <first cell>" before)
    assert (
        stock["reason"]
        == "worker timed out after 3 s before it started: starting the interpreter took longer than that"
    )
    assert {c["reason"] for c in stock["cells"].values()} == {stock["reason"]}


def test_config_consistency_compares_gemm_outputs_across_processes(tmp_path, this_python):
    """The device's config pair (cpu: no_vec vs default; mps: all vs vanilla) is compared on real outputs."""
    out = tmp_path / "out"
    proc = harness(
        "bench",
        "--build",
        this_python,
        "--device",
        "cpu",
        "--cells",
        CELLS + ",addmm/32x48x64/float16",
        "--rounds",
        "1",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "results.json").read_text())
    section = data["consistency"]
    assert section["pair"] == ["no_vec", "default"]
    assert section["mps_check_skipped"] is None  # no series: no other device's pair to name
    cells = section["builds"]["build"]["cells"]
    assert set(cells) == {"mm/64x64x64/float32", "addmm/32x48x64/float16"}  # GEMMs only, not SDPA
    for result in cells.values():
        assert result["passed"] and 0 <= result["rel_diff"] <= result["bound"]
    assert not list((out / "raw").glob("*.outputs.pt"))  # tensors removed once compared
    report = (out / "report.md").read_text()
    assert "## Config consistency" in report and "2/2 cells agree" in report


def test_consistency_flags_outputs_that_differ(tmp_path):
    import torch

    from harness.bench.consistency import compare_outputs

    a = {"mm/8x8x8/float32": torch.ones(8, 8), "mm/4x4x4/float16": torch.ones(4, 4)}
    b = {"mm/8x8x8/float32": torch.ones(8, 8) * 1.001, "mm/4x4x4/float16": torch.ones(4, 4)}
    result = compare_outputs(a, b, {}, {})
    assert not result["mm/8x8x8/float32"]["passed"]
    assert abs(result["mm/8x8x8/float32"]["rel_diff"] - 0.001 / 1.001) < 1e-7  # 1.001 rounded to float32
    assert result["mm/4x4x4/float16"] == {
        "rel_diff": 0.0,
        "bound": result["mm/4x4x4/float16"]["bound"],
        "passed": True,
        "status": "passed",
        "reason": "",
    }


def test_resume_refuses_a_run_measured_with_other_builds_or_cells(ab_run, tmp_path):
    run, args, _ = ab_run
    out = _copy(run, tmp_path)
    args = _on(out, run, args)
    before = (out / "results.json").read_text()
    other_cells = [a if a != CELLS else "mm/128x128x128/float32" for a in args]
    proc = harness(*other_cells)
    assert proc.returncode == 2
    assert f"{out} holds a run measured with different cells -- pass --fresh" in proc.stderr
    fake = fake_python(tmp_path, "import os; os.abort()")  # another interpreter: a different build input
    other_build = [
        fake if a == args[args.index("--patched") + 1] and i == args.index("--patched") + 1 else a
        for i, a in enumerate(args)
    ]
    proc = harness(*other_build)
    assert proc.returncode == 2 and "different inputs" in proc.stderr
    assert (out / "results.json").read_text() == before  # nothing relabelled


def _on(out: Path, run: Path, args: list[str]) -> list[str]:
    """``args`` of the shared run with its ``--out`` replaced by ``out``."""
    return [str(out) if a == str(run) else a for a in args]


def test_more_rounds_extend_a_finished_run(ab_run, tmp_path):
    run, args, _ = ab_run
    out = _copy(run, tmp_path)
    rounds = args.index("--rounds") + 1
    more = harness(*_on(out, run, [*args[:rounds], "5", *args[rounds + 1 :]]))
    assert more.returncode == 0, more.stderr
    kept = sum(more.stderr.count(f" kept r0{r}") for r in range(4))
    assert kept == 8 and more.stderr.count(" ran r04") == 2 == more.stderr.count(" ran r")
    assert len(json.loads((out / "results.json").read_text())["processes"]) == 10


def test_adaptive_sampling_adds_rounds_only_for_unconverged_cells(ab_run, tmp_path):
    run, args, _ = ab_run
    out = _copy(run, tmp_path)  # its 4 planned rounds are kept; adaptive rounds follow them
    # a target no CPU run reaches: rounds are added, then the budget stops them (it counts this command's
    # worker processes: the kept rounds cost nothing; a round of these two cells is estimated at 10-20 s)
    proc = harness(*_on(out, run, args), "--target-ci", "0.00001", "--budget-s", "25")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "results.json").read_text())
    adaptive = data["run"]["adaptive"]
    assert adaptive["rounds_added"] >= 1
    assert adaptive["unconverged"] == {"default": CELLS.split(",")}
    stopped = adaptive["stopped"]  # why the rounds stopped, for the report (harness.runner.stop_reason)
    assert stopped["why"] == "budget" and stopped["next_round_s"] > 0 and 0 <= stopped["left_s"] <= 25
    extra = [p for p in data["processes"] if p["round"] >= 4]
    assert len(extra) == 2 * adaptive["rounds_added"]
    # each adaptive round measured the cells the rule named from the rounds before it (a consistency check of
    # the runner against runner.next_adaptive_cells; the rule itself is tested in tests/test_schedule.py)
    from harness import runner

    for p in extra:
        before = {**data, "processes": [q for q in data["processes"] if q["round"] < p["round"]]}
        need = runner.next_adaptive_cells(before, adaptive["target"], adaptive["launch_bound_target"])
        assert sorted(p["cells"]) == sorted(need["default"]), p["round"]
    report = (out / "report.md").read_text()
    assert "**2 cell(s) did not converge** (the next round, ~" in report and "unconverged: CI half-width" in report
    per_cell = [4 + sum(key in p["cells"] for p in extra) // 2 for key in CELLS.split(",")]
    n = str(max(per_cell)) if min(per_cell) == max(per_cell) else f"{min(per_cell)}-{max(per_cell)}"
    assert (
        f"4 rounds of fresh processes per (build, config) + {adaptive['rounds_added']} adaptive rounds for the "
        f"cells whose CI was wider than ±0.0% (launch-bound cells ±5.0%): {n} processes per cell and side, interleaved"
        in report
    )


def test_adaptive_sampling_stops_when_every_cell_converged(ab_run, tmp_path):
    from harness import runner

    run, args, _ = ab_run
    out = _copy(run, tmp_path)  # its 4 planned rounds are kept; a target every cell reaches follows them
    proc = harness(*_on(out, run, args), "--target-ci", "0.9")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "results.json").read_text())
    adaptive = data["run"]["adaptive"]
    # at 4 + 4 processes the exact CI is the whole range of the differences, so one slow process of a
    # 64³ CPU cell (a busy machine) can need rounds more: each added round must have had a cell that needed
    # it, and rounds stop as soon as none does (budget 540 s)
    assert adaptive["unconverged"] == {} and adaptive["stopped"] == {"why": "converged"}
    added = adaptive["rounds_added"]
    for rounds in range(4, 4 + added + 1):
        before = {**data, "processes": [p for p in data["processes"] if p["round"] < rounds]}
        need = runner.next_adaptive_cells(before, adaptive["target"], adaptive["launch_bound_target"])
        assert bool(need) == (rounds < 4 + added), (rounds, need)
    assert len(data["processes"]) == 2 * (4 + added)
    assert "every cell converged" in (out / "report.md").read_text()


def test_report_shows_build_manifests_flags_and_datasheet_peaks(ab_run):
    from harness import report
    from harness import results as res

    out, _, _ = ab_run
    data = res.load(out)
    env = {"USE_MPS": "1", "MAX_JOBS": "8", "PYTORCH_BUILD_VERSION": "2.6.0+stock.94a97a2f"}
    for b in ("stock", "patched"):
        data["builds"][b]["build"] = {
            "base_sha": "94a97a2f7acd",
            "series": None if b == "stock" else {"name": "mps-gemm", "hash": "24198fd8"},
            "environment": {**env, "PYTORCH_BUILD_VERSION": f"2.6.0+{b}"},
            "compiler": "clang 16",
            "cmake": "3.31",
            "platform": "macos-arm64",
            "build_type": "Release",
            "version": f"2.6.0+{b}",
        }
    text = report.render(data)
    assert "| series | – | mps-gemm `24198fd8` |" in text
    assert "Build flags: **identical** apart from the version label." in text
    data["builds"]["patched"]["build"]["environment"]["USE_MPS"] = "0"
    assert "Build flags: **differ** in `USE_MPS`." in report.render(data)
    # % of peak: only where the device has a datasheet peak (here: pretend the run was on an H200)
    rows = [
        line.split(" | ")
        for line in text.split("## Cells")[1].split("## Correctness")[0].splitlines()
        if line.startswith(("| mm ", "| sdpa"))
    ]
    assert "patched/default GFLOP/s (% of peak)" in text and rows and not any("%)" in row[4] for row in rows)
    data["run"]["device"] = "cuda"
    data.pop("kernels", None)  # observed on the cpu: a cuda run's document would not validate with them
    data["builds"]["stock"]["provenance"]["gpu_name"] = "NVIDIA H200"
    cells = report.render(data).split("## Cells")[1]
    row = next(line for line in cells.splitlines() if line.startswith("| mm M64 N64 K64 | float32 |"))
    import numpy as np

    median = float(np.median(res.process_medians(res.cell_table(data)["default"]["mm/64x64x64/float32"]["patched"])))
    tflops = 2 * 64**3 / median / 1e12
    assert row.split(" | ")[4] == f"{tflops:.3g} ({tflops / 67.0:.0%})"  # FP32 peak of the H200: 67 TFLOP/s
    assert "patched/default TFLOP/s (% of peak)" in report.render(data)


@pytest.mark.e2e
def test_the_first_round_records_each_cells_kernel_and_a_planted_route_is_an_error_on_the_first_screen(ab_run):
    """cpu: MKL's SGEMM for mm float32, observed inline at the untimed first call, once per (build, config);
    then the same run re-rendered with ``mm = "metal"`` declared under `default` (what a series declaring
    the wrong route records: benchmarks/planted-route) names the mismatch before the details."""
    from harness import report
    from harness import results as res

    out, _, proc = ab_run
    assert proc.returncode == 0, proc.stderr
    data = res.load(out)
    for build in ("stock", "patched"):
        mm = data["kernels"][build]["default"]["mm/64x64x64/float32"]
        assert mm["path"] == "mkl" and mm["names"] == ["mkl:SGEMM(N,N,64,64,64)"], mm
    assert all("kernels" not in p for p in data["processes"])  # kept once, in data["kernels"]
    first = report.render(data).split("<details>")[0]
    assert "**Error:**" not in first and "Kernels: A `patched/default` MKL ×2" in first
    data["configs"]["default"]["routes"] = {"mm": "metal"}
    first = report.render(data).split("<details>")[0]
    assert (
        "> **Error:** declared metal, observed MKL for mm float32 under `default` on stock, patched (1 cell)" in first
    )


def test_a_device_probe_process_follows_each_timed_one_and_its_device_time_reaches_the_cells(
    tmp_path, this_python, monkeypatch
):
    """Where the device's trace reads device time in a process of its own (mps: the profiler's log,
    harness.bench.kernels.Trace.device_env; here the cpu trace marked so), each timed process is followed by
    dev-<round>-<build>-<config> with the config's variables plus the trace's, on the cells measured ok; its
    device fields land in those cells' measurements, a cell it gave none keeps its note, a failed probe
    leaves its reason; a resumed run keeps the probe (not run again)."""
    from dataclasses import replace

    from harness import runner, supervise
    from harness.bench import kernels

    env = {"PYTORCH_MPS_LOG_PROFILE_INFO": "385", "PYTORCH_MPS_TRACE_SIGNPOSTS": "4"}
    monkeypatch.setitem(kernels.TRACES, "cpu", replace(kernels.TRACES["cpu"], device_env=env, device_method="probe"))
    seen = []

    def fake_worker(python, spec, config, raw, name, timeout, keep=(), extra=None, stall=None, *more):
        if not name.startswith("dev-"):
            return supervise.run_worker(python, spec, config, raw, name, timeout, keep, extra, stall, *more)
        seen.append((name, spec, dict(extra)))
        mm, sdpa = spec["cells"]
        if "patched" in name:  # a probe that crashed before its first cell
            why = "worker killed by SIGABRT before it started (no cell was begun)"
            record = {
                "status": "failed",
                "reason": why,
                "cells": {k: {"status": "failed", "reason": why} for k in spec["cells"]},
                "device": {},
            }
        else:
            found = {"device": [2e-6, 3e-6, 4e-6], "device_method": "probe", "device_calls": 7, "device_note": ""}
            none = {
                "device": [],
                "device_method": "",
                "device_calls": 0,
                "device_note": "no device time (probe): 3 lines",
            }
            record = {"status": "ok", "reason": "", "cells": {}, "device": {mm: found, sdpa: none}}
        supervise.atomic_write_json(supervise.status_path(raw, name), record)
        return record

    monkeypatch.setattr(runner, "run_worker", fake_worker)
    args = ["compare", "--stock", this_python, "--patched", this_python, "--device", "cpu", "--configs", "default"]
    args += ["--cells", CELLS, "--rounds", "1", "--out", str(tmp_path / "out")]
    assert harness(*args).returncode == 0
    assert sorted(n for n, _, _ in seen) == ["dev-r00-patched-default", "dev-r00-stock-default"]
    for _, spec, extra in seen:
        assert spec["device_probe"] is True and spec["check"] is False and spec["observe"] is None
        assert spec["cells"] == CELLS.split(",") and {k: extra[k] for k in env} == env
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    cells = {p["build"]: p["cells"] for p in data["processes"]}
    mm, sdpa = (cells["stock"][k]["measurement"] for k in CELLS.split(","))
    assert (mm["device"], mm["device_method"], mm["device_calls"], mm["device_median"]) == (
        [2e-6, 3e-6, 4e-6],
        "probe",
        7,
        3e-6,
    )
    assert sdpa["device"] == [] and sdpa["device_note"] == "no device time (probe): 3 lines"
    crashed = cells["patched"]["mm/64x64x64/float32"]["measurement"]
    assert crashed["device"] == [] and crashed["device_note"].startswith("worker killed by SIGABRT")
    seen.clear()
    assert harness(*args).returncode == 0  # resumed: every process kept, the probes too
    assert seen == []
    again = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {p["build"]: p["cells"] for p in again["processes"]}["stock"]["mm/64x64x64/float32"]["measurement"][
        "device"
    ] == [2e-6, 3e-6, 4e-6]


def _wrapper(tmp_path: Path, name: str, before: str, after: str) -> str:
    """An interpreter that runs the real worker between ``before`` and ``after`` (shell lines)."""
    script = tmp_path / name
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = harness.bench.worker ]; then {before}; {sys.executable} "$@"; {after}; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    probes_as(script)
    return f"python:{script}"


def test_a_build_that_fails_after_its_cells_fails_the_run_and_start_up_stderr_is_a_note(tmp_path, this_python):
    """A build whose interpreter exits with status 3 after the worker finished (a sitecustomize calling
    ``os._exit(3)`` at exit) was reported as fine: compare exited 0, progress said "1 cells ok", the
    report's Failures and skips said "None."; a build that only warns on stderr ran fine but its warning
    appeared nowhere. Now the run fails and says why, and the warning is one note (not one per process)."""
    warning = "functional_tensor.py:279: UserWarning: Failed to initialize NumPy: _ARRAY_API not found"
    warns = _wrapper(tmp_path, "warns", f"echo '{warning}' >&2", "exit $?")
    exits = _wrapper(tmp_path, "exits", f"echo '{warning}' >&2", "exit 3")
    out = tmp_path / "out"
    cell = CELLS.split(",")[0]
    proc = harness(
        "compare", "--stock", warns, "--patched", exits, "--device", "cpu", "--configs", "default",
        "--cells", cell, "--rounds", "2", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    data = json.loads((out / "results.json").read_text())
    patched = [p for p in data["processes"] if p["build"] == "patched"]
    assert {p["reason"] for p in patched} == {"worker exited with status 3 after its cells finished"}
    assert all(p["status"] == "failed" and p["cells"][cell]["status"] == "ok" for p in patched)
    assert "1 cells ok, but the worker failed: worker exited with status 3 after its cells finished" in proc.stderr
    assert "2 worker processes failed after their cells; see report.md" in proc.stderr
    text = (out / "report.md").read_text()
    failures = text.split("## Failures and skips")[1].split("##")[0]
    assert "None." not in failures
    assert (
        "- process `r00-patched-default` (patched, `default`): worker exited with status 3 after its cells "
        "finished; its stderr holds only the lines of the note at the top"
    ) in failures
    assert text.count(warning) == 1 and "wrote to stderr in 4 of 4 worker processes" in text
