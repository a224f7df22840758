"""A/B statistics over fresh worker processes: medians, Hodges-Lehmann ratios with exact Moses
CIs, exact U-tests, one verdict rule, bimodality and drift.

Pure functions over numbers (numpy + scipy only): no filesystem, no printing, no torch.

Data model. One *cell* is build x env config x workload x shape x dtype. Each fresh worker
process yields raw per-call times in **seconds** (its *samples*); the process's median is the
per-process statistic (:func:`process_median`). Between processes the spread is larger than
inside one (docs/methodology.md: 1-5 % cv on an H200; pytorch issue 182815: a 2-3x slow MPSGraph
kernel in about 40 % of processes), so every comparison here treats the **per-process medians** as the
independent observations: ``compare(stock_medians, patched_medians)``.

Conventions:

- ``ratio`` is a **time ratio** patched/stock (the Hodges-Lehmann shift of log times, see
  :func:`compare`): < 1 means patched is faster; ``speedup = 1 / ratio``.
- Relative quantities (``threshold``, half-widths, drift) are fractions: 0.02 means 2 %.
- Nothing here turns an error into a verdict: when a statistic cannot be computed the verdict
  is ``"undetermined"``, ``cause`` (a :class:`Cause`) says why and ``reason`` gives the numbers (unlike
  pyperf's ``_compare.py``,
  which reports "significant" when its test raises). Programming errors (wrong types) still raise.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from scipy import stats as _st

__all__ = [
    "MIN_PROCESSES",
    "MIN_PROCESSES_LAUNCH_BOUND",
    "Cause",
    "Comparison",
    "Drift",
    "GeoMean",
    "Mode",
    "ModeRatio",
    "compare",
    "converged",
    "drift",
    "geomean_by_process",
    "hodges_lehmann",
    "judge",
    "mann_whitney_p",
    "moses_rank",
    "iqr",
    "min_processes",
    "modes",
    "process_median",
    "unconverged",
]

FASTER, SLOWER, EQUIVALENT, UNDETERMINED = "faster", "slower", "equivalent", "undetermined"
VERDICTS = (FASTER, SLOWER, EQUIVALENT, UNDETERMINED)
DRIFT, STABLE = "drift", "stable"

K = TypeVar("K", bound=Hashable)


# --------------------------------------------------------------------------- one process


def _finite_1d(samples: Sequence[float], what: str) -> np.ndarray:
    a = np.asarray(samples, dtype=float).ravel()
    if a.size == 0:
        raise ValueError(f"{what}: no samples")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: {int(np.sum(~np.isfinite(a)))} non-finite sample(s)")
    return a


def process_median(samples: Sequence[float]) -> float:
    """Median of one worker process's raw per-call times.

    Args:
        samples: raw per-call times of one process, seconds (1-D, >= 1 value).
    Returns:
        The median, seconds (``numpy.median``: mean of the two middle values when even).
    Raises:
        ValueError: no samples, or a NaN/inf sample (a timer bug, not a measurement).
    """
    return float(np.median(_finite_1d(samples, "process_median")))


def iqr(samples: Sequence[float]) -> tuple[float, float]:
    """First and third quartiles ``(q1, q3)`` of raw per-call times, seconds.

    Linear interpolation between order statistics (``numpy.percentile`` default, the
    definition ``torch.utils.benchmark.Measurement.iqr`` uses). Raises ValueError like
    :func:`process_median`.
    """
    q1, q3 = np.percentile(_finite_1d(samples, "iqr"), [25.0, 75.0])
    return float(q1), float(q3)


# --------------------------------------------------------------------------- bimodality


@dataclass(frozen=True)
class Mode:
    """One group of per-process medians.

    center: median of the group, seconds; share: fraction of processes in it (0..1];
    n: processes in it; low/high: smallest/largest member, seconds.
    """

    center: float
    share: float
    n: int
    low: float
    high: float


def _scan(x: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Gap statistic of every split of sorted log values ``x`` (shape (..., n)).

    For a split after position i (left group size i, m <= i <= n - m) the statistic is
    ``(x[i] - x[i-1]) / s_i``: the empty gap between the groups over the pooled within-group
    standard deviation ``s_i = sqrt((SS_left + SS_right) / (n - 2))``. Returns (stat, gap),
    each of shape (..., n - 2m + 1).
    """
    n = x.shape[-1]
    c1 = np.cumsum(x, axis=-1)
    c2 = np.cumsum(x * x, axis=-1)
    i = np.arange(m, n - m + 1)
    l1, l2 = c1[..., i - 1], c2[..., i - 1]
    r1, r2 = c1[..., -1:] - l1, c2[..., -1:] - l2
    ss = np.maximum(l2 - l1 * l1 / i, 0.0) + np.maximum(r2 - r1 * r1 / (n - i), 0.0)
    s = np.sqrt(ss / (n - 2))
    gap = x[..., i] - x[..., i - 1]
    # A gap is only meaningful against spread far above float rounding of the log values.
    tiny = 1e-12 * np.maximum(1.0, np.abs(x[..., -1:]))
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = np.where(s > tiny, gap / s, np.where(gap > tiny, np.inf, 0.0))
    return stat, gap


def _min_group(n: int, min_share: float) -> int:
    return max(2, math.ceil(min_share * n - 1e-9))


