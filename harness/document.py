"""The results document as typed values, loaded once (``RunDocument``).

A ``results.json`` (:mod:`harness.results`, docs/results-schema.md) becomes frozen dataclasses:
:class:`Header` (the run plan), :class:`Build` (one build's input, provenance and build manifest),
:class:`Machine` (where it ran), :class:`Process` and :class:`CellRecord` (every worker process's
per-cell records), with one index :attr:`RunDocument.by_cell` built once. :func:`from_json` validates
through :func:`harness.results.problem` (the one structural check) and migrates older documents in
one place (:func:`migrate`, as asv's ``update_to_2``). The merged document of several machines
(:mod:`harness.merge`) is typed here too: :class:`MergeDocument`, whose :class:`ContrastRecord` values
are each machine's contrasts as its own run evaluates them, stored so that the merged report renders
them and never recomputes them.

Every reader (report, contrasts, undetermined, the runner's adaptive rounds, the PR body, the merge) takes a
:class:`RunDocument`: outside this module and :mod:`harness.results` nothing indexes the results document with
string keys (tests/test_document_readers.py). Old-run compatibility lives in :func:`migrate` only, so readers see
the current shape. This module reads and types; it measures nothing and computes no statistics.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from harness import configs as cfg
from harness import results as res
from harness.bench import timer
from harness.bench.timer import Measurement
from harness.bench.workloads import register_recorded
from harness.errors import ResultsError
from harness.evidence import Contrast, Evidence, default_contrasts

#: build-manifest variables that do not change the compiled code: the version label and the compile jobs
NEUTRAL_FLAGS = ("PYTORCH_BUILD_VERSION", "MAX_JOBS")


def _migrate_v1_markers(data: dict) -> None:
    """Runs before ``evidence.markers`` was recorded: the variables looked for in the libraries that no
    generic config of the device sets. A step replaces the top-level entries it changes and never mutates
    a nested value in place."""
    evidence = dict(data.get("evidence") or {})
    if "markers" not in evidence:
        generic = set(cfg.variables(data["run"]["device"]))
        looked = {k for b in data["run"]["builds"] for k in data["builds"][b]["provenance"]["variables_in_libraries"]}
        evidence["markers"] = sorted(looked - generic)
    data["evidence"] = evidence


def _migrate_v1_settle(data: dict) -> None:
    """Runs before the duty cycle (docs/timing.md) ran ``timing.settle_s`` seconds of untimed load before
    timing: kept as ``untimed_load_s``, the name :class:`Header` reads."""
    timing = dict(data["run"]["timing"])
    if "settle_s" in timing:
        timing["untimed_load_s"] = timing.pop("settle_s")
        data["run"] = {**data["run"], "timing": timing}


#: schema version -> the steps that bring a document of that version to the current one, in order.
#: Version 1 is the only one so far; its older runs lack keys that later runs record.
MIGRATIONS = {1: (_migrate_v1_markers, _migrate_v1_settle)}

#: ``Measurement.method`` -> the words under a latency plot: the timers of this harness, then those of runs
#: of schema version 1 that timed GPUs with device events (an older harness)
CLOCKS = {
    "perf_counter": "host clock",
    "synchronize+perf_counter": "synchronize + host clock",
}
V1_CLOCKS = {"cuda-events": "device events", "mps-events": "device events"}


def clock_words(methods) -> str:
    """What a run's timer measured, from the methods its measurements recorded ("host clock" when none)."""
    words = {**CLOCKS, **V1_CLOCKS}
    return " / ".join(sorted(words.get(m, str(m)) for m in set(methods))) or "host clock"


def migrate(data: Mapping) -> dict:
    """A results.json object brought to :data:`harness.results.SCHEMA_VERSION`: a new top-level dict whose
    changed entries are new values (the input is not changed; unchanged nested values are shared, so a
    reader must not mutate them: the typed values are frozen for that reason).

    Raises:
        ResultsError: a schema version this harness has no migration for (newer or unknown).
    """
    version = data.get("schema_version")
    if version not in MIGRATIONS or version > res.SCHEMA_VERSION:
        raise ResultsError(
            f"results.json has schema version {version!r}; this harness reads versions "
            f"{', '.join(map(str, sorted(MIGRATIONS)))}",
            "read it with the harness version that wrote it",
        )
    out = dict(data)
    for step in MIGRATIONS[version]:
        step(out)
    out["schema_version"] = res.SCHEMA_VERSION
    return out


