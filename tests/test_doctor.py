"""`python -m harness doctor`: the two-minute self-test, on this machine's cpu (one subprocess
run of the real workers per env config) and refused in one line for a device it lacks."""

from __future__ import annotations

import json
import sys

import pytest

from harness import cli
from harness.bench import ops
from harness.bench.workloads import DTYPES, Cell
from harness.configs import PROFILES
from harness.doctor import Row, cells, config_row, render

#: a series' own workload module (docs/new-series.md, "Your own workload"): doctor runs its op too
LAYER_NORM = """
from harness.bench.ops import Op


def _call(x):
    import torch.nn.functional as F

    return lambda: F.layer_norm(x, x.shape[-1:])


def _reference(x):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / (((x - mean) ** 2).mean(-1, keepdim=True) + 1e-5).sqrt()


OPS = [
    Op("layer_norm", "norm", ("R", "N"), ("rows", "normalized length"), flop=lambda r, n: 5 * r * n,
       flop_source="mean, subtract, square, sum, scale: 5 per element", inputs=lambda r, n: [(r, n)],
       output=lambda r, n: (r, n), reduction=lambda r, n: n, call=_call, reference=_reference,
       probe_shape=(2, 16), example_shape=(64, 1024))
]
CELLS = [("layer_norm", (64, 1024))]
"""


@pytest.fixture(scope="module")
def doctor_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("doctor")
    series = tmp_path_factory.mktemp("patches") / "norm-series"
    (series / "v1").mkdir(parents=True)
    (series / "v1" / "0001-x.patch").write_text("From 0\n")
    (series / "workload.py").write_text(LAYER_NORM)
    (series / "series.toml").write_text(
        'name = "norm-series"\ntitle = "t"\nupstream = "https://example.invalid/u.git"\n'
        '[evidence]\nworkload = "workload.py"\n[[base]]\nref = "v1"\ndir = "v1"\npatches = ["0001-x.patch"]\n'
    )
    before = dict(ops.REGISTRY)
    args = ["doctor", "--device", "cpu", "--build", f"python:{sys.executable}", "--out", str(out), "--series"]
    try:
        code = cli.main([*args, str(series)])
    finally:  # the series' op leaves the registry as it found it
        ops.REGISTRY.clear()
        ops.REGISTRY.update(before)
    return code, out


def test_doctor_on_cpu_runs_every_op_under_every_config_and_writes_doctor_md(doctor_run, capsys):
    code, out = doctor_run
    text = (out / "doctor.md").read_text()
    assert "| device health | ok |" in text
    for config in ("default", "no_vec"):
        assert f"| ops under {config} | ok | 21 cells ok, 0 skipped" in text  # 6 ops and the series' layer_norm
        assert f"| timer under {config} | ok | block " in text
    assert "| toolchain: compiler |" in text and "| toolchain: disk |" in text
    from harness import assumptions as asm
    from harness.assumptions import ASSUMPTIONS

    for a in ASSUMPTIONS:  # every assumption row measured on this cpu, with its verdict and its source
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {a.name} |"))
        if a.judge is asm.judge_duty:  # the cpu is never rested: skipped, with the reason
            assert "| skipped | not applicable: the cpu is timed back to back" in line, line
            continue
        assert "| assumption held: " in line or "| did not hold: " in line, line
        assert line.endswith(f"[{a.source.replace('|', '/')}] |"), line
    assumed = json.loads((out / "doctor.json").read_text())["assumptions"]
    assert assumed["routes"] == {"default": "vectorised ATen", "no_vec": "ATen without vectors"}
    assert set(assumed["rows"]) == {a.name for a in ASSUMPTIONS} and assumed["recommend"]["duty"] in (1.0, 1 / 3)
    assert len(assumed["rows"][ASSUMPTIONS[4].name]["data"]["times_s"]) == 4  # four fresh processes
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


