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

import argparse
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
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import harness
from harness import configs as cfg
from harness import results as res
from harness.bench.timer import steady_start
from harness.bench.workloads import DTYPES, ITEMSIZE, Cell, default_cells
from harness import evidence as ev
from harness.errors import HarnessError, ResultsError, UsageError
from harness.fsutil import atomic_write_json, exclusive_lock, inside
from harness.progress import note, task
from harness.provenance import unsupported_reason
from harness.venvs import ensure_interpreter, parse_input

SOURCE_ROOT = str(Path(harness.__file__).resolve().parent.parent)

#: Per-process timing. Short: precision comes from the number of fresh processes, not from long
#: measurement inside few (the spread between processes is larger than inside one:
#: docs/methodology.md), so each process measures each cell briefly and adaptive rounds add
#: processes only for the cells whose CI is still wide. min_block_s: a GPU block of >= 10 ms makes
#: the synchronize before and after it < 0.1 % (docs/timing.md).
#: min_samples: blocks per cell at least; 5 on cpu (3 with --quick), where one half-precision GEMM
#: call can take 0.2 s and block-to-block noise is small next to the spread between processes, so
#: the time buys more processes instead.
TIMING = {
    "full": {"cpu": {"warmup_s": 0.05, "measure_s": 0.2, "min_block_s": 2e-3, "min_samples": 5},
             "gpu": {"warmup_s": 0.03, "measure_s": 0.1, "min_block_s": 1e-2}},
    "quick": {"cpu": {"warmup_s": 0.02, "measure_s": 0.1, "min_block_s": 1e-3, "min_samples": 3},
              "gpu": {"warmup_s": 0.02, "measure_s": 0.1, "min_block_s": 5e-3}},
}
#: --target-ci defaults: CI half-width a cell is measured to (kernel-bound / launch-bound cells).
#: Launch-bound cells (host latency; 37 % process-to-process spread on an H200 for GEMM 512³,
#: docs/methodology.md) get a lower target so they never hold the whole run hostage.
TARGET_CI = 0.01
TARGET_CI_LAUNCH_BOUND = 0.05
#: --budget-s defaults: wall seconds of worker processes in all (planned rounds included); an
#: adaptive round that would overrun it is not started. 540 s keeps the default cuda matrix under
#: 10 minutes on an H200 with probes, consistency and report (docs/methodology.md); 360 s keeps the
#: README's --quick cpu command under 10 minutes on 2 cores with the venvs created.
BUDGET_S = {"full": 540.0, "quick": 360.0}
#: planned rounds (fresh processes per build and config) before adaptive ones: the floor at which
#: the exact test can give a verdict (harness.stats.min_processes)
ROUNDS = 4


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", required=True, choices=cfg.DEVICES, help="device to measure on")
    parser.add_argument("--configs", help="comma-separated env configs (default: the device's profile list)")
    parser.add_argument("--dtypes", help=f"comma-separated dtypes (default: {','.join(DTYPES)}; also {', '.join(d for d in ITEMSIZE if d not in DTYPES)})")
    parser.add_argument("--cells", help="comma-separated cell keys op/MxNxK/dtype (default: the built-in set)")
    parser.add_argument("--quick", action="store_true", help="reduced cell set and shorter timing (minutes on a 2-core CPU)")
    parser.add_argument("--rounds", type=int, help=f"planned fresh processes per (build, config) before adaptive rounds (default {ROUNDS}; "
                        "6 without adaptive rounds, --quick 4; >= 4 for a verdict)")
    parser.add_argument("--timeout", type=float, help="seconds one worker process may take (default 900, --quick 300)")
    parser.add_argument("--stall-timeout", type=float,
                        help=f"seconds a worker may go without finishing a cell before it is stopped and the cell it "
                             f"stalled in is named (default {STALL_TIMEOUT['full']:g}, --quick {STALL_TIMEOUT['quick']:g})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs and of the per-round order")
    parser.add_argument("--keep-env", default="", metavar="NAMES",
                        help="comma-separated PYTORCH_MPS_/TORCH_/ATEN_ variables to pass through to workers "
                             "(all others are cleared; kept ones are recorded in results.json)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="set this variable in every worker of every env config (repeatable; e.g. OMP_NUM_THREADS=4); "
                             "recorded in results.json; a variable an env config of the device sets is refused")
    parser.add_argument("--threads", type=int,
                        help="torch intra-op threads in workers (default: 1 on cpu, where OpenMP threads that share "
                             "cores with other processes add ms of spin-wait noise; torch's own default elsewhere; 0 = torch's default)")
    parser.add_argument("--series", help="patch series whose series.toml [evidence] drives the run (configs, markers, "
                                          "routing, contrasts, tests; default: the series named by the wheels' manifests)")
    parser.add_argument("--contrast", action="append", default=[], metavar="'A vs B : OPS : CLAIM'",
                        help="a contrast to judge, e.g. 'stock/tf32_override vs stock/default : mm/float32 : faster' "
                             "(A, B: BUILD/CONFIG; OPS: op or op/dtype items, empty = all; CLAIM: "
                             f"{'|'.join(ev.CLAIMS)}; repeatable; adds to the series' contrasts)")
    parser.add_argument("--tests-source", type=Path, metavar="DIR",
                        help="source tree whose test files the series' [[evidence.test]] name (the patched worktree, "
                             "e.g. work/<base>/patched); run with each build's interpreter")
    parser.add_argument("--out", type=Path, required=True, help="results directory (resumed if it holds a run)")
    parser.add_argument("--fresh", action="store_true", help="discard earlier results in --out and start over")
    parser.add_argument("--retry-failed", action="store_true",
                        help="run again the finished processes that failed (crashed, killed, timed out); their "
                             "earlier status files are kept as .retried-<UTC time>")


