"""harness.stats on synthetic per-process medians with known answers.

Noise model: per-process medians are ``true_time * exp(N(0, sigma))`` (lognormal, sigma = cv),
as measured between fresh processes on the H200 (../shared/device_notes.md: cv 1.3-4.6 %).
All random draws are seeded, so every number asserted here is reproducible; the margins
given next to the simulation asserts say how far the measured rate sits from the limit.
"""

from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import pytest
from scipy import stats as st

from harness import stats
from harness.stats import Cause, compare, converged, drift, iqr, modes, process_median, unconverged


def lognormal(rng, n, sigma, factor=1.0):
    return factor * np.exp(rng.normal(0.0, sigma, n))


# ----------------------------------------------------------------- per process


def test_process_median_and_iqr_known_values():
    assert process_median([3.0, 1.0, 2.0]) == 2.0
    assert process_median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert iqr([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 4.0)
    assert iqr([1.0, 2.0, 3.0, 4.0]) == (1.75, 3.25)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [1.0, float("inf")]])
def test_process_median_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        process_median(bad)
    with pytest.raises(ValueError):
        iqr(bad)


# ----------------------------------------------------------------- compare: known answers


def test_identical_is_equivalent_with_ci_covering_one():
    rng = np.random.default_rng(10)
    s = lognormal(rng, 10, 0.01)
    c = compare(s, s.copy())
    assert c.verdict == "equivalent" and c.cause is Cause.INSIDE_BAND, c.reason
    assert c.ratio == 1.0 and c.speedup == 1.0
    assert c.ci_low < 1.0 < c.ci_high
    assert 0.98 <= c.ci_low and c.ci_high <= 1.02
    assert c.p_value == pytest.approx(1.0)
    assert c.n_stock == c.n_patched == 10


@pytest.mark.parametrize("factor,verdict", [(1.10, "slower"), (1 / 1.10, "faster")])
def test_known_shift_is_detected_and_estimated(factor, verdict):
    rng = np.random.default_rng(11)
    s = lognormal(rng, 10, 0.01)
    p = lognormal(rng, 10, 0.01, factor)
    c = compare(s, p)
    assert c.verdict == verdict, c.reason
    assert c.ci_low <= factor <= c.ci_high
    assert abs(c.ratio / factor - 1) < 0.01
    assert c.speedup == pytest.approx(1 / c.ratio)
    assert c.p_value < 0.001  # complete separation of 10 vs 10: exact p = 2 / C(20, 10)
    assert c.stock_median == pytest.approx(np.median(s)) and c.patched_median == pytest.approx(np.median(p))


def test_ci_straddling_the_band_is_not_a_verdict():
    # A real 2 % slowdown: the CI lies above 1 but cannot be clearly beyond the 2 % band.
    rng = np.random.default_rng(12)
    c = compare(lognormal(rng, 10, 0.01), lognormal(rng, 10, 0.01, 1.02))
    assert c.ci_low < 1.02 < c.ci_high
    assert c.verdict == "undetermined" and c.cause is Cause.STRADDLES_BAND
    assert "across a +-0.02 band edge" in c.reason
    # The same data with a 0.5 % threshold is a clear verdict.
    assert compare(c.stock, c.patched, threshold=0.005).verdict == "slower"


def test_heavy_tailed_outliers_do_not_move_the_median_ratio():
    rng = np.random.default_rng(13)
    s = lognormal(rng, 20, 0.01)
    p = lognormal(rng, 20, 0.01, 1.10)
    s[[2, 7, 9]] *= 10.0  # three stock processes 10x slow
    p[4] *= 10.0  # one patched process 10x slow
    c = compare(s, p)
    assert abs(c.ratio / 1.10 - 1) < 0.01
    assert c.ci_low <= 1.10 <= c.ci_high
    assert c.verdict == "slower", c.reason
    mean_ratio = p.mean() / s.mean()
    assert abs(mean_ratio / 1.10 - 1) > 0.3  # what a mean-based ratio would have said (0.68)


