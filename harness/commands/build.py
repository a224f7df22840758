"""``build``: a wheel of the stock or patched worktree, one configuration, verified (:mod:`harness.build`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness import build as b
from harness import progress
from harness.commands.common import add_source_arguments
from harness.errors import UsageError
from harness.numbers import option
from harness.outdir import DIST_WRITES, claim


class _Renamed(argparse.Action):
    """``build --env`` became ``--build-env`` (``compare --env`` sets worker variables, a different thing)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        raise UsageError(
            "build --env was renamed --build-env (compare/bench --env sets worker variables instead)",
            f"write --build-env {values}",
        )


def _holds_builds(dist: Path) -> bool:
    """A --dist folder written before output folders were marked: it holds a build manifest of ours."""
    for manifest in dist.glob("*.whl.build.json"):
        try:
            data = json.loads(manifest.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and "schema" in data and "inputs" in data:
            return True
    return False


def add_arguments_build(parser: argparse.ArgumentParser) -> None:
    """Options of ``build`` (plus the common ``--upstream/--base/--series/--workdir``)."""
    parser.add_argument("--kind", choices=b.KINDS, required=True, help="stock (the base) or patched (base + series)")
    add_source_arguments(parser)
    parser.add_argument("--platform", choices=b.PLATFORMS, default=None, help="build environment (default: this host)")
    parser.add_argument("--dry-run", action="store_true", help="print the environment and command, build nothing")
    parser.add_argument(
        "--jobs",
        type=option("--jobs", b.JOBS),
        default=None,
        help="parallel compile jobs, MAX_JOBS (default: CPU count)",
    )
    parser.add_argument(
        "--build-env", action="append", default=[], metavar="KEY=VALUE", help="override a build variable (repeatable)"
    )
    parser.add_argument("--env", action=_Renamed, help=argparse.SUPPRESS)
    parser.add_argument("--build-type", choices=b.BUILD_TYPES, default="Release")
    parser.add_argument(
        "--incremental",
        action="store_true",
        help="patched: apply the series in the built stock tree and rebuild only what it touches",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if an identical build exists")
    parser.add_argument("--no-verify", action="store_true", help="skip verification in a fresh venv")
    parser.add_argument("--dist", type=Path, default=Path("dist"), help="wheel + manifest directory (default ./dist)")
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help="build this source tree directly, no worktrees (a patched build of it must be patched already)",
    )


def run_build(args: argparse.Namespace) -> int:
    """``build``: plan (``--dry-run`` prints it), build, verify; prints the wheel's path."""
    overrides = b.parse_env_overrides(args.build_env)
    platform = args.platform or b.host_platform()
    if args.kind == "stock" and args.incremental:
        raise UsageError("--incremental applies to patched builds only", "drop --incremental for --kind stock")
    if not args.dry_run and (args.source is not None or args.base is not None):
        b.refuse_host(platform, args.source, args.base)  # a Mac too old for the base: before any checkout
    sources = b.resolve_sources(
        args.kind,
        source=args.source,
        series=args.series,
        base=args.base,
        upstream=args.upstream,
        workdir=args.workdir,
        dry_run=args.dry_run,
        incremental=args.incremental,
    )
    if args.kind == "patched" and sources.series is None and not args.dry_run:
        raise UsageError("--kind patched needs --series", "pass --series NAME")
    tree = sources.stock if args.kind == "stock" or args.incremental else sources.patched
    if tree is None:  # dry run, no worktree yet
        print(
            b.describe_without_source(
                platform,
                args.kind,
                jobs=args.jobs,
                build_type=args.build_type,
                workdir=args.workdir,
                dist_dir=args.dist,
                overrides=overrides,
                sources=sources,
                series_name=args.series,
            )
        )
        return 0
    if not args.dry_run:
        b.refuse_host(platform, tree, sources.base)
        b.preflight_source(tree)  # before anything is installed: one line when submodules are missing
    plan = b.plan_build(
        tree,
        platform,
        kind=args.kind,
        series=sources.series,
        jobs=args.jobs,
        env_overrides=overrides,
        build_type=args.build_type,
        dist_dir=args.dist,
        base_sha=sources.base_sha,
        incremental=args.incremental,
    )
    if args.dry_run:
        print(plan.describe())
        missing = b.missing_submodules(tree)
        if missing:
            print(f"# preflight would refuse: {tree} lacks submodules {', '.join(missing)}")
        host = b.check_host_macos(platform, tree, sources.base)
        if host is not None and host.error is not None:
            print(f"# preflight would refuse: {host.error.line()}")
        return 0
    if not args.no_verify:
        b.check_markers_declared(sources.series)  # said before a build of hours, not after it
    claim(args.dist, "--dist", DIST_WRITES, _holds_builds)  # after the input is known good, before a write
    try:
        result, verified = b.build_and_verify(plan, force=args.force, verify=not args.no_verify)
    except b.BuildFailed as exc:
        for line in exc.tail:
            print(line, file=sys.stderr)
        raise
    if verified is not None:
        for note in verified.notes:
            progress.note(note)
        progress.note(
            f"verified {result.wheel.name}: imports, version {verified.version}"
            + (", markers checked" if verified.markers_checked else "")
        )
    print(result.wheel)
    return 0
