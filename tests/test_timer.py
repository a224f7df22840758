"""The block timer, on a fake host clock: every assert is exact and none depends on how fast or
how loaded the machine is (one test uses the real clock, for what a real sleep guarantees)."""

import time

import pytest
import torch
from documents import record as typed

from harness import policy
from harness.bench import devices
from harness.bench.timer import (
    DEFERRED_LAUNCH_RATIO,
    MAX_BLOCK_CALLS,
    WARMUP_CALLS,
    BlockTimer,
    Measurement,
    layout_medians,
)


class FakeClock:
    """A host clock in ns that moves only when the timed code acts: each call of the timed function
    costs ``call_ns``, each synchronize ``sync_ns``, each clock read ``read_ns``."""

    def __init__(self, call_ns: int, sync_ns: int = 0, read_ns: int = 0) -> None:
        self.now, self.call_ns, self.sync_ns, self.read_ns = 0, call_ns, sync_ns, read_ns
        self.trace: list[str] = []

    def __call__(self) -> int:
        self.now += self.read_ns
        return self.now

    def call(self) -> None:
        self.now += self.call_ns
        self.trace.append("call")

    def sync(self) -> None:
        self.now += self.sync_ns
        self.trace.append("sync")


def fake_timer(clock: FakeClock, method: str = "synchronize+perf_counter") -> BlockTimer:
    device = devices.DeviceProfile("cpu", "cpu", clock.sync, lambda: None, lambda: None, method)
    return BlockTimer(device, clock=clock)


def test_real_clock_never_reports_less_than_a_real_sleep():
    m = BlockTimer(devices.profile("cpu", torch)).measure(
        lambda: time.sleep(0.002), warmup_s=0.0, measure_s=0.0, min_samples=3
    )
    assert m.method == "perf_counter" and m.number == 1  # one 2 ms call already exceeds the 1 ms block
    assert len(m.samples) == len(m.enqueue) == 3
    assert min(m.samples) >= 0.002  # sleep never returns early (no upper bound: a loaded machine is slower)
    assert not m.launch_bound


def test_a_known_duration_is_measured_exactly():
    clock = FakeClock(call_ns=2_000_000)  # 2 ms per call
    m = fake_timer(clock, "perf_counter").measure(clock.call, warmup_s=0.0, measure_s=0.05, min_samples=5)
    assert m.number == 1 and m.overhead_s == 0.0
    # blocks until 50 ms of fake time have passed, measured from after sizing
    assert m.samples == [0.002] * 25 and m.enqueue == [0.002] * 25
    assert m.median == 0.002 and not m.launch_bound


@pytest.mark.parametrize("cap, blocks", [(24, 24), (25, 25), (26, 25)])
def test_blocks_stop_at_measure_s_or_at_max_samples_whichever_comes_first(cap, blocks):
    # 2 ms blocks and 49 ms to time: 25 blocks (48 ms after 24, not a sum that lands on the edge itself); a cap of
    # 24 ends it one block short of measure_s
    clock = FakeClock(call_ns=2_000_000)
    timer = fake_timer(clock, "perf_counter")
    m = timer.measure(clock.call, warmup_s=0.0, measure_s=0.049, min_samples=5, max_samples=cap)
    assert len(m.samples) == blocks and sum(m.samples) == pytest.approx(blocks * 0.002)


def test_fast_calls_are_grouped_into_blocks_of_bounded_size():
    clock = FakeClock(call_ns=100)  # 100 ns per call: a 1 ms block would need 10 000 calls
    m = fake_timer(clock).measure(clock.call, warmup_s=0.0, measure_s=0.02, min_block_s=1e-3)
    assert m.number == MAX_BLOCK_CALLS  # growing towards the 1 ms block stops at the enqueue bound
    assert m.samples[0] == pytest.approx(100e-9)


