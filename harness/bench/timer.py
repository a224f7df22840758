"""Device-synchronised timing of a callable, in blocks sized so timer overhead is negligible.

One method on every device, as ``torch.utils.benchmark`` times accelerators: synchronize the
device, read the host clock (``time.perf_counter_ns``), enqueue a block of ``number`` back-to-back
calls, synchronize, read the clock again. On the CPU the synchronize is a no-op. The block time is
what a caller waiting for the results sees: device time plus one synchronize (6-12 µs on an H200,
docs/timing.md). Blocks are sized to at least 5 ms on GPUs, so the synchronize is <= 0.25 % of a
block (the same on both sides of a comparison); on an H200 this timer agrees with CUDA events
within -0.8 % to +1.5 % and with CUDA-graph replay as stated in docs/timing.md
(benchmarks/cuda_timing.py measures both).

Why not device events: on MPS, ``torch.mps.Event(enable_timing=True)`` cannot time a block.
``aten/src/ATen/mps/MPSEvent.mm`` (stored commit ``0aafd810``; the same in 2.6 through 2.13):
``record()`` and ``synchronize()`` each register a completion callback that sets one shared flag,
``synchronize()`` consumes it, and ``MPSEventPool::elapsedTime`` then waits on the flag with
nothing left to set it: the process hangs (pytorch issue 162872). Its timestamps are host times
taken in those callbacks, not device time, and ``elapsedTime`` raises when the two read reversed.
The host clock around synchronizes measures the same thing without either failure.

Bounded enqueue: warm-up runs one call at a time, each followed by a synchronize, for at most
``warmup_calls`` calls or ``warmup_s`` seconds; a timed block enqueues at most
:data:`MAX_BLOCK_CALLS` calls. On MPS this matters: the Metal GEMM path that
``PYTORCH_MPS_PREFER_METAL`` selects (``do_metal_mm`` in
``aten/src/ATen/native/mps/operations/LinearAlgebra.mm``) does not commit its command buffer, so
calls enqueued against a host deadline pile up and the next synchronize waits for all of them.

For every block the host time spent enqueuing the calls is recorded too. What the block's final
synchronize waits for depends on when the calls' work reaches the device, which this timer measures
once per cell (:meth:`BlockTimer.probe_deferred`, one extra block after the sizing): enqueue a block,
rest the host 1.5 x the sized block's wait (longer than the device work left after the enqueue), then
time the synchronize alone.

- **Submitted as issued** (a wait near 0 after the rest: CUDA launches; CPU calls are synchronous and
  never probed): the device works while the host enqueues, so the block lasts the enqueue plus the wait
  for the work the device has not done yet. When the host needs about as long to enqueue a call as the
  block takes per call (enqueue >= :data:`HOST_BOUND_RATIO` of the block), that wait is short: the
  device had no backlog and sat idle between calls, waiting for the host. The cell is **launch-bound**
  and its time is host-visible latency, not kernel time. A longer wait means a backlog: the device was
  busy, and the cell is kernel-bound however long the enqueue took.
- **Deferred until the synchronize** (the wait after the rest is still most of the sized block's wait;
  ``Measurement.deferred``): nothing reaches the device before the synchronize, so the block is the
  enqueue plus the whole device time and the wait says nothing about a backlog. The host sets the
  cell's time when the enqueue is at least the device time (block - enqueue), i.e. enqueue >=
  :data:`DEFERRED_LAUNCH_RATIO` (0.5) of the block: launch-bound. On MPS the Metal GEMM that
  ``PYTORCH_MPS_PREFER_METAL`` selects defers (``do_metal_mm`` encodes into the stream's command buffer
  without a commit: ``aten/src/ATen/native/mps/operations/LinearAlgebra.mm`` @ ``001077cb``; only
  ``torch.mps.synchronize`` -> ``MPSHooks::deviceSynchronize`` -> ``synchronize(COMMIT_AND_WAIT)``
  commits it: ``aten/src/ATen/mps/MPSHooks.mm`` @ ``fe0b902f``, ``MPSStream.mm`` @ ``fba75098``).
  MPSGraph calls (``runMPSGraph``, ``aten/src/ATen/native/mps/OperationUtils.mm`` @ ``bff2c90b``) ask for
  ``COMMIT_ADAPTIVE``, which commits only when the allocator's low watermark is <= 1 (``MPSStream.mm``
  @ ``fba75098``); whether MPSGraph submits its work as it encodes (``enableCommitAndContinue``) is
  Apple's private behaviour, so it is measured, not assumed.

Warm-up transient: on an H200 the first 1-4 timed blocks of a heavy GEMM (20-80 ms of load) run
5-13 % faster than the rest (GEMM 4096³ fp32 with TF32: 347 µs, then 400 µs from the fifth block on;
docs/timing.md), as the clock settles under the power limit. A process's time for a cell is the
median of its blocks from :func:`steady_start` on; every block is kept in the results.

Duty cycle (``duty`` < 1; GPUs): under sustained load a GPU holds its power limit by lowering its
clock, and the clock then depends on the seconds of load before a cell and oscillates around the
limit: on an H200 (700 W) back-to-back GEMM 4096³ fp16 ran at 1425-1755 MHz, its windows of 0.25 s
up to 10 % apart, and linear 2048³ TF32 took 53-56 µs depending on what ran before it
(benchmarks/power_state.py, docs/methodology.md). Resting the device for ``block × (1/duty − 1)``
seconds after each timed block keeps its average power under the limit: at a duty of 1/3 every cell
measured there ran at the unthrottled 1980 MHz whatever ran before it (GEMM 4096³ fp16 185-187 µs,
linear 2048³ TF32 48.9-49.0 µs, windows within ±0.8 % after the first). So times are those of the unthrottled
clock, the same for every cell whatever the schedule put before it; a device that must sustain the
load runs power-hungry kernels slower. After each rest a short untimed pre-roll (1/8 of a block's
calls) wakes the device before the timed block starts.

Block sizing follows ``torch.utils.benchmark.Timer.blocked_autorange``: measure the timer's own
overhead (an empty block: two synchronizes and two clock reads), then grow ``number`` until one
block lasts at least ``max(min_block_s, overhead / max_overhead_fraction)`` or reaches
:data:`MAX_BLOCK_CALLS`. Each sample is ``block_time / number`` seconds per call; all are kept.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from harness.bench import words

#: host-enqueue / block time at or above which the device waits for the host (host-bound, launch-bound):
#: the host then waits at the block's final synchronize for less than a tenth of the block, so the
#: device had no backlog. Such a cell is timed in ``host_bound_blocks`` blocks without settling or
#: further layouts, and judged as launch-bound (harness.policy). On an H200 whose host takes 15-20 µs to
#: enqueue a GEMM, mm 2048³ fp16 (25 µs per call) has 0.54-0.79: a busy device, kernel-bound.
HOST_BOUND_RATIO = 0.9
#: host-enqueue / block time at or above which a cell whose work is deferred until the synchronize
#: (:attr:`Measurement.deferred`) is launch-bound: its block is enqueue + device time, and the host sets
#: the time once the enqueue is at least the device time (block - enqueue)
DEFERRED_LAUNCH_RATIO = 0.5
#: the deferral probe rests the host this many times the sized block's wait at its synchronize (block -
#: enqueue: the device work left once the host has enqueued a block, on either kind of route)
PROBE_REST = 1.5
#: a deferral probe's wait at the synchronize after its rest, beyond the synchronize's own cost, at or above
#: this share of the probe's block (enqueue + wait) means its work was deferred until the synchronize; a
#: wait below it is the synchronize alone (work submitted as issued finished during the rest), or a device
#: so little behind the host that the cell is launch-bound under either rule
PROBE_WAIT_SHARE = 0.1
#: ... and at least this share of the sized block's wait (the device time a deferred block waits for): a
#: synchronize after an idle rest can take tens of µs on its own (on an H200 the share alone called
#: cuBLASLt mm 4096³ fp16 deferred, its probe block a fraction of a ms of enqueue); where the sized wait is
#: near 0 the cell is launch-bound under either rule
PROBE_SIZED_SHARE = 0.1
#: the sized block's wait (seconds) from which :data:`PROBE_SIZED_SHARE` applies
PROBE_SIZED_MIN_S = 1e-3
#: probes a cell takes before it counts as deferred (all must agree; the first "submitted as issued" ends it)
PROBE_TIMES = 2
#: most calls one timed block enqueues before it synchronizes (bounded queue on every device;
#: with a 6-12 µs synchronize and calls >= 5 µs, a full block keeps the overhead < 0.25 %)
MAX_BLOCK_CALLS = 1024
#: most warm-up calls (each synchronized) before sizing starts
WARMUP_CALLS = 50
#: most timed blocks one measurement collects: it ends here even short of ``measure_s`` (a block sized while
#: the host was descheduled holds fewer calls than its target; 2,000 such blocks of one 70 µs call are 0.14 s)
MAX_SAMPLES = 2000
#: calls run untimed after each rest of a duty-cycled measurement, as a share of a block's calls
PREROLL_SHARE = 1 / 8
#: at most this share of a process's blocks is dropped as warm-up transient (:func:`steady_start`)
MAX_TRANSIENT_SHARE = 0.5
#: a leading run of blocks is a transient only when its mean lies this many standard deviations of
#: the rest away from the rest's mean
TRANSIENT_SDS = 3.0
#: the host clock's unit, seconds: ``time.perf_counter_ns`` counts whole nanoseconds, so a block (two
#: reads apart) lasts 0 or at least 1 ns; a shorter one is no reading of the timer (harness.results refuses it)
CLOCK_UNIT_S = 1e-9
#: the host clock's tick, seconds: the coarsest among the hosts the harness runs on. ``time.perf_counter``
#: is ``clock_gettime(CLOCK_MONOTONIC)`` on Linux (1 ns, ``clock_getres``) and ``mach_absolute_time`` on
#: macOS, whose timebase on Apple silicon is 125/3 ns (24 MHz; ``time.get_clock_info("perf_counter")``
#: reports its resolution there as 4.2e-08). results.json does not record the host, only the clock
#: (:attr:`Measurement.method`), so every host-clock measurement gets the coarser tick.
HOST_TICK_S = 125 / 3 * 1e-9
#: the tick of the CUDA events that runs of schema version 1 timed GPUs with: ``cudaEventElapsedTime``
#: "has a resolution of around 0.5 microseconds" (CUDA Runtime API, Event Management). Their MPS events
#: were host times taken in completion callbacks: :data:`HOST_TICK_S`.
EVENT_TICK_S = 0.5e-6
#: tick of each recorded clock (:attr:`Measurement.method`); another or none: :data:`HOST_TICK_S`
CLOCK_TICKS = {
    "perf_counter": HOST_TICK_S,
    "synchronize+perf_counter": HOST_TICK_S,
    "cuda-events": EVENT_TICK_S,
    "cuda-graph+events": EVENT_TICK_S,
    # the MPS profiler prints each operation's gpu= in ms with 3 decimals (``BaseInfo::toString``, ``{:.3f}``,
    # aten/src/ATen/mps/MPSProfiler.mm @ 458fd422 and 05b8ccb7): 1 µs, and per operation, not per group
    "mps-profiler-gpu-time": 1e-6,
    "mps-events": HOST_TICK_S,
}
#: a process's time is judged only when its block (median x ``number``) lasts at least this many ticks:
#: a block read as k ticks is off by up to one tick, 1/k of it, so at 100 ticks by at most 1 %, half the
#: narrowest verdict band (harness.policy: ±2 %). The timer's own blocks last >= ``min_block_s`` (1 ms) or
#: :data:`MAX_BLOCK_CALLS` calls, far above it; only an edited or broken record falls under it.
RESOLVED_TICKS = 100


#: device clocks that round each call's own time (:data:`CLOCK_TICKS`): their floor applies to one call, not to
#: the group of calls it was summed over (a rounding per operation does not average out over a group)
PER_CALL_CLOCKS = frozenset({"mps-profiler-gpu-time"})


def resolution_floor_s(method: str) -> float:
    """Shortest block, seconds, whose time is judged: :data:`RESOLVED_TICKS` ticks of the clock ``method``
    names (:data:`CLOCK_TICKS`; 4.17 µs for the host clock, 50 µs for CUDA events)."""
    return RESOLVED_TICKS * CLOCK_TICKS.get(method, HOST_TICK_S)


def below_resolution(median: float, number: int, method: str) -> bool:
    """The one rule for a time the timer cannot resolve: a process whose time per call ``median`` (seconds)
    times its calls per block ``number`` lasts under :func:`resolution_floor_s` of its clock ``method``."""
    return median * number < resolution_floor_s(method)


def steady_start(samples: list[float]) -> int:
    """Index of the first block of the steady state, by the MSER rule (K. P. White, "An effective
    truncation heuristic for bias reduction in simulation output", *Simulation* 69(6), 1997): the
    ``d`` in ``[0, MAX_TRANSIENT_SHARE·n]`` that minimises ``Σ_{i≥d} (x_i − x̄_d)² / (n − d)²`` over
    the log block times, i.e. the standard error of what is kept, kept only when the dropped blocks'
    mean lies more than :data:`TRANSIENT_SDS` standard deviations of the rest from the rest's mean
    (MSER alone trims plain noise too). Fewer than 4 blocks: 0. Pure Python (runs in build
    interpreters)."""
    n = len(samples)
    if n < 4 or any(not (v > 0) for v in samples):
        return 0
    x = [math.log(v) for v in samples]
    best, best_d = math.inf, 0
    for d in range(int(MAX_TRANSIENT_SHARE * n) + 1):
        tail = x[d:]
        mean = sum(tail) / len(tail)
        score = sum((v - mean) ** 2 for v in tail) / len(tail) ** 2
        if score < best - 1e-18:
            best, best_d = score, d
    if best_d:  # MSER alone also trims plain noise at times: keep the cut only for a real transient
        head, tail = x[:best_d], x[best_d:]
        mean = sum(tail) / len(tail)
        sd = math.sqrt(sum((v - mean) ** 2 for v in tail) / (len(tail) - 1))
        if abs(sum(head) / len(head) - mean) <= TRANSIENT_SDS * sd:
            return 0
    return best_d


def steady_median(samples: list[float]) -> float:
    """Median of the blocks from :func:`steady_start` on (seconds per call)."""
    return statistics.median(samples[steady_start(samples) :])


def launch_ratio(deferred: bool | None) -> float:
    """The enqueue / block share at or above which a cell is launch-bound: :data:`DEFERRED_LAUNCH_RATIO`
    where its work is deferred until the synchronize, else (submitted as issued, or not probed)
    :data:`HOST_BOUND_RATIO` (module docstring)."""
    return DEFERRED_LAUNCH_RATIO if deferred else HOST_BOUND_RATIO


def layout_slices(n: int, layouts: list[int]) -> list[slice]:
    """The blocks of each layout: ``layouts`` holds the index of each layout's first block (empty or
    ``[0]``: one layout, all ``n`` blocks)."""
    starts = [i for i in layouts if 0 <= i < n] or [0]
    return [slice(a, b) for a, b in zip(starts, [*starts[1:], n])]


def first_layout(samples: list[float], layouts: list[int]) -> list[float]:
    """The blocks of the first layout (all blocks when there is one): what ``measure_s`` bought."""
    return samples[layout_slices(len(samples), layouts)[0]]


def layout_medians(samples: list[float], layouts: list[int]) -> list[float]:
    """:func:`steady_median` of each layout's blocks (seconds per call), in layout order."""
    return [steady_median(samples[s]) for s in layout_slices(len(samples), layouts)]


