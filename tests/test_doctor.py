"""`python -m harness doctor`: the two-minute self-test, on this machine's cpu (one subprocess
run of the real workers per env config) and refused in one line for a device it lacks."""

from __future__ import annotations

import dataclasses
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
        if a.judge is asm.judge_device:  # no device-time probe process on the cpu: skipped, with the reason
            assert "| skipped | not applicable: no device-time probe process on cpu" in line, line
            continue
        assert any(f"| {word}" in line for word in ("assumption held: ", "assumption held, noisy", "did not hold: "))
        assert line.endswith(f"[{a.source.replace('|', '/')}] |"), line
    assumed = json.loads((out / "doctor.json").read_text())["assumptions"]
    assert assumed["routes"] == {"default": "vectorised ATen", "no_vec": "ATen without vectors"}
    assert set(assumed["rows"]) == {a.name for a in ASSUMPTIONS} and assumed["recommend"]["duty"] in (1.0, 1 / 3)
    fresh = assumed["rows"][ASSUMPTIONS[4].name]["data"]
    assert len(fresh["times_s"]) == 4 and all(t > 0 for t in fresh["again_s"])  # four processes, each repeated
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
    noisy = [Row("a", "warning", "noisy"), Row("b", "ok", "x")]
    assert render(noisy, "h").endswith("1 ok or skipped, 1 warning(s), 0 failed.\n")
    assert len(cells()) == 18


# ------------------------------------------------------------------ assumption rows: each plants
# the failure it exists to catch, in-process; the numbers are what harness.bench.assumptions answers


def _measured(routes=None, fresh=(1e-3,) * 4, device="mps", timing=None, stall_s=180.0, again=()):
    from harness import assumptions as asm
    from harness.plan import TIMING

    routes = routes or {}
    labels = {c: asm.ROUTES[device][c] for c in asm.ROUTES[device]}
    m = asm.Measured(device, routes, list(fresh), labels, stall_s, timing or TIMING["full"]["gpu"])
    return dataclasses.replace(m, fresh_again=list(again) or [None] * len(fresh))


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


def test_a_short_synchronize_block_on_the_cpu_is_a_busy_host_and_on_mps_an_under_count():
    """This machine, busy: ATen without vectors 0.44x (the host-read blocks took the other processes' time). A
    cpu op ends within its call, so that is a warning; the same numbers on MPS fail the row."""
    from harness import assumptions as asm

    short, level = {"sync_s": 0.44, "read_s": 1.0}, {"sync_s": 0.99, "read_s": 1.0}
    cpu = asm.judge_sync(_measured({"default": {"sync": level}, "no_vec": {"sync": short}}, device="cpu"))
    assert cpu.held is True and cpu.noisy is True and "ATen without vectors 0.44x; noisy machine" in cpu.detail
    assert asm.row_text(asm.ASSUMPTIONS[0], cpu)[0] == "warning"
    mps = asm.judge_sync(_measured({"vanilla": {"sync": level}, "prefer_metal": {"sync": short}}))
    assert mps.held is False and asm.row_text(asm.ASSUMPTIONS[0], mps)[0] == "failed"
    edge = {"sync_s": asm.SYNC_RATIO, "read_s": 1.0}
    assert asm.judge_sync(_measured({"default": {"sync": edge}}, device="cpu")).noisy is False


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


