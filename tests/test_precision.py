"""Per-process precision: the warm-up transient is cut (MSER), and ``compare --plant-k`` calibration."""

from __future__ import annotations

import statistics

import pytest
import torch

from harness.bench import devices
from harness.bench.timer import BlockTimer, Measurement, steady_median, steady_start
from harness.bench.worker import run_cell
from harness.bench.workloads import Cell, planted

TINY = {"warmup_s": 0.0, "measure_s": 0.0, "min_block_s": 1e-4, "min_samples": 2}


def test_k_grows_by_at_least_the_fraction_and_keeps_its_alignment_class():
    assert planted(Cell("mm", (4096, 4096, 4096), "float16"), 0.05).shape == (4096, 4096, 4304)  # +5.1 %
    assert planted(Cell("bmm", (4, 64, 64, 555), "float32"), 0.05).shape == (4, 64, 64, 583)  # odd K stays odd
    with pytest.raises(ValueError, match="only a GEMM"):
        planted(Cell("sdpa", (1, 8, 512, 64), "float32"), 0.05)


def test_a_planted_worker_times_the_grown_gemm_under_the_cell_s_own_key():
    device = devices.profile("cpu", torch)
    cell = Cell("mm", (32, 32, 320), "float32")
    spec = {"device": "cpu", "check": True, "timing": TINY, "plant_k": 0.05}
    record = run_cell(torch, BlockTimer(device), device, cell, spec, {})
    assert record["status"] == "ok" and record["key"] == "mm/32x32x320/float32"
    assert record["planted_shape"] == [32, 32, 336] and record["check"]["passed"]
    sdpa = run_cell(torch, BlockTimer(device), device, Cell("sdpa", (1, 2, 16, 8), "float32"), spec, {})
    assert sdpa["status"] == "ok" and "planted_shape" not in sdpa  # only GEMMs have a K to grow


def test_the_boost_clock_transient_at_the_start_of_a_cell_is_cut_and_plain_noise_is_not():
    # an H200 TF32 GEMM 4096³ process (µs per call, blocks in order): two fast blocks, then steady
    boost = [349, 349, 387, 403, 407, 406, 400, 400, 401, 400]
    # MSER also drops the three settling blocks (403-407): what is kept is the calmest tail
    assert steady_start(boost) == 5 and steady_median(boost) == 400
    assert Measurement(
        samples=[v * 1e-6 for v in boost], enqueue=[1e-6] * 10, method="synchronize+perf_counter"
    ).to_json()["median"] == pytest.approx(400e-6)
    half = [349, 349, 352, 350, 351, 400, 401, 399, 400, 402]  # half the blocks fast: the median flips
    assert steady_median(half) == 400 and statistics.median(half) == 375.5
    flat = [100.2, 99.1, 100.8, 99.7, 100.0, 100.4, 99.5, 100.9, 99.8, 100.1]
    assert steady_start(flat) == 0 and steady_median(flat) == statistics.median(flat)
    # never more than half the blocks, and nothing to cut with fewer than 4
    assert steady_start([1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0]) <= 5
    assert steady_start([1.0, 2.0, 2.0]) == 0


def test_a_kernel_bound_cell_is_timed_on_several_layouts_of_its_inputs():
    device = devices.profile("cpu", torch)  # the cpu clock: never launch-bound
    cell = Cell("mm", (32, 32, 32), "float32")
    record = run_cell(torch, BlockTimer(device), device, cell, {"device": "cpu", "timing": {**TINY, "layouts": 3}}, {})
    m = record["measurement"]
    assert record["status"] == "ok" and m["layouts"] == [0, 2, 5] and len(m["samples"]) == 8  # 2 + 3 + 3 blocks
    one = run_cell(torch, BlockTimer(device), device, cell, {"device": "cpu", "timing": TINY}, {})
    assert one["measurement"]["layouts"] == [] and len(one["measurement"]["samples"]) == 2


def test_the_memory_check_counts_what_further_layouts_allocate():
    from harness.bench.worker import MAX_SPACER_BYTES, layout_bytes

    cell = Cell("mm", (1024, 1024, 1024), "float16")
    assert layout_bytes(cell, {"layouts": 3}) == cell.peak_bytes() + 2 * MAX_SPACER_BYTES
    assert layout_bytes(cell, {"layouts": 1}) == 0 and layout_bytes(cell, {}) == 0
