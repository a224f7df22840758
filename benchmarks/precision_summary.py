"""The numbers issue 15's acceptance asks of a ``compare`` run, recomputed from its results.json alone:
verdict counts (cells judged as the report judges them), kernel-bound cells' CI half-widths (median,
max, those above the target), processes (planned / adaptive) and their start-up and wall seconds::

    PYTHONPATH=. python3 benchmarks/precision_summary.py docs/calibration/h200-aa-2026-12-01-layouts3.json

A path may be a results.json or a run's --out folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from harness import report, stats
from harness import results as res


def summary(data: dict, target: float) -> dict:
    """Verdict counts, kernel-bound half-widths (fractions, :attr:`harness.stats.Comparison.half_width`)
    and process seconds of one run's document."""
    verdicts: dict[str, int] = {}
    widths, above = [], []
    for config, per_cell in res.cell_table(data).items():
        for key, per_build in per_cell.items():
            medians = {b: res.process_medians(per_build.get(b, [])) for b in ("stock", "patched")}
            if not all(medians.values()):
                continue
            rule = report.cell_rule(per_build)
            cmp = stats.compare(medians["stock"], medians["patched"], **rule)
            verdicts[cmp.verdict] = verdicts.get(cmp.verdict, 0) + 1
            if rule["floor"] == stats.MIN_PROCESSES:  # kernel-bound
                widths.append(cmp.half_width)
                if not cmp.half_width <= target:
                    above.append(f"{config} {key} n={cmp.n_stock}+{cmp.n_patched} ±{cmp.half_width:.2%}")
    procs = data["processes"]
    planned = data["run"]["rounds"]
    walls = {
        kind: [p["finished"] - p["started"] for p in procs if (p["round"] < planned) == (kind == "planned")]
        for kind in ("planned", "adaptive")
    }
    startups = [t for t in map(res.startup_seconds, procs) if t is not None]
    return {
        "verdicts": verdicts,
        "kernel_bound": len(widths),
        "median_half_width": statistics.median(widths) if widths else None,
        "max_half_width": max(widths) if widths else None,
        "above_target": above,
        "processes": {k: len(v) for k, v in walls.items()},
        "median_process_s": {k: statistics.median(v) if v else None for k, v in walls.items()},
        "worker_s": sum(sum(v) for v in walls.values()),
        "median_startup_s": statistics.median(startups) if startups else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--target", type=float, default=0.01, help="kernel-bound CI half-width target")
    args = parser.parse_args()
    for path in args.paths:
        data = json.loads(path.read_text()) if path.is_file() else res.load(path)
        print(f"{path}:")
        print(json.dumps(summary(data, args.target), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
