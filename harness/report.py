"""``report.md`` for the pull request, rendered from ``results.json`` alone (no measuring here).

Command ``report``: ``python -m harness report results/<run>`` re-renders the report of a run.
Sections: the PR block (:mod:`harness.prbody`: one line per contrast, the deciding cells, the
launch-bound and undetermined lines), then under ``<details>`` the summary per env config
(geometric-mean speedup with its CI), per-cell tables (each contrast's cells once: stock vs patched per
config under Cells, the other contrasts under Contrasts; speedup = B time / A time, one definition),
what the undetermined cells need (:mod:`harness.undetermined`), correctness (relative error vs float64
per config and build), failures and skips with their reasons, and provenance with the command that
reproduces the run. Every comparison is a contrast's (:mod:`harness.contrasts`, judged by
:mod:`harness.policy`): this module renders them and computes none.
Long tables are folded in ``<details>`` so the PR stays readable. Plots (``harness.plots``) are
written next to it and linked: ``contrast-<n>.png`` (one forest plot per contrast, stock vs patched per
config among them) and ``latency-<family>.png`` (only where a line has more than one size).

Deterministic: the same results.json gives byte-identical report.md and PNGs (exact statistics,
no resampling, no render timestamp), so ``report`` can re-create them from results.json alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path

from harness import contrasts as con
from harness import document as doc
from harness import macos, observed, outdir, plots, prbody, stats
from harness import undetermined as und
from harness.bench import timer
from harness.bench.accuracy import UNINFORMATIVE, UNKNOWN, status_of
from harness.details import (
    THRESHOLD,
    Analysis,
    Row,
    cell_of,
    config_sections,
    consistency_section,
    correctness_section,
    drift_section,
    modes_text,
    nox_command,
    other_contrasts,
    pct,
    per_config_summary,
    plural,
    provenance_section,
    short_sha,
    undetermined_section,
)
from harness.document import RunDocument
from harness.fsutil import atomic_write_text
from harness.policy import POLICY, CellClass, classify
from harness.prbody import speedup_ci


def write(directory: Path, run: RunDocument) -> list[Path]:
    """Render ``report.md`` and its PNGs into ``directory`` (atomically); returns the paths written. A file of
    those names that the harness did not write is set aside by name first (:func:`harness.outdir.make_room`);
    a stale plot of an earlier render is removed only when the harness wrote it (:func:`harness.outdir.is_ours`)."""
    run = doc.of(run)
    analysis = analyse(run)
    if outdir.is_ours(directory, STALE_SPEEDUP_PNG):
        (directory / STALE_SPEEDUP_PNG).unlink(missing_ok=True)  # an earlier render's; the contrasts plot it now
    names = [latency_png_name(f) for f in analysis.families]
    names += [plots.contrast_png_name(i) for i, _ in plots.plotted(analysis.contrasts)] + ["report.md"]
    for name in names:
        outdir.make_room(directory, name)
    written: list[Path] = []
    for family in analysis.families:
        png = plots.latency_png(
            directory / latency_png_name(family), latency_points(analysis, family), family, run.header.clock
        )
        written += [png] if png else []
    written += plots.contrast_pngs(directory, analysis.contrasts, stale=lambda p: outdir.is_ours(directory, p.name))
    path = directory / "report.md"
    atomic_write_text(path, render(run, analysis))
    return [path, *written]


def plot_digests(run: RunDocument) -> dict[str, str]:
    """File name -> :func:`harness.plots.data_digest` of every PNG :func:`write` draws for ``run``, without
    drawing: the digest each PNG carries as its ``Description`` text, so a committed PNG can be checked
    against its results.json in a fraction of the time of a render."""
    run = doc.of(run)
    analysis = analyse(run)
    found = {
        latency_png_name(f): plots.latency_digest(latency_points(analysis, f), f, run.header.clock)
        for f in analysis.families
    }
    return {**{k: v for k, v in found.items() if v}, **plots.contrast_digests(analysis.contrasts)}


#: what earlier versions drew: stock vs patched per config at one ±2 % band, the same cells as the
#: ``patched/C`` vs ``stock/C`` contrast plots (which draw each cell's own band); removed on a re-render
STALE_SPEEDUP_PNG = "speedup.png"


def latency_points(analysis: Analysis, family: str) -> list[plots.LatencyPoint]:
    """The latency plot's points of one workload family: per (build, config, cell) with a median."""
    return [
        plots.LatencyPoint(f"{b} / {config}", r.cell.op, r.cell.dtype, r.cell.flop, r.mid[b], *r.spread[b])
        for config, rows in analysis.rows.items()
        for r in rows
        if r.cell.family == family
        for b in analysis.builds
        if r.mid.get(b) and r.spread.get(b)
    ]