def test_blocks_grow_until_they_reach_the_overhead_threshold():
    # an empty block holds its final synchronize, 50 µs: a block must last 50 µs / 1 % = 5 ms (not 1 ms)
    clock = FakeClock(call_ns=20_000, sync_ns=50_000)
    m = fake_timer(clock).measure(
        clock.call, warmup_s=0.0, warmup_calls=1, measure_s=0.0, min_block_s=1e-3, min_samples=3
    )
    assert m.overhead_s == pytest.approx(50e-6)
    # 1 call: 70 µs -> 78 calls: 1.61 ms -> 266 calls: 5.37 ms >= 5 ms (grown x 1.1 towards the target)
    assert m.number == 266
    assert m.samples == [pytest.approx((266 * 20e-6 + 50e-6) / 266)] * 3
    assert m.enqueue == [pytest.approx(20e-6)] * 3
    assert m.launch_bound  # the host needed as long to enqueue a call as the block took per call


def test_warmup_and_blocks_never_enqueue_more_than_the_bound_between_syncs():
    clock = FakeClock(call_ns=1_000)
    fake_timer(clock).measure(clock.call, warmup_s=0.05, measure_s=0.01, min_block_s=1.0)
    runs, longest = 0, 0
    for item in clock.trace:
        runs = runs + 1 if item == "call" else 0
        longest = max(longest, runs)
    assert longest == MAX_BLOCK_CALLS  # the 1 s block target is capped by the call bound
    # warm-up: one call per synchronize, bounded in calls however short the calls are
    first = clock.trace.index("call")
    assert clock.trace[first : first + 2 * WARMUP_CALLS + 1] == ["call", "sync"] * WARMUP_CALLS + ["sync"]


def test_warmup_stops_at_its_deadline():
    clock = FakeClock(call_ns=10_000_000)  # 10 ms per call: 5 calls reach a 50 ms warm-up
    assert fake_timer(clock).warmup(clock.call, 0.05) == 5
    assert fake_timer(clock).warmup(clock.call, 0.0) == 1  # at least one call


def test_block_time_includes_the_final_synchronize():
    clock = FakeClock(call_ns=1_000, sync_ns=3_000_000)
    block, enqueue = fake_timer(clock).time_block(clock.call, 3)
    assert clock.trace == ["sync", "call", "call", "call", "sync"]
    assert enqueue == pytest.approx(3e-6) and block == pytest.approx(3e-6 + 3e-3)  # read after the device finished


def test_sanity_passes_when_the_block_ends_with_the_device_idle():
    clock = FakeClock(call_ns=1_000, sync_ns=10_000)
    result = fake_timer(clock).sanity(clock.call, 10)
    assert result["overhead_s"] == pytest.approx(10e-6)
    assert result["block_s"] == pytest.approx(10e-6 + 10e-6)  # 10 calls + the block's final synchronize
    # the outer clock also holds the synchronize before the block and the extra one after it
    assert result["outer_s"] == pytest.approx(10e-6 + 20e-6 + 10e-6)
    assert result["passed"]


def test_launch_bound_label_uses_enqueue_time():
    m = Measurement(samples=[10e-6] * 5, enqueue=[9e-6] * 5, method="synchronize+perf_counter")
    assert m.launch_bound
    m = Measurement(samples=[100e-6] * 5, enqueue=[9e-6] * 5, method="synchronize+perf_counter")
    assert not m.launch_bound


def test_unknown_device_is_rejected():
    with pytest.raises(ValueError, match="unknown device 'tpu'; choose one of cpu, cuda, mps"):
        devices.profile("tpu", torch)


