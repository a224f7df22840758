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
- **Processes**: a CI's half-width shrinks like 1/√n (the same law as the adaptive rounds,
  :func:`harness.stats.unconverged`): ``n' = ceil(n (half-width / goal)²)``, at least the class's floor.
  A cell without a CI (below its floor) gets its half-width predicted from the noise floor:
  ``1.96 · sd · √(2/n) · √(π/3)`` (the Hodges-Lehmann estimate's efficiency 3/π against the mean).
- **What the command runs**: a run without adaptive rounds resumes with ``--rounds N`` (N in all), which
  runs every cell under every (build, config) in each added round: the added rounds times the run's
  processes per round, each costing the median wall time (``finished - started``) of that side's processes
  so far; a cell gets its own processes plus the added rounds. A run with adaptive rounds resumes with
  ``--target-ci`` / ``--target-ci-launch-bound`` at the goals and ``--budget-s`` at the estimate: every
  ``patched/C`` vs ``stock/C`` cell whose CI is wider than its target gets processes (half-width ∝ 1/√n)
  until it reaches the target or the run reaches :data:`harness.runner.MAX_ROUNDS` rounds in all; each
  process costs the start-up plus, per cell, the per-cell overhead and the cell's latest timed-block
  seconds (:func:`harness.policy.cell_costs`, which needs the workers' start records). A cell whose
  verdict needs more processes than the command can give (adaptive: the rounds left to MAX_ROUNDS; either
  mode: more than :data:`MAX_PROCESSES`) is named as out of its reach; the command still takes it as far
  as it goes. Time unknown (None) when the run's processes carry no start time.
- **Predicted width**: per undetermined cell, the CI half-width at the processes the command gives it
  (the same 1/√n law), so that a resumed run can be checked against it.
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
    :data:`MAX_PROCESSES`), whether its estimate sits at the band's edge, and the half-width the
    prediction starts from (``basis``: the CI's, or the noise floor's below the floor; NaN: none) at
    ``at`` processes per side."""

    result: ContrastResult
    row: ContrastRow
    n: int
    half_width: float
    mde: float
    goal: float
    processes: int | None
    edge: bool
    basis: float = math.nan
    at: int = 0

    def width_at(self, processes: int) -> float:
        """Predicted CI half-width (fraction) at ``processes`` per side (NaN: no basis)."""
        return self.basis * math.sqrt(self.at / processes) if math.isfinite(self.basis) and processes > 0 else math.nan


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
    for a run without them, of every contrast's A side config), in run order."""
    per: dict[tuple[str, CellClass], list[float]] = {}
    same = [r for r in results if r.contrast.a.config == r.contrast.b.config] or results
    for result in same:
        for row in result.rows:
            sd = spread(row)
            if math.isfinite(sd):
                per.setdefault((result.contrast.a.config, row.cls), []).append(sd)
    return [NoiseFloor(c, k, statistics.median(v), len(v)) for (c, k), v in per.items()]


def floor_of(floors: list[NoiseFloor], config: str, cls: CellClass) -> float:
    return next((f.sd for f in floors if f.config == config and f.cls == cls), math.nan)


def predicted_half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    """Half-width (fraction) of the CI at ``n`` processes per side for a between-process spread ``sd``."""
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    return math.expm1(z * sd * math.sqrt(2 / n) * math.sqrt(math.pi / 3))


def reaches_band_at_floor(row: ContrastRow, policy: Policy = POLICY) -> bool:
    """Whether a launch-bound row's spread lets a verdict come at its floor: the CI half-width predicted at
    the floor from the row's between-process spread (:func:`predicted_half_width`)
    is inside the class's band. True while the spread is not known yet (fewer than 2 + 2 processes)."""
    rule, sd = policy.rule(row.cls), spread(row)
    return not math.isfinite(sd) or predicted_half_width(sd, rule.floor, policy.confidence) < rule.band


def need(result: ContrastResult, row: ContrastRow, floors: list[NoiseFloor], policy: Policy = POLICY) -> Need:
    """What one undetermined row needs (see the module docstring)."""
    rule, cmp = policy.rule(row.cls), row.cmp
    n = len(row.rounds)
    hw = cmp.half_width
    sd = spread(row)
    if not math.isfinite(sd):
        sd = floor_of(floors, result.contrast.a.config, row.cls)
    at = max(n, rule.floor)
    if not math.isfinite(hw):  # below the floor: predicted from the spread at the floor
        hw = predicted_half_width(sd, at, policy.confidence) if math.isfinite(sd) else math.nan
    d = abs(cmp.ratio - 1) if math.isfinite(cmp.ratio) else 0.0
    goal = abs(rule.band - d)
    edge = goal < rule.band / 4
    goal = max(goal, rule.band / 4)
    if math.isfinite(hw) and hw > 0:
        processes = max(math.ceil(at * (hw / goal) ** 2), rule.floor)
    else:
        processes = rule.floor
    return Need(
        result,
        row,
        n,
        cmp.half_width,
        rule.band + hw if math.isfinite(hw) else math.nan,
        goal,
        processes if processes <= MAX_PROCESSES else None,
        edge,
        hw,
        at,
    )


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
        cls: _target([f.goal for f in open_ if f.row.cls == cls], policy.rule(cls).target)
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
            t = targets[row.cls]
            if math.isfinite(row.cmp.half_width) and row.cmp.half_width <= t:
                continue
            wanted = math.ceil(basis.at * (basis.basis / t) ** 2) if math.isfinite(basis.basis) else basis.n + left
            wanted = max(wanted, policy.rule(row.cls).floor)
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
        if any(f.row.cls == cls for f in open_):
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
