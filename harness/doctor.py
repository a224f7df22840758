"""``doctor``: a two-minute self-test of a machine, before hours of building and measuring.

On any machine, with the torch the user already has (``--build``, default this interpreter) it runs:

1. **device health**: the provenance probe (:mod:`harness.bench.provenance`): torch version and commit,
   the device, a small matmul compared with the CPU, the dtype table. A device that cannot
   produce evidence stops here with one line (``--device mps`` off a Mac, for example).
2. **every workload op once at a tiny shape under every env config of the device**
   (:attr:`harness.bench.ops.Op.probe_shape`, float16, bfloat16 and float32), each config in a
   fresh worker process, with the correctness check, a hard per-step timeout (``--step-timeout``:
   a worker that finishes no cell for that long is stopped and the cell and step it hung in are
   named) and a whole-process timeout;
3. **timer sanity**: a timed block agrees with a host clock read around it
   (:meth:`harness.bench.timer.BlockTimer.sanity`);
4. **assumptions**: every assumption the evidence makes about the device, measured on it
   (:mod:`harness.assumptions`: synchronize waits, host-encode bias per GEMM route, idle clock-down and the
   duty to use, the slowest cell against the stall timeout compare sets for it, fresh-process kernel
   choice, accuracy per route, and on mps the profiler's device time against a kernel-bound block's host
   time), each "assumption held" or "did not hold" with what that means and the upstream source; held on
   noisy numbers (one cold process among equal ones) is a warning;
5. **build toolchain**: compiler, CMake against the base, the Metal toolchain on macOS, free disk
   (:func:`harness.build.preflight.toolchain_checks`).

It prints one table (ok / warning / failed / skipped, each with a one-line detail) and writes a pasteable
``doctor.md`` in ``--out``, and ``doctor.json`` with the assumption rows' numbers and what they
recommend (``assumptions.recommend``: the duty cycle, the stall timeout compare sets for the slowest cell)
for the report and the user. Exit status 0 when nothing failed (warnings included: red means a run would
break or lie), 1 otherwise, 2 for bad input.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import assumptions as asm
from harness import children, supervise
from harness import configs as cfg
from harness.bench.provenance import IMPORT_STEP, STEPS
from harness.bench.workloads import DTYPES, OPS, Workload, probe_cell
from harness.build.platforms import host_platform
from harness.build.preflight import toolchain_checks
from harness.fsutil import atomic_write_json, atomic_write_text
from harness.manifest import load_series
from harness.numbers import Bound, number
from harness.options import STALL_TIMEOUT
from harness.outdir import DOCTOR_WRITES, claim
from harness.plan import TIMING as RUN_TIMING
from harness.progress import note
from harness.supervise import read_jsonl, run_worker
from harness.venvs import ensure_interpreter, parse_input

#: doctor.md's first line
TITLE = "## torch-patch-harness doctor"
#: --step-timeout: seconds a worker may go without finishing a cell (a day at most)
STEP_TIMEOUT = Bound(0, 86400, low_open=True, unit="seconds")
#: the doctor's timing: enough to run the timer's whole path once, not to measure anything
TIMING = {"warmup_s": 0.005, "warmup_calls": 3, "measure_s": 0.01, "min_block_s": 1e-4, "min_samples": 3}


@dataclass(frozen=True)
class Row:
    """One line of the doctor's table: ``status`` is ``ok`` | ``warning`` | ``failed`` | ``skipped``."""

    step: str
    status: str
    detail: str


#: ``python -c`` code that answers whether CUDA is available on the channel given last (harness.bench.channel)
_CUDA_CODE = (
    "import json, sys\n"
    "def say(record):\n"
    "    with open(sys.argv[-1], 'a') as fh:\n"
    "        fh.write(json.dumps(record) + '\\n')\n"
    "say({'step': 'importing torch'})\n"
    "import torch\n"
    "say({'step': 'asking torch for CUDA'})\n"
    "say({'answer': bool(torch.cuda.is_available())})\n"
)


