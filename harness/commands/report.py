"""``report``: re-render report.md and its plots from a results directory (:mod:`harness.report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import document as doc
from harness import merge, report
from harness import results as res
from harness.outdir import MERGE_WRITES, RESULTS_WRITES, claim, holds_results


def add_arguments_report(parser: argparse.ArgumentParser) -> None:
    """Options of ``report``."""
    parser.add_argument("directory", type=Path, help="a results directory holding results.json")


def run_report(args: argparse.Namespace) -> int:
    """``report``: :func:`harness.report.write` from ``results.json`` alone, into the folder that holds it
    (claimed first: :func:`harness.outdir.claim`); prints the paths written. A merged document
    (:mod:`harness.merge`) gets its merged report back."""
    directory = args.directory.parent if args.directory.name == res.RESULTS else args.directory
    merged = merge.load_merged(directory)
    if merged is not None:
        claim(directory, "report DIR", MERGE_WRITES, kind="merge")
        print(merge.write_report(directory, merged))
        return 0
    run = doc.load(args.directory)
    claim(directory, "report DIR", RESULTS_WRITES, holds_results)
    for path in report.write(directory, run):
        print(path)
    return 0