@dataclass(frozen=True)
class CellRecord:
    """One cell measured (or failed, or skipped) by one worker process. ``measurement``: the raw
    samples (seconds) as :func:`harness.results.measurement` reads them, None when not measured."""

    config: str
    key: str
    build: str
    round: int
    status: str
    reason: str | None = None
    measurement: Mapping | None = None
    check: Mapping | None = None
    #: :meth:`median`, computed on first use (a report reads each record's median many times; the MSER
    #: cut of :func:`harness.bench.timer.steady_start` is quadratic in the blocks)
    _median: float | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def measured(self) -> bool:
        return self.status == "ok" and bool(self.measurement)

    @property
    def timed(self) -> Measurement | None:
        """The measurement as a :class:`harness.bench.timer.Measurement` (from its raw samples), None when absent."""
        return res.measurement(self.measurement) if self.measurement else None

    @property
    def method(self) -> str | None:
        return self.measurement.get("method") if self.measurement else None

    @property
    def below_resolution(self) -> bool:
        """A measured record whose blocks lasted under the timer's resolution
        (:func:`harness.bench.timer.below_resolution` of its recomputed :meth:`median`); False when not measured."""
        m = self.measurement
        return self.measured and timer.below_resolution(self.median(), m.get("number", 1), m.get("method", ""))

    @property
    def problem(self) -> str | None:
        """``failed: reason`` / ``skipped: reason`` (the report's notes), None for a measured cell."""
        return f"{self.status}: {self.reason}" if self.status in ("failed", "skipped") and self.reason else None

    def device_median(self) -> float | None:
        """The process's device seconds per call (:attr:`harness.bench.timer.Measurement.device_median`),
        None where the measurement holds no device time."""
        device = self.measurement.get("device") if self.measurement else None
        return statistics.median(device) if device else None

    def median(self) -> float:
        """The per-process median (seconds), recomputed from the raw samples (:func:`harness.results.median_of`)
        once per record: the record is frozen, and its ``measurement`` is never changed after it is typed
        (by convention: :func:`load` builds new records from a results.json; the runner types its growing
        document again each round)."""
        if self._median is None:
            object.__setattr__(self, "_median", res.median_of({"measurement": self.measurement}))
        return self._median


@dataclass(frozen=True)
class Process:
    """One worker process: one (build, config, round) and the records of the cells it ran."""

    name: str
    build: str
    config: str
    round: int
    cells: tuple[CellRecord, ...]
    #: wall-clock seconds (``time.time()``): the worker started, wrote its start record, ended; None when not recorded
    started: float | None = None
    worker_started: float | None = None
    finished: float | None = None
    #: the process's own outcome (:func:`harness.supervise.run_worker`): ``ok`` | ``failed`` and why; a process
    #: can fail after cells that stand (its interpreter exited non-zero after the worker finished)
    status: str = "ok"
    reason: str = ""
    #: the non-empty lines of its stderr (:func:`harness.supervise.stderr_lines`), () when none were recorded
    stderr: tuple[str, ...] = ()
    #: the reason, when the build's interpreter did not start under the config's environment; "" otherwise
    did_not_start: str = ""

    @property
    def startup(self) -> float | None:
        """Seconds from starting the worker to its start record (:func:`harness.results.startup_seconds`)."""
        return self.worker_started - self.started if self.worker_started is not None else None

    @property
    def wall(self) -> float | None:
        """``finished - started`` when both are finite and in order, else None."""
        times = (self.started, self.finished)
        if all(t is not None and math.isfinite(t) for t in times) and self.finished >= self.started:
            return self.finished - self.started
        return None


@dataclass(frozen=True)
class Adaptive:
    """``run.adaptive``: the adaptive rounds' targets and budget, the rounds they added, the cells left above
    their target per config, and why they stopped (``stopped``: ``why`` and, for ``budget``, ``next_round_s``
    and ``left_s``; {} for a run that predates that record)."""

    target: float | None
    launch_bound_target: float | None
    budget_s: float | None
    rounds_added: int
    unconverged: Mapping[str, tuple[str, ...]]
    stopped: Mapping

    @classmethod
    def from_json(cls, d: Mapping | None) -> Adaptive | None:
        if not d:
            return None
        return cls(
            d.get("target"),
            d.get("launch_bound_target"),
            d.get("budget_s"),
            int(d.get("rounds_added") or 0),
            MappingProxyType({c: tuple(keys) for c, keys in (d.get("unconverged") or {}).items()}),
            MappingProxyType(dict(d.get("stopped") or {})),
        )