def latency_png_name(family: str) -> str:
    return f"latency-{family}.png"


def round_series(run: RunDocument, config: str, build: str) -> list[float]:
    """One number per round for the drift check of one (build, config): the median over cells of each
    cell's per-process time divided by that cell's median over all rounds (1.0 = typical); adaptive
    rounds count with the cells they measured; records below the timer's resolution do not count
    (:attr:`harness.document.CellRecord.below_resolution`). Dimensionless, in round order.

    Each cell counts in the time it is judged on: device time for a launch-bound cell whose every
    process of this side has it (above its clock's resolution), host time otherwise. Host time of a
    launch-bound cell sits at one of two per-process levels (docs/timing.md), and a late adaptive round
    measures 1-4 such cells: in an H200 A/A (docs/examples/h200-aa-device-time) host time read as a
    drift of -2.7 % to -4.4 % in three (build, config)s whose device and kernel-bound times were stable."""
    per_round: dict[int, list[float]] = {}
    for key in run.keys_of(config):
        records = [r for r in run.records(config, key, build) if r.measured and not r.below_resolution]
        if not records:
            continue
        every = tuple(r for b in run.header.builds for r in run.records(config, key, b))
        rounds = tuple(r.round for r in records)
        on_device = (
            classify(every) == CellClass.LAUNCH_BOUND
            and all(r.device_median() is not None for r in records)
            and not con.unresolved_device(tuple(records), rounds)
        )
        time = doc.CellRecord.device_median if on_device else doc.CellRecord.median
        typical = statistics.median(time(r) for r in records)
        for r in records:
            per_round.setdefault(r.round, []).append(time(r) / typical)
    return [statistics.median(per_round[rnd]) for rnd in sorted(per_round)]


def analyse(run: RunDocument) -> Analysis:
    """Per config and cell: each build's medians and IQRs and the cell's class; every contrast of the
    run (:func:`harness.contrasts.evaluate_all`: stock vs patched per config is one, judged and summarised
    there, never here); per (build, config): drift; what the undetermined cells need (:mod:`harness.undetermined`)."""
    run = doc.of(run)
    builds = list(run.header.builds)
    ab = builds == ["stock", "patched"]
    rows: dict[str, list[Row]] = {}
    drifts: dict[tuple[str, str], stats.Drift] = {}
    for config in run.header.configs:
        rows[config] = []
        for key in run.keys_of(config):
            medians = {b: [r.median() for r in run.records(config, key, b) if r.measured] for b in builds}
            records = [r for b in builds for r in run.records(config, key, b)]
            row = Row(
                cell_of(key),
                medians,
                {b: (stats.process_median(m) if m else None) for b, m in medians.items()},
                {b: (stats.iqr(m) if m else None) for b, m in medians.items()},
                classify(records),
                list(con._notes(records)),
            )
            rows[config].append(row)
        for b in builds:
            drifts[(b, config)] = stats.drift(round_series(run, config, b), threshold=THRESHOLD)
    families = sorted({r.cell.family for rs in rows.values() for r in rs if any(r.mid.values())})
    results = con.evaluate_all(run)
    per_config = {
        r.contrast.a.config: r
        for r in results
        if (r.contrast.a.build, r.contrast.b.build) == ("patched", "stock")
        and r.contrast.a.config == r.contrast.b.config
        and not r.contrast.ops
        and not r.contrast.dtypes
    }
    floors = und.noise_floors(results)
    never = observed.never_started(run)  # nothing measured: no verdict to wait for, no round to add
    found = [
        f
        for f in und.needs(results, floors)
        if not {f.result.contrast.a.config, f.result.contrast.b.config} & set(never)
    ]
    resume = und.resume(run, results, found) if found else None
    return Analysis(builds, ab, rows, results, per_config, drifts, families, floors, found, resume)