def test_a_host_bound_cell_gets_its_fixed_number_of_blocks_and_no_rests():
    # host enqueue takes the whole call (no device behind it): launch-bound from the sizing block on
    clock = FakeClock(call_ns=20_000)
    m = fake_timer(clock).measure(clock.call, warmup_s=0.0, measure_s=1.0, min_block_s=1e-3, host_bound_blocks=5)
    assert len(m.samples) == 5 and m.launch_bound and m.host_bound  # not the 1 s of blocks measure_s asks for
    calls = clock.trace.count("call")
    m = fake_timer(clock).measure(clock.call, warmup_s=0.0, measure_s=1.0, host_bound_blocks=5, duty=0.25)
    assert len(m.samples) == 5 and "sleep" not in clock.trace  # a duty cycle does not apply: the device waits anyway
    assert clock.trace.count("call") - calls < 2 * 5 * 1024  # no pre-roll either
    # on the cpu clock nothing is launch-bound: measure_s holds
    clock = FakeClock(call_ns=20_000)
    m = fake_timer(clock, "perf_counter").measure(
        clock.call, warmup_s=0.0, measure_s=0.01, min_block_s=1e-3, host_bound_blocks=5
    )
    assert len(m.samples) == 10  # 10 ms of 1 ms blocks


def test_a_given_block_size_skips_the_sizing():
    clock = FakeClock(call_ns=1_000)
    m = fake_timer(clock).measure(clock.call, warmup_s=0.0, warmup_calls=1, measure_s=0.0, min_samples=4, number=7)
    assert m.number == 7 and m.samples == pytest.approx([1e-6] * 4)
    assert clock.trace.count("call") == 1 + 4 * 7  # one warm-up call, four blocks of 7, no sizing blocks


def test_the_time_of_several_layouts_is_the_geometric_mean_of_their_medians():
    m = Measurement(samples=[1.0] * 4, enqueue=[0.1] * 4, method="synchronize+perf_counter")
    for level in (1.1, 1.3, 1.2, 0.9):
        m.add_layout(Measurement(samples=[level] * 5, enqueue=[0.1] * 5))
    assert m.layouts == [0, 4, 9, 14, 19] and len(m.samples) == 24
    # the geometric mean of the layouts' medians 1.0, 1.1, 1.3, 1.2, 0.9 (the pooled blocks' median is 1.15)
    assert m.median == pytest.approx((1.0 * 1.1 * 1.3 * 1.2 * 0.9) ** 0.2)
    assert m.to_json()["layouts"] == [0, 4, 9, 14, 19]
    # each layout's own warm-up transient is cut inside that layout only
    assert layout_medians([2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0], [0, 8]) == [1.0, 3.0]


def test_a_duty_cycle_rests_twice_each_block_and_prerolls_before_timing_it():
    # a kernel-bound cell: enqueueing a call takes 0.1 ms of host time, the device needs 0.9 ms more,
    # which the synchronize after the block waits for (and the one before it, on an idle device, too)
    clock = FakeClock(call_ns=100_000, sync_ns=900_000)
    rests: list[float] = []

    def sleep(seconds: float) -> None:
        rests.append(seconds)
        clock.now += round(seconds * 1e9)
        clock.trace.append("sleep")

    timer = BlockTimer(
        devices.DeviceProfile("cpu", "cpu", clock.sync, lambda: None, lambda: None, "synchronize+perf_counter"),
        clock=clock,
        sleep=sleep,
    )
    m = timer.measure(
        clock.call,
        warmup_s=0.0,
        warmup_calls=1,
        measure_s=0.0025,
        min_samples=1,
        min_block_s=1e-3,
        max_overhead_fraction=1.0,
        host_bound_blocks=5,
        duty=1 / 3,
    )
    assert m.number == 1 and not m.host_bound
    # measure_s counts timed blocks only: 3 blocks of 1 ms (the wall time, rests included, is 3 ms after the first)
    assert m.samples == pytest.approx([1e-3] * 3)
    # the deferral probe's rest (1.5 x the sized block's 0.9 ms wait), then before each timed block twice the
    # block before it (the sizing one first)
    assert rests == pytest.approx([1.35e-3] + [2e-3] * 3)
    # after the warm-up call, the sizing block and the probe: rest, one untimed pre-roll call, then the block
    timed = clock.trace[-15:]
    assert timed == ["sleep", "call", "sync", "call", "sync"] * 3
    assert clock.trace.count("call") == 1 + 1 + 1 + 3 * 2  # warm-up, sizing, probe, 3 x (pre-roll + block)