@dataclass(frozen=True)
class Header:
    """The run plan (``run``): kind, device, builds, configs, cells (plan order), rounds, the command that
    ran it, and ``finished`` (an ISO time, None while the run is unfinished); ``order``: the planned and
    adaptive (round, build, config) processes; ``timing``: the plan's timing (``untimed_load_s`` for runs
    that had one); ``clock``: what the timer measured, in words (:func:`clock_words`)."""

    kind: str
    device: str
    builds: tuple[str, ...]
    configs: tuple[str, ...]
    cells: tuple[str, ...]
    rounds: int
    seed: int
    command: tuple[str, ...]
    started: str
    finished: str | None
    quick: bool
    planned_processes: int
    order: tuple[tuple[int, str, str], ...] = ()
    timing: Mapping = field(default_factory=dict)
    threads: int | None = None
    keep_env: tuple[str, ...] = ()
    extra_env: Mapping = field(default_factory=dict)
    plant_k: float | None = None
    adaptive: Adaptive | None = None
    clock: str = "host clock"


_LOCAL = re.compile(r"\+.*$")


@dataclass(frozen=True)
class Build:
    """One build under test: its role (``stock``, ``patched``, ``build``), what was given (``input``), the
    torch it holds and, for a wheel built by ``build_stock``/``build_patched``, its build manifest."""

    role: str
    input: Mapping
    torch_version: str
    git_version: str | None
    config_show: str | None
    manifest: Mapping | None
    #: the probe's facts (:data:`harness.results.PROVENANCE_KEYS` and more), the interpreter, the base it is on
    provenance: Mapping = field(default_factory=dict)
    interpreter: str | None = None
    base: Mapping | None = None

    @property
    def tree(self) -> tuple | None:
        """The source tree of a harness-built wheel (base commit + series hash from its build manifest);
        None when the build has no manifest (a requirement, an interpreter, a foreign wheel)."""
        if not isinstance(self.manifest, Mapping) or not self.manifest.get("base_sha"):
            return None
        return self.manifest["base_sha"], self.series_hash

    @property
    def public_version(self) -> str:
        """The torch version without its local label (``2.11.0+cu130`` -> ``2.11.0``)."""
        return _LOCAL.sub("", self.torch_version)

    @property
    def local_label(self) -> str:
        """The local version label (``cu130``), "" when none."""
        return self.torch_version[len(self.public_version) + 1 :]

    @property
    def wheel_sha256(self) -> str | None:
        return (self.manifest or {}).get("wheel_sha256") or self.input.get("sha256")

    @property
    def series_hash(self) -> str | None:
        series = (self.manifest or {}).get("series")
        return series.get("hash") if isinstance(series, Mapping) else None

    @property
    def flags(self) -> dict[str, str] | None:
        """The build manifest's environment without :data:`NEUTRAL_FLAGS`; None without a manifest."""
        if not self.manifest:
            return None
        env = self.manifest.get("environment") or {}
        return {k: str(v) for k, v in sorted(env.items()) if k not in NEUTRAL_FLAGS}

    @property
    def build_settings(self) -> dict[str, str]:
        """``torch.__config__.show()``'s "Build settings" as ``{KEY: value}`` (the flags a wheel was built
        with, as torch reports them); {} when not recorded."""
        for line in (self.config_show or "").splitlines():
            if line.strip().startswith("- Build settings:"):
                text = line.split(":", 1)[1]
                return dict(
                    (part.split("=", 1)[0].strip(), part.split("=", 1)[1].strip())
                    for part in re.split(r", (?=[A-Z_0-9]+=)", text.strip().rstrip(","))
                    if "=" in part
                )
        return {}


_LSCPU_CPUS = re.compile(r"^CPU\(s\):\s+(\d+)\s*$", re.M)
_SYSCTL_CORES = re.compile(r"^hw\.physicalcpu:\s*(\d+)", re.M)


