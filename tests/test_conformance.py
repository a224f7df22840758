"""MPS conformance mode (harness.bench.conformance): the MPS profile's real code on CPU tensors
under upstream's MPS rules. Each finding of the first Mac contact has a planted copy of the old
code here, which the mode must refuse, next to the current code, which it must pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from documents import run_of

from harness import configs as cfg
from harness.bench import conformance, workloads
from harness.bench.accuracy import FAILED, status_of
from harness.bench.conformance import (
    BFLOAT16_ERROR,
    DEVICE_MIN_S,
    DOUBLE_ERROR,
    ConformanceError,
    _widened,
    emulate,
)
from harness.bench.consistency import compare_outputs
from harness.bench.provenance import dtype_support
from harness.bench.timer import DEVICE_REPLAYS, MAX_BLOCK_CALLS, BlockTimer
from harness.bench.worker import run_cell
from harness.bench.workloads import Cell, default_cells, make_inputs, op_callable
from harness.manifest import load_series

ROOT = Path(__file__).resolve().parent.parent
#: the mps configs a run of the MPS series has: the four upstream ones and the series' ``all`` (series.toml)
MPS_PROFILES = (_S := load_series("mps-gemm-prefer-fast-math")).evidence.profiles("mps")
TINY = {"warmup_s": 0.0, "measure_s": 0.0, "min_block_s": 1e-4, "min_samples": 2}


def old_reference(cell, inputs):
    """The reference before the fix: one-step cast to float64 on the way off the device."""
    x = [t.detach().to(device="cpu", dtype=torch.float64) for t in inputs]
    return x[0] @ x[1]


class OldEventTimer(BlockTimer):
    """The timer before the fix: MPS events around the block, end.synchronize(), elapsed_time()."""

    def time_block(self, fn, number):
        start, end = torch.mps.event.Event(enable_timing=True), torch.mps.event.Event(enable_timing=True)
        self.sync()
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3, 0.0


def old_deadline_warmup(fn, sync, warmup_s=0.05, enqueue_s=1e-5):
    """The warm-up before the fix: enqueue until a host deadline, one synchronize at the end. The host
    clock is simulated (``enqueue_s`` seconds per enqueued call) so the flood does not depend on how fast
    this machine is right now: a busy CI host must reproduce it too."""
    now = 0.0
    deadline = now + warmup_s
    fn()
    sync()
    while now < deadline:
        fn()
        now += enqueue_s
    sync()


def test_rule1_float64_on_the_device_raises_upstreams_type_error():
    with emulate(torch):
        with pytest.raises(TypeError, match="doesn't support float64"):
            torch.empty(4, device="mps", dtype=torch.float64)
        x = torch.randn(4, 4).to("mps")
        with pytest.raises(TypeError, match="doesn't support float64"):
            x.to(device="cpu", dtype=torch.float64)
        assert x.cpu().to(torch.float64).dtype == torch.float64  # two steps: what upstream allows
    assert torch.empty(2, dtype=torch.float64).dtype == torch.float64  # the mode is gone afterwards


def test_finding3_one_step_float64_reference_fails_and_the_two_step_one_passes(monkeypatch):
    cell = Cell("mm", (16, 16, 16), "float16")
    spec = {"device": "mps", "check": True, "timing": TINY}
    with emulate(torch) as (device, _):
        ok = run_cell(torch, BlockTimer(device), device, cell, spec, {})
        monkeypatch.setattr("harness.bench.worker.reference", old_reference)
        planted = run_cell(torch, BlockTimer(device), device, cell, spec, {})
    assert ok["status"] == "ok" and ok["check"]["passed"], ok
    assert planted["status"] == "failed" and planted["reason"] == f"TypeError: {DOUBLE_ERROR}"


def test_finding1_event_timing_is_refused_and_the_host_clock_timer_passes():
    fn = lambda: None  # noqa: E731
    with emulate(torch) as (device, emu):
        with pytest.raises(ConformanceError, match="MPSEvent.mm"):
            OldEventTimer(device).time_block(fn, 4)
        m = BlockTimer(device).measure(fn, **TINY)
        assert m.overhead_s >= 0 and all(s > 0 for s in m.samples)
        assert m.method == "synchronize+perf_counter"
        assert emu.trace.count("sync") >= 2 * len(m.samples)  # every block: sync before and after


def test_finding2_deadline_warmup_floods_the_queue_and_the_bounded_warmup_does_not():
    cell = Cell("mm", (2, 2, 2), "float32")
    with emulate(torch) as (device, emu):
        fn = op_callable(cell, make_inputs(cell, device.torch_device))
        with pytest.raises(ConformanceError, match="without torch.mps.synchronize"):
            old_deadline_warmup(fn, device.sync)
        emu.synchronize()
        emu.most_calls_between_syncs = 0
        BlockTimer(device).measure(fn, warmup_s=0.05, measure_s=0.02, min_block_s=1.0)
        assert emu.most_calls_between_syncs == MAX_BLOCK_CALLS  # a 1 s block target stops at the bound


def test_rule2_bfloat16_below_macos_14_is_skipped_with_upstreams_words():
    with emulate(torch, macos=(13, 5)) as (device, _):
        support = dtype_support(torch, device.torch_device)
        cell = Cell("mm", (16, 16, 16), "bfloat16")
        record = run_cell(torch, BlockTimer(device), device, cell, {"device": "mps", "timing": TINY}, support)
    assert support["bfloat16"]["mm"] == f"TypeError: {BFLOAT16_ERROR}"
    assert support["float64"]["mm"] == f"TypeError: {DOUBLE_ERROR}"
    assert support["float16"]["mm"] is None and support["float32"]["sdpa"] is None
    assert record["status"] == "skipped" and BFLOAT16_ERROR in record["reason"]
    with emulate(torch, macos=(14, 0)) as (device, _):
        assert dtype_support(torch, device.torch_device)["bfloat16"]["mm"] is None


def test_consistency_of_outputs_with_no_cell_in_common_is_an_error():
    with pytest.raises(ValueError, match="no GEMM output in common"):
        compare_outputs({}, {}, {}, {})


def _start_worker(spec: dict, tmp: Path, name: str) -> tuple[subprocess.Popen, Path]:
    """Start the real worker on ``spec`` under env config ``name`` (stderr to a file, so that workers side by
    side never block on a full pipe); returns the process and its records' path."""
    spec_path, out_path = tmp / f"{name}.json", tmp / f"{name}.jsonl"
    spec_path.write_text(json.dumps(spec))
    env = cfg.worker_environment(next(c for c in MPS_PROFILES if c.name == name))
    env["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "harness.bench.worker", str(spec_path), str(out_path)]
    with open(tmp / f"{name}.stderr", "w") as err:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err), out_path