@pytest.mark.parametrize("duty", [0.0, -0.5, 1.5])
def test_a_duty_outside_0_1_is_refused(duty):
    clock = FakeClock(call_ns=1_000)
    with pytest.raises(ValueError, match=r"duty must be in \(0, 1\]"):
        fake_timer(clock).measure(clock.call, duty=duty)


class FakeDevice(FakeClock):
    """A host clock and a device behind it: each call costs the host ``encode_ns`` and the device
    ``device_ns``. Submitted as issued, the device runs each call from the moment it was enqueued (after the
    calls before it); ``deferred``, nothing runs before the synchronize (MPS's Metal GEMM). The synchronize
    returns when the device is done; ``sleep`` moves the host clock."""

    def __init__(self, encode_ns: int, device_ns: int, deferred: bool) -> None:
        super().__init__(call_ns=encode_ns)
        self.device_ns, self.deferred, self.busy_until, self.pending = device_ns, deferred, 0, 0

    def call(self) -> None:
        super().call()
        if self.deferred:
            self.pending += self.device_ns
        else:
            self.busy_until = max(self.busy_until, self.now) + self.device_ns

    def sync(self) -> None:
        self.busy_until = max(self.busy_until, self.now) + self.pending
        self.pending = 0
        self.now = max(self.now, self.busy_until)
        self.trace.append("sync")

    def sleep(self, seconds: float) -> None:
        self.now += round(seconds * 1e9)
        self.trace.append("sleep")


class LateWake(FakeDevice):
    """A :class:`FakeDevice` whose synchronize right after a rest returns ``late_ns`` late: a slow wake-up, or
    a host too busy to run the waiting thread at once."""

    def __init__(self, encode_ns: int, device_ns: int, deferred: bool, late_ns: int) -> None:
        super().__init__(encode_ns, device_ns, deferred)
        self.late_ns = late_ns

    def sync(self) -> None:
        rested = bool(self.trace) and self.trace[-1] == "sleep"
        super().sync()
        self.now += self.late_ns if rested else 0


def device_timer(dev: FakeDevice, method: str = "synchronize+perf_counter") -> BlockTimer:
    profile = devices.DeviceProfile("mps", "cpu", dev.sync, lambda: None, lambda: None, method)
    return BlockTimer(profile, clock=dev, sleep=dev.sleep)


TIMING = {"warmup_s": 0.0, "warmup_calls": 1, "measure_s": 0.0, "min_block_s": 1e-3, "min_samples": 4}


def test_the_probe_tells_work_deferred_until_the_synchronize_from_work_submitted_as_issued():
    # deferred (Metal GEMM: encode 60 µs, device 40 µs a call): the synchronize after the rest waits the device time
    deferred = FakeDevice(60_000, 40_000, deferred=True)
    m = device_timer(deferred).measure(deferred.call, **TIMING)
    assert m.deferred and m.samples == pytest.approx([100e-6] * 4) and m.enqueue == pytest.approx([60e-6] * 4)
    # as issued (encode 10 µs, device 40 µs): the device finished during the rest
    issued = FakeDevice(10_000, 40_000, deferred=False)
    m = device_timer(issued).measure(issued.call, **TIMING)
    assert not m.deferred and m.samples[-1] == pytest.approx(40e-6, rel=0.02) and not m.launch_bound
    # the probe costs one block (the sized one's calls) and a rest of 1.5 x the sized block's wait, once per cell
    assert issued.trace.count("sleep") == 1
    assert m.number == 44  # sizing blocks of 1, 22 and 44 calls (50 µs, 0.89 ms, 1.77 ms)
    assert issued.trace.count("call") == 1 + (1 + 22 + 44) + 44 + 4 * 44  # warm-up, sizing, probe, blocks

    # a synchronize that wakes slowly after the rest (30 µs: an H200's cuBLASLt mm 4096³ fp16 was called
    # deferred by a 0.15 ms probe block) is not deferred work: the wait must reach the device's own time
    small = LateWake(5_000, 150_000, deferred=False, late_ns=30_000)
    m = device_timer(small).measure(small.call, **TIMING)
    assert not m.deferred and "sleep" in small.trace
    # on the cpu clock calls are synchronous: no probe
    cpu = FakeDevice(10_000, 40_000, deferred=True)
    m = device_timer(cpu, "perf_counter").measure(cpu.call, **TIMING)
    assert m.deferred is False and "sleep" not in cpu.trace  # nothing is deferred: a fact, not a probe


