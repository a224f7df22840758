"""``build``: a wheel of the stock or patched worktree, one configuration, verified (:mod:`harness.build`,
strung together by :mod:`harness.workflow`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import progress, workflow
from harness.build.plan import KINDS
from harness.build.platforms import BUILD_TYPES, JOBS, PLATFORMS, host_platform, parse_env_overrides
from harness.build.wheel import BuildFailed
from harness.commands.common import add_source_arguments
from harness.errors import UsageError
from harness.numbers import option
from harness.workflow import BuildRequest


class _Renamed(argparse.Action):
    """``build --env`` became ``--build-env`` (``compare --env`` sets worker variables, a different thing)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        raise UsageError(
            "build --env was renamed --build-env (compare/bench --env sets worker variables instead)",
            f"write --build-env {values}",
        )


def add_arguments_build(parser: argparse.ArgumentParser, kind: str | None = None) -> None:
    """Options of ``build`` (plus the common ``--upstream/--base/--series/--workdir``); with ``kind`` (the
    commands ``build_stock`` and ``build_patched``, as the nox sessions of the same names) no ``--kind``."""
    if kind is None:
        parser.add_argument("--kind", choices=KINDS, required=True, help="stock (the base) or patched (base + series)")
    else:
        parser.set_defaults(kind=kind)
    add_source_arguments(parser)
    parser.add_argument("--platform", choices=PLATFORMS, default=None, help="build environment (default: this host)")
    parser.add_argument("--dry-run", action="store_true", help="print the environment and command, build nothing")
    parser.add_argument(
        "--jobs",
        type=option("--jobs", JOBS),
        default=None,
        help="parallel compile jobs, MAX_JOBS (default: CPU count)",
    )
    parser.add_argument(
        "--build-env", action="append", default=[], metavar="KEY=VALUE", help="override a build variable (repeatable)"
    )
    parser.add_argument("--env", action=_Renamed, help=argparse.SUPPRESS)
    parser.add_argument("--build-type", choices=BUILD_TYPES, default="Release")
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
    """``build``: the :data:`harness.workflow.BUILD` tasks (``--dry-run`` prints the plan); prints the wheel's path."""
    request = BuildRequest(
        kind=args.kind,
        platform=args.platform or host_platform(),
        source=args.source,
        series=args.series,
        base=args.base,
        upstream=args.upstream,
        workdir=args.workdir,
        dist=args.dist,
        jobs=args.jobs,
        build_type=args.build_type,
        overrides=parse_env_overrides(args.build_env),
        incremental=args.incremental,
        force=args.force,
        verify=not args.no_verify,
        dry_run=args.dry_run,
    )
    try:
        state = workflow.build(request)
    except BuildFailed as exc:
        for line in exc.tail:
            print(line, file=sys.stderr)
        raise
    if state.description is not None:
        print(state.description)
        return 0
    assert state.result is not None
    if state.verified is not None:
        for note in state.verified.notes:
            progress.note(note)
        progress.note(
            f"verified {state.result.wheel.name}: imports, version {state.verified.version}"
            + (", markers checked" if state.verified.markers_checked else "")
        )
    print(state.result.wheel)
    return 0


def add_arguments_build_stock(parser: argparse.ArgumentParser) -> None:
    """Options of ``build_stock``: ``build --kind stock``."""
    add_arguments_build(parser, "stock")


def add_arguments_build_patched(parser: argparse.ArgumentParser) -> None:
    """Options of ``build_patched``: ``build --kind patched``."""
    add_arguments_build(parser, "patched")


#: ``build_stock`` and ``build_patched`` are ``build`` with the kind set (the nox sessions' names)
run_build_stock = run_build_patched = run_build