def _records(started: tuple[subprocess.Popen, Path], name: str) -> list[dict]:
    """The records of a worker :func:`_start_worker` started, once it ended (deadline 600 s, then killed)."""
    proc, out_path = started
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the {name} conformance worker ran past its 600 s deadline") from None
    assert proc.returncode == 0, (out_path.parent / f"{name}.stderr").read_text()[-2000:]
    return [json.loads(line) for line in out_path.read_text().splitlines()]


def test_real_worker_runs_the_quick_cells_under_every_mps_config_in_conformance_mode(tmp_path):
    """The acceptance run: the real worker, timer and checks, each mps env config in a fresh
    process, every quick cell ok under the MPS rules; then the real consistency check."""
    cells = [c.key for c in default_cells(workloads.DTYPES, quick=True)]
    outputs, started = {}, {}
    # the five configs' workers run side by side: most of each one's time is the emulated Metal device's
    # sleep (conformance rule 6) and the deferral probe's rest, not CPU (about 26 of 37 s per worker here)
    for config in MPS_PROFILES:
        save = tmp_path / f"{config.name}.outputs.pt"
        spec = {
            "device": "mps",
            "cells": cells,
            "check": True,
            "reduced_fp32": config.reduced_fp32,
            "routes": dict(config.routes),
            "seed": 0,
            "threads": 1,
            "save_outputs": str(save),
            "emulate": {"macos": [14, 0]},
            "timing": TINY,
        }
        started[config.name] = _start_worker(spec, tmp_path, config.name)
        outputs[config.name] = save
    try:
        ran = {name: _records(one, name) for name, one in started.items()}
    finally:  # a worker that failed or ran past its deadline leaves none of the others running
        for proc, _ in started.values():
            if proc.poll() is None:
                proc.kill()
    for config in MPS_PROFILES:
        records = ran[config.name]
        done = {r["key"]: r for r in records if r["type"] == "cell"}
        assert sorted(done) == sorted(cells)
        bad = {k: r["reason"] for k, r in done.items() if r["status"] != "ok"}
        assert not bad, f"{config.name}: {bad}"
        assert not [k for k, r in done.items() if status_of(r["check"]) == FAILED]  # uninformative ones are named
        assert records[-1]["type"] == "end"
        steps = [(r["key"], r["step"]) for r in records if r["type"] == "step"]
        assert steps[:3] == [(cells[0], "inputs"), (cells[0], "check"), (cells[0], "measure")]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.bench.consistency",
            str(outputs["all"]),
            str(outputs["vanilla"]),
            json.dumps(MPS_PROFILES[4].to_json()),
            json.dumps(MPS_PROFILES[0].to_json()),
        ],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,  # the consistency check of two saved output files: seconds here
    )
    assert proc.returncode == 0, proc.stderr
    agree = json.loads(proc.stdout)
    gemm = [k for k in cells if Cell.from_key(k).family == "gemm"]
    assert sorted(agree) == sorted(gemm) and not [k for k, v in agree.items() if status_of(v) == FAILED]


def test_finding4_metal_accumulation_needs_the_routed_bound():
    """fp16 mm with K = 512 summed in fp16, as the Metal naive_matmul does (numpy emulation):
    over the default (fp32-accumulation) bound, within the bound of the metal route."""
    import numpy as np

    from harness.bench.accuracy import bound

    rng = np.random.default_rng(0)
    m, n, k = 64, 64, 512
    a = (rng.standard_normal((m, k)) * k**-0.25).astype(np.float16)
    b = (rng.standard_normal((k, n)) * k**-0.25).astype(np.float16)
    acc = np.zeros((m, n), dtype=np.float16)
    for i in range(k):  # rc += v1[i] * v2[i] in half precision
        acc = (
            acc + (a[:, i : i + 1].astype(np.float16) * b[i : i + 1, :].astype(np.float16)).astype(np.float16)
        ).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.linalg.norm(acc.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert bound("float16", k) < err < bound("float16", k, accumulator="input")
    assert 1e-3 < err < 1e-2
    routes = {c.name: dict(c.routes) for c in MPS_PROFILES}
    assert (
        routes["prefer_metal"] == routes["fast_math+prefer_metal"] == routes["all"] == {"mm": "metal", "addmm": "metal"}
    )
    assert routes["vanilla"] == routes["fast_math"] == {}
    assert not any(c.reduced_fp32 for c in MPS_PROFILES)  # FAST_MATH never reaches MPSGraph


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rule7_half_gemms_run_widened_and_rounded_once_with_their_calls_and_dtype_unchanged(dtype, monkeypatch):
    """The shortcut changes the arithmetic's speed, never what the harness sees: the output's dtype, its
    device tag, the device calls traced; a float32 GEMM and an ``out=`` one run as they are. The GEMMs reach
    it, and the kernel gets float32 operands (torch's CPU half kernel would give the same outputs here)."""
    seen = []

    def kernel(func):
        def run(*args, **kwargs):
            seen.append((func.__name__, {str(t.dtype) for t in (*args, *kwargs.values()) if torch.is_tensor(t)}))
            return func(*args, **kwargs)

        run.__name__ = func.__name__
        return run

    monkeypatch.setattr(
        conformance, "_widened", lambda torch, func, args, kwargs: _widened(torch, kernel(func), args, kwargs)
    )
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(48, 40, generator=gen), torch.randn(40, 24, generator=gen))
    bias = torch.randn(24, generator=gen)
    x, w, c = a.to(dtype), b.to(dtype), bias.to(dtype)
    widened = {
        "mm": (x.float() @ w.float()).to(dtype),
        "linear": torch.nn.functional.linear(x.float(), w.t().contiguous().float(), c.float()).to(dtype),
    }
    with emulate(torch) as (_, emu):
        dx, dw, dc = x.to("mps"), w.to("mps"), c.to("mps")
        got = {"mm": torch.mm(dx, dw), "linear": torch.nn.functional.linear(dx, dw.t().contiguous(), dc)}
        wide32 = torch.mm(a.to("mps"), b.to("mps"))
        calls = [name for name in emu.trace if name not in ("to", "sync")]
        host = {k: v.cpu() for k, v in got.items()}
    assert calls == ["mm", "t", "contiguous", "linear", "mm"], calls
    assert seen == [("mm", {"torch.float32"}), ("linear", {"torch.float32"}), ("mm", {"torch.float32"})], seen
    for name, out in got.items():
        assert out.dtype == dtype and getattr(out, conformance._TAG, False) is True, name
        assert torch.equal(host[name], widened[name]), name
    assert torch.equal(wide32.cpu(), a @ b)  # float32: untouched
    out = torch.empty(48, 24, dtype=dtype)
    assert _widened(torch, torch.mm, (x, w), {"out": out}) is out  # out=: run as it is, into that tensor
    with pytest.raises(RuntimeError):  # mixed dtypes: run as they are (torch refuses them), never widened
        _widened(torch, torch.mm, (x.float(), w), {})


