"""Coverage, false verdicts and power of the verdict rule, by simulation with ``harness.stats`` itself.

Every simulated cell draws n per-process medians per side from a noise model, the patched side
multiplied by a true time factor, and is judged by :func:`harness.stats.compare` (per cell) or
:func:`harness.stats.geomean_by_process` (per-config summary) exactly as ``compare`` and the report
do. Counted per setting: **coverage** (share of CIs that contain the true factor), **false**
faster/slower verdicts at factor 1, and **power** (share of ``slower`` verdicts) at +5 % and +10 %.

Noise models (per-process medians = true time x exp(e), e drawn per process):

- ``lognormal 1 %`` / ``lognormal 5 %``: e ~ N(0, 0.01) / N(0, 0.05) (1-5 % cv between processes on an
  H200, docs/methodology.md);
- ``t3``: e = 0.02 x Student-t with 3 degrees of freedom (heavy tails: an occasional far process);
- ``bimodal``: each process lands in a 2.5x slower mode with probability 0.4 (MPSGraph GEMM, pytorch
  issue 182815), e ~ N(0, 0.02) on top;
- ``summary``: the per-config summary over 20 cells whose processes share a state: every value of a
  process is multiplied by one exp(N(0, 0.02)) of that process, each value has its own N(0, 0.01),
  cell times spread over 1e-4..1e-3 s; the true factor applies to every cell.

The full table for docs/methodology.md (about 5 minutes on one core)::

    PYTHONPATH=. python benchmarks/simulate_stats.py --cells 2000

``tests/test_simulation.py`` runs a few settings with fewer cells and fixed seeds.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

from harness import stats

MODELS = ("lognormal 1 %", "lognormal 5 %", "t3", "bimodal", "summary")
FACTORS = (1.0, 1.05, 1.10)
THRESHOLD = 0.02
SUMMARY_CELLS = 20


def draw(model: str, rng: np.random.Generator, n: int, factor: float) -> np.ndarray:
    """n per-process medians (seconds, around 1 s; for ``summary`` an (n, 20) array) of one side."""
    if model == "lognormal 1 %":
        e = rng.normal(0.0, 0.01, n)
    elif model == "lognormal 5 %":
        e = rng.normal(0.0, 0.05, n)
    elif model == "t3":
        e = 0.02 * rng.standard_t(3, n)
    elif model == "bimodal":
        e = np.where(rng.random(n) < 0.4, np.log(2.5), 0.0) + rng.normal(0.0, 0.02, n)
    elif model == "summary":
        base = np.linspace(1e-4, 1e-3, SUMMARY_CELLS)
        state = np.exp(rng.normal(0.0, 0.02, n))[:, None]
        return factor * base * state * np.exp(rng.normal(0.0, 0.01, (n, SUMMARY_CELLS)))
    else:
        raise ValueError(f"unknown noise model {model!r}; known: {', '.join(MODELS)}")
    return factor * np.exp(e)


@dataclass(frozen=True)
class Rates:
    """Shares (0..1) over ``cells`` simulated cells of one (model, n, factor); ``coverage`` over the
    cells that have a CI (NaN when none has: below the floor no exact CI exists)."""

    model: str
    n: int
    factor: float
    cells: int
    coverage: float
    faster: float
    slower: float
    equivalent: float
    undetermined: float


def simulate(model: str, n: int, factor: float, cells: int, seed: int) -> Rates:
    """Judge ``cells`` simulated cells with n processes per side; the patched side is ``factor`` x slower."""
    rng = np.random.default_rng([seed, MODELS.index(model), n, int(round(factor * 1000))])
    counts = dict.fromkeys(stats.VERDICTS, 0)
    covered = with_ci = 0
    for _ in range(cells):
        s, p = draw(model, rng, n, 1.0), draw(model, rng, n, factor)
        c = (
            stats.geomean_by_process(s, p, threshold=THRESHOLD).comparison
            if model == "summary"
            else stats.compare(s, p, threshold=THRESHOLD)
        )
        counts[c.verdict] += 1
        with_ci += c.has_ci
        covered += bool(c.ci_low <= factor <= c.ci_high)
    return Rates(
        model,
        n,
        factor,
        cells,
        covered / with_ci if with_ci else float("nan"),
        *(counts[v] / cells for v in stats.VERDICTS),
    )


def table(ns: list[int], cells: int, seed: int, models=MODELS) -> list[str]:
    """Markdown rows: per model and n, coverage at factor 1 / 1.05 / 1.10 (the lowest), false
    faster+slower at factor 1, equivalent at factor 1, power (slower) at +5 % and +10 %."""
    lines = [
        "| noise model | n per side | coverage (min of 1, +5 %, +10 %) | false faster/slower at 1 | equivalent at 1 "
        "| power +5 % | power +10 % |",
        "|---|---|---|---|---|---|---|",
    ]
    for model in models:
        for n in ns:
            r = {f: simulate(model, n, f, cells, seed) for f in FACTORS}
            cov = min(x.coverage for x in r.values())
            lines.append(
                f"| {model} | {n} | {'no CI' if cov != cov else format(cov, '.1%')} | "
                f"{r[1.0].faster + r[1.0].slower:.1%} | {r[1.0].equivalent:.1%} | {r[1.05].slower:.1%} | "
                f"{r[1.10].slower:.1%} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=2000, help="simulated cells per (model, n, factor)")
    parser.add_argument("--n", default="3,4,5,6,8,10,20", help="processes per side, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ns = [int(v) for v in args.n.split(",")]
    print(f"{args.cells} cells per setting, seed {args.seed}, threshold ±{THRESHOLD:.0%}, confidence 95 %\n")
    print("\n".join(table(ns, args.cells, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