def _auto_device(python: Path) -> str:
    """``mps`` on macOS, else ``cuda`` when ``python``'s torch has CUDA, else ``cpu`` (also when it does
    not answer: the provenance probe then says why)."""
    if sys.platform == "darwin":
        return "mps"
    proc = children.run(
        [str(python), "-c", _CUDA_CODE],
        what=f"doctor: choosing the device with {python}",
        deadline=STEPS["probing the device"],
        steps={IMPORT_STEP: STEPS[IMPORT_STEP]},
        answer=True,
        remedy=f"time it by hand: time {python} -c 'import torch' (or pass --device)",
    )
    return "cuda" if proc.answer is True else "cpu"


def cells(workload: Workload | None = None) -> list[str]:
    """Every op of :data:`OPS` and of a series' ``workload`` module at its probe shape, in every default dtype
    (cell keys)."""
    names = [*OPS, *(o.name for o in workload.ops)] if workload else OPS
    return [probe_cell(op, dtype).key for dtype in DTYPES for op in names]


def config_row(config: cfg.EnvConfig, record: dict, sanity: dict | None) -> list[Row]:
    """Rows for one env config's worker record (cells) and its timer-sanity record."""
    cells_ = record["cells"]
    failed = {k: v["reason"] for k, v in cells_.items() if v["status"] == "failed"}
    skipped = sum(1 for v in cells_.values() if v["status"] == "skipped")
    ok = len(cells_) - len(failed) - skipped
    if failed:
        key, why = next(iter(failed.items()))
        rows = [Row(f"ops under {config.name}", "failed", f"{len(failed)} of {len(cells_)} cells failed; {key}: {why}")]
    elif record.get("status") == "failed":  # its cells stand, the process did not (it exited non-zero after them)
        why = record.get("reason") or "no reason recorded"
        rows = [Row(f"ops under {config.name}", "failed", f"{ok} cells ok, but the worker failed: {why}")]
    else:
        worst = max(
            (
                v["check"]["rel_error"] / v["check"]["bound"]
                for v in cells_.values()
                if v.get("check") and v["check"].get("rel_error") is not None
            ),
            default=None,
        )
        margin = f"; worst error {worst:.0%} of its bound" if worst is not None else ""
        rows = [Row(f"ops under {config.name}", "ok", f"{ok} cells ok, {skipped} skipped (unsupported dtype){margin}")]
    if sanity is not None:
        rows.append(
            Row(
                f"timer under {config.name}",
                "ok" if sanity["passed"] else "failed",
                f"block {sanity['block_s'] * 1e6:.0f} µs, host clock around it {sanity['outer_s'] * 1e6:.0f} µs, "
                f"overhead {sanity['overhead_s'] * 1e6:.0f} µs",
            )
        )
    elif not failed:
        rows.append(Row(f"timer under {config.name}", "failed", "the worker wrote no timer-sanity record"))
    return rows


def assumption_rows(
    python: Path, device: str, raw: Path, keep: tuple[str, ...] = (), emulate: dict | None = None
) -> tuple[list[Row], dict]:
    """The assumption rows (:mod:`harness.assumptions`) measured with ``python`` on ``device`` (``emulate``:
    the MPS conformance mode's settings, for CI), and their ``doctor.json`` part. Judged against the
    runner's full-run timing and stall timeout (the floor of the one compare sets per cell), the defaults of
    ``compare``."""
    timing = RUN_TIMING["full"]["cpu" if device == "cpu" else "gpu"]
    note("doctor: assumptions")
    measured = asm.measure(
        python, device, raw, stall_s=STALL_TIMEOUT["full"], timing=timing, emulate=emulate, keep=keep
    )
    verdicts = asm.judge(measured)
    return [Row(a.name, *asm.row_text(a, v)) for a, v in verdicts], asm.to_json(measured, verdicts)


def render(rows: list[Row], header: str) -> str:
    """The doctor's markdown: a header line and one table row per check."""
    lines = [TITLE, "", header, "", "| check | result | detail |", "|---|---|---|"]
    lines += [f"| {r.step} | {r.status} | {r.detail.replace('|', '/')} |" for r in rows]
    failed = sum(r.status == "failed" for r in rows)
    warned = sum(r.status == "warning" for r in rows)
    lines += ["", f"{len(rows) - failed - warned} ok or skipped, " + (f"{warned} warning(s), " if warned else "")]
    lines[-1] += f"{failed} failed."
    return "\n".join(lines) + "\n"


