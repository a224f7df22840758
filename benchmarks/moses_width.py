"""The small-sample factor of :data:`harness.undetermined.MOSES_SMALL_N`: how much wider the exact 95 % Moses
CI of the Hodges-Lehmann shift is, at n + n processes, than the large-sample formula
``1.96 · sd · √(2/n) · √(π/3)`` says (the estimate's efficiency 3/π against the mean: Hodges & Lehmann
1963; the exact CI: :func:`harness.stats.moses_rank`).

For each n, ``--reps`` pairs of n standard-normal log times (seed 12345): the median over the pairs of the
CI's wider arm around the estimate (what :attr:`harness.stats.Comparison.half_width` takes), divided by the
formula at sd = 1. At n = 4 the exact CI is the range of all 16 differences, 1.68x the formula; by n = 64
it is 1.03x. Prints the table as the constant's source line.

    PYTHONPATH=. python3 benchmarks/moses_width.py --reps 20000
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

import numpy as np

from harness import stats


def factor(n: int, reps: int, seed: int = 12345, confidence: float = 0.95) -> float:
    """Median exact-CI half-width at n + n unit-normal processes over the large-sample formula (NaN: no CI)."""
    k, _ = stats.moses_rank(n, n, confidence)
    if k == 0:
        return math.nan
    rng = np.random.default_rng(seed)
    widths = []
    for start in range(0, reps, 500):  # in chunks: n = 64 is 4096 differences per pair
        size = min(500, reps - start)
        x, y = rng.standard_normal((size, n)), rng.standard_normal((size, n))
        d = np.sort((y[:, None, :] - x[:, :, None]).reshape(size, -1), axis=1)
        med = np.median(d, axis=1)
        widths += list(np.maximum(d[:, d.shape[1] - k] - med, med - d[:, k - 1]))
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    return float(np.median(widths)) / (z * math.sqrt(2 / n) * math.sqrt(math.pi / 3))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20000)
    ap.add_argument("--max-n", type=int, default=64)
    args = ap.parse_args(argv)
    if not 100 <= args.reps <= 10**6 or not 4 <= args.max_n <= 200:
        ap.error("need 100 <= --reps <= 1e6 and 4 <= --max-n <= 200")
    table = [round(factor(n, args.reps), 3) for n in range(4, args.max_n + 1)]
    print(f"MOSES_SMALL_N = {tuple(table)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
