"""The precision-driven schedule (harness.runner): which cells get more processes, in-process."""

from __future__ import annotations

import numpy as np
import pytest
from documents import process, record, run_of

from harness import report
from harness import undetermined as und
from harness.plan import TIMING
from harness.policy import POLICY, CellClass, classify
from harness.results import startup_seconds
from harness.runner import (
    MAX_CELL_MEASURE_S,
    adaptive_measure_seconds,
    below_floor,
    cell_costs,
    next_adaptive_cells,
    round_seconds,
    unconverged_cells,
)


def _measured(seconds: float, launch_bound: bool) -> dict:
    """A raw measurement of one block: its median and launch-bound label follow from samples and enqueue
    times (the stored ``median`` / ``launch_bound`` keys are never read back)."""
    return {
        "samples": [seconds],
        "enqueue": [seconds if launch_bound else 0.0],
        "number": 1,
        "method": "synchronize+perf_counter",
        "median": -1.0,
        "launch_bound": not launch_bound,
    }


def _data(spread: dict[str, float], launch: dict[str, bool], n: int = 6):
    """Synthetic results: per cell, n processes per build with medians 1e-3 s × lognormal(spread)."""
    rng = np.random.default_rng(1)
    processes = []
    for rnd in range(n):
        for build in ("stock", "patched"):
            cells = {
                key: {"status": "ok", "measurement": _measured(float(1e-3 * np.exp(rng.normal(0, sd))), launch[key])}
                for key, sd in spread.items()
            }
            processes.append({"config": "default", "build": build, "round": rnd, "cells": cells})
    return run_of(
        {
            "run": {"cells": list(spread), "configs": ["default"], "builds": ["stock", "patched"]},
            "processes": processes,
        }
    )


def test_launch_bound_cells_are_held_to_their_own_lower_target():
    spread = {"mm/8x8x8/float32": 0.001, "mm/1x1024x1024/float16": 0.02, "mm/512x512x512/float16": 0.02}
    launch = {"mm/8x8x8/float32": False, "mm/1x1024x1024/float16": True, "mm/512x512x512/float16": False}
    data = _data(spread, launch)
    # one target for all: both 2 %-noise cells are still wide at 6 processes per side
    assert unconverged_cells(data, 0.01) == {"default": ["mm/1x1024x1024/float16", "mm/512x512x512/float16"]}
    # launch-bound cells aim at ±10 %: only the kernel-bound noisy cell needs more processes
    assert unconverged_cells(data, 0.01, 0.10) == {"default": ["mm/512x512x512/float16"]}


def test_a_cell_is_launch_bound_when_more_than_a_third_of_its_processes_say_so():
    rec = lambda lb: record({"measurement": _measured(1e-3, lb)})  # noqa: E731
    assert classify([rec(True), rec(True), rec(False)]) == CellClass.LAUNCH_BOUND
    assert classify([rec(True), rec(False)]) == CellClass.LAUNCH_BOUND  # a half: the host set its time often
    assert classify([rec(True), rec(False), rec(False)]) == CellClass.KERNEL_BOUND  # a third, not more
    assert classify([record({"status": "failed"})]) == CellClass.KERNEL_BOUND


def _enqueued(block_us: float, enqueue_us: float):
    return record({"measurement": {**_measured(block_us * 1e-6, False), "enqueue": [enqueue_us * 1e-6]}})


def test_launch_bound_means_the_device_waited_for_the_host_not_a_long_enqueue():
    """H200 A/A at dbd943c: mm 2048³ fp16 took 24.8 µs per call with 13-20 µs of host enqueue (0.54-0.79 of
    the block); the host then waited at the synchronize for the device's backlog: a busy device (694
    TFLOP/s), kernel-bound. The old rule (enqueue >= 0.5 x block) called it launch-bound."""
    busy = [_enqueued(24.8, e) for e in (13.4, 15.6, 19.6, 16.0)]
    assert classify(busy) == CellClass.KERNEL_BOUND
    # mm 1024³ fp16: 17.4 µs per call and 17.3 µs to enqueue it: the device sat idle between calls
    idle = [_enqueued(17.4, e) for e in (17.3, 17.2, 17.4, 17.1)]
    assert classify(idle) == CellClass.LAUNCH_BOUND


