"""The numbers issue 15's acceptance asks of a ``compare`` run, recomputed from its results.json alone:
verdict counts (cells judged as the report judges them), kernel-bound cells' CI half-widths (median,
max, those above the target), processes (planned / adaptive) and their start-up and wall seconds::

    PYTHONPATH=. python3 benchmarks/precision_summary.py docs/calibration/h200-aa-2026-12-01-layouts3.json

For a ``--plant-k`` run, ``--plant-cost CONFIG=FILE`` (one per env config; files written by
``benchmarks/planted_cost.py``) adds the kernel-bound GEMM cells' verdicts grouped by what the grown K
really costs: at least the verdict band (should be ``slower``) or less (should not be)::

    PYTHONPATH=. python3 benchmarks/precision_summary.py docs/calibration/h200-planted-2026-12-01-settle.json \
        --plant-cost default=docs/calibration/h200-planted-cost-default.json \
        --plant-cost cublaslt=docs/calibration/h200-planted-cost-cublaslt.json \
        --plant-cost tf32_override=docs/calibration/h200-planted-cost-tf32_override.json

A path may be a results.json or a run's --out folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from harness import document as doc
from harness import results as res
from harness.policy import POLICY, CellClass, classify


def summary(data: dict, target: float, plant_cost: dict | None = None) -> dict:
    """Verdict counts, kernel-bound half-widths (fractions, :attr:`harness.stats.Comparison.half_width`)
    and process seconds of one run's document; with ``plant_cost`` (config -> cell key -> relative cost
    of the grown K, 0.05 = 5 %) the kernel-bound planted cells' verdicts by cost."""
    verdicts: dict[str, int] = {}
    widths, above = [], []
    planted: dict[str, dict[str, list[str]]] = {}
    run = doc.of(data)
    for config in run.header.configs:
        for key in run.keys_of(config):
            per_build = {b: run.records(config, key, b) for b in run.header.builds}
            medians = {b: [r.median() for r in per_build.get(b, ()) if r.measured] for b in ("stock", "patched")}
            if not all(medians.values()):
                continue
            cls = classify([r for recs in per_build.values() for r in recs])
            cmp = POLICY.judge(medians["stock"], medians["patched"], cls)
            verdicts[cmp.verdict] = verdicts.get(cmp.verdict, 0) + 1
            if cls == CellClass.KERNEL_BOUND:
                widths.append(cmp.half_width)
                if not cmp.half_width <= target:
                    above.append(f"{config} {key} n={cmp.n_stock}+{cmp.n_patched} ±{cmp.half_width:.2%}")
                cost = (plant_cost or {}).get(config, {}).get(key)
                if cost is not None:
                    group = "costs >= band" if cost >= POLICY.rule(cls).band else "costs < band"
                    planted.setdefault(group, {}).setdefault(cmp.verdict, []).append(f"{config} {key} {cost:+.1%}")
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
        **({"planted_kernel_bound_gemm": planted} if plant_cost else {}),
    }


def read_plant_cost(pairs: list[str]) -> dict[str, dict[str, float]]:
    """``CONFIG=FILE`` pairs -> config -> cell key -> relative cost of the grown K (``rows[].cost`` of
    a benchmarks/planted_cost.py file)."""
    out = {}
    for pair in pairs:
        config, eq, path = pair.partition("=")
        if not eq or not config:
            raise ValueError(f"{pair!r} has no CONFIG=")
        rows = json.loads(Path(path).read_text())["rows"]
        out[config] = {r["key"]: r["cost"] for r in rows}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--target", type=float, default=0.01, help="kernel-bound CI half-width target")
    parser.add_argument("--plant-cost", action="append", default=[], metavar="CONFIG=FILE")
    args = parser.parse_args()
    try:
        plant_cost = read_plant_cost(args.plant_cost)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"--plant-cost takes CONFIG=FILE, FILE written by benchmarks/planted_cost.py ({exc})")
    for path in args.paths:
        data = json.loads(path.read_text()) if path.is_file() else res.load(path)
        print(f"{path}:")
        print(json.dumps(summary(data, args.target, plant_cost), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
