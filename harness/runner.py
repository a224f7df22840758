"""Schedules worker processes over builds × env configs × rounds; commands ``compare`` and ``bench``.

Scheduling (A/B): in each round every (build, config) pair runs once, in a fresh process, in an
order shuffled per round with a seeded RNG, so stock and patched alternate and slow drift of the
machine (thermal state, background load) spreads over both sides instead of biasing one. The
first round also runs the correctness checks. Each process gets exactly its config's variables
(:func:`harness.configs.worker_environment`) plus the run's ``--env KEY=VALUE`` variables (the same
in every process; recorded in the plan and in each process's ``env``).

Resumable: a process whose ``raw/<proc>.status.json`` exists is not run again; a process that was
interrupted (no status file) is redone. ``--fresh`` discards earlier results of the same out dir.
A worker that crashes, is killed by a signal or exceeds ``--timeout`` has its unfinished cells
marked failed with that reason (a signal names the cell it was in); the run goes on and exits with
status 1; ``--retry-failed`` runs such processes again. Workers run in their own process group and
die with the driver (:func:`_die_with_parent`, :func:`reap_orphans`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import harness
from harness import children, macos, provenance
from harness import configs as cfg
from harness import evidence as ev
from harness import results as res
from harness.bench import kernels
from harness.bench.ops import key_hint
from harness.bench.timer import first_layout, steady_start
from harness.bench.workloads import DTYPES, ITEMSIZE, Cell, default_cells
from harness.checks import consistency
from harness.checks.accuracy import FAILED, status_of
from harness.contrasts import rows as contrast_rows
from harness.errors import HarnessError, ResultsError, UsageError
from harness.fsutil import atomic_write_json, exclusive_lock, inside, open_write
from harness.numbers import Bound, number
from harness.outdir import MARKER, RESULTS_WRITES, claim, clear
from harness.policy import POLICY, CellClass, cell_costs, round_seconds
from harness.policy import measured_seconds as _measured_seconds
from harness.progress import note, task
from harness.provenance import unsupported_reason
from harness.venvs import ensure_interpreter, parse_inputs

SOURCE_ROOT = str(Path(harness.__file__).resolve().parent.parent)

#: Per-process timing. Short: precision comes from the number of fresh processes, not from long
#: measurement inside few (the spread between processes is larger than inside one:
#: docs/methodology.md), so each process measures each cell briefly and adaptive rounds add
#: processes only for the cells whose CI is still wide. min_block_s: a GPU block of >= 5 ms makes
#: the synchronize before and after it (6-12 µs on an H200) <= 0.25 %, the same on both sides of a
#: comparison (docs/timing.md). Halving blocks and measure_s from 10 ms / 0.04 s cut a planned H200
#: process from 16.4 to 10.6 s and bought 78 adaptive processes instead of 24: every kernel-bound
#: cell of the default matrix reached ±1 % in 9 min (docs/methodology.md, item 7).
#: min_samples: blocks per cell at least; 5 on cpu (3 with --quick), where one half-precision GEMM
#: call can take 0.2 s and block-to-block noise is small next to the spread between processes, so
#: the time buys more processes instead; 4 on a GPU, whose blocks of one layout agree within 0.4 %
#: (median max/min over the H200 default matrix's kernel-bound cells, 5 ms blocks).
#: On a GPU, after 10 ms of single warm-up calls, a cell that is not host-bound
#: (:attr:`harness.bench.timer.Measurement.host_bound`) is timed at a duty cycle of 1/3 (the device
#: rests twice each block's time after it: :meth:`harness.bench.timer.BlockTimer.measure`), so it runs
#: at its unthrottled clock whatever the schedule put before it, on ``layouts`` placements of its
#: inputs in device memory (:func:`harness.bench.worker.measure_layouts`); a host-bound cell gets
#: ``host_bound_blocks`` blocks back to back (its spread between processes is host latency; more
#: blocks in one process do not narrow it). On an H200 under sustained load the 700 W power limit
#: moved cells by up to 10 % with the load before them (linear 2048³ TF32 53-56 µs; at a duty of 1/3,
#: 48.9-49.0 µs after idle or after heavy load; benchmarks/power_state.py, docs/methodology.md).
#: What is left of a transient is cut from the blocks (:func:`harness.bench.timer.steady_start`).
#: The duty cycle and layouts are measured on an H200 only; on cpu neither.
TIMING = {
    "full": {
        "cpu": {"warmup_s": 0.05, "measure_s": 0.2, "min_block_s": 2e-3, "min_samples": 5},
        "gpu": {
            "warmup_s": 0.01,
            "measure_s": 0.02,
            "min_samples": 4,
            "min_block_s": 5e-3,
            "layouts": 3,
            "host_bound_blocks": 5,
            "duty": 1 / 3,
        },
    },
    "quick": {
        "cpu": {"warmup_s": 0.02, "measure_s": 0.1, "min_block_s": 1e-3, "min_samples": 3},
        "gpu": {
            "warmup_s": 0.01,
            "measure_s": 0.02,
            "min_samples": 4,
            "min_block_s": 5e-3,
            "layouts": 2,
            "host_bound_blocks": 5,
            "duty": 1 / 3,
        },
    },
}
#: --target-ci defaults: CI half-width a cell is measured to (kernel-bound / launch-bound cells).
#: Launch-bound cells (host latency; 37 % process-to-process spread on an H200 for GEMM 512³,
#: docs/methodology.md) get a lower target so they never hold the whole run hostage.
TARGET_CI = POLICY.kernel_bound.target
TARGET_CI_LAUNCH_BOUND = POLICY.launch_bound.target
#: --budget-s defaults: wall seconds of worker processes in all (planned rounds included); an
#: adaptive round that would overrun it is not started. 540 s keeps the default cuda matrix under
#: 10 minutes on an H200 with probes, consistency and report (docs/methodology.md); 360 s keeps the
#: README's --quick cpu command under 10 minutes on 2 cores with the venvs created.
BUDGET_S = {"full": 540.0, "quick": 360.0}
#: planned rounds (fresh processes per build and config) before adaptive ones: the floor at which
#: the exact test can give a verdict (harness.stats.min_processes)
ROUNDS = 4
#: planned rounds of a run without adaptive ones (``--target-ci 0``, and ``bench``, which has no CI to aim at)
ROUNDS_FIXED = 6
#: the allowed values of compare/bench's numeric options (parsed by harness.numbers.number on the
#: command line and again in plan()): NaN, infinities and values outside are refused with the range.
#: The upper ends are sanity bounds, not tuning: a day per worker, a week of budget, 1000 rounds,
#: a seed that torch.manual_seed and numpy take alike, threads well beyond any host's cores.
BOUNDS = {
    "rounds": Bound(1, 1000, integer=True, unit="rounds"),
    "timeout": Bound(0, 86400, low_open=True, unit="seconds"),
    "stall_timeout": Bound(0, 86400, low_open=True, unit="seconds"),
    "duty": Bound(0, 1, low_open=True),
    "seed": Bound(0, 2**32 - 1, integer=True),
    "threads": Bound(0, 4096, integer=True, unit="threads"),
    "target_ci": Bound(0, 1, high_open=True),  # 0 turns adaptive rounds off
    "target_ci_launch_bound": Bound(0, 1, low_open=True, high_open=True),
    "budget_s": Bound(0, 7 * 86400, low_open=True, unit="seconds"),
    "plant_k": Bound(0, 1, low_open=True, high_open=True),
}


def flag(name: str) -> str:
    """The option of a :data:`BOUNDS` key (``stall_timeout`` -> ``--stall-timeout``)."""
    return "--" + name.replace("_", "-")


def bounded(name: str, value: float | int | None) -> float | int | None:
    """:func:`harness.numbers.number` of a :data:`BOUNDS` option's value (None stays None: the default)."""
    return None if value is None else number(value, flag(name), BOUNDS[name])


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


#: dtypes of ``--quick`` on cpu when ``--dtypes`` is not given: float32, the one every CPU runs at
#: full speed. Half precision depends on the ISA: mm 512³ took 1.2 ms in bfloat16 and 107 ms in float16
#: on an x86 CPU with AVX512-BF16 (docs/examples/cpu-ab), and 220 ms in both against 3 ms in float32 on
#: an AVX2-only one (docs/methodology.md); such cells took most of the README command's 10 minutes.
QUICK_CPU_DTYPES = ("float32",)


