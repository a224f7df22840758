"""What the adaptive rounds' decide-first order can cost: verdicts taken at the first look where a cell is
decided, against verdicts taken at a fixed number of processes, by simulation with ``harness.stats`` itself.

Since 2026-12-07 an adaptive round measures the undetermined cells first (``harness.runner.next_adaptive_cells``):
a cell that comes out decided waits while others are measured, and keeps its verdict if the budget ends
first. Its verdict is then the first of several looks at a growing sample, which a 95 % CI covers less often
than one look (optional stopping). This script puts a number on it: per true time ratio ``1 + d``, each
simulated cell draws ``--max`` per-process medians per side (log-normal, sd ``--sd`` between processes), is
judged by :func:`harness.stats.compare` at the ±2 % band at 4, 5, ... ``--max`` processes per side, and
counts the verdict at the first look that is not undetermined (``first``) and at ``--max`` (``fixed``).
A verdict is wrong when it says ``equivalent`` for ``d`` beyond the band, ``slower``/``faster`` for ``d``
inside it, or the wrong direction.

    PYTHONPATH=. python3 benchmarks/decide_first.py --sd 0.007 --max 12 --cells 2000
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from harness import stats

BAND = 0.02
RATIOS = (0.0, 0.015, 0.019, 0.021, 0.025, 0.03)


def wrong(verdict: str, d: float) -> bool:
    """Whether ``verdict`` is wrong for a true relative change ``d`` (patched time / stock time - 1)."""
    if verdict == "undetermined":
        return False
    if abs(d) <= BAND:
        return verdict != "equivalent"
    return verdict != ("slower" if d > 0 else "faster")


def simulate(d: float, sd: float, most: int, cells: int, seed: int) -> dict[str, dict[str, int]]:
    """Counts of each verdict, ``first`` and ``fixed`` (module docstring), over ``cells`` simulated cells."""
    rng = np.random.default_rng(seed)
    counts: dict[str, dict[str, int]] = {"first": {}, "fixed": {}}
    for _ in range(cells):
        stock = np.exp(rng.normal(0.0, sd, most))
        patched = np.exp(rng.normal(np.log1p(d), sd, most))
        first = None
        for n in range(4, most + 1):
            verdict = stats.compare(stock[:n], patched[:n], threshold=BAND).verdict
            if first is None and verdict != "undetermined":
                first = verdict
        for kind, v in (("first", first or "undetermined"), ("fixed", verdict)):
            counts[kind][v] = counts[kind].get(v, 0) + 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sd", type=float, default=0.007, help="sd of log per-process medians (0.007 = 0.7 %%)")
    parser.add_argument("--max", type=int, default=12, help="processes per side at the last look (5-64)")
    parser.add_argument("--cells", type=int, default=2000, help="simulated cells per ratio (10-100000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not (0 < args.sd < 1 and 5 <= args.max <= 64 and 10 <= args.cells <= 100_000):
        print("decide_first: --sd must be in (0, 1), --max in 5..64, --cells in 10..100000", file=sys.stderr)
        return 2
    print(f"sd {args.sd:.2%} between processes, looks at 4..{args.max} processes per side, {args.cells} cells each")
    print("| true change | wrong, first decided look | wrong, fixed n | undetermined, first | undetermined, fixed |")
    print("|---|---|---|---|---|")
    for i, d in enumerate(RATIOS):
        counts = simulate(d, args.sd, args.max, args.cells, args.seed + i)
        cells = [f"{sum(c for v, c in counts[k].items() if wrong(v, d)) / args.cells:.1%}" for k in ("first", "fixed")]
        cells += [f"{counts[k].get('undetermined', 0) / args.cells:.1%}" for k in ("first", "fixed")]
        print(f"| {d:+.1%} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