@functools.lru_cache(maxsize=512)
def _gap_critical(n: int, m: int, false_alarm: float) -> float:
    """Critical value of ``max_i gap_i / s_i`` for n unimodal normal values, by simulation.

    Source: Monte Carlo with a fixed seed, max(2000, min(20000, 4e6 // n)) normal samples of
    size n; the (1 - false_alarm) quantile of the scan maximum. The statistic is scale- and
    location-free, so one standard normal simulation serves every cell. Cached per (n, m).
    """
    rows = max(2000, min(20000, 4_000_000 // n))
    rng = np.random.default_rng([20261129, n, m])
    x = np.sort(rng.standard_normal((rows, n)), axis=-1)
    stat, _ = _scan(x, m)
    return float(np.quantile(stat.max(axis=-1), 1.0 - false_alarm))


def modes(
    values: Sequence[float],
    *,
    false_alarm: float = 0.01,
    min_share: float = 0.15,
    min_gap: float = 0.02,
) -> list[Mode]:
    """Split per-process medians into separated groups (modes); one Mode when unimodal.

    Rule (in log space, times being multiplicative): sort ``log(values)``; every split into a
    left and right group of at least ``m = max(2, ceil(min_share * n))`` values gets the
    statistic *empty gap between the groups / pooled within-group standard deviation*. The
    largest statistic splits the values when it exceeds the critical value that unimodal
    normal samples of the same n exceed with probability ``false_alarm`` (simulated once per
    n, see ``_gap_critical``) **and** the gap is at least ``min_gap`` relative
    (``exp(gap) - 1 >= min_gap``: a 0.5 % split is not a mode worth a report line). Each group
    is then split again by the same rule. A single outlying process never forms a mode (m >= 2).

    Measured (1000 simulated samples per n = 6 / 10 / 20 / 40, seed 7; share flagged >= 2
    modes). False alarms on unimodal data: lognormal cv 5 % (= normal in log space)
    1.6 / 0.8 / 1.3 / 0.8 %; normal cv 5 % 1.3 / 1.2 / 1.4 / 1.4 %; Student-t3 log values
    0.6 / 0.9 / 1.9 / 1.0 %; gamma(2) 0.8 / 0.9 / 2.9 / 2.2 %; right-skewed ``1 + Exp(5 %)``
    1.9 / 6 / 10 / 10 % (a sparse slow tail does look like a second group). Power on a 60/40
    split: 2.5x apart, 5 % noise: 99.7 / 100 / 100 / 100 %; 1.3x apart, 5 % noise:
    17 / 30 / 70 / 89 %; 1.1x apart, 2 % noise: 12 / 19 / 50 / 71 %. Few processes cannot
    resolve close modes; the 2-3x MPS kernel split is found from n = 6.

    Args:
        values: per-process medians, seconds (1-D, all > 0 and finite).
        false_alarm: per-split false-alarm probability on unimodal normal data.
        min_share: smallest share of the current group a mode may have (and >= 2 values).
        min_gap: smallest relative gap between neighbouring modes.
    Returns:
        Modes sorted by center (fastest first); ``len(...) > 1`` means multimodal.
    Raises:
        ValueError: empty input, a non-finite or non-positive value.
    """
    a = _finite_1d(values, "modes")
    if np.any(a <= 0):
        raise ValueError("modes: times must be > 0 seconds")
    x = np.log(np.sort(a))
    n_total = a.size
    groups: list[np.ndarray] = []

    def split(g: np.ndarray) -> None:
        n = g.size
        m = _min_group(n, min_share)
        if n >= 2 * m:
            stat, gap = _scan(g, m)
            j = int(np.argmax(stat))
            if stat[j] > _gap_critical(n, m, false_alarm) and math.expm1(gap[j]) >= min_gap:
                cut = m + j
                split(g[:cut])
                split(g[cut:])
                return
        groups.append(g)

    split(x)
    out = []
    for g in groups:
        v = np.exp(g)
        out.append(Mode(float(np.median(v)), g.size / n_total, int(g.size), float(v[0]), float(v[-1])))
    return out


# --------------------------------------------------------------------------- the verdict rule


#: Floor of processes per side for any CI-based verdict (cell and per-config summary). At 95 % it is
#: the smallest n at which an exact two-sided Moses CI exists (2 / C(8, 4) = 0.029 < 0.05), and the
#: n from which the simulation (benchmarks/simulate_stats.py, table in docs/methodology.md) shows
#: coverage >= 95 % and <= 2 % false faster/slower verdicts in all four noise models.
MIN_PROCESSES = 4
#: Floor for a launch-bound cell (its time is host latency). On an H200 the host path of one cell can
#: sit in one of two levels per process, whole runs long: mm 1x1024x1024 fp32 under
#: TORCH_BLAS_PREFER_CUBLASLT=1 took 11.6-12.3 µs in every process of one build and 17.0-18.2 µs in
#: every process of the other, the same torch on both sides (docs/methodology.md). With such two
#: levels at 50/50, 4 + 4 processes split cleanly by side with probability 2 * 0.5^8 = 0.8 % per
#: cell, a false verdict among ~100 launch-bound cells per run; at 6 + 6 only a clean split still
#: excludes 1 (2 * 0.5^12 = 0.05 %).
MIN_PROCESSES_LAUNCH_BOUND = 6


class Cause(str, enum.Enum):
    """Why a verdict is what it is: the one enumerated reason :func:`judge` returns with it.

    The report maps each cause to words (``harness.report``); nothing re-derives it from text.
    """

    BEYOND_BAND = "beyond_band"  #: faster/slower: the whole CI lies beyond the +-threshold band
    INSIDE_BAND = "inside_band"  #: equivalent: the whole CI lies inside the band
    STRADDLES_BAND = "straddles_band"  #: the CI reaches across a band edge: run more processes
    BELOW_FLOOR = "below_floor"  #: fewer than MIN_PROCESSES on a side (or no exact CI at this n)
    NO_PROCESSES = "no_processes"  #: a side has no process (or the summary no usable cell)
    BAD_VALUES = "bad_values"  #: a per-process median is NaN/inf or <= 0 s
    ZERO_SPREAD = "zero_spread"  #: every process on both sides has the same median (timer resolution?)
    #: a process timed blocks shorter than the timer resolves (harness.bench.timer.resolution_floor_s)
    BELOW_RESOLUTION = "below_resolution"


def judge(
    ci_low: float,
    ci_high: float,
    n_stock: int,
    n_patched: int,
    *,
    threshold: float,
    problem: Cause | None = None,
    floor: int = MIN_PROCESSES,
) -> tuple[str, Cause]:
    """The one verdict rule, for a cell (:func:`compare`) and a per-config summary (:func:`geomean_by_process`).

    With band ``[1 - threshold, 1 + threshold]`` around the time ratio, in this order:

    - ``problem`` given (data could not be judged): ``undetermined`` with that cause;
    - fewer than ``floor`` (:data:`MIN_PROCESSES`; :data:`MIN_PROCESSES_LAUNCH_BOUND` for a
      launch-bound cell) per side, or no CI: ``undetermined``, ``BELOW_FLOOR``;
    - ``faster`` if ``ci_high < 1 - threshold``, ``slower`` if ``ci_low > 1 + threshold``
      (``BEYOND_BAND``): the whole CI beyond the band, so the change is larger than the threshold;
    - ``equivalent`` if ``1 - threshold <= ci_low`` and ``ci_high <= 1 + threshold``
      (``INSIDE_BAND``): an equivalence claim by the two one-sided tests read off one CI
      (Schuirmann 1987, Journal of Pharmacokinetics and Biopharmaceutics 15:657);
    - ``undetermined``, ``STRADDLES_BAND`` otherwise.

    The CI is the exact Moses interval (:func:`compare`), the inverse of the exact U test, so no
    separate p-value condition is needed: a CI that excludes 1 is a test that rejects.

    Args:
        ci_low, ci_high: CI of the patched/stock time ratio (NaN: none).
        n_stock, n_patched: processes per side.
        threshold: band half-width, fraction (0.02 = 2 %).
        problem: a cause found before any CI (NO_PROCESSES, BAD_VALUES, BELOW_RESOLUTION, ZERO_SPREAD).
    Returns:
        ``(verdict, cause)``, verdict one of :data:`VERDICTS`.
    """
    if problem is not None:
        return UNDETERMINED, problem
    if min(n_stock, n_patched) < max(floor, MIN_PROCESSES) or not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        return UNDETERMINED, Cause.BELOW_FLOOR
    if ci_high < 1.0 - threshold:
        return FASTER, Cause.BEYOND_BAND
    if ci_low > 1.0 + threshold:
        return SLOWER, Cause.BEYOND_BAND
    if 1.0 - threshold <= ci_low and ci_high <= 1.0 + threshold:
        return EQUIVALENT, Cause.INSIDE_BAND
    return UNDETERMINED, Cause.STRADDLES_BAND


# --------------------------------------------------------------------------- A/B comparison
def _input_problem(s: np.ndarray, p: np.ndarray, unresolved: int = 0) -> tuple[Cause, str] | None:
    """(cause, reason) when a side has no process or a non-finite / non-positive median, or ``unresolved``
    processes timed blocks below the timer's resolution (:func:`compare`), else None.

    Raises:
        ValueError: ``unresolved`` < 0.
    """
    if unresolved < 0:
        raise ValueError(f"unresolved must be >= 0 processes, got {unresolved!r}")
    for name, a in (("stock", s), ("patched", p)):
        if a.size == 0:
            return Cause.NO_PROCESSES, f"no {name} processes"
        bad = int(np.sum(~np.isfinite(a)))
        if bad:
            return Cause.BAD_VALUES, f"{bad} {name} per-process median(s) are NaN/inf"
        if np.any(a <= 0):
            return Cause.BAD_VALUES, f"{name} has a per-process median <= 0 s"
    if unresolved:
        return (
            Cause.BELOW_RESOLUTION,
            f"{_plural(unresolved, 'process', 'processes')} timed blocks below the timer's resolution: not judged",
        )
    return None


@dataclass(frozen=True)
class ModeRatio:
    """Patched vs stock within one mode (bimodal cells): the k-th fastest mode of each side.

    ratio: patched centre / stock centre (time ratio); stock_share, patched_share: fraction of each
    side's processes in this mode (0..1].
    """

    ratio: float
    stock_share: float
    patched_share: float


@dataclass(frozen=True)
class Comparison:
    """Patched vs stock for one cell, from per-process medians (seconds).

    Fields: ``stock``/``patched`` the inputs (seconds); ``stock_median``/``patched_median``
    (seconds, for display); ``ratio`` the Hodges-Lehmann time ratio (< 1: patched faster) and
    ``ci_low``/``ci_high`` its exact Moses CI, at ``achieved_confidence`` >= ``confidence``;
    ``p_value`` the exact two-sided Mann-Whitney U p of the same log values; ``verdict`` one of
    ``faster|slower|equivalent|undetermined`` and ``cause`` the :class:`Cause` behind it;
    ``reason`` one line with the numbers; ``stock_modes``/``patched_modes`` each side's
    :func:`modes`; ``mode_ratios`` per-mode ratios and shares when both sides have the same number
    (>= 2) of modes; ``notes`` extra flags; ``floor`` the processes per side a verdict needed.
    NaN marks what could not be computed.
    """

    stock: tuple[float, ...]
    patched: tuple[float, ...]
    stock_median: float
    patched_median: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str
    cause: Cause
    reason: str
    threshold: float
    confidence: float
    achieved_confidence: float
    floor: int = MIN_PROCESSES
    stock_modes: tuple[Mode, ...] = ()
    patched_modes: tuple[Mode, ...] = ()
    mode_ratios: tuple[ModeRatio, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def n_stock(self) -> int:
        return len(self.stock)

    @property
    def n_patched(self) -> int:
        return len(self.patched)

    @property
    def speedup(self) -> float:
        """``1 / ratio``: > 1 means patched is faster."""
        return 1.0 / self.ratio if self.ratio > 0 else math.nan

    @property
    def has_ci(self) -> bool:
        return math.isfinite(self.ci_low) and math.isfinite(self.ci_high)

    @property
    def half_width(self) -> float:
        """Relative CI half-width: ``max(ci_high - ratio, ratio - ci_low) / ratio`` (NaN if no CI).

        The larger side, so an asymmetric CI is judged by its wider arm.
        """
        if not self.has_ci or not self.ratio > 0:
            return math.nan
        return max(self.ci_high - self.ratio, self.ratio - self.ci_low) / self.ratio

    @property
    def bimodal(self) -> bool:
        """True when either side's per-process medians split into >= 2 modes."""
        return len(self.stock_modes) > 1 or len(self.patched_modes) > 1

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict: every field, plus speedup, half_width, bimodal; NaN becomes None."""
        d = dataclasses.asdict(self)
        d.update(cause=self.cause.value, speedup=self.speedup, half_width=self.half_width, bimodal=self.bimodal)
        return _json_safe(d)


def _json_safe(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@functools.lru_cache(maxsize=1024)
def _u_cdf_at(n: int, m: int, u: int) -> float:
    """``P(U <= u)`` of the Mann-Whitney statistic for samples of n and m without ties.

    From ``scipy.stats.mannwhitneyu(method="exact", alternative="less")`` (its exact null
    distribution, doc: docs.scipy.org/doc/scipy/reference/generated/scipy.stats.mannwhitneyu.html)
    applied to a constructed sample whose statistic is exactly u: y = 0..m-1 and x_i = k_i - 0.5
    with k_i <= m, sum k_i = u (x_i then exceeds exactly k_i of the y's).
    """
    ks, left = [], u
    for _ in range(n):
        ks.append(min(m, left))
        left -= ks[-1]
    x = np.array(ks, dtype=float) - 0.5
    return float(_st.mannwhitneyu(x, np.arange(m, dtype=float), alternative="less", method="exact").pvalue)


#: two-sided exact Mann-Whitney p-values by (n, m, U) (:func:`mann_whitney_p`); cleared when it holds this many
P_CACHE_SIZE = 1 << 16
_P_BY_U: dict[tuple[int, int, float], float] = {}


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided exact Mann-Whitney U p-value of ``x`` against ``y`` (1-D, finite), as
    ``scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="exact").pvalue``.

    scipy's exact p-value is a function of the sample sizes and ``U`` = the pairs with ``x_i > y_j``, ties
    counted 1/2, alone (its "exact" method makes no tie correction: scipy's mannwhitneyu doc), so it is
    computed once per (n, m, U) and kept: a report judges thousands of cells at a few sample sizes, and
    scipy's call costs about 1.5 ms each here (its argument checks), most of a verdict's time.

    Raises:
        ValueError: a sample is empty, not 1-D, or holds a value that is not finite (nothing is kept).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1 or not x.size or not y.size or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("mann_whitney_p takes two non-empty 1-D samples of finite values")
    u = float(np.sum(x[:, None] > y[None, :]) + 0.5 * np.sum(x[:, None] == y[None, :]))
    key = (x.size, y.size, u)
    if key not in _P_BY_U:
        if len(_P_BY_U) >= P_CACHE_SIZE:
            _P_BY_U.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            _P_BY_U[key] = float(_st.mannwhitneyu(x, y, alternative="two-sided", method="exact").pvalue)
    return _P_BY_U[key]


@functools.lru_cache(maxsize=1024)
def moses_rank(n: int, m: int, confidence: float) -> tuple[int, float]:
    """Order-statistic rank of the exact two-sided Moses CI for a shift, and its achieved level.

    Source: Hollander, Wolfe & Chicken, *Nonparametric Statistical Methods*, 3rd ed. (2014),
    sec. 4.3 (the CI that inverts the Wilcoxon rank-sum / Mann-Whitney test; Moses 1965,
    Lehmann 1963). With the n*m pairwise differences sorted, ``d_(1) <= ... <= d_(nm)``, the CI is
    ``[d_(k), d_(nm + 1 - k)]`` for the largest k >= 1 with ``P(U <= k - 1) <= alpha / 2`` under the
    null; its exact coverage (continuous data, shift model) is ``1 - 2 P(U <= k - 1)`` >= confidence.

    Returns:
        ``(k, achieved_confidence)``; ``(0, nan)`` when no such k exists (too few processes:
        even ``[d_(1), d_(nm)]`` has coverage below ``confidence``).
    """
    half = (1.0 - confidence) / 2.0
    lo, hi = 0, n * m // 2  # k = the number of u in [0, nm/2) with P(U <= u) <= alpha/2 (a monotone cdf)
    while lo < hi:
        mid = (lo + hi) // 2
        if _u_cdf_at(n, m, mid) <= half + 1e-12:
            lo = mid + 1
        else:
            hi = mid
    k = lo
    if k == 0:
        return 0, math.nan
    return k, 1.0 - 2.0 * _u_cdf_at(n, m, k - 1)


def min_processes(confidence: float = 0.95) -> int:
    """Smallest n per side (equal sizes) at which a verdict other than undetermined is possible:
    :data:`MIN_PROCESSES`, or more when an exact Moses CI at ``confidence`` needs more (2 / C(2n, n)
    must be <= 1 - confidence: n >= 4 at 95 %, n >= 5 at 99 %)."""
    n = 2
    while moses_rank(n, n, confidence)[0] == 0:
        n += 1
    return max(n, MIN_PROCESSES)


def hodges_lehmann(stock: np.ndarray, patched: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """Hodges-Lehmann time ratio of patched vs stock with its exact Moses CI, in log space.

    ``ratio = exp(median_ij(log patched_j - log stock_i))`` (Hodges & Lehmann 1963, Annals of
    Mathematical Statistics 34:598): the shift of log times, i.e. a multiplicative change of time;
    the CI is ``exp`` of the :func:`moses_rank` order statistics of the same differences.

    Args:
        stock, patched: per-process medians, seconds, all > 0 and finite (1-D).
        confidence: nominal level in (0, 1).
    Returns:
        ``(ratio, ci_low, ci_high, achieved_confidence)``; CI and level NaN when no exact CI exists.
    """
    d = np.sort((np.log(patched)[None, :] - np.log(stock)[:, None]).ravel())
    ratio = float(np.exp(np.median(d)))
    k, achieved = moses_rank(stock.size, patched.size, confidence)
    if k == 0:
        return ratio, math.nan, math.nan, math.nan
    return ratio, float(np.exp(d[k - 1])), float(np.exp(d[d.size - k])), achieved


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def compare(
    stock: Sequence[float],
    patched: Sequence[float],
    *,
    threshold: float = 0.02,
    confidence: float = 0.95,
    floor: int = MIN_PROCESSES,
    unresolved: int = 0,
) -> Comparison:
    """Compare per-process medians of the patched build with the stock build for one cell.

    Statistics (all on log times; a time ratio is a shift of log time):
        - ``ratio``: Hodges-Lehmann estimate, ``exp`` of the median of all n_s * n_p differences
          ``log patched_j - log stock_i`` (:func:`hodges_lehmann`).
        - CI: the exact distribution-free Moses interval of that shift (:func:`moses_rank`), at
          ``achieved_confidence`` >= ``confidence`` (97.1 % at 4 + 4 processes, where it is the
          whole range of the differences). It is the inverse of the exact Mann-Whitney U test.
        - ``p_value``: two-sided exact Mann-Whitney U of the same values
          (``scipy.stats.mannwhitneyu(method="exact")``); 1 lies outside the CI exactly when
          p <= 1 - achieved_confidence (ties aside), so CI and test cannot disagree.

    Verdict: :func:`judge` (the one rule): ``faster``/``slower`` when the whole CI lies beyond
    +-threshold, ``equivalent`` when it lies inside, ``undetermined`` otherwise or below
    :data:`MIN_PROCESSES` per side, with a :class:`Cause`.

    Bimodality: each side's :func:`modes` are attached. When both sides have the same number (>= 2)
    of modes, ``mode_ratios`` pairs them by rank (fastest with fastest) with each side's share; a
    ratio is never taken across modes. The Hodges-Lehmann ratio stays the shift estimate: under a
    shift model (the patch scales every mode alike) it estimates the common factor, and its CI
    keeps its exact coverage on bimodal data (docs/methodology.md, simulation).

    Args:
        stock, patched: per-process medians, seconds (1-D).
        threshold: relative band half-width, fraction (0.02 = 2 %), >= 0.
        confidence: nominal CI level in (0, 1).
        floor: processes per side a verdict needs (:data:`MIN_PROCESSES`, or
            :data:`MIN_PROCESSES_LAUNCH_BOUND` for a launch-bound cell); raised to what an exact CI
            at ``confidence`` needs (:func:`min_processes`).
        unresolved: processes (both sides) whose blocks lasted under the timer's resolution
            (:attr:`harness.bench.timer.Measurement.below_resolution`, which the caller reads off the raw
            samples): > 0 and the cell is not judged (``undetermined``, ``BELOW_RESOLUTION``; no ratio,
            CI or p: their times are the clock's ticks, not the calls').
    Returns:
        A :class:`Comparison`; never raises for bad *data* (it becomes ``undetermined``).
    Raises:
        ValueError: invalid *parameters* (threshold < 0, confidence outside (0, 1), unresolved < 0).
    """
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    s = np.asarray(stock, dtype=float).ravel()
    p = np.asarray(patched, dtype=float).ravel()
    nan = math.nan
    base: dict[str, Any] = dict(
        stock=tuple(float(v) for v in s),
        patched=tuple(float(v) for v in p),
        stock_median=nan,
        patched_median=nan,
        ratio=nan,
        ci_low=nan,
        ci_high=nan,
        p_value=nan,
        threshold=float(threshold),
        confidence=float(confidence),
        achieved_confidence=nan,
        floor=max(int(floor), min_processes(confidence)),
    )
    notes: list[str] = []

    def done(problem: Cause | None, reason: str) -> Comparison:
        verdict, cause = judge(
            base["ci_low"], base["ci_high"], s.size, p.size, threshold=threshold, problem=problem, floor=base["floor"]
        )
        return Comparison(**base, verdict=verdict, cause=cause, reason=reason, notes=tuple(notes))

    problem = _input_problem(s, p, unresolved)
    if problem is not None:
        return done(*problem)

    base["stock_median"] = float(np.median(s))
    base["patched_median"] = float(np.median(p))
    base["stock_modes"] = sm = tuple(modes(s))
    base["patched_modes"] = pm = tuple(modes(p))
    for name, ms in (("stock", sm), ("patched", pm)):
        if len(ms) > 1:
            notes.append(f"{name} is multimodal (" + ", ".join(f"{_fmt(m.center)} s x{m.n}" for m in ms) + ")")
    if len(sm) == len(pm) > 1:
        base["mode_ratios"] = tuple(ModeRatio(b.center / a.center, a.share, b.share) for a, b in zip(sm, pm))
    ratio, lo, hi, achieved = hodges_lehmann(s, p, confidence)
    base["ratio"] = ratio
    base["p_value"] = mann_whitney_p(np.log(p), np.log(s))
    if np.ptp(s) == 0 and np.ptp(p) == 0 and min(s.size, p.size) >= MIN_PROCESSES:
        return done(
            Cause.ZERO_SPREAD, "zero spread: every process on each side has the same median (timer resolution?)"
        )
    base.update(ci_low=lo, ci_high=hi, achieved_confidence=achieved)
    if min(s.size, p.size) < base["floor"] or not math.isfinite(lo):
        n_min = base["floor"]
        return done(
            Cause.BELOW_FLOOR,
            f"n={s.size} stock, n={p.size} patched processes: a verdict needs >= {n_min} "
            f"per side (an exact {confidence:.0%} CI and the documented coverage floor)",
        )
    for name, a in (("stock", s), ("patched", p)):
        if np.ptp(a) == 0:
            notes.append(f"all {name} processes have the same median (timer resolution?)")
    ci = f"CI [{lo:.4f}, {hi:.4f}] at {achieved:.1%}, U-test p={base['p_value']:.2g}"
    verdict, _ = judge(lo, hi, s.size, p.size, threshold=threshold)
    edge = {
        FASTER: f"below {1 - threshold:.4g}",
        SLOWER: f"above {1 + threshold:.4g}",
        EQUIVALENT: f"inside the +-{threshold:.3g} band",
    }.get(verdict, f"across a +-{threshold:.3g} band edge")
    return done(None, f"{ci}: {edge}")


# --------------------------------------------------------------------------- per-config summary


@dataclass(frozen=True)
class GeoMean:
    """Per-config summary: patched vs stock over all cells of a config, whole processes as the unit.

    ``comparison``: the :func:`compare` of each process's geometric-mean time over the cells (the
    verdict, cause, CI, p-value); ``n_cells``: cells used; ``n_dropped``: processes left out because
    they did not measure every cell; ``n_unresolved``: cells left out (by the caller) because a process
    timed them below the timer's resolution (:attr:`Cause.BELOW_RESOLUTION`).
    ``gm``/``lo``/``hi``/``p_value``/``verdict``/``cause``/``reason``/``threshold``/``confidence`` read
    through to the comparison (time ratio; NaN when not computable).
    """

    comparison: Comparison
    n_cells: int
    n_dropped: int = 0
    n_unresolved: int = 0

    gm = property(lambda self: self.comparison.ratio)
    lo = property(lambda self: self.comparison.ci_low)
    hi = property(lambda self: self.comparison.ci_high)
    p_value = property(lambda self: self.comparison.p_value)
    verdict = property(lambda self: self.comparison.verdict)
    cause = property(lambda self: self.comparison.cause)
    threshold = property(lambda self: self.comparison.threshold)
    confidence = property(lambda self: self.comparison.confidence)
    n_stock = property(lambda self: self.comparison.n_stock)
    n_patched = property(lambda self: self.comparison.n_patched)

    @property
    def unresolved_text(self) -> str:
        """``N cell(s) below timer resolution left out``, or "" when none was."""
        return f"{_plural(self.n_unresolved, 'cell')} below timer resolution left out" if self.n_unresolved else ""

    @property
    def reason(self) -> str:
        unresolved = f"; {self.unresolved_text}" if self.n_unresolved else ""
        if not self.n_cells:
            return f"no cell with processes on both sides{unresolved}"
        dropped = f"; {self.n_dropped} process(es) without every cell left out" if self.n_dropped else ""
        return f"{self.comparison.reason} over {_plural(self.n_cells, 'cell')}{dropped}{unresolved}"


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {words or word + 's'}"


def geomean_by_process(
    stock: np.ndarray | Sequence[Sequence[float]],
    patched: np.ndarray | Sequence[Sequence[float]],
    *,
    threshold: float = 0.02,
    confidence: float = 0.95,
    unresolved: int = 0,
) -> GeoMean:
    """Geometric mean over the cells of one config of the patched/stock time ratio, with an exact CI
    that treats the **process** as the unit of independence.

    One worker process measures every cell of its (build, config), so a process-level state (a
    slow host core, a slower MPSGraph kernel choice for a whole process, a clock state) moves all
    of its cells together: its cells are not independent observations. Here each process becomes one
    number, its geometric-mean time over the cells, ``g_i = exp(mean_j log X[i, j])`` (seconds), and
    the two sides' ``g`` are compared by :func:`compare` (Hodges-Lehmann + exact Moses CI, the same
    :func:`judge` and :data:`MIN_PROCESSES` floor as a cell). If the patch multiplies cell j's time
    by ``f_j``, every patched ``g`` is multiplied by ``exp(mean_j log f_j)``: the estimate is the
    geometric mean of the per-cell factors.

    Args:
        stock, patched: (processes, cells) per-process medians in seconds, the same cells in the
            same column order; NaN where a process did not measure the cell. Rows without any
            value are ignored; rows missing some cells are left out and counted (``n_dropped``).
        unresolved: cells the caller left out of the columns because a process timed them below the
            timer's resolution (:attr:`Cause.BELOW_RESOLUTION`), said in the reason (``n_unresolved``).
    Returns:
        :class:`GeoMean`.
    Raises:
        ValueError: arrays not 2-D, different column counts, a value <= 0 or inf, threshold < 0,
            or confidence outside (0, 1).
    """
    S = np.asarray(stock, dtype=float)
    P = np.asarray(patched, dtype=float)
    if S.ndim != 2 or P.ndim != 2 or S.shape[1] != P.shape[1]:
        raise ValueError(
            f"geomean_by_process: need 2-D (processes, cells) arrays with equal columns, got "
            f"{S.shape} and {P.shape}"
        )
    if np.any(np.isinf(S)) or np.any(np.isinf(P)) or np.any(S[np.isfinite(S)] <= 0) or np.any(P[np.isfinite(P)] <= 0):
        raise ValueError("geomean_by_process: values must be positive finite seconds (NaN = not measured)")
    if not threshold >= 0 or not 0.0 < confidence < 1.0:
        raise ValueError("geomean_by_process: threshold must be >= 0 and confidence in (0, 1)")
    S = S[~np.all(np.isnan(S), axis=1)]
    P = P[~np.all(np.isnan(P), axis=1)]
    cells = S.shape[1]
    full_s, full_p = S[~np.any(np.isnan(S), axis=1)], P[~np.any(np.isnan(P), axis=1)]
    dropped = len(S) - len(full_s) + len(P) - len(full_p)
    g_s = np.exp(np.mean(np.log(full_s), axis=1)) if cells else np.empty(0)
    g_p = np.exp(np.mean(np.log(full_p), axis=1)) if cells else np.empty(0)
    return GeoMean(compare(g_s, g_p, threshold=threshold, confidence=confidence), cells, dropped, int(unresolved))


# --------------------------------------------------------------------------- adaptive sampling


def converged(comparison: Comparison, target_half_width: float = 0.01) -> bool:
    """True when the cell has its floor of processes per side (:attr:`Comparison.floor`), its CI
    exists and its relative half-width is <= ``target_half_width``.

    Half-width: :attr:`Comparison.half_width` (fraction of the ratio, wider arm). A cell
    whose CI could not be computed, or below the floor, is not converged.
    """
    hw = comparison.half_width
    return (
        min(comparison.n_stock, comparison.n_patched) >= comparison.floor
        and math.isfinite(hw)
        and hw <= target_half_width
    )


def unconverged(
    comparisons: Mapping[K, Comparison],
    target_half_width: float | Mapping[K, float] = 0.01,
    *,
    max_step: int = 64,
) -> dict[K, int]:
    """Cells that need more rounds (the one adaptive rule: not :func:`converged` at their target),
    with an estimate of extra processes per side. ``target_half_width``: one target for every cell,
    or one per key (the runner gives launch-bound cells a wider one).

    For a cell with a CI, the half-width shrinks like 1/sqrt(n) (the Hodges-Lehmann estimate is
    asymptotically normal, Hodges & Lehmann 1963), so ``n_needed = ceil(n * (half_width / target)^2)``;
    the estimate is ``n_needed - n``, at least what reaches :func:`min_processes` (and at least 1,
    at most ``max_step``) with n the smaller side. A cell
    without a CI gets what it takes to reach :func:`min_processes` at its confidence, or 2
    when even that is met (zero spread, non-finite data: more rounds may or may not help; the
    runner's time budget decides). Converged cells are absent from the result, and so are cells below the
    timer's resolution (:attr:`Cause.BELOW_RESOLUTION`): more processes cannot resolve what the clock cannot.

    Returns:
        ``{key: extra processes per side}``, for unconverged cells only.
    """
    out: dict[K, int] = {}
    for key, c in comparisons.items():
        target = target_half_width[key] if isinstance(target_half_width, Mapping) else target_half_width
        if converged(c, target) or c.cause == Cause.BELOW_RESOLUTION:
            continue
        n = min(c.n_stock, c.n_patched)
        hw = c.half_width
        if math.isfinite(hw) and hw > 0:
            need = max(math.ceil(n * (hw / target) ** 2) - n, c.floor - n)
        else:
            need = c.floor - n
            if need < 1:
                need = 2
        out[key] = int(min(max(need, 1), max_step))
    return out


# --------------------------------------------------------------------------- drift


@dataclass(frozen=True)
class Drift:
    """Trend of one build/config's per-round medians over the run.

    n: rounds; tau, p_value: Kendall's tau of the values against the round index and its
    two-sided p-value; rel_change (+ rel_low/rel_high, its CI): Theil-Sen slope x (n - 1) /
    median, i.e. the fitted change from the first to the last round as a fraction of the
    typical value (> 0: getting slower); verdict ``drift|stable|undetermined``; reason.
    """

    n: int
    tau: float
    p_value: float
    rel_change: float
    rel_low: float
    rel_high: float
    verdict: str
    reason: str


def drift(
    round_medians: Sequence[float],
    *,
    threshold: float = 0.02,
    confidence: float = 0.95,
) -> Drift:
    """Did the same build/config get faster or slower over the run (throttling, warm-up, load)?

    Input: per-round medians (seconds) of one build/config in run order (the runner
    interleaves builds ABAB with per-round shuffling, so a trend here is drift of the machine,
    not of the build). Tests: Kendall's tau against the round index (``scipy.stats.kendalltau``,
    exact when small and without ties) and the Theil-Sen slope with its CI
    (``scipy.stats.theilslopes``, which inverts the same Kendall statistic).

    Verdict (alpha = 1 - confidence):
        - ``drift``: p < alpha and |rel_change| >= threshold (a warning, so the point estimate
          suffices);
        - ``stable``: the CI of rel_change lies within +-threshold;
        - ``undetermined``: otherwise, or fewer rounds than can reach p < alpha (exact
          two-sided minimum 2/n!, so n >= 5 at 95 %), or NaN/inf/non-positive values.

    Raises:
        ValueError: threshold < 0 or confidence outside (0, 1).
    """
    if not threshold >= 0 or not 0.0 < confidence < 1.0:
        raise ValueError("drift: threshold must be >= 0 and confidence in (0, 1)")
    y = np.asarray(round_medians, dtype=float).ravel()
    n = int(y.size)
    nan = math.nan
    alpha = 1.0 - confidence
    if n and (not np.all(np.isfinite(y)) or np.any(y <= 0)):
        return Drift(n, nan, nan, nan, nan, nan, UNDETERMINED, "a round median is NaN/inf or <= 0 s")
    if n < 2 or 2.0 / math.factorial(n) >= alpha:
        return Drift(
            n, nan, nan, nan, nan, nan, UNDETERMINED, f"{n} round(s) cannot reach p < {alpha:.3g}; run more rounds"
        )
    if np.ptp(y) == 0:
        return Drift(n, nan, nan, 0.0, 0.0, 0.0, STABLE, "all rounds have the same median")
    idx = np.arange(n, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kt = _st.kendalltau(idx, y)
        ts = _st.theilslopes(y, idx, alpha=confidence)
    scale = (n - 1) / float(np.median(y))
    rel, rlo, rhi = (float(v) * scale for v in (ts.slope, ts.low_slope, ts.high_slope))
    tau, pv = float(kt.statistic), float(kt.pvalue)
    if not all(math.isfinite(v) for v in (tau, pv, rel, rlo, rhi)):
        return Drift(n, tau, pv, rel, rlo, rhi, UNDETERMINED, "Kendall tau or Theil-Sen slope not finite")
    desc = f"change {rel:+.2%} [{rlo:+.2%}, {rhi:+.2%}], tau={tau:+.2f}, p={pv:.2g}"
    if pv < alpha and abs(rel) >= threshold:
        return Drift(n, tau, pv, rel, rlo, rhi, DRIFT, desc)
    if -threshold <= rlo and rhi <= threshold:
        return Drift(n, tau, pv, rel, rlo, rhi, STABLE, desc + f" within +-{threshold:.3g}")
    return Drift(n, tau, pv, rel, rlo, rhi, UNDETERMINED, desc + ": inconclusive, run more rounds")
