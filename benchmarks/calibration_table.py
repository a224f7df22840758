"""Markdown tables for docs/methodology.md from calibrate_ab.py's calibration.json files.

    python benchmarks/calibration_table.py docs/calibration/h200-large_aa.json docs/calibration/h200-large_planted.json
    python benchmarks/calibration_table.py --summary docs/calibration/h200-*.json

Every number is recomputed from the file's per-cell rows, never copied from its ``summary``. Where a
row stores the per-process medians of both sides (``stock_medians``/``patched_medians``, written by
calibrate_ab.py since the exact Moses CI replaced the bootstrap), its ratio, CI, verdict and half-width are
recomputed with the
current :func:`harness.stats.compare`; where it does not (older files), the stored
values are used: those come from the percentile-bootstrap CI of the ratio of medians that the harness
used then, and the output says so (``estimator: stored bootstrap``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from harness import stats


def _f(x, fmt):
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def rows(data: dict) -> tuple[list[dict], bool]:
    """The file's rows, recomputed with :func:`harness.stats.compare` when every row stores its
    per-process medians; returns (rows, recomputed)."""
    threshold = data["summary"]["threshold"]
    stored = data["rows"]
    if not stored or not all("stock_medians" in r and "patched_medians" in r for r in stored):
        return stored, False
    out = []
    for r in stored:
        c = stats.compare(r["stock_medians"], r["patched_medians"], threshold=threshold)
        hw = c.half_width
        out.append(
            {
                **r,
                "ratio": c.ratio,
                "ci": [c.ci_low, c.ci_high],
                "p": c.p_value,
                "verdict": c.verdict,
                "half_width": hw,
                "n": [c.n_stock, c.n_patched],
                "s_to_1pct": r["measured_s"] * (hw / 0.01) ** 2 if math.isfinite(hw) else None,
            }
        )
    return out, True


def _median(values: list[float]) -> float | None:
    v = sorted(x for x in values if x is not None and math.isfinite(x))
    return v[len(v) // 2] if v else None  # the upper median, as calibrate_ab.py's summary


def summary(data: dict) -> dict:
    """Counts and medians of one calibration file, from its rows (see module docstring).

    Returns: cells, n (processes per side, the smallest), false_positives (A/A: faster or slower),
    undetermined, eligible/detected (planted: planted FLOP cost above the threshold and not
    launch-bound / of those, ``slower``), median_half_width (fraction), median_s_to_1pct (seconds
    of timed measurement per cell to reach a +-1 % half-width at 1/sqrt(n)), recomputed (bool).
    """
    s = data["summary"]
    rs, recomputed = rows(data)
    eligible = [r for r in rs if r["expected_ratio"] - 1 > s["threshold"] and not r.get("launch_bound")]
    return {
        "cells": len(rs),
        "n": min(min(r["n"]) for r in rs),
        "false_positives": sum(r["verdict"] in ("faster", "slower") for r in rs) if s["mode"] == "aa" else None,
        "undetermined": sum(r["verdict"] == "undetermined" for r in rs),
        "eligible": len(eligible) if s["mode"] == "planted" else None,
        "detected": sum(r["verdict"] == "slower" for r in eligible) if s["mode"] == "planted" else None,
        "median_half_width": _median([r["half_width"] for r in rs]),
        "median_s_to_1pct": _median([r["s_to_1pct"] for r in rs]),
        "recomputed": recomputed,
    }


def summary_line(path: Path) -> str:
    """One methodology.md table row: file | cells | n | false positives | undetermined | detected/eligible
    | median half-width | median s to +-1 % | estimator."""
    data = json.loads(path.read_text())
    s = summary(data)
    fp = "–" if s["false_positives"] is None else f"{s['false_positives']}"
    det = "–" if s["detected"] is None else f"{s['detected']} / {s['eligible']}"
    est = "exact (recomputed)" if s["recomputed"] else "stored bootstrap"
    return (
        f"| `{path.name}` | {s['cells']} | {s['n']} | {fp} | {s['undetermined']} | {det} | "
        f"{_f(s['median_half_width'], '.2%')} | {_f(s['median_s_to_1pct'], '.3g')} | {est} |"
    )


SUMMARY_HEAD = [
    "| file | cells | processes per side | false positives | undetermined | detected / eligible | "
    "median CI half-width | median s to ±1 % | estimator |",
    "|---|---|---|---|---|---|---|---|---|",
]


def render(path: Path) -> str:
    data = json.loads(path.read_text())
    s = data["summary"]
    rs, recomputed = rows(data)
    head = (
        f"**{path.name}**: {s['device']}, {s['mode']}, set {s.get('set', 'default')}, {s['rounds']} fresh "
        "processes per "
        f"side"
        + (
            f" + {s['rounds_added']} adaptive rounds (target ±{s['target_ci']:.1%}, {s['unconverged']} cells left "
            "unconverged)"
            if s.get("target_ci")
            else ""
        )
        + f", threshold ±{s['threshold']:.0%}, measure {s['timing']['measure_s']} s per cell per process; "
        f"{len(rs)} cells; "
        + (
            "ratios and CIs recomputed from the stored per-process medians (Hodges-Lehmann, exact CI)"
            if recomputed
            else "**stored** ratios and CIs (percentile bootstrap of the ratio of medians; the file "
            "has no per-process medians to recompute them)"
        )
    )
    lines = [
        head,
        "",
        "| cell | expected | ratio [95% CI] | verdict | CI half-width | measured s | s to ±1% | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        notes = ", ".join(
            n
            for n, on in (
                ("launch-bound", r.get("launch_bound")),
                ("bimodal", r.get("bimodal")),
                ("unconverged", r.get("converged") is False),
            )
            if on
        )
        lines.append(
            f"| {r['cell']} | {r['expected_ratio']:.4f} | {_f(r['ratio'], '.4f')} [{_f(r['ci'][0], '.4f')}, "
            f"{_f(r['ci'][1], '.4f')}] | {r['verdict']} | {_f(r['half_width'], '.2%')} | "
            f"{r['measured_s']:.2f} | {_f(r['s_to_1pct'], '.1f')} | {notes} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--summary", action="store_true", help="one methodology.md row per file instead of per-cell tables"
    )
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    if args.summary:
        print("\n".join(SUMMARY_HEAD + [summary_line(p) for p in args.files]))
    else:
        print("\n".join(render(p) for p in args.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
