"""Device-synchronised timing of a callable, in blocks sized so timer overhead is negligible.

What is measured, per device:

- ``cuda``: CUDA events recorded on the current stream before and after a block of ``number``
  back-to-back calls; ``elapsed_time`` is **device time** (ms → s). No sync inside the block.
- ``mps``: ``torch.mps.Event(enable_timing=True)`` pairs, likewise device time.
- ``cpu``: ``time.perf_counter_ns`` around the block (host time == execution time on the CPU).

For every block the host time spent enqueuing the ``number`` calls is recorded too. When the
host needs about as long to enqueue a call as the device needs to run it, the device was
waiting for the host: the cell is **launch-bound** and its time is host-visible latency, not
kernel time (device_notes: up to 10x between methods on such cells). We say which.

Block sizing follows ``torch.utils.benchmark.Timer.blocked_autorange``: measure the timer's own
overhead (an empty block), then double ``number`` until one block lasts at least
``max(min_block_s, overhead / max_overhead_fraction)``, so overhead stays under 1% of a block.
Each sample is ``block_time / number`` seconds per call; all samples are kept.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

#: host-enqueue / device time per call above which a cell is labelled launch-bound
LAUNCH_BOUND_RATIO = 0.5


@dataclass
class Measurement:
    """Raw per-call times of one cell in one process.

    Attributes:
        samples: seconds per call, one value per block (block time / ``number``).
        enqueue: host seconds per call spent enqueuing, one value per block (== samples on cpu).
        number: calls per block.
        overhead_s: the timer's own cost for one empty block, seconds.
        method: ``cuda-events`` | ``mps-events`` | ``perf_counter``.
    """

    samples: list[float] = field(default_factory=list)
    enqueue: list[float] = field(default_factory=list)
    number: int = 1
    overhead_s: float = 0.0
    method: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def launch_bound(self) -> bool:
        """True when the host enqueue time per call is >= LAUNCH_BOUND_RATIO x the device time."""
        if self.method == "perf_counter" or not self.samples:
            return False
        return statistics.median(self.enqueue) >= LAUNCH_BOUND_RATIO * self.median

    def to_json(self) -> dict:
        out = asdict(self)
        out["median"] = self.median if self.samples else None
        out["launch_bound"] = self.launch_bound
        return out


class BlockTimer:
    """Times blocks of calls on one device. ``time_block(fn, number)`` -> (seconds, enqueue seconds)."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = device
        self._torch = torch
        if device == "cuda":
            self.method = "cuda-events"
            self._event = lambda: torch.cuda.Event(enable_timing=True)
            self.sync = torch.cuda.synchronize
        elif device == "mps":
            self.method = "mps-events"
            self._event = lambda: torch.mps.event.Event(enable_timing=True)
            self.sync = torch.mps.synchronize
        elif device == "cpu":
            self.method = "perf_counter"
            self._event = None
            self.sync = lambda: None
        else:
            raise ValueError(f"unknown device {device!r}")

    def time_block(self, fn: Callable[[], object], number: int) -> tuple[float, float]:
        """Run ``fn`` ``number`` times; return (block seconds, host enqueue seconds)."""
        if self._event is None:
            t0 = time.perf_counter_ns()
            for _ in range(number):
                fn()
            dt = (time.perf_counter_ns() - t0) * 1e-9
            return dt, dt
        start, end = self._event(), self._event()
        self.sync()
        t0 = time.perf_counter_ns()
        start.record()
        for _ in range(number):
            fn()
        end.record()
        enqueue = (time.perf_counter_ns() - t0) * 1e-9
        end.synchronize()
        return start.elapsed_time(end) * 1e-3, enqueue

    def overhead(self, repeats: int = 20) -> float:
        """Median seconds of an empty block: the cost the timer adds to every block."""
        return statistics.median(self.time_block(lambda: None, 0)[0] for _ in range(repeats))

    def measure(
        self,
        fn: Callable[[], object],
        *,
        warmup_s: float = 0.05,
        measure_s: float = 0.5,
        min_block_s: float = 1e-3,
        max_overhead_fraction: float = 0.01,
        min_samples: int = 10,
        max_samples: int = 2000,
    ) -> Measurement:
        """Warm up, size the block, then collect samples for about ``measure_s`` seconds.

        Args:
            fn: the call to time (its result is discarded).
            warmup_s: seconds of untimed calls first (kernel selection, caches, clocks).
            measure_s: seconds of timed blocks to collect (at least ``min_samples`` blocks).
            min_block_s: a block lasts at least this long (seconds).
            max_overhead_fraction: timer overhead must stay below this share of a block.
        """
        deadline = time.perf_counter() + warmup_s
        fn()
        self.sync()
        while time.perf_counter() < deadline:
            fn()
        self.sync()
        overhead = self.overhead()
        target = max(min_block_s, overhead / max_overhead_fraction)
        number = 1
        while True:
            block, _ = self.time_block(fn, number)
            if block >= target or number >= 1 << 20:
                break
            # grow towards the target, at least doubling, as blocked_autorange does
            number = max(number * 2, int(number * target / max(block, 1e-9) * 1.1))
        m = Measurement(number=number, overhead_s=overhead, method=self.method)
        stop = time.perf_counter() + measure_s
        while len(m.samples) < max_samples and (len(m.samples) < min_samples or time.perf_counter() < stop):
            block, enqueue = self.time_block(fn, number)
            m.samples.append(block / number)
            m.enqueue.append(enqueue / number)
        return m
