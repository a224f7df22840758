"""A/B statistics over fresh worker processes: medians, bootstrap CIs, U-tests, verdicts,
bimodality and drift.

Pure functions over numbers (numpy + scipy only): no filesystem, no printing, no torch.

Data model. One *cell* is build x env config x workload x shape x dtype. Each fresh worker
process yields raw per-call times in **seconds** (its *samples*); the process's median is the
per-process statistic (:func:`process_median`). Between processes the spread is larger than
inside one (``../shared/device_notes.md``: 1-5 % cv on an H200, a 2-3x slow kernel on MPS about
40 % of the time), so every comparison here treats the **per-process medians** as the
independent observations: ``compare(stock_medians, patched_medians)``.

Conventions:

- ``ratio`` is a **time ratio**, ``median(patched) / median(stock)``: < 1 means patched is
  faster; ``speedup = 1 / ratio``.
- Relative quantities (``threshold``, half-widths, drift) are fractions: 0.02 means 2 %.
- Nothing here turns an error into a verdict: when a statistic cannot be computed the verdict
  is ``"undetermined"`` and ``reason`` says why (unlike pyperf's ``_compare.py``, see
  ``../shared/STYLE.md``). Programming errors (wrong types) still raise.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

import numpy as np
from scipy import stats as _st

__all__ = [
    "Comparison",
    "Drift",
    "GeoMean",
    "Mode",
    "compare",
    "converged",
    "drift",
    "geomean",
    "geomean_by_process",
    "iqr",
    "min_processes",
    "modes",
    "process_median",
    "unconverged",
]

FASTER, SLOWER, UNCHANGED, UNDETERMINED = "faster", "slower", "unchanged", "undetermined"
VERDICTS = (FASTER, SLOWER, UNCHANGED, UNDETERMINED)
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


# --------------------------------------------------------------------------- A/B comparison


@dataclass(frozen=True)
class Comparison:
    """Patched vs stock for one cell, from per-process medians (seconds).

    Fields: ``stock``/``patched`` the inputs (seconds); ``stock_median``/``patched_median``
    (seconds); ``ratio`` = patched/stock time ratio (< 1: patched faster); ``ci_low``/
    ``ci_high`` its bootstrap confidence interval at ``confidence``; ``p_value`` two-sided
    Mann-Whitney U; ``verdict`` one of ``faster|slower|unchanged|undetermined``; ``reason`` one
    line explaining the verdict (always set); ``notes`` extra flags (bimodality, CI method
    fallback, zero spread). NaN marks what could not be computed.
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
    reason: str
    threshold: float
    confidence: float
    ci_method: str
    n_resamples: int
    stock_modes: tuple[Mode, ...] = ()
    patched_modes: tuple[Mode, ...] = ()
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
        d.update(speedup=self.speedup, half_width=self.half_width, bimodal=self.bimodal)
        return _json_safe(d)