@dataclass
class Measurement:
    """Raw per-call times of one cell in one process.

    Attributes:
        samples: seconds per call, one value per block (block time / ``number``).
        layouts: index of the first block of each memory layout of the inputs (see
            :func:`harness.bench.worker.run_cell`); empty: one layout.
        enqueue: host seconds per call spent enqueuing, one value per block (== samples on cpu).
        number: calls per block.
        overhead_s: the timer's own cost for one empty block, seconds.
        method: the clock: ``perf_counter`` (cpu) or ``synchronize+perf_counter`` (cuda, mps).
        deferred: what the deferral probe (:meth:`BlockTimer.probe_deferred`) found: True, the cell's
            work is deferred until the synchronize; False, it is submitted as issued (on the cpu clock
            always: calls are synchronous); None, not probed (a sized block that was launch-bound
            under either rule with too little device work left to probe, a given block size, results
            written before the probe existed). None and False pick the same launch-bound rule
            (:func:`launch_ratio`); only ``doctor`` tells them apart. Results written before None
            existed hold False for a cell the probe left out too.
        device: device seconds per call, one value per timed replay (:func:`measure_device`): the
            calls' kernels alone, without the host's launch gaps. Empty where the device gave none.
        device_method: how :attr:`device` was taken (``cuda-graph+events``: the calls captured once
            in a CUDA graph, each replay timed by CUDA events); empty when none.
        device_calls: calls captured in the replayed unit (0 when none).
        device_placements: placements of the inputs in device memory the unit's calls cycle over, each
            ``device_calls / device_placements`` times (:func:`harness.bench.worker.placed_callable`; 1: the
            inputs alone, and in results written before placements existed).
        device_note: why :attr:`device` is empty (the cpu clock: host time is device time; a device
            or torch that cannot give it; an op that cannot be captured), empty otherwise.
    """

    samples: list[float] = field(default_factory=list)
    enqueue: list[float] = field(default_factory=list)
    layouts: list[int] = field(default_factory=list)
    number: int = 1
    overhead_s: float = 0.0
    method: str = ""
    deferred: bool | None = None
    device: list[float] = field(default_factory=list)
    device_method: str = ""
    device_calls: int = 0
    device_placements: int = 1
    device_note: str = ""

    @property
    def device_median(self) -> float | None:
        """Device seconds per call in this process: the median of :attr:`device` (one value per timed
        replay of ``device_calls`` captured calls), None when the device gave none (:attr:`device_note`
        says why)."""
        return statistics.median(self.device) if self.device else None

    @property
    def median(self) -> float:
        """The process's time for the cell, seconds per call: :func:`steady_median` of the samples;
        with several layouts, the geometric mean of each layout's :func:`steady_median` (placements
        fall into levels, e.g. GEMM 1024³ fp32 on an H200 at 55 or 57 µs: a mean over the layouts
        varies less from process to process than their median, which jumps between levels)."""
        if len(self.layouts) > 1:
            return statistics.geometric_mean(layout_medians(self.samples, self.layouts))
        return steady_median(self.samples)

    @property
    def below_resolution(self) -> bool:
        """True when the process's time per block (:attr:`median` x ``number``, seconds) is under
        :func:`resolution_floor_s` of its clock: a time the timer cannot resolve, never judged (harness.policy,
        harness.contrasts). False when nothing was measured."""
        return bool(self.samples) and below_resolution(self.median, self.number, self.method)

    def add_layout(self, other: Measurement) -> None:
        """Append ``other``'s blocks (the same cell on freshly allocated inputs) as a new layout."""
        if not self.layouts:
            self.layouts = [0]
        self.layouts.append(len(self.samples))
        self.samples += other.samples
        self.enqueue += other.enqueue

    @property
    def host_bound(self) -> bool:
        """True when the host enqueue time per call is >= :func:`launch_ratio` x the block time per call
        (:data:`HOST_BOUND_RATIO`, or :data:`DEFERRED_LAUNCH_RATIO` when :attr:`deferred`): the host sets
        the block time (never on the cpu clock)."""
        if self.method == "perf_counter" or not self.samples:
            return False
        return statistics.median(self.enqueue) >= launch_ratio(self.deferred) * self.median

    @property
    def launch_bound(self) -> bool:
        """The host set the block time (:attr:`host_bound`): the label a cell's class is voted from
        (:func:`harness.policy.classify`)."""
        return self.host_bound

    @classmethod
    def from_json(cls, m: dict) -> Measurement:
        """A stored measurement (:meth:`to_json`) from its raw fields; ``median``, ``steady_from`` and
        ``launch_bound`` are derived again, never read. ``deferred`` null or absent (not probed, or
        results written before the probe): None."""
        return cls(
            samples=list(m["samples"]),
            enqueue=list(m.get("enqueue") or [0.0]),
            layouts=list(m.get("layouts") or []),
            number=m.get("number", 1),
            overhead_s=m.get("overhead_s", 0.0),
            method=m.get("method", ""),
            deferred=m.get("deferred"),
            device=list(m.get("device") or []),
            device_method=m.get("device_method", ""),
            device_calls=m.get("device_calls", 0),
            device_placements=m.get("device_placements", 1),
            device_note=m.get("device_note", ""),
        )

    def to_json(self) -> dict:
        out = asdict(self)
        out["median"] = self.median if self.samples else None
        out["steady_from"] = steady_start(first_layout(self.samples, self.layouts))
        out["launch_bound"] = self.launch_bound
        out["device_median"] = self.device_median
        return out