def test_a_worker_hung_in_a_cell_is_stopped_after_the_stall_timeout_with_the_cells_name(tmp_path):
    from harness.supervise import run_worker

    python = tmp_path / "python"
    planted = (
        "import sys, time; import harness.bench.timer as t; "
        "t.BlockTimer.measure = lambda *a, **k: time.sleep(3600); "
        "import harness.bench.worker as w; sys.exit(w.main(sys.argv[1:]))"
    )
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} -c "{planted}" "$@"\n')
    python.chmod(0o755)
    spec = {"device": "cpu", "cells": ["mm/8x8x8/float32", "mm/16x16x16/float32"], "check": False, "timing": TINY}
    record = run_worker(python, spec, cfg.PROFILES["cpu"][0], tmp_path, "r00-stock-default", timeout=300, stall=3)
    # stopped by the 3 s stall rule, not by the 300 s whole-process timeout ("worker timed out after 300 s")
    assert record["reason"] == "worker made no progress for 3 s (stalled in cell mm/8x8x8/float32, step measure)"
    assert record["cells"]["mm/16x16x16/float32"]["reason"] == f"not measured: {record['reason']}"


def test_finding7_the_gpu_is_named_by_torch_backends_mps_not_the_cpu_brand():
    from types import SimpleNamespace

    from harness.bench.devices import MPS_BFLOAT16_MACOS, MPS_MIN_MACOS, mps_gpu_name

    new = SimpleNamespace(
        backends=SimpleNamespace(mps=SimpleNamespace(get_name=lambda: "Apple M3 Max", get_core_count=lambda: 40))
    )
    old = SimpleNamespace(backends=SimpleNamespace(mps=SimpleNamespace()))  # torch before 2.13
    assert mps_gpu_name(new) == "Apple M3 Max, 40 GPU cores"
    assert mps_gpu_name(old) is None
    assert mps_gpu_name(torch) is None  # a CPU build: the query fails, no CPU brand instead
    assert (MPS_MIN_MACOS, MPS_BFLOAT16_MACOS) == ((13, 0), (14, 0))
    from harness.bench.provenance import probe

    info = probe("mps", [])
    assert info["gpu_name"] is None and "MPS is not built into this torch" in info["device_error"]


