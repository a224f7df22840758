"""Schedules worker processes over builds × env configs × rounds; commands ``compare`` and ``bench``.

Scheduling (A/B): in each round every (build, config) pair runs once, in a fresh process, in an
order shuffled per round with a seeded RNG, so stock and patched alternate and slow drift of the
machine (thermal state, background load) spreads over both sides instead of biasing one. The
first round also runs the correctness checks. Each process gets exactly its config's variables
(:func:`harness.configs.worker_environment`) plus the run's ``--env KEY=VALUE`` variables (the same
in every process; recorded in the plan and in each process's ``env``).

Device time: where the device's trace reads it in a process of its own (mps: the profiler's log, which
costs host time per call; :attr:`harness.bench.kernels.Trace.device_env`), each timed process is followed
by a device probe process ``dev-<round>-<build>-<config>`` (:meth:`Recorder.device_probe`).

Resumable: a process whose ``raw/<proc>.status.json`` exists is not run again; a process that was
interrupted (no status file) is redone. ``--fresh`` discards earlier results of the same out dir.
A worker that crashes, is killed by a signal or exceeds ``--timeout`` has its unfinished cells
marked failed with that reason (a signal names the cell it was in); the run goes on and exits with
status 1; ``--retry-failed`` runs such processes again. Workers run in their own process group and
die with the driver (:mod:`harness.supervise` starts, watches and reaps them; :mod:`harness.rundir`
holds the out folder and what a resumed run keeps).
"""

from __future__ import annotations

import copy
import math
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from harness import configs as cfg
from harness import document as doc
from harness import evidence as ev
from harness import macos, observed, outdir, stats, supervise
from harness import results as res
from harness import undetermined as und
from harness.bench import kernels
from harness.bench.accuracy import FAILED, status_of
from harness.bench.provenance import unsupported_reason
from harness.bench.timer import first_layout, steady_start
from harness.contrasts import ContrastRow
from harness.contrasts import rows as contrast_rows
from harness.document import CellRecord, RunDocument
from harness.errors import UsageError
from harness.plan import Plan, RunRequest, build_manifest, plan, round_order
from harness.policy import POLICY, CellClass, Policy, cell_costs, round_seconds
from harness.policy import measured_seconds as _measured_seconds
from harness.progress import note, task
from harness.rundir import check_earlier_results, check_resumable, claimed, kept_record, open_out, removed_on_failure
from harness.supervise import build_routes, check_starts, run_consistency, run_series_tests, run_worker
from harness.supervise import proc_name as _proc_name  # the Recorder's names
from harness.supervise import status_path as _status_path
from harness.venvs import ensure_interpreter


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


#: adaptive sampling never runs more rounds than this in all
MAX_ROUNDS = 64


def _stock_patched_rows(run: RunDocument, policy: Policy) -> list[tuple[str, ContrastRow]]:
    """(config, row) of every cell of the ``patched/C`` vs ``stock/C`` contrasts (paired by round, judged by
    ``policy``: :func:`harness.contrasts.rows`), in plan order: what every adaptive decision reads, computed
    once per document."""
    run = doc.of(run)
    contrasts = ev.default_contrasts(list(run.header.builds), list(run.header.configs))
    return [(contrast.a.config, row) for contrast in contrasts for row in contrast_rows(run, contrast, policy)]


def _targets(target: float, launch_target: float | None) -> Policy:
    return POLICY.with_targets(target, launch_target if launch_target is not None else target)


def _unconverged(
    rows: list[tuple[str, ContrastRow]], policy: Policy, only_launch_bound: bool | None
) -> dict[str, list[str]]:
    comparisons, goals = {}, {}
    for config, row in rows:
        if not (row.a and row.b):
            continue
        if only_launch_bound is not None and (row.judged == CellClass.LAUNCH_BOUND) != only_launch_bound:
            continue
        comparisons[config, row.cell.key] = row.cmp
        goals[config, row.cell.key] = policy.rule(row.judged).target
    todo = stats.unconverged(comparisons, goals)  # the one adaptive rule
    need: dict[str, list[str]] = {}
    for config, key in (k for k in comparisons if k in todo):  # plan order
        need.setdefault(config, []).append(key)
    return need


