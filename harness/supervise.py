"""Worker supervision: starting, watching, timing out and reaping the processes of a run, and reading
what they wrote (pyperf's ``_manager``, asv's ``Spawner``); what to run next is :mod:`harness.runner`'s.

Every process runs a module of :mod:`harness.bench` (the in-interpreter package) in a build's
interpreter: the provenance probe (:func:`probe_build`), one fresh worker per (round, build, config)
(:func:`run_worker`: its own process group, killed with the driver, stopped after ``--timeout`` or
``--stall-timeout``, or, without one, a stall timeout set per cell from its estimate, :func:`derived_stall`;
its unfinished cells marked failed with the reason), the config consistency check
(:func:`run_consistency`) and the series' upstream tests (:func:`run_series_tests`). Workers die with
the driver (:func:`die_with_parent`); a killed driver's workers are killed by the next run on the same
``--out`` (:func:`reap_orphans`).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import harness
from harness import children, seriestests
from harness import configs as cfg
from harness import evidence as ev
from harness.bench import consistency, provenance
from harness.bench.workloads import Cell
from harness.errors import HarnessError, ResultsError
from harness.fsutil import atomic_write_json, open_write
from harness.progress import note

#: the folder that holds the ``harness`` package: every child gets it as ``PYTHONPATH``
SOURCE_ROOT = str(Path(harness.__file__).resolve().parent.parent)
#: a stall timeout the harness sets (no ``--stall-timeout`` given): a cell may take this many times its estimate
STALL_MARGIN = 2.0
#: the most a stall timeout the harness sets may be, seconds: a day (the ``--stall-timeout`` bound)
STALL_MAX_S = 86400.0


def probe_build(
    name: str,
    python: Path,
    device: str,
    keep: tuple[str, ...] = (),
    markers: tuple[str, ...] = (),
    with_collect_env: bool = False,
) -> dict:
    """Run :mod:`harness.bench.provenance` in ``python``; raise when the device cannot produce evidence.
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
    who = who_of(name)
    what = f"{who} probe ({python})"
    cmd = [str(python), "-m", "harness.bench.provenance", "--device", device, "--markers", ",".join(looked_for)]
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


#: the probe's deadline per step (harness.bench.provenance.STEPS); tests shorten them
PROBE_STEPS = dict(provenance.STEPS)


def who_of(name: str) -> str:
    """How a message names build ``name``: ``build stock``, ``build patched``; ``the build`` for ``bench``'s one
    build (named ``build``) and doctor's (no name), never "build build"."""
    return f"build {name}" if name and name != "build" else "the build"


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
        [str(python), "-c", ""], what=f"{who_of(name)} ({python}) under --env", deadline=children.START_S, env=env
    )
    failed = not_started(who_of(name), python, proc)
    if failed:
        raise HarnessError(
            f"{failed.cause} (--env {' '.join(f'{k}={v}' for k, v in extra.items())})",
            "drop or fix the --env variable that stops it (PYTHONHOME, PYTHONSAFEPATH, ...)",
        )


def proc_name(rnd: int, build: str, config: str) -> str:
    return f"r{rnd:02d}-{build}-{config.replace('+', '_')}"


def status_path(raw: Path, name: str) -> Path:
    return raw / f"{name}.status.json"


def read_worker_records(path: Path) -> tuple[dict, dict, bool, dict]:
    """Parse a worker's jsonl: (start record, {cell key: record}, saw the end record, {cell key: observed
    kernels} from ``kernels`` records and the cell records' ``kernels``: harness.bench.kernels, or {cell key:
    device fields} from a device probe's ``device`` records: harness.bench.worker.probe_device_cell)."""
    start, cells, ended, seen = {}, {}, False, {}
    for rec in read_jsonl(path):
        if rec.get("type") == "start":
            start = rec
        elif rec.get("type") == "cell":
            cells[rec["key"]] = {k: v for k, v in rec.items() if k not in ("type", "key", "kernels")}
            if isinstance(rec.get("kernels"), dict):
                seen[rec["key"]] = rec["kernels"]
        elif rec.get("type") in ("kernels", "device"):  # a probe process's records (one kind per process)
            seen[rec["key"]] = {k: v for k, v in rec.items() if k not in ("type", "key")}
        elif rec.get("type") == "end":
            ended = True
    return start, cells, ended, seen


