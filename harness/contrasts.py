"""Contrasts: one (build, config) against another over a set of cells, and whether the claim holds.

A contrast (:class:`harness.evidence.Contrast`) names side A and side B, each a build under an env
config (``patched/all``, ``stock/vanilla``), the ops (and dtypes) it covers and a claim. Per covered
cell, the per-process medians of both sides are **paired by round**: only rounds in which both sides
measured the cell count (every round runs every (build, config) once, in a shuffled order, so two
processes of one round ran minutes apart on the same machine state; adaptive rounds that measured
only one side are left out). The two sets of process medians then go through the one comparison of
:func:`harness.stats.compare` (Hodges-Lehmann time ratio A/B, exact Moses CI, exact U test) and the
one verdict rule :func:`harness.stats.judge`, with B in the role of "stock": speedup = B time / A time,
at the band and floor of the cell's class (:mod:`harness.policy`: ±2 % and 4 processes per side for a
kernel-bound cell, ±5 % and 6 for a launch-bound one). Stock vs patched under one config is such a
contrast (``patched/C`` vs ``stock/C``): the report's per-config tables, summaries and plots are these
contrasts' results, computed here once (:func:`for_run`).

Claims (the rule is stated in the report):

- ``faster``: **shown** when every covered cell's verdict is ``faster`` (whole CI beyond the band),
  **contradicted** when any cell is ``slower``, else **not shown** (some cell undetermined/equivalent);
- ``unchanged`` / ``equivalent``: an equivalence test by the CI-inside-the-band rule (two one-sided
  tests read off one CI; :func:`harness.stats.judge` ``Cause.INSIDE_BAND``): **equivalent within ±t**
  when every cell's CI lies inside ±t (t = the cell's band), **contradicted** when
  any cell is faster or slower (whole CI beyond the band), else **not shown**;
- ``none``: numbers only.

Pure numbers from results.json (no filesystem), so the report re-renders it byte for byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from harness import document as doc
from harness import stats
from harness.bench.timer import PER_CALL_CLOCKS, below_resolution
from harness.bench.workloads import Cell
from harness.document import CellRecord, RunDocument
from harness.evidence import EQUIVALENCE_CLAIMS, Contrast, Side
from harness.policy import POLICY, CellClass, Policy, classify

#: a claim's outcome
SHOWN, NOT_SHOWN, CONTRADICTED = "shown", "not shown", "contradicted"
NO_CLAIM, NOT_MEASURED = "no claim", "not measured"
#: a cell not judged (:attr:`ContrastRow.below_resolution`), as the tallies and tables name it
BELOW_RESOLUTION = "below timer resolution"


#: which time a row's medians are and its verdict judged: the host-timed blocks, or the device's own time
HOST, DEVICE = "host", "device"


@dataclass(frozen=True)
class Dispatch:
    """The host-time ("dispatch") side of a launch-bound cell judged on device time: A's and B's per-process
    host medians (seconds) of the rounds both measured, and B-vs-A at the launch-bound band and floor."""

    rounds: tuple[int, ...]
    a: tuple[float, ...]
    b: tuple[float, ...]
    cmp: stats.Comparison


@dataclass(frozen=True)
class ContrastRow:
    """One covered cell: A's and B's per-process medians (seconds) of the paired rounds, and B-vs-A.

    ``time`` says which time ``a``/``b`` hold and ``cmp`` judged: :data:`HOST` (the host-timed blocks) or
    :data:`DEVICE` (the device's own time, :attr:`harness.bench.timer.Measurement.device`). A launch-bound
    cell with device time on both sides is judged on device time at the kernel-bound band ("kernel"), and
    its host time is judged apart at the launch-bound band (``dispatch``, "dispatch"); every other cell has
    one verdict, on host time."""

    cell: Cell
    rounds: tuple[int, ...]
    a: tuple[float, ...]
    b: tuple[float, ...]
    cmp: stats.Comparison
    cls: CellClass
    notes: tuple[str, ...] = ()
    time: str = HOST
    dispatch: Dispatch | None = None

    @property
    def launch_bound(self) -> bool:
        return self.cls == CellClass.LAUNCH_BOUND

    @property
    def judged(self) -> CellClass:
        """The class whose rule (band, floor, target) ``cmp`` used: kernel-bound for a cell judged on device
        time (the device's time of a launch-bound cell is kernel time), else :attr:`cls`."""
        return CellClass.KERNEL_BOUND if self.time == DEVICE else self.cls

    @property
    def below_resolution(self) -> bool:
        """Not judged: a process of the paired rounds timed blocks below the timer's resolution (:func:`unresolved`)."""
        return self.cmp.cause == stats.Cause.BELOW_RESOLUTION

    @property
    def a_median(self) -> float | None:
        return stats.process_median(self.a) if self.a else None

    @property
    def b_median(self) -> float | None:
        return stats.process_median(self.b) if self.b else None


@dataclass(frozen=True)
class ContrastResult:
    """A contrast evaluated on one run: its rows, the claim's outcome and why (one line)."""

    contrast: Contrast
    rows: tuple[ContrastRow, ...]
    outcome: str
    why: str
    thresholds: tuple[float, ...] = field(default=())
    geomean: stats.GeoMean | None = None

    @property
    def deciding(self) -> tuple[ContrastRow, ...]:
        """The cells that decide the outcome or contradict the claim: for ``faster``, the cells that are
        faster when it is shown, the slower ones when contradicted; for an equivalence claim the cells
        beyond the band when contradicted (a shown equivalence is decided by every cell alike: none are
        singled out); without a claim, the cells that changed (faster or slower)."""
        claim, verdicts = self.contrast.claim, (stats.FASTER, stats.SLOWER)
        if self.outcome == CONTRADICTED:
            wanted = (stats.SLOWER,) if claim == "faster" else verdicts
        elif claim == "faster" and self.outcome == SHOWN:
            wanted = (stats.FASTER,)
        elif claim == "none":
            wanted = verdicts
        else:
            wanted = ()
        return tuple(r for r in self.rows if r.cmp.verdict in wanted)

    @property
    def undetermined(self) -> tuple[ContrastRow, ...]:
        """The undetermined cells more processes could decide: not those below the timer's resolution
        (:attr:`below_resolution`), which no number of processes resolves."""
        return tuple(r for r in self.rows if r.cmp.verdict == stats.UNDETERMINED and not r.below_resolution)

    @property
    def below_resolution(self) -> tuple[ContrastRow, ...]:
        """The cells not judged because a process timed them below the timer's resolution."""
        return tuple(r for r in self.rows if r.below_resolution)


def _paired(
    records_a: tuple[CellRecord, ...], records_b: tuple[CellRecord, ...], time=CellRecord.median
) -> tuple[tuple[int, ...], list[float], list[float]]:
    """Per-process times of both sides in the rounds where both measured the cell, in round order: ``time`` of
    each measured record (its median, recomputed from the raw samples; or
    :meth:`harness.document.CellRecord.device_median`, where a record without device time is left out)."""
    a, b = (
        {r.round: t for r in records if r.measured and (t := time(r)) is not None} for records in (records_a, records_b)
    )
    rounds = tuple(sorted(set(a) & set(b)))
    return rounds, [a[r] for r in rounds], [b[r] for r in rounds]


def _side_records(run: RunDocument, side: Side, key: str) -> tuple[CellRecord, ...]:
    return run.records(side.config, key, side.build)


def _notes(records) -> tuple[str, ...]:
    """The failed/skipped reasons of a cell's records, once each."""
    return tuple(dict.fromkeys(r.problem for r in records if r.problem))


def rows(run: RunDocument, contrast: Contrast, policy: Policy = POLICY) -> list[ContrastRow]:
    """The covered cells of ``contrast`` in plan order, each judged by ``policy`` at its class's band and
    floor (:func:`harness.policy.classify` over both sides' processes), from the run's one index
    (:attr:`harness.document.RunDocument.by_cell`)."""
    out = []
    for key in run.header.cells:
        cell = Cell.from_key(key)
        if not contrast.covers(cell.op, cell.dtype):
            continue
        rec_a, rec_b = _side_records(run, contrast.a, key), _side_records(run, contrast.b, key)
        if not rec_a and not rec_b:
            continue
        rounds, a, b = _paired(rec_a, rec_b)
        cls = classify(rec_a + rec_b)
        host = policy.judge(b, a, cls, unresolved(rec_a + rec_b, rounds))
        notes = _notes(rec_a + rec_b)
        launch = cls == CellClass.LAUNCH_BOUND
        d_rounds, da, db = _paired(rec_a, rec_b, CellRecord.device_median) if launch else ((), [], [])
        if d_rounds and unresolved_device(rec_a + rec_b, d_rounds):  # the device's clock cannot resolve it
            notes += ("device time below its clock's resolution: judged on host time",)
            d_rounds = ()
        if d_rounds:  # kernel time decides; the host time is the dispatch verdict beside it
            kernel = policy.judge(db, da, CellClass.KERNEL_BOUND)
            dispatch = Dispatch(rounds, tuple(a), tuple(b), host)
            if len(d_rounds) < len(rounds):  # a probe or a capture failed in some rounds: said, not hidden
                notes += (f"device time in {len(d_rounds)} of {len(rounds)} paired rounds",)
            out.append(ContrastRow(cell, d_rounds, tuple(da), tuple(db), kernel, cls, notes, DEVICE, dispatch))
        else:
            out.append(ContrastRow(cell, rounds, tuple(a), tuple(b), host, cls, notes))
    return out


def unresolved(records: tuple[CellRecord, ...], rounds: tuple[int, ...]) -> int:
    """How many of ``records`` in ``rounds`` (the paired rounds that are judged) timed blocks below the
    timer's resolution (:attr:`harness.bench.timer.Measurement.below_resolution`, from the raw samples):
    the one rule every judged time takes (cells, contrasts across configs, the merge of several machines,
    which evaluates each machine's contrasts here)."""
    return sum(1 for r in records if r.round in rounds and r.below_resolution)


def unresolved_device(records: tuple[CellRecord, ...], rounds: tuple[int, ...]) -> int:
    """:func:`unresolved` for device time: records in ``rounds`` whose replayed unit (device seconds per call x
    ``device_calls``; one call for a clock that rounds each call, :data:`harness.bench.timer.PER_CALL_CLOCKS`)
    lasts under the resolution floor of its clock (``device_method``: :func:`harness.bench.timer.below_resolution`)."""
    out = 0
    for r in records:
        device = r.device_median() if r.round in rounds else None
        if device is not None:
            method = r.measurement.get("device_method", "")
            calls = 1 if method in PER_CALL_CLOCKS else (r.measurement.get("device_calls") or 1)
            out += below_resolution(device, calls, method)
    return out


def geomean(found: list[ContrastRow], policy: Policy = POLICY) -> stats.GeoMean:
    """The contrast's summary over its cells (:func:`harness.stats.geomean_by_process`, the kernel-bound
    band): each round's process of each side becomes its geometric-mean time over the cells, paired by
    round like the cells (a round in which a side did not measure every cell is left out and counted).
    Cells below the timer's resolution (``Cause.BELOW_RESOLUTION``) are left out and counted too."""
    below = [r for r in found if r.below_resolution]
    found = [r for r in found if not r.below_resolution]
    keep = [r for r in found if r.rounds]
    rounds = sorted({n for r in keep for n in r.rounds})
    index = {n: i for i, n in enumerate(rounds)}
    b = np.full((len(rounds), len(keep)), np.nan)
    a = np.full((len(rounds), len(keep)), np.nan)
    for j, r in enumerate(keep):
        for n, va, vb in zip(r.rounds, r.a, r.b):
            a[index[n], j], b[index[n], j] = va, vb
    return stats.geomean_by_process(
        b, a, threshold=policy.kernel_bound.band, confidence=policy.confidence, unresolved=len(below)
    )


def claim_outcome(claim: str, verdicts: list[str]) -> str:
    """:data:`SHOWN` / :data:`NOT_SHOWN` / :data:`CONTRADICTED` / :data:`NO_CLAIM` from the cells' verdicts
    (see the module docstring for the rule)."""
    if claim == "none":
        return NO_CLAIM
    if not verdicts:
        return NOT_MEASURED
    if claim == "faster":
        if stats.SLOWER in verdicts:
            return CONTRADICTED
        return SHOWN if all(v == stats.FASTER for v in verdicts) else NOT_SHOWN
    if claim in EQUIVALENCE_CLAIMS:
        if stats.FASTER in verdicts or stats.SLOWER in verdicts:
            return CONTRADICTED
        return SHOWN if all(v == stats.EQUIVALENT for v in verdicts) else NOT_SHOWN
    raise ValueError(f"unknown claim {claim!r}")


def _band(thresholds: list[float]) -> str:
    return " / ".join(f"±{t:.0%}" for t in sorted(set(thresholds)))


def for_run(run: RunDocument) -> tuple[Contrast, ...]:
    """The contrasts a run is reported by (:attr:`harness.document.RunDocument.contrasts`)."""
    return doc.of(run).contrasts


def evaluate_all(run: RunDocument, policy: Policy = POLICY) -> list[ContrastResult]:
    """Every contrast of the run (:func:`for_run`), evaluated once."""
    run = doc.of(run)
    return [evaluate(run, c, policy) for c in run.contrasts]


def evaluate(run: RunDocument, contrast: Contrast, policy: Policy = POLICY) -> ContrastResult:
    """Evaluate one contrast on a run (see the module docstring): rows, outcome, a one-line why, summary."""
    run = doc.of(run)
    head = run.header
    absent = [s.label for s in (contrast.a, contrast.b) if s.build not in head.builds or s.config not in head.configs]
    if absent:
        return ContrastResult(
            contrast,
            (),
            NOT_MEASURED,
            f"{' and '.join(absent)} not in this run (builds {', '.join(head.builds)}; "
            f"configs {', '.join(head.configs)})",
        )
    found = rows(run, contrast, policy)
    if not found:
        return ContrastResult(contrast, (), NOT_MEASURED, "no cell of this run is covered (ops/dtypes)")
    verdicts = [r.cmp.verdict for r in found]
    thresholds = [r.cmp.threshold for r in found]
    outcome = claim_outcome(contrast.claim, verdicts)
    labels = [BELOW_RESOLUTION if r.below_resolution else r.cmp.verdict for r in found]
    counts = {v: labels.count(v) for v in (*stats.VERDICTS, BELOW_RESOLUTION) if labels.count(v)}
    tally = ", ".join(f"{n} {v}" for v, n in counts.items())
    ratios = [r.cmp.speedup for r in found if math.isfinite(r.cmp.speedup)]
    span = (
        ""
        if not ratios
        else f"; speedup {ratios[0]:.3f}×"
        if len(ratios) == 1
        else f"; speedups {min(ratios):.3f}-{max(ratios):.3f}×"
    )
    cells = f"{len(found)} cell" + ("" if len(found) == 1 else "s")
    if contrast.claim in EQUIVALENCE_CLAIMS and outcome == SHOWN:
        why = f"equivalent within {_band(thresholds)} on all {cells}{span}"
    elif contrast.claim in EQUIVALENCE_CLAIMS:
        why = f"equivalence within {_band(thresholds)} {outcome}: {tally} of {cells}{span}"
    elif contrast.claim == "faster":
        why = f"faster beyond {_band(thresholds)} {outcome}: {tally} of {cells}{span}"
    else:
        why = f"{tally} of {cells}{span}"
    summary = geomean([r for r in found if math.isfinite(r.cmp.ratio) or r.below_resolution], policy)
    return ContrastResult(contrast, tuple(found), outcome, why, tuple(sorted(set(thresholds))), summary)