def unconverged_cells(
    run: RunDocument, target: float, launch_target: float | None = None, only_launch_bound: bool | None = None
) -> dict[str, list[str]]:
    """config -> cell keys whose stock/patched CI half-width is above its class's target (or not computable
    yet), in plan order: ``target`` for kernel-bound cells, ``launch_target`` (default ``target``) for
    launch-bound ones (:mod:`harness.policy`). Each cell is the ``patched/C`` vs ``stock/C`` contrast's
    row (paired by round, judged by the policy: :func:`harness.contrasts.rows`). Cells that failed or
    were skipped everywhere are left out; ``only_launch_bound`` True / False keeps only launch-bound /
    kernel-bound cells."""
    policy = _targets(target, launch_target)
    return _unconverged(_stock_patched_rows(run, policy), policy, only_launch_bound)


def _below_floor(rows: list[tuple[str, ContrastRow]], reachable: bool | None) -> dict[str, list[str]]:
    need: dict[str, list[str]] = {}
    for config, row in rows:
        if row.judged == CellClass.LAUNCH_BOUND and row.a and len(row.rounds) < POLICY.rule(row.judged).floor:
            if reachable is None or und.reaches_band_at_floor(row) == reachable:
                need.setdefault(config, []).append(row.cell.key)
    return need


def below_floor(run: RunDocument, reachable: bool | None = None) -> dict[str, list[str]]:
    """config -> launch-bound cell keys with fewer processes per side than their floor (:mod:`harness.policy`);
    ``reachable`` True / False keeps only those that can / cannot reach a verdict at the floor
    (:func:`harness.undetermined.reaches_band_at_floor`)."""
    return _below_floor(_stock_patched_rows(run, POLICY), reachable)


def _undecided_first(
    rows: list[tuple[str, ContrastRow]], need: dict[str, list[str]], policy: Policy, left: int
) -> dict[str, list[str]]:
    """``need`` narrowed to its cells whose verdict is still undetermined and that the ``left`` rounds (to
    MAX_ROUNDS) can decide (:func:`harness.undetermined.decidable_within` at the processes they would have
    then), where there are any; else ``need`` whole."""
    undecided: dict[str, list[str]] = {}
    for config, row in rows:
        if (
            row.cell.key in need.get(config, ())
            and row.cmp.verdict == "undetermined"
            and und.decidable_within(row, len(row.rounds) + left, policy)
        ):
            undecided.setdefault(config, []).append(row.cell.key)
    return undecided or need


