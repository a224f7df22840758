"""What it would take to decide the undetermined cells: the noise floor, each cell's minimum detectable
effect, the processes and minutes to reach a verdict, and the command that resumes the run to get there.

Numbers only from results.json and the evaluated contrasts (:mod:`harness.contrasts`); nothing measured.

- **Noise floor** of a (config, cell class): the median over its cells of the between-process spread,
  the standard deviation of the log per-process medians around each side's mean, pooled over both sides
  of the ``patched/C`` vs ``stock/C`` contrast (cross-config contrasts: over the cells they cover). It is
  what one more process buys back, and what no longer measurement in one process can narrow.
- **Minimum detectable effect** (MDE) of an undetermined cell at the processes it had: band + the CI's
  half-width. A change that large lifts the whole CI beyond the band (at this width), so these processes
  could have shown it; a smaller one could not be told from no change.
- **Goal**: the CI half-width that decides the cell at its point estimate ``d`` (relative change):
  ``band − |d|`` for equivalence, ``|d| − band`` for a change beyond the band, at least a quarter of the
  band (an estimate at the band's edge needs a CI far narrower than either: ``at the edge``).
- **Processes**: the fewest ``n'`` (at least the class's floor) at which the CI predicted from the cell's
  between-process spread ``sd`` (pooled over both sides; the noise floor's where the cell has fewer than
  2 + 2 processes) is at most the goal: :func:`predicted_half_width`, ``1.96 · sd · √(2/n') · √(π/3)``
  (the Hodges-Lehmann estimate's efficiency 3/π against the mean) times the exact CI's small-sample factor
  (:data:`MOSES_SMALL_N`: 1.66 at 4 + 4 processes, where the CI is the range of all 16 differences). Not
  the CI's own width scaled by 1/√n: at 4 + 4 that width is set by the extremes, and scaling it predicted
  resumed CIs 1.3 times too wide (``benchmarks/resume_prediction.py``, docs/methodology.md). Where the
  cell's CI is already wider than its spread predicts at its own n (heavy tails, two levels), the
  prediction is scaled up by that excess, so a cell whose CI misses its goal is never given no more.
- **What the command runs**: a run without adaptive rounds resumes with ``--rounds N`` (N in all), which
  runs every cell under every (build, config) in each added round: the added rounds times the run's
  processes per round, each costing the median wall time (``finished - started``) of that side's processes
  so far; a cell gets its own processes plus the added rounds. A run with adaptive rounds resumes with
  ``--target-ci`` / ``--target-ci-launch-bound`` at the goals and ``--budget-s`` at the estimate: every
  ``patched/C`` vs ``stock/C`` cell whose CI is wider than its target gets processes (as many as
  :func:`predicted_half_width` says reach the target) until it reaches the target or the run reaches
  :data:`harness.runner.MAX_ROUNDS` rounds in all; each
  process costs the start-up plus, per cell, the per-cell overhead and the cell's latest timed-block
  seconds (:func:`harness.policy.cell_costs`, which needs the workers' start records). A cell whose
  verdict needs more processes than the command can give (adaptive: the rounds left to MAX_ROUNDS; either
  mode: more than :data:`MAX_PROCESSES`) is named as out of its reach; the command still takes it as far
  as it goes. Time unknown (None) when the run's processes carry no start time.
- **Predicted width**: per undetermined cell, the CI half-width at the processes the command gives it
  (:func:`predicted_half_width`), so that a resumed run can be checked against it.
- **Command**: ``compare`` keeps every finished process of ``--out`` and adds the rest.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness import document as doc
from harness import options
from harness.contrasts import ContrastResult, ContrastRow
from harness.document import RunDocument
from harness.policy import POLICY, CellClass, Policy, cell_costs, measured_seconds

#: more processes per side than this: not a sensible cost (the report says so instead of a number)
MAX_PROCESSES = 200
#: adaptive rounds stop at this many rounds in all: :data:`harness.runner.MAX_ROUNDS`, copied because the
#: runner imports the report, which imports this module (tests/test_undetermined.py asserts they agree)
MAX_ROUNDS = 64


@dataclass(frozen=True)
class NoiseFloor:
    """The between-process spread of one (config, class): ``sd`` (of log per-process medians, a fraction
    for small values) as the median over ``cells`` cells."""

    config: str
    cls: CellClass
    sd: float
    cells: int


@dataclass(frozen=True)
class Need:
    """One undetermined cell of one contrast: processes per side it had (``n``), its CI half-width (NaN:
    none), its MDE (fraction), the goal half-width, processes per side to reach it (``None``: more than
    :data:`MAX_PROCESSES`), whether its estimate sits at the band's edge, and the between-process spread
    the prediction starts from (``sd``, of log times: the row's own, or the noise floor's where the row has
    fewer than 2 + 2 processes; NaN: none) and ``excess``, how much wider the row's CI is than that spread
    predicts at its ``n`` (at least 1: a prediction never narrower than the CI already is)."""

    result: ContrastResult
    row: ContrastRow
    n: int
    half_width: float
    mde: float
    goal: float
    processes: int | None
    edge: bool
    sd: float = math.nan
    excess: float = 1.0

    def width_at(self, processes: int) -> float:
        """Predicted CI half-width (fraction) at ``processes`` per side: :func:`predicted_half_width` of the
        spread, times ``excess`` (NaN: no spread to start from)."""
        return predicted_half_width(self.sd, processes) * self.excess if math.isfinite(self.sd) else math.nan


def spread(row: ContrastRow) -> float:
    """Pooled within-side standard deviation of the log per-process medians of one row (NaN below 2+2)."""
    sides = [[math.log(v) for v in side if v > 0] for side in (row.a, row.b)]
    sides = [s for s in sides if len(s) >= 2]
    df = sum(len(s) - 1 for s in sides)
    if not sides or df < 2:
        return math.nan
    ss = sum(sum((v - statistics.fmean(s)) ** 2 for v in s) for s in sides)
    return math.sqrt(ss / df)


def noise_floors(results: list[ContrastResult]) -> list[NoiseFloor]:
    """One :class:`NoiseFloor` per (config, class) of the run's ``patched/C`` vs ``stock/C`` contrasts (or,
    for a run without them, of every contrast's A side config), in run order; cells below the timer's
    resolution (no judged times) do not count."""
    per: dict[tuple[str, CellClass], list[float]] = {}
    same = [r for r in results if r.contrast.a.config == r.contrast.b.config] or results
    for result in same:
        for row in result.rows:
            if row.below_resolution:
                continue
            sd = spread(row)
            if math.isfinite(sd):
                per.setdefault((result.contrast.a.config, row.judged), []).append(sd)
    return [NoiseFloor(c, k, statistics.median(v), len(v)) for (c, k), v in per.items()]


def floor_of(floors: list[NoiseFloor], config: str, cls: CellClass) -> float:
    return next((f.sd for f in floors if f.config == config and f.cls == cls), math.nan)


#: how much wider the exact 95 % Moses CI's wider arm is, at n + n processes (n = 4, 5, … 64; the median over
#: 20,000 pairs of normal samples), than the large-sample ``1.96 · sd · √(2/n) · √(π/3)``: at n = 4 the CI
#: is the range of all 16 differences. Source: ``benchmarks/moses_width.py --reps 20000`` (its docstring);
#: beyond 64 the last value (the formula's own limit is 1). Not monotone: the CI's rank k moves in steps.
MOSES_SMALL_N = (
    1.655, 1.46, 1.309, 1.293, 1.185, 1.232, 1.192, 1.156, 1.16, 1.153, 1.117, 1.134, 1.121, 1.103, 1.108,
    1.092, 1.09, 1.087, 1.083, 1.076, 1.082, 1.074, 1.077, 1.078, 1.068, 1.066, 1.063, 1.059, 1.064, 1.061,
    1.057, 1.058, 1.059, 1.053, 1.051, 1.052, 1.051, 1.055, 1.052, 1.049, 1.05, 1.048, 1.05, 1.045, 1.044,
    1.045, 1.044, 1.042, 1.042, 1.041, 1.042, 1.041, 1.039, 1.04, 1.039, 1.037, 1.039, 1.038, 1.037, 1.036,
    1.036,
)  # fmt: skip


def predicted_half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    """Half-width (fraction, the CI's wider arm as :attr:`harness.stats.Comparison.half_width`) of the exact
    CI at ``n`` processes per side (n >= 4) for a between-process spread ``sd`` (of log times): the
    large-sample ``z · sd · √(2/n) · √(π/3)`` (the Hodges-Lehmann estimate's efficiency 3/π against the mean,
    Hodges & Lehmann 1963) times :data:`MOSES_SMALL_N` at ``n``. Checked against runs that have the later
    rounds (``benchmarks/resume_prediction.py``, docs/methodology.md): predicted from 4 rounds, the width at
    10 processes per side was within a factor 1.5 for 43 of 55 rows of 10 H200 and cpu runs (median actual
    / predicted 1.08, with :attr:`Need.excess`), at 12 for 26 of 33 (0.96), where the CI's own width
    scaled by 1/√n had 32 of 55 and 16 of 33 (0.78 and 0.72: too wide). NaN below 4 (no exact 95 % CI)."""
    if n < 4:
        return math.nan
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    small = MOSES_SMALL_N[min(n, 3 + len(MOSES_SMALL_N)) - 4]
    return math.expm1(z * sd * math.sqrt(2 / n) * math.sqrt(math.pi / 3) * small)


def processes_for(sd: float, goal: float, floor: int, cap: int = MAX_PROCESSES, confidence: float = 0.95) -> int | None:
    """The fewest processes per side (at least ``floor``) at which :func:`predicted_half_width` of ``sd`` is
    at most ``goal``; None when even ``cap`` is not enough."""
    n = max(floor, 4)
    while n <= cap:
        if predicted_half_width(sd, n, confidence) <= goal:
            return n
        n += 1
    return None


def reaches_band_at_floor(row: ContrastRow, policy: Policy = POLICY) -> bool:
    """Whether a launch-bound row's spread lets a verdict come at its floor: the CI half-width predicted at
    the floor from the row's between-process spread (:func:`predicted_half_width`)
    is inside the class's band. True while the spread is not known yet (fewer than 2 + 2 processes)."""
    rule, sd = policy.rule(row.judged), spread(row)
    return not math.isfinite(sd) or predicted_half_width(sd, rule.floor, policy.confidence) < rule.band


def _goal(band: float, ratio: float) -> tuple[float, bool]:
    """The CI half-width that decides a row at its time ratio (module docstring, **Goal**), and whether the
    estimate sits at the band's edge (the goal raised to a quarter of the band)."""
    d = abs(ratio - 1) if math.isfinite(ratio) else 0.0
    goal = abs(band - d)
    return max(goal, band / 4), goal < band / 4


def _excess(cmp, sd: float, n: int) -> float:
    """How much wider the row's CI is than its spread predicts at its own ``n`` (heavy tails, two levels), at
    least 1: the factor the goal is divided by before predicting processes (module docstring)."""
    if not math.isfinite(cmp.half_width):
        return 1.0
    return max(1.0, cmp.half_width / predicted_half_width(sd, n))


def decidable_within(row: ContrastRow, n: int, policy: Policy = POLICY) -> bool:
    """Whether a row whose verdict is undetermined can be decided at ``n`` processes per side, predicted as
    :func:`need` predicts it: the CI from the row's between-process spread (:func:`predicted_half_width`), the
    goal divided by the CI's excess over that prediction, reaching the goal by ``n``. True while the spread or
    the estimate is not known yet (fewer than 2 + 2 processes: the planned rounds give every cell 4)."""
    rule, sd = policy.rule(row.judged), spread(row)
    if not (math.isfinite(sd) and math.isfinite(row.cmp.ratio)):
        return True
    goal, _ = _goal(rule.band, row.cmp.ratio)
    goal /= _excess(row.cmp, sd, len(row.rounds))
    return processes_for(sd, goal, rule.floor, cap=n, confidence=policy.confidence) is not None


def need(result: ContrastResult, row: ContrastRow, floors: list[NoiseFloor], policy: Policy = POLICY) -> Need:
    """What one undetermined row needs (see the module docstring)."""
    rule, cmp = policy.rule(row.judged), row.cmp
    n = len(row.rounds)
    hw = cmp.half_width
    sd = spread(row)
    if not math.isfinite(sd):
        sd = floor_of(floors, result.contrast.a.config, row.judged)
    at = max(n, rule.floor)
    if not math.isfinite(hw):  # below the floor: predicted from the spread at the floor
        hw = predicted_half_width(sd, at, policy.confidence) if math.isfinite(sd) else math.nan
    goal, edge = _goal(rule.band, cmp.ratio)
    excess = _excess(cmp, sd, n)
    if math.isfinite(sd):
        processes = processes_for(sd, goal / excess, rule.floor, confidence=policy.confidence)
    else:
        processes = rule.floor
    mde = rule.band + hw if math.isfinite(hw) else math.nan
    return Need(result, row, n, cmp.half_width, mde, goal, processes, edge, sd, excess)


def needs(results: list[ContrastResult], floors: list[NoiseFloor], policy: Policy = POLICY) -> list[Need]:
    """Every undetermined row of every contrast, in contrast and plan order."""
    return [need(r, row, floors, policy) for r in results for row in r.undetermined]


@dataclass(frozen=True)
class Resume:
    """What the resume command gives (module docstring): ``argv`` (None: nothing to add), whether it
    continues adaptive rounds, ``cap`` (processes per side it can give a cell at most), ``given`` (per
    entry of ``found``: processes per side after it), ``rounds`` (rounds it adds at most), ``processes``
    (worker processes it starts), ``seconds`` (their estimated worker seconds; None: time unknown, the
    run's processes carry no start time) and ``beyond`` (the cells of ``found`` it cannot bring to a
    verdict: they need more than it gives)."""

    argv: list[str] | None
    adaptive: bool
    cap: int
    given: list[int]
    rounds: int
    processes: int
    seconds: float | None
    beyond: list[Need]
    until: int = 0


def rounds_done(run: RunDocument) -> int:
    """Rounds the run holds: 1 + the highest round of its processes (``run.rounds`` before any)."""
    return doc.of(run).rounds_done


def process_walls(run: RunDocument) -> dict[tuple[str, str], float]:
    """(build, config) -> median wall seconds (``finished - started``) of its processes; sides without
    either time are left out."""
    walls: dict[tuple[str, str], list[float]] = {}
    for proc in doc.of(run).processes:
        if proc.wall is not None:
            walls.setdefault((proc.build, proc.config), []).append(proc.wall)
    return {side: statistics.median(v) for side, v in walls.items()}


def _fixed(run: RunDocument, found: list[Need]) -> Resume:
    """``--rounds N``: every cell under every (build, config) in each added round."""
    head = run.header
    reach = [f for f in found if f.processes is not None]
    extra = max((f.processes - f.n for f in reach), default=0)
    done = run.rounds_done
    sides = [(b, c) for b in head.builds for c in head.configs]
    walls = process_walls(run)
    if extra <= 0:
        return Resume(None, False, MAX_PROCESSES, [f.n for f in found], 0, 0, 0.0, [f for f in found if f not in reach])
    fallback = statistics.median(walls.values()) if walls else None
    seconds = None if fallback is None else extra * sum(walls.get(side, fallback) for side in sides)
    given = [f.n + extra for f in found]
    beyond = [f for f, g in zip(found, given, strict=True) if f.processes is None or f.processes > g]
    argv = options.with_value(list(head.command), "rounds", done + extra)
    return Resume(argv, False, MAX_PROCESSES, given, extra, extra * len(sides), seconds, beyond, done + extra)


def _target(goals: list[float], current: float) -> float:
    """The ``--target-ci`` value for ``goals``: the smallest, never looser than ``current``, in steps of
    0.001 down (0 would turn adaptive rounds off, so at least 0.001)."""
    return max(math.floor(min([*goals, current]) * 1000) / 1000, 0.001)


def _adaptive(run: RunDocument, results: list[ContrastResult], found: list[Need], policy: Policy) -> Resume:
    """``--target-ci`` / ``--budget-s``: adaptive rounds up to :data:`MAX_ROUNDS` in all."""
    head, adaptive = run.header, run.header.adaptive
    policy = policy.with_targets(adaptive.target, adaptive.launch_bound_target)
    done = run.rounds_done
    left = max(0, MAX_ROUNDS - done)
    open_ = [f for f in found if math.isfinite(f.goal) and (f.processes is None or f.processes > f.n)]
    targets = {
        cls: _target([f.goal for f in open_ if f.row.judged == cls], policy.rule(cls).target)
        for cls in (CellClass.KERNEL_BOUND, CellClass.LAUNCH_BOUND)
    }
    floors = noise_floors(results)
    extra: dict[tuple[str, str], int] = {}  # (config, cell) -> rounds that measure it
    for result in results:
        a, b = result.contrast.a, result.contrast.b
        if a.config != b.config or {a.build, b.build} != {"stock", "patched"}:
            continue
        for row in result.rows:
            if not (row.a and row.b):
                continue
            basis = need(result, row, floors, policy)
            t = targets[row.judged]
            if math.isfinite(row.cmp.half_width) and row.cmp.half_width <= t:
                continue
            floor = policy.rule(row.judged).floor
            sd = basis.sd
            wanted = (
                processes_for(sd, t / basis.excess, floor, MAX_ROUNDS, policy.confidence) if math.isfinite(sd) else None
            )
            wanted = basis.n + left if wanted is None else wanted
            extra[a.config, row.cell.key] = min(max(wanted - basis.n, 0), left)
    given = []
    for f in found:
        sides = {(s.config, f.row.cell.key) for s in (f.result.contrast.a, f.result.contrast.b)}
        given.append(f.n + min(extra.get(side, 0) for side in sides))
    beyond = [f for f, g in zip(found, given, strict=True) if f.processes is None or f.processes > g]
    rounds = max(extra.values(), default=0)
    if rounds <= 0:
        return Resume(None, True, MAX_ROUNDS, given, 0, 0, 0.0, beyond)
    startup, overhead = cell_costs(run.processes)
    measured = {  # the latest measurement: what an adaptive round gives the cell
        (r.build, r.config, r.key): measured_seconds(r.timed) for r in run.cell_records() if r.measurement
    }
    seconds, processes = 0.0, 0
    for config in head.configs:
        cells = {k: e for (c, k), e in extra.items() if c == config and e > 0}
        for r in range(1, max(cells.values(), default=0) + 1):
            pending = [k for k, e in cells.items() if e >= r]
            for build in head.builds:
                processes += 1
                seconds += startup + sum(overhead + measured.get((build, config, k), 0.0) for k in pending)
    known = bool(startup or overhead)
    argv = list(head.command)
    for name, cls in (("target_ci", CellClass.KERNEL_BOUND), ("target_ci_launch_bound", CellClass.LAUNCH_BOUND)):
        if any(f.row.judged == cls for f in open_):
            argv = options.with_value(argv, name, targets[cls])
    if known:
        argv = options.with_value(argv, "budget_s", max(60, math.ceil(seconds * 1.2 / 10) * 10))
    until = done + rounds
    return Resume(argv, True, MAX_ROUNDS, given, rounds, processes, seconds if known else None, beyond, until)


def resume(run: RunDocument, results: list[ContrastResult], found: list[Need], policy: Policy = POLICY) -> Resume:
    """What resuming the run gives the undetermined cells ``found`` of ``results`` (module docstring)."""
    run = doc.of(run)
    if run.header.adaptive:
        return _adaptive(run, results, found, policy)
    return _fixed(run, found)
