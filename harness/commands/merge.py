"""``merge``: finished runs (one per machine) -> one merged results.json and report.md (:mod:`harness.merge`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import merge
from harness.outdir import MERGE_WRITES, claim


def add_arguments_merge(parser: argparse.ArgumentParser) -> None:
    """Options of ``merge``."""
    parser.add_argument(
        "directories", type=Path, nargs="+", metavar="DIR", help="finished runs' results directories, one per machine"
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the merged results.json and report.md")
    parser.add_argument(
        "--allow-same-machine",
        action="store_true",
        help="merge runs whose provenance is one machine's (two identical machines the provenance cannot tell apart)",
    )


def run_merge(args: argparse.Namespace) -> int:
    """``merge``: check ``--out`` (not a source) and evaluate the runs (nothing written when refused), claim ``--out``
    (:func:`harness.outdir.claim`, kind ``merge``), write; prints the paths written."""
    merged = merge.merge(
        args.directories, args.allow_same_machine, ["python", "-m", "harness", *sys.argv[1:]], out=args.out
    )
    out = claim(args.out, "--out", MERGE_WRITES, kind="merge")
    for path in merge.write(out, merged):
        print(path)
    return 0