def _what_was_compared(run: RunDocument) -> list[str]:
    """Warnings a reviewer needs before the numbers: is the series in either build, are the builds
    the same, do they differ in variant (CPU-only vs CUDA)."""
    builds = list(run.header.builds)
    prov = {b: run.builds[b].provenance for b in builds}
    notes = []
    markers = run.evidence.markers
    marker_hits = {
        b: {k: bool(v) for k, v in prov[b]["variables_in_libraries"].items() if k in markers} for b in builds
    }
    for marker in sorted({k for hits in marker_hits.values() for k in hits}):
        where = [b for b in builds if marker_hits[b].get(marker)]
        if not where:
            notes.append(
                f"> **Note:** neither build's libraries contain `{marker}`, so this run compares two torch "
                "builds, not the patch series (or the code that reads it is not compiled for this platform)."
            )
        elif where != ["patched"]:
            notes.append(f"> **Note:** `{marker}` is found in: {', '.join(where)} (expected: patched only).")
    if run.header.plant_k:
        notes.append(
            f"> **Calibration:** the patched side ran every GEMM with K grown by at least "
            f"{run.header.plant_k:.0%} (`--plant-k`; both sides are otherwise the same torch): every "
            "kernel-bound GEMM cell whose grown K really costs more than the band should come out slower "
            "(what K' costs on the device: benchmarks/planted_cost.py); SDPA cells are unchanged."
        )
    elif len(builds) == 2 and same_identity(run, *builds):
        inputs = [run.builds[b].input for b in builds]
        if inputs[0].get("sha256") == inputs[1].get("sha256"):
            notes.append(f"> **Note:** both builds are the same torch (version, git hash, wheel): {prbody.AA_WORDS}.")
        else:
            shown = ", ".join(
                f"{b}: {i.get('kind')} `{Path(str(i.get('value'))).name}`" for b, i in zip(builds, inputs)
            )
            notes.append(
                f"> **Note:** both builds are the same torch (version `{prov[builds[0]]['torch_version']}`, "
                f"git hash `{short_sha(prov[builds[0]]['git_version'])}`"
                + (", source tree" if run.builds[builds[0]].tree else "")
                + f") although their files differ ({shown}): {prbody.AA_WORDS}."
            )
    variants = {
        b: (f"CUDA {prov[b]['cuda_version']}" if prov[b].get("cuda_version") else "CPU-only")
        + (" + MPS" if prov[b]["mps_built"] else "")
        for b in builds
    }
    versions = {b: run.builds[b].torch_version for b in builds}
    if len(set(variants.values())) > 1 or (len(builds) == 2 and len(set(versions.values())) > 1):
        differ = [w for w, d in (("versions", versions), ("variants", variants)) if len(set(d.values())) > 1]
        notes.append(
            f"> **Note:** not an A/A run: the builds are different torch {' and '.join(differ)} ("
            + "; ".join(f"{b}: torch {versions[b]}, {variants[b]}" for b in builds)
            + f"); differences may come from the {' or '.join(w[:-1] for w in differ)}, not from a patch."
        )
    return [line for note in notes for line in (note, "")]  # one blockquote each


#: cells a first-screen note names before it says "and N more"
NAMED_CELLS = 6


def checked(run: RunDocument) -> list[tuple[str, str, str, Mapping]]:
    """Every accuracy check record of the run: ``(config, cell key, build, check)``, in process order."""
    return [(r.config, r.key, r.build, r.check) for r in run.cell_records() if isinstance(r.check, Mapping)]


def _named(items: list[str]) -> str:
    return prbody.Listed(tuple(items)).names(NAMED_CELLS)


def _cell_words(key: str) -> str:
    cell = cell_of(key)
    return f"{cell.op} {cell.label} {cell.dtype}"


def _claimed(run: RunDocument) -> list:
    """The run's contrasts that claim something (a claim rests on the checks of its sides)."""
    return [c for c in prbody.declared(run) if c.claim != "none"]


def _rests_on(run: RunDocument, build: str, configs: tuple[str, ...], key: str) -> bool:
    """Whether a claimed contrast compares ``build`` under every one of ``configs`` on cell ``key``."""
    cell = cell_of(key)
    return any(
        c.covers(cell.op, cell.dtype)
        and all(any((s.build, s.config) == (build, config) for s in (c.a, c.b)) for config in configs)
        for c in _claimed(run)
    )


