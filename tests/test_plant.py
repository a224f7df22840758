"""``compare --plant-k``: the patched side's GEMMs run with a known extra cost (calibration)."""

from __future__ import annotations

import pytest
import torch

from harness.bench import devices
from harness.bench.timer import BlockTimer
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