def test_the_stall_row_says_the_stall_timeout_compare_sets_and_fails_only_past_the_most_it_allows():
    """This 2-core machine's slowest cell (float16 4096³ under ATen without vectors, 189 s a call scaled from a
    probe) is held: compare sets that cell's stall timeout from its estimate (the row says what it set); a cell
    whose estimate needs more than the most a stall timeout may be (a day) fails, just past that edge."""
    from harness import assumptions as asm
    from harness.plan import TIMING
    from harness.supervise import STALL_MARGIN, STALL_MAX_S

    assert asm.cell_calls(TIMING["full"]["gpu"]) == 49 and asm.cell_calls(TIMING["full"]["cpu"]) == 8
    cpu = TIMING["full"]["cpu"]

    def judge(call_s, first_s=None, extrapolated=True):
        fast = [{"key": "mm/4096x4096x4096/float32", "first_s": 1.5, "call_s": 1.5, "extrapolated": False}]
        slow = [
            {
                "key": "mm/4096x4096x4096/float16",
                "first_s": first_s or call_s,
                "call_s": call_s,
                "extrapolated": extrapolated,
            }
        ]
        return asm.judge_stall(
            _measured({"default": {"slowest": fast}, "no_vec": {"slowest": slow}}, device="cpu", timing=cpu)
        )

    here = judge(189.0)
    assert here.held is True and here.data["cell_s"] == pytest.approx(8 * 189.0)
    assert here.data["stall_timeout_s"] == pytest.approx(STALL_MARGIN * 8 * 189.0)
    assert here.detail.startswith(
        "slowest: mm/4096x4096x4096/float16 under ATen without vectors, 189 s a call (scaled by FLOP from a small "
        "probe), first call 189 s, about 1.51e+03 s a cell (8 calls); compare sets its stall timeout to 3024 s"
    ), here.detail
    assert "pass --stall-timeout" not in here.detail
    # the edge: an estimate of exactly STALL_MAX_S / STALL_MARGIN holds, a hair more does not
    edge = STALL_MAX_S / STALL_MARGIN / 8
    inside, outside = judge(edge), judge(edge * 1.0001)
    assert inside.held is True and inside.data["stall_timeout_s"] == pytest.approx(STALL_MAX_S)
    assert outside.held is False and outside.data["stall_timeout_s"] is None
    assert outside.detail.endswith(
        f"over the most a stall timeout may be ({STALL_MAX_S:g} s): leave the cell out (--cells / --dtypes)"
    ), outside.detail
    # a fast slowest cell: the floor (the --stall-timeout default) is what compare sets
    floor = judge(1.0, extrapolated=False)
    assert floor.held is True and floor.data["stall_timeout_s"] == 180.0 and "to 180 s" in floor.detail
    assert asm.to_json(_measured(), [(asm.ASSUMPTIONS[3], outside)])["recommend"]["stall_timeout_s"] is None
    for device, routes in asm.ROUTES.items():  # every route is an upstream config of the device, every cell parses
        assert set(routes) <= {c.name for c in PROFILES[device]} and Cell.from_key(asm.CELL[device])
    assert list(asm.candidates()) == [f"{c}/{dt}" for dt in DTYPES for c in ("mm/4096x4096x4096", "sdpa/2x16x1024x64")]


def test_a_bimodal_fresh_process_sample_is_caught():
    from harness import assumptions as asm

    v = asm.judge_fresh(_measured(fresh=(1.00e-3, 1.01e-3, 2.00e-3, 2.02e-3)))
    assert v.held is False and v.data["modes"] == 2
    assert "1, 1.01, 2, 2.02 ms (warmed repeats -, -, -, - ms); 2 mode(s)" in v.detail
    calm = asm.judge_fresh(_measured(fresh=(1.00e-3, 1.01e-3, 1.02e-3, 1.005e-3)))
    assert calm.held is True and calm.noisy is False
    short = asm.judge_fresh(_measured(fresh=(1e-3,)))
    assert short.held is None and "1 of 4 fresh processes answered" in short.detail


