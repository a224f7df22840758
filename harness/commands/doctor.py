"""``doctor``: the two-minute self-test (:mod:`harness.doctor`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import configs as cfg
from harness import doctor
from harness.commands import names
from harness.numbers import option
from harness.progress import note


def add_arguments_doctor(parser: argparse.ArgumentParser) -> None:
    """Options of ``doctor``."""
    parser.add_argument(
        "--device",
        choices=("auto", *cfg.DEVICES),
        default="auto",
        help="device to test (default auto: mps on macOS, else cuda when available, else cpu)",
    )
    parser.add_argument(
        "--build",
        default=f"python:{sys.executable}",
        help="the torch to test: python:/path, a wheel or a requirement (default: this interpreter)",
    )
    parser.add_argument("--platform", help="build platform for the toolchain checks (default: this machine's)")
    parser.add_argument("--source", type=Path, help="an upstream source tree, to check CMake against its base")
    parser.add_argument(
        "--step-timeout",
        type=option("--step-timeout", doctor.STEP_TIMEOUT),
        default=30.0,
        help="seconds a worker may go without finishing a cell (default 30)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/doctor"), help="where doctor.md goes")
    parser.add_argument(
        "--series",
        help="a patch series whose [evidence] workload module's ops are run too, at their probe shapes",
    )
    parser.add_argument(
        "--keep-env",
        default="",
        metavar="NAMES",
        help="comma-separated inherited variables of the cleared prefixes to pass through to workers "
        "(as compare --keep-env; e.g. a site's TORCH_SYMM_MEM_DISABLE_MULTICAST)",
    )


def run_doctor(args: argparse.Namespace) -> int:
    """``doctor``: :func:`harness.doctor.run`, its table printed; 1 when a check failed."""
    rows = doctor.run(
        args.build,
        args.device,
        args.out,
        step_timeout=args.step_timeout,
        keep=names(args.keep_env),
        platform=args.platform,
        source=args.source,
        series=args.series,
    )
    width = max(len(r.step) for r in rows)
    for r in rows:
        print(f"{r.step.ljust(width)}  {r.status.ljust(7)}  {r.detail}")
    note(f"wrote {args.out / 'doctor.md'}")
    return 1 if any(r.status == "failed" for r in rows) else 0