def test_a_call_that_does_its_work_within_the_call_is_not_deferred_when_a_busy_host_delays_the_synchronize():
    """The conformance MPSGraph call (a CPU tensor: its work is done within the call) on a loaded 2-core CI
    host: every synchronize after the probe's rest woke 2 ms late, and two probes in a row read the delay as
    deferred work (test_conformance's doctor rows, 1 in 2 runs of the suite). The sized block's enqueue is
    its whole time, launch-bound under either rule: not probed, not deferred."""
    within = LateWake(50_000, 0, deferred=False, late_ns=2_000_000)
    m = device_timer(within).measure(within.call, **TIMING)
    # not probed: None, never "submitted as issued" (doctor: "deferral not measured"); planted: probed, it read True
    assert m.deferred is None and m.launch_bound and "sleep" not in within.trace
    assert Measurement.from_json(m.to_json()).deferred is None and m.to_json()["deferred"] is None
    # the same delay after a Metal GEMM's deferred work (device 40 % of the block) still finds it deferred
    metal = LateWake(60_000, 40_000, deferred=True, late_ns=2_000_000)
    assert device_timer(metal).measure(metal.call, **TIMING).deferred and "sleep" in metal.trace


def test_a_host_stall_in_the_sizing_block_does_not_skip_the_probe_of_real_device_time():
    """A Metal GEMM (encode 60 µs, device 40 µs, deferred) whose host is descheduled 50 ms in the middle of the
    one sizing block: that block reads 96 % enqueue, but the 2.2 ms left at its synchronize is device time, so
    the probe still runs and finds the work deferred (skipping on the enqueue share alone read it as submitted
    as issued: review of 527590d)."""

    class Stalled(FakeDevice):
        def call(self) -> None:
            super().call()
            self.calls = getattr(self, "calls", 0) + 1
            self.now += 50_000_000 if self.calls == 30 else 0  # warm-up, 1, then the 55-call sizing block

    dev = Stalled(60_000, 40_000, deferred=True)
    m = device_timer(dev).measure(dev.call, **{**TIMING, "min_block_s": 5e-3})
    assert m.number == 55 and m.deferred and "sleep" in dev.trace


