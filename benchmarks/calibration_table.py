"""Markdown tables for docs/methodology.md from calibrate_ab.py's calibration.json files.

    python benchmarks/calibration_table.py docs/calibration/h200-large_aa.json docs/calibration/h200-large_planted.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def _f(x, fmt):
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def render(path: Path) -> str:
    data = json.loads(path.read_text())
    s = data["summary"]
    head = (f"**{path.name}**: {s['device']}, {s['mode']}, set {s.get('set', 'default')}, {s['rounds']} fresh processes per "
            f"side"
            + (f" + {s['rounds_added']} adaptive rounds (target ±{s['target_ci']:.1%}, {s['unconverged']} cells left "
               "unconverged)" if s.get("target_ci") else "")
            + f", threshold ±{s['threshold']:.0%}, measure {s['timing']['measure_s']} s per cell per process; "
            f"{s['cells']} cells, {s['undetermined']} undetermined")
    if s["mode"] == "aa":
        head += f"; **false positives {s['false_positives']}/{s['cells']} ({s['false_positive_rate']:.1%})**"
    else:
        head += (f"; planted +{s['plant']:.0%} K; **detected {s['detected']}/{s['eligible']} eligible cells "
                 f"({_f(s['power'], '.0%')})** (eligible: planted cost > threshold, not launch-bound)")
    lines = [head, "", "| cell | expected | ratio [95% CI] | verdict | CI half-width | measured s | s to ±1% | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        notes = ", ".join(n for n, on in (("launch-bound", r.get("launch_bound")), ("bimodal", r.get("bimodal")),
                                          ("unconverged", r.get("converged") is False)) if on)
        lines.append(f"| {r['cell']} | {r['expected_ratio']:.4f} | {_f(r['ratio'], '.4f')} [{_f(r['ci'][0], '.4f')}, "
                     f"{_f(r['ci'][1], '.4f')}] | {r['verdict']} | {_f(r['half_width'], '.2%')} | "
                     f"{r['measured_s']:.2f} | {_f(r['s_to_1pct'], '.1f')} | {notes} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print("\n".join(render(Path(p)) for p in sys.argv[1:]))