def test_launch_bound_cells_below_their_floor_ride_along_only_where_the_floor_can_decide_them():
    """At 2 % spread a launch-bound cell's CI at 6 processes (±2.3 %) fits the ±5 % band: it rides along with
    the kernel-bound rounds. At 20 % (the H200 A/A's launch-bound cells: 15-18 %) it would stay at ±26 %:
    it waits until the kernel-bound cells converged, and the report says why it is below its floor."""
    kernel, quiet, noisy = "mm/4096x4096x4096/float16", "mm/1x1024x1024/float16", "mm/512x512x512/float16"
    spread = {kernel: 0.03, quiet: 0.02, noisy: 0.2}
    data = _data(spread, {kernel: False, quiet: True, noisy: True}, n=4)  # 4 processes: below the floor of 6
    assert und.predicted_half_width(0.02, 6) < 0.05 < und.predicted_half_width(0.2, 6)
    assert next_adaptive_cells(data, 0.01, 0.05) == {"default": [kernel, quiet]}
    assert below_floor(data) == {"default": [quiet, noisy]}
    assert below_floor(data, reachable=False) == {"default": [noisy]}
    # once the kernel-bound cell converged, every unconverged launch-bound cell gets the rounds
    settled = _data({**spread, kernel: 0.0001}, {kernel: False, quiet: True, noisy: True}, n=4)
    assert next_adaptive_cells(settled, 0.01, 0.05) == {"default": [quiet, noisy]}
    line = " ".join(report.launch_bound_line(data, report.analyse(data)))
    assert "; 1 could not reach a verdict at the floor anyway (their spread between processes, sd 9%, " in line
    assert "leaves the CI wider than ±5% at 6 processes; adaptive rounds measure such cells only once the " in line
    assert (
        "1 did not reach it (its adaptive rounds ended first" in line and "`default` mm M1 N1024 K1024 float16" in line
    )


def test_startup_is_the_time_to_the_workers_start_record():
    assert startup_seconds({"started": 100.0, "worker_started": 104.5}) == 4.5
    assert startup_seconds({"started": 100.0, "worker_started": None}) is None


def test_processes_measure_briefly_and_rely_on_more_processes():
    # a GPU block must stay long enough that one synchronize (at most 12 µs on an H200, docs/timing.md)
    # is at most 0.25 % of it
    assert TIMING["full"]["gpu"]["measure_s"] <= 0.2 and 12e-6 / TIMING["full"]["gpu"]["min_block_s"] <= 0.0025
    assert TIMING["quick"]["cpu"]["measure_s"] <= 0.1


def test_adaptive_rounds_measure_kernel_bound_cells_first():
    spread = {"mm/4096x4096x4096/float16": 0.03, "mm/1x1024x1024/float16": 0.2}
    launch = {"mm/4096x4096x4096/float16": False, "mm/1x1024x1024/float16": True}
    data = _data(spread, launch)
    assert next_adaptive_cells(data, 0.01, 0.05) == {"default": ["mm/4096x4096x4096/float16"]}
    quiet = _data({**spread, "mm/4096x4096x4096/float16": 0.0001}, launch)
    # once the kernel-bound cell is there, the launch-bound one gets the rounds
    assert next_adaptive_cells(quiet, 0.01, 0.05) == {"default": ["mm/1x1024x1024/float16"]}


def test_launch_bound_cells_are_judged_against_a_wider_band_and_a_higher_floor():
    """The H200 A/A case: four 'patched' processes all below four noisier 'stock' ones, a launch-bound
    cell. At ±2 % that is a false 'faster' (p = 2/70); at the launch-bound band it is not claimed."""
    from harness import stats

    stock, patched = [12.8e-6, 12.8e-6, 18.6e-6, 13.1e-6], [11.8e-6, 12.5e-6, 11.6e-6, 11.6e-6]
    launch, kernel = POLICY.rule(CellClass.LAUNCH_BOUND), POLICY.rule(CellClass.KERNEL_BOUND)
    assert (launch.band, launch.floor) == (0.05, stats.MIN_PROCESSES_LAUNCH_BOUND)
    assert (kernel.band, kernel.floor) == (0.02, stats.MIN_PROCESSES)
    assert POLICY.judge(stock, patched, CellClass.KERNEL_BOUND).verdict == "faster"
    assert POLICY.judge(stock, patched, CellClass.LAUNCH_BOUND).verdict == "undetermined"
    # the second H200 A/A case: host latency in two levels per process (mm 1x1024x1024 fp32, cublaslt),
    # 4 + 4 processes split by side: 32 % "slower" beyond even the ±5 % band, but below the launch-bound floor
    stock, patched = [11.76e-6, 12.26e-6, 11.64e-6, 11.99e-6], [17.93e-6, 18.16e-6, 17.16e-6, 17.01e-6]
    assert stats.compare(stock, patched, threshold=launch.band).verdict == "slower"
    cmp = POLICY.judge(stock, patched, CellClass.LAUNCH_BOUND)
    assert (cmp.verdict, cmp.cause, cmp.floor) == ("undetermined", stats.Cause.BELOW_FLOOR, 6)
    # at 6 + 6 a clean split is still a verdict (it is then a 0.05 % event under two 50/50 levels)
    cmp6 = POLICY.judge([*stock, 11.8e-6, 12.0e-6], [*patched, 17.5e-6, 17.8e-6], CellClass.LAUNCH_BOUND)
    assert cmp6.verdict == "slower"