def _holds_a_doctor_run(out: Path) -> bool:
    """A doctor folder written before output folders were marked: its doctor.md starts with :func:`render`'s title."""
    try:
        with open(out / "doctor.md", encoding="utf-8") as fh:
            return fh.readline().startswith(TITLE)
    except (OSError, UnicodeDecodeError):
        return False


def run(
    build: str,
    device: str,
    out: Path,
    *,
    step_timeout: float = 30.0,
    keep: tuple[str, ...] = (),
    platform: str | None = None,
    source: Path | None = None,
    series: str | None = None,
) -> list[Row]:
    """The self-test: ``build`` (python:/path, a wheel or a requirement) on ``device`` (``auto``: see
    :func:`_auto_device`); writes ``out/doctor.md`` and returns its rows. ``step_timeout``: seconds a
    worker may go without finishing a cell; ``platform`` (default: this host's) and ``source`` feed
    :func:`harness.build.preflight.toolchain_checks`; ``series``: a series whose ``[evidence] workload``
    module's ops run too (:mod:`harness.bench.plugins`).

    Raises:
        SeriesError: ``series`` names no loadable series (its workload module refused: one line).
        UsageError: ``step_timeout`` NaN, infinite or outside :data:`STEP_TIMEOUT`.
        HarnessError: no torch in the build, or the device is unusable.
        ResultsError: ``out`` is not a folder the doctor may write in (:func:`harness.outdir.claim`).
    """
    number(step_timeout, "--step-timeout", STEP_TIMEOUT)
    workload = load_series(series).workload if series else None
    started = time.monotonic()
    python, _ = ensure_interpreter(parse_input(build, "build"))
    device = _auto_device(python) if device == "auto" else device
    info = supervise.probe_build("", python, device, keep)  # an unusable device: one line, exit 2
    who = info.get("gpu_name") or info.get("cpu_name")
    header = (
        f"torch {info['torch_version']} (git {str(info.get('git_version'))[:12]}) on {device} ({who}), "
        f"{info['os'].get('macos_product_version') or info['os']['platform']}, Python {info['python']}"
    )
    supported = sum(v is None for v in info["dtype_support"].get("float32", {}).values())
    rows = [
        Row(
            "device health",
            "ok",
            f"{device}: a 64x64 matmul agrees with the CPU; " f"{supported}/{len(OPS)} ops run in float32",
        )
    ]
    out = claim(out, "--out", DOCTOR_WRITES, _holds_a_doctor_run)  # after the input is known good, before a write
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for config in cfg.PROFILES[device]:
        spec = {
            "device": device,
            "cells": cells(workload),
            "check": True,
            "reduced_fp32": config.reduced_fp32,
            "routes": dict(config.routes),
            "seed": 0,
            "threads": 1 if device == "cpu" else 0,
            "timing": TIMING,
            "dtype_support": info["dtype_support"],
            "timer_sanity": True,
            **({"workloads": [workload.path]} if workload else {}),
        }
        note(f"doctor: ops under {config.name}")
        name = f"doctor-{config.name.replace('+', '_')}"
        record = run_worker(
            python, spec, config, raw, name, timeout=max(120.0, 4 * step_timeout), keep=keep, stall=step_timeout
        )
        sanity = next((r for r in read_jsonl(raw / f"{name}.jsonl") if r.get("type") == "timer_sanity"), None)
        rows += config_row(config, record, sanity)
    checked, assumed = assumption_rows(python, device, raw, keep)
    rows += checked
    for item, ok, detail in toolchain_checks(platform or host_platform(), source):
        rows.append(Row(f"toolchain: {item}", "ok" if ok else "failed", detail))
    header += f"; {time.monotonic() - started:.0f} s"
    atomic_write_text(out / "doctor.md", render(rows, header))
    atomic_write_json(out / "doctor.json", {"header": header, "assumptions": assumed})
    return rows