# ------------------------------------------------------------------ assumption rows (issue 28): each plants
# the failure it exists to catch, in-process; the numbers are what harness.bench.assumptions answers


def _measured(routes=None, fresh=(1e-3,) * 4, device="mps", timing=None, stall_s=180.0):
    from harness import assumptions as asm
    from harness.plan import TIMING

    routes = routes or {}
    labels = {c: asm.ROUTES[device][c] for c in asm.ROUTES[device]}
    return asm.Measured(device, routes, list(fresh), labels, stall_s, timing or TIMING["full"]["gpu"])


class _LazyDevice:
    """A device whose calls queue work (``cost`` seconds of real sleep each) that runs when it is waited for:
    at a synchronize when ``sync_waits``, and always at a host read."""

    def __init__(self, sync_waits: bool, cost: float = 1e-3) -> None:
        self.pending, self.sync_waits, self.cost = [], sync_waits, cost
        self.name, self.clock = "mps", "synchronize+perf_counter"

    def call(self):
        self.pending.append(self.cost)
        return self

    def wait(self, *_):
        import time

        time.sleep(sum(self.pending))
        self.pending.clear()

    def sync(self):
        if self.sync_waits:
            self.wait()


def test_a_synchronize_that_does_not_wait_is_caught_and_one_that_does_holds():
    from harness import assumptions as asm
    from harness.bench import assumptions as child
    from harness.bench.timer import BlockTimer

    # 5 ms of sleep per call, 20 ms a block, the fastest of 3: a sleep the loaded CI host wakes late from
    # stays inside the 0.9 ratio (at 1 ms calls and 2 blocks, a read block 0.46 ms late read 0.90x once in a CI run)
    for waits, held in ((False, False), (True, True)):
        dev = _LazyDevice(waits, cost=5e-3)
        got = child.sync_and_encode(BlockTimer(dev), dev.call, dev.wait, number=4, blocks=3)
        assert got["read_s"] >= 5e-3 and got["number"] == 4
        verdict = asm.judge_sync(_measured({"vanilla": {"sync": got}, "prefer_metal": {"sync": got}}))
        assert verdict.held is held, (got, verdict)
    status, detail = asm.row_text(asm.ASSUMPTIONS[0], verdict)
    assert status == "ok" and detail.startswith("assumption held: synchronize-only block / host-read block: MPSGraph")
    assert "MPSStream.mm @ fba75098" in detail


