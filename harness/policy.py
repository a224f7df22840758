"""The verdict policy: which class a cell is in, each class's band, floor and target, and the one judge.

A cell is **launch-bound** when the host sets its time, kernel-bound otherwise. What that means for a
block depends on when the calls' work reaches the device, which the timer measures once per cell
(:meth:`harness.bench.timer.BlockTimer.probe_deferred`, stored as ``measurement.deferred``):

- work **submitted as issued** (CUDA launches): the device works while the host enqueues. The cell is
  launch-bound when, in more than a third of the processes that measured it, the host needed at least
  :data:`harness.bench.timer.HOST_BOUND_RATIO` (90 %) of a block's time to enqueue its calls, so the
  device had no backlog and sat idle between calls (the time is the host's launch rate, not the
  kernel's). Otherwise the host waited for the device at the block's final synchronize for more than a
  tenth of the block: the device was busy, whatever share of the call the host needed to enqueue it.
  (Until this rule the label was enqueue >= 0.5 x block time for every cell: on an H200, whose host
  took 15-20 µs to enqueue a GEMM, mm 2048³ fp16 at 694 TFLOP/s, its device busy, was labelled
  launch-bound.)
- work **deferred until the synchronize** (MPS's Metal GEMM: ``do_metal_mm`` encodes without a commit,
  ``aten/src/ATen/native/mps/operations/LinearAlgebra.mm`` @ ``001077cb``; ``torch.mps.synchronize``
  commits and waits, ``aten/src/ATen/mps/MPSHooks.mm`` @ ``fe0b902f``): the device starts at the
  synchronize, the block is enqueue + device time and the wait at the synchronize is the whole device
  time, so a long wait does not mean a busy device. The cell is launch-bound when the enqueue is at
  least the device time (block - enqueue): enqueue >= :data:`harness.bench.timer.DEFERRED_LAUNCH_RATIO`
  (50 %) of the block. Under the 90 % rule a Metal cell spending 60 % of its block encoding would be
  judged kernel-bound (±2 %) though the host sets its time.

Per class a :class:`Rule`: the verdict band (±2 % kernel-bound, ±5 % launch-bound: host latency varies
widely between processes, docs/methodology.md), the floor of processes per side
(:data:`harness.stats.MIN_PROCESSES`, :data:`harness.stats.MIN_PROCESSES_LAUNCH_BOUND`) and the CI
half-width adaptive rounds aim at (``--target-ci``, ``--target-ci-launch-bound``). The report, the
contrasts and the runner's adaptive rounds all judge a cell through :meth:`Policy.judge`; nothing else
chooses a band or a floor.

Pure: numbers and process records in, verdicts out (no filesystem).
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from harness import stats
from harness.bench.timer import Measurement, first_layout
from harness.options import TARGET_CI, TARGET_CI_LAUNCH_BOUND

if TYPE_CHECKING:
    from harness.document import CellRecord, Process


class CellClass(str, enum.Enum):
    """What sets a cell's time: the kernel on a busy device, or the host's launch rate."""

    KERNEL_BOUND = "kernel-bound"
    LAUNCH_BOUND = "launch-bound"


@dataclass(frozen=True)
class Rule:
    """One class's verdict band (fraction, 0.02 = ±2 %), floor (processes per side a verdict needs) and
    target (CI half-width, fraction, adaptive rounds aim at)."""

    band: float
    floor: int
    target: float


@dataclass(frozen=True)
class Policy:
    """A :class:`Rule` per :class:`CellClass`, and the CI level of every verdict."""

    kernel_bound: Rule = field(default_factory=lambda: Rule(0.02, stats.MIN_PROCESSES, TARGET_CI))
    launch_bound: Rule = field(
        default_factory=lambda: Rule(0.05, stats.MIN_PROCESSES_LAUNCH_BOUND, TARGET_CI_LAUNCH_BOUND)
    )
    confidence: float = 0.95

    def rule(self, cls: CellClass) -> Rule:
        return self.launch_bound if cls == CellClass.LAUNCH_BOUND else self.kernel_bound

    def with_targets(self, target: float | None, launch_target: float | None) -> Policy:
        """The same policy with the run's targets (None: keep the default of that class)."""
        return replace(
            self,
            kernel_bound=replace(self.kernel_bound, target=target or self.kernel_bound.target),
            launch_bound=replace(self.launch_bound, target=launch_target or self.launch_bound.target),
        )

    def judge(self, b: Sequence[float], a: Sequence[float], cls: CellClass, unresolved: int = 0) -> stats.Comparison:
        """A vs B for one cell of class ``cls``: :func:`harness.stats.compare` with B in the role of
        "stock" (time ratio A/B, speedup = B time / A time), at the class's band and floor.

        Args:
            b, a: per-process medians of each side, seconds, paired by round (the caller pairs them).
            unresolved: processes of those rounds timed below the timer's resolution
                (:attr:`harness.bench.timer.Measurement.below_resolution`): > 0, the cell is not judged.
        """
        rule = self.rule(cls)
        return stats.compare(
            b, a, threshold=rule.band, confidence=self.confidence, floor=rule.floor, unresolved=unresolved
        )