def next_adaptive_cells(run: RunDocument, target: float, launch_target: float | None = None) -> dict[str, list[str]]:
    """The cells the next adaptive round measures: the unconverged kernel-bound cells (those still
    undetermined first, while any is left that the rounds can decide: a round of a few cells is short, so
    the cells a reviewer would ask about get the processes before the decided ones are narrowed; H100 A/A
    of docs/examples/h100-aa-placements: 90 cells above ±1 % took the 2 adaptive rounds that fitted, and
    16 cells stayed undetermined at 4-6 processes per side), with the
    launch-bound cells still below their floor whose spread lets them reach a verdict there (cheap:
    microseconds per call, and the process is started anyway); every other launch-bound cell (below
    its floor with a spread too wide for the band there, or unconverged) only once every kernel-bound cell
    has converged, so that cells whose time is host latency (and whose spread between processes is
    wide) never take the budget from the cells whose device is busy (H200 A/A of
    docs/examples/h200-aa-share: two rounds of 37-46 launch-bound cells at 18 % spread took 103 s of the
    540 s, and three kernel-bound cells stayed above ±1 %). The rows are computed once (the targets change
    no row's class, band or floor)."""
    run = doc.of(run)
    policy = _targets(target, launch_target)
    rows = _stock_patched_rows(run, policy)
    left = max(0, MAX_ROUNDS - und.rounds_done(run))
    kernel = _undecided_first(rows, _unconverged(rows, policy, only_launch_bound=False), policy, left)
    if not kernel:
        return _unconverged(rows, policy, only_launch_bound=True)
    floor = _below_floor(rows, reachable=True)
    order = {k: i for i, k in enumerate(run.header.cells)}
    return {
        config: sorted(set(kernel.get(config, [])) | set(floor.get(config, [])), key=order.__getitem__)
        for config in run.header.configs
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
    per_build: Mapping[str, Sequence[CellRecord]], base: float, fixed_s: float, cap: float = MAX_CELL_MEASURE_S
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
    within, centred, seconds, groups = [], [], [], 0
    for records in per_build.values():
        logs = []
        for r in records:
            m = r.timed if r.measured else None
            if m is None or len(m.samples) < 4:
                continue
            first = first_layout(m.samples, m.layouts or [])
            x = sorted(math.log(v) for v in first[steady_start(first) :])
            t = _measured_seconds(m)
            within.append(median_se(x) ** 2 * t)
            seconds.append(t)
            logs.append(math.log(m.median))  # the process's time (all its layouts)
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


def adaptive_plan(run: RunDocument, need: dict[str, list[str]], base: float) -> dict[str, dict[str, float]]:
    """config -> {cell key: measure seconds} for the next adaptive round over ``need``
    (:func:`adaptive_measure_seconds`; each cell's fixed cost is the start-up shared by the cells of
    its process plus the per-cell overhead, :func:`cell_costs`)."""
    startup, overhead = cell_costs(run.processes)

    def per_build(config: str, key: str) -> dict[str, tuple[CellRecord, ...]]:
        return {b: run.records(config, key, b) for b in run.header.builds if run.records(config, key, b)}

    return {
        config: {
            key: round(adaptive_measure_seconds(per_build(config, key), base, startup / len(keys) + overhead), 3)
            for key in keys
        }
        for config, keys in need.items()
    }


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
        note(f"{supervise.who_of(name)}: {'reusing' if reused else 'created'} {python}")
        if str(python) not in probed:
            probed[str(python)] = supervise.probe_build(
                name, python, plan.device, plan.keep_env, markers, with_collect_env=True
            )
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
    after each; counts failed cells, and processes that failed although their cells did not (a build's
    interpreter that exited non-zero after the worker finished: ``after_cells``)."""

    def __init__(self, plan: Plan, data: dict, raw: Path) -> None:
        self.plan, self.data, self.raw = plan, data, raw
        self.by_config = plan.by_config()
        self.failed = 0
        self.after_cells = 0
        self.saved = False  # results.json written by this run (a Ctrl-C re-renders the report from it)

    # The recorder is the writer of the results document: it alone indexes ``self.data`` by key. Readers
    # (the adaptive rounds among them) get the typed document, built once per call (:meth:`document`).
    @property
    def order(self) -> tuple[tuple[int, str, str], ...]:
        """The (round, build, config) processes planned so far, planned and adaptive."""
        return tuple((int(r), b, c) for r, b, c in self.data["run"]["order"])

    def document(self) -> RunDocument:
        """The results document as recorded so far, typed (its one ``by_cell`` index built here, once)."""
        return doc.from_json(self.data, validated=True)

    def extend_order(self, extra: Sequence[tuple[int, str, str]]) -> None:
        """Record an adaptive round's processes in ``run.order`` (a new list: no reader's value changes)."""
        self.data["run"] = {**self.data["run"], "order": [*self.data["run"]["order"], *map(list, extra)]}

    def record_adaptive(self, adaptive: dict) -> None:
        """Record ``run.adaptive``: the adaptive rounds' targets, rounds added, unconverged cells, stop reason."""
        self.data["run"] = {**self.data["run"], "adaptive": adaptive}

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
            **({"workloads": [plan.evidence.workload["path"]]} if plan.evidence.workload.get("path") else {}),
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

    def device_probe(self, rnd: int, build: str, config: str, record: dict) -> None:
        """Where the device's time is read in a process of its own (:attr:`harness.bench.kernels.Trace.device_env`:
        on mps the profiler's log, which costs host time per call), run (or keep, when finished earlier) the
        probe process ``dev-<round>-<build>-<config>`` after the timed one, with the config's variables plus
        the trace's, on the cells ``record`` measured ok, and put its device fields (``device``,
        ``device_method``, ``device_calls``, ``device_note``) into their measurements. A cell the probe gave
        no device time keeps none, its ``device_note`` the probe's reason."""
        trace = kernels.TRACES[self.plan.device]
        ok = [k for k, v in record["cells"].items() if v.get("status") == "ok" and v.get("measurement")]
        if not trace.device_env or not ok:
            return
        name = "dev-" + _proc_name(rnd, build, config)
        probe = kept_record(_status_path(self.raw, name), self.plan.retry_failed)
        if probe is None:
            spec = {**self.spec(rnd, build, config, ok, name), "check": False, "save_outputs": None}
            spec = {**spec, "observe": None, "device_probe": True}
            python = Path(self.data["builds"][build]["interpreter"])
            extra = {**self.plan.extra_env, **trace.device_env}
            probe = run_worker(
                python, spec, self.by_config[config], self.raw, name, self.plan.timeout, self.plan.keep_env, extra
            )
        found = probe.get("device") or {}
        for key in ok:
            got = found.get(key) or {}
            fields = {
                "device": list(got.get("device") or []),
                "device_method": got.get("device_method", ""),
                "device_calls": got.get("device_calls", 0),
                "device_note": got.get("device_note", ""),
            }
            bad = res.device_problem(fields, f"{name} {key}")
            if bad or not fields["device"]:
                why = bad or fields["device_note"] or probe["cells"].get(key, {}).get("reason") or probe.get("reason")
                fields = {"device": [], "device_method": "", "device_calls": 0}
                fields["device_note"] = why or "probe ended early"
            measurement = record["cells"][key]["measurement"]
            measurement.update(fields)
            measurement["device_median"] = statistics.median(fields["device"]) if fields["device"] else None
        got = sum(bool(record["cells"][k]["measurement"]["device"]) for k in ok)
        note(f"{name}: device time of {got} of {len(ok)} cells ({trace.device_method})")

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
                self.plan.stall_derived,
            )
            verb = "ran"
        self.device_probe(rnd, build, config, record)
        processes = self.data["processes"]
        if record.get("kernels"):  # observed inline (first round): kept once, in data["kernels"]
            self._keep_kernels(build, config, record["kernels"])
        record.pop("kernels", None)
        record.update({"name": name, "round": rnd, "build": build, "config": config, "slot": len(processes)})
        processes.append(record)
        bad = [k for k, v in record["cells"].items() if v["status"] == "failed"]
        self.failed += len(bad)
        after = record.get("status") == "failed" and not bad  # its cells stand; the process did not
        self.after_cells += after
        note(
            f"[{len(processes)}/{len(self.data['run']['order'])}] {verb} {name}: "
            f"{len(record['cells']) - len(bad)} cells ok"
            + (f", {len(bad)} failed ({record.get('reason') or record['cells'][bad[0]].get('reason')})" if bad else "")
            + (f", but the worker failed: {record.get('reason') or 'no reason recorded'}" if after else "")
        )
        res.save(self.plan.out, self.data)
        self.saved = True
        outdir.record(self.plan.out)  # the marker lists this process's files (a killed run's stay provably ours)