def plan_cells(
    dtypes: Sequence[str] | None, cells: Sequence[str] | None, quick: bool, device: str | None = None
) -> list[Cell]:
    """The cells of this run: ``cells`` (keys op/MxNxK/dtype) when given, else the built-in set
    (reduced with ``quick``) in ``dtypes`` (default :data:`~harness.bench.workloads.DTYPES`;
    :data:`QUICK_CPU_DTYPES` for ``quick`` on ``device`` cpu).

    Raises:
        UsageError: an unknown dtype or a malformed cell key.
    """
    chosen = QUICK_CPU_DTYPES if quick and device == "cpu" else DTYPES
    if dtypes is not None:
        chosen = tuple(d for d in dtypes if d)
        unknown = [d for d in chosen if d not in ITEMSIZE]
        if unknown or not chosen:
            raise UsageError(f"unknown dtype {', '.join(unknown) or '(empty)'}", f"choose from {', '.join(ITEMSIZE)}")
    if cells:
        out = []
        for key in cells:
            try:
                out.append(Cell.from_key(key))
            except (ValueError, TypeError) as exc:
                raise UsageError(f"bad cell {key!r}: {exc}", cell_example(key)) from None
        return out
    return default_cells(chosen, quick=quick)


def cell_example(key: str) -> str:
    """How to write a cell key, for the op that ``key`` names (:func:`harness.bench.ops.key_hint`)."""
    return key_hint(key.split("/")[0])


#: variables --env may not set: the harness sets them for its own workers (harness.configs.env_name_problem)
RESERVED_ENV = cfg.RESERVED_ENV


def parse_extra_env(
    items: list[str], device: str, configs: list[cfg.EnvConfig], profiles: tuple[cfg.EnvConfig, ...] | None = None
) -> dict[str, str]:
    """``--env KEY=VALUE`` items -> {KEY: VALUE}: variables set in every worker of every env config.

    Raises:
        UsageError: an item without ``=``, a key that is not a variable name (letters, digits, ``_``,
            not starting with a digit), a key given twice, :data:`RESERVED_ENV`, or a key that an env
            config of ``device`` sets (the configs own those: --env would relabel them).
    """
    extra: dict[str, str] = {}
    profiles = profiles or cfg.PROFILES[device]
    owned = set(cfg.variables(device, profiles))
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"malformed --env {item!r}: no '='", "write --env KEY=VALUE, e.g. --env OMP_NUM_THREADS=4")
        problem = cfg.env_name_problem(key)
        if problem and key in RESERVED_ENV:
            raise UsageError(f"--env {key}: {problem}", f"drop {key} from --env")
        if problem:
            raise UsageError(
                f"malformed --env {item!r}: {problem}", "write --env KEY=VALUE, e.g. --env OMP_NUM_THREADS=4"
            )
        if key in extra:
            raise UsageError(f"--env {key} is given twice ({extra[key]!r} and {value!r})", "give each variable once")
        if key in owned:
            setters = [c.name for c in configs if key in c.env] or [c.name for c in profiles if key in c.env]
            raise UsageError(
                f"--env {key} conflicts with the {device} env configs, which set it themselves "
                f"({', '.join(setters)})",
                f"drop {key} from --env and choose the configs that set it with --configs",
            )
        extra[key] = value
    return extra


def probe_build(
    name: str,
    python: Path,
    device: str,
    keep: tuple[str, ...] = (),
    markers: tuple[str, ...] = (),
    with_collect_env: bool = False,
) -> dict:
    """Run :mod:`harness.provenance` in ``python``; raise when the device cannot produce evidence.
    ``name``: the build's name in messages (``stock``), or ``""`` for "the build" (doctor's one build);
    ``keep``: inherited variables passed through (--keep-env), as in the workers; ``markers``: the series'
    markers (and its configs' variables), looked for in the build's libraries with the device's generic variables;
    ``with_collect_env``: add ``python -m torch.utils.collect_env`` (a few seconds).

    Raises:
        HarnessError: the interpreter has no torch, or the device is missing/unhealthy in this build.
    """
    looked_for = sorted(set(cfg.variables(device)) | set(markers))
    env = cfg.worker_environment(cfg.EnvConfig("probe"), keep=keep)
    env["PYTHONPATH"] = SOURCE_ROOT
    who = f"build {name}" if name else "the build"  # doctor's one build has no name: not "build build"
    what = f"{who} probe ({python})"
    cmd = [str(python), "-m", "harness.provenance", "--device", device, "--markers", ",".join(looked_for)]
    proc = children.run(
        [*cmd, *(["--collect-env"] if with_collect_env else [])],
        what=what,
        deadline=max(PROBE_STEPS.values()),
        steps=PROBE_STEPS,
        answer=True,
        env=env,
        remedy=f"run it by hand to see where it stops: PYTHONPATH={SOURCE_ROOT} {' '.join(cmd)}",
    )
    info = proc.answer
    if proc.returncode != 0:
        raise not_started(who, python, proc) or HarnessError(
            f"{who} ({python}) cannot run the probe: {proc.last_line()}",
            "make sure that interpreter has torch installed (python -c 'import torch')",
        )
    if not isinstance(info, dict):  # /bin/true, or a program that is not Python
        raise HarnessError(
            f"{who} ({python}) did not answer the probe (exit status 0, no answer written): "
            "it is not a Python interpreter that runs the harness",
            "pass python:/path/to/python of an environment that has torch (python -c 'import torch')",
        )
    if info.get("device_error"):
        raise HarnessError(
            f"device {device} is not usable in {who} (torch {info['torch_version']}): {info['device_error']}",
            "refusing to produce evidence for it; choose another --device (cpu always works)",
        )
    return info


#: the probe's deadline per step (harness.provenance.STEPS); tests shorten them
PROBE_STEPS = dict(provenance.STEPS)


def not_started(who: str, python: Path | str, proc: children.Outcome) -> HarnessError | None:
    """The error for an interpreter that stopped before running any code (a "Fatal Python error" at
    start-up, e.g. under ``PYTHONHOME=/nonexistent``), or None when it started."""
    fatal = proc.fatal()
    if fatal is None:
        return None
    return HarnessError(
        f"{who}'s interpreter {python} did not start under this environment: {fatal}",
        "check the variables given to it (--env, --keep-env: PYTHONHOME, PYTHONPATH) and run it by hand",
    )


def check_starts(name: str, python: Path, keep: tuple[str, ...], extra: dict[str, str]) -> None:
    """Start ``python`` once under the workers' environment with ``extra`` (--env), so that variables that
    stop the interpreter (``PYTHONHOME=/nonexistent``) are refused in one line before any worker runs.

    Raises:
        HarnessError: the interpreter does not start under them ("Fatal Python error" at start-up).
    """
    env = {**cfg.worker_environment(cfg.EnvConfig("start"), keep=keep), **extra, "PYTHONPATH": SOURCE_ROOT}
    proc = children.run(
        [str(python), "-c", ""], what=f"build {name} ({python}) under --env", deadline=children.START_S, env=env
    )
    failed = not_started(f"build {name}", python, proc)
    if failed:
        raise HarnessError(
            f"{failed.cause} (--env {' '.join(f'{k}={v}' for k, v in extra.items())})",
            "drop or fix the --env variable that stops it (PYTHONHOME, PYTHONSAFEPATH, ...)",
        )


def _proc_name(rnd: int, build: str, config: str) -> str:
    return f"r{rnd:02d}-{build}-{config.replace('+', '_')}"


def _status_path(raw: Path, name: str) -> Path:
    return raw / f"{name}.status.json"


def read_worker_records(path: Path) -> tuple[dict, dict, bool, dict]:
    """Parse a worker's jsonl: (start record, {cell key: record}, saw the end record, {cell key: observed
    kernels} from ``kernels`` records and the cell records' ``kernels``: harness.bench.kernels)."""
    start, cells, ended, seen = {}, {}, False, {}
    for rec in read_jsonl(path):
        if rec.get("type") == "start":
            start = rec
        elif rec.get("type") == "cell":
            cells[rec["key"]] = {k: v for k, v in rec.items() if k not in ("type", "key", "kernels")}
            if isinstance(rec.get("kernels"), dict):
                seen[rec["key"]] = rec["kernels"]
        elif rec.get("type") == "kernels":
            seen[rec["key"]] = {k: v for k, v in rec.items() if k not in ("type", "key")}
        elif rec.get("type") == "end":
            ended = True
    return start, cells, ended, seen


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a worker's jsonl, in order (torn or non-object lines left out)."""
    out = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line torn by a crash
            if isinstance(rec, dict):
                out.append(rec)
    return out


def last_step(path: Path) -> tuple[str, str] | None:
    """(cell key, step) of the last ``step`` record of a worker's jsonl whose cell has not finished."""
    finished, last = set(), None
    for rec in read_jsonl(path):
        if rec.get("type") == "cell":
            finished.add(rec.get("key"))
        elif rec.get("type") == "step":
            last = (str(rec.get("key")), str(rec.get("step")))
    return last if last and last[0] not in finished else None


#: seconds a worker may go without finishing a cell before it is stopped (--stall-timeout)
STALL_TIMEOUT = {"full": 180.0, "quick": 60.0}