def worker_error(path: Path) -> str:
    """The worker's own words for its failure: the ``reason`` of its ``error`` record
    (:func:`harness.bench.worker.main`), or "" when it wrote none."""
    return next((str(r.get("reason", ""))[:300] for r in read_jsonl(path) if r.get("type") == "error"), "")


#: stderr lines kept in a process record (``stderr``): the first and the last half of them when there are more
STDERR_LINES = 10


def stderr_lines(path: Path) -> list[str]:
    """The non-empty lines of a worker's stderr file, each stripped and cut to 300 characters: all of them
    up to :data:`STDERR_LINES`, else the first and the last ``STDERR_LINES // 2``."""
    text = path.read_text(errors="replace") if path.is_file() else ""
    lines = [ln.strip()[:300] for ln in text.splitlines() if ln.strip()]
    half = STDERR_LINES // 2
    return lines if len(lines) <= STDERR_LINES else lines[:half] + lines[-half:]


def exit_reason(returncode: int, own: str, ended: bool) -> str:
    """Why a worker that ended by itself with ``returncode`` != 0 failed: the worker's own words (``own``,
    its ``error`` record) after the exit; for a worker that wrote its ``end`` record, that it exited after
    its cells finished (its cells stand; the build's interpreter failed at exit); else the exit alone
    (:func:`run_worker` adds its last stderr line, labelled as context, never as the worker's words)."""
    exit_text = _describe_exit(returncode)
    if own:
        return f"{exit_text}: {own}"
    if ended:
        return f"{exit_text} after its cells finished"
    return exit_text


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


def derived_stall(key: str, took: dict[str, float], floor: float) -> float:
    """Seconds cell ``key`` may run before its worker counts as stalled, when the harness sets the stall
    timeout: :data:`STALL_MARGIN` times its estimate, at least ``floor`` (the ``--stall-timeout`` default)
    and at most :data:`STALL_MAX_S`. The estimate: the wall seconds (``took``: cell key -> seconds) of the
    largest cell by FLOP of the same dtype and op family that this worker finished before it, scaled by
    FLOP (workers run their cells in the plan's order, small before large: ``default_cells``). With no
    such cell, or a key that does not parse, nothing is known: ``floor``."""
    try:
        cell = Cell.from_key(key)
        done = [(Cell.from_key(k), s) for k, s in took.items()]
    except (ValueError, TypeError):
        return floor
    alike = [(c, s) for c, s in done if c.dtype == cell.dtype and c.family == cell.family and c.flop > 0]
    if not alike:
        return floor
    ref, seconds = max(alike, key=lambda cs: cs[0].flop)
    return min(STALL_MAX_S, max(floor, STALL_MARGIN * seconds * cell.flop / ref.flop))


def _wait(
    proc: subprocess.Popen, out_path: Path, timeout: float, stall: float, derive: bool = False
) -> tuple[str, bool]:
    """Wait for a worker; stop it (SIGKILL) after ``timeout`` seconds in all, or after ``stall``
    seconds in which its jsonl gained no ``cell`` record (counted from its ``start`` record, so
    importing torch is not a stall). ``derive`` (no ``--stall-timeout`` given): the cell in progress (its
    ``step`` records) may take :func:`derived_stall` seconds instead, and ``timeout`` grows by what that
    adds over ``stall``. Returns (the reason it was stopped or "", whether it stalled)."""
    started = time.monotonic()
    progress_at, cells_seen, size = started, 0, -1
    began: dict[str, float] = {}  # cell key -> when its first step record was seen
    took: dict[str, float] = {}  # finished cell key -> seconds from its first step record to its cell record
    limits: dict[str, float] = {}  # cell key -> its derived stall timeout, set once when it begins
    limit = stall
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
            records = read_jsonl(out_path)
            seen = sum(1 for r in records if r.get("type") in ("start", "cell"))
            if seen != cells_seen:
                progress_at, cells_seen = now, seen
            if derive:
                limit = _derive(records, now, began, took, limits, stall)
        deadline = timeout + sum(limits.values()) - stall * len(limits)
        if now - started >= deadline:
            return f"worker timed out after {deadline:g} s", False  # run_worker kills it
        if cells_seen and now - progress_at >= limit:  # from the start record on
            return f"worker made no progress for {limit:g} s", True