def test_a_round_is_estimated_from_the_processes_so_far():
    timed = {"status": "ok", "measurement": {"samples": [0.01] * 10, "number": 2}}  # 0.2 s of timed blocks
    done = [
        process(p)
        for p in (
            {"started": 0.0, "worker_started": 3.0, "finished": 13.0, "cells": {str(i): {} for i in range(10)}},
            {"started": 20.0, "worker_started": 23.0, "finished": 43.0, "cells": {str(i): {} for i in range(20)}},
            {"started": 50.0, "worker_started": 54.0, "finished": 66.0, "cells": {str(i): timed for i in range(10)}},
        )
    ]
    # start-up 3 s (median of 3, 3, 4); per cell 1 s besides its timed blocks (10/10, 20/20, (12 - 2)/10)
    assert cell_costs(done) == (3.0, 1.0)
    # two processes of 5 cells, with no timed blocks / with 0.5 s of them per cell
    assert round_seconds(done, [[0.0] * 5, [0.0] * 5]) == 16.0
    assert round_seconds(done, [[0.5] * 5, [0.5] * 5]) == 21.0
    assert round_seconds([], [[0.1] * 5]) == 0.0


def _records(rng, n: int, between: float, within: float, blocks: int = 10, block_s: float = 0.01) -> list[dict]:
    """n processes of one build: process log-median ~ N(0, between), blocks ~ N(that, within)."""
    out = []
    for _ in range(n):
        centre = rng.normal(0, between)
        samples = np.exp(centre + rng.normal(0, within, blocks)) * 1e-4
        out.append({"status": "ok", "measurement": {"samples": samples.tolist(), "number": int(block_s / 1e-4)}})
    return out


def _typed(per_build: dict[str, list[dict]]) -> dict:
    """build -> the records as :class:`harness.document.CellRecord` values, one round each."""
    return {b: [record({**r, "round": i}) for i, r in enumerate(records)] for b, records in per_build.items()}


def test_cells_noisy_inside_a_process_get_longer_measurement_and_cells_noisy_between_processes_do_not():
    """Two-stage sampling (Cochran §10.6): T* = (σ_w/σ_b)·√fixed. An H200 GEMM 4096³ has blocks 2-7 %
    apart inside a process and process medians ~0.3 % apart: measure it longer. An SDPA whose processes
    differ 1.3 % and blocks 0.1 %: more processes, not longer ones (the base time)."""
    rng = np.random.default_rng(3)
    base = TIMING["full"]["gpu"]["measure_s"]
    noisy_inside = {b: _records(rng, 6, between=0.003, within=0.05) for b in ("stock", "patched")}
    noisy_between = {b: _records(rng, 6, between=0.013, within=0.001) for b in ("stock", "patched")}
    long = adaptive_measure_seconds(_typed(noisy_inside), base, fixed_s=0.5)
    assert long == MAX_CELL_MEASURE_S  # σ_w ≈ 5 %·√0.1 s per √s, σ_b ≈ 0.3 %: T* ≈ 3.7 s, capped
    assert adaptive_measure_seconds(_typed(noisy_between), base, fixed_s=0.5) == base
    # a cheaper process (less start-up to share) makes long measurement less worth it
    assert base < adaptive_measure_seconds(_typed(noisy_inside), base, fixed_s=0.01) < long
    # too few processes to tell the two spreads apart: the base time
    assert adaptive_measure_seconds(_typed({b: r[:1] for b, r in noisy_inside.items()}), base, fixed_s=0.5) == base


def test_layout_to_layout_spread_is_not_taken_for_block_noise():
    """With several layouts per process, σ_w comes from the first layout's blocks: placements that
    differ (a spread between layouts) must not read as noise inside a layout, which would buy longer
    measurement where it does not help."""
    rng = np.random.default_rng(5)
    base = TIMING["full"]["gpu"]["measure_s"]
    per_build = {b: _records(rng, 6, between=0.013, within=0.001) for b in ("stock", "patched")}
    for records in per_build.values():
        for r in records:
            m = r["measurement"]
            m["layouts"] = [0, len(m["samples"])]
            m["samples"] += [v * 1.05 for v in m["samples"][:5]]  # a second layout 5 % slower
    assert adaptive_measure_seconds(_typed(per_build), base, fixed_s=0.5) == base