def test_one_process_at_a_level_is_a_noisy_machine_and_two_at_each_level_are_a_second_mode():
    """This machine's numbers: the first of 4 processes 1.1 ms, the others 0.41-0.45 ms. Its warmed repeat is
    back at the others' level: a cold process, a warning (exit 0) with the spread, not a kernel change. One
    process at a level cannot tell a second mode from a busy host, with a repeat that stays off (seen here: 0.43
    against 0.33 ms in two of five doctor runs) or with none: a warning naming it. Two processes at each level
    (a planted kernel choice) fail."""
    from harness import assumptions as asm

    fresh = (1.1e-3, 0.41e-3, 0.43e-3, 0.45e-3)
    cold = asm.judge_fresh(_measured(fresh=fresh, again=(0.42e-3, 0.41e-3, 0.44e-3, 0.43e-3), device="cpu"))
    assert cold.held is True and cold.noisy is True and cold.data["modes"] == 1 and cold.data["cold"] == [0]
    assert "noisy machine, spread 168 %" in cold.detail and "process 1 was cold (1.1 ms, again 0.42 ms)" in cold.detail
    status, text = asm.row_text(asm.ASSUMPTIONS[4], cold)
    assert status == "warning" and text.startswith("assumption held, noisy machine: mm/256x256x256/float32 under")
    kept = asm.judge_fresh(_measured(fresh=fresh, again=(1.08e-3, 0.41e-3, 0.44e-3, 0.43e-3), device="cpu"))
    assert kept.held is True and kept.noisy is True and kept.data["modes"] == 1, kept.detail
    assert "process 1 stayed at 1.08 ms" in kept.detail and "process 1 alone at its level" in kept.detail
    assert asm.row_text(asm.ASSUMPTIONS[4], kept)[0] == "warning"
    unknown = asm.judge_fresh(_measured(fresh=fresh))  # no repeat answered: one process at a level cannot tell
    assert unknown.held is True and unknown.noisy is True and "cannot tell" in unknown.detail
    # two processes at each level: two modes (planted kernel choice: each process keeps its level on a repeat),
    # also with no repeat to tell; two cold processes whose repeats both came back are a warning
    two = (1.1e-3, 0.41e-3, 0.43e-3, 1.12e-3)
    for again in ((1.09e-3, 0.41e-3, 0.43e-3, 1.1e-3), ()):
        planted = asm.judge_fresh(_measured(fresh=two, again=again))
        assert planted.held is False and planted.data["modes"] == 2, again
        assert asm.row_text(asm.ASSUMPTIONS[4], planted)[0] == "failed"
    # on cpu (one kernel per op) the same two levels are the host's per-process levels: a warning, not a failure
    host = asm.judge_fresh(_measured(fresh=two, again=(1.09e-3, 0.41e-3, 0.43e-3, 1.1e-3), device="cpu"))
    assert host.held is True and host.noisy is True and host.data["modes"] == 2
    assert "on cpu not a kernel choice" in host.detail and asm.row_text(asm.ASSUMPTIONS[4], host)[0] == "warning"
    both = asm.judge_fresh(_measured(fresh=two, again=(0.42e-3,) * 4))
    assert both.held is True and both.noisy is True and both.data["cold"] == [0, 3]
    half = asm.judge_fresh(_measured(fresh=two, again=(1.09e-3, 0.41e-3, 0.43e-3, 0.42e-3)))
    assert half.held is True and half.noisy is True and "process 1 stayed at 1.09 ms" in half.detail
    # this machine, busy: first times 1.7, 0.939, 1.37, 0.341 ms, warmed repeats (CPU seconds) 0.33-0.34 ms: one
    # level, three cold processes; a repeat off one way with a first time off the other way cannot tell
    busy = asm.judge_fresh(
        _measured(fresh=(1.7e-3, 0.939e-3, 1.37e-3, 0.341e-3), again=(0.34e-3, 0.33e-3, 0.339e-3, 0.331e-3))
    )
    assert busy.held is True and busy.noisy is True and busy.data["cold"] == [0, 1, 2], busy.detail
    assert "cannot tell" not in busy.detail
    odd = asm.judge_fresh(_measured(fresh=(1e-3, 1e-3, 1e-3, 0.5e-3), again=(1e-3, 1e-3, 1e-3, 1.5e-3)))
    assert odd.held is True and odd.noisy is True and "process 4 alone at its level: cannot tell" in odd.detail
    # the edge of a level: FRESH_SPREAD above the others' median is the same level, a little more is off it
    s = asm.FRESH_SPREAD
    same = asm.judge_fresh(_measured(fresh=(1e-3, 1e-3, 1e-3, 1e-3 * (1 + s) * 0.9999), again=(1e-3,) * 4))
    assert same.held is True and same.noisy is False
    off = asm.judge_fresh(_measured(fresh=(1e-3, 1e-3, 1e-3, 1e-3 * (1 + s) * 1.0001), again=(1e-3,) * 4))
    assert off.held is True and off.noisy is True and off.data["cold"] == [3]
    stays = asm.judge_fresh(
        _measured(fresh=(1e-3, 1e-3, 1e-3, 1.5e-3), again=(1e-3, 1e-3, 1e-3, 1e-3 * (1 + s) * 1.0001))
    )
    assert stays.held is True and stays.noisy is True and "process 4 alone at its level" in stays.detail
    back = asm.judge_fresh(
        _measured(fresh=(1e-3, 1e-3, 1e-3, 1.5e-3), again=(1e-3, 1e-3, 1e-3, 1e-3 * (1 + s) * 0.9999))
    )
    assert back.held is True and back.noisy is True


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