def check_notes(run: RunDocument) -> tuple[list[str], list[str]]:
    """Lines about the checks themselves (harness.bench.accuracy), as (first screen, details): checks whose
    bound is too loose to fail on a plainly wrong output (**check uninformative**, with bound and error),
    the routed kernel's errors over the default path's bound (**finding**, first screen), builds whose
    base could not be told, and uninformative consistency pairs. A note about a config's own check bound
    is on the first screen only when a claimed contrast rests on one of its checks; else in the details."""
    notes, aside = [], []
    records = checked(run)
    loose = [
        (f"`{c}` {_cell_words(k)} on {b} (bound {r['bound']:.3g}, error {_err(r['rel_error'])})", (b, (c,), k))
        for c, k, b, r in records
        if status_of(r) == UNINFORMATIVE
    ]
    if loose:
        (notes if any(_rests_on(run, *where) for _, where in loose) else aside).append(
            "> **Check uninformative:** "
            + prbody.Listed(tuple(t for t, _ in loose)).counted(
                "accuracy check(s) whose bound is too loose to fail on a plainly wrong output (twice the bound "
                "exceeds the smallest planted defect's error, docs/env-configs.md)",
                NAMED_CELLS,
            )
            + ". Their errors are recorded, not passed."
        )
    finding = [
        f"`{c}` {_cell_words(k)} on {b}: {r['rel_error']:.2e} > {r['default_bound']:.1e}"
        for c, k, b, r in records
        if r.get("default_bound") is not None and r.get("rel_error") is not None and r["rel_error"] > r["default_bound"]
    ]
    if finding:
        notes.append(
            "> **Finding:** "
            + prbody.Listed(tuple(finding)).counted(
                "check(s) on a routed kernel (accumulating in the input dtype, or in an accumulator not stated "
                "for its base) that err beyond the default path's (float32-accumulation) bound, evidence about "
                "that kernel",
                NAMED_CELLS,
            )
            + "."
        )
    unknown = sorted({b for _, _, b, r in records if r.get("accumulator") == UNKNOWN})
    for b in unknown:
        told = run.builds[b].base if b in run.builds else None
        how, base = (told or {}).get("how", "no base recorded"), (told or {}).get("ref")
        where = f"on base {base} it is not stated in series.toml" if base else f"the base could not be told ({how})"
        aside.append(
            f"> **Note:** build {b}: the accumulator of its routed kernels is unknown ({where}), so their "
            "checks use the looser (input-dtype accumulation) bound."
        )
    pairs = [
        (f"{_cell_words(k)} on {b} (bound {v['bound']:.2g})", (b, k))
        for b, result in (run.consistency.builds if run.consistency else {}).items()
        for k, v in result.cells.items()
        if status_of(v) == UNINFORMATIVE
    ]
    if pairs:
        a, b = run.consistency.pair
        rests = any(_rests_on(run, build, (a, b), k) for _, (build, k) in pairs)
        (notes if rests else aside).append(
            "> **Check uninformative:** "
            + prbody.Listed(tuple(t for t, _ in pairs)).counted(
                f"`{a}` vs `{b}` consistency check(s) whose sum of bounds is too loose to fail on a wrong side",
                NAMED_CELLS,
            )
            + "."
        )
    return [line for note in notes for line in (note, "")], [line for note in aside for line in (note, "")]


def _err(x: float | None) -> str:
    return "–" if x is None else f"{x:.2e}"


def same_identity(run: RunDocument, a: str, b: str) -> bool:
    """Whether two builds are the same build: torch version + git hash + (for harness-built wheels,
    both sides) the manifest's source tree. The wheel's bytes do not count: a rebuilt wheel with a
    different zip comment, or a wheel and the requirement of the same torch, are the same build."""
    ba, bb = doc.of(run).builds[a], doc.of(run).builds[b]
    if (ba.torch_version, ba.git_version) != (bb.torch_version, bb.git_version):
        return False
    return ba.tree is None or bb.tree is None or ba.tree == bb.tree


#: distinct stderr lines the first-screen note quotes before it says "and N more"
STDERR_SHOWN = 4
#: where a worker's own failure begins on its stderr (Python's traceback header): lines from it on are the
#: failure's (its record's reason), not the build's start-up output
TRACEBACK = "Traceback (most recent call last):"


def _startup_lines(proc: doc.Process) -> list[str]:
    """A process's stderr lines up to its traceback: what the build printed besides the worker's failure."""
    lines = list(proc.stderr)
    return lines[: lines.index(TRACEBACK)] if TRACEBACK in lines else lines


def stderr_note(run: RunDocument) -> list[str]:
    """One first-screen note with what the builds wrote to stderr outside any worker's failure (warnings at
    start-up: torch's NumPy warning, a deprecation), each distinct line once however many processes wrote
    it, at most :data:`STDERR_SHOWN` of them; [] when no process wrote any. Processes whose interpreter did
    not start are left out (:func:`harness.observed.never_started` says why)."""
    procs = [p for p in run.processes if not p.did_not_start]
    wrote = [p for p in procs if _startup_lines(p)]
    if not wrote:
        return []
    lines = list(dict.fromkeys(line for p in wrote for line in _startup_lines(p)))
    builds = ", ".join(dict.fromkeys(p.build for p in wrote))
    shown = "; ".join(f"`{observed.short_line(line)}`" for line in lines[:STDERR_SHOWN])
    more = f" and {len(lines) - STDERR_SHOWN} more line(s)" if len(lines) > STDERR_SHOWN else ""
    return [
        f"> **Note:** the builds ({builds}) wrote to stderr in {len(wrote)} of {len(procs)} worker processes, "
        f"outside any measurement (each line once; all of them in raw/<process>.stderr): {shown}{more}.",
        "",
    ]