def _wait(proc: subprocess.Popen, out_path: Path, timeout: float, stall: float) -> tuple[str, bool]:
    """Wait for a worker; stop it (SIGKILL) after ``timeout`` seconds in all, or after ``stall``
    seconds in which its jsonl gained no ``cell`` record (counted from its ``start`` record, so
    importing torch is not a stall). Returns (the reason it was stopped or "", whether it stalled)."""
    started = time.monotonic()
    progress_at, cells_seen, size = started, 0, -1
    while True:
        try:
            proc.wait(timeout=0.2)
            return "", False
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        grown = out_path.stat().st_size if out_path.is_file() else 0
        if grown != size:  # parse only when the worker wrote something
            size = grown
            seen = sum(1 for r in read_jsonl(out_path) if r.get("type") in ("start", "cell"))
            if seen != cells_seen:
                progress_at, cells_seen = now, seen
        if now - started >= timeout:
            return f"worker timed out after {timeout:g} s", False  # run_worker kills it
        if cells_seen and now - progress_at >= stall:  # from the start record on
            return f"worker made no progress for {stall:g} s", True


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"worker killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"worker killed by signal {-returncode}"
    return f"worker exited with status {returncode}"


def _die_with_parent(parent: int):
    """``preexec_fn`` of a worker on Linux: SIGKILL it when the driver dies, even by SIGKILL
    (``prctl(PR_SET_PDEATHSIG)``). macOS has no such call: there the driver kills the worker's
    process group when it exits or is interrupted, and a driver killed by SIGKILL leaves a worker
    that the next run on the same --out kills first (:func:`reap_orphans`)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl, kill = ctypes.CDLL(None, use_errno=True).prctl, int(signal.SIGKILL)  # resolved before the fork

    def preexec() -> None:  # in the child: no imports, no locks
        prctl(1, kill)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the driver died before prctl took effect
            os._exit(1)

    return preexec


def _worker_path(raw: Path, name: str) -> Path:
    return raw / f"{name}.worker.json"


#: the largest process id a record in raw/ may name: Linux's PID_MAX_LIMIT (2**22, include/linux/threads.h;
#: /proc/sys/kernel/pid_max is at most that); macOS pids stay below 99999. pid 1 (init) is never a worker.
PID_MAX = 2**22


def reap_orphans(raw: Path) -> list[int]:
    """Kill the process groups of workers that a killed driver left running (``raw/*.worker.json`` of a
    live worker without a status file), so they cannot overlap this run's timings; returns their pids."""
    killed = []
    for path in sorted(raw.glob("*.worker.json")) if raw.is_dir() else []:
        try:
            pid = json.loads(path.read_text())["pid"]
        except (OSError, ValueError, RecursionError, KeyError, TypeError):
            pid = None
        if isinstance(pid, bool) or not isinstance(pid, int) or not 1 < pid <= PID_MAX:
            note(f"{path.name} names no process of this machine (pid {str(pid)[:30]}): a stale record, removed")
            path.unlink(missing_ok=True)
            continue
        try:
            os.killpg(pid, 0)
        except OSError:
            path.unlink(missing_ok=True)
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = children.run(["ps", "-p", str(pid), "-o", "command="], what="ps", deadline=30.0).stdout
        if "harness.bench.worker" in cmdline and str(raw) in cmdline:
            os.killpg(pid, signal.SIGKILL)
            killed.append(pid)
            note(f"killed worker {pid} ({path.name.removesuffix('.worker.json')}), left running by an interrupted run")
        path.unlink(missing_ok=True)
    return killed


def run_worker(
    python: Path,
    spec: dict,
    config: cfg.EnvConfig,
    raw: Path,
    name: str,
    timeout: float,
    keep: tuple[str, ...] = (),
    extra: dict[str, str] | None = None,
    stall: float | None = None,
) -> dict:
    """Run one worker process to completion; return its process record (cells included).
    ``keep``: inherited variables passed through despite their prefix (see --keep-env);
    ``extra``: variables set on top of the config's (see --env; the worker records them);
    ``stall``: seconds without a finished cell after which the worker is stopped (default: ``timeout``)."""
    spec_path, out_path = raw / f"{name}.spec.json", raw / f"{name}.jsonl"
    out_path.unlink(missing_ok=True)  # an interrupted earlier attempt is redone whole
    atomic_write_json(spec_path, spec)
    env = cfg.worker_environment(config, keep=keep)
    env.update(extra or {})
    env["PYTHONPATH"] = SOURCE_ROOT
    started = time.time()
    reason, returncode, stalled = "", None, False
    err_path = raw / f"{name}.stderr"
    with open_write(err_path) as err:  # never through a link planted in raw/ (fsutil.open_write)
        # its own process group (a terminal's Ctrl-C reaches the driver only), killed with the driver
        proc = subprocess.Popen(
            [str(python), "-m", "harness.bench.worker", str(spec_path), str(out_path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        )
    atomic_write_json(_worker_path(raw, name), {"pid": proc.pid})
    try:
        reason, stalled = _wait(proc, out_path, timeout, stall or timeout)
        if not reason:
            returncode = proc.returncode
            if returncode != 0:
                tail = (err_path.read_text(errors="replace").strip().splitlines() or [""])[-1][:300]
                reason = _describe_exit(returncode) + (f": {tail}" if tail and returncode > 0 else "")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything it started; no-op when all ended
        except OSError:
            pass
        proc.wait()
        _worker_path(raw, name).unlink(missing_ok=True)
    start, cells, ended, seen = read_worker_records(out_path)
    probe = spec.get("observe") == "only"  # a probe process's cells are its kernels records
    unfinished = [key for key in spec["cells"] if key not in (seen if probe else cells)]
    where = last_step(out_path) if stalled else None
    if not start and reason:  # it never wrote its start record: no cell was begun
        reason = unstarted_reason(reason, returncode, err_path, out_path, timeout)
    elif where:
        reason = f"{reason} (stalled in cell {where[0]}, step {where[1]})"
    elif unfinished and reason:
        reason = f"{reason} while measuring {unfinished[0]}"  # a worker runs its cells in order
    for key in unfinished:
        cells[key] = {
            "status": "failed",
            "reason": (reason if key == unfinished[0] or not start else f"not measured: {reason}")
            if reason
            else "worker ended without measuring this cell",
        }
    record = {
        "status": "ok" if (ended and not reason) else "failed",
        "reason": reason,
        "returncode": returncode,
        "pid": start.get("pid"),
        "env": start.get("env", {}),
        "started": started,
        "worker_started": start.get("started"),
        "finished": time.time(),
        "cells": cells,
        **({"kernels": seen} if seen or probe else {}),
    }
    atomic_write_json(_status_path(raw, name), record)
    return record


def unstarted_reason(reason: str, returncode: int | None, err_path: Path, out_path: Path, timeout: float) -> str:
    """Why a worker that never wrote its ``start`` record (written once torch is imported) failed: its
    interpreter did not start (a "Fatal Python error" on stderr, e.g. ``--env PYTHONHOME=/nonexistent``),
    or it was still starting Python or importing torch (its ``importing`` record) at the deadline; else
    ``reason``, said to be before any cell. Every cell of the worker gets this reason."""
    fatal = children.fatal_line(err_path.read_text(errors="replace")) if err_path.is_file() else None
    if fatal and returncode:
        return f"the build's interpreter did not start under this environment: {fatal}"
    if returncode is None:  # stopped at the deadline
        importing = any(r.get("type") == "importing" for r in read_jsonl(out_path))
        step = "importing torch" if importing else "starting the interpreter"
        return f"worker timed out after {timeout:g} s before it started: {step} took longer than that"
    return f"{reason} before it started (no cell was begun)"


def run_consistency(
    build_info: dict, device: str, configs: dict[str, cfg.EnvConfig], raw: Path, evidence: ev.Evidence | None = None
) -> dict:
    """Compare the first-round GEMM outputs of the run's config pair in each build
    (:mod:`harness.checks.consistency`; the pair: :meth:`harness.evidence.Evidence.consistency_pair`);
    results are kept in ``raw/consistency-<build>.json``."""
    evidence = evidence or ev.Evidence()
    pair = evidence.consistency_pair(device)
    elsewhere = [
        f"{d}: {p[0]} vs {p[1]}" for d, t in evidence.device.items() if d != device and (p := t.get("consistency"))
    ]
    other_note = (
        (
            f"the series' consistency check on another device ({'; '.join(elsewhere)}) is skipped: this run is "
            f"on {device}"
        )
        if elsewhere
        else None
    )
    result = {"pair": list(pair or ()), "mps_check_skipped": other_note, "skipped": None, "builds": {}}
    if pair is None:
        result["skipped"] = f"no consistency pair on {device} (a series names one in [evidence.{device}] consistency)"
        return result
    if not all(c in configs for c in pair):
        result["skipped"] = f"configs {pair[0]} and {pair[1]} are not both in this run (see --configs)"
        return result
    for build, info in build_info.items():
        kept = raw / f"consistency-{build}.json"
        if kept.is_file():
            try:
                result["builds"][build] = json.loads(kept.read_text())
            except (OSError, UnicodeDecodeError, ValueError, RecursionError):
                raise ResultsError(
                    f"{kept} is damaged (not readable JSON)", "run again with --fresh, or with a new --out"
                ) from None
            continue
        files = [raw / f"{_proc_name(0, build, c)}.outputs.pt" for c in pair]
        if not all(f.is_file() for f in files):
            result["builds"][build] = {
                "error": "the first-round workers did not save their outputs (crashed or failed)"
            }
            continue
        accumulators = info.get("base", {}).get("accumulators", {})
        described = [
            json.dumps({**configs[c].to_json(), "routes": build_routes(info, configs[c]), "accumulators": accumulators})
            for c in pair
        ]
        result["builds"][build] = consistency_of(build, info["interpreter"], [*map(str, files), *described])
        if "error" in result["builds"][build]:
            continue
        atomic_write_json(kept, result["builds"][build])
        for f in files:
            f.unlink()  # the numbers are kept; the tensors are large
    return result


def build_routes(build: dict, config: cfg.EnvConfig) -> dict[str, str]:
    """Op -> kernel path of ``config`` on one build (a results.json ``builds`` entry): its base's exact
    routes where the runner told them (``base.routes``, :meth:`harness.evidence.Evidence.routes_of`), else
    the config's series-wide ones (the looser path where builds differ)."""
    told = (build.get("base") or {}).get("routes")
    return dict(told[config.name]) if told and config.name in told else dict(config.routes)


#: the consistency check's deadline per step (harness.checks.consistency.STEPS); tests shorten them
CONSISTENCY_STEPS = dict(consistency.STEPS)


def consistency_of(build: str, python: str, args: list[str]) -> dict:
    """Run :mod:`harness.checks.consistency` on ``args`` in ``python`` under its deadlines; ``{"cells":
    answer}``, or ``{"error": why}`` (it failed, did not start, did not answer, or ran out of time)."""
    env = cfg.worker_environment(cfg.EnvConfig("consistency"))
    env["PYTHONPATH"] = SOURCE_ROOT
    try:
        proc = children.run(
            [python, "-m", "harness.checks.consistency", *args],
            what=f"consistency check of build {build}",
            deadline=max(CONSISTENCY_STEPS.values()),
            steps=CONSISTENCY_STEPS,
            answer=True,
            env=env,
        )
    except HarnessError as exc:  # out of time: the run's measurements stand; the report says why
        return {"error": f"consistency check did not finish: {exc.cause}"}
    if proc.returncode != 0:
        failed = not_started(f"build {build}", python, proc)
        return {"error": f"consistency check failed to run: {failed.cause if failed else proc.last_line()}"}
    if not isinstance(proc.answer, dict):
        return {"error": "consistency check failed to run: it exited with status 0 and wrote no answer"}
    return {"cells": proc.answer}


def run_series_tests(
    evidence: ev.Evidence, build_info: dict, source: Path | None, keep: tuple[str, ...], raw: Path
) -> dict:
    """The series' ``[[evidence.test]]`` selections on every build (:mod:`harness.seriestests`); {} when none."""
    if not evidence.tests:
        return {}
    from harness import seriestests

    note(
        f"series tests: {len(evidence.tests)} selection(s) x {len(build_info)} build(s)"
        + (f" from {source}" if source else " (no --tests-source: not run)")
    )
    managed = frozenset(b for b, i in build_info.items() if i.get("input", {}).get("kind") != "python")
    result = seriestests.run_all(
        evidence.tests,
        {b: i["interpreter"] for b, i in build_info.items()},
        source.resolve() if source else None,
        raw / "tests",
        keep,
        evidence.test_requirements,
        managed,
    )
    for test in result.get("tests", []):
        for build, record in test.get("builds", {}).items():
            if record.get("as_expected") is False:
                first = (seriestests.failure_lines(record) or [""])[0]
                why = "; ".join(w for w in (record.get("expectation"), first and f"first line: {first}") if w)
                note(
                    f"series test {test['name']!r} on {build}: {record['outcome']}, expected {record['expected']}"
                    + (f" ({why})" if why else "")
                )
    return result


#: what the report shows from a wheel's build manifest (harness.build writes ``<wheel>.build.json``)
MANIFEST_KEYS = ("base_sha", "series", "environment", "compiler", "cmake", "duration_s", "compiled_units")
MANIFEST_KEYS += ("metal_capability", "upstream_recipe", "release_differs")  # macOS builds (harness.macos)


def build_manifest(build) -> dict | None:
    """The build manifest beside a wheel input, when it describes this very wheel (same sha256):
    base SHA, series name and hash, build environment, toolchain. None otherwise."""
    if build.kind != "wheel":
        return None
    path = Path(build.value + ".build.json")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    inputs = data.get("inputs", {})
    if data.get("wheel_sha256") != build.sha256:
        return None
    return {
        **{k: data.get(k) for k in MANIFEST_KEYS},
        "platform": inputs.get("platform"),
        "build_type": inputs.get("build_type"),
        "version": inputs.get("version"),
        "manifest": path.name,
    }


#: adaptive sampling never runs more rounds than this in all
MAX_ROUNDS = 64


def round_order(seed: int, rnd: int, builds, configs) -> list[tuple[int, str, str]]:
    """The (round, build, config) processes of one round, in that round's seeded shuffled order."""
    pairs = [(b, c.name) for b in builds for c in configs]
    random.Random(seed * 1000 + rnd).shuffle(pairs)
    return [(rnd, b, c) for b, c in pairs]


def unconverged_cells(
    data: dict, target: float, launch_target: float | None = None, only_launch_bound: bool | None = None
) -> dict[str, list[str]]:
    """config -> cell keys whose stock/patched CI half-width is above its class's target (or not computable
    yet), in plan order: ``target`` for kernel-bound cells, ``launch_target`` (default ``target``) for
    launch-bound ones (:mod:`harness.policy`). Each cell is the ``patched/C`` vs ``stock/C`` contrast's
    row (paired by round, judged by the policy: :func:`harness.contrasts.rows`). Cells that failed or
    were skipped everywhere are left out; ``only_launch_bound`` True / False keeps only launch-bound /
    kernel-bound cells."""
    from harness import stats

    policy = POLICY.with_targets(target, launch_target if launch_target is not None else target)
    table = res.cell_table(data)
    comparisons, goals = {}, {}
    for contrast in ev.default_contrasts(data["run"]["builds"], data["run"]["configs"]):
        for row in contrast_rows(data, contrast, policy, table):
            if not (row.a and row.b):
                continue
            if only_launch_bound is not None and row.launch_bound != only_launch_bound:
                continue
            comparisons[contrast.a.config, row.cell.key] = row.cmp
            goals[contrast.a.config, row.cell.key] = policy.rule(row.cls).target
    todo = stats.unconverged(comparisons, goals)  # the one adaptive rule
    need: dict[str, list[str]] = {}
    for config, key in (k for k in comparisons if k in todo):  # plan order
        need.setdefault(config, []).append(key)
    return need


def below_floor(data: dict) -> dict[str, list[str]]:
    """config -> launch-bound cell keys with fewer processes per side than their floor (:mod:`harness.policy`)."""
    table = res.cell_table(data)
    need: dict[str, list[str]] = {}
    for contrast in ev.default_contrasts(data["run"]["builds"], data["run"]["configs"]):
        for row in contrast_rows(data, contrast, POLICY, table):
            if row.cls == CellClass.LAUNCH_BOUND and row.a and len(row.rounds) < POLICY.rule(row.cls).floor:
                need.setdefault(contrast.a.config, []).append(row.cell.key)
    return need


def next_adaptive_cells(data: dict, target: float, launch_target: float | None = None) -> dict[str, list[str]]:
    """The cells the next adaptive round measures: the unconverged kernel-bound cells, with the
    launch-bound cells still below their floor of processes (cheap: microseconds per call, and the
    process is started anyway); every unconverged launch-bound cell only once every kernel-bound cell
    has converged, so that cells whose time is host latency (and whose spread between processes is
    wide) never hold the run hostage."""
    kernel = unconverged_cells(data, target, launch_target, only_launch_bound=False)
    if not kernel:
        return unconverged_cells(data, target, launch_target, only_launch_bound=True)
    floor = below_floor(data)
    order = {k: i for i, k in enumerate(data["run"]["cells"])}
    return {
        config: sorted(set(kernel.get(config, [])) | set(floor.get(config, [])), key=order.__getitem__)
        for config in data["run"]["configs"]
        if config in kernel or config in floor
    }


#: the longest measurement (seconds of timed blocks) an adaptive round gives one cell in one process
MAX_CELL_MEASURE_S = 1.0


def median_se(x: list[float]) -> float:
    """Standard error of the median of the sorted values ``x``, from the distribution-free 95 %
    order-statistic interval of a median (ranks n/2 ∓ 0.98·√n; W. J. Conover, *Practical
    Nonparametric Statistics*, 3rd ed., 1999, §3.2): its width / 3.92. Unlike a normal-theory
    estimate it stays wide when the blocks fall into two clusters and the median sits between them."""
    n = len(x)
    lo = max(0, int(n / 2 - 0.98 * math.sqrt(n)))
    hi = min(n - 1, math.ceil(n / 2 + 0.98 * math.sqrt(n)) - 1)
    return (x[hi] - x[lo]) / 3.92


def adaptive_measure_seconds(
    per_build: dict[str, list[dict]], base: float, fixed_s: float, cap: float = MAX_CELL_MEASURE_S
) -> float:
    """Seconds of timed blocks one cell gets in each process of the next adaptive round.

    A process's median (log seconds) varies by σ_b² between processes (the process's own state:
    allocation, algorithm choice, clocks) plus σ_w²/T within (block-to-block noise over T seconds of
    blocks); each process costs the cell ``fixed_s`` besides T (its share of the start-up plus its
    overhead). The variance of the mean over processes per second spent, (σ_b² + σ_w²/T)·(fixed + T),
    is smallest at T* = (σ_w/σ_b)·√fixed: the optimal subsample size of two-stage sampling
    (W. G. Cochran, *Sampling Techniques*, 3rd ed., 1977, §10.6). σ_w² is estimated per process
    from its blocks after the warm-up transient (:func:`median_se` squared, times the seconds measured;
    the first layout's blocks only, as T is the first layout's time: :data:`TIMING`), σ_b² as the
    spread of process medians around each build's mean less the within part, floored at a tenth of
    that spread (never assumed zero). On an H200, GEMM 4096³ shows blocks 2-7 % apart in one process
    (boost clock) while SDPA L512 fp32 differs 1-3 % between processes and 0.1 % inside one
    (docs/methodology.md): the first gets longer measurement, the second more processes.

    ``per_build``: build -> the cell's records so far. Returns ``base`` when fewer than 3 processes
    measured it; otherwise T* clamped to [base, cap] (seconds)."""
    import statistics

    within, centred, seconds, groups = [], [], [], 0
    for records in per_build.values():
        logs = []
        for r in records:
            m = r.get("measurement")
            if r.get("status") != "ok" or not m or len(m["samples"]) < 4:
                continue
            first = first_layout(m["samples"], m.get("layouts") or [])
            x = sorted(math.log(v) for v in first[steady_start(first) :])
            t = _measured_seconds(m)
            within.append(median_se(x) ** 2 * t)
            seconds.append(t)
            logs.append(math.log(res.median_of(r)))  # the process's time (all its layouts)
        if len(logs) >= 2:
            groups += 1
            mean = statistics.fmean(logs)
            centred += [v - mean for v in logs]
    if len(centred) - groups < 2:
        return base
    spread = sum(v * v for v in centred) / (len(centred) - groups)
    sw2 = statistics.median(within)
    sb2 = max(spread - sw2 / statistics.median(seconds), 0.1 * spread, 1e-12)
    return min(cap, max(base, math.sqrt(sw2 * max(fixed_s, 0.0) / sb2)))


def adaptive_plan(data: dict, need: dict[str, list[str]], base: float) -> dict[str, dict[str, float]]:
    """config -> {cell key: measure seconds} for the next adaptive round over ``need``
    (:func:`adaptive_measure_seconds`; each cell's fixed cost is the start-up shared by the cells of
    its process plus the per-cell overhead, :func:`cell_costs`)."""
    startup, overhead = cell_costs(data["processes"])
    table = res.cell_table(data)
    return {
        config: {
            key: round(adaptive_measure_seconds(table[config][key], base, startup / len(keys) + overhead), 3)
            for key in keys
        }
        for config, keys in need.items()
    }


#: what must be equal for finished processes of an earlier run to be reused (:func:`harness.results.resume_plan`)
PLAN_KEYS = res.RESUME_KEYS


def finished_rounds(raw: Path) -> int:
    """Rounds the finished processes in ``raw/`` reach: 1 + the highest round of a status file
    (planned and adaptive rounds alike), 0 when none has finished."""
    found = [int(m.group(1)) for p in raw.glob("r*.status.json") if (m := re.match(r"r(\d+)-", p.name))]
    return max(found) + 1 if found else 0


def check_resumable(raw: Path, plan: dict, rounds: int, adaptive: bool = False) -> None:
    """Refuse to reuse ``raw/`` when it was measured with a different plan (builds, cells, configs...),
    when its plan record is damaged, or when ``rounds`` would leave finished rounds out of results.json.
    ``adaptive`` (--target-ci): rounds beyond the planned ones are re-decided, so only the earlier
    planned ``rounds`` (kept in plan.json) must be covered.

    Raises:
        ResultsError: names the keys that differ, the damaged plan.json, or the rounds left out.
    """
    path = raw / "plan.json"
    earlier_rounds = finished_rounds(raw)
    if path.is_file():
        try:
            earlier = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            earlier = None
        if not isinstance(earlier, dict):
            raise ResultsError(
                f"{path} is damaged (not a JSON object): the finished processes in {raw} cannot be "
                "checked against this command's plan",
                f"run with a new --out directory ({raw.parent} stays as it is), or --fresh to discard it",
            )
        differ = [k for k in PLAN_KEYS if earlier.get(k) != plan.get(k)]
        if differ:
            raise ResultsError(
                f"{raw.parent} holds a run measured with different {', '.join(differ)}",
                "pass --fresh to discard it, or a new --out directory",
            )
        if adaptive and isinstance(earlier.get("rounds"), int):
            earlier_rounds = earlier["rounds"]
    elif any(raw.glob("*.status.json")):
        raise ResultsError(
            f"{raw.parent} holds finished processes but no record of their plan",
            "pass --fresh to discard them, or a new --out directory",
        )
    if rounds < earlier_rounds:
        left = f"round {rounds}" if rounds == earlier_rounds - 1 else f"rounds {rounds}..{earlier_rounds - 1}"
        raise ResultsError(
            f"{raw.parent} holds {earlier_rounds} rounds; --rounds {rounds} would leave {left} " "out of results.json",
            f"pass --rounds {earlier_rounds} (or more) to resume, or --fresh / a new --out",
        )
    atomic_write_json(path, {**plan, "rounds": max(rounds, earlier_rounds)})


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def set_aside(path: Path, suffix: str) -> Path:
    """Rename a damaged file to ``<name>.<suffix>-<UTC time>`` beside it (never deleted); returns the new path."""
    kept = path.with_name(f"{path.name}.{suffix}-{_stamp()}")
    n = 1
    while kept.exists():
        kept, n = path.with_name(f"{path.name}.{suffix}-{_stamp()}-{n}"), n + 1
    path.rename(kept)
    return kept


def kept_record(status: Path, retry_failed: bool) -> dict | None:
    """The record of a process finished earlier, or None when it must run (again): no status file, a
    damaged one (:func:`read_status`), or a failed one with ``--retry-failed`` (its status file is
    kept as ``.retried-<UTC time>``)."""
    record = read_status(status) if status.is_file() else None
    if record is not None and retry_failed and record.get("status") == "failed":
        kept = set_aside(status, "retried")
        note(
            f"--retry-failed: running {status.name.removesuffix('.status.json')} again "
            f"({record.get('reason') or 'failed cells'}); the earlier record is kept as {kept.name}"
        )
        return None
    return record


def read_status(status: Path) -> dict | None:
    """A finished process's ``raw/<proc>.status.json``, or None when it is damaged (not JSON, not an
    object, malformed cells: see :func:`harness.results.cells_problem`): that file is set aside as
    ``.damaged-<UTC time>`` (with a note) and the process counts as unfinished, to be run again."""
    try:
        record = json.loads(status.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        found = f"not readable JSON ({exc})"
    else:
        found = res.cells_problem(record.get("cells"), "cells") if isinstance(record, dict) else "not a JSON object"
        if found is None:
            return record
    kept = set_aside(status, "damaged")
    note(f"{status} is damaged ({found}): kept it as {kept.name}; running that process again")
    return None


@contextmanager
def _removed_on_failure(out: Path, created: list[Path]) -> Iterator[None]:
    """A run that fails before measuring leaves no empty --out behind (when it created it)."""
    try:
        yield
    except BaseException:
        if created:
            _remove_if_empty(out, created[-1])
        raise


def _remove_if_empty(out: Path, top: Path) -> None:
    """Remove ``out`` when it holds nothing but this run's traces (``.lock``, the marker, ``raw/plan.json``), then
    its parents up to ``top`` (the highest folder this run created) while they are empty."""
    traces = {Path(".lock"), Path(MARKER), Path("raw"), Path("raw") / "plan.json"}
    try:
        if out.is_dir() and all(p.relative_to(out) in traces for p in out.rglob("*")):
            shutil.rmtree(out)
            for parent in out.parents:
                if not parent.is_relative_to(top) or any(parent.iterdir()):
                    break
                parent.rmdir()
    except OSError:
        pass  # it stays; nothing in it is the user's


@contextmanager
def _claimed(out: Path, command: str) -> Iterator[Path]:
    """``out`` claimed as a run's folder (:func:`harness.outdir.claim`: new, empty, or a run of ours;
    its marker written first), then held (:func:`harness.fsutil.exclusive_lock`)."""
    claim(out, "--out", RESULTS_WRITES, res.is_run)
    with exclusive_lock(out, command) as lock:
        yield lock


# ------------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class RunRequest:
    """What ``compare``/``bench`` were asked, as plain values (:mod:`harness.commands.run` builds it).

    ``inputs``: role -> build (``{"stock": X, "patched": Y}`` or ``{"build": X}``; a wheel path, a
    requirement or ``python:/path``). ``None`` means the default of :func:`plan`; ``worker_env`` holds the
    ``KEY=VALUE`` items of ``--env``; ``target_ci`` None (or 0) turns adaptive rounds off.
    """

    inputs: Mapping[str, str]
    device: str
    out: Path
    configs: str | None = None
    dtypes: tuple[str, ...] | None = None
    cells: tuple[str, ...] | None = None
    quick: bool = False
    rounds: int | None = None
    timeout: float | None = None
    stall_timeout: float | None = None
    duty: float | None = None
    seed: int = 0
    keep_env: tuple[str, ...] = ()
    worker_env: tuple[str, ...] = ()
    threads: int | None = None
    fresh: bool = False
    retry_failed: bool = False
    target_ci: float | None = None
    target_ci_launch_bound: float | None = None
    budget_s: float | None = None
    plant_k: float | None = None
    series: str | None = None
    contrasts: tuple[str, ...] = ()
    tests_source: Path | None = None
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """A validated run: the one owner of the run plan (:meth:`run_json` is ``results.json``'s ``run``).

    Units: seconds (``timeout``, ``stall``, ``budget``); ``target`` / ``launch_target`` are CI
    half-widths as fractions (None: adaptive rounds off). ``timing`` is :data:`TIMING`'s entry.
    """

    kind: str
    builds: Mapping[str, object]
    device: str
    out: Path
    configs: tuple[cfg.EnvConfig, ...]
    cells: tuple[Cell, ...]
    rounds: int
    timeout: float
    stall: float
    seed: int
    timing: Mapping[str, float]
    threads: int
    keep_env: tuple[str, ...]
    extra_env: Mapping[str, str]
    quick: bool = False
    dtypes_given: bool = False
    fresh: bool = False
    retry_failed: bool = False
    target: float | None = None
    launch_target: float | None = None
    budget: float = 0.0
    plant_k: float | None = None
    evidence: ev.Evidence = field(default_factory=ev.Evidence)
    tests_source: Path | None = None
    command: tuple[str, ...] = ()
    extra: Mapping[str, object] = field(default_factory=dict)

    def by_config(self) -> dict[str, cfg.EnvConfig]:
        """config name -> :class:`harness.configs.EnvConfig`."""
        return {c.name: c for c in self.configs}

    def order(self, rounds: range | None = None) -> list[tuple[int, str, str]]:
        """The (round, build, config) processes of ``rounds`` (default the planned ones), each round shuffled."""
        return [
            e for rnd in (rounds or range(self.rounds)) for e in round_order(self.seed, rnd, self.builds, self.configs)
        ]

    def run_json(self) -> dict:
        """``results.json``'s ``run`` (docs/results-schema.md), before ``started``/``order`` are filled in."""
        return {
            "command": list(self.command),
            "kind": self.kind,
            "builds": list(self.builds),
            "device": self.device,
            "quick": self.quick,
            "rounds": self.rounds,
            "seed": self.seed,
            "timeout_s": self.timeout,
            "stall_timeout_s": self.stall,
            "timing": dict(self.timing),
            "threads": self.threads,
            "keep_env": list(self.keep_env),
            "extra_env": dict(self.extra_env),
            "configs": [c.name for c in self.configs],
            "plant_k": self.plant_k,
            "cells": [c.key for c in self.cells],
            "order": self.order(),
            "started": _now(),
            "finished": None,
            **self.extra,
        }


def plan(request: RunRequest) -> Plan:
    """Check ``request`` and fill in its defaults (nothing runs, nothing is written).

    Raises:
        UsageError: an unknown config, dtype or cell; a number that is NaN, infinite or outside its
            :data:`BOUNDS` range (the range is in the message); a ``keep_env`` name that is not
            cleared anyway; a malformed or conflicting ``worker_env`` item.
        BuildInputError: a build input that is neither a wheel, a build folder with its role's wheel, a requirement
            nor ``python:/path`` (:func:`harness.venvs.parse_inputs`).
    """
    builds = parse_inputs(request.inputs, request.series, series_hashes(request.series))
    evidence = ev.for_run(
        series_of_run(request.series, {n: build_manifest(b) for n, b in builds.items()}), list(request.contrasts)
    )
    profiles = evidence.profiles(request.device)
    try:
        configs = cfg.select(request.device, request.configs, profiles, evidence.default_configs(request.device))
    except ValueError as exc:
        raise UsageError(str(exc), "see python -m harness compare --help") from None
    check_contrasts(request.contrasts, list(builds), [c.name for c in configs])
    kind = "quick" if request.quick else "full"
    target = bounded("target_ci", request.target_ci) or None  # 0: adaptive rounds off; bench has no CI to aim at
    rounds = (
        request.rounds
        if request.rounds is not None
        else (ROUNDS if request.quick or target is not None else ROUNDS_FIXED)
    )
    rounds = bounded("rounds", rounds)
    timeout = bounded(
        "timeout", request.timeout if request.timeout is not None else (300.0 if request.quick else 900.0)
    )
    stall = bounded(
        "stall_timeout", request.stall_timeout if request.stall_timeout is not None else STALL_TIMEOUT[kind]
    )
    bounded("target_ci_launch_bound", request.target_ci_launch_bound)
    bounded("plant_k", request.plant_k)
    budget = bounded("budget_s", BUDGET_S[kind] if request.budget_s is None else request.budget_s)
    timing = dict(TIMING[kind]["cpu" if request.device == "cpu" else "gpu"])
    if bounded("duty", request.duty) is not None and request.device != "cpu":  # doctor's duty row picks it per device
        timing["duty"] = request.duty
    bounded("threads", request.threads)
    bounded("seed", request.seed)
    check_keep_env(request.keep_env)
    return Plan(
        kind="compare" if "stock" in builds else "bench",
        builds=builds,
        device=request.device,
        out=request.out,
        configs=tuple(configs),
        cells=tuple(plan_cells(request.dtypes, request.cells, request.quick, request.device)),
        rounds=rounds,
        timeout=timeout,
        stall=stall,
        seed=request.seed,
        timing=timing,
        threads=request.threads if request.threads is not None else (1 if request.device == "cpu" else 0),
        keep_env=tuple(request.keep_env),
        extra_env=parse_extra_env(list(request.worker_env), request.device, configs, profiles),
        quick=request.quick,
        dtypes_given=request.dtypes is not None,
        fresh=request.fresh,
        retry_failed=request.retry_failed,
        target=target,
        launch_target=request.target_ci_launch_bound,
        budget=budget,
        plant_k=request.plant_k,
        evidence=evidence,
        tests_source=request.tests_source,
        command=tuple(request.command),
    )


def series_hashes(series: str | None) -> set[str] | None:
    """The series hashes of ``--series`` at each of its bases (:meth:`harness.series.Series.hash_of`): a patched
    wheel ``compare`` takes from a build folder is of one of them (:func:`harness.venvs.wheel_in`); None without.

    Raises:
        SeriesError: ``series`` names no loadable series.
    """
    if not series:
        return None
    from harness.series import load_series  # series.toml loading has one owner

    loaded = load_series(series)
    return {loaded.hash_of(base) for base in loaded.bases}


def series_of_run(series: str | None, manifests: Mapping[str, Mapping | None]):
    """The patch series whose ``[evidence]`` drives a run: ``--series NAME``, else the one series the
    builds' manifests name when it is found under ``patches/`` (a wheel built elsewhere may name a
    series this checkout lacks: then None), else None.

    Raises:
        SeriesError: ``series`` names no loadable series.
    """
    named = {
        m["series"]["name"]
        for m in manifests.values()
        if m and isinstance(m.get("series"), dict) and m["series"].get("name")
    }
    if not series and len(named) != 1:
        return None  # (series.py needs GitPython, which a measuring machine need not have)
    from harness.series import load_series  # series.toml loading has one owner

    if series:
        return load_series(series)
    try:
        return load_series(next(iter(named)))
    except HarnessError:
        return None


def check_contrasts(texts: Sequence[str], builds: list[str], configs: list[str]) -> None:
    """Refuse a ``--contrast`` whose side is not a (build, config) of this run or whose selection names
    an op the harness does not know (a series' own contrasts may name configs of other devices: those
    are reported as not measured instead).

    Raises:
        UsageError: names the contrast and the part that is not in the run.
    """
    from harness.bench.ops import REGISTRY

    for text in texts:
        contrast = ev.parse_contrast(text)
        for side in (contrast.a, contrast.b):
            if side.build not in builds or side.config not in configs:
                raise UsageError(
                    f"--contrast {text!r}: {side.label} is not a build/config of this run",
                    f"builds: {', '.join(builds)}; configs: {', '.join(configs)} (see --configs)",
                )
        unknown = [op for op in contrast.ops if op not in REGISTRY]
        if unknown:
            raise UsageError(
                f"--contrast {text!r}: unknown op {', '.join(unknown)}", f"choose from {', '.join(REGISTRY)}"
            )


def check_keep_env(keep: Sequence[str]) -> None:
    """Refuse ``--keep-env`` names that reach the workers anyway (:data:`harness.configs.INHERITED`), that
    are not variable names, or that the harness sets itself (:func:`harness.configs.env_name_problem`:
    a kept ``PYTHONPATH`` was reported kept while the workers got the harness's own).

    Raises:
        UsageError: names the variables.
    """
    passed_anyway = [n for n in keep if n in cfg.INHERITED or n.startswith(cfg.INHERITED_PREFIXES)]
    if passed_anyway:
        raise UsageError(
            f"--keep-env {', '.join(passed_anyway)}: every worker inherits it anyway (only "
            "variables outside harness.configs.INHERITED are cleared)",
            "drop it from --keep-env",
        )
    for name in keep:  # the --env rule: a name, and not one the harness sets itself (PYTHONPATH)
        problem = cfg.env_name_problem(name)
        if problem:
            raise UsageError(
                f"--keep-env {name}: {problem}",
                "name variables the harness does not set itself, e.g. --keep-env NVIDIA_TF32_OVERRIDE",
            )


# ------------------------------------------------------------------------------- the out folder
def open_out(plan: Plan) -> Path:
    """Make ``plan.out/raw`` ready: no symbolic link, orphans of a killed run reaped, ``--fresh``
    honoured (:func:`harness.outdir.clear`: what the marker lists), a damaged results.json set aside.
    Returns the raw folder (not created yet). ``plan.out`` was claimed (:func:`_claimed`).

    Raises:
        ResultsError: ``raw`` is a symbolic link; ``--fresh`` cannot remove it; results.json is of another schema.
    """
    out = plan.out
    raw = out / "raw"
    if raw.is_symlink():
        raise ResultsError(
            f"{raw} is a symbolic link (to {os.readlink(raw)}): results are kept only inside --out",
            f"replace it with a folder (move its target's files into {raw}), or use a new --out",
        )
    raw = inside(out, "raw", "--out folder")
    reap_orphans(raw)
    if plan.fresh:
        clear(out, RESULTS_WRITES)  # only what the folder's marker lists and a run writes (harness.outdir)
    elif (out / res.RESULTS).exists():
        try:
            res.load(out)  # refuse to resume from (and overwrite) a results.json of another schema version
        except res.DamagedResults as exc:
            kept = set_aside(out / res.RESULTS, "damaged")
            note(f"{exc.cause}: kept it as {kept.name}; rebuilding {res.RESULTS} from raw/")
    return raw


def probe_builds(plan: Plan) -> dict[str, dict]:
    """Each build's interpreter (made when needed), its provenance probe and its build manifest.
    Builds with one interpreter (an A/A run of one ``python:`` path or one requirement) share one
    probe (its facts are the interpreter's; ``collect_env`` alone takes seconds): each gets a copy.

    Raises:
        HarnessError: a build without torch, or an unusable device.
        UsageError: a dtype named in ``--dtypes`` that the device lacks for some op.
    """
    build_info, probed = {}, {}
    markers = tuple(cfg.variables(plan.device, plan.evidence.profiles(plan.device))) + plan.evidence.markers
    for name, build in plan.builds.items():
        python, reused = ensure_interpreter(build)
        note(f"build {name}: {'reusing' if reused else 'created'} {python}")
        if str(python) not in probed:
            probed[str(python)] = probe_build(name, python, plan.device, plan.keep_env, markers, with_collect_env=True)
            if plan.extra_env:
                check_starts(name, python, plan.keep_env, dict(plan.extra_env))
        info = copy.deepcopy(probed[str(python)])  # each build's record is its own
        build_info[name] = {"input": build.to_json(), "interpreter": str(python), "provenance": info}
        manifest = build_manifest(build)
        if manifest:
            build_info[name]["build"] = manifest
    mismatch = macos.metal_mismatch(*((build_info.get(k) or {}).get("build") for k in ("stock", "patched")))
    if mismatch:  # one line before any measurement: the A/B would compare shader toolchains
        raise UsageError(mismatch, macos.METAL_PAIR_REMEDY)
    if plan.evidence.bases:  # which base each build is on sets its routes and the routed kernels' accumulators
        for name, told in plan.evidence.base_of(build_info).items():
            build_info[name]["base"] = {**told, "accumulators": plan.evidence.accumulators(told["ref"])}
            routes = plan.evidence.routes_of(plan.device, told["ref"], told.get("patched"))
            if routes is not None:  # exact for this build; absent: the configs' series-wide routes
                build_info[name]["base"]["routes"] = routes
    support = next(iter(build_info.values()))["provenance"]["dtype_support"]
    if plan.dtypes_given:
        lacking = sorted({(c.dtype, c.op) for c in plan.cells if unsupported_reason(support, c.dtype, c.op)})
        if lacking:
            dt = lacking[0][0]
            ops = ", ".join(op for d, op in lacking if d == dt)
            ok = [d for d, per_op in support.items() if not any(per_op.values())]
            raise UsageError(
                f"{dt} is not supported on {plan.device} for {ops}: "
                f"{unsupported_reason(support, dt, lacking[0][1])}",
                f"drop it from --dtypes (fully supported here: {', '.join(ok)}) " "or pick --cells without those ops",
            )
    return build_info


# ------------------------------------------------------------------------------------- record
class Recorder:
    """Runs (or keeps) one worker process at a time and records it in the results document, saved
    after each; counts failed cells."""

    def __init__(self, plan: Plan, data: dict, raw: Path) -> None:
        self.plan, self.data, self.raw = plan, data, raw
        self.by_config = plan.by_config()
        self.failed = 0
        self.saved = False  # results.json written by this run (a Ctrl-C re-renders the report from it)

    def spec(self, rnd: int, build: str, config: str, keys: list[str], name: str, measure: dict | None = None) -> dict:
        """The worker's spec (harness.bench.worker) of one process; ``measure``: cell key -> seconds of
        timed blocks (adaptive rounds), else the plan's timing."""
        plan, env_config = self.plan, self.by_config[config]
        save = rnd == 0 and config in (plan.evidence.consistency_pair(plan.device) or ())
        return {
            "device": plan.device,
            "cells": keys,
            "check": rnd == 0,
            "save_outputs": str(self.raw / f"{name}.outputs.pt") if save else None,
            "reduced_fp32": env_config.reduced_fp32,
            "routes": dict(build_routes(self.data["builds"][build], env_config)),
            "accumulators": dict(self.data["builds"][build].get("base", {}).get("accumulators", {})),
            "seed": plan.seed,
            "timing": dict(plan.timing),
            "threads": plan.threads,
            "dtype_support": self.data["builds"][build]["provenance"]["dtype_support"],
            "record_env": sorted(plan.extra_env),
            **({"measure_s": measure} if measure else {}),
            **({"plant_k": plan.plant_k} if plan.plant_k and build == "patched" else {}),
            **({"observe": "inline"} if rnd == 0 and not kernels.TRACES[plan.device].own_process else {}),
        }

    def observe(self, build: str, config: str, keys: list[str]) -> None:
        """Record the kernels each cell runs under (build, config) in ``data["kernels"]``
        (:mod:`harness.bench.kernels`). Where the device's trace would slow a timed process
        (:attr:`harness.bench.kernels.Trace.own_process`), a short probe process ``probe-<build>-<config>``
        of the config's variables plus the trace's runs first (kept when finished earlier); a cell it
        could not observe is recorded with the reason as ``error``."""
        trace = kernels.TRACES[self.plan.device]
        if not trace.own_process:
            return
        name = f"probe-{build}-{config.replace('+', '_')}"
        record = kept_record(_status_path(self.raw, name), self.plan.retry_failed)
        if record is None:
            spec = {**self.spec(1, build, config, keys, name), "observe": "only", "check": False}
            extra = {**self.plan.extra_env, **trace.env}
            python = Path(self.data["builds"][build]["interpreter"])
            record = run_worker(
                python, spec, self.by_config[config], self.raw, name, self.plan.timeout, self.plan.keep_env, extra
            )
        seen = dict(record.get("kernels") or {})
        note(f"{name}: kernels of {len(seen)} of {len(keys)} cells observed ({trace.source})")
        for key in keys:
            if key not in seen:
                why = record["cells"].get(key, {}).get("reason") or record.get("reason") or "probe ended early"
                seen[key] = {"names": [], "path": None, "route": None, "trace": trace.source, "error": why}
        self._keep_kernels(build, config, seen)

    def _keep_kernels(self, build: str, config: str, seen: dict) -> None:
        self.data.setdefault("kernels", {}).setdefault(build, {}).setdefault(config, {}).update(seen)

    def process(self, rnd: int, build: str, config: str, keys: list[str], measure: dict | None = None) -> None:
        """Run (or keep, when finished earlier) one worker process and record it."""
        name = _proc_name(rnd, build, config)
        record = kept_record(_status_path(self.raw, name), self.plan.retry_failed)
        verb = "kept"
        if rnd == 0:
            self.observe(build, config, keys)
        if record is None:
            python = Path(self.data["builds"][build]["interpreter"])
            spec = self.spec(rnd, build, config, keys, name, measure)
            record = run_worker(
                python,
                spec,
                self.by_config[config],
                self.raw,
                name,
                self.plan.timeout,
                self.plan.keep_env,
                dict(self.plan.extra_env),
                self.plan.stall,
            )
            verb = "ran"
        processes = self.data["processes"]
        if record.get("kernels"):  # observed inline (first round): kept once, in data["kernels"]
            self._keep_kernels(build, config, record["kernels"])
        record.pop("kernels", None)
        record.update({"name": name, "round": rnd, "build": build, "config": config, "slot": len(processes)})
        processes.append(record)
        bad = [k for k, v in record["cells"].items() if v["status"] == "failed"]
        self.failed += len(bad)
        note(
            f"[{len(processes)}/{len(self.data['run']['order'])}] {verb} {name}: "
            f"{len(record['cells']) - len(bad)} cells ok"
            + (f", {len(bad)} failed ({record.get('reason') or record['cells'][bad[0]].get('reason')})" if bad else "")
        )
        res.save(self.plan.out, self.data)
        self.saved = True


# ----------------------------------------------------------------------------------- schedule
def schedule(plan: Plan, data: dict, run_process, bar=None) -> None:
    """Run the planned rounds in their interleaved order, then (``plan.target``) adaptive rounds:
    fresh processes measuring only the cells not converged yet (:func:`next_adaptive_cells`) for the
    time :func:`adaptive_plan` gives each, while a round's estimated time (:func:`round_seconds`) fits
    the rest of ``plan.budget`` (counted from the first planned process) and fewer than
    :data:`MAX_ROUNDS` rounds ran. Records ``data["run"]["adaptive"]``.

    ``run_process(rnd, build, config, keys, measure)`` runs one process (``measure``: cell key ->
    seconds of timed blocks, or None for the plan's timing) and appends its record to
    ``data["processes"]``; ``bar`` (optional) is advanced by cells measured.
    """
    deadline = time.monotonic() + plan.budget  # the planned rounds count against the budget too
    all_keys = [c.key for c in plan.cells]
    for rnd, build, config in data["run"]["order"]:
        run_process(rnd, build, config, all_keys, None)
        if bar is not None:
            bar.advance(len(all_keys))
    if plan.target is None:
        return
    measure: dict[str, dict[str, float]] = {}

    def cost(extra: list[tuple[int, str, str]], need: dict[str, list[str]]) -> float:
        measure.clear()
        measure.update(adaptive_plan(data, need, plan.timing["measure_s"]))
        return round_seconds(data["processes"], [list(measure[e[2]].values()) for e in extra])

    def announce(rnd: int, extra: list[tuple[int, str, str]], need: dict[str, list[str]]) -> None:
        data["run"]["order"] += extra
        if bar is not None:
            bar.update(total=(bar.total or 0) + sum(len(need[e[2]]) for e in extra))
        note(f"adaptive round {rnd}: {sum(map(len, need.values()))} cells above ±{plan.target:.1%}")

    def run_and_advance(rnd: int, build: str, config: str, keys: list[str]) -> None:
        run_process(rnd, build, config, keys, measure[config])
        if bar is not None:
            bar.advance(len(keys))

    added = adaptive_rounds(
        plan.seed,
        list(plan.builds),
        plan.configs,
        plan.rounds,
        run_and_advance,
        lambda: next_adaptive_cells(data, plan.target, plan.launch_target),
        cost,
        deadline,
        announce,
    )
    need = unconverged_cells(data, plan.target, plan.launch_target)
    data["run"]["adaptive"] = {
        "target": plan.target,
        "launch_bound_target": plan.launch_target,
        "budget_s": plan.budget,
        "rounds_added": added,
        "unconverged": {c: keys for c, keys in need.items()},
        "stopped": stop_reason(plan, data, added, deadline, cost),
    }


def stop_reason(plan: Plan, data: dict, added: int, deadline: float, cost) -> dict:
    """Why the adaptive rounds stopped, for the report: ``{"why": "converged"}``, ``{"why": "max_rounds"}``
    (:data:`MAX_ROUNDS`), or ``{"why": "budget", "next_round_s": ..., "left_s": ...}`` (the next round's
    estimated seconds did not fit the seconds left of ``--budget-s``)."""
    todo = next_adaptive_cells(data, plan.target, plan.launch_target)
    if not todo:
        return {"why": "converged"}
    rnd = plan.rounds + added
    if rnd >= MAX_ROUNDS:
        return {"why": "max_rounds"}
    extra = [e for e in round_order(plan.seed, rnd, list(plan.builds), plan.configs) if e[2] in todo]
    return {
        "why": "budget",
        "next_round_s": round(cost(extra, todo), 1),
        "left_s": round(max(0.0, deadline - time.monotonic()), 1),
    }


def adaptive_rounds(
    seed: int,
    builds: Sequence[str],
    configs: Sequence[cfg.EnvConfig],
    first: int,
    run_process,
    need,
    cost,
    deadline: float,
    on_round=None,
) -> int:
    """Adaptive sampling: rounds ``first``, ``first + 1``, ... of fresh processes in each round's seeded
    order (:func:`round_order`), each round only for the configs and cells ``need()`` still names
    (``{config: [cell keys]}``; empty: done), while the round's estimated seconds ``cost(extra, need)``
    end before ``deadline`` (``time.monotonic()`` seconds) and fewer than :data:`MAX_ROUNDS` rounds ran.
    ``on_round(rnd, extra, need)`` is told of each round before it runs. Returns the number of rounds added."""
    rnd = first
    todo = need()
    while todo and rnd < MAX_ROUNDS:
        extra = [e for e in round_order(seed, rnd, builds, configs) if e[2] in todo]
        if time.monotonic() + cost(extra, todo) > deadline:  # a round that would overrun the budget is not started
            break
        if on_round is not None:
            on_round(rnd, extra, todo)
        for r, build, config in extra:
            run_process(r, build, config, todo[config])
        rnd += 1
        todo = need()
    return rnd - first


# -------------------------------------------------------------------------------------- execute
def execute(request: RunRequest) -> int:
    """Run a compare (two builds) or bench (one build): plan -> schedule -> record; write results.json
    and report.md. Returns 0, or 1 when cells failed or the config consistency check failed or could
    not run (the reasons are in the report).

    Raises:
        UsageError, ResultsError, HarnessError: see :func:`plan`, :func:`open_out`, :func:`probe_builds`,
            :func:`check_resumable`.
    """
    from harness import report

    run = plan(request)
    out = run.out
    created = [d for d in (out, *out.parents) if not d.exists()]  # out and the parents this run makes
    with _removed_on_failure(out, created), _claimed(out, " ".join(request.command or sys.argv)):
        raw = open_out(run)
        data = res.new_document(run.run_json(), probe_builds(run), {c.name: c.to_json() for c in run.configs})
        data["evidence"] = run.evidence.to_json()
        raw.mkdir(parents=True, exist_ok=True)
        check_resumable(raw, res.resume_plan(data), run.rounds, adaptive=run.target is not None)
        recorder = Recorder(run, data, raw)
        try:
            with task(f"{run.kind} on {run.device}: cells", total=len(data["run"]["order"]) * len(run.cells)) as bar:
                schedule(run, data, recorder.process, bar)
        except KeyboardInterrupt:
            if recorder.saved:
                report.write(out, res.load(out))  # report.md says the run is incomplete
            raise
        data["consistency"] = run_consistency(data["builds"], run.device, recorder.by_config, raw, run.evidence)
        data["series_tests"] = run_series_tests(run.evidence, data["builds"], run.tests_source, run.keep_env, raw)
        failed, inconsistent = recorder.failed, consistency_failures(data["consistency"])
        data["run"]["finished"] = _now()
        res.save(out, data)
        written = report.write(out, res.load(out))  # exactly what `report` re-renders
        note(f"wrote {out / res.RESULTS}, " + ", ".join(p.name for p in written))
    if failed:
        note(f"{failed} cell measurements failed; see report.md")
    if inconsistent:
        note(f"config consistency: {inconsistent} GEMM output(s) disagree or a check could not run; see report.md")
    return 1 if failed or inconsistent else 0


def consistency_failures(consistency: dict) -> int:
    """Cells whose outputs disagree between two configs of a build, plus builds whose check broke."""
    builds = consistency["builds"]
    return sum(status_of(v) == FAILED for r in builds.values() for v in r.get("cells", {}).values()) + sum(
        "error" in r for r in builds.values()
    )
