"""``compare`` (A/B of two builds) and ``bench`` (one build): the command line of :mod:`harness.runner`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import configs as cfg
from harness import evidence as ev
from harness.bench.workloads import DTYPES, ITEMSIZE
from harness.commands import names
from harness.numbers import option
from harness.runner import (
    BOUNDS,
    BUDGET_S,
    QUICK_CPU_DTYPES,
    ROUNDS,
    ROUNDS_FIXED,
    STALL_TIMEOUT,
    TARGET_CI,
    TARGET_CI_LAUNCH_BOUND,
    RunRequest,
    execute,
    flag,
)


def _number(name: str):
    """The argparse type of a numeric option: :func:`harness.numbers.number` in its range
    (:data:`harness.runner.BOUNDS`)."""
    return option(flag(name), BOUNDS[name])


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``compare`` and ``bench``."""
    _what_arguments(parser)
    _process_arguments(parser)
    _evidence_arguments(parser)
    _output_arguments(parser)


def _what_arguments(parser: argparse.ArgumentParser) -> None:
    """Device, env configs, dtypes and cells."""
    parser.add_argument("--device", required=True, choices=cfg.DEVICES, help="device to measure on")
    parser.add_argument(
        "--configs",
        action="append",
        help="comma-separated env configs, or the option repeated (default: the device's profile list)",
    )
    parser.add_argument(
        "--dtypes",
        action="append",
        help=f"comma-separated dtypes, or the option repeated (default: {','.join(DTYPES)}; --quick on cpu: "
        f"{','.join(QUICK_CPU_DTYPES)}; also {', '.join(d for d in ITEMSIZE if d not in DTYPES)})",
    )
    parser.add_argument(
        "--cells",
        action="append",
        help="comma-separated cell keys op/MxNxK/dtype, or the option repeated (default: the built-in set)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="reduced cell set and shorter timing (minutes on a 2-core CPU)"
    )


def _process_arguments(parser: argparse.ArgumentParser) -> None:
    """Rounds, limits, seed, and what every worker's environment holds."""
    parser.add_argument(
        "--rounds",
        type=_number("rounds"),
        help=f"planned fresh processes per (build, config) before adaptive rounds "
        f"(default {ROUNDS}; {ROUNDS_FIXED} without adaptive rounds, --quick {ROUNDS}; >= 4 for a verdict)",
    )
    parser.add_argument(
        "--timeout", type=_number("timeout"), help="seconds one worker process may take (default 900, --quick 300)"
    )
    parser.add_argument(
        "--stall-timeout",
        type=_number("stall_timeout"),
        help=f"seconds a worker may go without finishing a cell before it is stopped and the cell it "
        f"stalled in is named (default {STALL_TIMEOUT['full']:g}, --quick {STALL_TIMEOUT['quick']:g})",
    )
    parser.add_argument(
        "--duty",
        type=_number("duty"),
        help="busy share of a GPU cell's timed period (default 1/3, measured on an H200; a device that clocks "
        "down while it rests times best at 1: doctor's duty row says which, in doctor.json recommend.duty)",
    )
    parser.add_argument("--seed", type=_number("seed"), default=0, help="seed of the inputs and of the per-round order")
    parser.add_argument(
        "--keep-env",
        default="",
        metavar="NAMES",
        help="comma-separated inherited variables to pass through to workers (workers inherit only "
        "PATH, HOME, the locale and a few more: harness.configs.INHERITED; kept ones are "
        "recorded in results.json)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set this variable in every worker of every env config (repeatable; e.g. OMP_NUM_THREADS=4); "
        "recorded in results.json; a variable an env config of the device sets is refused",
    )
    parser.add_argument(
        "--threads",
        type=_number("threads"),
        help="torch intra-op threads in workers (default: 1 on cpu, where OpenMP threads that share "
        "cores with other processes add ms of spin-wait noise; torch's own default elsewhere; 0 = torch's default)",
    )


def _evidence_arguments(parser: argparse.ArgumentParser) -> None:
    """The series' evidence, extra contrasts and the test files' source."""
    parser.add_argument(
        "--series",
        help="patch series whose series.toml [evidence] drives the run (configs, markers, "
        "routing, contrasts, tests; default: the series named by the wheels' manifests)",
    )
    parser.add_argument(
        "--contrast",
        action="append",
        default=[],
        metavar="'A vs B : OPS : CLAIM'",
        help="a contrast to judge, e.g. 'stock/tf32_override vs stock/default : mm/float32 : faster' "
        "(A, B: BUILD/CONFIG; OPS: op or op/dtype items, empty = all; CLAIM: "
        f"{'|'.join(ev.CLAIMS)}; repeatable; adds to the series' contrasts)",
    )
    parser.add_argument(
        "--tests-source",
        type=Path,
        metavar="DIR",
        help="source tree whose test files the series' [[evidence.test]] name (the patched worktree, "
        "e.g. work/<base>/patched); run with each build's interpreter",
    )


