"""Contrasts: one (build, config) against another over a set of cells, and whether the claim holds.

A contrast (:class:`harness.evidence.Contrast`) names side A and side B, each a build under an env
config (``patched/all``, ``stock/vanilla``), the ops (and dtypes) it covers and a claim. Per covered
cell, the per-process medians of both sides are **paired by round**: only rounds in which both sides
measured the cell count (every round runs every (build, config) once, in a shuffled order, so two
processes of one round ran minutes apart on the same machine state; adaptive rounds that measured
only one side are left out). The two sets of process medians then go through the one comparison of
:func:`harness.stats.compare` (Hodges-Lehmann time ratio A/B, exact Moses CI, exact U test) and the
one verdict rule :func:`harness.stats.judge`, with B in the role of "stock": speedup = B time / A time.

Claims (the rule is stated in the report):

- ``faster``: **shown** when every covered cell's verdict is ``faster`` (whole CI beyond the band),
  **contradicted** when any cell is ``slower``, else **not shown** (some cell undetermined/equivalent);
- ``unchanged`` / ``equivalent``: an equivalence test by the CI-inside-the-band rule (two one-sided
  tests read off one CI; :func:`harness.stats.judge` ``Cause.INSIDE_BAND``): **equivalent within ±t**
  when every cell's CI lies inside ±t (t = 2 %, 5 % for launch-bound cells), **contradicted** when
  any cell is faster or slower (whole CI beyond the band), else **not shown**;
- ``none``: numbers only.

Pure numbers from results.json (no filesystem), so the report re-renders it byte for byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness import results as res
from harness import stats
from harness.bench.workloads import Cell
from harness.evidence import EQUIVALENCE_CLAIMS, Contrast, Side

#: a claim's outcome
SHOWN, NOT_SHOWN, CONTRADICTED = "shown", "not shown", "contradicted"
NO_CLAIM, NOT_MEASURED = "no claim", "not measured"


@dataclass(frozen=True)
class ContrastRow:
    """One covered cell: A's and B's per-process medians (seconds) of the paired rounds, and B-vs-A."""

    cell: Cell
    rounds: tuple[int, ...]
    a: tuple[float, ...]
    b: tuple[float, ...]
    cmp: stats.Comparison
    launch_bound: bool

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


def _paired(records_a: list[dict], records_b: list[dict]) -> tuple[tuple[int, ...], list[float], list[float]]:
    """Per-process medians of both sides in the rounds where both measured the cell, in round order."""
    a = {r["round"]: m for r in records_a for m in res.process_medians([r])}  # recomputed from the raw samples
    b = {r["round"]: m for r in records_b for m in res.process_medians([r])}
    rounds = tuple(sorted(set(a) & set(b)))
    return rounds, [a[r] for r in rounds], [b[r] for r in rounds]


def _side_records(table: dict, side: Side, key: str) -> list[dict]:
    return table.get(side.config, {}).get(key, {}).get(side.build, [])


def rows(data: dict, contrast: Contrast, threshold: float, launch_threshold: float) -> list[ContrastRow]:
    """The covered cells of ``contrast`` in plan order; ``threshold`` is the verdict band, and
    ``launch_threshold`` the band of launch-bound cells (:func:`harness.results.launch_bound`)."""
    table = res.cell_table(data)
    out = []
    for key in data["run"]["cells"]:
        cell = Cell.from_key(key)
        if not contrast.covers(cell.op, cell.dtype):
            continue
        rec_a, rec_b = _side_records(table, contrast.a, key), _side_records(table, contrast.b, key)
        if not rec_a and not rec_b:
            continue
        rounds, a, b = _paired(rec_a, rec_b)
        slow_host = res.launch_bound(rec_a + rec_b)
        cmp = stats.compare(
            b, a, threshold=launch_threshold if slow_host else threshold, floor=stats.floor_for(slow_host)
        )
        out.append(ContrastRow(cell, rounds, tuple(a), tuple(b), cmp, slow_host))
    return out


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


def evaluate(data: dict, contrast: Contrast, threshold: float, launch_threshold: float) -> ContrastResult:
    """Evaluate one contrast on a run (see the module docstring): rows, outcome, a one-line why."""
    run = data["run"]
    absent = [
        s.label for s in (contrast.a, contrast.b) if s.build not in run["builds"] or s.config not in run["configs"]
    ]
    if absent:
        return ContrastResult(
            contrast,
            (),
            NOT_MEASURED,
            f"{' and '.join(absent)} not in this run (builds {', '.join(run['builds'])}; "
            f"configs {', '.join(run['configs'])})",
        )
    found = rows(data, contrast, threshold, launch_threshold)
    if not found:
        return ContrastResult(contrast, (), NOT_MEASURED, "no cell of this run is covered (ops/dtypes)")
    verdicts = [r.cmp.verdict for r in found]
    thresholds = [r.cmp.threshold for r in found]
    outcome = claim_outcome(contrast.claim, verdicts)
    counts = {v: verdicts.count(v) for v in stats.VERDICTS if verdicts.count(v)}
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
    return ContrastResult(contrast, tuple(found), outcome, why, tuple(sorted(set(thresholds))))