def test_outliers_in_few_processes_do_not_move_the_exact_ci():
    # 2 of 10 stock processes 10x slow: only 20 of the 100 pairwise differences involve them, and the
    # exact 95 % CI at 10 + 10 uses the 24th smallest and largest differences, so ratio and CI stay on
    # the 90 % of the pairs that compare like with like. The slow pair is flagged as a mode.
    rng = np.random.default_rng(13)
    s = lognormal(rng, 10, 0.01)
    p = lognormal(rng, 10, 0.01, 1.10)
    s[[2, 7]] *= 10.0
    c = compare(s, p)
    assert stats.moses_rank(10, 10, 0.95)[0] == 24
    assert abs(c.ratio / 1.10 - 1) < 0.02
    assert c.ci_low <= 1.10 <= c.ci_high and c.ci_high / c.ci_low < 1.06
    assert c.verdict == "slower" and c.cause is Cause.BEYOND_BAND
    assert c.bimodal and [m.n for m in c.stock_modes] == [8, 2] and c.mode_ratios == ()
    # Three of four slow on a side is no longer an outlier: the CI then spans the modes.
    wide = compare(np.r_[s[:1], 10 * s[1:4]], p[:4])
    assert wide.verdict == "undetermined" and wide.ci_low < 0.2


@pytest.mark.parametrize(
    "stock,patched,cause,words",
    [
        ([1.0], [1.1], Cause.BELOW_FLOOR, "needs >= 4 per side"),
        ([1.0, 1.01, 0.99], [1.2, 1.21, 1.19], Cause.BELOW_FLOOR, "needs >= 4 per side"),
        ([1.0, 1.01, 0.99], [1.2, 1.21, 1.19, 1.22, 1.18, 1.2, 1.2, 1.2, 1.2, 1.2], Cause.BELOW_FLOOR, "n=3 stock"),
        ([], [1.0, 1.1], Cause.NO_PROCESSES, "no stock"),
        ([1.0, float("nan"), 1.1, 1.0], [1.0, 1.1, 1.0, 1.2], Cause.BAD_VALUES, "NaN/inf"),
        ([1.0, 1.1, 1.0, 1.2], [1.0, float("inf"), 1.0, 1.2], Cause.BAD_VALUES, "NaN/inf"),
        ([1.0, 0.0, 1.1, 1.0], [1.0, 1.1, 1.0, 1.2], Cause.BAD_VALUES, "<= 0"),
        ([2e-6] * 8, [1e-6] * 8, Cause.ZERO_SPREAD, "zero spread"),
    ],
)
def test_what_cannot_be_computed_is_undetermined_with_a_reason(stock, patched, cause, words):
    c = compare(stock, patched)
    assert c.verdict == "undetermined" and c.cause is cause
    assert words in c.reason
    assert not converged(c)


def test_single_process_per_side_keeps_the_point_ratio_but_no_ci():
    c = compare([1.0], [1.1])
    assert c.verdict == "undetermined"
    assert c.ratio == pytest.approx(1.1)
    assert math.isnan(c.ci_low) and c.p_value == 1.0  # the U test of 1 vs 1 exists; a CI does not


def test_min_processes_matches_exact_u_test():
    assert stats.min_processes(0.95) == 4  # 2/C(6,3) = 0.1 >= 0.05; 2/C(8,4) = 0.029 < 0.05
    assert stats.min_processes(0.99) == 5  # 2/C(10,5) = 0.0079 < 0.01
    rng = np.random.default_rng(14)
    c = compare(lognormal(rng, 4, 0.01), lognormal(rng, 4, 0.01, 1.5))
    assert c.verdict == "slower", c.reason


def test_bad_parameters_raise():
    with pytest.raises(ValueError):
        compare([1, 2], [1, 2], threshold=-0.1)
    with pytest.raises(ValueError):
        compare([1, 2], [1, 2], confidence=1.0)
    with pytest.raises(TypeError):
        compare([1, 2], [1, 2], method="BCa")  # the bootstrap paths are gone