def _output_arguments(parser: argparse.ArgumentParser) -> None:
    """Where results go and how an earlier run there is treated."""
    parser.add_argument("--out", type=Path, required=True, help="results directory (resumed if it holds a run)")
    parser.add_argument("--fresh", action="store_true", help="discard earlier results in --out and start over")
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="run again the finished processes that failed (crashed, killed, timed out); their "
        "earlier status files are kept as .retried-<UTC time>",
    )


def add_arguments_compare(parser: argparse.ArgumentParser) -> None:
    """Options of ``compare``."""
    parser.add_argument(
        "--stock",
        required=True,
        help="stock build: wheel path, build folder (dist/: its stock wheel of the patched wheel's base, by the "
        "build manifests), requirement (torch==2.13.0) or python:/path",
    )
    parser.add_argument(
        "--patched",
        required=True,
        help="patched build: wheel path, build folder (dist/: its newest patched wheel of --series, by the build "
        "manifests), requirement or python:/path",
    )
    _common_arguments(parser)
    parser.add_argument(
        "--target-ci",
        type=_number("target_ci"),
        default=TARGET_CI,
        metavar="FRACTION",
        help="adaptive sampling: after the planned rounds, add rounds of fresh processes (measuring only "
        "the cells not yet there) until every cell's CI half-width is below FRACTION "
        f"(default {TARGET_CI:g}; 0 turns adaptive rounds off)",
    )
    parser.add_argument(
        "--target-ci-launch-bound",
        type=_number("target_ci_launch_bound"),
        default=TARGET_CI_LAUNCH_BOUND,
        metavar="FRACTION",
        help=f"the target for launch-bound cells, whose time is host latency (default {TARGET_CI_LAUNCH_BOUND:g})",
    )
    parser.add_argument(
        "--budget-s",
        type=_number("budget_s"),
        help=f"wall seconds the worker processes may take in all, planned rounds included: an "
        f"adaptive round that would overrun it is not started (default {BUDGET_S['full']:g}, "
        f"--quick {BUDGET_S['quick']:g}); cells left wider are reported",
    )
    parser.add_argument(
        "--plant-k",
        type=_number("plant_k"),
        metavar="FRACTION",
        help="calibration: the patched side runs every GEMM with K grown by at least FRACTION "
        "(e.g. 0.05), a known extra cost; kernel-bound GEMM cells must then come out slower "
        "(docs/methodology.md)",
    )


def add_arguments_bench(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench``."""
    parser.add_argument("--build", required=True, help="the build: wheel path, requirement or python:/path")
    _common_arguments(parser)


def _command() -> tuple[str, ...]:
    """The command line that reproduces this run (recorded in results.json)."""
    if sys.argv[0].endswith(("harness", "__main__.py")):
        return ("python", "-m", "harness", *sys.argv[1:])
    return tuple(sys.argv)


def _listed(values: list[str] | None) -> tuple[str, ...] | None:
    """The items of a repeatable comma-separated option (``--cells a,b --cells c``), in order."""
    return tuple(item.strip() for text in values for item in text.split(",")) if values else None


def request(args: argparse.Namespace, inputs: dict[str, str]) -> RunRequest:
    """The :class:`harness.runner.RunRequest` of parsed ``compare``/``bench`` arguments."""
    return RunRequest(
        inputs=inputs,
        device=args.device,
        out=args.out,
        configs=",".join(args.configs) if args.configs else None,
        dtypes=_listed(args.dtypes),
        cells=_listed(args.cells),
        quick=args.quick,
        rounds=args.rounds,
        timeout=args.timeout,
        stall_timeout=args.stall_timeout,
        duty=args.duty,
        seed=args.seed,
        keep_env=names(args.keep_env),
        worker_env=tuple(args.env),
        threads=args.threads,
        fresh=args.fresh,
        retry_failed=args.retry_failed,
        target_ci=getattr(args, "target_ci", None),
        target_ci_launch_bound=getattr(args, "target_ci_launch_bound", None),
        budget_s=getattr(args, "budget_s", None),
        plant_k=getattr(args, "plant_k", None),
        series=args.series,
        contrasts=tuple(args.contrast),
        tests_source=args.tests_source,
        command=_command(),
    )


def run_compare(args: argparse.Namespace) -> int:
    """``compare``: :func:`harness.runner.execute` of stock vs patched."""
    return execute(request(args, {"stock": args.stock, "patched": args.patched}))


def run_bench(args: argparse.Namespace) -> int:
    """``bench``: :func:`harness.runner.execute` of one build."""
    return execute(request(args, {"build": args.build}))
