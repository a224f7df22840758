import time

import pytest

from harness.bench.timer import BlockTimer, Measurement


def test_cpu_timer_measures_a_known_duration():
    timer = BlockTimer("cpu")
    m = timer.measure(lambda: time.sleep(0.002), warmup_s=0.0, measure_s=0.05, min_samples=5)
    assert m.method == "perf_counter" and m.number == 1
    assert 0.002 <= m.median < 0.004  # sleep never returns early; the bound allows scheduling delay
    assert len(m.samples) == len(m.enqueue) >= 5
    assert not m.launch_bound


def test_fast_calls_are_grouped_into_blocks_above_the_overhead_threshold():
    timer = BlockTimer("cpu")
    counter = []
    m = timer.measure(lambda: counter.append(1), warmup_s=0.0, measure_s=0.02, min_block_s=1e-3)
    assert m.number > 100  # one call is ~100 ns; a block must last >= 1 ms
    assert m.median * m.number >= 1e-3 * 0.5
    assert m.overhead_s < 0.01 * m.median * m.number  # overhead below 1 % of a block


def test_launch_bound_label_uses_enqueue_time():
    m = Measurement(samples=[10e-6] * 5, enqueue=[9e-6] * 5, method="cuda-events")
    assert m.launch_bound
    m = Measurement(samples=[100e-6] * 5, enqueue=[9e-6] * 5, method="cuda-events")
    assert not m.launch_bound


def test_unknown_device_is_rejected():
    with pytest.raises(ValueError):
        BlockTimer("tpu")
