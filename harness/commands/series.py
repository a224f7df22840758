"""``init``, ``check``, ``apply``, ``refresh``, ``rebase``: a patch series and the worktrees (:mod:`harness.series`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands.common import add_source_arguments, source_context
from harness.manifest import load_series, series_hash, shown
from harness.newseries import init_series
from harness.series import PatchCheck, apply_series, check_series, conflict_lines, rebase_series
from harness.workflow import check_context, checkout_context, refresh_context

_CHECK_WORDS = {
    "ok": "applies",
    "3way": "applies only with 3-way merge",
    "not-checked": "not checked (an earlier patch failed)",
    "failed": "FAILS",
}


def add_arguments_check(parser: argparse.ArgumentParser) -> None:
    """Options of ``check``."""
    add_source_arguments(parser, series_required=True)


def run_check(args: argparse.Namespace) -> int:
    """``check``: exit 0 when every patch applies at the base, 1 naming each failing file + hunk."""
    ctx = source_context(args)
    commit, results = check_context(ctx)
    assert ctx.series is not None
    return _print_check(ctx.series.name, ctx.base, commit, results)


def _print_check(name: str, base: str, commit: str, results: list[PatchCheck], *, every: bool = True) -> int:
    """``check``'s lines (each patch unless ``every`` is False, its failing hunks, then the verdict); 1 on a
    failure, else 0."""
    for item in results:
        if every or item.status != "ok":
            print(f"check: {item.patch}: {_CHECK_WORDS[item.status]}")
        for line in item.failures:
            print(f"check:   {line}")
    bad = [r for r in results if r.status == "failed"]
    print(f"check: {name} at {base} ({commit[:12]}): " + ("ok" if not bad else f"{len(bad)} failure(s)"))
    return 1 if bad else 0


def add_arguments_apply(parser: argparse.ArgumentParser) -> None:
    """Options of ``apply``."""
    add_source_arguments(parser, series_required=True)
    parser.add_argument(
        "--force", action="store_true", help="reset patched to the base first when it carries other commits"
    )


def run_apply(args: argparse.Namespace) -> int:
    """``apply``: checkout, then ``git am --3way`` the series into ``patched``."""
    ctx = source_context(args)
    co = checkout_context(ctx, args.workdir)
    series, entry = ctx.series, ctx.entry
    assert series is not None and entry is not None
    outcome = apply_series(series, entry, co, force=args.force)
    if outcome is None:
        print(f"apply: {series.name} is already applied on {co.branch} ({len(entry.patches)} commit(s))")
        return 0
    if not outcome.ok:
        print("\n".join(conflict_lines(outcome, co.patched, ["git", "-C", str(co.patched), "am", "--continue"])))
        return 1
    print(
        f"apply: {len(entry.patches)} commit(s) on {co.branch} in {co.patched} "
        f"(series hash {series_hash(series, entry)[:8]})"
    )
    return 0


def add_arguments_refresh(parser: argparse.ArgumentParser) -> None:
    """Options of ``refresh``."""
    add_source_arguments(parser, series_required=True)


def run_refresh(args: argparse.Namespace) -> int:
    """``refresh``: write ``patched``'s commits back into patches/<series>/<base>/ (offline)."""
    folder, changed = refresh_context(source_context(args), args.workdir)
    print(f"refresh: {shown(folder)}: " + (f"{changed} file(s) written or removed" if changed else "unchanged"))
    return 0


def add_arguments_rebase(parser: argparse.ArgumentParser) -> None:
    """Options of ``rebase``."""
    add_source_arguments(parser, series_required=True)
    parser.add_argument("--onto", metavar="REF", required=True, help="the new base ref (tag, branch or SHA)")
    parser.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="continue a rebase stopped by a conflict, after resolving and `git add`",
    )


def run_rebase(args: argparse.Namespace) -> int:
    """``rebase``: carry the series onto ``--onto``; success writes a new [[base]]; conflict exits 1."""
    ctx = source_context(args)
    assert ctx.series is not None and ctx.entry is not None
    co = checkout_context(ctx, args.workdir, ref=args.onto)
    cmd = [
        Path(sys.executable).name,
        "-m",
        "harness",
        "rebase",
        "--series",
        args.series,
        "--base",
        ctx.base,
        "--onto",
        args.onto,
        "--workdir",
        str(args.workdir),
    ]
    if args.upstream:
        cmd += ["--upstream", args.upstream]
    outcome = rebase_series(ctx.series, ctx.entry, co, resume=args.resume)
    if not outcome.ok:
        print("\n".join(conflict_lines(outcome, co.patched, cmd + ["--continue"])))
        return 1
    print(f"rebase: {ctx.series.name} carried from {ctx.base} onto {args.onto} ({co.commit[:12]})")
    series = load_series(ctx.series.path)  # with the [[base]] the rebase wrote: it must check at its base
    return _print_check(
        series.name,
        co.base,
        co.commit,
        check_series(series, series.base(co.base), co.upstream.store, co.commit),
        every=False,
    )


def add_arguments_init(parser: argparse.ArgumentParser) -> None:
    """Options of ``init``."""
    parser.add_argument(
        "--series", metavar="NAME|PATH", required=True, help="the new series: a name (patches/NAME) or a folder"
    )
    parser.add_argument("--base", metavar="REF", required=True, help="the base ref your commits are on (as checkout)")
    parser.add_argument(
        "--upstream",
        metavar="URL|PATH|ARCHIVE",
        help="the series' upstream (default: where the worktrees were cloned from; needed for an archive)",
    )
    parser.add_argument("--workdir", metavar="DIR", default="work", help="where worktrees live (default: ./work)")


def run_init(args: argparse.Namespace) -> int:
    """``init``: the patched worktree's commits -> patches/<series>/ (patches + series.toml), checked."""
    made = init_series(args.series, args.base, args.workdir, args.upstream)
    manifest = load_series(made.folder)
    _print_check(manifest.name, args.base, made.base_commit, list(made.checks))
    entry = manifest.bases[0]
    markers = ", ".join(manifest.evidence.markers) or "none found: name them in [evidence] markers"
    print(
        f"init: {shown(made.folder / 'series.toml')}: {len(entry.patches)} patch(es) at {entry.ref} "
        f"({made.base_commit[:12]}), files {len(entry.files or ())}, markers {markers}, "
        f"{len(manifest.evidence.contrasts)} contrast(s), {len(manifest.evidence.tests)} test(s)"
    )
    print(
        f"init: {made.branch} carries the series; edit series.toml (every line says what it is), then run "
        f"`python -m harness check --series {manifest.name}`"
    )
    return 0