def never_started_lines(run: RunDocument) -> list[str]:
    """The first lines of the report and the PR block: one per config that never started
    (:func:`harness.observed.never_started`)."""
    return [
        line
        for config, why in observed.never_started(run).items()
        for line in (f"> **Error:** config `{config}` never started: {why}.", "")
    ]


def process_failures(run: RunDocument) -> list[str]:
    """Failures and skips lines of the processes that failed although none of their cells did (the build's
    interpreter exited non-zero after the worker finished): the process, its reason and, as context, its
    last stderr lines that the stderr note does not already quote."""
    noted = {line for p in run.processes if not p.did_not_start for line in _startup_lines(p)}
    out = []
    for p in run.processes:
        if p.status != "failed" or any(c.status == "failed" for c in p.cells):
            continue
        rest = [line for line in p.stderr if line not in noted][-3:]
        context = (
            "; its last stderr lines: " + " / ".join(f"`{observed.short_line(x)}`" for x in rest)
            if rest
            else ("; its stderr holds only the lines of the note at the top" if p.stderr else "; no stderr")
        )
        out.append(f"- process `{p.name}` ({p.build}, `{p.config}`): {p.reason or 'no reason recorded'}{context}")
    return out


def launch_bound_line(run: RunDocument, analysis: Analysis) -> list[str]:
    """The PR block's one line on launch-bound cells (stock vs patched per config): how many, their band and
    floor, and which did not reach the floor and why (the adaptive rounds' stop reason)."""
    rows = [(c, r) for c, result in analysis.per_config.items() for r in result.rows]
    launch = [(c, r) for c, r in rows if r.launch_bound]
    if not launch:
        return []
    rule = POLICY.launch_bound
    kernel = [(c, r) for c, r in launch if r.time == con.DEVICE]
    host = [(c, r) for c, r in launch if r.time != con.DEVICE]
    head = (
        f"**Launch-bound: {len(launch)} of {len(rows)} stock-vs-patched cells** (the device waited for the host: in "
        "more than a third of the processes the host took ≥ 90% of the block time to enqueue the calls)"
    )
    head += ","
    if kernel:
        text = head[:-1] + "; " + device_time_text(run, kernel, len(launch))
        if not host:
            return [text + ".", ""]
        head = text + f". The other {len(host)} (without device time on both sides) are"
    short = [(c, r) for c, r in host if len(r.rounds) < rule.floor]
    text = head + f" judged on host time at ±{rule.band:.0%} with ≥ {rule.floor} processes per side"
    if not short:
        return [text + "; every one reached that floor.", ""]
    adaptive = run.header.adaptive
    stopped = adaptive.stopped if adaptive else {}
    why = {
        "budget": f"the next adaptive round (~{stopped.get('next_round_s', 0):.0f} s) did not fit the "
        f"{stopped.get('left_s', 0):.0f} s left of --budget-s",
        "max_rounds": "the adaptive rounds reached their maximum",
    }.get(
        stopped.get("why"),
        "the run had no adaptive rounds"
        if not adaptive
        else "its adaptive rounds ended first; this results.json predates the record of why",
    )
    reachable = {id(r): und.reaches_band_at_floor(r) for _, r in short}
    wide = [(c, r) for c, r in short if not reachable[id(r)]]
    rest = [(c, r) for c, r in short if reachable[id(r)]]
    parts = []
    if wide:
        sds = sorted(und.spread(r) for _, r in wide)
        lo, hi = f"{sds[0]:.0%}", f"{sds[-1]:.0%}"
        parts.append(
            f"{len(wide)} could not reach a verdict at the floor anyway (their spread between processes, sd "
            f"{lo if lo == hi else f'{lo}-{hi}'}, leaves the CI wider than ±{rule.band:.0%} at {rule.floor} "
            "processes; adaptive rounds measure such cells only once the kernel-bound cells converged)"
        )
    if rest:
        listed = prbody.Listed(tuple(f"`{c}` {r.cell.op} {r.cell.label} {r.cell.dtype}" for c, r in rest))
        parts.append(listed.counted(f"did not reach it ({why})", NAMED_CELLS))
    return [text + "; " + "; ".join(parts) + ".", ""]


def _tally(verdicts: list[str]) -> str:
    """``3 equivalent, 1 undetermined`` in the order of :data:`harness.stats.VERDICTS`."""
    return ", ".join(f"{verdicts.count(v)} {v}" for v in stats.VERDICTS if verdicts.count(v))