def test_collect_env_is_the_text_python_m_torch_utils_collect_env_prints(capsys, monkeypatch):
    """Made in the probe's process (torch imported once), the report is what ``python -m
    torch.utils.collect_env`` prints (its ``main()``); the probe's stdout is its JSON alone, whatever
    the report prints; a report that fails or hangs is left out."""
    from torch.utils import collect_env as torch_collect_env

    from harness.bench import provenance

    torch_collect_env.main()
    printed = capsys.readouterr().out
    assert printed.startswith("Collecting environment information...\nPyTorch version: ")
    assert provenance.collect_env() == printed
    real = torch_collect_env.get_pretty_env_info

    def chatty():
        print("a line an older collect_env prints")
        return real()

    monkeypatch.setattr(torch_collect_env, "get_pretty_env_info", chatty)
    monkeypatch.setattr(provenance.sys, "stdout", provenance.sys.stdout)  # main() leaves stderr in its place
    assert provenance.main(["--device", "cpu", "--collect-env"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["collect_env"] == printed and "a line an older collect_env prints" in err
    monkeypatch.setattr(torch_collect_env, "get_pretty_env_info", lambda: 1 / 0)
    assert provenance.collect_env() is None  # a broken report: the probe goes on without it
    monkeypatch.setattr(torch_collect_env, "get_pretty_env_info", lambda: time.sleep(2) or "late")
    assert provenance.collect_env(timeout=0.2) is None  # a hung one: given up after the timeout


def test_collect_env_is_taken_only_for_a_usable_device(monkeypatch):
    """``torch.utils.collect_env`` (seconds, a second interpreter) is added to a probe whose device can
    produce evidence; a refused device is said without it."""
    from harness.bench import provenance

    monkeypatch.setattr(provenance, "collect_env", lambda: "torch's report")
    refused = provenance.probe("mps", [], with_collect_env=True)
    assert refused["device_error"] and refused["collect_env"] is None
    usable = provenance.probe("cpu", [], with_collect_env=True)
    assert usable["device_error"] is None and usable["collect_env"] == "torch's report"
    assert provenance.probe("cpu", [])["collect_env"] is None


def test_layouts_allocate_spacers_and_copies_within_upstreams_rules(monkeypatch):
    # on the emulated device every call is host time (host-bound); pretend it is not, to run the layouts
    monkeypatch.setattr("harness.bench.timer.Measurement.host_bound", property(lambda self: False))
    cell = Cell("mm", (16, 16, 16), "float16")
    with emulate(torch) as (device, _):
        spec = {"device": "mps", "timing": {**TINY, "layouts": 3}}
        record = run_cell(torch, BlockTimer(device), device, cell, spec, {})
    assert record["status"] == "ok", record
    assert record["measurement"]["layouts"][0] == 0 and len(record["measurement"]["layouts"]) == 3


def test_a_duty_cycle_keeps_every_block_synchronized_and_bounded():
    cell = Cell("mm", (2, 2, 2), "float32")
    with emulate(torch) as (device, emu):
        fn = op_callable(cell, make_inputs(cell, device.torch_device))
        emu.most_calls_between_syncs = 0
        calls = emu.trace.count("sync")
        m = BlockTimer(device).measure(fn, warmup_s=0.0, measure_s=0.0, min_block_s=0.01, min_samples=2, duty=0.5)
        assert len(m.samples) == 2 and 0 < emu.most_calls_between_syncs <= MAX_BLOCK_CALLS
        # each pre-roll after a rest is followed by the timed block's own synchronize before the clock starts
        assert emu.trace.count("sync") - calls >= 2 * 2


def test_collect_env_without_pip_lists_the_packages_from_their_metadata():
    from harness.bench.provenance import PIP_NOT_COLLECTED, installed_packages

    assert installed_packages("Versions of relevant libraries:\n[pip3] numpy==2.0\n") == ""
    lines = installed_packages(f"Versions of relevant libraries:\n{PIP_NOT_COLLECTED}\n").splitlines()
    assert lines[0].startswith("Packages in this environment (importlib.metadata")
    assert f"[meta] torch=={torch.__version__}" in lines


def test_rule5_the_emulated_profiler_log_shows_metal_exactly_where_prefer_metal_routes(monkeypatch):
    """The mps probe (its own process: PYTORCH_MPS_LOG_PROFILE_INFO=1 on top of the config) parsed from
    lines in upstream's MPSProfiler format, under every mps config of the MPS series; the observed routes
    agree with the series' declarations (harness.observed: no mismatch)."""
    from harness import observed
    from harness.bench import kernels
    from harness.bench.worker import observe_cell

    keys = [f"{op}/16x8x4/float16" for op in ("mm", "addmm", "linear")] + ["bmm/2x16x8x4/float16"]
    found = {}
    for config in MPS_PROFILES:
        with monkeypatch.context() as m:
            for name in [k for k in os.environ if k.startswith("PYTORCH_MPS")]:
                m.delenv(name)
            for name, value in {**config.env, **kernels.TRACES["mps"].env}.items():
                m.setenv(name, value)
            with emulate(torch) as (device, _):
                found[config.name] = {k: observe_cell(torch, device, Cell.from_key(k), {}, {}) for k in keys}
    metal = {c: sorted(k.split("/")[0] for k, o in per.items() if o["path"] == "metal") for c, per in found.items()}
    assert metal == {
        "vanilla": [],
        "fast_math": [],
        "prefer_metal": ["addmm", "mm"],
        "fast_math+prefer_metal": ["addmm", "mm"],
        "all": ["addmm", "mm"],  # the emulation is stock upstream: the series' variable is not read
    }
    assert found["prefer_metal"]["mm/16x8x4/float16"]["names"] == ["Kernel:matmul:MPS:Half[16, 4]:MPS:Half[4, 8]"]
    assert found["vanilla"]["mm/16x8x4/float16"]["path"] == "mpsgraph"
    data = {
        "run": {"device": "mps", "builds": ["stock"], "configs": list(found), "cells": keys},
        "configs": {c.name: c.to_json() for c in MPS_PROFILES},
        "kernels": {
            "stock": {
                c: {k: {x: v for x, v in o.items() if x not in ("type", "key")} for k, o in per.items()}
                for c, per in found.items()
            }
        },
    }
    assert observed.mismatches(run_of(data)) == []
    # the same observations against a planted declaration: linear routed to Metal under prefer_metal
    data["configs"]["prefer_metal"]["routes"]["linear"] = "metal"
    assert [m.text for m in observed.mismatches(run_of(data))] == [
        "declared metal, observed MPSGraph for linear float16 under `prefer_metal` on stock (1 cell)"
    ]


def test_rule5_routing_is_the_bases_v260_logs_naive_matmul_for_mm_only(monkeypatch):
    """v2.6.0 reads PREFER_METAL only in use_metal_mm, which only mm_out_mps_impl calls (LinearAlgebra.mm
    blob be94fca8 lines 76-85, 221), and logs its kernel as naive_matmul (line 45); main routes mm and addmm
    (matmul, addmm: LinearAlgebra.mm @ 001077cb). A base with no emulated routing is refused."""
    from harness.bench import kernels
    from harness.bench.worker import observe_cell

    keys = ["mm/16x8x4/float16", "addmm/16x8x4/float16"]
    for name in [k for k in os.environ if k.startswith("PYTORCH_MPS")]:
        monkeypatch.delenv(name)
    for name, value in {
        **next(c for c in MPS_PROFILES if c.name == "prefer_metal").env,
        **kernels.TRACES["mps"].env,
    }.items():
        monkeypatch.setenv(name, value)
    found = {}
    for base in ("v2.6.0", "main"):
        with emulate(torch, base=base) as (device, _):
            found[base] = {k.split("/")[0]: observe_cell(torch, device, Cell.from_key(k), {}, {}) for k in keys}
    assert found["v2.6.0"]["mm"]["names"] == ["Kernel:naive_matmul:MPS:Half[16, 4]:MPS:Half[4, 8]"]
    assert found["v2.6.0"]["addmm"]["path"] == "mpsgraph"
    assert [found["main"][op]["names"][0].split(":")[:2] for op in ("mm", "addmm")] == [
        ["Kernel", "matmul"],
        ["Kernel", "addmm"],
    ]
    with pytest.raises(ValueError, match="no emulated routing for base 'v2.7.0'"):
        with emulate(torch, base="v2.7.0"):
            pass


def test_rule5_main_linear_on_macos15_logs_mpsndarray_which_is_not_the_metal_route(monkeypatch):
    """main's linear on macOS >= 15 runs MPSNDArrayMatrixMultiplication as an id=K line ("mps_linear",
    Linear.mm @ 033fee85) under every config: classified MPSNDArray on the default route, so the series'
    declarations (linear: default) raise no mismatch; on macOS 14 it is a graph."""
    from harness import observed
    from harness.bench import kernels
    from harness.bench.worker import observe_cell

    key = "linear/16x8x4/float16"
    for name in [k for k in os.environ if k.startswith("PYTORCH_MPS")]:
        monkeypatch.delenv(name)
    for name, value in kernels.TRACES["mps"].env.items():
        monkeypatch.setenv(name, value)
    found = {}
    for macos in ((15, 0), (14, 0)):
        with emulate(torch, macos=macos) as (device, _):
            found[macos] = observe_cell(torch, device, Cell.from_key(key), {}, {})
    assert found[(15, 0)]["names"][0].startswith("Kernel:mps_linear:MPS:Half[16, 4]:MPS:Half[8, 4]")
    assert (found[(15, 0)]["path"], found[(15, 0)]["route"]) == ("mpsndarray", "default")
    assert found[(14, 0)]["path"] == "mpsgraph"
    vanilla = next(c for c in MPS_PROFILES if c.name == "vanilla")
    obs = {x: v for x, v in found[(15, 0)].items() if x not in ("type", "key")}
    data = {
        "run": {"device": "mps", "builds": ["stock"], "configs": ["vanilla"], "cells": [key]},
        "configs": {"vanilla": vanilla.to_json()},
        "kernels": {"stock": {"vanilla": {key: obs}}},
    }
    assert observed.mismatches(run_of(data)) == []


def _observe_v260(monkeypatch, env: dict[str, str], keys: list[str]) -> dict:
    """Each key's observation (harness.bench.worker.observe_cell) in the conformance mode on base v2.6.0,
    under ``env`` plus the mps probe's trace variables."""
    from harness.bench import kernels
    from harness.bench.worker import observe_cell

    with monkeypatch.context() as m:
        for name in [k for k in os.environ if k.startswith("PYTORCH_MPS")]:
            m.delenv(name)
        for name, value in {**env, **kernels.TRACES["mps"].env}.items():
            m.setenv(name, value)
        with emulate(torch, base="v2.6.0") as (device, _):
            found = {k: observe_cell(torch, device, Cell.from_key(k), {}, {}) for k in keys}
    return {k: {x: v for x, v in o.items() if x not in ("type", "key")} for k, o in found.items()}


def _v260_run(monkeypatch) -> tuple[dict, object]:
    """A results document reduced to what harness.observed reads: an mps A/B on base v2.6.0 in the
    conformance mode (stock told by its release, patched by its series hash), each build's routes as the
    runner records them (Evidence.routes_of). The patched build under `all` is emulated with PREFER_METAL
    unset: 0001 makes PREFER_METAL + GEMM_PREFER_FAST_MATH=1 route exactly like that (its commit message)."""
    from harness.evidence import for_run

    ev = for_run(_S, [])
    keys = ["mm/16x8x4/float16", "addmm/16x8x4/float16"]
    configs = {c.name: c for c in MPS_PROFILES}
    builds = {
        "stock": {"provenance": {"torch_version": "2.6.0"}},
        "patched": {"build": {"series": {"hash": next(b["hash"] for b in ev.bases if b["ref"] == "v2.6.0")}}},
    }
    for name, told in ev.base_of(builds).items():
        builds[name]["base"] = {**told, "routes": ev.routes_of("mps", told["ref"], told["patched"])}
    kernels_seen = {"stock": {}, "patched": {}}
    for config in ("prefer_metal", "all"):
        env = dict(configs[config].env)
        kernels_seen["stock"][config] = _observe_v260(monkeypatch, env, keys)
        patched_env = {k: v for k, v in env.items() if k != "PYTORCH_MPS_PREFER_METAL"} if config == "all" else env
        kernels_seen["patched"][config] = _observe_v260(monkeypatch, patched_env, keys)
    data = {
        "run": {"device": "mps", "builds": ["stock", "patched"], "configs": ["prefer_metal", "all"], "cells": keys},
        "configs": {c: configs[c].to_json() for c in ("prefer_metal", "all")},
        "builds": builds,
        "kernels": kernels_seen,
    }
    return data, ev


def test_routes_are_the_bases_a_v260_run_declares_mm_only_and_shows_no_false_addmm_error(monkeypatch):
    """v2.6.0 sends only mm to Metal under PREFER_METAL (use_metal_mm's one caller is mm_out_mps_impl,
    LinearAlgebra.mm:77); the series-wide routes name addmm too (main's routing). Judged by the base's own
    routes, exactly per build, the v2.6.0 run has no error; judged by the series-wide ones (a build whose
    base is not told) it would put a false addmm error on the first screen."""
    from harness import observed

    data, _ = _v260_run(monkeypatch)
    assert data["builds"]["stock"]["base"]["routes"]["prefer_metal"] == {"mm": "metal"}
    assert data["builds"]["patched"]["base"]["routes"]["all"] == {"mm": "default", "addmm": "default"}
    assert data["builds"]["stock"]["base"]["routes"]["all"] == {"mm": "metal"}
    routes = {b: {k: o["route"] for k, o in data["kernels"][b]["all"].items()} for b in ("stock", "patched")}
    assert routes == {
        "stock": {"mm/16x8x4/float16": "metal", "addmm/16x8x4/float16": "default"},
        "patched": {"mm/16x8x4/float16": "default", "addmm/16x8x4/float16": "default"},
    }
    assert observed.mismatches(run_of(data)) == [] and observed.error_notes(run_of(data)) == []
    assert observed.rules(run_of(data)) == {b: "exact, the routes of base v2.6.0" for b in ("stock", "patched")}
    assert "Routes judged on stock: exact, the routes of base v2.6.0." in observed.details(run_of(data))
    # the same observations with no base told: the series-wide routes, and the error this change removes
    for build in data["builds"].values():
        del build["base"]
    assert [m.text for m in observed.mismatches(run_of(data))] == [
        "declared metal, observed MPSGraph for addmm float16 under `prefer_metal` on stock, patched (1 cell)",
        "declared metal, observed MPSGraph for addmm float16 under `all` on stock, patched (1 cell)",
    ]


def test_a_wrong_per_base_route_is_named_on_the_first_screen_for_that_base_and_build(monkeypatch):
    """Planted: v2.6.0's [base.routes.mps] declaring addmm = metal under prefer_metal (main's routing), and
    the patched build's `all` declared as stock's. Each is an error naming the base and the build."""
    from harness import observed

    data, _ = _v260_run(monkeypatch)
    data["builds"]["stock"]["base"]["routes"]["prefer_metal"]["addmm"] = "metal"
    data["builds"]["patched"]["base"]["routes"]["all"]["mm"] = "metal"
    assert [m.text for m in observed.mismatches(run_of(data))] == [
        "declared metal for base v2.6.0, observed MPSGraph for addmm float16 under `prefer_metal` on stock (1 cell)",
        "declared metal for base v2.6.0, observed MPSGraph for mm float16 under `all` on patched (1 cell)",
    ]
    assert observed.error_notes(run_of(data))[0].startswith(
        "> **Error:** declared metal for base v2.6.0, observed MPSGraph for addmm float16 under `prefer_metal`"
    )


def test_the_v260_addmm_check_under_prefer_metal_uses_the_default_bound():
    """The worker's spec and the consistency check take each build's routes (supervise.build_routes): on
    v2.6.0 addmm keeps the default (float32-accumulation) bound under prefer_metal and mm the Metal path's
    (input accumulation); a build whose base is not told keeps the series-wide (looser) routes."""
    from harness.bench.accuracy import DEFAULT_ACCUMULATOR, bound
    from harness.bench.consistency import config_accumulator
    from harness.bench.worker import accumulator
    from harness.evidence import for_run
    from harness.supervise import build_routes

    ev = for_run(_S, [])
    prefer_metal = next(c for c in MPS_PROFILES if c.name == "prefer_metal")
    build = {"base": {"ref": "v2.6.0", "routes": ev.routes_of("mps", "v2.6.0", False)}}
    spec = {"routes": build_routes(build, prefer_metal), "accumulators": ev.accumulators("v2.6.0")}
    mm, addmm = Cell.from_key("mm/64x64x4096/float16"), Cell.from_key("addmm/64x64x4096/float16")
    assert spec["routes"] == {"mm": "metal"}
    assert accumulator(addmm, spec) == config_accumulator(addmm, spec) == DEFAULT_ACCUMULATOR
    assert accumulator(mm, spec) == "input"
    assert bound("float16", 4096, accumulator=accumulator(addmm, spec)) == bound("float16", 4096)
    assert bound("float16", 4096, accumulator="input") > bound("float16", 4096)
    unknown = {"routes": build_routes({"base": {"ref": None}}, prefer_metal), "accumulators": ev.accumulators(None)}
    assert unknown["routes"] == {"mm": "metal", "addmm": "metal"} and accumulator(addmm, unknown) == "unknown"


def test_every_doctor_assumption_row_runs_its_mps_path_and_prints_a_verdict(monkeypatch):
    """Doctor's assumption rows under --device mps, each route's process in-process here (the
    Metal route with PYTORCH_MPS_PREFER_METAL set, as its config sets it): the Metal route's timed block
    leaves its GEMMs uncommitted until the synchronize (rule 6) and the host read commits and waits; every
    row prints "assumption held" or "did not hold" with its source."""
    from harness import assumptions as asm
    from harness.bench import assumptions as child
    from harness.bench.channel import Channel
    from harness.options import STALL_TIMEOUT
    from harness.plan import TIMING

    emulated = {"macos": [14, 0]}
    routes, most = {}, {}
    for name, env in (("vanilla", {}), ("prefer_metal", {"PYTORCH_MPS_PREFER_METAL": "1"})):
        monkeypatch.delenv("PYTORCH_MPS_PREFER_METAL", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        rows = ["fresh", "sync", "duty", "slowest", "accuracy"]
        with emulate(torch) as (prof, emu):
            routes[name] = child.measure(torch, prof, asm.spec("mps", rows, emulated), Channel(None))
        most[name] = emu.most_uncommitted
        assert "read" in emu.trace and emu.most_calls_between_syncs <= MAX_BLOCK_CALLS
    assert most["vanilla"] == 0 and most["prefer_metal"] >= routes["prefer_metal"]["sync"]["number"] >= 1
    # row 2's deferral is the timer's probe, per route and on the small cell too (rule 6); the emulated
    # MPSGraph call does its work within the call: its sized block is all enqueue, launch-bound under either
    # rule, and the probe leaves it out (None: not "submitted as issued", which nothing measured), unless a
    # busy host delayed that block's synchronize: then it is probed and reads False (never True)
    assert routes["prefer_metal"]["sync"]["deferred"] is True and routes["vanilla"]["sync"]["deferred"] in (None, False)
    assert routes["prefer_metal"]["sync"]["small"]["cell"] == asm.EMULATED["small_cell"]
    assert routes["prefer_metal"]["sync"]["small"]["deferred"] is True
    assert routes["vanilla"]["cell"] == asm.EMULATED["cell"]
    cells = asm.accuracy_cells(asm.EMULATED["accuracy"])
    assert all(r["accuracy"][k].get("rel_error") is not None for r in routes.values() for k in cells)
    fresh = [routes["vanilla"]["fresh_s"]] * asm.FRESH
    m = asm.Measured("mps", routes, fresh, dict(asm.ROUTES["mps"]), STALL_TIMEOUT["full"], TIMING["full"]["gpu"])
    verdicts = asm.judge(m)
    assert [a.name for a, _ in verdicts] == [a.name for a in asm.ASSUMPTIONS] and len(verdicts) == 7
    encode = dict(verdicts)[asm.ASSUMPTIONS[1]]
    graph = {None: "(deferral not measured)", False: "(submitted as issued)"}[routes["vanilla"]["sync"]["deferred"]]
    assert "MPSGraph " in encode.detail and graph in encode.detail
    assert "(deferred until the synchronize)" in encode.detail and encode.data["bias"] > 0
    for a, v in verdicts:
        status, detail = asm.row_text(a, v)
        if a.judge is asm.judge_device:  # its own processes, with the probe's variables: tests/test_doctor.py
            assert v.held is None and "MPSGraph: no answer; Metal: no answer" in v.detail, v.detail
            continue
        assert v.held is not None and detail.startswith(("assumption held: ", "did not hold: ")), (a.name, detail)
        assert "MPSGraph" in detail or a.judge in (asm.judge_fresh, asm.judge_stall), detail


def _prefer_metal(monkeypatch, prefer: bool) -> None:
    """PYTORCH_MPS_PREFER_METAL set (to 1) or unset for what the test runs next."""
    monkeypatch.delenv("PYTORCH_MPS_PREFER_METAL", raising=False)
    if prefer:
        monkeypatch.setenv("PYTORCH_MPS_PREFER_METAL", "1")


def test_rule6_the_timers_probe_finds_metal_gemms_deferred_and_leaves_calls_done_within_the_call_unprobed(monkeypatch):
    """Rule 6 through the real worker: under PYTORCH_MPS_PREFER_METAL the Metal-routed GEMMs' work waits for
    the synchronize and the probe says so (deferred, judged by the 0.5 rule); the emulated MPSGraph calls (SDPA
    there, every call without it) do their work within the call, so their sized block is all enqueue,
    launch-bound under either rule, and the probe leaves them out: None, never a "submitted as issued" that
    nothing measured (before the probe's None, they were recorded False)."""
    timing = {**TINY, "warmup_calls": 3}
    found = {}
    for prefer in (False, True):
        _prefer_metal(monkeypatch, prefer)
        with emulate(torch) as (device, emu):
            for key in ("mm/32x32x32/float32", "sdpa/1x2x32x16/float32"):
                record = run_cell(torch, BlockTimer(device), device, Cell.from_key(key), {"timing": timing}, {})
                assert record["status"] == "ok", record
                found[(prefer, key)] = record["measurement"]["deferred"]
            assert (emu.most_uncommitted > 0) is prefer
    # None where the probe left the call out (its block all enqueue); False where a busy host delayed the
    # sizing block's synchronize and the probe ran; never True
    assert found[(True, "mm/32x32x32/float32")] is True
    others = {k: v for k, v in found.items() if k != (True, "mm/32x32x32/float32")}
    assert set(others.values()) <= {None, False}, others


def test_rule6_a_tiny_metal_gemm_still_keeps_the_device_busy_for_the_floor(monkeypatch):
    """A 2x2 Metal GEMM's host time is microseconds, which a loaded CI host's scheduling delays swamp: its
    emulated device work is at least DEVICE_MIN_S, so the synchronize after it waits that long; an MPSGraph
    call (no PYTORCH_MPS_PREFER_METAL) leaves the synchronize nothing to wait for."""
    waits = {}
    for prefer in (False, True):
        _prefer_metal(monkeypatch, prefer)
        with emulate(torch) as (device, emu):
            a = torch.ones(2, 2, device="mps")
            device.sync()
            torch.mm(a, a)
            started = time.perf_counter()
            device.sync()
            waits[prefer] = time.perf_counter() - started
    assert waits[True] >= DEVICE_MIN_S and waits[False] < DEVICE_MIN_S / 2, waits


# ------------------------------------------------------------------ device time from the profiler's gpu= (rule 5, 8)
#: the mps device-time probe's variables (harness.bench.kernels.MPS_DEVICE_ENV)
PROBE_ENV = {"PYTORCH_MPS_LOG_PROFILE_INFO": "385", "PYTORCH_MPS_TRACE_SIGNPOSTS": "4"}


def _probe_env(monkeypatch, env: dict, prefer_metal: bool = True) -> None:
    for name in ("PYTORCH_MPS_LOG_PROFILE_INFO", "PYTORCH_MPS_TRACE_SIGNPOSTS"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _prefer_metal(monkeypatch, prefer_metal)


def _groups_agree(record: dict, emu) -> bool:
    """Each group's device time per call is the emulated gpu= seconds of that group's lines (the last
    ``groups x calls`` lines: one operation per call of these cells) over its calls, to the log's 1 µs."""
    calls, values = record["device_calls"], record["device"]
    tail = emu.printed_gpu_s[-len(values) * calls :]
    want = [sum(tail[i * calls : (i + 1) * calls]) / calls for i in range(len(values))]
    return len(values) == DEVICE_REPLAYS and all(abs(v - w) <= 1e-6 for v, w in zip(values, want))


def test_the_device_probe_reads_each_operations_own_gpu_time_under_wait_until_completed(monkeypatch):
    """The device probe (harness.bench.worker.probe_device_cell) under PYTORCH_MPS_LOG_PROFILE_INFO=385 and
    PYTORCH_MPS_TRACE_SIGNPOSTS=4: every profiled operation is committed and waited for (its own command
    buffer), so each group's device time per call is its operations' emulated GPU time: a Metal GEMM's
    DEVICE_MIN_S floor (without the KRNL time: bit 256 prints it apart), an MPSGraph call's host time.
    Planted: a parser that counts each buffer's time twice, or reads the cpu= (KRNL) field, is caught."""
    from harness.bench import kernels
    from harness.bench.worker import probe_device_cell

    _probe_env(monkeypatch, PROBE_ENV)
    records = {}
    with emulate(torch) as (device, emu):
        for key in ("mm/16x16x16/float32", "sdpa/1x2x16x8/float32"):
            records[key] = probe_device_cell(torch, device, Cell.from_key(key), {}, {})
            assert records[key]["device_method"] == "mps-profiler-gpu-time" and records[key]["device_note"] == ""
            assert _groups_agree(records[key], emu), (key, records[key])
        assert emu.most_uncommitted <= 1  # every operation committed at once (WAIT_UNTIL_COMPLETED)
        metal = records["mm/16x16x16/float32"]["device"]
        assert min(metal) >= DEVICE_MIN_S - 1e-6  # a Metal GEMM's emulated device time: at least the floor
        real = kernels.parse_mps_gpu
        planted = {
            "twice": lambda lines: [2 * v for v in real(lines)],
            "cpu= field": lambda lines: [
                float(line.split("cpu=")[1].split(" ms")[0]) for line in lines if "cpu=" in line and "aten::" in line
            ],
        }
        for name, parser in planted.items():
            monkeypatch.setattr(kernels, "parse_mps_gpu", parser)
            bad = probe_device_cell(torch, device, Cell.from_key("mm/16x16x16/float32"), {}, {})
            assert bad["device"] and not _groups_agree(bad, emu), name
        monkeypatch.setattr(kernels, "parse_mps_gpu", real)


def test_without_wait_until_completed_each_op_reports_its_whole_buffer_and_the_probe_refuses(monkeypatch):
    """Without PYTORCH_MPS_TRACE_SIGNPOSTS=4 the Metal GEMMs of one command buffer each print the whole
    buffer's span (addProfilerCompletedHandler reads cb.GPUEndTime - cb.GPUStartTime): summed they over-count
    three times here. Without INCLUDE_KERNEL_TIME (256) gpu= has the scheduling time in it. The probe refuses
    both (no device time, the lacking bit named) rather than sum them."""
    from harness.bench.worker import probe_device_cell

    _probe_env(monkeypatch, {"PYTORCH_MPS_LOG_PROFILE_INFO": "385"})
    with emulate(torch) as (device, emu):
        a = torch.ones(4, 4, device="mps")
        device.sync()
        before = len(emu.printed_gpu_s)
        for _ in range(3):
            torch.mm(a, a)
        device.sync()
        batch = emu.printed_gpu_s[before:]
        assert len(batch) == 3 and len(set(batch)) == 1 and batch[0] >= 3 * DEVICE_MIN_S
        record = probe_device_cell(torch, device, Cell.from_key("mm/16x16x16/float32"), {}, {})
    assert record["device"] == [] and "PYTORCH_MPS_TRACE_SIGNPOSTS bit 4" in record["device_note"], record
    _probe_env(monkeypatch, {"PYTORCH_MPS_LOG_PROFILE_INFO": "129", "PYTORCH_MPS_TRACE_SIGNPOSTS": "4"})
    with emulate(torch) as (device, emu):
        a = torch.ones(4, 4, device="mps")
        torch.mm(a, a)
        assert emu.printed_gpu_s[-1] == pytest.approx(DEVICE_MIN_S + conformance.KRNL_S)
        record = probe_device_cell(torch, device, Cell.from_key("mm/16x16x16/float32"), {}, {})
    assert record["device"] == [] and "PYTORCH_MPS_LOG_PROFILE_INFO bit 256" in record["device_note"], record


def _timed(device) -> dict:
    return run_cell(torch, BlockTimer(device), device, Cell.from_key("mm/8x8x8/float32"), {"timing": TINY}, {})


def test_rule8_a_host_timed_process_with_the_profiler_log_on_is_refused(monkeypatch):
    """Rule 8: the profiler's log costs host time per call, so a host-timed block in a process that has it
    on (as the kernel probe's =1 or the device probe's =385 and signposts) is refused; with it off the same
    cell is timed. Planted: the rule switched off, the logged process times the cell without a word."""
    from harness.bench.conformance import Emulation

    original = BlockTimer.time_block
    for env in ({"PYTORCH_MPS_LOG_PROFILE_INFO": "1"}, PROBE_ENV, {"PYTORCH_MPS_TRACE_SIGNPOSTS": "4"}):
        _probe_env(monkeypatch, env, prefer_metal=False)
        with emulate(torch) as (device, _):
            record = _timed(device)
        assert record["status"] == "failed" and "host-timed block with PYTORCH_MPS_LOG" in record["reason"]
        assert BlockTimer.time_block is original  # restored when the emulation ends
    monkeypatch.setattr(Emulation, "refuse_host_timing", lambda self: None)
    with emulate(torch) as (device, _):
        planted = _timed(device)
    assert planted["status"] == "ok"
    monkeypatch.undo()
    _probe_env(monkeypatch, {}, prefer_metal=False)
    with emulate(torch) as (device, _):
        record = _timed(device)
    assert record["status"] == "ok" and record["measurement"]["device_note"].startswith("mps: device time is read")


def test_a_device_probe_worker_writes_one_device_record_per_cell_and_the_driver_reads_them(monkeypatch, tmp_path):
    """The worker's ``device_probe`` mode end to end (harness.bench.worker.main, in-process, under the
    conformance mode with the probe's variables): no cell is host-timed (rule 8 would refuse it), one
    ``device`` record per cell, an unsupported dtype's record says why it has none; the driver's reader
    (supervise.read_worker_records) keys them by cell, and run_worker stores them as the record's ``device``."""
    from harness import supervise
    from harness.bench import worker

    _probe_env(monkeypatch, PROBE_ENV)
    keys = ["mm/16x16x16/float32", "sdpa/1x2x16x8/float32", "mm/16x16x16/bfloat16"]
    # macOS 13.5: no bfloat16 on the device (rule 2), so the worker's own dtype probe leaves that cell out
    spec = {"device": "mps", "cells": keys, "device_probe": True, "emulate": {"macos": [13, 5]}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    assert worker.main([str(tmp_path / "spec.json"), str(tmp_path / "out.jsonl")]) == 0
    start, cells, ended, found = supervise.read_worker_records(tmp_path / "out.jsonl")
    assert ended and cells == {} and list(found) == keys, found
    for key in keys[:2]:
        assert len(found[key]["device"]) == DEVICE_REPLAYS and found[key]["device_method"] == "mps-profiler-gpu-time"
        assert found[key]["device_calls"] >= 1 and found[key]["device_note"] == ""
    assert (
        found[keys[2]]["device"] == [] and "not probed: TypeError: " + BFLOAT16_ERROR in found[keys[2]]["device_note"]
    )
    # the driver's run_worker: a real process of this interpreter with the probe's variables on top of the config
    record = supervise.run_worker(
        Path(sys.executable), spec, cfg.EnvConfig("vanilla"), tmp_path, "dev-r00-stock-vanilla", 120.0, extra=PROBE_ENV
    )
    assert record["status"] == "ok" and record["cells"] == {} and list(record["device"]) == keys, record
    assert len(record["device"][keys[0]]["device"]) == DEVICE_REPLAYS and "kernels" not in record
