"""``report``: re-render report.md and its plots from a results directory (:mod:`harness.report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import report
from harness import results as res
from harness.outdir import RESULTS_WRITES, claim, holds_results


def add_arguments_report(parser: argparse.ArgumentParser) -> None:
    """Options of ``report``."""
    parser.add_argument("directory", type=Path, help="a results directory holding results.json")


def run_report(args: argparse.Namespace) -> int:
    """``report``: :func:`harness.report.write` from ``results.json`` alone, into the folder that holds it
    (claimed first: :func:`harness.outdir.claim`); prints the paths written."""
    data = res.load(args.directory)
    directory = args.directory.parent if args.directory.name == res.RESULTS else args.directory
    claim(directory, "report DIR", RESULTS_WRITES, holds_results)
    for path in report.write(directory, data):
        print(path)
    return 0