#: device seconds one timed replay aims at. The captured unit holds a power of two of calls, the smallest whose
#: replay lasts at least this long by a pilot replay of :data:`DEVICE_PILOT_CALLS` calls, at most
#: :data:`MAX_BLOCK_CALLS`. Sized by the device's own time, not the host median: sized from the host median,
#: a process whose host was slow (host time sits at two per-process levels, docs/timing.md) captured half the
#: calls, and a fixed cost per replay moved its device time per call by 3-7 % on an H100. A power of two
#: gives both sides of a contrast the same unit unless their device time differs by about 2x. On an H100
#: the smallest cells (mm 512³ fp16, 3.3 µs of device time per call) then replay 512 calls, ~1.7 ms: CUDA
#: events resolve about 0.5 µs (CUDA Runtime API, ``cudaEventElapsedTime``), 0.03 % of it, and the
#: resolution floor (:func:`resolution_floor_s`, 100 ticks) is 50 µs.
DEVICE_REPLAY_S = 1e-3
#: calls of the pilot replay that sizes the timed unit (:data:`DEVICE_REPLAY_S`)
DEVICE_PILOT_CALLS = 8
#: timed replays per cell and process (their median is the process's device time): on an H200 the replays of
#: one process differ by < 0.3 % where processes differ by 0.5-0.8 % (docs/timing.md, "Device time")
DEVICE_REPLAYS = 5