def test_a_deferred_cell_spending_60_percent_of_its_block_encoding_is_launch_bound():
    # planted: the host encodes 60 % of each block, the device's 40 % starts only at the synchronize
    dev = FakeDevice(60_000, 40_000, deferred=True)
    m = device_timer(dev).measure(dev.call, **TIMING, host_bound_blocks=5)
    assert m.deferred and m.launch_bound and len(m.samples) == 5  # host-bound blocks, as for launch-bound cells
    record = {"status": "ok", "measurement": m.to_json()}
    assert record["measurement"]["deferred"] is True
    assert policy.classify([typed(record)] * 3) == policy.CellClass.LAUNCH_BOUND
    # the same numbers read as submitted as issued (the 0.9 rule): kernel-bound, judged at ±2 %
    record["measurement"]["deferred"] = False
    assert policy.classify([typed(record)] * 3) == policy.CellClass.KERNEL_BOUND
    # results written before the probe (no `deferred`), or a cell it left out (null): not measured, the 0.9 rule
    record["measurement"]["deferred"] = None
    assert Measurement.from_json(record["measurement"]).deferred is None
    assert policy.classify([typed(record)] * 3) == policy.CellClass.KERNEL_BOUND
    del record["measurement"]["deferred"]
    assert Measurement.from_json(record["measurement"]).deferred is None
    assert policy.classify([typed(record)] * 3) == policy.CellClass.KERNEL_BOUND
    # the deferred rule's edge: enqueue = device time
    edge = Measurement(samples=[2e-6] * 3, enqueue=[1e-6] * 3, method="synchronize+perf_counter", deferred=True)
    assert DEFERRED_LAUNCH_RATIO == 0.5 and edge.launch_bound
    assert not Measurement(samples=[2e-6] * 3, enqueue=[0.9e-6] * 3, method="s", deferred=True).launch_bound


def test_a_cell_host_bound_in_more_than_a_third_of_its_processes_is_launch_bound():
    """The H200 A/A's mm 4096x4096x256 bf16: host-bound in half its processes (21-23 µs there, 20.3-20.7 µs
    elsewhere), judged kernel-bound under "more than half" and never converged to ±1 %. Planted: 12 processes,
    k of them host-bound (enqueue 0.99 of the block), the rest with the device busy (enqueue 0.7)."""
    host = {
        "status": "ok",
        "measurement": Measurement(samples=[21e-6] * 4, enqueue=[20.8e-6] * 4, method="s").to_json(),
    }
    busy = {
        "status": "ok",
        "measurement": Measurement(samples=[20.4e-6] * 4, enqueue=[14e-6] * 4, method="s").to_json(),
    }
    assert res_measurement(host).launch_bound and not res_measurement(busy).launch_bound
    judged = {k: policy.classify([typed(host)] * k + [typed(busy)] * (12 - k)) for k in range(13)}
    assert policy.LAUNCH_BOUND_SHARE == 1 / 3
    # 4 of 12 is a third, not more: kernel-bound; 5 of 12 (42 %) and the A/A cell's 6 of 12: launch-bound
    assert [k for k, cls in judged.items() if cls == policy.CellClass.LAUNCH_BOUND] == list(range(5, 13))
    # a failed or skipped process (no measurement) counts on neither side
    failed = typed({"status": "failed"})
    assert policy.classify([typed(host)] * 2 + [typed(busy)] * 4 + [failed] * 6) == policy.CellClass.KERNEL_BOUND


def res_measurement(record: dict) -> Measurement:
    return Measurement.from_json(record["measurement"])


def test_the_worker_resets_the_device_once_per_cell_after_its_check_and_before_its_first_timed_call():
    """On an H200 the kernels before a cell set its time (SDPA causal L512 fp32: per-process levels
    1.3-1.9 % apart after the matrix, 0.24-0.70 % after a reset GEMM; devices.cuda_reset): the worker
    must reset the device after the cell's untimed check call and before its warm-up, for every cell."""
    from harness.bench.worker import run_cell
    from harness.bench.workloads import Cell

    trace: list[str] = []
    device = devices.DeviceProfile(
        "cpu",
        "cpu",
        lambda: trace.append("sync"),
        lambda: None,
        lambda: None,
        "perf_counter",
        reset=lambda: trace.append("reset"),
    )
    timing = {"warmup_s": 0.0, "measure_s": 0.0, "min_block_s": 0.0, "min_samples": 2}
    spec = {"device": "cpu", "check": True, "timing": timing}
    for key in ("mm/8x8x8/float32", "sdpa_causal/1x2x16x8/float32"):
        trace.clear()
        record = run_cell(
            torch, BlockTimer(device), device, Cell.from_key(key), spec, {}, step=lambda k, s: trace.append(s)
        )
        assert record["status"] == "ok" and record["check"]["passed"]
        # the check's call comes after step "check" and before step "measure"; the first sync opens the warm-up
        assert trace[:4] == ["inputs", "check", "measure", "reset"] and trace[4] == "sync", trace[:5]
        assert trace.count("reset") == 1