# ----------------------------------------------------------------------------------- schedule
def schedule(plan: Plan, recorder: Recorder, bar=None) -> None:
    """Run the planned rounds in their interleaved order, then (``plan.target``) adaptive rounds:
    fresh processes measuring only the cells not converged yet (:func:`next_adaptive_cells`) for the
    time :func:`adaptive_plan` gives each, while a round's estimated time (:func:`round_seconds`) fits
    the rest of ``plan.budget`` (counted from the first planned process) and fewer than
    :data:`MAX_ROUNDS` rounds ran. The recorder records ``run.order`` and ``run.adaptive``.

    ``recorder.process(rnd, build, config, keys, measure)`` runs one process (``measure``: cell key ->
    seconds of timed blocks, or None for the plan's timing) and records it; ``recorder.document()`` is
    the typed document so far, read once per adaptive round; ``bar`` (optional) is advanced by cells measured.
    """
    deadline = time.monotonic() + plan.budget  # the planned rounds count against the budget too
    all_keys = [c.key for c in plan.cells]
    for rnd, build, config in recorder.order:
        recorder.process(rnd, build, config, all_keys, None)
        if bar is not None:
            bar.advance(len(all_keys))
    if plan.target is None:
        return
    measure: dict[str, dict[str, float]] = {}
    now: list[RunDocument] = []  # the document after the last finished round: one index per round

    def need() -> dict[str, list[str]]:
        now[:] = [recorder.document()]
        return next_adaptive_cells(now[0], plan.target, plan.launch_target)

    def cost(extra: list[tuple[int, str, str]], todo: dict[str, list[str]]) -> float:
        measure.clear()
        measure.update(adaptive_plan(now[0], todo, plan.timing["measure_s"]))
        return round_seconds(now[0].processes, [list(measure[e[2]].values()) for e in extra])

    def announce(rnd: int, extra: list[tuple[int, str, str]], todo: dict[str, list[str]]) -> None:
        recorder.extend_order(extra)
        if bar is not None:
            bar.update(total=(bar.total or 0) + sum(len(todo[e[2]]) for e in extra))
        note(f"adaptive round {rnd}: {sum(map(len, todo.values()))} cells above ±{plan.target:.1%}")

    def run_and_advance(rnd: int, build: str, config: str, keys: list[str]) -> None:
        recorder.process(rnd, build, config, keys, measure[config])
        if bar is not None:
            bar.advance(len(keys))

    added = adaptive_rounds(
        plan.seed, list(plan.builds), plan.configs, plan.rounds, run_and_advance, need, cost, deadline, announce
    )
    now[:] = [recorder.document()]
    left = unconverged_cells(now[0], plan.target, plan.launch_target)
    recorder.record_adaptive(
        {
            "target": plan.target,
            "launch_bound_target": plan.launch_target,
            "budget_s": plan.budget,
            "rounds_added": added,
            "unconverged": {c: keys for c, keys in left.items()},
            "stopped": stop_reason(plan, now[0], added, deadline, cost),
        }
    )


