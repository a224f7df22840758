"""Options shared by the commands that work on a checkout: ``--upstream``, ``--base``, ``--series``, ``--workdir``."""

from __future__ import annotations

import argparse

from harness.upstream import DEFAULT_UPSTREAM
from harness.workflow import Context, resolve_context


def add_source_arguments(parser: argparse.ArgumentParser, *, series_required: bool = False) -> None:
    """``--upstream``, ``--base``, ``--series``, ``--workdir``: shared by the commands that work on a checkout."""
    parser.add_argument(
        "--upstream",
        metavar="URL|PATH|ARCHIVE",
        help=f"git URL, local repository/mirror, or source archive (default: the series' "
        f"upstream, else {DEFAULT_UPSTREAM})",
    )
    parser.add_argument("--base", metavar="REF", help="base ref: tag, branch or SHA (default: the series' only base)")
    parser.add_argument(
        "--series",
        metavar="NAME|PATH",
        required=series_required,
        help="patch series: folder under patches/ or a path to it",
    )
    parser.add_argument("--workdir", metavar="DIR", default="work", help="where worktrees live (default: ./work)")


def source_context(args: argparse.Namespace, *, need_series: bool = True) -> Context:
    """The :class:`harness.workflow.Context` the source options name (:func:`harness.workflow.resolve_context`)."""
    return resolve_context(args.series, args.base, args.upstream, need_series=need_series)