# ------------------------------------------------------------------ compare's stall timeout, set per cell


def test_the_stall_timeout_compare_sets_is_twice_the_estimate_from_the_largest_earlier_cell_of_its_kind():
    from harness.supervise import STALL_MAX_S, derived_stall

    done = {"mm/512x512x512/float16": 3.0, "mm/1024x1024x1024/float16": 24.0, "mm/2048x2048x2048/float32": 1.0}
    # 4096³ is 64x the FLOP of 1024³ (the largest finished float16 GEMM): 2 x 24 s x 64
    assert derived_stall("mm/4096x4096x4096/float16", done, 180.0) == pytest.approx(2 * 24.0 * 64)
    assert derived_stall("mm/512x512x512/float16", done, 180.0) == 180.0  # never below the floor
    assert derived_stall("sdpa/2x16x1024x64/float16", done, 180.0) == 180.0  # no SDPA cell before it: the floor
    assert derived_stall("mm/4096x4096x4096/bfloat16", done, 180.0) == 180.0  # nor one of its dtype
    assert derived_stall("mm/4096x4096x4096/float16", {"mm/8x8x8/float16": 1.0}, 180.0) == STALL_MAX_S  # a day at most
    assert derived_stall("not a cell", done, 180.0) == 180.0


def test_compare_without_a_stall_timeout_lets_a_slow_cell_finish_that_the_fixed_one_stops(tmp_path):
    """A fake worker: a small cell of 0.4 s, then one of 8x its FLOP that takes 1.6 s. A fixed 1 s stall timeout
    stops it in the big cell (the old behaviour, planted back with derive=False); the derived one (2 x 8 x 0.4 s)
    lets it finish, its process deadline moved by as much (a fixed 1.5 s one would have stopped it)."""
    import subprocess

    from harness.supervise import _wait

    out = tmp_path / "w.jsonl"
    script = (
        "import json, sys, time\n"
        "def say(r):\n"
        "    with open(sys.argv[1], 'a') as fh: fh.write(json.dumps(r) + '\\n')\n"
        "say({'type': 'start'})\n"
        "for key, secs in (('mm/64x64x64/float32', 0.4), ('mm/128x128x128/float32', 1.6)):\n"
        "    say({'type': 'step', 'key': key, 'step': 'inputs'})\n"
        "    time.sleep(secs)\n"
        "    say({'type': 'cell', 'key': key, 'status': 'ok'})\n"
    )

    def wait(derive):
        out.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", script, str(out)])
        try:
            return _wait(proc, out, 30.0 if not derive else 1.5, 1.0, derive=derive)
        finally:
            proc.kill()
            proc.wait(timeout=30)

    assert wait(False) == ("worker made no progress for 1 s", True)
    assert wait(True) == ("", False)


def test_a_warning_row_exits_0_and_a_failed_one_1(monkeypatch, tmp_path, capsys):
    from harness import doctor

    for rows, code in (([Row("a", "warning", "noisy machine")], 0), ([Row("a", "failed", "x")], 1)):
        monkeypatch.setattr(doctor, "run", lambda *a, rows=rows, **k: rows)
        assert cli.main(["doctor", "--device", "cpu", "--out", str(tmp_path / "d")]) == code
        assert "warning  noisy machine" in capsys.readouterr().out or code == 1