def test_a_route_whose_host_encoding_adds_to_its_blocks_is_named_next_to_the_contrast():
    """Row 2 takes each route's deferral from the timer's probe (the answer's ``deferred``), never from a
    table: the same numbers with the Metal route measured as submitted as issued carry no bias."""
    from harness import assumptions as asm

    def sync(share, small_share, deferred):
        small = {"cell": "mm/1x1024x1024/float16", "block_s": 1e-4, "enqueue_s": small_share * 1e-4}
        return {"sync_s": 1e-3, "read_s": 1e-3, "enqueue_s": share * 1e-3, "number": 8, "deferred": deferred} | {
            "small": {**small, "deferred": deferred}
        }

    m = _measured({"vanilla": {"sync": sync(0.05, 0.2, False)}, "prefer_metal": {"sync": sync(0.3, 0.6, True)}})
    v = asm.judge_encode(m)
    # the small cell carries the larger share: the bias ranges over the big cell's 30 % and the small one's 60 %
    assert v.held is False and v.data["bias"] == pytest.approx(0.6)
    assert v.data["bias_range"] == pytest.approx([0.3, 0.6]) and v.data["deferred"] == {
        "MPSGraph": False,
        "Metal": True,
    }
    assert (
        "on mm/2048x2048x2048/float16 / mm/1x1024x1024/float16: MPSGraph 5% / 20% (submitted as issued), "
        "Metal 30% / 60% (deferred until the synchronize) (measured); bias on a `faster` contrast between routes "
        "(encode share of the deferred routes) 30%-60%" in v.detail
    )
    note = asm.encode_bias_note({"assumptions": asm.to_json(m, [(asm.ASSUMPTIONS[1], v)])})
    assert (
        note
        == "host encoding biases this contrast by 30%-60% (doctor: host-encode share MPSGraph 5%, Metal 30% deferred)"
    )
    # planted: the same numbers, the Metal route's probe found its work submitted as issued: no bias
    issued = asm.judge_encode(
        _measured({"vanilla": {"sync": sync(0.05, 0.2, False)}, "prefer_metal": {"sync": sync(0.3, 0.6, False)}})
    )
    assert issued.held is True and issued.data["bias"] == 0.0
    # both routes deferred with the same share: the contrast between them is not biased
    same = asm.judge_encode(
        _measured({"vanilla": {"sync": sync(0.3, 0.6, True)}, "prefer_metal": {"sync": sync(0.3, 0.6, True)}})
    )
    assert same.held is True and same.data["bias"] == 0.0
    assert asm.encode_bias_note({"assumptions": {"encode_bias": 0.0}}) is None
    # a route the probe left out (deferred None: its sized block launch-bound, too little device work left to
    # tell, so its encode share is 90 % or more) is shown as not measured and taken both ways: 0 % if submitted
    # as issued, 95 %-99 % if deferred. Planted: read as False (as before), the row held at 0 % and said
    # "submitted as issued".
    unprobed = asm.judge_encode(
        _measured({"vanilla": {"sync": sync(0.05, 0.2, False)}, "prefer_metal": {"sync": sync(0.95, 0.99, None)}})
    )
    assert unprobed.held is False and unprobed.data["bias_range"] == pytest.approx([0.0, 0.99])
    assert "Metal 95% / 99% (deferral not measured)" in unprobed.detail
    assert "0.0%-99%, taking Metal as deferred or not" in unprobed.detail
    assert "Metal 95% / 99% (submitted as issued)" not in unprobed.detail
    note = asm.encode_bias_note({"assumptions": asm.to_json(m, [(asm.ASSUMPTIONS[1], unprobed)])})
    assert note == (
        "host encoding biases this contrast by 0.0%-99% (doctor: host-encode share MPSGraph 5%, Metal 95% deferral "
        "not measured)"
    )
    # an answer without the probe on either route, one share: biased only if exactly one is deferred
    old = {"sync_s": 1e-3, "read_s": 1e-3, "enqueue_s": 3e-4, "number": 8}
    v = asm.judge_encode(_measured({"vanilla": {"sync": old}, "prefer_metal": {"sync": old}}))
    assert "Metal 30% (deferral not measured)" in v.detail and v.data["bias_range"] == pytest.approx([0.0, 0.3])
    assert v.held is False
    # CUDA's probe finds launches submitted as issued: the H200's 8 % / 14 % encode shares overlap a busy device
    cuda = asm.judge_encode(
        _measured(
            {"default": {"sync": sync(0.08, 0.5, False)}, "cublaslt": {"sync": sync(0.14, 0.6, False)}}, device="cuda"
        )
    )
    assert cuda.held is True and cuda.data["bias"] == 0.0 and "cuBLAS 8% / 50% (submitted as issued)" in cuda.detail


def test_the_smallest_default_gemm_cell_is_the_small_cell_row_2_times():
    from harness import assumptions as asm

    assert asm.small_cell("mps") == asm.small_cell("cuda") == "mm/1x1024x1024/float16"
    assert asm.small_cell("cpu") == "mm/1x1024x1024/float32"
    assert asm.spec("mps", ["sync"], None)["small_cell"] == "mm/1x1024x1024/float16"
    assert asm.spec("mps", ["sync"], {"macos": [14, 0]})["small_cell"] == asm.EMULATED["small_cell"]