def test_further_layouts_count_as_overhead_not_as_measurement():
    """``measure_s`` buys the first layout's blocks; the further layouts' blocks cost the same in every
    round, so a round's estimate counts them with the per-cell overhead."""
    one = {"samples": [0.01] * 10, "number": 2}  # 0.2 s of timed blocks
    three = {"samples": [0.01] * 20, "number": 2, "layouts": [0, 10, 15]}  # and 0.2 s of further layouts

    def proc(m: dict):
        return process({"started": 0.0, "worker_started": 3.0, "finished": 4.0, "cells": {"a": {"measurement": m}}})

    assert cell_costs([proc(one)]) == (3.0, pytest.approx(0.8))
    assert cell_costs([proc(three)]) == (3.0, pytest.approx(0.8))  # not 0.6: only 0.2 s is measure_s's


def _explicit(cells: dict[str, tuple[list[float], list[float]]]):
    """Results with explicit per-process medians (seconds), kernel-bound: cell -> (stock, patched), by round."""
    rounds = len(next(iter(cells.values()))[0])
    processes = [
        {
            "config": "default",
            "build": build,
            "round": rnd,
            "cells": {
                key: {"status": "ok", "measurement": _measured(sides[side][rnd], False)} for key, sides in cells.items()
            },
        }
        for rnd in range(rounds)
        for side, build in enumerate(("stock", "patched"))
    ]
    return run_of(
        {"run": {"cells": list(cells), "configs": ["default"], "builds": ["stock", "patched"]}, "processes": processes}
    )


def test_adaptive_rounds_decide_the_undetermined_cells_before_narrowing_the_decided_ones():
    """H100 A/A (docs/examples/h100-aa-placements): 90 cells above the ±1 % target shared the two adaptive
    rounds that fitted and 16 stayed undetermined; the rounds now go to the undetermined cells a verdict can
    reach first, and only then to the cells that are decided but wider than the target."""
    from harness.runner import MAX_ROUNDS, _stock_patched_rows

    base = [1.000e-3, 1.010e-3, 0.990e-3, 1.005e-3, 0.995e-3, 1.000e-3]
    wide = [1.000e-3, 1.012e-3, 0.988e-3, 1.006e-3, 0.994e-3, 1.000e-3]
    undecided, decided, noisy = "mm/512x512x512/float16", "mm/1024x1024x1024/float16", "mm/333x444x555/float16"
    cells = {
        undecided: (base, [v * 1.015 for v in base]),  # 1.5 % slower, CI across the +2 % edge
        decided: (wide, list(reversed(wide))),  # no change: equivalent, CI above ±1 %
        # +2 % at a 3 % spread: more processes than the run can give
        noisy: ([v * (1 + 0.03 * (i % 3 - 1)) for i, v in enumerate(base)], [v * 1.0204 for v in base]),
    }
    data = _explicit(cells)
    rows = {row.cell.key: row for _, row in _stock_patched_rows(data, POLICY)}
    assert [rows[k].cmp.verdict for k in (undecided, decided, noisy)] == ["undetermined", "equivalent", "undetermined"]
    assert rows[decided].cmp.half_width > 0.01
    assert und.decidable_within(rows[undecided], MAX_ROUNDS) and not und.decidable_within(rows[noisy], MAX_ROUNDS)
    assert next_adaptive_cells(data, 0.01) == {"default": [undecided]}
    # the processes at which the prediction reaches the goal (divided by the CI's excess, as the report's
    # need): decidable there, not one process before; the rounds left to MAX_ROUNDS must reach them
    row, sd = rows[undecided], und.spread(rows[undecided])
    goal = (0.02 - abs(row.cmp.ratio - 1)) / und._excess(row.cmp, sd, 6)
    n = und.processes_for(sd, goal, POLICY.rule(row.judged).floor)
    assert 6 < n < MAX_ROUNDS
    assert und.decidable_within(row, n) and not und.decidable_within(row, n - 1)
    from harness.runner import _undecided_first

    ordered = list(rows.items())
    need = {"default": list(rows)}
    assert _undecided_first([("default", r) for _, r in ordered], need, POLICY, left=n - 6) == {"default": [undecided]}
    assert _undecided_first([("default", r) for _, r in ordered], need, POLICY, left=n - 7) == need
    # once it is decided (here: 10 % slower), the decided-but-wide and the noisy cells get the rounds
    tight = [1e-3 * (1 + 0.0005 * (i % 3 - 1)) for i in range(6)]
    settled = _explicit({**cells, undecided: (tight, [v * 1.10 for v in tight])})
    assert next_adaptive_cells(settled, 0.01) == {"default": [decided, noisy]}
