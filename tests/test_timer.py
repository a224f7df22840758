import time

import pytest
import torch

from harness.bench import devices
from harness.bench.timer import MAX_BLOCK_CALLS, BlockTimer, Measurement


def cpu_timer() -> BlockTimer:
    return BlockTimer(devices.profile("cpu", torch))


def counting_device(trace: list) -> devices.DeviceProfile:
    """A cpu profile whose synchronize is recorded, to check what the timer enqueues between syncs."""
    return devices.DeviceProfile("cpu", "cpu", lambda: trace.append("sync"), lambda: None, lambda: None,
                                 "synchronize+perf_counter")


def test_cpu_timer_measures_a_known_duration():
    m = cpu_timer().measure(lambda: time.sleep(0.002), warmup_s=0.0, measure_s=0.05, min_samples=5)
    assert m.method == "perf_counter" and m.number == 1
    assert 0.002 <= m.median < 0.004  # sleep never returns early; the bound allows scheduling delay
    assert len(m.samples) == len(m.enqueue) >= 5
    assert not m.launch_bound


def test_fast_calls_are_grouped_into_blocks_of_bounded_size():
    counter = []
    m = cpu_timer().measure(lambda: counter.append(1), warmup_s=0.0, measure_s=0.02, min_block_s=1e-3)
    # one call is ~100 ns: growing towards a 1 ms block stops at the enqueue bound
    assert 100 < m.number <= MAX_BLOCK_CALLS
    assert m.overhead_s >= 0


def test_warmup_and_blocks_never_enqueue_more_than_the_bound_between_syncs():
    trace: list = []
    timer = BlockTimer(counting_device(trace))
    timer.measure(lambda: trace.append("call"), warmup_s=0.05, measure_s=0.01, min_block_s=1.0)
    runs, longest = 0, 0
    for item in trace:
        runs = runs + 1 if item == "call" else 0
        longest = max(longest, runs)
    assert longest == MAX_BLOCK_CALLS  # the 1 s block target is capped by the call bound
    # warm-up: one call per synchronize, bounded in calls however short the calls are
    first_block = trace.index("call")
    warm = trace[first_block:first_block + 2 * 50]
    assert warm == ["call", "sync"] * 50


def test_block_time_includes_the_final_synchronize():
    trace: list = []
    device = devices.DeviceProfile("cpu", "cpu", lambda: time.sleep(0.003), lambda: None, lambda: None, "x")
    block, enqueue = BlockTimer(device).time_block(lambda: trace.append(1), 3)
    assert trace == [1, 1, 1]
    assert enqueue < 0.003 <= block  # the host clock is read after the device finished


def test_launch_bound_label_uses_enqueue_time():
    m = Measurement(samples=[10e-6] * 5, enqueue=[9e-6] * 5, method="synchronize+perf_counter")
    assert m.launch_bound
    m = Measurement(samples=[100e-6] * 5, enqueue=[9e-6] * 5, method="synchronize+perf_counter")
    assert not m.launch_bound


def test_unknown_device_is_rejected():
    with pytest.raises(ValueError, match="unknown device 'tpu'; choose one of cpu, cuda, mps"):
        devices.profile("tpu", torch)