class _Clock:
    """A fake device clock: each call costs 1 ms, 2 ms for the first 8 calls after a rest (idle clock-down)."""

    def __init__(self, clocks_down: bool) -> None:
        self.ns, self.cold, self.clocks_down = 0, 0, clocks_down
        self.name, self.clock, self.sync = "mps", "synchronize+perf_counter", lambda: None

    def call(self):
        self.ns += 2_000_000 if self.cold else 1_000_000
        self.cold = max(0, self.cold - 1)

    def rest(self, seconds):
        self.ns += int(seconds * 1e9)
        self.cold = 8 if self.clocks_down else 0


def test_a_device_that_clocks_down_while_it_rests_gets_duty_1_and_one_that_does_not_keeps_1_3():
    from harness import assumptions as asm
    from harness.bench import assumptions as child
    from harness.bench.timer import BlockTimer

    for down, duty in ((True, 1.0), (False, 1 / 3)):
        dev = _Clock(down)
        pair = child.duty_pair(BlockTimer(dev, clock=lambda d=dev: d.ns, sleep=dev.rest), dev.call, 4e-3, 0.02)
        v = asm.judge_duty(_measured({"vanilla": {"duty": pair}}))
        assert v.data["duty"] == duty and v.held is (not down), (pair, v)
    assert "duty for this device: 1/3" in v.detail
    # the cpu is never rested (duty 1): the row is skipped there, never failed
    cpu = asm.judge_duty(_measured({"default": {"duty": pair}}, device="cpu"))
    assert cpu.applies is False and asm.row_text(asm.ASSUMPTIONS[2], cpu)[0] == "skipped"


def test_a_slowest_cell_past_half_the_stall_timeout_says_which_cell_route_and_timeout():
    from harness import assumptions as asm
    from harness.plan import TIMING

    assert asm.cell_calls(TIMING["full"]["gpu"]) == 49 and asm.cell_calls(TIMING["full"]["cpu"]) == 8
    slow = [{"key": "mm/4096x4096x4096/float32", "first_s": 5.0, "call_s": 2.0, "extrapolated": False}]
    fast = [{"key": "mm/4096x4096x4096/float16", "first_s": 0.1, "call_s": 0.05, "extrapolated": False}]
    v = asm.judge_stall(_measured({"vanilla": {"slowest": fast}, "prefer_metal": {"slowest": slow}}))
    assert v.held is False and v.data["cell_s"] == pytest.approx(5 + 48 * 2.0)
    assert v.detail.startswith("slowest: mm/4096x4096x4096/float32 under Metal, 2 s a call (measured)")
    assert v.detail.endswith("pass --stall-timeout 210 (or leave the cell out: --cells / --dtypes)")
    ok = asm.judge_stall(_measured({"vanilla": {"slowest": fast}}))
    assert ok.held is True and "stall-timeout" not in ok.detail.split("stall timeout 180 s")[1]
    for device, routes in asm.ROUTES.items():  # every route is an upstream config of the device, every cell parses
        assert set(routes) <= {c.name for c in PROFILES[device]} and Cell.from_key(asm.CELL[device])
    assert list(asm.candidates()) == [f"{c}/{dt}" for dt in DTYPES for c in ("mm/4096x4096x4096", "sdpa/2x16x1024x64")]


def test_a_bimodal_fresh_process_sample_is_caught():
    from harness import assumptions as asm

    v = asm.judge_fresh(_measured(fresh=(1.00e-3, 1.01e-3, 2.00e-3, 2.02e-3)))
    assert v.held is False and v.data["modes"] == 2 and "1, 1.01, 2, 2.02 ms; 2 mode(s)" in v.detail
    assert asm.judge_fresh(_measured(fresh=(1.00e-3, 1.01e-3, 1.02e-3, 1.005e-3))).held is True
    # one process 3x the others is one "mode" to stats.modes with 4 values, but not one level (hostile review)
    outlier = asm.judge_fresh(_measured(fresh=(0.35e-3, 1.18e-3, 0.36e-3, 0.41e-3)))
    assert outlier.held is False and "slowest 237% above the fastest" in outlier.detail
    short = asm.judge_fresh(_measured(fresh=(1e-3,)))
    assert short.held is None and "1 of 4 fresh processes answered" in short.detail