def device_time_text(run: RunDocument, kernel: list[tuple[str, con.ContrastRow]], launch: int) -> str:
    """What the launch-bound line says of the ``kernel`` rows (launch-bound cells judged on device time,
    :data:`harness.contrasts.DEVICE`): how device time was taken, the kernel verdicts, the dispatch (host
    time) verdicts and the cells whose dispatch changed, and the cells whose host time sits at two
    per-process levels (modes, :func:`harness.stats.modes`)."""
    methods = sorted(
        {
            rec.measurement.get("device_method")
            for c, row in kernel
            for b in run.header.builds
            for rec in run.records(c, row.cell.key, b)
            if rec.measured and rec.measurement.get("device_method")
        }
    )
    how = DEVICE_METHODS.get(methods[0], methods[0]) if len(methods) == 1 else ", ".join(methods)
    band, lb = POLICY.kernel_bound.band, POLICY.launch_bound
    which = "all" if len(kernel) == launch else f"{len(kernel)} of the {launch}"
    below = [r for _, r in kernel if r.dispatch.cmp.cause == stats.Cause.BELOW_FLOOR]
    judged = [r.dispatch.cmp.verdict for _, r in kernel if r not in below]
    dispatch = _tally([r.dispatch.cmp.verdict for _, r in kernel])
    if below:
        dispatch = f"not judged in {len(below)}: fewer than {lb.floor} processes per side" + (
            f"; {_tally(judged)}" if judged else ""
        )
    text = (
        f"{which} are judged on device time ({how}: the kernels alone, without the host's "
        f"launch gaps) at ±{band:.0%} (**kernel**: {_tally([r.cmp.verdict for _, r in kernel])}), and apart on "
        f"host time at ±{lb.band:.0%} with ≥ {lb.floor} processes per side (**dispatch**: {dispatch}; not counted "
        "in the claims)"
    )
    moved = [(c, r) for c, r in kernel if r.dispatch.cmp.verdict in (stats.FASTER, stats.SLOWER)]
    if moved:
        text += "; " + prbody.Listed(
            tuple(
                f"`{c}` {r.cell.op} {r.cell.label} {r.cell.dtype} {speedup_ci(r.dispatch.cmp)} {r.dispatch.cmp.verdict}"
                for c, r in moved
            )
        ).counted("cells whose dispatch changed", NAMED_CELLS)
    levels = [(c, r) for c, r in kernel if r.dispatch.cmp.bimodal]
    if levels:
        c, r = levels[0]
        text += (
            f"; host time at two per-process levels (modes) in {len(levels)} of the {len(kernel)} judged on "
            f"device time, e.g. `{c}` "
            f"{r.cell.op} {r.cell.label} {r.cell.dtype} (shares of processes: {modes_text(r.dispatch.cmp)}; "
            "docs/timing.md, "
            '"Two host-time levels")'
        )
    return text


#: how device time was taken, in the PR block's words (``measurement.device_method``)
DEVICE_METHODS = {
    "cuda-graph+events": "the calls captured once in a CUDA graph and replayed, timed by CUDA events",
    "mps-profiler-gpu-time": "each operation's own command-buffer GPU time from the MPS profiler's log, in a probe "
    "process that commits and waits for every operation (a serialised schedule)",
}


def _series_ops(run: RunDocument) -> list[str]:
    """The ops of the run's cells that are not built-in GEMM or SDPA ops (a series' workload module's)."""
    return list(dict.fromkeys(c.op for c in map(cell_of, run.header.cells) if c.family not in ("gemm", "sdpa")))


def _resume_text(resume: und.Resume) -> str:
    """What the resume command runs: rounds, worker processes and minutes (or why the time is unknown)."""
    if resume.seconds is None:
        time_text = "time unknown (this run's processes carry no start time)"
    else:
        time_text = f"~{math.ceil(resume.seconds / 60)} min of worker time"
    if resume.adaptive:
        return (
            f"The command below continues the adaptive rounds for up to {plural(resume.rounds, 'round')} "
            f"({resume.until} in all), which run {resume.processes} worker processes, {time_text}"
        )
    return (
        f"The command below adds {plural(resume.rounds, 'round')} ({resume.until} in all) of every cell under every "
        f"build and config, which run {resume.processes} worker processes, {time_text}"
    )


#: the denominator of the PR block's tally lines, named after what it counts
PER_CONFIG_CELLS = "stock-vs-patched cells"


def _need_words(f: und.Need, per_config: Mapping) -> str:
    """One undetermined cell of one contrast, named by its config for a stock-vs-patched cell
    (`` `default` mm M512 N512 K512 float16``), by the contrast's sides otherwise."""
    c = f.result.contrast
    config = c.a.config if per_config.get(c.a.config) is f.result else None
    where = f"`{config}`" if config else f"`{c.a.label}` vs `{c.b.label}`"
    return f"{where} {f.row.cell.op} {f.row.cell.label} {f.row.cell.dtype}"


