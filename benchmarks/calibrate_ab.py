"""Calibrate the A/B verdicts on real hardware: A/A false positives, planted-change power,
and CI precision per second of measurement (results go to docs/methodology.md).

Both sides run the same build (``--python``) through the harness's own worker and scheduler
(:func:`harness.supervise.run_worker`, fresh process per side per round, order shuffled per round by
:func:`harness.runner.round_order`, adaptive rounds by :func:`harness.runner.adaptive_rounds`)
and the verdicts come from :func:`harness.stats.compare`, exactly as in ``compare``. Each row of
``calibration.json`` stores both sides' per-process medians (``stock_medians``/``patched_medians``,
seconds), so ``benchmarks/calibration_table.py`` recomputes every number from them.

- ``aa``: identical cells on both sides; any ``faster``/``slower`` verdict is a false positive.
- ``planted``: the "patched" side runs each GEMM cell with K larger by ``--plant`` (default 3 %),
  a known extra cost of ``K'/K - 1`` FLOP; a cell whose planted cost exceeds the verdict threshold
  must come out ``slower``.

Usage::

    python benchmarks/calibrate_ab.py --device cpu --mode aa --rounds 6 --out results/calib-cpu-aa
    PYTHONPATH=. python3 benchmarks/calibrate_ab.py --device cuda --mode planted --out $OUT/planted
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from harness import results as res
from harness import stats
from harness.bench.workloads import Cell, planted
from harness.configs import EnvConfig
from harness.plan import round_order
from harness.runner import adaptive_rounds
from harness.supervise import run_worker

CUDA_CELLS = [
    Cell(op, shape, dt)
    for dt in ("float16", "bfloat16")
    for op, shape in [
        ("mm", (1024, 1024, 1024)),
        ("mm", (2048, 2048, 2048)),
        ("mm", (4096, 4096, 4096)),
        ("mm", (4096, 4096, 256)),
        ("mm", (333, 444, 555)),
        ("mm", (1, 4096, 4096)),
        ("addmm", (2048, 2048, 2048)),
        ("bmm", (8, 512, 512, 512)),
        ("bmm", (4, 1024, 1024, 1024)),
        ("linear", (2048, 2048, 2048)),
        ("linear", (8192, 4096, 1024)),
        ("sdpa", (2, 16, 1024, 64)),
        ("sdpa", (4, 32, 2048, 128)),
        ("sdpa_causal", (4, 32, 2048, 128)),
        ("sdpa_causal", (2, 16, 1024, 64)),
    ]
]
#: kernel-bound cells (>= 50 µs on an H200): where a planted FLOP change must show in device time
LARGE_CELLS = [
    Cell(op, shape, dt)
    for dt in ("float16", "bfloat16")
    for op, shape in [
        ("mm", (3072, 3072, 3072)),
        ("mm", (4096, 4096, 4096)),
        ("mm", (6144, 6144, 6144)),
        ("mm", (8192, 8192, 2048)),
        ("addmm", (4096, 4096, 4096)),
        ("bmm", (16, 1024, 1024, 1024)),
        ("bmm", (8, 2048, 2048, 1024)),
        ("linear", (8192, 4096, 1024)),
        ("linear", (16384, 4096, 4096)),
        ("mm", (8192, 1024, 8192)),
    ]
]
CPU_CELLS = [
    Cell(op, shape, dt)
    for dt in ("float32", "bfloat16")
    for op, shape in [
        ("mm", (256, 256, 256)),
        ("mm", (512, 512, 512)),
        ("mm", (333, 444, 555)),
        ("mm", (1, 1024, 1024)),
        ("mm", (1024, 64, 1024)),
        ("addmm", (256, 256, 256)),
        ("bmm", (4, 128, 128, 128)),
        ("bmm", (16, 64, 64, 64)),
        ("linear", (256, 512, 256)),
        ("linear", (64, 1024, 1024)),
        ("sdpa", (1, 4, 256, 64)),
        ("sdpa_causal", (1, 4, 256, 64)),
    ]
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", required=True, choices=("cpu", "cuda", "mps"))
    parser.add_argument("--mode", required=True, choices=("aa", "planted"))
    parser.add_argument("--python", default=sys.executable, help="interpreter of the build (both sides)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--set",
        dest="cell_set",
        choices=("default", "large"),
        default="default",
        help="cell set: default (mixed, incl. launch-bound) or large (kernel-bound GEMMs; gpu)",
    )
    parser.add_argument(
        "--dtypes", default=None, help="comma-separated dtypes to keep from the cell set (default: all)"
    )
    parser.add_argument("--plant", type=float, default=0.03)
    parser.add_argument("--threshold", type=float, default=0.02)
    parser.add_argument("--measure-s", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="as compare --threads (default 1 on cpu)")
    parser.add_argument("--keep-env", default="", help="as compare --keep-env")
    parser.add_argument(
        "--target-ci",
        type=float,
        default=None,
        help="adaptive sampling as compare --target-ci: after --rounds, add rounds measuring only the "
        "cells whose CI half-width is above this fraction",
    )
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall seconds the adaptive rounds may take")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    keep = tuple(n for n in args.keep_env.split(",") if n)

    base = CPU_CELLS if args.device == "cpu" else (LARGE_CELLS if args.cell_set == "large" else CUDA_CELLS)
    if args.mode == "planted":
        base = [c for c in base if c.family == "gemm"]
    if args.dtypes:
        base = [c for c in base if c.dtype in args.dtypes.split(",")]
    sides = {"stock": base, "patched": [planted(c, args.plant) for c in base] if args.mode == "planted" else base}
    gpu = args.device != "cpu"
    threads = args.threads if args.threads is not None else (0 if gpu else 1)
    timing = {"warmup_s": 0.1 if gpu else 0.03, "measure_s": args.measure_s, "min_block_s": 1e-2 if gpu else 1e-3}
    raw = args.out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    medians: dict[str, dict[str, list[float]]] = {c.key: {"stock": [], "patched": []} for c in base}
    seconds: dict[str, float] = {c.key: 0.0 for c in base}
    launch_bound: dict[str, list[bool]] = {c.key: [] for c in base}
    t_start = time.time()

    config = EnvConfig("default")

    def measure(rnd: int, side: str, _config: str, keys) -> None:
        """One side of one round in a fresh process (the harness's scheduler decides the order), ``keys`` only."""
        pairs = [(lg, ac) for lg, ac in zip(base, sides[side]) if lg.key in keys]
        spec = {
            "device": args.device,
            "cells": [ac.key for _, ac in pairs],
            "check": False,
            "seed": args.seed,
            "timing": timing,
            "threads": threads,
        }
        rec = run_worker(Path(args.python), spec, config, raw, f"r{rnd:02d}-{side}", timeout=900, keep=keep)
        for logical, actual in pairs:
            cell = rec["cells"].get(actual.key, {"status": "failed"})
            if cell["status"] == "ok":
                m = res.measurement(cell["measurement"])  # derived numbers recomputed from the raw samples
                medians[logical.key][side].append(m.median)
                launch_bound[logical.key].append(m.launch_bound)
                seconds[logical.key] += sum(m.samples) * m.number
        print(f"round {rnd} {side}: {len(pairs)} cells, {time.time() - t_start:.0f} s", file=sys.stderr, flush=True)

    def comparisons() -> dict[str, stats.Comparison]:
        return {
            c.key: stats.compare(medians[c.key]["stock"], medians[c.key]["patched"], threshold=args.threshold)
            for c in base
        }

    all_keys = [c.key for c in base]
    for rnd in range(args.rounds):
        for r, side, name in round_order(args.seed, rnd, list(sides), [config]):
            measure(r, side, name, all_keys)
    left: dict[str, int] = {}
    added = 0
    if args.target_ci is not None:
        # the stopping rule looks at the CI's width only, never at the verdict, so it cannot steer verdicts
        adaptive_start = time.monotonic()

        def need() -> dict[str, list[str]]:
            todo = stats.unconverged(comparisons(), args.target_ci)
            return {config.name: [k for k in all_keys if k in todo]} if todo else {}

        def cost(extra, _need) -> float:  # the mean wall time of the adaptive rounds so far
            return (time.monotonic() - adaptive_start) / added_so_far[0] if added_so_far[0] else 0.0

        added_so_far = [0]

        def count(rnd, _extra, _todo) -> None:  # rounds finished once round ``rnd`` has run
            added_so_far[0] = rnd - args.rounds + 1

        added = adaptive_rounds(
            args.seed, list(sides), [config], args.rounds, measure, need, cost, adaptive_start + args.budget_s, count
        )
        left = stats.unconverged(comparisons(), args.target_ci)
    rnd = args.rounds + added

    rows = []
    final = comparisons()
    for c in base:
        cmp = final[c.key]
        expected = planted(c, args.plant).flop / c.flop if args.mode == "planted" else 1.0
        hw = cmp.half_width
        rows.append(
            {
                "cell": c.key,
                "expected_ratio": expected,
                "ratio": cmp.ratio,
                "ci": [cmp.ci_low, cmp.ci_high],
                "p": cmp.p_value,
                "verdict": cmp.verdict,
                "cause": cmp.cause.value,
                "reason": cmp.reason,
                "achieved_confidence": cmp.achieved_confidence,
                "half_width": hw,
                # per-process medians (seconds), in measurement order: calibration_table.py recomputes
                # every number of docs/methodology.md from these with the current harness.stats
                "stock_medians": medians[c.key]["stock"],
                "patched_medians": medians[c.key]["patched"],
                "measured_s": seconds[c.key],
                "n": [cmp.n_stock, cmp.n_patched],
                "s_to_1pct": seconds[c.key] * (hw / 0.01) ** 2 if math.isfinite(hw) else None,
                "bimodal": cmp.bimodal,
                "converged": c.key not in left,
                "launch_bound": sum(launch_bound[c.key]) > len(launch_bound[c.key]) / 2,
            }
        )
    decided = [r for r in rows if r["verdict"] != "undetermined"]
    summary = {
        "device": args.device,
        "mode": args.mode,
        "set": args.cell_set,
        "rounds": args.rounds,
        "target_ci": args.target_ci,
        "budget_s": args.budget_s if args.target_ci is not None else None,
        "rounds_added": rnd - args.rounds,
        "unconverged": len(left),
        "threshold": args.threshold,
        "plant": args.plant if args.mode == "planted" else 0.0,
        "cells": len(rows),
        "undetermined": len(rows) - len(decided),
        "wall_s": time.time() - t_start,
        "timing": timing,
        "threads": threads,
    }
    if args.mode == "aa":
        fp = [r for r in rows if r["verdict"] in ("faster", "slower")]
        summary["false_positives"] = len(fp)
        summary["false_positive_rate"] = len(fp) / len(rows)
    else:
        # a FLOP change shows in time only where the device, not the host's launch rate, sets the time
        eligible = [r for r in rows if r["expected_ratio"] - 1 > args.threshold and not r["launch_bound"]]
        hits = [r for r in eligible if r["verdict"] == "slower"]
        summary["eligible"] = len(eligible)
        summary["detected"] = len(hits)
        summary["power"] = len(hits) / len(eligible) if eligible else None
        summary["ci_covers_expected"] = sum(1 for r in rows if r["ci"][0] <= r["expected_ratio"] <= r["ci"][1])
    hws = sorted(r["half_width"] for r in rows if math.isfinite(r["half_width"]))
    summary["median_half_width"] = hws[len(hws) // 2] if hws else None
    s1 = sorted(r["s_to_1pct"] for r in rows if r["s_to_1pct"] is not None)
    summary["median_s_to_1pct"] = s1[len(s1) // 2] if s1 else None
    summary["estimator"] = "hodges-lehmann + exact moses ci (harness.stats.compare)"
    (args.out / "calibration.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    print(json.dumps(summary, indent=1))
    for r in rows:
        print(
            f"{r['cell']:36s} ratio {r['ratio']:.4f} CI [{r['ci'][0]:.4f}, {r['ci'][1]:.4f}] expected "
            f"{r['expected_ratio']:.4f} {r['verdict']:12s} hw {r['half_width']:.4f} {r['measured_s']:.2f}s"
            f"{' launch-bound' if r['launch_bound'] else ''}"
            f"{'' if r['converged'] else ' unconverged'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