def test_compare_sets_the_stall_timeout_per_cell_only_when_none_is_given(tmp_path):
    from harness import plan as planning

    def plan(**kw):
        inputs = {"stock": f"python:{sys.executable}", "patched": f"python:{sys.executable}"}
        return planning.plan(planning.RunRequest(inputs=inputs, out=tmp_path / "o", cells=("mm/8x8x8/float32",), **kw))

    default = plan(device="cpu")
    assert default.stall_derived is True and default.stall == 180.0  # the floor of what it sets per cell
    given = plan(device="cpu", stall_timeout=100.0)
    assert given.stall_derived is False and given.stall == 100.0  # a user's number is used as given


def test_the_cpu_repeat_counts_this_processs_cpu_seconds_not_a_busy_hosts_wall_time():
    """A call that waits 2 ms without working (what other processes on a busy host add) costs no CPU seconds:
    the repeat is back at its level; timed by the wall clock (planted back) it reads 2 ms."""
    import time

    from harness.bench.assumptions import cpu_per_call

    def wait():
        time.sleep(2e-3)

    assert cpu_per_call(wait, lambda: None, 2, 3) < 0.5e-3
    assert cpu_per_call(wait, lambda: None, 2, 3, clock=time.perf_counter) >= 2e-3


# ------------------------------------------------------------------ row 7: device time from the MPS profiler
def _device_measured(ratios: dict, enqueue: float = 0.01, answers: dict | None = None, device: str = "mps"):
    """Both mps routes' row-1 blocks (1 ms a call, ``enqueue`` of it encoding; the Metal one deferred) and
    device-time answers at ``ratios`` (route label -> device / host)."""
    from harness import assumptions as asm

    routes = {
        "vanilla": {
            "cell": "mm/2048x2048x2048/float16",
            "sync": {"sync_s": 1e-3, "enqueue_s": enqueue * 1e-3, "deferred": False},
        },
        "prefer_metal": {"sync": {"sync_s": 1e-3, "enqueue_s": enqueue * 1e-3, "deferred": True}},
    }
    labels = asm.ROUTES["mps"]
    device_time = answers or {
        c: {"device": {"device_s": ratios[label] * 1e-3, "calls": 2, "method": "mps-profiler-gpu-time"}}
        for c, label in labels.items()
        if label in ratios
    }
    m = _measured(routes, device=device)
    return asm.Measured(m.device, routes, m.fresh, m.labels, m.stall_s, m.timing, [], device_time=device_time)


def test_device_time_that_disagrees_with_a_kernel_bound_blocks_host_time_fails_the_row():
    """Row 7 at its edges: within DEVICE_AGREE (10 %) of the host time per call on each kernel-bound route
    holds, just outside does not (a profiler line that carries its whole command buffer's time, twice the
    op's, is far outside); a launch-bound block is not judged (its host time is not the device's); a route
    whose probe gave no device time is named; cpu and cuda have no probe process (skipped)."""
    from harness import assumptions as asm

    for low, high, held in ((0.905, 1.095, True), (0.895, 1.0, False), (1.0, 1.105, False), (1.0, 2.0, False)):
        v = asm.judge_device(_device_measured({"MPSGraph": low, "Metal": high}))
        assert v.held is held and v.data["ratio"] == pytest.approx({"MPSGraph": low, "Metal": high}), (low, high)
    v = asm.judge_device(_device_measured({"MPSGraph": 1.0, "Metal": 1.0}))
    status, detail = asm.row_text(asm.ASSUMPTIONS[6], v)
    assert status == "ok" and detail.startswith(
        "assumption held: device time (mps-profiler-gpu-time) / host time per call of a kernel-bound block on "
        "mm/2048x2048x2048/float16: MPSGraph 1.000x, Metal 1.000x (agree within ±10%)"
    )
    # encode share 0.95: launch-bound on both routes (0.9 submitted as issued, 0.5 deferred): nothing judged
    v = asm.judge_device(_device_measured({"MPSGraph": 3.0, "Metal": 3.0}, enqueue=0.95))
    assert v.held is None and "MPSGraph: launch-bound block" in v.detail and "Metal: launch-bound block" in v.detail
    # 0.6: launch-bound only where deferred (0.5), so MPSGraph is judged and Metal is not
    v = asm.judge_device(_device_measured({"MPSGraph": 1.0, "Metal": 3.0}, enqueue=0.6))
    assert v.held is True and v.data["ratio"] == {"MPSGraph": 1.0} and "Metal: launch-bound block" in v.detail
    none = {"vanilla": {"device": {"error": "NoDeviceTime: 3 operation lines for 2 calls"}}, "prefer_metal": {}}
    v = asm.judge_device(_device_measured({}, answers=none))
    assert v.held is None and "MPSGraph: NoDeviceTime: 3 operation lines for 2 calls" in v.detail
    for device in ("cpu", "cuda"):
        assert asm.judge_device(_device_measured({}, device=device)).applies is False