@dataclass(frozen=True)
class Machine:
    """Where a run ran, from its first build's provenance: CPU and GPU names (the MPS GPU with its core
    count, torch 2.13+), logical CPUs (from torch's collect_env report, None when it did not say), torch's
    thread count, OS and, on a Mac, its model and macOS build."""

    cpu_name: str | None
    gpu_name: str | None
    cpus: int | None
    threads: int
    os_platform: str
    macos_version: str | None = None
    macos_build: str | None = None
    model: str | None = None

    @property
    def chip(self) -> str:
        """The name a reader knows the machine by: the GPU where it has one, else the CPU."""
        return self.gpu_name or self.cpu_name or "unknown machine"

    @property
    def os_text(self) -> str:
        if self.macos_version:
            return f"macOS {self.macos_version}" + (f" ({self.macos_build})" if self.macos_build else "")
        return self.os_platform

    @property
    def identity(self) -> str:
        """What tells two machines apart (hardware and OS as recorded; no host name is recorded): two runs
        with the same identity ran on one machine, or on two that the provenance cannot tell apart."""
        parts = (self.cpu_name, self.gpu_name, self.cpus, self.threads, self.os_platform, self.macos_build, self.model)
        return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]

    @classmethod
    def from_provenance(cls, prov: Mapping, device: str) -> Machine:
        """The machine of a run on ``device``: a GPU name only where the run measured a GPU (a cpu run on a
        host with a GPU is a run on its CPU)."""
        mac = prov.get("mac") or {}
        text = prov.get("collect_env") or ""
        found = _LSCPU_CPUS.search(text) or _SYSCTL_CORES.search(text)
        return cls(
            prov.get("cpu_name"),
            prov.get("gpu_name") if device != "cpu" else None,
            int(found.group(1)) if found else None,
            int(prov["num_threads"]),
            prov["os"].get("platform", ""),
            prov["os"].get("macos_product_version"),
            mac.get("macos_build"),
            mac.get("model"),
        )


@dataclass(frozen=True)
class BuildConsistency:
    """One build's consistency check: each cell's record (``rel_diff``, ``bound``, status and reason, as
    :mod:`harness.checks.consistency` writes it), or why the check could not run (``error``)."""

    cells: Mapping[str, Mapping]
    error: str | None = None


@dataclass(frozen=True)
class Consistency:
    """The config-consistency section: the pair of configs compared (None: none), why the whole check was
    skipped, the MPS note, and each build's :class:`BuildConsistency`."""

    pair: tuple[str, str] | None
    skipped: str | None
    mps_check_skipped: str | None
    builds: Mapping[str, BuildConsistency]

    @classmethod
    def from_json(cls, d: Mapping | None) -> Consistency | None:
        if not d:
            return None
        builds = {
            b: BuildConsistency(MappingProxyType(dict(r.get("cells") or {})), r.get("error"))
            for b, r in (d.get("builds") or {}).items()
        }
        pair = tuple(d["pair"]) if d.get("pair") else None
        return cls(pair, d.get("skipped"), d.get("mps_check_skipped"), MappingProxyType(builds))


@dataclass(frozen=True)
class SeriesTest:
    """One of the series' upstream tests: its name, file, ``-k`` selection and variables, and each build's
    record (outcome, counts, failures, expectation: :mod:`harness.seriestests`)."""

    name: str
    file: str
    k: str | None
    env: Mapping[str, str]
    builds: Mapping[str, Mapping]


@dataclass(frozen=True)
class SeriesTests:
    """The series-tests section: why they did not run, each test, and what ``test_requirements`` installed
    into which build (build -> record)."""

    skipped: str | None
    tests: tuple[SeriesTest, ...]
    requirements: Mapping[str, Mapping] | None

    @classmethod
    def from_json(cls, d: Mapping | None) -> SeriesTests | None:
        if not d:
            return None
        tests = tuple(
            SeriesTest(t["name"], t["file"], t.get("k"), MappingProxyType(dict(t.get("env") or {})), t["builds"])
            for t in d.get("tests") or ()
        )
        return cls(d.get("skipped"), tests, d.get("requirements") or None)


