"""``pr``: a pushable branch with the contributor's identity, and ``PR.md`` (:mod:`harness.pr`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.common import add_source_arguments, source_context
from harness.pr import prepare


def add_arguments_pr(parser: argparse.ArgumentParser) -> None:
    """Options of ``pr``."""
    add_source_arguments(parser, series_required=True)
    parser.add_argument("--branch", metavar="NAME", help="branch to create (default: pr/<series>/<base>)")
    parser.add_argument(
        "--results",
        metavar="DIR",
        default="results",
        help="where results directories live (default: ./results); the newest naming the series is the evidence",
    )
    parser.add_argument(
        "--evidence-for-other-series",
        dest="other_series",
        action="store_true",
        help="make the branch even when its commits differ from the series (edited or extra commits, other "
        "messages); PR.md then says that its evidence is for another series hash. Without it, pr refuses and "
        "names the commits (run refresh, then a new compare)",
    )
    parser.add_argument(
        "--dist",
        metavar="DIR",
        default="dist",
        help="where the wheels are (default: ./dist); without evidence, the build commands printed write there "
        "and the compare command printed reads it (compare --stock DIR/ --patched DIR/)",
    )


def run_pr(args: argparse.Namespace) -> int:
    """``pr``: :func:`harness.pr.prepare`; prints the branch, where PR.md is and the next steps."""
    made = prepare(
        source_context(args),
        args.workdir,
        args.branch,
        Path(args.results),
        Path(args.dist),
        other_series=args.other_series,
    )
    print(
        f"pr: branch {made.branch} ({made.commits} commit(s) by {made.who.name} <{made.who.email}>) in {made.worktree}"
    )
    print(f"pr: {made.markdown} (the pull request's body" + (")" if made.evidence else "; no evidence yet)"))
    for line in made.steps:
        print(line)
    return 0
