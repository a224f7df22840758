"""Command-line entry point: ``python -m harness <command> [options]``.

Each command lives in the :mod:`harness.commands` module of its noun (``compare`` in
:mod:`harness.commands.run`, ``apply`` in :mod:`harness.commands.series` ...). A command
module exposes ``add_arguments_<command>(parser)`` and ``run_<command>(args) -> int``,
turns the arguments into plain values and calls the library; only the chosen command's
module is imported, so ``--help`` stays fast and a broken optional dependency of one
command cannot break the others.

Errors: a :class:`harness.errors.HarnessError` is printed as one line on stderr
(``error: <cause> -- <remedy>``) and the process exits with its exit code (2);
argparse usage errors and file-system refusals (``OSError``: a path that is a file, no
permission, a full disk) are turned into the same one-line form.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from harness import __version__
from harness.errors import HarnessError, UsageError

#: command -> (module, one-line help). Keep sorted by pipeline order.
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": (
        "harness.commands.doctor",
        "two-minute self-test: device, every op under every env config, timer, toolchain",
    ),
    "checkout": (
        "harness.commands.checkout",
        "clone/import the upstream; create stock and patched worktrees at a base ref",
    ),
    "init": (
        "harness.commands.series",
        "new series from your commits on the patched worktree: patches + commented series.toml",
    ),
    "check": ("harness.commands.series", "does the patch series apply at the base? (worktrees untouched)"),
    "apply": ("harness.commands.series", "git am --3way the patch series into the patched worktree"),
    "refresh": ("harness.commands.series", "write the patched worktree's commits back as the patch series"),
    "rebase": ("harness.commands.series", "carry the patch series onto another base ref (3-way); add a base variant"),
    "pr": ("harness.commands.pr", "branch with your git identity + PR.md (why, evidence block, reproduce command)"),
    "build": ("harness.commands.build", "wheel of the stock or patched worktree (--kind), one configuration, verified"),
    "build_stock": ("harness.commands.build", "build --kind stock: wheel of the base (stock worktree), verified"),
    "build_patched": ("harness.commands.build", "build --kind patched: wheel of base + series, verified"),
    "bench": ("harness.commands.run", "checks + microbenchmarks of one build under its env configs"),
    "compare": ("harness.commands.run", "A/B: checks + microbenchmarks of stock vs patched builds"),
    "report": ("harness.commands.report", "re-render report.md and its plots from a results directory"),
    "merge": ("harness.commands.merge", "runs of one series on several machines -> one results.json and report.md"),
    "preview": ("harness.commands.preview", "render report.md as GitHub does (report.html), optionally screenshot it"),
}


class _Parser(argparse.ArgumentParser):
    """argparse that raises a one-line UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:  # noqa: D401 - argparse API
        raise UsageError(f"{self.prog}: {message}", f"see `{self.prog} --help`")


def build_parser(command: str) -> argparse.ArgumentParser:
    """Return the parser of one command (its module imported on demand).

    Raises:
        UsageError: the command is not known.
    """
    if command not in COMMANDS:
        raise UsageError(f"unknown command {command!r}", f"choose one of: {', '.join(COMMANDS)}")
    module_name, help_text = COMMANDS[command]
    module = importlib.import_module(module_name)
    parser = _Parser(prog=f"python -m harness {command}", description=help_text)
    getattr(module, f"add_arguments_{command}")(parser)
    for action in parser._actions:  # every numeric option says its range (harness.numbers.option)
        bound = getattr(action.type, "bound", None)
        if bound is not None and action.help:
            action.help += f"; {bound.describe()}"
    parser.set_defaults(_run=getattr(module, f"run_{command}"))
    return parser


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"torch-patch-harness {__version__}", "usage: python -m harness <command> [options]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_text}" for name, (_, help_text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the process exit code (0 ok, 1 some cells failed, 2 bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(__version__)
        return 0
    rc = 2
    try:
        rc = _main(argv)
    finally:
        outdir = sys.modules.get("harness.outdir")  # imported by every command that claims an output folder
        if outdir is not None:
            outdir.finish(failed=rc != 0)  # each claimed folder's marker lists what this command wrote there
    return rc


def _main(argv: list[str]) -> int:
    """:func:`main` of a command line past ``--help``/``--version``: the exit code, errors as one line."""
    try:
        parser = build_parser(argv[0])
        args = parser.parse_args(argv[1:])
        return int(args._run(args) or 0)
    except HarnessError as exc:
        print(exc.line(), file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # the file system said no (a path that is a file, no permission, disk full)
        where = f" ({exc.filename})" if exc.filename else ""
        print(
            f"error: {exc.strerror or exc}{where} -- check that the path exists, is a directory where one is "
            "expected, is writable, and that the disk has space",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished results are on disk; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