@dataclass(frozen=True)
class RunDocument:
    """A results.json, typed (see the module docstring). ``by_cell`` maps ``(config, cell key, build)`` to
    its records in round order, built once. ``consistency``, ``series_tests`` and ``kernels`` are the
    sections of the same names (None when the run has none; the kernel observations as recorded).
    ``data`` is the migrated dict, for writers and tests only (a reader takes the typed values)."""

    header: Header
    builds: Mapping[str, Build]
    configs: Mapping[str, Mapping]
    processes: tuple[Process, ...]
    evidence: Evidence
    machine: Machine
    data: Mapping = field(repr=False)
    by_cell: Mapping[tuple[str, str, str], tuple[CellRecord, ...]] = field(repr=False)
    harness_version: str = ""
    consistency: Consistency | None = None
    series_tests: SeriesTests | None = None
    kernels: Mapping | None = None

    @property
    def finished(self) -> bool:
        return bool(self.header.finished)

    @property
    def contrasts(self) -> tuple[Contrast, ...]:
        """The contrasts a run is reported by: those its evidence declares, then, for an A/B run,
        ``patched/C`` vs ``stock/C`` (no claim) for every config C that no declared contrast compares that
        way over all its cells."""
        declared = self.evidence.contrasts
        whole = {(c.a, c.b) for c in declared if not c.ops and not c.dtypes}
        family = default_contrasts(list(self.header.builds), list(self.header.configs))
        return tuple(declared) + tuple(c for c in family if (c.a, c.b) not in whole)

    def records(self, config: str, key: str, build: str) -> tuple[CellRecord, ...]:
        """The records of one cell of one (build, config) in round order, () when none."""
        return self.by_cell.get((config, key, build), ())

    def keys_of(self, config: str) -> tuple[str, ...]:
        """The cell keys with records under ``config``, in plan order (keys the plan lacks last)."""
        order = {k: i for i, k in enumerate(self.header.cells)}
        seen = dict.fromkeys(k for c, k, _ in self.by_cell if c == config)
        return tuple(sorted(seen, key=lambda k: order.get(k, math.inf)))

    def cell_records(self) -> Iterator[CellRecord]:
        """Every record of every process, in process order."""
        return (r for p in self.processes for r in p.cells)

    @property
    def rounds_done(self) -> int:
        """Rounds the run holds: 1 + the highest round of its processes (``run.rounds`` before any)."""
        return max((p.round + 1 for p in self.processes), default=0) or self.header.rounds

    def processes_per_cell(self) -> tuple[int, int]:
        """Fewest and most processes that measured one cell of one (build, config); (0, 0) when none did."""
        counts = [sum(r.measured for r in records) for records in self.by_cell.values()]
        counts = [n for n in counts if n] or [0]
        return min(counts), max(counts)


def _header(run: Mapping, methods) -> Header:
    return Header(
        run["kind"],
        run["device"],
        tuple(run["builds"]),
        tuple(run["configs"]),
        tuple(run["cells"]),
        run["rounds"],
        run["seed"],
        tuple(run["command"]),
        run["started"],
        run.get("finished") or None,
        bool(run.get("quick")),
        len(run.get("order") or ()),
        tuple((int(r), str(b), str(c)) for r, b, c in run.get("order") or ()),
        MappingProxyType(dict(run["timing"])),
        run.get("threads"),
        tuple(run.get("keep_env") or ()),
        MappingProxyType(dict(run.get("extra_env") or {})),
        run.get("plant_k") or None,
        Adaptive.from_json(run.get("adaptive")),
        clock_words(methods),
    )


