"""A ``compare``/``bench`` run's plan: the request checked and its defaults filled in (nothing runs).

:class:`RunRequest` holds what was asked, one field per option of :data:`harness.options.OPTIONS`;
:func:`plan` checks it (numbers in their range, configs, dtypes, cells, ``--env``, ``--keep-env``,
contrasts), fills in the defaults and returns the :class:`Plan`, the one owner of the run plan
(:meth:`Plan.run_json` is ``results.json``'s ``run``). :mod:`harness.runner` runs it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, make_dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from harness import configs as cfg
from harness import evidence as ev
from harness import options
from harness.bench import plugins
from harness.bench.ops import REGISTRY, key_hint
from harness.bench.workloads import BUILTIN, DTYPES, ITEMSIZE, Cell, Workload
from harness.errors import HarnessError, UsageError
from harness.manifest import load_series  # series.toml loading has one owner
from harness.options import QUICK_CPU_DTYPES
from harness.venvs import parse_inputs

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


def plan_cells(
    dtypes: Sequence[str] | None,
    cells: Sequence[str] | None,
    quick: bool,
    device: str | None = None,
    workload: Workload | None = None,
) -> list[Cell]:
    """The cells of this run: ``cells`` (keys op/MxNxK/dtype) when given, else the default cells of
    ``workload`` (a series' own module, :class:`~harness.bench.workloads.Workload`; default the built-in
    :data:`~harness.bench.workloads.BUILTIN`), reduced with ``quick``, in ``dtypes`` (default
    :data:`~harness.bench.workloads.DTYPES`; :data:`QUICK_CPU_DTYPES` for ``quick`` on ``device`` cpu).

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
    return (workload or BUILTIN).cells(chosen, quick=quick)


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


def round_order(seed: int, rnd: int, builds, configs) -> list[tuple[int, str, str]]:
    """The (round, build, config) processes of one round, in that round's seeded shuffled order."""
    pairs = [(b, c.name) for b in builds for c in configs]
    random.Random(seed * 1000 + rnd).shuffle(pairs)
    return [(rnd, b, c) for b, c in pairs]


#: What ``compare``/``bench`` were asked, as plain values (:mod:`harness.commands.run` builds it): one
#: field per option of :data:`harness.options.OPTIONS` (its ``name``; None: the default of :func:`plan`),
#: plus ``inputs`` (role -> build: ``{"stock": X, "patched": Y}`` or ``{"build": X}``; a wheel path, a build
#: folder, a requirement or ``python:/path``) and ``command`` (the argv that reproduces the run).
#: ``target_ci`` None (or 0) turns adaptive rounds off.
RunRequest = make_dataclass("RunRequest", options.request_fields(), frozen=True, kw_only=True)
RunRequest.__module__ = __name__


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
    #: no --stall-timeout given: ``stall`` is the floor of a stall timeout set per cell (supervise.derived_stall)
    stall_derived: bool = False
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
        """``results.json``'s ``run`` (docs/results-schema.md): the options' own keys
        (:func:`harness.options.kept`) and what the plan made (timing, cells, order), ``finished`` unset."""
        return {
            "command": list(self.command),
            "kind": self.kind,
            "builds": list(self.builds),
            **options.kept(self),
            "timing": dict(self.timing),
            "cells": [c.key for c in self.cells],
            "order": self.order(),
            "started": _now(),
            "finished": None,
            **self.extra,
        }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def plan(request: RunRequest) -> Plan:
    """Check ``request`` and fill in its defaults (nothing runs, nothing is written).

    Raises:
        UsageError: an unknown config, dtype or cell; a number that is NaN, infinite or outside its
            :data:`harness.options.BOUNDS` range (the range is in the message); a ``keep_env`` name that is not
            cleared anyway; a malformed or conflicting ``worker_env`` item.
        BuildInputError: a build input that is neither a wheel, a build folder with its role's wheel, a requirement
            nor ``python:/path`` (:func:`harness.venvs.parse_inputs`).
    """
    builds = parse_inputs(request.inputs, request.series, series_hashes(request.series))
    found = series_of_run(request.series, {n: build_manifest(b) for n, b in builds.items()})
    evidence = ev.for_run(found, list(request.contrasts))
    workload = found.workload if found else None
    cells = tuple(plan_cells(request.dtypes, request.cells, request.quick, request.device, workload))
    if workload:  # what a report needs of the series' ops without the module (harness.bench.plugins.describe)
        evidence = replace(evidence, workload={**evidence.workload, **plugins.describe(workload, cells)})
    profiles = evidence.profiles(request.device)
    try:
        configs = cfg.select(request.device, request.configs, profiles, evidence.default_configs(request.device))
    except ValueError as exc:
        raise UsageError(str(exc), "see python -m harness compare --help") from None
    check_contrasts(request.contrasts, list(builds), [c.name for c in configs])
    kind = "quick" if request.quick else "full"
    value = options.checked(request)
    target = value["target_ci"] or None  # 0: adaptive rounds off; bench has no CI to aim at
    adaptive = "adaptive" if request.quick or target is not None else "fixed"
    value = options.filled(value, {"kind": kind, "rounds": adaptive, "device": _family(request.device)})
    timing = dict(TIMING[kind][_family(request.device)])
    if value["duty"] is not None and request.device != "cpu":  # doctor's duty row picks it per device
        timing["duty"] = value["duty"]
    check_keep_env(request.keep_env)
    return Plan(
        kind="compare" if "stock" in builds else "bench",
        builds=builds,
        device=request.device,
        out=request.out,
        configs=tuple(configs),
        cells=cells,
        rounds=value["rounds"],
        timeout=value["timeout"],
        stall=value["stall_timeout"],
        seed=value["seed"],
        timing=timing,
        threads=value["threads"],
        keep_env=tuple(request.keep_env),
        extra_env=parse_extra_env(list(request.worker_env), request.device, configs, profiles),
        quick=request.quick,
        dtypes_given=request.dtypes is not None,
        fresh=request.fresh,
        retry_failed=request.retry_failed,
        target=target,
        launch_target=value["target_ci_launch_bound"],
        budget=value["budget_s"],
        plant_k=value["plant_k"],
        stall_derived=request.stall_timeout is None,
        evidence=evidence,
        tests_source=request.tests_source,
        command=tuple(request.command),
    )


def _family(device: str) -> str:
    """``cpu`` or ``gpu``: the device family :data:`TIMING` and the ``--threads`` default go by."""
    return "cpu" if device == "cpu" else "gpu"


def series_hashes(series: str | None) -> set[str] | None:
    """The series hashes of ``--series`` at each of its bases (:meth:`harness.manifest.Series.hash_of`): a patched
    wheel ``compare`` takes from a build folder is of one of them (:func:`harness.venvs.wheel_in`); None without.

    Raises:
        SeriesError: ``series`` names no loadable series.
    """
    if not series:
        return None
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
