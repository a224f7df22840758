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
- **Minutes**: from the run's own processes (:func:`harness.policy.cell_costs`: start-up, per-cell
  overhead, each cell's timed blocks) for the processes each (build, config) side needs.
- **Command**: the recorded command with ``--rounds N`` (runs without adaptive rounds), or, for a run with
  adaptive rounds, ``--target-ci`` / ``--target-ci-launch-bound`` at the goals and ``--budget-s`` at the
  estimate: ``compare`` keeps every finished process of ``--out`` and adds the rest.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness.contrasts import ContrastResult, ContrastRow
from harness.policy import POLICY, CellClass, Policy, cell_costs, measured_seconds

#: more processes per side than this: not a sensible cost (the report says so instead of a number)
MAX_PROCESSES = 200


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
    :data:`MAX_PROCESSES`), and whether its estimate sits at the band's edge."""

    result: ContrastResult
    row: ContrastRow
    n: int
    half_width: float
    mde: float
    goal: float
    processes: int | None
    edge: bool


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
    )


def needs(results: list[ContrastResult], floors: list[NoiseFloor], policy: Policy = POLICY) -> list[Need]:
    """Every undetermined row of every contrast, in contrast and plan order."""
    return [need(r, row, floors, policy) for r in results for row in r.undetermined]


def seconds(data: dict, found: list[Need]) -> float:
    """Estimated worker seconds to give every cell of ``found`` its processes (those with a number): per
    (build, config) side, one process per extra round, each costing the start-up plus, per cell still
    short in that round, the per-cell overhead and the cell's median timed-block seconds so far
    (:func:`harness.policy.cell_costs`); 0 before any process ran."""
    startup, overhead = cell_costs(data["processes"])
    if not startup and not overhead:
        return 0.0
    measured: dict[tuple[str, str, str], float] = {}
    for proc in data["processes"]:
        for key, rec in proc.get("cells", {}).items():
            if rec.get("measurement"):
                measured.setdefault((proc["build"], proc["config"], key), measured_seconds(rec["measurement"]))
    short: dict[tuple[str, str], dict[str, int]] = {}  # side -> cell -> extra processes
    for f in found:
        if f.processes is None:
            continue
        for side in (f.result.contrast.a, f.result.contrast.b):
            cells = short.setdefault((side.build, side.config), {})
            cells[f.row.cell.key] = max(cells.get(f.row.cell.key, 0), f.processes - f.n)
    total = 0.0
    for (build, config), cells in short.items():
        for r in range(1, max(cells.values(), default=0) + 1):
            pending = [k for k, extra in cells.items() if extra >= r]
            total += startup + sum(overhead + measured.get((build, config, k), 0.0) for k in pending)
    return total


def _replace(argv: list[str], option: str, value: str) -> list[str]:
    """``argv`` with ``option value`` set (replacing ``option value`` or ``option=value``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == option:
            skip = True
            continue
        if arg.startswith(option + "="):
            continue
        out.append(arg)
    return out + [option, value]


def resume_argv(data: dict, found: list[Need], estimate_s: float, policy: Policy = POLICY) -> list[str] | None:
    """The recorded command that resumes the run to the goals of ``found`` (module docstring), or None when
    no cell can be reached within :data:`MAX_PROCESSES`."""
    reachable = [f for f in found if f.processes is not None and f.processes > f.n]
    if not reachable:
        return None
    argv, adaptive = list(data["run"]["command"]), data["run"].get("adaptive")
    if not adaptive:
        return _replace(argv, "--rounds", str(max(f.processes for f in reachable)))
    policy = policy.with_targets(adaptive.get("target"), adaptive.get("launch_bound_target"))
    for option, cls in (("--target-ci", CellClass.KERNEL_BOUND), ("--target-ci-launch-bound", CellClass.LAUNCH_BOUND)):
        goals = [f.goal for f in reachable if f.row.cls == cls]
        if goals:
            goal = min(min(goals), policy.rule(cls).target)
            argv = _replace(argv, option, f"{math.floor(goal * 1000) / 1000:g}")
    return _replace(argv, "--budget-s", f"{max(60, math.ceil(estimate_s * 1.2 / 10) * 10)}")
