"""Where a compare run's worker time goes: start-up, then per cell inputs, check, measurement, and
the measured blocks themselves, summed over the run's processes (planned and adaptive apart).

Reads ``<out>/raw/*.jsonl`` and ``*.status.json`` of a ``compare`` run (workers from 2026-12-01 on
stamp each step record with ``t``, epoch seconds). Prints seconds per process (medians) and the
share of the run's worker time::

    PYTHONPATH=. python3 benchmarks/worker_time.py results/aa [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from harness.supervise import read_jsonl


def process_times(jsonl: Path, status: dict) -> dict[str, float]:
    """Seconds of one process: ``startup`` (launch to the worker's start record), ``inputs``, ``check``,
    ``measure`` (steps, to the next step or the cell's end), ``blocks`` (the timed blocks inside
    ``measure``); the last step runs to the process's end."""
    recs = read_jsonl(jsonl)
    start = next((r for r in recs if r.get("type") == "start"), None)
    out = {"startup": 0.0, "first_cell": 0.0, "inputs": 0.0, "check": 0.0, "measure": 0.0, "blocks": 0.0}
    if start is None or "started" not in status:
        return out
    out["startup"] = start["started"] - status["started"]
    last_t, last_step, first = start["started"], None, True
    for r in recs:
        if r.get("type") == "step" and "t" in r:
            if last_step is not None:
                out[last_step] += r["t"] - last_t
            elif first:
                out["first_cell"] += r["t"] - last_t  # the start record to the first step: device context
                first = False
            last_t, last_step = r["t"], r["step"]
        elif r.get("type") == "cell":
            m = r.get("measurement")
            if m:
                out["blocks"] += sum(m["samples"]) * m["number"]
    finished = status.get("finished", last_t)
    if last_step is not None:
        out[last_step] += finished - last_t
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a compare run's --out folder")
    parser.add_argument("--json", type=Path, help="also write the per-process rows here")
    args = parser.parse_args()
    rows = []
    for status_path in sorted((args.out / "raw").glob("r*.status.json")):
        status = json.loads(status_path.read_text())
        name = status_path.name[: -len(".status.json")]
        jsonl = status_path.with_name(name + ".jsonl")
        if not jsonl.is_file():
            continue
        row = process_times(jsonl, status)
        row["name"], row["round"] = name, int(name[1:3])
        row["total"] = status.get("finished", 0) - status.get("started", 0)
        rows.append(row)
    if not rows:
        print(f"no worker records under {args.out / 'raw'}", file=sys.stderr)
        return 2
    planned_rounds = json.loads((args.out / "raw" / "plan.json").read_text()).get("rounds", 4)
    keys = ["total", "startup", "first_cell", "inputs", "check", "measure", "blocks"]
    for label, group in (
        ("planned", [r for r in rows if r["round"] < planned_rounds]),
        ("adaptive", [r for r in rows if r["round"] >= planned_rounds]),
    ):
        if not group:
            continue
        med = {k: statistics.median(r[k] for r in group) for k in keys}
        tot = {k: sum(r[k] for r in group) for k in keys}
        print(f"{label}: {len(group)} processes; median s per process: " + ", ".join(f"{k} {med[k]:.2f}" for k in keys))
        print(f"{label}: sum s: " + ", ".join(f"{k} {tot[k]:.1f}" for k in keys))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