#: the policy of every report and run (a run's --target-ci values replace its targets: Policy.with_targets)
POLICY = Policy()


#: a cell is launch-bound when more than this share of its processes recorded host-bound blocks. Measured
#: on the H200 A/A of docs/examples/h200-aa-reclassified (docs/methodology.md, item 9): the sd of a cell's
#: log per-process medians was <= 1.3 % wherever at most a quarter of its processes were host-bound, and
#: 2.4-5.4 % for the GEMMs host-bound in 46-67 % of them (mm 4096x4096x256 fp16/bf16 at ~20 µs per call:
#: a process whose host enqueued a little slower left the device waiting and timed 21-23 µs instead of
#: 20.3-20.7 µs). Such a cell's time between processes is the host's, so it gets the host's band and floor;
#: under "more than half" the cells at 46-50 % were judged kernel-bound at ±2 % and never converged to ±1 %.
LAUNCH_BOUND_SHARE = 1 / 3


def classify(records: Sequence[CellRecord]) -> CellClass:
    """The class of one cell from every process that measured it (both sides of a comparison):
    launch-bound when more than :data:`LAUNCH_BOUND_SHARE` of them recorded blocks whose time the host
    set (:attr:`harness.bench.timer.Measurement.launch_bound`, recomputed from the raw samples, enqueue
    times and deferral probe, never read from the stored label), else kernel-bound: the device was busy
    in at least two thirds of the processes."""
    labels = [r.timed.launch_bound for r in records if r.measurement]
    return (
        CellClass.LAUNCH_BOUND if labels and sum(labels) > LAUNCH_BOUND_SHARE * len(labels) else CellClass.KERNEL_BOUND
    )


# ----------------------------------------------------------------------- what more processes cost


def measured_seconds(measurement: Measurement) -> float:
    """Seconds of timed blocks of the first layout behind one cell's measurement (samples are seconds
    per call): what ``measure_s`` buys. Rests between blocks, pre-rolls and further layouts cost the
    same whatever ``measure_s`` is, so :func:`cell_costs` counts them as overhead."""
    return sum(first_layout(measurement.samples, measurement.layouts or [])) * measurement.number


def cell_costs(processes: Sequence[Process]) -> tuple[float, float]:
    """(start-up, per-cell overhead) in seconds, medians over the processes run so far: start-up is
    interpreter + ``import torch`` (:func:`harness.results.startup_seconds`); the per-cell overhead is
    what a cell costs besides its first layout's timed blocks (:func:`measured_seconds`: inputs,
    warm-up, block sizing, rests between blocks, further layouts, checks, lazy device
    initialisation), so that a round with longer measurement can be estimated. (0, 0) before any."""
    timed = [p for p in processes if p.startup is not None and p.cells]
    if not timed:
        return 0.0, 0.0
    startup = statistics.median(p.startup for p in timed)
    overhead = []
    for p in timed:
        measured = sum(measured_seconds(c.timed) for c in p.cells if c.measurement)
        overhead.append(max(0.0, p.finished - p.worker_started - measured) / len(p.cells))
    return startup, statistics.median(overhead)


def round_seconds(processes: Sequence[Process], measure_s: list[list[float]]) -> float:
    """Estimated seconds of a round of processes, one per entry of ``measure_s`` (the seconds of timed
    blocks each of its cells gets): start-up, plus per cell the overhead and its measurement
    (:func:`cell_costs`); 0 before any process has run."""
    startup, overhead = cell_costs(processes)
    if not startup and not overhead:
        return 0.0
    return sum(startup + sum(overhead + t for t in cells) for cells in measure_s)
