"""``compare`` (A/B of two builds) and ``bench`` (one build): the command line of :mod:`harness.runner`.

Every option is declared once, in :data:`harness.options.OPTIONS`: its argparse argument, its request
value and its checks come from there.
"""

from __future__ import annotations

import argparse
import sys

from harness import options
from harness.plan import RunRequest
from harness.runner import execute


def add_arguments_compare(parser: argparse.ArgumentParser) -> None:
    """Options of ``compare``."""
    options.add_arguments(parser, "compare")


def add_arguments_bench(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench``."""
    options.add_arguments(parser, "bench")


def _command() -> tuple[str, ...]:
    """The command line that reproduces this run (recorded in results.json)."""
    if sys.argv[0].endswith(("harness", "__main__.py")):
        return ("python", "-m", "harness", *sys.argv[1:])
    return tuple(sys.argv)


def request(args: argparse.Namespace, inputs: dict[str, str]) -> RunRequest:
    """The :class:`harness.plan.RunRequest` of parsed ``compare``/``bench`` arguments."""
    return RunRequest(inputs=inputs, command=_command(), **options.request_values(vars(args)))


def run_compare(args: argparse.Namespace) -> int:
    """``compare``: :func:`harness.runner.execute` of stock vs patched."""
    return execute(request(args, {"stock": args.stock, "patched": args.patched}))


def run_bench(args: argparse.Namespace) -> int:
    """``bench``: :func:`harness.runner.execute` of one build."""
    return execute(request(args, {"build": args.build}))