def _derive(
    records: list[dict], now: float, began: dict[str, float], took: dict[str, float], limits: dict, stall: float
) -> float:
    """:func:`_wait`'s bookkeeping of a derived stall timeout: the begin and finish of each cell seen in
    ``records`` (times of ``now``, the driver's clock), the limit of the cell in progress set once when it
    begins (``limits``); returns that limit, or ``stall`` between cells."""
    current = None
    for r in records:
        key = r.get("key")
        if not isinstance(key, str):
            continue
        if r.get("type") == "step":
            began.setdefault(key, now)
            current = key
        elif r.get("type") == "cell":
            if key in began:
                took.setdefault(key, now - began[key])
            current = None if current == key else current
    if current is None:
        return stall
    if current not in limits:
        limits[current] = derived_stall(current, took, stall)
    return limits[current]


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"worker killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"worker killed by signal {-returncode}"
    return f"worker exited with status {returncode}"


def die_with_parent(parent: int):
    """``preexec_fn`` of a worker on Linux: SIGKILL it when the driver dies, even by SIGKILL
    (``prctl(PR_SET_PDEATHSIG)``). macOS has no such call: there the driver kills the worker's
    process group when it exits or is interrupted, and a driver killed by SIGKILL leaves a worker
    that the next run on the same --out kills first (:func:`reap_orphans`)."""
    if not sys.platform.startswith("linux"):
        return None
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
    derive: bool = False,
) -> dict:
    """Run one worker process to completion; return its process record (cells included).
    ``keep``: inherited variables passed through despite their prefix (see --keep-env);
    ``extra``: variables set on top of the config's (see --env; the worker records them);
    ``stall``: seconds without a finished cell after which the worker is stopped (default: ``timeout``);
    ``derive``: ``stall`` is the floor of a stall timeout set per cell from its estimate (:func:`derived_stall`)."""
    spec_path, out_path = raw / f"{name}.spec.json", raw / f"{name}.jsonl"
    out_path.unlink(missing_ok=True)  # an interrupted earlier attempt is redone whole
    atomic_write_json(spec_path, spec)
    env = cfg.worker_environment(config, keep=keep)
    env.update(extra or {})
    env["PYTHONPATH"] = SOURCE_ROOT
    started = time.time()
    err_path = raw / f"{name}.stderr"
    cmd = [str(python), "-m", "harness.bench.worker", str(spec_path), str(out_path)]
    reason, returncode, stalled = _supervised(
        cmd, env, err_path, _worker_path(raw, name), timeout, stall or timeout, derive
    )
    start, cells, ended, seen = read_worker_records(out_path)
    lines = stderr_lines(err_path)
    if not reason and returncode:  # it ended by itself, and not with 0: a failure, whatever its cells say
        own = worker_error(out_path)
        reason = exit_reason(returncode, own, ended)
        silent = not own and not ended and returncode > 0 and lines  # it said nothing: quote stderr's end
        context = f" (its last stderr line: {lines[-1]})" if silent else ""
    else:
        context = ""
    # a probe process's cells are its kernels records (observe: only) or its device records (device_probe)
    probe = spec.get("observe") == "only" or bool(spec.get("device_probe"))
    unfinished = [key for key in spec["cells"] if key not in (seen if probe else cells)]
    where = last_step(out_path) if stalled else None
    never = ""
    if not start and reason:  # it never wrote its start record: no cell was begun
        reason = unstarted_reason(reason, returncode, err_path, out_path, timeout)
        never = reason if reason.startswith(NOT_STARTED) else ""
        context = "" if never else context  # the Fatal Python error line is the reason itself
    elif where:
        reason = f"{reason} (stalled in cell {where[0]}, step {where[1]})"
    elif unfinished and reason:
        reason = f"{reason} while measuring {unfinished[0]}"  # a worker runs its cells in order
    reason += context if reason else ""
    for key in unfinished:
        cells[key] = {
            "status": "failed",
            "reason": (reason if key == unfinished[0] or not start else f"not measured: {reason}")
            if reason
            else "worker ended without measuring this cell",
        }
    record = {
        "status": "ok" if (ended and not reason and returncode == 0) else "failed",
        "reason": reason,
        "returncode": returncode,
        **({"did_not_start": never} if never else {}),
        **({"stderr": lines} if lines else {}),
        "pid": start.get("pid"),
        "env": start.get("env", {}),
        "started": started,
        "worker_started": start.get("started"),
        "finished": time.time(),
        "cells": cells,
        **({("device" if spec.get("device_probe") else "kernels"): seen} if seen or probe else {}),
    }
    atomic_write_json(status_path(raw, name), record)
    return record