def _tally_head(analysis: Analysis, found: list[und.Need]) -> str:
    """``**N of M stock-vs-patched cells undetermined**`` (the block's one denominator), with the other
    contrasts' undetermined cells counted apart; ``of M cell verdicts of the K contrasts`` in a run without
    stock-vs-patched contrasts."""
    mine = {id(r) for r in analysis.per_config.values()}
    if not mine:
        total = sum(len(r.rows) for r in analysis.contrasts)
        return (
            f"**{len(found)} of {total} cell verdicts of the {plural(len(analysis.contrasts), 'contrast')} "
            "undetermined.**"
        )
    cells = sum(len(r.rows) for r in analysis.per_config.values())
    own = [f for f in found if id(f.result) in mine]
    other = len(found) - len(own)
    if not other:
        return f"**{len(own)} of {cells} {PER_CONFIG_CELLS} undetermined.**"
    return (
        f"**{len(own)} of {cells} {PER_CONFIG_CELLS} undetermined**, and {plural(other, 'cell')} of the other "
        "contrasts (each contrast's count: its line above)."
    )


def below_resolution_line(analysis: Analysis) -> list[str]:
    """The PR block's one line on cells not judged because a process timed them below the timer's resolution
    (:func:`harness.bench.timer.below_resolution`), in every contrast; empty when none (a healthy run)."""
    found = [(result, r) for result in analysis.contrasts for r in result.below_resolution]
    if not found:
        return []
    cells = ", ".join(f"`{result.contrast.label}` {r.cell.op} {r.cell.label} {r.cell.dtype}" for result, r in found)
    return [
        f"**Below timer resolution: {plural(len(found), 'cell')}, not judged** (a process timed blocks under "
        f"{timer.RESOLVED_TICKS} ticks of its clock, {timer.resolution_floor_s('perf_counter') * 1e6:.2f} µs on the "
        f"host clock; no real block is that short: check the results.json): {cells}.",
        "",
    ]


def undetermined_lines(run: RunDocument, analysis: Analysis) -> list[str]:
    """The PR block's few lines on undetermined cells (:mod:`harness.undetermined`): how many (of the block's
    one denominator, :func:`_tally_head`), the noise floor per config, the MDE range, the processes a verdict
    needs, what the resume command runs (processes, minutes) and the cells it cannot bring to a verdict and
    why, and the command -- only where it can decide at least one cell; otherwise what would (more
    processes than the cap allows, a quieter machine, device time for launch-bound cells)."""
    found = analysis.needs
    if not found:
        return []
    resume = analysis.resume or und.resume(run, analysis.contrasts, found)
    floors = "; ".join(
        f"`{config}` " + ", ".join(f"{pct(f.sd)} {f.cls.value}" for f in analysis.floors if f.config == config)
        for config in dict.fromkeys(f.config for f in analysis.floors)
    )
    mdes = [f.mde for f in found if math.isfinite(f.mde)]
    mde = f"{pct(min(mdes))}-{pct(max(mdes))}" if mdes else "–"
    reach = [f for f in found if f.processes is not None]
    far = len(found) - len(reach)
    text = (
        _tally_head(analysis, found) + " Noise floor (sd of the log per-process medians "
        f"between processes): {floors or '–'}. At the processes they had, the smallest change they could show "
        f"(MDE: band + CI half-width) is {mde}"
        + (f"; a verdict needs up to {max(f.processes for f in reach)} processes per side" if reach else "")
        + (
            f"; {far} would need more than {und.MAX_PROCESSES} (spread too wide, or the estimate at the band's edge)"
            if far
            else ""
        )
        + "."
    )
    decides = resume.argv is not None and len(resume.beyond) < len(found)
    if resume.beyond:
        given = max(g for f, g in zip(found, resume.given, strict=True) if f in resume.beyond)
        why = (
            f"adaptive rounds stop at {und.MAX_ROUNDS} rounds in all, runner.MAX_ROUNDS, so it gives them at most "
            f"{given} processes per side"
            if resume.adaptive
            else f"they need more than the {given} processes per side it gives"
        )
    if decides:
        text += " " + _resume_text(resume) + "."
        if resume.beyond:
            beyond = prbody.Listed(tuple(_need_words(f, analysis.per_config) for f in resume.beyond))
            text += " " + beyond.counted(f"of them it cannot bring to a verdict ({why})", NAMED_CELLS) + "."
    else:
        text += " " + _what_would(run, analysis, found, resume, why if resume.beyond else "")
    text += " Per cell, the CI half-width predicted after resuming: Details, Undetermined cells."
    if decides:
        text += " Resume the run:"
    lines = [text, ""]
    if decides:
        lines += ["```", nox_command(resume.argv), "```", ""]
    return lines