def add_arguments_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stock", required=True, help="stock build: wheel path, requirement (torch==2.13.0) or python:/path")
    parser.add_argument("--patched", required=True, help="patched build: wheel path, requirement or python:/path")
    _common_arguments(parser)
    parser.add_argument("--target-ci", type=float, default=TARGET_CI, metavar="FRACTION",
                        help="adaptive sampling: after the planned rounds, add rounds of fresh processes (measuring only "
                             "the cells not yet there) until every cell's CI half-width is below FRACTION "
                             f"(default {TARGET_CI:g}; 0 turns adaptive rounds off)")
    parser.add_argument("--target-ci-launch-bound", type=float, default=TARGET_CI_LAUNCH_BOUND, metavar="FRACTION",
                        help=f"the target for launch-bound cells, whose time is host latency (default {TARGET_CI_LAUNCH_BOUND:g})")
    parser.add_argument("--budget-s", type=float,
                        help=f"wall seconds the worker processes may take in all, planned rounds included: an "
                             f"adaptive round that would overrun it is not started (default {BUDGET_S['full']:g}, "
                             f"--quick {BUDGET_S['quick']:g}); cells left wider are reported")
    parser.add_argument("--plant-k", type=float, metavar="FRACTION",
                        help="calibration: the patched side runs every GEMM with K grown by at least FRACTION "
                             "(e.g. 0.05), a known extra cost; kernel-bound GEMM cells must then come out slower "
                             "(docs/methodology.md)")