# ----------------------------------------------------------------- exact CI and the one rule


def _u_null_cdf(n, m):
    """P(U <= u), u = 0..n*m, by enumerating all C(n+m, n) rank labelings (no scipy)."""
    counts = collections.Counter()
    for xs in itertools.combinations(range(n + m), n):
        ys = [r for r in range(n + m) if r not in xs]
        counts[sum(x > y for x in xs for y in ys)] += 1
    total = math.comb(n + m, n)
    return np.cumsum([counts[u] for u in range(n * m + 1)]) / total


@pytest.mark.parametrize("n,m", [(4, 4), (4, 6), (5, 5), (6, 6), (3, 8)])
def test_moses_rank_matches_the_enumerated_u_distribution(n, m):
    cdf = _u_null_cdf(n, m)
    for conf in (0.9, 0.95, 0.99):
        k, achieved = stats.moses_rank(n, m, conf)
        want = int(np.sum(cdf[: n * m // 2] <= (1 - conf) / 2 + 1e-12))  # largest k with P(U <= k-1) <= alpha/2
        assert k == want, (n, m, conf)
        if k:
            assert achieved == pytest.approx(1 - 2 * cdf[k - 1]) and achieved >= conf
        else:
            assert math.isnan(achieved)


def test_moses_rank_known_values():
    assert stats.moses_rank(4, 4, 0.95) == (1, pytest.approx(1 - 2 / 70))  # the whole range, 97.1 %
    assert stats.moses_rank(3, 3, 0.95)[0] == 0  # 2/20 = 0.1 > 0.05: no exact 95 % CI
    assert stats.moses_rank(10, 10, 0.95)[0] == 24  # U critical value 23 (tables: Hollander et al. A.6)


def test_hodges_lehmann_known_answer():
    s = np.array([1.0, 2.0, 4.0, 8.0])
    p = 1.5 * s
    ratio, lo, hi, achieved = stats.hodges_lehmann(s, p, 0.95)
    assert ratio == pytest.approx(1.5)  # a pure multiplicative shift is recovered exactly
    d = np.log(p)[None, :] - np.log(s)[:, None]
    assert (lo, hi) == pytest.approx((np.exp(d.min()), np.exp(d.max())))  # k = 1 at 4 + 4
    assert achieved == pytest.approx(68 / 70)


def test_ci_and_u_test_never_disagree():
    # The CI is the inverse of the exact U test: 1 lies outside the CI exactly when p <= 1 - achieved.
    rng = np.random.default_rng(17)
    for i in range(300):
        n, m = 4 + i % 5, 4 + i % 7
        c = compare(lognormal(rng, n, 0.03), lognormal(rng, m, 0.03, 1.0 + 0.01 * (i % 6)), threshold=0.0)
        outside = c.ci_high < 1 or c.ci_low > 1
        assert outside == (c.p_value <= 1 - c.achieved_confidence + 1e-12), (n, m, c.reason)
        assert (c.verdict in ("faster", "slower")) == outside


@pytest.mark.parametrize(
    "lo,hi,n,verdict,cause",
    [
        (0.95, 0.97, 4, "faster", Cause.BEYOND_BAND),
        (1.03, 1.10, 4, "slower", Cause.BEYOND_BAND),
        (0.981, 1.019, 4, "equivalent", Cause.INSIDE_BAND),
        (0.98, 1.02, 6, "equivalent", Cause.INSIDE_BAND),  # the band edges belong to the band
        (0.97, 0.99, 6, "undetermined", Cause.STRADDLES_BAND),  # significant but not clearly by > 2 %
        (0.95, 1.05, 6, "undetermined", Cause.STRADDLES_BAND),
        (0.90, 0.92, 3, "undetermined", Cause.BELOW_FLOOR),
        (math.nan, math.nan, 8, "undetermined", Cause.BELOW_FLOOR),
    ],
)
def test_judge_is_the_one_rule(lo, hi, n, verdict, cause):
    assert stats.judge(lo, hi, n, n, threshold=0.02) == (verdict, cause)
    assert stats.judge(lo, hi, n, n, threshold=0.02, problem=Cause.BAD_VALUES) == ("undetermined", Cause.BAD_VALUES)


def test_floor_of_four_per_side():
    assert stats.MIN_PROCESSES == 4
    rng = np.random.default_rng(18)
    s, p = lognormal(rng, 4, 0.01), lognormal(rng, 4, 0.01, 1.5)
    c = compare(s, p)
    assert c.verdict == "slower" and c.achieved_confidence == pytest.approx(68 / 70)
    three = compare(s[:3], p)
    assert three.verdict == "undetermined" and three.cause is Cause.BELOW_FLOOR
    assert three.ratio == pytest.approx(1.5, rel=0.03)  # the estimate is still shown


def test_bimodal_cell_gets_per_mode_ratios_and_shares():
    # MPSGraph-like: each side 60 % fast, 40 % 2.5x slow; the patch makes both modes 10 % slower.
    rng = np.random.default_rng(19)
    s = np.r_[lognormal(rng, 6, 0.005), lognormal(rng, 4, 0.005, 2.5)]
    p = np.r_[lognormal(rng, 5, 0.005, 1.1), lognormal(rng, 5, 0.005, 2.75)]
    c = compare(s, p)
    assert c.bimodal and len(c.mode_ratios) == 2
    assert [m.ratio for m in c.mode_ratios] == pytest.approx([1.1, 1.1], rel=0.01)
    assert [(m.stock_share, m.patched_share) for m in c.mode_ratios] == [(0.6, 0.5), (0.4, 0.5)]
    # The median of patched (5 fast, 5 slow) averages the two modes; the Hodges-Lehmann ratio does not.
    assert np.median(p) / np.median(s) > 1.5
    assert c.ratio == pytest.approx(1.1, rel=0.03)
    assert c.verdict == "slower", c.reason
    one_side = compare(s, lognormal(rng, 10, 0.005, 1.1))
    assert one_side.bimodal and one_side.mode_ratios == ()  # different mode counts: no per-mode ratio


# ----------------------------------------------------------------- compare: calibration


def _verdicts(n_cells, n, sigma, factor, threshold, seed):
    rng = np.random.default_rng(seed)
    out = collections.Counter()
    covered = 0
    for _ in range(n_cells):
        c = compare(lognormal(rng, n, sigma), lognormal(rng, n, sigma, factor), threshold=threshold)
        out[c.verdict] += 1
        covered += c.ci_low <= factor <= c.ci_high
    return out, covered / n_cells


def test_aa_false_positive_rate_at_default_threshold():
    # 400 A/A cells, 10 processes per side, 1 % noise. Measured: 0/400 faster or slower
    # (386 equivalent, 14 undetermined), CI coverage 95.25 % (exact level at 10 + 10: 95.7 %). Limit 5 %; the
    # measured 0 % is
    # > 4 binomial SDs (sd = 1.1 % at p = 5 %, n = 400) below it.
    v, coverage = _verdicts(400, 10, 0.01, 1.0, 0.02, seed=100)
    fp = (v["faster"] + v["slower"]) / 400
    assert fp <= 0.05
    assert v["equivalent"] / 400 >= 0.85  # the band claim is made in most A/A cells
    assert coverage >= 0.93  # nominal 95 %


def test_aa_false_positive_rate_without_threshold():
    # threshold = 0 leaves only the exact CI (= the exact U test): a calibration of the test itself.
    # Measured: 14/400 = 3.5 % (8 slower, 6 faster) at 5 % noise; limit alpha = 5 % (the exact
    # level at 10 + 10 allows 4.3 %), 1.4 binomial SDs (sd = 1.1 %) above the measured rate.
    v, _ = _verdicts(400, 10, 0.05, 1.0, 0.0, seed=101)
    fp = (v["faster"] + v["slower"]) / 400
    assert fp <= 0.05
    assert fp > 0  # the rule is not vacuous at threshold 0


def test_power_for_planted_5_percent_change():
    # Planted 5 % slowdown, 1 % noise, 10 processes per side. Measured: 400/400 slower, CI
    # coverage of 1.05: 97.0 %. Limit 90 %.
    v, coverage = _verdicts(400, 10, 0.01, 1.05, 0.02, seed=102)
    assert v["slower"] / 400 >= 0.90
    assert v["faster"] == 0
    assert coverage >= 0.93


# ----------------------------------------------------------------- bimodality


@pytest.mark.parametrize("n", [10, 20, 40])
def test_bimodal_60_40_split_is_found_with_shares(n):
    rng = np.random.default_rng(20 + n)
    k = int(0.6 * n)
    v = np.r_[lognormal(rng, k, 0.03), lognormal(rng, n - k, 0.03, 2.5)]
    rng.shuffle(v)
    ms = modes(v)
    assert len(ms) == 2
    assert [m.n for m in ms] == [k, n - k]
    assert [m.share for m in ms] == pytest.approx([0.6, 0.4])
    assert ms[0].center == pytest.approx(1.0, rel=0.05) and ms[1].center == pytest.approx(2.5, rel=0.05)
    assert ms[0].high < ms[1].low


def test_bimodal_cell_is_flagged_in_the_comparison():
    rng = np.random.default_rng(30)
    s = np.r_[lognormal(rng, 6, 0.02), lognormal(rng, 4, 0.02, 2.5)]
    c = compare(s, lognormal(rng, 10, 0.02))
    assert c.bimodal and len(c.stock_modes) == 2 and len(c.patched_modes) == 1
    assert any("stock is multimodal" in note for note in c.notes)


def test_three_modes_and_unimodal_edge_cases():
    rng = np.random.default_rng(31)
    v = np.r_[lognormal(rng, 8, 0.01), lognormal(rng, 8, 0.01, 1.5), lognormal(rng, 8, 0.01, 3.0)]
    assert [m.n for m in modes(v)] == [8, 8, 8]
    assert len(modes([1.0, 1.0, 1.0, 1.0])) == 1  # no spread, no gap
    assert len(modes([1.0, 2.0, 3.0])) == 1  # too few to split
    # a lone outlier is not a mode (>= 2 members)
    assert len(modes(np.r_[lognormal(rng, 9, 0.01), 10.0])) == 1
    # a 1 % gap on a 0.1 % spread is below min_gap
    assert len(modes(np.r_[lognormal(rng, 5, 0.001), lognormal(rng, 5, 0.001, 1.01)])) == 1
    with pytest.raises(ValueError):
        modes([1.0, -1.0, 2.0])


@pytest.mark.parametrize(
    "dist",
    ["normal", "lognormal"],
)
def test_modes_false_alarm_rate_on_unimodal_data(dist):
    # 300 unimodal samples for each n; the rule is calibrated for 1 % per split on normal log
    # values. Measured (seed 40/41): normal 1.0 / 0.0 / 0.7 / 0.3 % and lognormal
    # 1.0 / 0.7 / 1.3 / 1.7 % for n = 6 / 10 / 20 / 40. Limit 4 % per n (5 binomial SDs
    # above 1 %).
    rng = np.random.default_rng(40 if dist == "normal" else 41)
    for n in (6, 10, 20, 40):
        if dist == "normal":
            draws = [1.0 + 0.05 * rng.standard_normal(n) for _ in range(300)]
        else:
            draws = [np.exp(rng.normal(0.0, 0.5, n)) for _ in range(300)]
        rate = sum(len(modes(d)) > 1 for d in draws) / 300
        assert rate <= 0.04, (n, rate)


# ----------------------------------------------------------------- adaptive sampling


def test_converged_and_unconverged_estimate():
    rng = np.random.default_rng(60)
    small = compare(lognormal(rng, 6, 0.02), lognormal(rng, 6, 0.02, 1.05))
    big = compare(lognormal(rng, 60, 0.005), lognormal(rng, 60, 0.005, 1.05))
    single = compare([1.0], [1.0])
    assert not converged(small) and converged(big)
    assert small.half_width > 0.01 and big.half_width < 0.01
    todo = unconverged({"small": small, "big": big, "single": single})
    assert set(todo) == {"small", "single"}
    assert todo["single"] == 3  # to reach min_processes = 4
    # The 1/sqrt(n) estimate is good enough to converge once the extra processes are run.
    n_total = 6 + todo["small"]
    again = compare(lognormal(rng, n_total, 0.02), lognormal(rng, n_total, 0.02, 1.05))
    assert again.half_width < 0.0125, (n_total, again.half_width)


# ----------------------------------------------------------------- drift


def test_drift_detects_a_planted_trend():
    rng = np.random.default_rng(70)
    y = np.linspace(1.0, 1.05, 10) * lognormal(rng, 10, 0.005)
    d = drift(y)
    assert d.verdict == "drift" and d.p_value < 0.001 and d.tau > 0.8
    assert d.rel_low <= 0.05 <= d.rel_high
    assert abs(d.rel_change - 0.05) < 0.01
    down = drift(y[::-1])
    assert down.verdict == "drift" and down.rel_change < -0.03


def test_drift_stable_and_undetermined():
    rng = np.random.default_rng(71)
    flat = drift(lognormal(rng, 12, 0.003))
    assert flat.verdict == "stable" and -0.02 <= flat.rel_low and flat.rel_high <= 0.02
    assert drift([1.0, 1.1, 1.2, 1.3]).verdict == "undetermined"  # 4 rounds: min p = 2/4! > 0.05
    assert drift([1.0, 1.1, 1.2, 1.3, 1.4]).verdict == "drift"
    noisy = drift(lognormal(rng, 6, 0.05))
    assert noisy.verdict == "undetermined" and "inconclusive" in noisy.reason
    assert drift([1.0, float("nan"), 1.0, 1.0, 1.0]).verdict == "undetermined"


# ----------------------------------------------------------------- serialisation


def test_comparison_as_dict_is_strict_json():
    import json

    rng = np.random.default_rng(80)
    s = np.r_[lognormal(rng, 6, 0.02), lognormal(rng, 4, 0.02, 2.5)]
    for c in (compare(s, lognormal(rng, 10, 0.02)), compare([1.0], [2.0])):
        d = json.loads(json.dumps(c.as_dict(), allow_nan=False))
        assert d["verdict"] == c.verdict and d["reason"] == c.reason
        assert d["speedup"] == pytest.approx(c.speedup)
    assert d["ci_low"] is None and d["ratio"] == 2.0


# ----------------------------------------------------------------- geometric mean over whole processes


def _rows(rng, n, cells, sigma, factor=1.0, state=None):
    """(n, cells) per-process medians: lognormal noise per value, times a per-process ``state`` factor
    that moves all cells of that process together (a slow core, a slow kernel choice)."""
    base = np.linspace(1e-4, 1e-3, cells) * np.asarray(factor, dtype=float)
    s = np.ones(n) if state is None else np.asarray(state, dtype=float)
    return base * s[:, None] * np.exp(rng.normal(0.0, sigma, (n, cells)))


def test_geomean_by_process_known_shift_and_identical():
    rng = np.random.default_rng(60)
    factors = np.linspace(1.02, 1.08, 10)  # per-cell factors; their geometric mean is the estimand
    g = stats.geomean_by_process(_rows(rng, 6, 10, 0.01), _rows(rng, 6, 10, 0.01, factors))
    truth = float(np.exp(np.mean(np.log(factors))))
    assert g.verdict == "slower" and g.cause is Cause.BEYOND_BAND and g.lo > 1.02 and g.lo <= truth <= g.hi
    assert abs(g.gm / truth - 1) < 0.005
    assert g.p_value == pytest.approx(2 / math.comb(12, 6))  # complete separation, exact test
    assert g.n_cells == 10 and (g.n_stock, g.n_patched) == (6, 6)
    same = stats.geomean_by_process(_rows(rng, 8, 10, 0.005), _rows(rng, 8, 10, 0.005))
    assert same.verdict == "equivalent" and 0.98 <= same.lo <= 1 <= same.hi <= 1.02


def test_geomean_by_process_does_not_turn_a_process_state_into_a_verdict():
    # A/A where 3 of 4 "patched" processes happened to land in a 30 % slower state (as on the H200
    # example run, launch-bound cells): whole processes cannot tell the build from the state.
    rng = np.random.default_rng(61)
    stock = _rows(rng, 4, 10, 0.01)
    patched = _rows(rng, 4, 10, 0.01, state=[1.3, 1.3, 1.3, 1.0])
    joint = stats.geomean_by_process(stock, patched)
    assert joint.verdict == "undetermined" and joint.cause is Cause.STRADDLES_BAND
    assert joint.lo < 1.0 < joint.hi  # the one normal patched process keeps 1 in the exact CI
    assert joint.p_value >= 2 / math.comb(8, 4)


def test_geomean_by_process_same_floor_as_a_cell():
    rng = np.random.default_rng(63)
    g = stats.geomean_by_process(_rows(rng, 3, 10, 0.005), _rows(rng, 3, 10, 0.005, 1.5))
    assert g.verdict == "undetermined" and g.cause is Cause.BELOW_FLOOR
    assert g.gm == pytest.approx(1.5, rel=0.01)


def test_geomean_by_process_handles_unmeasured_cells_and_bad_input():
    rng = np.random.default_rng(62)
    stock, patched = _rows(rng, 8, 4, 0.01), _rows(rng, 8, 4, 0.01, 1.1)
    stock[4:, :2] = np.nan  # adaptive rounds measured only cells 2 and 3
    patched[4:, :2] = np.nan
    g = stats.geomean_by_process(stock, patched)
    assert g.verdict == "slower" and g.lo <= 1.1 <= g.hi and g.n_cells == 4
    assert g.n_dropped == 8 and (g.n_stock, g.n_patched) == (4, 4) and "8 process(es) without every cell" in g.reason
    stock[:, 0] = np.nan  # no stock process measured cell 0
    none = stats.geomean_by_process(stock, patched)
    assert none.verdict == "undetermined" and none.cause is Cause.NO_PROCESSES
    empty = stats.geomean_by_process(np.ones((4, 0)), np.ones((4, 0)))
    assert empty.cause is Cause.NO_PROCESSES and empty.reason == "no cell with processes on both sides"
    with pytest.raises(ValueError):
        stats.geomean_by_process(np.ones(3), np.ones(3))
    with pytest.raises(ValueError):
        stats.geomean_by_process(-np.ones((3, 2)), np.ones((3, 2)))


def test_the_kept_mann_whitney_p_is_scipys_for_every_sample_and_order():
    """stats.mann_whitney_p keeps scipy's exact p-value by (n, m, U): on 600 random pairs of samples (sizes 1-24,
    a third with ties), asked twice in different orders so that most answers come from what it kept, each
    equals scipy's own call on that pair (a key without m, or U without its ties, fails here)."""
    rng = np.random.default_rng(7)
    pairs = []
    for i in range(600):
        x, y = rng.normal(size=rng.integers(1, 25)), rng.normal(size=rng.integers(1, 25))
        pairs.append((np.round(x, 1), np.round(y, 1)) if i % 3 == 0 else (x, y))
    want = [float(st.mannwhitneyu(x, y, alternative="two-sided", method="exact").pvalue) for x, y in pairs]
    stats._P_BY_U.clear()
    assert [stats.mann_whitney_p(x, y) for x, y in pairs] == want
    order = rng.permutation(len(pairs))
    assert [stats.mann_whitney_p(*pairs[i]) for i in order] == [want[i] for i in order]
    # a NaN would be kept as the p of every later pair with its (n, m, U): refused, and nothing kept
    kept = dict(stats._P_BY_U)
    with pytest.raises(ValueError, match="finite"):
        stats.mann_whitney_p(np.array([1.0, math.nan]), np.array([2.0, 3.0]))
    assert stats._P_BY_U == kept


# ----------------------------------------------------------------- below the timer's resolution


def test_resolution_floor_is_100_ticks_of_the_clock_the_method_names():
    """The floor each recorded clock gets: 100 ticks of the coarsest host clock (mach_absolute_time on Apple
    silicon, 125/3 ns) for the host-clock timers, 100 x 0.5 µs for CUDA events of older runs."""
    from harness.bench import timer

    assert timer.resolution_floor_s("perf_counter") == pytest.approx(4.1667e-6, rel=1e-4)
    assert timer.resolution_floor_s("synchronize+perf_counter") == timer.resolution_floor_s("perf_counter")
    assert timer.resolution_floor_s("cuda-events") == pytest.approx(50e-6)
    assert timer.resolution_floor_s("mps-events") == timer.resolution_floor_s("perf_counter")
    assert timer.resolution_floor_s("") == timer.resolution_floor_s("perf_counter")


@pytest.mark.parametrize("method", ["perf_counter", "synchronize+perf_counter", "cuda-events"])
@pytest.mark.parametrize("number", [1, 7, 1024])
def test_a_process_is_below_resolution_just_under_its_floor_per_block(method, number):
    """The edge is on the block (median x calls per block), just inside and just outside."""
    from harness.bench import timer

    floor = timer.resolution_floor_s(method)
    at = timer.Measurement(samples=[floor / number * (1 + 1e-9)] * 5, number=number, method=method)
    under = timer.Measurement(samples=[floor / number * (1 - 1e-6)] * 5, number=number, method=method)
    assert not at.below_resolution and under.below_resolution
    assert not timer.Measurement().below_resolution  # nothing measured: nothing to judge, nothing flagged


def test_compare_does_not_judge_a_cell_below_resolution():
    """A cell with a process below the timer's resolution is never judged: it was 'slower' at a 0.000x ratio
    (the issue's report); now undetermined with its own cause, no ratio, no CI, no p."""
    s = np.full(6, 1e-12) * np.exp(np.linspace(-0.01, 0.01, 6))
    p = np.full(6, 4.3e-3) * np.exp(np.linspace(-0.01, 0.01, 6))
    assert compare(s, p).verdict == stats.SLOWER  # the old behaviour: a verdict from sub-resolution times
    c = compare(s, p, unresolved=6)
    assert (c.verdict, c.cause) == (stats.UNDETERMINED, Cause.BELOW_RESOLUTION)
    assert all(math.isnan(v) for v in (c.ratio, c.ci_low, c.ci_high, c.p_value))
    assert c.reason == "6 processes timed blocks below the timer's resolution: not judged"
    assert compare(s, p, unresolved=1).reason.startswith("1 process timed blocks")
    assert compare(s, p, unresolved=0).verdict == stats.SLOWER  # just inside: no such process, judged
    with pytest.raises(ValueError):
        compare(s, p, unresolved=-1)


def test_geomean_says_how_many_cells_below_resolution_it_left_out():
    rng = np.random.default_rng(5)
    s = lognormal(rng, 8, 0.01)[:, None] * np.ones((1, 3))
    g = stats.geomean_by_process(s, s * 1.1, unresolved=2)
    assert g.n_unresolved == 2 and g.reason.endswith("over 3 cells; 2 cells below timer resolution left out")
    assert "resolution" not in stats.geomean_by_process(s, s * 1.1).reason


def test_more_processes_are_not_asked_for_a_cell_below_resolution():
    """More rounds cannot resolve what the clock cannot: the adaptive rule leaves such a cell out."""
    s, p = np.full(4, 1e-9), np.full(4, 2e-9)
    assert unconverged({"a": compare(s, p, unresolved=4)}) == {}
    assert unconverged({"a": compare(s, p)}) == {"a": 2}  # zero spread: more rounds asked for, as before
