"""``report``: re-render report.md and its plots from a results directory (:mod:`harness.report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import document as doc
from harness import merge, report
from harness import results as res
from harness.errors import ResultsError
from harness.fsutil import live_holder
from harness.outdir import MERGE_WRITES, RESULTS_WRITES, claim, holds_results


def add_arguments_report(parser: argparse.ArgumentParser) -> None:
    """Options of ``report``."""
    parser.add_argument("directory", type=Path, help="a results directory holding results.json")


def run_report(args: argparse.Namespace) -> int:
    """``report``: :func:`harness.report.write` from ``results.json`` alone, into the folder that holds it
    (claimed first: :func:`harness.outdir.claim`); prints the paths written. A merged document
    (:mod:`harness.merge`) gets its merged report back.

    Raises:
        ResultsError: a run (``compare``/``bench``) is writing the folder now (its ``.lock`` names a live
            process): its results.json is missing or not final; or :func:`harness.document.load`'s errors.
    """
    directory = args.directory.parent if args.directory.name == res.RESULTS else args.directory
    holder = live_holder(directory) if directory.is_dir() else None
    if holder is not None:
        raise ResultsError(
            f"{directory} is being written by pid {holder.get('pid', '?')} ({holder.get('what', 'unknown command')}): "
            f"its {res.RESULTS} is not finished",
            "wait for that run to end, or pass another folder",
        )
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