def _supervised(
    cmd: list[str],
    env: dict[str, str],
    err_path: Path,
    pid_path: Path,
    timeout: float,
    stall: float,
    derive: bool = False,
) -> tuple[str, int | None, bool]:
    """Run the worker ``cmd`` (its stderr to ``err_path``, its pid kept in ``pid_path`` while it runs) until
    it ends or :func:`_wait` stops it, then kill its process group. Returns (why it failed or "", its exit
    status or None when it was stopped, whether it stalled)."""
    returncode = None
    with open_write(err_path) as err:  # never through a link planted in raw/ (fsutil.open_write)
        # its own process group (a terminal's Ctrl-C reaches the driver only), killed with the driver
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent(os.getpid()),
        )
    atomic_write_json(pid_path, {"pid": proc.pid})
    try:
        reason, stalled = _wait(proc, Path(cmd[-1]), timeout, stall, derive)
        if not reason:
            returncode = proc.returncode  # run_worker words a non-zero one (exit_reason)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and anything it started; no-op when all ended
        except OSError:
            pass
        proc.wait()
        pid_path.unlink(missing_ok=True)
    return reason, returncode, stalled


#: how the reason of a worker whose interpreter did not start begins (its record's ``did_not_start``)
NOT_STARTED = "the build's interpreter did not start under this environment"


def unstarted_reason(reason: str, returncode: int | None, err_path: Path, out_path: Path, timeout: float) -> str:
    """Why a worker that never wrote its ``start`` record (written once torch is imported) failed: its
    interpreter did not start (a "Fatal Python error" on stderr, e.g. ``--env PYTHONHOME=/nonexistent``),
    or it was still starting Python or importing torch (its ``importing`` record) at the deadline; else
    ``reason``, said to be before any cell. Every cell of the worker gets this reason."""
    fatal = children.fatal_line(err_path.read_text(errors="replace")) if err_path.is_file() else None
    if fatal and returncode:
        return f"{NOT_STARTED}: {fatal}"
    if returncode is None:  # stopped at the deadline
        importing = any(r.get("type") == "importing" for r in read_jsonl(out_path))
        step = "importing torch" if importing else "starting the interpreter"
        return f"worker timed out after {timeout:g} s before it started: {step} took longer than that"
    return f"{reason} before it started (no cell was begun)"


def run_consistency(
    build_info: dict, device: str, configs: dict[str, cfg.EnvConfig], raw: Path, evidence: ev.Evidence | None = None
) -> dict:
    """Compare the first-round GEMM outputs of the run's config pair in each build
    (:mod:`harness.bench.consistency`; the pair: :meth:`harness.evidence.Evidence.consistency_pair`);
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
        files = [raw / f"{proc_name(0, build, c)}.outputs.pt" for c in pair]
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


#: the consistency check's deadline per step (harness.bench.consistency.STEPS); tests shorten them
CONSISTENCY_STEPS = dict(consistency.STEPS)


def consistency_of(build: str, python: str, args: list[str]) -> dict:
    """Run :mod:`harness.bench.consistency` on ``args`` in ``python`` under its deadlines; ``{"cells":
    answer}``, or ``{"error": why}`` (it failed, did not start, did not answer, or ran out of time)."""
    env = cfg.worker_environment(cfg.EnvConfig("consistency"))
    env["PYTHONPATH"] = SOURCE_ROOT
    try:
        proc = children.run(
            [python, "-m", "harness.bench.consistency", *args],
            what=f"consistency check of {who_of(build)}",
            deadline=max(CONSISTENCY_STEPS.values()),
            steps=CONSISTENCY_STEPS,
            answer=True,
            env=env,
        )
    except HarnessError as exc:  # out of time: the run's measurements stand; the report says why
        return {"error": f"consistency check did not finish: {exc.cause}"}
    if proc.returncode != 0:
        failed = not_started(who_of(build), python, proc)
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