def _what_would(run: RunDocument, analysis: Analysis, found: list[und.Need], resume: und.Resume, why: str) -> str:
    """Said instead of a resume command that can decide no cell: why, and what would decide them."""
    text = f"Resuming this run cannot bring any of them to a verdict{f' ({why})' if why else ''}. What would: "
    given = max(resume.given, default=0)
    ways = [f"more processes per side than the {given} a resume of this run can give"]
    ways.append("a quieter machine (less spread between processes)")
    host = [f for f in found if f.row.launch_bound and f.row.time != con.DEVICE]
    if run.header.device == "cuda" and host:
        ways.append(
            f"device time for the {plural(len(host), 'launch-bound cell')} judged on host time (a run that "
            "records it: docs/timing.md, \"Device time\")"
        )
    return text + ", ".join(ways[:-1]) + f" or {ways[-1]}."


def render(run: RunDocument, analysis: Analysis | None = None) -> str:
    """The markdown report of one run (see module docstring). Deterministic for the same document."""
    run = doc.of(run)
    analysis = analysis or analyse(run)
    head = run.header
    unit, scale = ("TFLOP/s", 1e12) if head.device != "cpu" else ("GFLOP/s", 1e9)
    names = " vs ".join(f"{b} (torch {run.builds[b].torch_version})" for b in analysis.builds)
    out = [f"# {'A/B' if analysis.ab else 'Benchmark'}: {names} on `{head.device}`", ""]
    if not head.finished:
        done, planned = len(run.processes), head.planned_processes
        out += [
            f"> **Incomplete run:** {done} of {planned} planned worker processes finished before it was "
            "interrupted; the numbers below use those. Run the same command again to resume.",
            "",
        ]
    out += macos.release_flag_lines({b: {"build": build.manifest} for b, build in run.builds.items()})
    summaries, sections, problems = config_sections(run, analysis, unit, scale)
    drifted = [f"`{c}` {b}" for (b, c), d in analysis.drifts.items() if d.verdict == "drift"]
    errors = never_started_lines(run) + [line for note in observed.error_notes(run) for line in (note, "")]
    if drifted:
        errors += [f"> **Drift:** {', '.join(drifted)} changed over the run (see Drift in the details).", ""]
    tail = below_resolution_line(analysis) + launch_bound_line(run, analysis) + undetermined_lines(run, analysis)
    top, aside = check_notes(run)
    notes = errors + _what_was_compared(run) + top + stderr_note(run)
    out += prbody.render_block(run, analysis.contrasts, notes, tail)
    out += [
        "<details><summary><b>Details</b>: per-config summary, every cell, undetermined cells, correctness, "
        "consistency, drift, failures, provenance</summary>",
        "",
    ]
    if analysis.ab:
        index = {id(r): i for i, r in plots.plotted(analysis.contrasts)}
        shown = [
            f"[{c}]({plots.contrast_png_name(index[id(r)])})" for c, r in analysis.per_config.items() if id(r) in index
        ]
        plotted = f"Forest plots of these contrasts, per config: {', '.join(shown)}." if shown else ""
        out += per_config_summary(head, summaries) + ([plotted, ""] if plotted else [])
    out += [
        "## Cells",
        "",
        f"Medians of the per-process medians, ±half their interquartile range; {unit} = FLOP per call / median "
        "(GEMM 2·M·N·K, SDPA 4·B·H·L²·D, halved when causal"
        + "".join(f"; {op}: its workload module's own formula" for op in _series_ops(run))
        + "); % of peak against the device's dense datasheet peak where known (harness/peaks.py)."
        + (
            " Per config, the `patched/C` vs `stock/C` contrast over the rounds both builds ran." if analysis.ab else ""
        ),
        "",
    ] + sections
    out += [
        f"![latency vs size: {f}]({latency_png_name(f)})"
        for f in analysis.families
        if plots.sizes_vary(latency_points(analysis, f))
    ] + [""]
    out += other_contrasts(run, analysis, unit, scale)
    out += [f"![{r.contrast.label}]({plots.contrast_png_name(i)})" for i, r in plots.plotted(analysis.contrasts)] + [""]
    out += undetermined_section(analysis)
    out += (["## Notes on the checks", "", *aside]) if aside else []
    out += correctness_section(run, analysis)
    out += consistency_section(run.consistency, analysis.builds)
    out += observed.details(run)
    out += drift_section(analysis, list(head.configs))
    problems = process_failures(run) + problems
    out += ["## Failures and skips", ""] + (problems or ["None."]) + [""]
    out += ["## Provenance", ""] + provenance_section(run) + [""] + prbody.collect_env_lines(run)
    out += ["</details>", ""]
    return "\n".join(out)