def test_an_error_over_its_bound_or_a_cell_that_did_not_run_fails_the_accuracy_row():
    from harness import assumptions as asm

    good = {"mm/256x256x256/float16": {"rel_error": 2e-4, "bound": 1e-3, "default_bound": None}}
    bad = {"sdpa/1x8x256x64/float16": {"rel_error": 3e-3, "bound": 1e-3, "default_bound": None}}
    v = asm.judge_accuracy(_measured({"vanilla": {"accuracy": good}, "prefer_metal": {"accuracy": bad}}))
    assert v.held is False and v.detail == "worst error / bound: MPSGraph: GEMM 20%; Metal: SDPA 300%"
    missing = {"mm/256x256x256/bfloat16": {"error": "TypeError: MPS BFloat16 is only supported on MacOS 14 or newer"}}
    v = asm.judge_accuracy(_measured({"vanilla": {"accuracy": {**good, **missing}}}))
    assert v.held is False and v.detail.endswith(
        "MPSGraph mm/256x256x256/bfloat16: TypeError: MPS BFloat16 is only supported on MacOS 14 or newer"
    )
    assert asm.judge_accuracy(_measured({"vanilla": {"accuracy": good}})).held is True
    failed = asm.judge_accuracy(
        _measured(
            {"vanilla": {"error": "doctor assumptions under vanilla: importing torch took longer than 1 s (stopped)"}}
        )
    )
    assert failed.held is None and "importing torch took longer than 1 s" in failed.detail


def test_nox_doctor_for_mps_off_macos_stops_in_one_line_before_installing(monkeypatch):
    """`nox -s doctor -- --device mps` on Linux installed the harness and torch, probed, then failed: now the
    session stops at once with one line saying why and what to do."""
    from conftest import noxfile as load_noxfile

    noxfile = load_noxfile()

    class Stop(Exception):
        pass

    class Session:
        def __init__(self, posargs):
            self.posargs, self.installed = posargs, []

        def install(self, *args):
            self.installed.append(args)

        def error(self, message):
            raise Stop(message)

    monkeypatch.setattr(noxfile.sys, "platform", "linux")
    for args in (["--device", "mps"], ["--out", "x", "--device=mps"]):
        session = Session(args)
        with pytest.raises(Stop) as info:
            noxfile.doctor.func(session)  # nox.session wraps the function in a Func
        assert session.installed == [] and "\n" not in str(info.value)
        assert str(info.value) == (
            "MPS is not available on this host (linux): it needs an Apple-silicon Mac with macOS; run this on the "
            "Mac, or test this host with --device cpu (or cuda)"
        )
    assert noxfile._option(["--device", "cpu"], "--device") == "cpu" and noxfile._option([], "--device") is None


def test_the_duty_doctor_picks_reaches_the_plan_through_compare_duty(tmp_path):
    from harness import plan as planning
    from harness.errors import UsageError

    def plan(**kw):
        inputs = {"stock": f"python:{sys.executable}", "patched": f"python:{sys.executable}"}
        return planning.plan(planning.RunRequest(inputs=inputs, out=tmp_path / "o", cells=("mm/8x8x8/float32",), **kw))

    assert plan(device="cuda").timing["duty"] == pytest.approx(1 / 3)  # the H200's default
    assert plan(device="cuda", duty=1.0).timing["duty"] == 1.0 and planning.TIMING["full"]["gpu"]["duty"] < 1
    assert "duty" not in plan(device="cpu", duty=1.0).timing  # cpu timing never rests
    with pytest.raises(UsageError, match="--duty 0.0: out of range"):
        plan(device="cuda", duty=0.0)