def _time(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _build(role: str, build: Mapping) -> Build:
    prov = build["provenance"]
    return Build(
        role,
        MappingProxyType(build["input"]),
        prov["torch_version"],
        prov["git_version"],
        prov.get("config_show"),
        build.get("build") or None,
        MappingProxyType(prov),
        build.get("interpreter"),
        build.get("base") or None,
    )


def from_json(data: Mapping, where: str = "results.json", validated: bool = False) -> RunDocument:
    """Validate a results.json object (:func:`harness.results.problem`; skipped when ``validated``, as after
    :func:`harness.results.load`), migrate it (:func:`migrate`) and type it.

    Raises:
        ResultsError: another schema version; :class:`harness.results.DamagedResults`: a structural fault
            (the message names the JSON path).
    """
    if not isinstance(data, Mapping) or not all(k in data for k in ("schema_version", *res.REQUIRED)):
        raise res.DamagedResults(f"{where} is not a results.json of a compare or bench run", res.REBUILD)
    found = None if validated else res.problem(dict(data))
    if found:
        raise res.DamagedResults(f"{where} is malformed: {found}", res.REBUILD)
    data = migrate(data)
    processes, index = [], {}
    for proc in data["processes"]:
        records = tuple(
            CellRecord(
                proc["config"],
                key,
                proc["build"],
                proc["round"],
                rec["status"],
                rec.get("reason"),
                rec.get("measurement"),
                rec.get("check"),
            )
            for key, rec in proc["cells"].items()
        )
        processes.append(
            Process(
                proc.get("name", ""),
                proc["build"],
                proc["config"],
                proc["round"],
                records,
                _time(proc.get("started")),
                _time(proc.get("worker_started")),
                _time(proc.get("finished")),
                str(proc.get("status", "ok")),
                str(proc.get("reason") or ""),
                tuple(str(x) for x in proc.get("stderr", ()) if isinstance(x, str))
                if isinstance(proc.get("stderr"), list)
                else (),
                str(proc.get("did_not_start") or ""),
            )
        )
        for r in records:
            index.setdefault((r.config, r.key, r.build), []).append(r)
    run = data["run"]
    methods = {r.method for p in processes for r in p.cells if r.measurement}
    evidence = Evidence.from_json(data.get("evidence"))
    register_recorded(evidence.workload)  # a series' own ops: their labels and FLOP as recorded
    return RunDocument(
        _header(run, methods),
        MappingProxyType({role: _build(role, data["builds"][role]) for role in run["builds"]}),
        MappingProxyType(data["configs"]),
        tuple(processes),
        evidence,
        Machine.from_provenance(data["builds"][run["builds"][0]]["provenance"], run["device"]),
        data,
        MappingProxyType({k: tuple(sorted(v, key=lambda r: r.round)) for k, v in index.items()}),
        str(data.get("harness_version", "")),
        Consistency.from_json(data.get("consistency")),
        SeriesTests.from_json(data.get("series_tests")),
        data.get("kernels") or None,
    )


def of(data: RunDocument | Mapping) -> RunDocument:
    """``data`` as a :class:`RunDocument`: itself, or a results.json object read by :func:`from_json`
    (what a caller holding the parsed JSON passes to a reader)."""
    return data if isinstance(data, RunDocument) else from_json(data)


def load(directory: Path) -> RunDocument:
    """:func:`harness.results.load` (the file's checks and messages), then :func:`from_json`."""
    path = Path(directory)
    return from_json(res.load(path), str(path if path.name == res.RESULTS else path / res.RESULTS), validated=True)


@dataclass(frozen=True)
class Stamp:
    """What choosing a run as a PR's evidence needs from its results.json (:func:`peek`): when it finished
    ("" while unfinished), the command recorded (a list, or the recorded value as text), and the series
    ``(name, hash)`` of each build's manifest that names one, plus ``(name, None)`` for the series the run was
    told (``compare --series``, ``evidence.series``) when no build's manifest names it (an A/A run of one
    interpreter, say)."""

    finished: str
    command: tuple[str, ...] | str
    series: tuple[tuple[str, str | None], ...]


def peek(path: Path) -> Stamp | None:
    """The :class:`Stamp` of a results.json, read leniently (no validation: a folder of runs may hold runs
    of any age, and the PR body quotes their report.md, not their numbers); None when it is not readable
    JSON or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, Mapping):
        return None
    run = data.get("run") if isinstance(data.get("run"), Mapping) else {}
    builds = data.get("builds") if isinstance(data.get("builds"), Mapping) else {}
    found = [((b.get("build") or {}).get("series") or {}) for b in builds.values() if isinstance(b, Mapping)]
    series = tuple((f["name"], f.get("hash")) for f in found if isinstance(f, Mapping) and f.get("name"))
    evidence = data.get("evidence") if isinstance(data.get("evidence"), Mapping) else {}
    named = evidence.get("series")  # compare --series NAME: the series whose evidence the run judged
    if isinstance(named, str) and named and named not in (name for name, _ in series):
        series += ((named, None),)  # no build carries it (interpreters, wheels of no build manifest): no hash
    command = run.get("command") or []
    return Stamp(str(run.get("finished") or ""), tuple(command) if isinstance(command, list) else str(command), series)