def test_the_device_time_row_runs_under_the_conformance_mode_and_catches_a_misread_gpu_time(monkeypatch):
    """Row 7's mps path in CI: the Metal route's host-timed block (PYTORCH_MPS_PREFER_METAL, log off) and its
    device-time process (the probe's variables on: rule 8 would refuse a host-timed block there) run
    in-process under the conformance mode; the emulated GEMM's device time is the floor of its block, so the
    two agree. Planted: a probe that reads the cpu= (scheduling) field instead of gpu= is caught."""
    import torch

    from harness import assumptions as asm
    from harness.bench import assumptions as child
    from harness.bench import kernels
    from harness.bench.channel import Channel
    from harness.bench.conformance import emulate

    emulated = {"macos": [14, 0]}
    # the small cell: its emulated host call (~0.2 ms) stays far below the Metal GEMM's device floor
    # (DEVICE_MIN_S) on a loaded CI host, where the 64³ cell's enqueue reached 20 ms a call
    spec = {**asm.spec("mps", [], emulated), "cell": asm.EMULATED["small_cell"], "small_cell": None}
    monkeypatch.setenv("PYTORCH_MPS_PREFER_METAL", "1")
    with emulate(torch) as (prof, _):
        metal = child.measure(torch, prof, {**spec, "rows": ["sync"]}, Channel(None))

    def device_row():
        for k, v in kernels.MPS_DEVICE_ENV.items():
            monkeypatch.setenv(k, v)
        with emulate(torch) as (prof, _):
            answer = child.measure(torch, prof, {**spec, "rows": ["device"]}, Channel(None))
        for k in kernels.MPS_DEVICE_ENV:
            monkeypatch.delenv(k)
        m = _measured({"prefer_metal": metal})
        return asm.judge_device(
            asm.Measured(
                m.device, m.routes, m.fresh, m.labels, m.stall_s, m.timing, [], device_time={"prefer_metal": answer}
            )
        )

    honest = device_row()
    assert honest.held is True and set(honest.data["ratio"]) == {"Metal"}, honest.detail
    assert "MPSGraph: no answer" in honest.detail
    monkeypatch.setattr(
        kernels,
        "parse_mps_gpu",
        lambda lines: [float(x.split("cpu=")[1].split(" ms")[0]) for x in lines if "aten::" in x and "cpu=" in x],
    )
    misread = device_row()
    assert misread.held is False and misread.data["ratio"]["Metal"] < 0.1, misread.detail


def test_a_worker_that_failed_after_its_cells_is_a_failed_row_not_ok():
    """doctor read only the cells: a build whose interpreter exits non-zero after the worker finished was ok."""
    record = {
        "status": "failed",
        "reason": "worker exited with status 3 after its cells finished",
        "cells": {"mm/16x16x16/float32": {"status": "ok"}},
    }
    rows = config_row(PROFILES["cpu"][0], record, None)
    assert rows[0] == Row(
        "ops under default",
        "failed",
        "1 cells ok, but the worker failed: worker exited with status 3 after its cells finished",
    )