def _json_safe(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def min_processes(confidence: float = 0.95) -> int:
    """Smallest n per side (equal sizes) at which any verdict other than undetermined is possible.

    With n processes per side the smallest two-sided exact Mann-Whitney p-value is
    ``2 / C(2n, n)`` (complete separation); below ``1 - confidence`` needs n >= 4 at 95 %.
    """
    alpha = 1.0 - confidence
    n = 2
    while 2.0 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def _ratio_of_medians(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(y, axis=axis) / np.median(x, axis=axis)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _bootstrap_ci(data, statistic, confidence, n_resamples, method, rng) -> tuple[float, float]:
    """``scipy.stats.bootstrap`` CI of a vectorized statistic of independent samples.

    Degenerate data gives a NaN bound (scipy's DegenerateDataWarning is silenced here and
    every caller checks finiteness). ``batch=1000`` bounds memory to 1000 x all values.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _st.bootstrap(data, statistic, n_resamples=n_resamples, vectorized=True, paired=False,
                            confidence_level=confidence, method=method, rng=rng, batch=1000)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _undetermined(base: dict, reason: str, notes: list[str]) -> Comparison:
    return Comparison(**base, verdict=UNDETERMINED, reason=reason, notes=tuple(notes))


def compare(
    stock: Sequence[float],
    patched: Sequence[float],
    *,
    threshold: float = 0.02,
    confidence: float = 0.95,
    rng_seed: int = 0,
    n_resamples: int = 9999,
    method: str = "percentile",
) -> Comparison:
    """Compare per-process medians of the patched build with the stock build for one cell.

    Statistics:
        - ``ratio = median(patched) / median(stock)`` (time ratio; speedup = 1/ratio).
        - CI: ``scipy.stats.bootstrap`` of that ratio, the two samples resampled independently
          (``paired=False``), ``n_resamples`` resamples, seeded by ``rng_seed`` (reproducible).
          Default ``method="percentile"``: BCa's acceleration comes from the jackknife, which is
          inconsistent for the median (Efron & Tibshirani 1993, sec. 11.6), and the bootstrap
          distribution of a median of <= 10 values is discrete; the percentile interval is
          transformation-respecting, so the CI of ``speedup`` is the reciprocal interval.
          ``method="BCa"`` is accepted; if it gives a non-finite interval the percentile
          interval is used and ``notes`` says so.
        - ``p_value``: two-sided Mann-Whitney U (``scipy.stats.mannwhitneyu``, method "auto").

    Verdict rule (alpha = 1 - confidence, band = [1 - threshold, 1 + threshold]):
        - ``faster``: ci_high < 1 - threshold **and** p_value < alpha;
        - ``slower``: ci_low > 1 + threshold **and** p_value < alpha;
        - ``unchanged``: the whole CI lies inside the band (an equivalence claim: any change is
          smaller than the noise threshold);
        - ``undetermined`` otherwise, with the reason: the CI straddles a band edge (e.g.
          [0.97, 0.99] is significantly faster but not clearly by more than 2 %: run more
          processes), CI and U-test disagree, or something could not be computed: fewer than
          :func:`min_processes` per side (the U-test could not reach alpha even with complete
          separation, and bootstrap CIs of 2-3 values under-cover), NaN/inf or non-positive
          times, zero spread on both sides (a degenerate bootstrap: timer resolution?).
        Requiring both the CI and the U-test keeps the A/A false-positive rate at or under
        alpha even at ``threshold=0`` (measured in tests/test_stats.py).

    Bimodality: each side's :func:`modes` are attached; a multimodal side adds a note (the
    ratio of medians then compares the modes the medians fall in; report the modes).

    Args:
        stock, patched: per-process medians, seconds (1-D).
        threshold: relative noise threshold, fraction (0.02 = 2 %), >= 0.
        confidence: CI level and 1 - alpha of the U-test, in (0, 1).
        rng_seed: bootstrap seed.
        n_resamples: bootstrap resamples.
        method: "percentile" (default) or "BCa".
    Returns:
        A :class:`Comparison`; never raises for bad *data* (it becomes ``undetermined``).
    Raises:
        ValueError: invalid *parameters* (threshold < 0, confidence outside (0, 1), unknown
        method), which are programming errors of the caller.
    """
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if method not in ("percentile", "BCa"):
        raise ValueError(f"method must be 'percentile' or 'BCa', got {method!r}")
    s = np.asarray(stock, dtype=float).ravel()
    p = np.asarray(patched, dtype=float).ravel()
    alpha = 1.0 - confidence
    nan = math.nan
    base = dict(
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
        ci_method=method,
        n_resamples=int(n_resamples),
    )
    notes: list[str] = []

    for name, a in (("stock", s), ("patched", p)):
        if a.size == 0:
            return _undetermined(base, f"no {name} processes", notes)
        bad = int(np.sum(~np.isfinite(a)))
        if bad:
            return _undetermined(base, f"{bad} {name} per-process median(s) are NaN/inf", notes)
        if np.any(a <= 0):
            return _undetermined(base, f"{name} has a per-process median <= 0 s", notes)

    base["stock_median"] = float(np.median(s))
    base["patched_median"] = float(np.median(p))
    base["ratio"] = base["patched_median"] / base["stock_median"]
    base["stock_modes"] = tuple(modes(s))
    base["patched_modes"] = tuple(modes(p))
    for name, ms in (("stock", base["stock_modes"]), ("patched", base["patched_modes"])):
        if len(ms) > 1:
            desc = ", ".join(f"{_fmt(m.center)} s x{m.n}" for m in ms)
            notes.append(f"{name} is multimodal ({desc})")

    if s.size < 2 or p.size < 2:
        return _undetermined(
            base,
            f"n={s.size} stock, n={p.size} patched process(es): a CI needs >= 2 per side",
            notes,
        )
    if np.ptp(s) == 0 and np.ptp(p) == 0:
        return _undetermined(
            base, "zero spread: every process on each side has the same median (timer resolution?)", notes
        )
    for name, a in (("stock", s), ("patched", p)):
        if np.ptp(a) == 0:
            notes.append(f"all {name} processes have the same median (timer resolution?)")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        u = _st.mannwhitneyu(p, s, alternative="two-sided", method="auto")
    base["p_value"] = float(u.pvalue)

    rng = np.random.default_rng(rng_seed)
    lo = hi = nan
    used = method
    for meth in ([method] if method == "percentile" else [method, "percentile"]):
        lo, hi = _bootstrap_ci((s, p), _ratio_of_medians, confidence, n_resamples, meth, rng)
        used = meth
        if math.isfinite(lo) and math.isfinite(hi):
            break
        if meth != "percentile":
            notes.append(f"{meth} interval was not finite; percentile interval used")
    base["ci_method"] = used
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return _undetermined(base, "bootstrap CI is not finite", notes)
    base["ci_low"], base["ci_high"] = lo, hi

    n_min = min_processes(confidence)
    min_p = 2.0 / math.comb(s.size + p.size, s.size)
    if min_p >= alpha:
        return _undetermined(
            base,
            f"n={s.size} stock, n={p.size} patched processes cannot reach p < {alpha:.3g} "
            f"(smallest possible p = {min_p:.3g}); run >= {n_min} per side",
            notes,
        )
    if not math.isfinite(base["p_value"]):
        return _undetermined(base, "Mann-Whitney U p-value is not finite", notes)

    pv = base["p_value"]
    ci = f"CI [{lo:.4f}, {hi:.4f}]"
    down, up = 1.0 - threshold, 1.0 + threshold
    if hi < down or lo > up:
        word, edge = (FASTER, f"< {down:.4g}") if hi < down else (SLOWER, f"> {up:.4g}")
        if pv < alpha:
            return Comparison(**base, verdict=word, reason=f"{ci} {edge} and U-test p={pv:.2g} < {alpha:.3g}", notes=tuple(notes))
        return _undetermined(base, f"{ci} {edge} but U-test p={pv:.2g} >= {alpha:.3g}: the tests disagree", notes)
    if lo >= down and hi <= up:
        return Comparison(**base, verdict=UNCHANGED, reason=f"{ci} inside the +-{threshold:.3g} band", notes=tuple(notes))
    return _undetermined(
        base, f"{ci} straddles the +-{threshold:.3g} band edge (p={pv:.2g}): run more processes", notes
    )


# --------------------------------------------------------------------------- geometric mean


@dataclass(frozen=True)
class GeoMean:
    """Geometric mean of time ratios over cells, with its CI.

    gm, lo, hi: the geometric mean and CI bounds (time ratio; NaN when not computable);
    n_cells: cells used; n_excluded: cells left out (no CI of their own / not finite);
    over: "processes" or "cells" (what was resampled); reason: one line.
    """

    gm: float
    lo: float
    hi: float
    n_cells: int
    n_excluded: int
    over: str
    confidence: float
    reason: str
    p_value: float = math.nan
    verdict: str = UNDETERMINED
    threshold: float = math.nan


def _gm_of_cells(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    logs = [np.log(_ratio_of_medians(samples[i], samples[i + 1], axis=axis)) for i in range(0, len(samples), 2)]
    return np.exp(np.mean(logs, axis=0))


def _gm_of_logs(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.exp(np.mean(x, axis=axis))


def geomean(
    cells: Sequence[Union[Comparison, float]],
    *,
    over: str = "auto",
    confidence: float = 0.95,
    n_resamples: int = 9999,
    rng_seed: int = 0,
) -> GeoMean:
    """Geometric mean of patched/stock time ratios across the cells of one config, with a CI.

    ``gm = exp(mean_i log(ratio_i))``. Two questions, two CIs:

    - ``over="processes"`` (default for :class:`Comparison` inputs): the cells are the fixed,
      named benchmark set and the only uncertainty is measurement noise. One
      ``scipy.stats.bootstrap`` (percentile) resamples the processes of every cell, both
      sides, independently, and recomputes the geometric mean of the ratios of medians.
      Cells whose own CI could not be computed are excluded and counted in ``n_excluded``.
      This assumes the cells' processes are independent; when one process measured many cells
      (the runner's case) use :func:`geomean_by_process`, which resamples whole processes:
      the report does.
    - ``over="cells"`` (the only choice for plain ratios): the cells are a sample of
      workloads; bootstrap over cells of the mean log ratio. Wider when cells disagree (a
      patch that helps some shapes and not others); needs >= 2 cells that are not all equal.

    Args:
        cells: Comparisons of one config, or plain time ratios (> 0).
        over: "auto" | "processes" | "cells".
        confidence: CI level in (0, 1).
    Returns:
        A :class:`GeoMean`; its CI is NaN (with the reason) when it cannot be computed.
    Raises:
        ValueError: ``over="processes"`` with plain ratios, or an unknown ``over``.
    """
    items = list(cells)
    comps = [c for c in items if isinstance(c, Comparison)]
    if over == "auto":
        over = "processes" if items and len(comps) == len(items) else "cells"
    if over not in ("processes", "cells"):
        raise ValueError(f"over must be 'auto', 'processes' or 'cells', got {over!r}")
    if over == "processes" and len(comps) != len(items):
        raise ValueError("over='processes' needs Comparison inputs (plain ratios carry no processes)")

    nan = math.nan
    if over == "processes":
        used = [c for c in comps if c.has_ci and c.ratio > 0]
    else:
        used = [c for c in items if math.isfinite(c.ratio if isinstance(c, Comparison) else float(c))]
        used = [c for c in used if (c.ratio if isinstance(c, Comparison) else float(c)) > 0]
    excluded = len(items) - len(used)
    if not used:
        return GeoMean(nan, nan, nan, 0, excluded, over, confidence, "no cell with a computable ratio")
    ratios = np.array([c.ratio if isinstance(c, Comparison) else float(c) for c in used])
    logs = np.log(ratios)
    gm = float(np.exp(np.mean(logs)))
    rng = np.random.default_rng(rng_seed)
    note = f"; {excluded} cell(s) excluded (no ratio/CI)" if excluded else ""

    if over == "cells":
        if len(used) < 2 or np.ptp(logs) == 0:
            return GeoMean(gm, nan, nan, len(used), excluded, over, confidence,
                           f"bootstrap over cells needs >= 2 cells that differ ({len(used)} given){note}")
        data: tuple[np.ndarray, ...] = (logs,)
        stat = _gm_of_logs
    else:
        data = tuple(np.asarray(a, dtype=float) for c in used for a in (c.stock, c.patched))
        stat = _gm_of_cells
    lo, hi = _bootstrap_ci(data, stat, confidence, n_resamples, "percentile", rng)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return GeoMean(gm, nan, nan, len(used), excluded, over, confidence, f"bootstrap CI is not finite{note}")
    return GeoMean(gm, lo, hi, len(used), excluded, over, confidence,
                   f"percentile bootstrap over {over}, {len(used)} cell(s){note}")


def _gm_of_rows(stock: np.ndarray, patched: np.ndarray) -> np.ndarray:
    """Geometric mean over cells of the ratio of per-cell medians; rows are processes.

    ``stock``/``patched``: (..., processes, cells) seconds, NaN where a process did not measure
    a cell. Returns (...,): NaN where some cell has no value on a side."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slice -> NaN, handled by the callers
        ratio = np.nanmedian(patched, axis=-2) / np.nanmedian(stock, axis=-2)
    return np.exp(np.mean(np.log(ratio), axis=-1))


#: exact permutation test up to this many labelings, else Monte Carlo with this many
EXACT_LABELINGS = 20000


def geomean_by_process(
    stock: Union[np.ndarray, Sequence[Sequence[float]]],
    patched: Union[np.ndarray, Sequence[Sequence[float]]],
    *,
    threshold: float = 0.02,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    rng_seed: int = 0,
) -> GeoMean:
    """Geometric mean of patched/stock time ratios over the cells of one config, with a CI and a
    p-value that treat the **process** as the unit of independence.

    One worker process measures every cell of its (build, config), so a process-level state (a
    slow host core, a slower MPSGraph kernel choice for a whole process, a clock state) moves all
    of its cells together. Resampling each cell's processes independently (:func:`geomean` with
    ``over="processes"``) ignores that correlation and gives too narrow a CI: on an H200 A/A run
    with 4 processes per side it put a whole 95 % CI above +2 % (docs/methodology.md). Here:

    - point estimate ``gm = exp(mean_j log(median_i P[i, j] / median_i S[i, j]))``;
    - CI: percentile bootstrap that resamples whole rows (processes) of each side, with
      replacement, independently per side; resamples in which some cell has no value on a side
      (possible when adaptive rounds measured only some cells) are dropped and counted; more than
      1 % dropped gives no CI;
    - p-value: permutation test of "the build label does not matter", permuting whole rows
      between the sides (exact over all C(n_s + n_p, n_s) labelings up to ``EXACT_LABELINGS``,
      else that many random ones, (1 + hits) / (1 + draws)); statistic |log gm|; a labeling
      that leaves a cell empty counts as at least as extreme (conservative). With 4 processes per
      side the smallest p is 2/70 = 0.029.
    - verdict as for a cell (:func:`compare`): ``faster`` if CI high < 1 - threshold and
      p < 1 - confidence, ``slower`` mirrored, ``unchanged`` if the CI lies in the band, else
      ``undetermined`` with the reason.

    numpy index resampling rather than ``scipy.stats.bootstrap``/``permutation_test``: those
    resample each sample's values along one axis but cannot drop degenerate (empty-cell)
    resamples, which with NaN-padded rows would make every CI NaN or bias the p-value low.

    Args:
        stock, patched: (processes, cells) per-process medians in seconds, the same cells in the
            same column order; NaN where a process did not measure the cell. Rows without any
            value are ignored.
    Returns:
        :class:`GeoMean` with ``over="processes (joint)"``, ``p_value``, ``verdict``, ``reason``.
    Raises:
        ValueError: arrays not 2-D, different column counts, a value <= 0 or inf, threshold < 0,
            or confidence outside (0, 1).
    """
    S = np.asarray(stock, dtype=float)
    P = np.asarray(patched, dtype=float)
    if S.ndim != 2 or P.ndim != 2 or S.shape[1] != P.shape[1]:
        raise ValueError(f"geomean_by_process: need 2-D (processes, cells) arrays with equal columns, got "
                         f"{S.shape} and {P.shape}")
    if np.any(np.isinf(S)) or np.any(np.isinf(P)) or np.any(S[np.isfinite(S)] <= 0) or np.any(P[np.isfinite(P)] <= 0):
        raise ValueError("geomean_by_process: values must be positive finite seconds (NaN = not measured)")
    if not threshold >= 0 or not 0.0 < confidence < 1.0:
        raise ValueError("geomean_by_process: threshold must be >= 0 and confidence in (0, 1)")
    S = S[~np.all(np.isnan(S), axis=1)]
    P = P[~np.all(np.isnan(P), axis=1)]
    nan = math.nan
    over = "processes (joint)"
    cells = S.shape[1]
    alpha = 1.0 - confidence

    def result(gm, lo, hi, p, verdict, reason):
        return GeoMean(gm, lo, hi, cells, 0, over, confidence, reason, p, verdict, threshold)

    if cells == 0 or len(S) == 0 or len(P) == 0:
        return result(nan, nan, nan, nan, UNDETERMINED, "no cell with processes on both sides")
    gm = float(_gm_of_rows(S, P))
    if not math.isfinite(gm):
        return result(gm, nan, nan, nan, UNDETERMINED, "a cell has no measured process on one side")
    if min(len(S), len(P)) < 2:
        return result(gm, nan, nan, nan, UNDETERMINED,
                      f"{len(S)} stock and {len(P)} patched process(es): no CI from fewer than 2 per side")
    rng = np.random.default_rng(rng_seed)

    # joint bootstrap over processes
    stats_: list[np.ndarray] = []
    for start in range(0, n_resamples, 1000):
        b = min(1000, n_resamples - start)
        stats_.append(_gm_of_rows(S[rng.integers(0, len(S), (b, len(S)))], P[rng.integers(0, len(P), (b, len(P)))]))
    boot = np.concatenate(stats_)
    good = boot[np.isfinite(boot)]
    dropped = n_resamples - good.size
    if dropped > 0.01 * n_resamples:
        return result(gm, nan, nan, nan, UNDETERMINED,
                      f"{dropped} of {n_resamples} bootstrap resamples left a cell without processes: run more rounds")
    lo, hi = (float(v) for v in np.quantile(good, [alpha / 2, 1 - alpha / 2]))

    # permutation test over whole processes
    pooled = np.vstack([S, P])
    n, k = len(pooled), len(S)
    observed = abs(math.log(gm))
    total = math.comb(n, k)
    if total <= EXACT_LABELINGS:
        labelings = np.array([list(c) for c in itertools.combinations(range(n), k)])
    else:
        labelings = np.argsort(rng.random((EXACT_LABELINGS, n)), axis=1)[:, :k]
    hits = 0
    for start in range(0, len(labelings), 1000):
        chunk = labelings[start:start + 1000]
        mask = np.zeros((len(chunk), n), dtype=bool)
        np.put_along_axis(mask, chunk, True, axis=1)
        s_side = np.where(mask[:, :, None], pooled[None], np.nan)
        p_side = np.where(~mask[:, :, None], pooled[None], np.nan)
        perm = np.abs(np.log(_gm_of_rows(s_side, p_side)))
        hits += int(np.sum(~np.isfinite(perm) | (perm >= observed * (1 - 1e-9))))
    p = hits / total if total <= EXACT_LABELINGS else (1 + hits) / (1 + EXACT_LABELINGS)

    desc = f"CI [{lo:.4f}, {hi:.4f}], permutation p={p:.2g} over {len(S)}+{len(P)} processes"
    if hi < 1 - threshold and p < alpha:
        return result(gm, lo, hi, p, FASTER, desc)
    if lo > 1 + threshold and p < alpha:
        return result(gm, lo, hi, p, SLOWER, desc)
    if 1 - threshold <= lo and hi <= 1 + threshold:
        return result(gm, lo, hi, p, UNCHANGED, desc + f" within +-{threshold:.3g}")
    if (hi < 1 - threshold or lo > 1 + threshold) and p >= alpha:
        why = (f"the CI lies outside the band but the permutation test over whole processes does not reject "
               f"(p={p:.2g}): processes, not the build, may explain it; run more rounds")
        return result(gm, lo, hi, p, UNDETERMINED, f"CI [{lo:.4f}, {hi:.4f}]: {why}")
    return result(gm, lo, hi, p, UNDETERMINED, desc + f": straddles the +-{threshold:.3g} band edge; run more rounds")


# --------------------------------------------------------------------------- adaptive sampling


def converged(comparison: Comparison, target_half_width: float = 0.01) -> bool:
    """True when the cell's CI exists and its relative half-width is <= ``target_half_width``.

    Half-width: :attr:`Comparison.half_width` (fraction of the ratio, wider arm). A cell
    whose CI could not be computed is not converged.
    """
    hw = comparison.half_width
    return math.isfinite(hw) and hw <= target_half_width


def unconverged(
    comparisons: Mapping[K, Comparison],
    target_half_width: float = 0.01,
    *,
    max_step: int = 64,
) -> dict[K, int]:
    """Cells that need more rounds, with an estimate of extra processes per side.

    For a cell with a CI, the half-width shrinks like 1/sqrt(n) (the standard error of a
    median), so ``n_needed = ceil(n * (half_width / target)^2)``; the estimate is
    ``n_needed - n`` (at least 1, at most ``max_step``) with n the smaller side. A cell
    without a CI gets what it takes to reach :func:`min_processes` at its confidence, or 2
    when even that is met (zero spread, non-finite data: more rounds may or may not help; the
    runner's time budget decides). Converged cells are absent from the result.

    Returns:
        ``{key: extra processes per side}``, for unconverged cells only.
    """
    out: dict[K, int] = {}
    for key, c in comparisons.items():
        if converged(c, target_half_width):
            continue
        n = min(c.n_stock, c.n_patched)
        hw = c.half_width
        if math.isfinite(hw) and hw > 0:
            need = math.ceil(n * (hw / target_half_width) ** 2) - n
        else:
            need = min_processes(c.confidence) - n
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
        return Drift(n, nan, nan, nan, nan, nan, UNDETERMINED,
                     f"{n} round(s) cannot reach p < {alpha:.3g}; run more rounds")
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

