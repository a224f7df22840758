"""``checkout``: clone/import the upstream, create the ``stock`` and ``patched`` worktrees at the base."""

from __future__ import annotations

import argparse
import time

from harness import progress
from harness.commands.common import add_source_arguments, source_context
from harness.upstream import checkout, submodule_report


def add_arguments_checkout(parser: argparse.ArgumentParser) -> None:
    """Options of ``checkout``."""
    add_source_arguments(parser)


def run_checkout(args: argparse.Namespace) -> int:
    """``checkout``: :func:`harness.upstream.checkout` of the base; prints where the worktrees are."""
    ctx = source_context(args, need_series=False)
    started = time.monotonic()
    result = checkout(ctx.upstream, ctx.base, args.workdir, ctx.series.name if ctx.series else None)
    how = "cloned" if result.upstream.kind == "git" else "imported"
    cache = (
        f"{how} into the cache"
        if result.upstream.created
        else f"cache warm, no {'clone' if how == 'cloned' else 'import'}"
    )
    progress.note(f"checkout: {result.base} = {result.commit[:12]} ({cache}) in {time.monotonic() - started:.1f} s")
    progress.note(f"checkout: stock   {result.stock} (detached)")
    progress.note(f"checkout: patched {result.patched} ({f'branch {result.branch}' if result.branch else 'detached'})")
    line = submodule_report(result.stock)
    if line:
        progress.note(line)
    return 0