def add_arguments_bench(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--build", required=True, help="the build: wheel path, requirement or python:/path")
    _common_arguments(parser)


def run_compare(args: argparse.Namespace) -> int:
    return execute(args, {"stock": args.stock, "patched": args.patched})


def run_bench(args: argparse.Namespace) -> int:
    return execute(args, {"build": args.build})


def plan_cells(args: argparse.Namespace) -> list[Cell]:
    """The cells of this run from --cells / --dtypes / --quick.

    Raises:
        UsageError: an unknown dtype or a malformed cell key.
    """
    dtypes = DTYPES
    if args.dtypes:
        dtypes = tuple(d.strip() for d in args.dtypes.split(",") if d.strip())
        unknown = [d for d in dtypes if d not in ITEMSIZE]
        if unknown or not dtypes:
            raise UsageError(f"unknown dtype {', '.join(unknown) or '(empty)'}", f"choose from {', '.join(ITEMSIZE)}")
    if args.cells:
        cells = []
        for key in args.cells.split(","):
            try:
                cells.append(Cell.from_key(key.strip()))
            except (ValueError, TypeError) as exc:
                raise UsageError(f"bad cell {key.strip()!r}: {exc}", cell_example(key.strip())) from None
        return cells
    return default_cells(dtypes, quick=args.quick)


def cell_example(key: str) -> str:
    """How to write a cell key, for the op that ``key`` names (GEMM layout when the op is unknown)."""
    op = key.split("/")[0]
    if op.startswith("sdpa"):
        return f"write {op} cells as {op}/BxHxLxD/dtype (batch, heads, sequence length, head dim), e.g. {op}/1x8x512x64/float16"
    if op == "bmm":
        return "write bmm cells as bmm/BxMxNxK/dtype, e.g. bmm/8x512x512x512/float16"
    return "write cells as op/MxNxK/dtype, e.g. mm/512x512x512/float16 (SDPA: sdpa/BxHxLxD/dtype, e.g. sdpa/1x8x512x64/float16)"


#: variables --env may not set: the harness sets them for its own workers
RESERVED_ENV = ("PYTHONPATH",)


def parse_extra_env(items: list[str], device: str, configs: list[cfg.EnvConfig],
                    profiles: tuple[cfg.EnvConfig, ...] | None = None) -> dict[str, str]:
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
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise UsageError(f"malformed --env {item!r}: {key!r} is not an environment variable name",
                             "KEY takes letters, digits and _, and does not start with a digit")
        if key in extra:
            raise UsageError(f"--env {key} is given twice ({extra[key]!r} and {value!r})", "give each variable once")
        if key in RESERVED_ENV:
            raise UsageError(f"--env {key}: the harness sets {key} for its workers", f"drop {key} from --env")
        if key in owned:
            setters = [c.name for c in configs if key in c.env] or [c.name for c in profiles if key in c.env]
            raise UsageError(f"--env {key} conflicts with the {device} env configs, which set it themselves "
                             f"({', '.join(setters)})",
                             f"drop {key} from --env and choose the configs that set it with --configs")
        extra[key] = value
    return extra


def probe_build(name: str, python: Path, device: str, keep: tuple[str, ...] = (), names: tuple[str, ...] = (),
                with_collect_env: bool = False) -> dict:
    """Run :mod:`harness.provenance` in ``python``; raise when the device cannot produce evidence.
    ``keep``: inherited variables passed through (--keep-env), as in the workers; ``names``: variables
    and series markers looked for in the build's libraries (default: the device's generic variables);
    ``with_collect_env``: add ``python -m torch.utils.collect_env`` (a few seconds).

    Raises:
        HarnessError: the interpreter has no torch, or the device is missing/unhealthy in this build.
    """
    names = sorted(set(cfg.variables(device)) | set(names))
    env = cfg.worker_environment(cfg.EnvConfig("probe"), keep=keep)
    env["PYTHONPATH"] = SOURCE_ROOT
    proc = subprocess.run([str(python), "-m", "harness.provenance", "--device", device, "--vars", ",".join(names),
                           *(["--collect-env"] if with_collect_env else [])],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise HarnessError(f"build {name} ({python}) cannot run the probe: {last}",
                           "make sure that interpreter has torch installed (python -c 'import torch')")
    info = json.loads(proc.stdout)
    if info.get("device_error"):
        raise HarnessError(f"device {device} is not usable in build {name} (torch {info['torch_version']}): {info['device_error']}",
                           "refusing to produce evidence for it; choose another --device (cpu always works)")
    return info


def _proc_name(rnd: int, build: str, config: str) -> str:
    return f"r{rnd:02d}-{build}-{config.replace('+', '_')}"


def _status_path(raw: Path, name: str) -> Path:
    return raw / f"{name}.status.json"


def read_worker_records(path: Path) -> tuple[dict, dict, bool]:
    """Parse a worker's jsonl: (start record, {cell key: record}, saw the end record)."""
    start, cells, ended = {}, {}, False
    for rec in read_jsonl(path):
        if rec.get("type") == "start":
            start = rec
        elif rec.get("type") == "cell":
            cells[rec["key"]] = {k: v for k, v in rec.items() if k not in ("type", "key")}
        elif rec.get("type") == "end":
            ended = True
    return start, cells, ended


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


def reap_orphans(raw: Path) -> list[int]:
    """Kill the process groups of workers that a killed driver left running (``raw/*.worker.json`` of a
    live worker without a status file), so they cannot overlap this run's timings; returns their pids."""
    killed = []
    for path in sorted(raw.glob("*.worker.json")) if raw.is_dir() else []:
        try:
            pid = int(json.loads(path.read_text())["pid"])
            os.killpg(pid, 0)
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True).stdout
        if "harness.bench.worker" in cmdline and str(raw) in cmdline:
            os.killpg(pid, signal.SIGKILL)
            killed.append(pid)
            note(f"killed worker {pid} ({path.name.removesuffix('.worker.json')}), left running by an interrupted run")
        path.unlink(missing_ok=True)
    return killed


def run_worker(python: Path, spec: dict, config: cfg.EnvConfig, raw: Path, name: str, timeout: float,
               keep: tuple[str, ...] = (), extra: dict[str, str] | None = None, stall: float | None = None) -> dict:
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
    with open(err_path, "w") as err:
        # its own process group (a terminal's Ctrl-C reaches the driver only), killed with the driver
        proc = subprocess.Popen([str(python), "-m", "harness.bench.worker", str(spec_path), str(out_path)],
                                env=env, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
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
    start, cells, ended = read_worker_records(out_path)
    unfinished = [key for key in spec["cells"] if key not in cells]
    where = last_step(out_path) if stalled else None
    if where:
        reason = f"{reason} (stalled in cell {where[0]}, step {where[1]})"
    elif unfinished and reason:
        reason = f"{reason} while measuring {unfinished[0]}"  # a worker runs its cells in order
    for key in unfinished:
        cells[key] = {"status": "failed", "reason": (reason if key == unfinished[0] else f"not measured: {reason}")
                      if reason else "worker ended without measuring this cell"}
    record = {"status": "ok" if (ended and not reason) else "failed", "reason": reason, "returncode": returncode,
              "pid": start.get("pid"), "env": start.get("env", {}), "started": started,
              "worker_started": start.get("started"), "finished": time.time(), "cells": cells}
    atomic_write_json(_status_path(raw, name), record)
    return record


def run_consistency(build_info: dict, device: str, configs: dict[str, cfg.EnvConfig], raw: Path,
                    evidence: ev.Evidence | None = None) -> dict:
    """Compare the first-round GEMM outputs of the run's config pair in each build
    (:mod:`harness.checks.consistency`; the pair: :meth:`harness.evidence.Evidence.consistency_pair`);
    results are kept in ``raw/consistency-<build>.json``."""
    evidence = evidence or ev.Evidence()
    pair = evidence.consistency_pair(device)
    elsewhere = [f"{d}: {p[0]} vs {p[1]}" for d, t in evidence.device.items() if d != device
                 and (p := t.get("consistency"))]
    other_note = (f"the series' consistency check on another device ({'; '.join(elsewhere)}) is skipped: this run is "
                  f"on {device}") if elsewhere else None
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
            result["builds"][build] = json.loads(kept.read_text())
            continue
        files = [raw / f"{_proc_name(0, build, c)}.outputs.pt" for c in pair]
        if not all(f.is_file() for f in files):
            result["builds"][build] = {"error": "the first-round workers did not save their outputs (crashed or failed)"}
            continue
        env = cfg.worker_environment(cfg.EnvConfig("consistency"))
        env["PYTHONPATH"] = SOURCE_ROOT
        described = [json.dumps(configs[c].to_json()) for c in pair]
        proc = subprocess.run([info["interpreter"], "-m", "harness.checks.consistency", *map(str, files), *described],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
            result["builds"][build] = {"error": f"consistency check failed to run: {tail}"}
            continue
        result["builds"][build] = {"cells": json.loads(proc.stdout)}
        atomic_write_json(kept, result["builds"][build])
        for f in files:
            f.unlink()  # the numbers are kept; the tensors are large
    return result


def run_series_tests(evidence: ev.Evidence, build_info: dict, args: argparse.Namespace, keep: tuple[str, ...],
                     raw: Path) -> dict:
    """The series' ``[[evidence.test]]`` selections on every build (:mod:`harness.seriestests`); {} when none."""
    if not evidence.tests:
        return {}
    from harness import seriestests

    source = getattr(args, "tests_source", None)
    note(f"series tests: {len(evidence.tests)} selection(s) x {len(build_info)} build(s)"
         + (f" from {source}" if source else " (no --tests-source: not run)"))
    result = seriestests.run_all(evidence.tests, {b: i["interpreter"] for b, i in build_info.items()},
                                 source.resolve() if source else None, raw / "tests", keep)
    for test in result.get("tests", []):
        for build, record in test.get("builds", {}).items():
            if record.get("as_expected") is False:
                note(f"series test {test['name']!r} on {build}: {record['outcome']}, expected {record['expected']}")
    return result


#: what the report shows from a wheel's build manifest (harness.build writes ``<wheel>.build.json``)
MANIFEST_KEYS = ("base_sha", "series", "environment", "compiler", "cmake", "duration_s", "compiled_units")


def build_manifest(build) -> dict | None:
    """The build manifest beside a wheel input, when it describes this very wheel (same sha256):
    base SHA, series name and hash, build environment, toolchain. None otherwise."""
    if build.kind != "wheel":
        return None
    path = Path(build.value + ".build.json")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    inputs = data.get("inputs", {})
    if data.get("wheel_sha256") != build.sha256:
        return None
    return {**{k: data.get(k) for k in MANIFEST_KEYS}, "platform": inputs.get("platform"),
            "build_type": inputs.get("build_type"), "version": inputs.get("version"), "manifest": path.name}


#: adaptive sampling never runs more rounds than this in all
MAX_ROUNDS = 64


def round_order(seed: int, rnd: int, builds, configs) -> list[tuple[int, str, str]]:
    """The (round, build, config) processes of one round, in that round's seeded shuffled order."""
    pairs = [(b, c.name) for b in builds for c in configs]
    random.Random(seed * 1000 + rnd).shuffle(pairs)
    return [(rnd, b, c) for b, c in pairs]


def unconverged_cells(data: dict, target: float, launch_target: float | None = None,
                      only_launch_bound: bool | None = None) -> dict[str, list[str]]:
    """config -> cell keys whose stock/patched CI half-width is above its target (or not computable
    yet), in plan order: ``target`` for kernel-bound cells, ``launch_target`` (default ``target``)
    for launch-bound ones (:func:`harness.results.launch_bound`). Cells that failed or were skipped everywhere are
    left out; ``only_launch_bound`` True / False keeps only launch-bound / kernel-bound cells."""
    from harness import stats

    need: dict[str, list[str]] = {}
    for config, per_cell in res.cell_table(data).items():
        for key, per_build in per_cell.items():
            medians = {b: res.process_medians(per_build.get(b, [])) for b in ("stock", "patched")}
            if not all(medians.values()):
                continue
            records = per_build.get("stock", []) + per_build.get("patched", [])
            slow_host = res.launch_bound(records)
            if only_launch_bound is not None and slow_host != only_launch_bound:
                continue
            goal = launch_target if launch_target is not None and slow_host else target
            if not stats.converged(stats.compare(medians["stock"], medians["patched"]), goal):
                need.setdefault(config, []).append(key)
    return need


def next_adaptive_cells(data: dict, target: float, launch_target: float | None = None) -> dict[str, list[str]]:
    """The cells the next adaptive round measures: the unconverged kernel-bound cells; the
    launch-bound ones only once every kernel-bound cell has converged, so that cells whose time is
    host latency (and whose spread between processes is wide) never hold the run hostage."""
    return (unconverged_cells(data, target, launch_target, only_launch_bound=False)
            or unconverged_cells(data, target, launch_target, only_launch_bound=True))


#: the longest measurement (seconds of timed blocks) an adaptive round gives one cell in one process
MAX_CELL_MEASURE_S = 1.0


def _measured_seconds(measurement: dict) -> float:
    """Seconds of timed blocks behind one cell's measurement (samples are seconds per call)."""
    return sum(measurement["samples"]) * measurement["number"]


def median_se(x: list[float]) -> float:
    """Standard error of the median of the sorted values ``x``, from the distribution-free 95 %
    order-statistic interval of a median (ranks n/2 ∓ 0.98·√n; W. J. Conover, *Practical
    Nonparametric Statistics*, 3rd ed., 1999, §3.2): its width / 3.92. Unlike a normal-theory
    estimate it stays wide when the blocks fall into two clusters and the median sits between them."""
    n = len(x)
    lo = max(0, int(n / 2 - 0.98 * math.sqrt(n)))
    hi = min(n - 1, math.ceil(n / 2 + 0.98 * math.sqrt(n)) - 1)
    return (x[hi] - x[lo]) / 3.92


def cell_costs(processes: list[dict]) -> tuple[float, float]:
    """(start-up, per-cell overhead) in seconds, medians over the processes run so far: start-up is
    interpreter + ``import torch`` (:func:`harness.results.startup_seconds`); the per-cell overhead is
    what a cell costs besides its timed blocks (inputs, warm-up, block sizing, checks, lazy device
    initialisation), so that a round with longer measurement can be estimated. (0, 0) before any."""
    import statistics

    timed = [p for p in processes if res.startup_seconds(p) is not None and p.get("cells")]
    if not timed:
        return 0.0, 0.0
    startup = statistics.median(res.startup_seconds(p) for p in timed)
    overhead = []
    for p in timed:
        measured = sum(_measured_seconds(c["measurement"]) for c in p["cells"].values() if c.get("measurement"))
        overhead.append(max(0.0, p["finished"] - p["worker_started"] - measured) / len(p["cells"]))
    return startup, statistics.median(overhead)


def round_seconds(processes: list[dict], measure_s: list[list[float]]) -> float:
    """Estimated seconds of a round of processes, one per entry of ``measure_s`` (the seconds of timed
    blocks each of its cells gets): start-up, plus per cell the overhead and its measurement
    (:func:`cell_costs`); 0 before any process has run."""
    startup, overhead = cell_costs(processes)
    if not startup and not overhead:
        return 0.0
    return sum(startup + sum(overhead + t for t in cells) for cells in measure_s)


def adaptive_measure_seconds(per_build: dict[str, list[dict]], base: float, fixed_s: float,
                             cap: float = MAX_CELL_MEASURE_S) -> float:
    """Seconds of timed blocks one cell gets in each process of the next adaptive round.

    A process's median (log seconds) varies by σ_b² between processes (the process's own state:
    allocation, algorithm choice, clocks) plus σ_w²/T within (block-to-block noise over T seconds of
    blocks); each process costs the cell ``fixed_s`` besides T (its share of the start-up plus its
    overhead). The variance of the mean over processes per second spent, (σ_b² + σ_w²/T)·(fixed + T),
    is smallest at T* = (σ_w/σ_b)·√fixed: the optimal subsample size of two-stage sampling
    (W. G. Cochran, *Sampling Techniques*, 3rd ed., 1977, §10.6). σ_w² is estimated per process
    from its blocks after the warm-up transient (:func:`median_se` squared, times the seconds measured),
    σ_b² as the spread of process medians around each build's mean less the within part, floored at
    a tenth of that spread (never assumed zero). On an H200, GEMM 4096³ shows blocks 2-7 % apart in
    one process (boost clock) while SDPA L512 fp32 differs 1-3 % between processes and 0.1 % inside
    one (docs/methodology.md): the first gets longer measurement, the second more processes.

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
            x = sorted(math.log(v) for v in m["samples"][steady_start(m["samples"]):])
            t = _measured_seconds(m)
            within.append(median_se(x) ** 2 * t)
            seconds.append(t)
            logs.append(statistics.median(x))
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
    return {config: {key: round(adaptive_measure_seconds(table[config][key], base, startup / len(keys) + overhead), 3)
                     for key in keys}
            for config, keys in need.items()}


#: what must be equal for finished processes of an earlier run to be reused (rounds may grow)
PLAN_KEYS = ("kind", "builds", "inputs", "torch", "device", "configs", "cells", "seed", "timing", "threads", "keep_env",
             "extra_env", "plant_k")


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
        except (OSError, UnicodeDecodeError, ValueError):
            earlier = None
        if not isinstance(earlier, dict):
            raise ResultsError(f"{path} is damaged (not a JSON object): the finished processes in {raw} cannot be "
                               "checked against this command's plan",
                               f"run with a new --out directory ({raw.parent} stays as it is), or --fresh to discard it")
        differ = [k for k in PLAN_KEYS if earlier.get(k) != plan.get(k)]
        if differ:
            raise ResultsError(f"{raw.parent} holds a run measured with different {', '.join(differ)}",
                               "pass --fresh to discard it, or a new --out directory")
        if adaptive and isinstance(earlier.get("rounds"), int):
            earlier_rounds = earlier["rounds"]
    elif any(raw.glob("*.status.json")):
        raise ResultsError(f"{raw.parent} holds finished processes but no record of their plan",
                           "pass --fresh to discard them, or a new --out directory")
    if rounds < earlier_rounds:
        left = f"round {rounds}" if rounds == earlier_rounds - 1 else f"rounds {rounds}..{earlier_rounds - 1}"
        raise ResultsError(f"{raw.parent} holds {earlier_rounds} rounds; --rounds {rounds} would leave {left} "
                           "out of results.json",
                           f"pass --rounds {earlier_rounds} (or more) to resume, or --fresh / a new --out")
    atomic_write_json(path, {**plan, "rounds": max(rounds, earlier_rounds)})


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


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
        note(f"--retry-failed: running {status.name.removesuffix('.status.json')} again "
             f"({record.get('reason') or 'failed cells'}); the earlier record is kept as {kept.name}")
        return None
    return record


def read_status(status: Path) -> dict | None:
    """A finished process's ``raw/<proc>.status.json``, or None when it is damaged (not JSON, not an
    object, malformed cells: see :func:`harness.results.cells_problem`): that file is set aside as
    ``.damaged-<UTC time>`` (with a note) and the process counts as unfinished, to be run again."""
    try:
        record = json.loads(status.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        found = f"not readable JSON ({exc})"
    else:
        found = (res.cells_problem(record.get("cells"), "cells") if isinstance(record, dict)
                 else "not a JSON object")
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
    """Remove ``out`` when it holds nothing but this run's traces (``.lock``, ``raw/plan.json``), then
    its parents up to ``top`` (the highest folder this run created) while they are empty."""
    traces = {Path(".lock"), Path("raw"), Path("raw") / "plan.json"}
    try:
        if out.is_dir() and all(p.relative_to(out) in traces for p in out.rglob("*")):
            shutil.rmtree(out)
            for parent in out.parents:
                if not parent.is_relative_to(top) or any(parent.iterdir()):
                    break
                parent.rmdir()
    except OSError:
        pass  # it stays; nothing in it is the user's


def execute(args: argparse.Namespace, inputs: dict[str, str]) -> int:
    """Run a compare (two builds) or bench (one build); write results.json and report.md."""
    builds = {name: parse_input(text, name) for name, text in inputs.items()}
    evidence = ev.for_run(getattr(args, "series", None), {n: build_manifest(b) for n, b in builds.items()},
                          getattr(args, "contrast", []))
    profiles = evidence.profiles(args.device)
    try:
        configs = cfg.select(args.device, args.configs, profiles, evidence.default_configs(args.device))
    except ValueError as exc:
        raise UsageError(str(exc), "see python -m harness compare --help") from None
    cells = plan_cells(args)
    target = getattr(args, "target_ci", None) or None  # 0: adaptive rounds off; bench has no CI to aim at
    rounds = args.rounds if args.rounds is not None else (ROUNDS if args.quick or target is not None else 6)
    if rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {rounds}",
                         "use --rounds 4 or more: with fewer processes per side no verdict can reach p < 0.05")
    timeout = args.timeout if args.timeout is not None else (300.0 if args.quick else 900.0)
    if timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {timeout:g}", "e.g. --timeout 300")
    stall = args.stall_timeout if args.stall_timeout is not None else STALL_TIMEOUT["quick" if args.quick else "full"]
    if stall <= 0:
        raise UsageError(f"--stall-timeout must be > 0 seconds, got {stall:g}", "e.g. --stall-timeout 120")
    launch_target = getattr(args, "target_ci_launch_bound", None)
    for flag, value in (("--target-ci", target), ("--target-ci-launch-bound", launch_target)):
        if value is not None and not 0 < value < 1:
            raise UsageError(f"{flag} must be a fraction between 0 and 1, got {value:g}", f"e.g. {flag} 0.01 for ±1 %")
    plant = getattr(args, "plant_k", None)
    if plant is not None and not 0 < plant < 1:
        raise UsageError(f"--plant-k must be a fraction between 0 and 1, got {plant:g}", "e.g. --plant-k 0.05 for +5 % K")
    budget = getattr(args, "budget_s", None)
    budget = BUDGET_S["quick" if args.quick else "full"] if budget is None else budget
    if target is not None and budget <= 0:
        raise UsageError(f"--budget-s must be > 0 seconds, got {budget:g}", "e.g. --budget-s 600")
    if args.threads is not None and args.threads < 0:
        raise UsageError(f"--threads must be >= 0, got {args.threads}", "0 keeps torch's default; 1 is the cpu default")
    keep = tuple(n.strip() for n in args.keep_env.split(",") if n.strip())
    passed_anyway = [n for n in keep if not n.startswith(cfg.CLEARED_PREFIXES)]
    if passed_anyway:
        raise UsageError(f"--keep-env {', '.join(passed_anyway)}: only {'/'.join(p + '*' for p in cfg.CLEARED_PREFIXES)} "
                         "variables are cleared, every other variable reaches the workers anyway",
                         "drop it from --keep-env")
    extra_env = parse_extra_env(args.env, args.device, configs, profiles)
    out: Path = args.out
    created = [d for d in (out, *out.parents) if not d.exists()]  # out and the parents this run makes
    with exclusive_lock(out, " ".join(sys.argv)), _removed_on_failure(out, created):
        raw = out / "raw"
        if raw.is_symlink():
            raise ResultsError(f"{raw} is a symbolic link (to {os.readlink(raw)}): results are kept only inside --out",
                               f"replace it with a folder (move its target's files into {raw}), or use a new --out")
        raw = inside(out, "raw", "--out folder")
        reap_orphans(raw)
        if args.fresh:
            try:
                if raw.exists():
                    shutil.rmtree(raw)
                inside(out, res.RESULTS, "--out results").unlink(missing_ok=True)
            except OSError as exc:
                raise ResultsError(f"--fresh cannot remove {raw}: {exc.strerror or exc}",
                                   "fix its permissions, or use a new --out") from None
        elif (out / res.RESULTS).exists():
            try:
                res.load(out)  # refuse to resume from (and overwrite) a results.json of another schema version
            except res.DamagedResults as exc:
                kept = set_aside(out / res.RESULTS, "damaged")
                note(f"{exc.cause}: kept it as {kept.name}; rebuilding {res.RESULTS} from raw/")
        build_info = {}
        for name, build in builds.items():
            python, reused = ensure_interpreter(build)
            note(f"build {name}: {'reusing' if reused else 'created'} {python}")
            info = probe_build(name, python, args.device, keep,
                               tuple(cfg.variables(args.device, profiles)) + evidence.markers, with_collect_env=True)
            build_info[name] = {"input": build.to_json(), "interpreter": str(python), "provenance": info}
            manifest = build_manifest(build)
            if manifest:
                build_info[name]["build"] = manifest
        support = next(iter(build_info.values()))["provenance"]["dtype_support"]
        if args.dtypes:
            lacking = sorted({(c.dtype, c.op) for c in cells if unsupported_reason(support, c.dtype, c.op)})
            if lacking:
                dt = lacking[0][0]
                ops = ", ".join(op for d, op in lacking if d == dt)
                ok = [d for d, per_op in support.items() if not any(per_op.values())]
                raise UsageError(f"{dt} is not supported on {args.device} for {ops}: {unsupported_reason(support, dt, lacking[0][1])}",
                                 f"drop it from --dtypes (fully supported here: {', '.join(ok)}) or pick --cells without those ops")

        threads = args.threads if args.threads is not None else (1 if args.device == "cpu" else 0)
        kind = "quick" if args.quick else "full"
        timing = TIMING[kind]["cpu" if args.device == "cpu" else "gpu"]
        order = [entry for rnd in range(rounds) for entry in round_order(args.seed, rnd, builds, configs)]
        data = {
            "schema_version": res.SCHEMA_VERSION,
            "harness_version": harness.__version__,
            "run": {"command": ["python", "-m", "harness", *sys.argv[1:]] if sys.argv[0].endswith(("harness", "__main__.py")) else sys.argv,
                    "kind": "compare" if "stock" in builds else "bench",
                    "builds": list(builds), "device": args.device, "quick": args.quick, "rounds": rounds, "seed": args.seed,
                    "timeout_s": timeout, "stall_timeout_s": stall, "timing": timing, "threads": threads, "keep_env": list(keep),
                    "extra_env": extra_env, "configs": [c.name for c in configs], "plant_k": plant,
                    "cells": [c.key for c in cells], "order": order, "started": _now(), "finished": None},
            "builds": build_info,
            "configs": {c.name: c.to_json() for c in configs},
            "evidence": evidence.to_json(),
            "processes": [],
        }
        raw.mkdir(parents=True, exist_ok=True)
        check_resumable(raw, {"kind": data["run"]["kind"], "builds": list(builds),
                               "inputs": {b: build_info[b]["input"] for b in builds},
                               "torch": {b: [build_info[b]["provenance"]["torch_version"],
                                             build_info[b]["provenance"]["git_version"]] for b in builds},
                               "device": args.device,
                               "configs": data["run"]["configs"], "cells": data["run"]["cells"], "seed": args.seed,
                               "timing": timing, "threads": threads, "keep_env": list(keep),
                               "extra_env": extra_env or None, **({"plant_k": plant} if plant else {})},  # None: plans written before --env existed match
                        rounds, adaptive=target is not None)
        by_config = {c.name: c for c in configs}
        failed = 0
        def process(rnd: int, build: str, config: str, keys: list[str], bar, measure: dict | None = None) -> None:
            """Run (or keep, when finished earlier) one worker process and record it."""
            nonlocal failed
            name = _proc_name(rnd, build, config)
            record = kept_record(_status_path(raw, name), getattr(args, "retry_failed", False))
            if record is not None:
                verb = "kept"
            else:
                save = rnd == 0 and config in (evidence.consistency_pair(args.device) or ())
                spec = {"device": args.device, "cells": keys, "check": rnd == 0,
                        "save_outputs": str(raw / f"{name}.outputs.pt") if save else None,
                        "reduced_fp32": by_config[config].reduced_fp32, "routes": dict(by_config[config].routes),
                        "seed": args.seed, "timing": timing,
                        "threads": threads, "dtype_support": build_info[build]["provenance"]["dtype_support"],
                        "record_env": sorted(extra_env), **({"measure_s": measure} if measure else {}),
                        **({"plant_k": plant} if plant and build == "patched" else {})}
                record = run_worker(Path(build_info[build]["interpreter"]), spec, by_config[config], raw, name,
                                    timeout, keep, extra_env, stall)
                verb = "ran"
            record.update({"name": name, "round": rnd, "build": build, "config": config,
                           "slot": len(data["processes"])})
            data["processes"].append(record)
            bad = [k for k, v in record["cells"].items() if v["status"] == "failed"]
            failed += len(bad)
            note(f"[{len(data['processes'])}/{len(data['run']['order'])}] {verb} {name}: "
                 f"{len(record['cells']) - len(bad)} cells ok"
                 + (f", {len(bad)} failed ({record.get('reason') or record['cells'][bad[0]].get('reason')})" if bad else ""))
            res.save(out, data)
            saved.append(True)
            bar.advance(len(keys))

        all_keys = [c.key for c in cells]
        saved: list[bool] = []  # results.json written by this run (a Ctrl-C re-renders the report from it)
        # the bar counts cells measured (processes x cells), the unit a user waits for
        try:
            deadline = time.monotonic() + budget  # the planned rounds count against the budget too
            with task(f"{data['run']['kind']} on {args.device}: cells", total=len(order) * len(all_keys)) as bar:
                for rnd, build, config in order:
                    process(rnd, build, config, all_keys, bar)
                if target is not None:  # adaptive sampling: more rounds for the cells that are not there yet
                    rnd = rounds
                    need = next_adaptive_cells(data, target, launch_target)
                    while need and rnd < MAX_ROUNDS:
                        extra = [e for e in round_order(args.seed, rnd, builds, configs) if e[2] in need]
                        measure = adaptive_plan(data, need, timing["measure_s"])
                        cost = round_seconds(data["processes"], [list(measure[e[2]].values()) for e in extra])
                        if time.monotonic() + cost > deadline:  # a round that would overrun the budget is not started
                            break
                        data["run"]["order"] += extra
                        bar.update(total=(bar.total or 0) + sum(len(need[e[2]]) for e in extra))
                        note(f"adaptive round {rnd}: {sum(map(len, need.values()))} cells above ±{target:.1%}")
                        for r, build, config in extra:
                            process(r, build, config, need[config], bar, measure[config])
                        rnd += 1
                        need = next_adaptive_cells(data, target, launch_target)
                    need = unconverged_cells(data, target, launch_target)
                    data["run"]["adaptive"] = {"target": target, "launch_bound_target": launch_target, "budget_s": budget,
                                               "rounds_added": rnd - rounds,
                                               "unconverged": {c: keys for c, keys in need.items()}}
        except KeyboardInterrupt:
            if saved:
                from harness import report

                report.write(out, res.load(out))  # report.md says the run is incomplete
            raise
        data["consistency"] = run_consistency(build_info, args.device, by_config, raw, evidence)
        data["series_tests"] = run_series_tests(evidence, build_info, args, keep, raw)
        inconsistent = [(b, k) for b, r in data["consistency"]["builds"].items()
                        for k, v in r.get("cells", {}).items() if not v["passed"]]
        broken = [b for b, r in data["consistency"]["builds"].items() if "error" in r]
        failed += len(inconsistent) + len(broken)
        data["run"]["finished"] = _now()
        res.save(out, data)
        from harness import report

        written = report.write(out, res.load(out))  # exactly what `report` re-renders
        note(f"wrote {out / res.RESULTS}, " + ", ".join(p.name for p in written))
    if failed:
        note(f"{failed} cell measurements failed; see report.md")
    return 1 if failed else 0