def test_a_failing_reset_fails_the_cell_in_its_own_words():
    from harness.bench.worker import run_cell
    from harness.bench.workloads import Cell

    def broken():
        raise RuntimeError("CUDA out of memory. Tried to allocate 32.00 MiB\nmore lines")

    device = devices.DeviceProfile("cpu", "cpu", lambda: None, lambda: None, lambda: None, "perf_counter", broken)
    spec = {"device": "cpu", "check": True, "timing": {"warmup_s": 0.0, "measure_s": 0.0, "min_block_s": 0.0}}
    record = run_cell(torch, BlockTimer(device), device, Cell.from_key("mm/8x8x8/float32"), spec, {})
    assert record["status"] == "failed" and "measurement" not in record
    assert record["reason"] == (
        "device reset before the cell failed: RuntimeError: CUDA out of memory. Tried to allocate 32.00 MiB"
    )

    def silent():
        raise RuntimeError()  # no message: the type alone, not an IndexError out of the worker

    device = devices.DeviceProfile("cpu", "cpu", lambda: None, lambda: None, lambda: None, "perf_counter", silent)
    record = run_cell(torch, BlockTimer(device), device, Cell.from_key("mm/8x8x8/float32"), spec, {})
    assert record["reason"] == "device reset before the cell failed: RuntimeError"


class _FakeCudaTorch:
    """What devices.cuda_reset and devices._cuda touch of torch: ones/empty, mm(out=), cuda.synchronize.
    ``fail_alloc``: the allocation of that number (1-based) raises once, as an out-of-memory would."""

    float16 = "float16"

    def __init__(self, fail_alloc: int = 0) -> None:
        self.calls: list[tuple] = []
        self.allocs, self.fail_alloc = 0, fail_alloc
        outer = self

        class _Cuda:
            @staticmethod
            def synchronize():
                outer.calls.append(("synchronize",))

        self.cuda = _Cuda()

    def ones(self, *shape, dtype, device):
        self.allocs += 1
        if self.allocs == self.fail_alloc:
            raise RuntimeError("CUDA out of memory")
        self.calls.append(("alloc", shape, dtype, device))
        return object()

    empty = ones

    def mm(self, a, b, out):
        self.calls.append(("mm",))


def test_the_cuda_profile_resets_with_its_gemms_then_synchronizes_and_allocates_once():
    fake = _FakeCudaTorch()
    reset = devices._cuda(fake).reset  # the profile the worker gets on cuda
    reset()
    reset()
    n = devices.RESET_GEMM_SIZE
    allocs = [c for c in fake.calls if c[0] == "alloc"]
    assert allocs == [("alloc", (n, n), "float16", "cuda")] * 3  # two operands and the output, once
    calls = [c[0] for c in fake.calls if c[0] != "alloc"]
    assert calls == (["mm"] * devices.RESET_CALLS + ["synchronize"]) * 2
    cpu = _FakeCudaTorch()
    devices.profile("cpu", cpu).reset()
    assert cpu.calls == []  # the cpu profile runs nothing


def test_a_reset_whose_allocation_failed_allocates_all_three_again_next_time():
    fake = _FakeCudaTorch(fail_alloc=2)
    reset = devices.cuda_reset(fake)
    with pytest.raises(RuntimeError, match="out of memory"):
        reset()
    reset()  # not "not enough values to unpack" from a half-made operand list
    assert [c[0] for c in fake.calls].count("alloc") == 1 + 3
    assert [c[0] for c in fake.calls][-(devices.RESET_CALLS + 1) :] == ["mm"] * devices.RESET_CALLS + ["synchronize"]