def device_unit(per_call_s: float) -> int:
    """Calls one timed replay captures for a call of ``per_call_s`` device seconds (a pilot's): the smallest
    power of two whose replay lasts at least :data:`DEVICE_REPLAY_S`, between 1 and :data:`MAX_BLOCK_CALLS`."""
    need = DEVICE_REPLAY_S / max(per_call_s, 1e-12)
    return min(MAX_BLOCK_CALLS, 1 << max(0, math.ceil(math.log2(max(need, 1.0)))))


def measure_device(
    device, fn: Callable[[], object], m: Measurement, replays: int = DEVICE_REPLAYS, placements: int = 1
) -> None:
    """Device time per call of ``fn`` beside the host-timed blocks of ``m`` (filled in place).

    ``device`` is a :class:`harness.bench.devices.DeviceProfile`; its ``device_time(fn, calls, replays)``
    returns ``replays`` values of device seconds per call, each from one replay of ``calls`` calls
    (cuda: :func:`harness.bench.devices.cuda_graph_time`). A pilot replay of :data:`DEVICE_PILOT_CALLS`
    calls sizes the timed unit (:func:`device_unit`). Where the profile has no ``device_time``,
    or it raises (an op that cannot be captured), or it returns a value that is not a finite positive
    number of seconds, :attr:`Measurement.device` stays empty and :attr:`Measurement.device_note` says why:
    the cell is then judged on host time alone. ``placements``: how many placements of the inputs ``fn``
    cycles over (:func:`harness.bench.worker.placed_callable`), recorded as :attr:`Measurement.device_placements`.
    Never raises for the call's own failure."""
    if device.device_time is None:
        m.device_note = device.device_note
        return

    def problem(found: list[float]) -> str:
        if not found or not all(math.isfinite(v) and v > 0 for v in found):
            return f"no device time ({device.device_clock}): {len(found)} values, not all finite positive seconds"
        return ""

    try:
        pilot = [float(v) for v in device.device_time(fn, DEVICE_PILOT_CALLS, 1)]
        if not problem(pilot):
            calls = max(device_unit(pilot[0]), placements)  # every placement as often: both powers of two
            found = [float(v) for v in device.device_time(fn, calls, replays)]
    except Exception as exc:  # the op or the device cannot give it: said, and the host time still stands
        m.device_note = f"no device time ({device.device_clock}): {words(exc, 200)}"
        return
    bad = problem(pilot) or problem(found)
    if bad:
        m.device_note = bad
        return
    m.device, m.device_method, m.device_calls, m.device_placements = found, device.device_clock, calls, placements