def stop_reason(plan: Plan, run: RunDocument, added: int, deadline: float, cost) -> dict:
    """Why the adaptive rounds stopped, for the report: ``{"why": "converged"}``, ``{"why": "max_rounds"}``
    (:data:`MAX_ROUNDS`), or ``{"why": "budget", "next_round_s": ..., "left_s": ...}`` (the next round's
    estimated seconds did not fit the seconds left of ``--budget-s``). ``run``: the document after the
    last round (``cost`` estimates from it)."""
    todo = next_adaptive_cells(run, plan.target, plan.launch_target)
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
    and report.md. Returns 0, or 1 when cells failed, a worker process failed after its cells (its
    interpreter exited non-zero), or the config consistency check failed or could not run (the reasons
    are in the report).

    Raises:
        UsageError, ResultsError, HarnessError: see :func:`plan`, :func:`open_out`, :func:`probe_builds`,
            :func:`check_resumable`.
    """
    from harness import report  # matplotlib (its plots): compare and bench start without it

    run = plan(request)
    out = run.out
    created = [d for d in (out, *out.parents) if not d.exists()]  # out and the parents this run makes
    with removed_on_failure(out, created), claimed(out, " ".join(request.command or sys.argv)):
        raw = open_out(out, run.fresh)
        data = res.new_document(run.run_json(), probe_builds(run), {c.name: c.to_json() for c in run.configs})
        data["evidence"] = run.evidence.to_json()
        check_earlier_results(out, res.resume_plan(data), raw)  # refused or set aside before a write
        raw.mkdir(parents=True, exist_ok=True)
        check_resumable(raw, res.resume_plan(data), run.rounds, adaptive=run.target is not None)
        recorder = Recorder(run, data, raw)
        try:
            with task(f"{run.kind} on {run.device}: cells", total=len(recorder.order) * len(run.cells)) as bar:
                schedule(run, recorder, bar)
        except KeyboardInterrupt:
            if recorder.saved:
                report.write(out, doc.load(out))  # report.md says the run is incomplete
            raise
        data["consistency"] = run_consistency(data["builds"], run.device, recorder.by_config, raw, run.evidence)
        data["series_tests"] = run_series_tests(run.evidence, data["builds"], run.tests_source, run.keep_env, raw)
        inconsistent = consistency_failures(data["consistency"])
        closing = closing_notes(recorder.document())
        data["run"]["finished"] = _now()
        res.save(out, data)
        written = report.write(out, doc.load(out))  # exactly what `report` re-renders
        note(f"wrote {out / res.RESULTS}, " + ", ".join(p.name for p in written))
    for line in closing:
        note(line)
    if inconsistent:
        note(f"config consistency: {inconsistent} GEMM output(s) disagree or a check could not run; see report.md")
    return 1 if closing or inconsistent else 0


def closing_notes(run: RunDocument) -> list[str]:
    """The run's last lines on what failed (each a reason to exit 1): one per config that never started
    (:func:`harness.observed.never_started`: its cells are not counted again), the failed cells of the
    others, and the processes that failed although their cells did not (their interpreter exited non-zero
    after the worker finished). [] when nothing failed."""
    never = observed.never_started(run)
    lines = [f"config {config} never started: {why}" for config, why in never.items()]
    rest = [p for p in run.processes if p.config not in never]
    failed = sum(1 for p in rest for c in p.cells if c.status == "failed")
    after = sum(1 for p in rest if p.status == "failed" and not any(c.status == "failed" for c in p.cells))
    if failed:
        lines.append(f"{failed} cell measurements failed; see report.md")
    if after:
        lines.append(f"{after} worker processes failed after their cells; see report.md")
    return lines


def consistency_failures(consistency: dict) -> int:
    """Cells whose outputs disagree between two configs of a build, plus builds whose check broke."""
    builds = consistency["builds"]
    return sum(status_of(v) == FAILED for r in builds.values() for v in r.get("cells", {}).values()) + sum(
        "error" in r for r in builds.values()
    )
