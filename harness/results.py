"""The ``results.json`` schema: provenance, the run plan, and every worker process's raw samples.

Plain JSON that can be re-analysed and re-rendered later (``python -m harness report DIR``).
The full schema is documented in docs/results-schema.md. Layout of a results directory::

    <out>/results.json          assembled after every finished process (atomic rename)
    <out>/report.md             rendered from results.json alone
    <out>/raw/<proc>.jsonl      the worker's own per-cell records, appended as each cell finishes
    <out>/raw/<proc>.status.json  written by the runner once that process has ended (resume marker)

This module does no measuring and no statistics: it reads, writes and indexes.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from harness import __version__, options
from harness.bench import kernels, timer
from harness.bench.timer import Measurement
from harness.errors import ResultsError
from harness.fsutil import atomic_write_json
from harness.options import Kept

SCHEMA_VERSION = 1
RESULTS = "results.json"
#: top-level keys every results.json has
REQUIRED = ("run", "builds", "configs", "processes")


class DamagedResults(ResultsError):
    """A results.json that is there but damaged (not JSON, not an object, no schema_version, or
    malformed): ``compare``/``bench`` keep it aside and rebuild it from raw/ (see :func:`set_aside`)."""


#: the remedy of a damaged results.json in a run's own folder: true because the runner rebuilds it from raw/
REBUILD = (
    "re-run the compare (or bench) command that wrote it: it rebuilds results.json from raw/, "
    "keeping the damaged file as results.json.damaged-<UTC time>"
)
#: the remedy of a damaged results.json in a folder without the run's raw records (a copy, an example)
RESTORE = (
    "restore the results.json this one was copied or edited from, or measure again: "
    "`python -m harness compare ... --out NEW_DIR`"
)


def remedy(path: Path) -> str:
    """The remedy for a damaged ``path`` (a results.json): :data:`REBUILD` where its folder holds the run's
    ``raw/`` records, else :data:`RESTORE` (there is nothing to rebuild it from)."""
    return REBUILD if (Path(path).parent / "raw").is_dir() else RESTORE


def is_run(directory: Path) -> bool:
    """Whether ``directory`` holds a compare/bench run of this harness written before output folders
    were marked (:mod:`harness.outdir`), so that it stays resumable and re-renderable: a results.json
    object with ``schema_version`` and the :data:`REQUIRED` keys (its contents may still be damaged:
    the run sets it aside and rebuilds it), or a ``raw/plan.json`` object with the run's ``inputs`` and
    ``torch`` (a run interrupted before its first results.json)."""
    for path, keys in (
        (Path(directory) / RESULTS, ("schema_version", *REQUIRED)),
        (Path(directory) / "raw" / "plan.json", ("inputs", "torch")),
    ):
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and all(k in data for k in keys):
            return True
    return False


def load(directory: Path) -> dict:
    """Read ``<directory>/results.json`` and check its structure (:func:`problem`).

    Raises:
        ResultsError: missing, or another schema version (never overwritten).
        DamagedResults: unreadable, not JSON, not an object, no schema_version, or malformed
            (the message names the JSON path, e.g. ``processes[3].cells is null``).
    """
    directory = Path(directory)
    path = directory if directory.name == RESULTS and directory.is_file() else directory / RESULTS
    if not path.is_file():
        raise ResultsError(f"{path} does not exist", "run `python -m harness compare ... --out DIR` first")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DamagedResults(f"{path} is not readable JSON ({exc})", remedy(path)) from None
    if not isinstance(data, dict):
        raise DamagedResults(f"{path} is not a results.json object (a JSON {_kind(data)}): damaged", remedy(path))
    if "schema_version" not in data:
        raise DamagedResults(f"{path} has no schema_version: damaged, or not a results.json", remedy(path))
    if data["schema_version"] != SCHEMA_VERSION:
        raise ResultsError(
            f"{path} has schema version {data['schema_version']!r}; this harness reads version {SCHEMA_VERSION}",
            "re-render it with the harness version that wrote it, or run again with --out pointing at a new directory",
        )
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise DamagedResults(
            f"{path} lacks {', '.join(missing)} (schema version {SCHEMA_VERSION} requires them)", remedy(path)
        )
    found = problem(data)
    if found:
        raise DamagedResults(f"{path} is malformed: {found}", remedy(path))
    return data


def _kind(value) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), "number")


def _number(value) -> bool:
    return type(value) in (int, float)


#: no timed block lasts a day (a whole run's default budget is minutes: harness.options.BUDGET_S); a larger
#: time is a damaged or forged number, and one near the float maximum overflows the statistics
MAX_SECONDS = 86400.0


SECONDS_RANGE = f"not a finite number of seconds > 0 and <= {MAX_SECONDS:g}"


def _seconds(value) -> bool:
    """A finite time > 0 and <= :data:`MAX_SECONDS` (NaN, infinities, 0 and negatives are not)."""
    return _number(value) and math.isfinite(value) and 0 < value <= MAX_SECONDS


def sample_problem(value: float, number: int) -> str | None:
    """What is wrong with one per-call sample (seconds) of a block of ``number`` calls (the tail of a message:
    ``, <range>`` or ``: <block>``), or None: it must be a
    time (:data:`SECONDS_RANGE`) and its block (``value * number``) a reading of the host clock, which counts
    whole nanoseconds (:data:`harness.bench.timer.CLOCK_UNIT_S`; a block of 0 ns is refused as a time <= 0).
    A block above that floor but under the timer's resolution is a measurement the report does not judge
    (:func:`harness.bench.timer.below_resolution`)."""
    if not _seconds(value):
        return f", {SECONDS_RANGE}"
    block = value * number
    if block < timer.CLOCK_UNIT_S * (1 - 1e-9):  # a block of whole ns divided by ``number`` rounds to ~1e-16
        calls = "1 call per block makes" if number == 1 else f"{number} calls per block make"
        return (
            f": {calls} a block of {block:.3g} s, under the host clock's 1 ns unit "
            "(time.perf_counter_ns counts whole nanoseconds): no reading of the timer"
        )
    return None


def verdict_problem(record, at: str, error_key: str = "rel_error") -> str | None:
    """What is wrong with an accuracy verdict ``{<error_key>, bound, passed, ...}`` at JSON path ``at``, or None:
    ``bound`` a finite number > 0; ``passed`` a boolean, and true only with a finite error within the bound;
    the error (:func:`harness.bench.accuracy.check`'s ``rel_error``) None (no error could be computed) or a
    number >= 0, infinite when the reference was all zero. For ``rel_diff`` (:mod:`harness.bench.consistency`)
    the error may also be NaN (an output held NaN; then ``passed`` is false). Other keys are not
    looked at."""
    if not isinstance(record, dict):
        return f"{at} is {_kind(record)}, not an object"
    bound, error, passed = record.get("bound"), record.get(error_key), record.get("passed")
    if not (_number(bound) and math.isfinite(bound) and bound > 0):
        return f"{at}.bound is {bound!r}, not a finite number > 0"
    nan_ok = error_key == "rel_diff" and _number(error) and math.isnan(error)
    if error is not None and not (nan_ok or (_number(error) and error >= 0)):
        return f"{at}.{error_key} is {error!r}, not a number >= 0 or null"
    if type(passed) is not bool:
        return f"{at}.passed is {_kind(passed)} {passed!r}, not a boolean"
    if passed and not (error is not None and math.isfinite(error) and error <= bound):
        return f"{at}.passed is true but its {error_key} {error!r} is not within its bound {bound!r}"
    return None


#: keys of ``run`` the plan makes itself: types, whether every results.json has them, whether they are part
#: of the resume key (an option's own key is declared with the option: harness.options.OPTIONS)
PLAN_KEYS = (
    Kept("command", (list,), required=True),
    Kept("kind", (str,), required=True, resume=True),
    Kept("builds", (list,), required=True, resume=True),
    Kept("timing", (dict,), required=True, resume=True),
    Kept("cells", (list,), required=True, resume=True),
    Kept("started", (str,), required=True),
    Kept("order", (list,)),
    Kept("adaptive", (dict,)),
)
#: keys of ``run`` and their JSON types, and whether every results.json has them (docs/results-schema.md)
RUN_KEYS = {k.key: (k.types, k.required) for k in (*PLAN_KEYS, *options.kept_keys())}
#: keys of ``builds.<name>.provenance`` the report reads, and their types (None allowed where noted)
PROVENANCE_KEYS = {
    "torch_version": (str,),
    "git_version": (str, type(None)),
    "mps_built": (bool,),
    "cuda_available": (bool,),
    "variables_in_libraries": (dict,),
    "os": (dict,),
    "python": (str,),
    "cpu_name": (str, type(None)),
    "num_threads": (int,),
}
DEVICES = ("cpu", "cuda", "mps")
TIMING_KEYS = ("warmup_s", "measure_s", "min_block_s")


def _type_problem(at: str, value, kinds: tuple[type, ...]) -> str | None:
    if type(value) is bool and bool not in kinds:
        return f"{at} is {_kind(value)} {value!r}, not {' or '.join(k.__name__ for k in kinds)}"
    if not isinstance(value, kinds):
        return f"{at} is {_kind(value)} {value!r}"[:200] + f", not {' or '.join(k.__name__ for k in kinds)}"
    return None


def run_problem(data: dict) -> str | None:
    """What is wrong with ``run`` and ``builds`` (required keys, types, device, timing, provenance), or None."""
    run = data["run"]
    for key, (kinds, required) in RUN_KEYS.items():
        if key not in run:
            if required:
                return f"run.{key} is missing"
            continue
        found = _type_problem(f"run.{key}", run[key], kinds)
        if found:
            return found
    if run["device"] not in DEVICES:
        return f"run.device is {run['device']!r}, not one of {', '.join(DEVICES)}"
    if run["rounds"] < 1:
        return f"run.rounds is {run['rounds']}, not a positive number of rounds"
    found = _stopped_problem((run.get("adaptive") or {}).get("stopped"))
    if found:
        return found
    for key in TIMING_KEYS:
        value = run["timing"].get(key)
        if not (_number(value) and math.isfinite(value) and value > 0):
            return f"run.timing.{key} is {value!r}, not a positive number of seconds"
    for name in run["builds"]:
        build = data["builds"].get(name)
        if not isinstance(build, dict):
            return f"builds.{name} is {_kind(build)}, not an object"
        for key in ("input", "provenance"):
            if not isinstance(build.get(key), dict):
                return f"builds.{name}.{key} is " + (
                    "missing" if key not in build else f"{_kind(build[key])}, not an object"
                )
        prov = build["provenance"]
        for key, kinds in PROVENANCE_KEYS.items():
            if key not in prov:
                return f"builds.{name}.provenance.{key} is missing"
            found = _type_problem(f"builds.{name}.provenance.{key}", prov[key], kinds)
            if found:
                return found
    return None


#: why adaptive rounds stopped (harness.runner.stop_reason)
STOP_REASONS = ("converged", "max_rounds", "budget")


def _stopped_problem(stopped) -> str | None:
    """What is wrong with ``run.adaptive.stopped`` (absent in runs before it), or None."""
    if stopped is None:
        return None
    at = "run.adaptive.stopped"
    if not isinstance(stopped, dict) or stopped.get("why") not in STOP_REASONS:
        return f"{at} is {stopped!r}"[:200] + f", not {{why: {' | '.join(STOP_REASONS)}}}"
    for key in ("next_round_s", "left_s") if stopped["why"] == "budget" else ():
        value = stopped.get(key)
        if not (_number(value) and math.isfinite(value) and value >= 0):
            return f"{at}.{key} is {value!r}, not a number of seconds >= 0"
    return None


def cells_problem(cells, where: str, process: str | None = None) -> str | None:
    """What is wrong with one process's ``cells`` (``{key: record}``) at JSON path ``where``, or None;
    ``process``: its name, given in the message of a bad sample.

    Checked: a dict of dicts, each with a string ``status`` and, when it has one, a ``check`` verdict
    (:func:`verdict_problem`); an ``ok`` record has a ``measurement`` with ``number`` (calls per block, an
    integer >= 1; absent: 1), a ``samples`` list of times (:func:`sample_problem`: seconds > 0 and <=
    :data:`MAX_SECONDS`, each block at least the host clock's 1 ns unit), a ``median`` within the samples
    and, optionally, ``deferred``: true, false or null (the timer's deferral probe; null: not probed)."""
    if not isinstance(cells, dict):
        return f"{where} is {_kind(cells)}, not an object of cell records"
    for key, rec in cells.items():
        at = f"{where}[{key!r}]"
        if not isinstance(rec, dict):
            return f"{at} is {_kind(rec)}, not a cell record"
        if not isinstance(rec.get("status"), str):
            return f"{at}.status is {_kind(rec.get('status'))}, not a string"
        found = check_problem(rec.get("check"), f"{at}.check")
        if found:
            return found
        if rec["status"] == "ok":
            m = rec.get("measurement")
            if not isinstance(m, dict):
                return f"{at}.measurement is {_kind(m)} in an ok record"
            number = m.get("number", 1)
            if type(number) is not int or number < 1:
                return f"{at}.measurement.number is {number!r}, not a number of calls >= 1"
            samples = m.get("samples")
            if not isinstance(samples, list) or not all(map(_number, samples)):
                return f"{at}.measurement.samples is not a list of numbers"
            if not samples:
                return f"{at}.measurement.samples is an empty list in an ok record"
            for j, x in enumerate(samples):  # before the median: a bad median follows from bad samples
                if found := sample_problem(x, number):
                    of = f" (process {process})" if process else ""
                    return f"{at}.measurement.samples[{j}] is {x!r}{of}{found}"
            if not (_number(m.get("median")) and m["median"] > 0):
                return f"{at}.measurement.median is {m.get('median')!r}, not a positive number of seconds"
            if not _seconds(m["median"]):
                return f"{at}.measurement.median is {m['median']!r}, {SECONDS_RANGE}"
            layouts = m.get("layouts", [])
            if not (
                isinstance(layouts, list)
                and all(type(i) is int for i in layouts)
                and layouts == sorted(set(layouts))
                and (not layouts or (layouts[0] == 0 and layouts[-1] < len(samples)))
            ):
                return f"{at}.measurement.layouts is {layouts!r}"[:200] + ", not rising block indices from 0"
            if m.get("deferred") is not None and not isinstance(m["deferred"], bool):
                return f"{at}.measurement.deferred is {_kind(m['deferred'])}, not true, false or null"
            found = device_problem(m, f"{at}.measurement")
            if found:
                return found
            if not min(samples) <= m["median"] <= max(samples):
                return (
                    f"{at}.measurement.median is {m['median']!r}, outside its samples "
                    f"({min(samples)!r} .. {max(samples)!r})"
                )
    return None


def device_problem(m: dict, at: str) -> str | None:
    """What is wrong with a measurement's device time (``device``: seconds per call, one per replay, each
    within :data:`SECONDS_RANGE`; ``device_calls`` a whole number >= 1 where ``device`` is non-empty;
    ``device_placements`` a whole number >= 1 dividing it; ``device_method`` and ``device_note`` strings), or
    None. All five are optional: results written before device time have none of them."""
    device = m.get("device", [])
    if not isinstance(device, list) or not all(map(_number, device)):
        return f"{at}.device is not a list of numbers"
    bad = next((x for x in device if not _seconds(x)), None)
    if bad is not None:
        return f"{at}.device holds {bad!r}, {SECONDS_RANGE}"
    for key in ("device_method", "device_note"):
        if not isinstance(m.get(key, ""), str):
            return f"{at}.{key} is {_kind(m[key])}, not a string"
    calls = m.get("device_calls", 0)
    if type(calls) is not int or calls < (1 if device else 0):
        return f"{at}.device_calls is {calls!r}, not a whole number of calls" + (" >= 1" if device else "")
    placements = m.get("device_placements", 1)
    if type(placements) is not int or placements < 1 or (device and calls % placements):
        return f"{at}.device_placements is {placements!r}, not a whole number >= 1 dividing device_calls"
    return None


#: a check record's statuses (harness.bench.accuracy): within an informative bound, failed, or within a
#: bound too loose to fail on a plainly wrong output
CHECK_STATUSES = ("passed", "failed", "uninformative")


def check_problem(check, where: str, error_key: str = "rel_error") -> str | None:
    """What is wrong with one cell's ``check`` record at ``where`` (None: absent or sound). Checked: a
    sound verdict (:func:`verdict_problem`, its error under ``error_key``); ``status`` (when recorded) one of
    :data:`CHECK_STATUSES` and ``passed`` true exactly when it is ``passed`` (an uninformative check never
    reads as passed)."""
    if check is None:
        return None
    if found := verdict_problem(check, where, error_key):
        return found
    if "status" in check:
        if check["status"] not in CHECK_STATUSES:
            return f"{where}.status is {check['status']!r}, not one of {', '.join(CHECK_STATUSES)}"
        if check.get("passed") is not (check["status"] == "passed"):
            return f"{where}.passed is {check.get('passed')!r} with status {check['status']!r}"
    return None


def consistency_problem(section) -> str | None:
    """What is wrong with ``consistency`` (:func:`harness.runner.run_consistency`), or None: an object whose
    ``builds`` map each build to ``{"error": str}`` or ``{"cells": {key: verdict}}`` (:func:`check_problem`
    with ``rel_diff``); None (not run yet) is fine."""
    if section is None:
        return None
    if not isinstance(section, dict):
        return f"consistency is {_kind(section)}, not an object"
    builds = section.get("builds", {})
    if not isinstance(builds, dict):
        return f"consistency.builds is {_kind(builds)}, not an object"
    for build, result in builds.items():
        at = f"consistency.builds[{build!r}]"
        if not isinstance(result, dict):
            return f"{at} is {_kind(result)}, not an object"
        if "error" in result:
            continue
        if not isinstance(result.get("cells"), dict):
            return f"{at}.cells is {_kind(result.get('cells'))}, not an object"
        for key, verdict in result["cells"].items():
            if found := check_problem(verdict, f"{at}.cells[{key!r}]", "rel_diff"):
                return found
    return None


def problem(data: dict) -> str | None:
    """The first structural fault of a results.json object, as ``<JSON path> <what is wrong>``, or None.

    A compact check of what the report and the statistics read: ``run`` (``builds``, ``configs``,
    ``cells`` lists; ``run.builds`` ⊆ ``builds``, ``run.configs`` ⊆ ``configs``), and ``processes``
    (objects with string ``build``/``config``, integer ``round`` and ``cells``; see :func:`cells_problem`).
    Linear in the file size (a 1 MB results.json takes milliseconds)."""
    run = data["run"]
    if not isinstance(run, dict):
        return f"run is {_kind(run)}, not an object"
    for key in ("builds", "configs"):
        if not isinstance(data[key], dict):
            return f"{key} is {_kind(data[key])}, not an object"
    for key in ("builds", "configs", "cells"):
        if not isinstance(run.get(key), list):
            return f"run.{key} is {_kind(run.get(key))}, not a list"
    for key in ("builds", "configs"):
        absent = [name for name in run[key] if not isinstance(name, str) or name not in data[key]]
        if absent:
            return f"run.{key} names {absent[0]!r}, which is not in {key}"
    if not isinstance(data["processes"], list):
        return f"processes is {_kind(data['processes'])}, not a list"
    found = run_problem(data) or (consistency_problem(data["consistency"]) if "consistency" in data else None)
    if found:
        return found
    planned = set(run["cells"])
    seen: dict[tuple, int] = {}  # (build, config, round) -> the process that ran it
    for i, proc in enumerate(data["processes"]):
        at = f"processes[{i}]"
        if not isinstance(proc, dict):
            return f"{at} is {_kind(proc)}, not an object"
        for key, ok in (
            ("build", isinstance(proc.get("build"), str)),
            ("config", isinstance(proc.get("config"), str)),
            ("round", type(proc.get("round")) is int),
        ):
            if not ok:
                return f"{at}.{key} is {_kind(proc.get(key))}" + (
                    f" {proc.get(key)!r}" if key in proc else " (missing)"
                )
        for key in ("build", "config"):
            if proc[key] not in run[f"{key}s"]:
                return f"{at}.{key} is {proc[key]!r}, which is not in run.{key}s (the plan)"
        slot = (proc["build"], proc["config"], proc["round"])
        if slot in seen:  # one fresh process per (build, config, round): a second record is a copy
            return (
                f"{at} repeats processes[{seen[slot]}] (build {slot[0]!r}, config {slot[1]!r}, round {slot[2]}): "
                "one process recorded twice"
            )
        seen[slot] = i
        name = proc.get("name")
        found = cells_problem(proc.get("cells"), f"{at}.cells", name if isinstance(name, str) else None)
        if found:
            return found
        stray = [key for key in proc["cells"] if key not in planned]
        if stray:
            return f"{at}.cells[{stray[0]!r}] is a cell that is not in run.cells (the plan)"
    return kernels_problem(data.get("kernels"), run)


def kernels_problem(kernels, run: dict) -> str | None:
    """What is wrong with the optional ``kernels`` section (``{build: {config: {cell key: observation}}}``,
    harness.bench.kernels), or None: builds, configs and cells must be the plan's; an observation has
    ``names`` (a list of strings), optionally ``device_us`` (one duration per name, µs), ``path`` and
    ``route`` (a string or null; no path without names), ``trace`` (a string) and, optionally, ``error``
    (a string)."""
    if kernels is None:
        return None
    if not isinstance(kernels, dict):
        return f"kernels is {_kind(kernels)}, not an object"
    for build, per_config in kernels.items():
        if build not in run["builds"]:
            return f"kernels.{build} is not a build of run.builds (the plan)"
        if not isinstance(per_config, dict):
            return f"kernels.{build} is {_kind(per_config)}, not an object"
        for config, per_cell in per_config.items():
            at = f"kernels.{build}.{config}"
            if config not in run["configs"]:
                return f"{at}: {config!r} is not in run.configs (the plan)"
            if not isinstance(per_cell, dict):
                return f"{at} is {_kind(per_cell)}, not an object"
            for key, seen in per_cell.items():
                found = _observation_problem(f"{at}[{key!r}]", seen, run.get("device"))
                if key not in run["cells"]:
                    found = f"{at}[{key!r}] is a cell that is not in run.cells (the plan)"
                if found:
                    return found
    return None


def _observation_problem(at: str, seen, device: str | None) -> str | None:
    """One observation: names are strings of printable characters (a newline would break the report's
    tables), and ``path``/``route`` are what :func:`harness.bench.kernels.classify` gives those names on
    the run's device, so an edited path or route cannot turn into a verdict."""
    if not isinstance(seen, dict):
        return f"{at} is {_kind(seen)}, not an observation"
    names = seen.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return f"{at}.names is not a list of strings"
    if any(not n.isprintable() for n in names):
        return f"{at}.names holds a name with a control character (newline, tab, ...)"
    for key in ("path", "route"):
        if not isinstance(seen.get(key), (str, type(None))):
            return f"{at}.{key} is {_kind(seen.get(key))}, not a string or null"
    if seen.get("path") is not None and not names:
        return f"{at}.path is {seen['path']!r} with no kernel names"
    durations = seen.get("device_us")
    if durations is not None and not (
        isinstance(durations, list)
        and len(durations) == len(names)
        and all(isinstance(d, (int, float)) and not isinstance(d, bool) and d >= 0 for d in durations)
    ):
        return f"{at}.device_us is not one duration (µs, >= 0) per name"
    if device in kernels.RULES and not seen.get("error"):
        path, route = kernels.classify(device, names, durations)
        if (seen.get("path"), seen.get("route")) != (path, route):
            return (
                f"{at}: path {seen.get('path')!r} and route {seen.get('route')!r} are not what its names give "
                f"on {device} ({path!r}, {route!r})"
            )
    for key, required in (("trace", True), ("error", False)):
        if (required or key in seen) and not isinstance(seen.get(key), str):
            return f"{at}.{key} is {_kind(seen.get(key))}, not a string"
    return None


def new_document(run: dict, builds: dict, configs: dict) -> dict:
    """A results document with no process yet: ``run`` (the plan, :meth:`harness.plan.Plan.run_json`),
    ``builds`` (role -> input, interpreter, provenance, build manifest) and ``configs`` (name -> env config)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "harness_version": __version__,
        "run": run,
        "builds": builds,
        "configs": configs,
        "processes": [],
    }


#: what must be equal for finished processes of an earlier run to be reused (rounds may grow): the resume
#: keys of ``run`` (:data:`PLAN_KEYS`, harness.options.OPTIONS), each build's input and its torch
RESUME_KEYS = (*(k.key for k in (*PLAN_KEYS, *options.kept_keys()) if k.resume), "inputs", "torch")


def resume_plan(data: dict) -> dict:
    """The part of a document's plan that finished processes depend on (:data:`RESUME_KEYS`), as
    ``raw/plan.json`` keeps it: the run's values plus each build's input and torch version/commit.
    A key added after plans were first written enters unset as its :attr:`harness.options.Kept.unset`
    says (``extra_env`` None when empty, ``plant_k`` absent when unset), so plans written before it match."""
    run, builds = data["run"], data["builds"]
    key = {k: run[k] for k in RESUME_KEYS if k in run}
    for kept in options.kept_keys():
        if kept.resume and kept.unset == "omit" and not key.get(kept.key):
            key.pop(kept.key, None)
        elif kept.resume and kept.unset == "null":
            key[kept.key] = run.get(kept.key) or None
    return {
        **key,
        "inputs": {b: builds[b]["input"] for b in run["builds"]},
        "torch": {
            b: [builds[b]["provenance"]["torch_version"], builds[b]["provenance"]["git_version"]] for b in run["builds"]
        },
    }


def save(directory: Path, data: dict) -> Path:
    """Write ``results.json`` atomically; returns its path."""
    path = Path(directory) / RESULTS
    atomic_write_json(path, data)
    return path


def iter_cells(data: dict) -> Iterator[tuple[str, str, str, list[dict]]]:
    """Yield ``(config, cell key, build, records)`` with one record per process that ran the cell
    (records carry ``round``, ``status``, ``reason``, ``measurement``, ``check``), in plan order."""
    grouped: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for proc in data.get("processes", []):
        for key, rec in proc.get("cells", {}).items():
            grouped[(proc["config"], key, proc["build"])].append({**rec, "round": proc["round"]})
    order = {k: i for i, k in enumerate(data["run"]["cells"])}
    configs = {c: i for i, c in enumerate(data["run"]["configs"])}
    builds = {b: i for i, b in enumerate(data["run"]["builds"])}
    for config, key, build in sorted(
        grouped, key=lambda t: (configs.get(t[0], 99), order.get(t[1], 1e9), builds.get(t[2], 9))
    ):
        yield config, key, build, sorted(grouped[(config, key, build)], key=lambda r: r["round"])


def cell_table(data: dict) -> dict[str, dict[str, dict[str, list[dict]]]]:
    """``{config: {cell key: {build: records}}}`` in plan order (see :func:`iter_cells`)."""
    table: dict[str, dict[str, dict[str, list[dict]]]] = {}
    for config, key, build, records in iter_cells(data):
        table.setdefault(config, {}).setdefault(key, {})[build] = records
    return table


def startup_seconds(process: dict) -> float | None:
    """Seconds from starting a worker to its ``start`` record (interpreter, ``import torch`` and the
    harness; the device context comes with the first cell), or None when it wrote none."""
    begun = process.get("worker_started")
    return begun - process["started"] if isinstance(begun, (int, float)) else None


def measurement(m: dict) -> Measurement:
    """A record's ``measurement`` as a :class:`harness.bench.timer.Measurement`, from its raw samples
    (:meth:`~harness.bench.timer.Measurement.from_json`): its median and launch-bound label are recomputed,
    never read from the stored ``median`` / ``launch_bound`` keys (kept in the JSON for readers of the file
    only; the label's rule changed: harness.policy)."""
    return Measurement.from_json(m)


def median_of(record: dict) -> float:
    """The per-process median (seconds) of one measured record, recomputed from its raw samples
    (:func:`harness.bench.timer.steady_median`: the blocks after the warm-up transient)."""
    return measurement(record["measurement"]).median


def process_medians(records: list[dict]) -> list[float]:
    """Per-process medians (seconds) of the records that measured the cell."""
    return [median_of(r) for r in records if r.get("status") == "ok" and r.get("measurement")]


def processes_range(data: dict) -> tuple[int, int]:
    """Fewest and most processes that measured one cell of one (build, config) (adaptive rounds
    add processes for some cells only); ``(0, 0)`` when none did."""
    counts = [
        sum(1 for r in records if r.get("status") == "ok" and r.get("measurement"))  # as process_medians counts
        for per_cell in cell_table(data).values()
        for per_build in per_cell.values()
        for records in per_build.values()
    ]
    counts = [n for n in counts if n] or [0]
    return min(counts), max(counts)


def process_matrix(per_cell: dict[str, dict[str, list[dict]]], build: str, keys: list[str]) -> list[list[float]]:
    """Per-process medians of one (build, config) as rows = processes (by round), columns = ``keys``.

    ``per_cell`` is one config of :func:`cell_table`. A process that did not measure a cell
    (failed, skipped, or an adaptive round that left it out) has NaN there. Seconds."""
    rows: dict[int, list[float]] = {}
    for j, key in enumerate(keys):
        for r in per_cell.get(key, {}).get(build, []):
            if r.get("status") == "ok" and r.get("measurement"):
                rows.setdefault(r["round"], [math.nan] * len(keys))[j] = median_of(r)
    return [rows[rnd] for rnd in sorted(rows)]


def round_series(per_cell: dict[str, dict[str, list[dict]]], build: str) -> list[float]:
    """One number per round for the drift check of one (build, config): the median over cells of
    each cell's per-process median divided by that cell's median over all rounds (1.0 = typical).

    Only the planned rounds count where every cell ran; adaptive rounds measure a subset and are
    included with the cells they measured. Dimensionless, in round order."""
    per_round: dict[int, list[float]] = {}
    for per_build in per_cell.values():
        records = [r for r in per_build.get(build, []) if r.get("status") == "ok" and r.get("measurement")]
        if not records:
            continue
        typical = statistics.median(median_of(r) for r in records)
        for r in records:
            per_round.setdefault(r["round"], []).append(median_of(r) / typical)
    return [statistics.median(per_round[rnd]) for rnd in sorted(per_round)]