class BlockTimer:
    """Times blocks of calls on one device (a :class:`harness.bench.devices.DeviceProfile`).

    ``time_block(fn, number)`` -> (block seconds, host enqueue seconds). ``clock`` is the host
    clock in integer nanoseconds (``time.perf_counter_ns``) and ``sleep`` rests the host for a
    number of seconds (``time.sleep``); tests pass fake ones.
    """

    def __init__(
        self, device, clock: Callable[[], int] = time.perf_counter_ns, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.sync = device.sync
        self.method = device.clock
        self.clock = clock
        self.sleep = sleep

    def _seconds(self) -> float:
        return self.clock() * 1e-9

    def time_block(self, fn: Callable[[], object], number: int) -> tuple[float, float]:
        """Synchronize, run ``fn`` ``number`` times, synchronize; return (block s, enqueue s)."""
        self.sync()
        t0 = self.clock()
        for _ in range(number):
            fn()
        t1 = self.clock()
        self.sync()
        t2 = self.clock()
        return (t2 - t0) * 1e-9, (t1 - t0) * 1e-9

    def overhead(self, repeats: int = 20) -> float:
        """Median seconds of an empty block (synchronize + clock reads): the cost added to every block."""
        return statistics.median(self.time_block(lambda: None, 0)[0] for _ in range(repeats))

    def sanity(self, fn: Callable[[], object], number: int) -> dict:
        """Does a timed block agree with a host clock read around it (and a synchronize after it)?

        Returns ``{"block_s", "outer_s", "overhead_s", "passed"}`` (seconds): passed when
        ``0 <= outer - block <= 2 * overhead + 1 ms``, i.e. the device was idle when the block's
        clock stopped, so the block time is the time of its calls.
        """
        overhead = self.overhead(5)
        t0 = self.clock()
        block, _ = self.time_block(fn, number)
        self.sync()
        outer = (self.clock() - t0) * 1e-9
        return {
            "block_s": block,
            "outer_s": outer,
            "overhead_s": overhead,
            "passed": 0.0 <= outer - block <= 2 * overhead + 1e-3,
        }

    def warmup(self, fn: Callable[[], object], warmup_s: float, max_calls: int = WARMUP_CALLS) -> int:
        """Untimed calls, each synchronized, until ``warmup_s`` seconds or ``max_calls`` calls
        (at least one). Returns the number of calls made."""
        deadline = self._seconds() + warmup_s
        calls = 0
        while True:
            fn()
            self.sync()
            calls += 1
            if calls >= max_calls or self._seconds() >= deadline:
                return calls

    def measure(
        self,
        fn: Callable[[], object],
        *,
        warmup_s: float = 0.05,
        warmup_calls: int = WARMUP_CALLS,
        measure_s: float = 0.5,
        min_block_s: float = 1e-3,
        max_overhead_fraction: float = 0.01,
        min_samples: int = 10,
        max_samples: int = MAX_SAMPLES,
        number: int | None = None,
        host_bound_blocks: int | None = None,
        duty: float = 1.0,
    ) -> Measurement:
        """Warm up, size the block, probe whether its work is deferred until the synchronize (once,
        after sizing; not with a given ``number``), then collect ``measure_s`` seconds of timed blocks.

        Args:
            fn: the call to time (its result is discarded).
            warmup_s: at most this many seconds of untimed, synchronized calls first.
            warmup_calls: at most this many warm-up calls.
            measure_s: seconds of timed blocks to collect (at least ``min_samples`` blocks, at most
                ``max_samples``); rests between blocks do not count.
            min_block_s: a block lasts at least this long (seconds), unless it reaches
                :data:`MAX_BLOCK_CALLS` calls first.
            max_overhead_fraction: timer overhead must stay below this share of a block.
            number: calls per block, skipping the sizing (a further layout of a cell already sized).
            host_bound_blocks: when the last sizing block is host-bound (host enqueue >=
                :func:`launch_ratio` of the block, after the deferral probe
                :meth:`probe_deferred`), collect exactly this many blocks instead:
                such a cell's time is host latency, whose spread between processes dwarfs the
                spread inside one (docs/methodology.md), so its blocks are spent on processes.
            duty: unless host-bound, the busy share of the timed period: before each timed block the
                device rests ``previous block × (1/duty − 1)`` seconds, then runs
                :data:`PREROLL_SHARE` of a block untimed (see the module docstring; 1: back to back).

        Raises:
            ValueError: ``duty`` is not in (0, 1].
        """
        if not 0 < duty <= 1:
            raise ValueError(f"duty must be in (0, 1], got {duty!r}")
        self.warmup(fn, warmup_s, warmup_calls)
        overhead = self.overhead()
        blocks, last, deferred = None, None, (False if self.method == "perf_counter" else None)
        if number is None:
            number, last, enqueue = self._size(fn, max(min_block_s, overhead / max_overhead_fraction))
            deferred = self.probe_deferred(fn, number, last, enqueue, overhead)
            if host_bound_blocks and self.method != "perf_counter" and enqueue >= launch_ratio(deferred) * last:
                blocks = host_bound_blocks
        m = Measurement(number=number, overhead_s=overhead, method=self.method, deferred=deferred)
        timed = 0.0
        while len(m.samples) < max_samples and (
            len(m.samples) < (blocks or min_samples) or (blocks is None and timed < measure_s)
        ):
            if duty < 1 and blocks is None:
                self._rest(fn, number, last, duty)
            last, enqueue = self.time_block(fn, number)
            timed += last
            m.samples.append(last / number)
            m.enqueue.append(enqueue / number)
        return m

    def probe_deferred(
        self, fn: Callable[[], object], number: int, block: float, enqueue: float, overhead: float
    ) -> bool | None:
        """Is the work of ``fn`` deferred until the synchronize, or submitted as issued (module docstring)?

        Enqueues one block of ``number`` calls, rests the host :data:`PROBE_REST` x the sized block's wait
        (``block - enqueue``: the device work left when the host has enqueued a block, on either kind of
        route; at least :data:`PROBE_WAIT_SHARE` of the block), then times the synchronize alone. Work
        submitted as issued finished during the rest: the synchronize costs its own ``overhead``. Deferred
        work starts only at the synchronize, which waits for its whole device time. Deferred when that
        wait, beyond ``overhead``, is at least :data:`PROBE_WAIT_SHARE` of the probe's block (enqueue +
        wait), :data:`PROBE_SIZED_SHARE` of the sized block's wait. The rest's
        length and the second share come from the sized block; the decision rests on the probe's own wait,
        which for deferred work is its whole device time and for work submitted as issued the synchronize's
        wake-up alone.

        Args:
            number: calls per block; block, enqueue: the sized block's seconds and its host enqueue
                seconds; overhead: an empty block's seconds (:meth:`overhead`).

        Returns False without running anything on the cpu clock (calls are synchronous), and None (not
        probed) where the sized block's host enqueue is at least :data:`HOST_BOUND_RATIO` of it and its
        wait under :data:`PROBE_SIZED_MIN_S`: that block was launch-bound under either rule
        (:func:`launch_ratio`), and so little work left at its synchronize cannot be told from a
        synchronize that a busy host delayed (on a loaded 2-core CI host, twice in a row, an emulated
        MPSGraph call whose work is done within the call read as deferred). A longer wait is probed
        whatever the enqueue share: a host descheduled during the one sizing block must not skip the
        probe of a Metal GEMM's real device time. Costs one block plus the rest; a cell found deferred
        is probed :data:`PROBE_TIMES` times, all of which must agree.
        """
        if self.method == "perf_counter":
            return False
        if enqueue >= HOST_BOUND_RATIO * block and block - enqueue < PROBE_SIZED_MIN_S:
            return None
        # deferred only when two probes in a row say so: a synchronize delayed once (a busy host, a slow
        # wake-up) must not label work that was submitted as issued
        return all(self._probe_once(fn, number, block, enqueue, overhead) for _ in range(PROBE_TIMES))

    def _probe_once(self, fn: Callable[[], object], number: int, block: float, enqueue: float, overhead: float) -> bool:
        self.sync()
        t0 = self.clock()
        for _ in range(number):
            fn()
        t1 = self.clock()
        self.sleep(PROBE_REST * max(block - enqueue, PROBE_WAIT_SHARE * block))
        t2 = self.clock()
        self.sync()
        t3 = self.clock()
        sized_wait = block - enqueue
        enqueue, waited = (t1 - t0) * 1e-9, (t3 - t2) * 1e-9
        # the sized block's wait counts only where it is long enough to tell from a synchronize's own wake-up
        sized = PROBE_SIZED_SHARE * sized_wait if sized_wait >= PROBE_SIZED_MIN_S else 0.0
        need = max(PROBE_WAIT_SHARE * (enqueue + waited), sized)
        return waited - overhead >= need

    def _rest(self, fn: Callable[[], object], number: int, block: float | None, duty: float) -> None:
        """Idle ``block × (1/duty − 1)`` seconds (none before the first block of a further layout,
        whose block time is not known yet), then run :data:`PREROLL_SHARE` of ``number`` calls untimed."""
        if block:
            self.sleep(block * (1 / duty - 1))
        for _ in range(max(1, int(number * PREROLL_SHARE))):
            fn()

    def _size(self, fn: Callable[[], object], target: float) -> tuple[int, float, float]:
        """Grow ``number`` until a block lasts ``target`` seconds or reaches :data:`MAX_BLOCK_CALLS`,
        at least doubling, as ``torch.utils.benchmark.Timer.blocked_autorange`` does. Returns
        (number, the last block's seconds, its enqueue seconds)."""
        number = 1
        while True:
            block, enqueue = self.time_block(fn, number)
            if block >= target or number >= MAX_BLOCK_CALLS:
                return number, block, enqueue
            number = min(MAX_BLOCK_CALLS, max(number * 2, int(number * target / max(block, 1e-9) * 1.1)))
