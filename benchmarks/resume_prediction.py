"""How well does the report predict the CI half-width a resumed run reaches? Checked on runs that already
have the later rounds, by cutting them back.

For each results.json given, each ``patched/C`` vs ``stock/C`` row that has at least ``--at`` rounds is cut
to its first ``--from`` rounds (what a run of that many rounds would have held), the report's prediction of
its half-width at ``--at`` processes per side is made from the cut rows exactly as the report makes it
(:func:`harness.undetermined.need`, then ``Need.width_at``), and compared with the half-width its first
``--at`` rounds really have (:attr:`harness.stats.Comparison.half_width` of the contrast's own judgement).
Rounds are the run's own: an adaptive round measured only the cells still wide, so the rows that reach
``--at`` are those a resume would have taken there too.

Prints, per file and over all: rows, the median and range of ``actual / predicted``, and how many lie within
a factor 1.5 either way (issue 29's acceptance line for the README command's resume).

    PYTHONPATH=. python3 benchmarks/resume_prediction.py docs/examples/*/results.json --from 4 --at 12
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
from pathlib import Path

from harness import contrasts
from harness import document as doc
from harness import undetermined as und


def cut(data: dict, rounds: int) -> dict:
    """``data`` with only the processes of rounds below ``rounds`` (a copy)."""
    out = copy.deepcopy(data)
    out["processes"] = [p for p in out["processes"] if p["round"] < rounds]
    return out


def same_config(results: list[contrasts.ContrastResult]) -> list[contrasts.ContrastResult]:
    return [r for r in results if r.contrast.a.config == r.contrast.b.config]


def evaluate(path: Path, first: int, at: int) -> list[tuple[str, float, float]]:
    """(row name, predicted half-width at ``at``, actual half-width at ``at``) for each row that reaches
    ``at`` rounds in ``path`` and has a prediction from its first ``first`` rounds."""
    data = json.loads(path.read_text())
    full = same_config(contrasts.evaluate_all(doc.from_json(cut(data, 10**6))))
    early = same_config(contrasts.evaluate_all(doc.from_json(cut(data, first))))
    floors = und.noise_floors(early)
    at_rows = {}
    for result in full:
        for row in result.rows:
            if len(row.rounds) >= at:
                at_rows[(result.contrast.a.config, row.cell.key)] = row
    out = []
    for result in early:
        for row in result.rows:
            key = (result.contrast.a.config, row.cell.key)
            if key not in at_rows:
                continue
            late = at_rows[key]
            keep = late.rounds[:at]  # the first `at` rounds both sides ran
            a = [v for r, v in zip(late.rounds, late.a) if r in keep]
            b = [v for r, v in zip(late.rounds, late.b) if r in keep]
            actual = contrasts.POLICY.judge(b, a, late.cls).half_width
            predicted = und.need(result, row, floors).width_at(at)
            if math.isfinite(actual) and math.isfinite(predicted) and predicted > 0:
                out.append((f"{key[0]} {key[1]}", predicted, actual))
    return out


def summary(rows: list[tuple[str, float, float]]) -> str:
    if not rows:
        return "no row reaches that many rounds"
    ratios = [actual / predicted for _, predicted, actual in rows]
    inside = sum(1 / 1.5 <= r <= 1.5 for r in ratios)
    return (
        f"{len(rows)} rows: actual/predicted median {statistics.median(ratios):.2f} "
        f"(range {min(ratios):.2f}-{max(ratios):.2f}); within 1.5x: {inside} of {len(rows)}; "
        f"narrower than predicted/1.5: {sum(r < 1 / 1.5 for r in ratios)}; "
        f"wider than 1.5x: {sum(r > 1.5 for r in ratios)}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--from", dest="first", type=int, default=4, help="rounds the prediction is made from")
    ap.add_argument("--at", type=int, default=12, help="processes per side the prediction is for")
    args = ap.parse_args(argv)
    if not 2 <= args.first < args.at <= 64:
        ap.error("need 2 <= --from < --at <= 64")
    everything = []
    for path in args.results:
        rows = evaluate(path, args.first, args.at)
        everything += rows
        print(f"{path}: {summary(rows)}")
    print(f"all: {summary(everything)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
