"""The details of ``report.md`` (under its ``<details>``): the per-config summary and cell tables, every
contrast's full table, the undetermined cells, correctness, config consistency, drift and provenance.

:mod:`harness.report` computes the :class:`Analysis` once and renders the PR block; this module renders the
tables from the typed document (:class:`harness.document.RunDocument`) and the analysis, computing no verdict.
"""

from __future__ import annotations

import math
import shlex
import statistics
from dataclasses import dataclass, field

from harness import contrasts as con
from harness import macos, stats
from harness import undetermined as und
from harness.bench import timer
from harness.bench.accuracy import FAILED, UNINFORMATIVE, status_of
from harness.bench.workloads import Cell
from harness.document import BuildConsistency, Consistency, Header, RunDocument
from harness.errors import ResultsError
from harness.peaks import peak_tflops
from harness.policy import POLICY, CellClass
from harness.stats import UNDETERMINED


@dataclass
class Row:
    """One cell of one config: per-build process medians (seconds), their median and IQR, its class
    (:func:`harness.policy.classify`) and its failed/skipped notes. No comparison: those are the
    contrasts' (:class:`Analysis` ``contrasts``)."""

    cell: Cell
    medians: dict[str, list[float]]
    mid: dict[str, float | None]
    spread: dict[str, tuple[float, float] | None]
    cls: CellClass
    notes: list[str] = field(default_factory=list)


@dataclass
class Analysis:
    """Everything the markdown and the plots show, computed once from results.json: per-build medians
    (``rows``), every contrast evaluated once (``contrasts``; stock vs patched per config among them, by
    config in ``per_config``), drift, and what the undetermined cells need (``floors``, ``needs``)."""

    builds: list[str]
    ab: bool
    rows: dict[str, list[Row]]
    contrasts: list[con.ContrastResult]
    per_config: dict[str, con.ContrastResult]
    drifts: dict[tuple[str, str], stats.Drift]
    families: list[str]
    floors: list[und.NoiseFloor] = field(default_factory=list)
    needs: list[und.Need] = field(default_factory=list)
    resume: und.Resume | None = None  # what the printed resume command gives the undetermined cells


def _us(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e6:,.1f}"


def _ratio_ci(ratio: float, low: float, high: float) -> str:
    """A patched/stock *time* ratio and its CI shown as a speedup (stock time / patched time, > 1:
    patched faster): ``1.018× [1.010, 1.025]``; the CI is omitted when it could not be computed."""
    if not (math.isfinite(ratio) and ratio > 0):
        return "–"
    if math.isfinite(low) and math.isfinite(high) and low > 0:
        return f"{1 / ratio:.3f}× [{1 / high:.3f}, {1 / low:.3f}]"
    return f"{1 / ratio:.3f}× [no CI]"


def cause_words(cause: stats.Cause, threshold: float, confidence: float, floor: int = stats.MIN_PROCESSES) -> str:
    """A verdict's :class:`harness.stats.Cause` in a few words (the CI and p have their own columns)."""
    band = f"±{threshold:.0%}"
    return {
        stats.Cause.BEYOND_BAND: f"whole CI beyond {band}",
        stats.Cause.INSIDE_BAND: f"whole CI inside {band}",
        stats.Cause.STRADDLES_BAND: f"CI crosses the {band} band edge",
        stats.Cause.BELOW_FLOOR: f"fewer than {max(floor, stats.min_processes(confidence))} processes per side"
        + (" (launch-bound)" if floor > stats.MIN_PROCESSES else "")
        + ": no verdict",
        stats.Cause.NO_PROCESSES: "no process on one side",
        stats.Cause.BAD_VALUES: "a per-process median is NaN/inf or ≤ 0 s",
        stats.Cause.ZERO_SPREAD: "zero spread on both sides (timer resolution?)",
        stats.Cause.BELOW_RESOLUTION: f"a process's blocks lasted under {timer.RESOLVED_TICKS} ticks of its clock "
        f"({timer.resolution_floor_s('perf_counter') * 1e6:.2f} µs on the host clock): not judged",
    }[cause]


def _adaptive_text(head: Header) -> list[str]:
    """One line on adaptive sampling, when the run used it."""
    adaptive = head.adaptive
    if not adaptive:
        return []
    left = sum(map(len, adaptive.unconverged.values()))
    launch = adaptive.launch_bound_target
    target = f"±{adaptive.target:.1%} (launch-bound cells ±{launch:.1%})" if launch else f"±{adaptive.target:.1%}"
    stopped = adaptive.stopped
    why = {
        "budget": f" (the next round, ~{stopped.get('next_round_s', 0):.0f} s, did not fit the "
        f"{stopped.get('left_s', 0):.0f} s left)",
        "max_rounds": " (the adaptive rounds reached their maximum)",
    }.get(stopped.get("why"), "")
    return [
        f"Adaptive sampling to a CI half-width of {target}: {adaptive.rounds_added} round(s) "
        f"added; the worker processes had a budget of {adaptive.budget_s:g} s in all; "
        + (f"**{left} cell(s) did not converge**{why} (marked in the tables)." if left else "every cell converged."),
        "",
    ]


def _in_words(gm: stats.GeoMean) -> str:
    """The per-config summary's verdict (:func:`harness.stats.geomean_by_process`) in words."""
    change = f"patched {abs(1 - gm.gm):.1%} {'faster' if gm.gm < 1 else 'slower'}"
    p = (
        f"U-test p={gm.p_value:.2g} over {gm.n_stock}+{gm.n_patched} processes"
        if math.isfinite(gm.p_value)
        else f"{gm.n_stock}+{gm.n_patched} processes"
    )
    why = cause_words(gm.cause, gm.threshold, gm.confidence)
    if gm.verdict in (stats.FASTER, stats.SLOWER):
        return f"**{change}** ({why}, {p})"
    if gm.verdict == stats.EQUIVALENT:
        return f"equivalent ({why}, {p})"
    return f"undetermined, {change} at the point estimate ({why}; {p})"


def modes_text(cmp: stats.Comparison) -> str:
    """Each side's modes with their shares, and the speedup within each mode when both sides have the
    same number of modes (never a ratio across modes)."""
    parts = [
        f"{side} " + " / ".join(f"{_us(m.center)} µs ({m.share:.0%})" for m in found)
        for side, found in (("stock", cmp.stock_modes), ("patched", cmp.patched_modes))
    ]
    if cmp.mode_ratios:
        parts.append("speedup per mode " + " / ".join(f"{1 / m.ratio:.3f}×" for m in cmp.mode_ratios))
    return "; ".join(parts)


def short_sha(sha: str | None) -> str:
    return (sha or "unknown")[:12]


def consistency_section(section: Consistency | None, builds: list[str]) -> list[str]:
    """The cross-config consistency section (harness.checks.consistency)."""
    if not section:
        return []
    if not section.pair:
        return ["## Config consistency", "", f"- skipped: {section.skipped or 'no pair'}", ""]
    a, b = section.pair
    lines = [
        "## Config consistency",
        "",
        f"GEMM outputs under `{a}` against `{b}` in the same build (first round), relative difference "
        "against the sum of both configs' accuracy bounds.",
        "",
    ]
    if section.mps_check_skipped:
        lines += [f"- {section.mps_check_skipped}"]
    if section.skipped:
        return lines + [f"- skipped: {section.skipped}", ""]
    for build in builds:
        result = section.builds.get(build) or BuildConsistency({}, "no result recorded")
        if result.error is not None:
            lines.append(f"- **{build}**: not checked: {result.error}")
            continue
        cells = result.cells
        bad = {k: v for k, v in cells.items() if status_of(v) == FAILED}
        loose = {k: v for k, v in cells.items() if status_of(v) == UNINFORMATIVE}
        finite = [kv for kv in cells.items() if kv[1]["rel_diff"] is not None]
        worst = max(finite, key=lambda kv: kv[1]["rel_diff"] / kv[1]["bound"], default=None)
        text = f"- **{build}**: {len(cells) - len(bad) - len(loose)}/{len(cells)} cells agree"
        if loose:
            text += f", {len(loose)} **check uninformative** (sum of bounds too loose to fail)"
        if worst:
            text += f"; largest difference {worst[1]['rel_diff']:.2e} (bound {worst[1]['bound']:.1e}) in `{worst[0]}`"
        lines.append(
            text
            + "".join(
                f"; **differs** `{k}` "
                + (f"{v['rel_diff']:.2e} > {v['bound']:.1e}" if v["rel_diff"] is not None else v.get("reason", ""))
                for k, v in bad.items()
            )
        )
    return lines + [""]


def nox_command(command: list[str]) -> str:
    """The recorded ``python -m harness <cmd> ...`` as the nox session a user runs (README), else as is."""
    if command[:3] == ["python", "-m", "harness"] and len(command) > 3 and command[3] in ("compare", "bench"):
        return shlex.join(["nox", "-s", command[3], "--", *command[4:]])
    return shlex.join(command)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def provenance_section(run: RunDocument) -> list[str]:
    names = list(run.header.builds)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(str(fn(run.builds[b].provenance)) for b in names) + " |")

    row("torch", lambda p: p["torch_version"])
    row("git hash", lambda p: f"`{p.get('git_version') or 'unknown'}`")
    lines.append("| input | " + " | ".join(f"`{run.builds[b].input['value']}`" for b in names) + " |")
    lines.append(
        "| wheel sha256 | " + " | ".join(f"`{(run.builds[b].input.get('sha256') or '–')[:16]}`" for b in names) + " |"
    )
    markers = run.evidence.markers
    row(
        "series marker in libraries",
        lambda p: ", ".join(
            f"{k}: {'yes' if v else 'no'}" for k, v in p["variables_in_libraries"].items() if k in markers
        )
        or "–",
    )
    row("MPS built / available", lambda p: f"{p['mps_built']} / {p['mps_available']}")
    row("CUDA available", lambda p: p["cuda_available"])
    row("GPU", lambda p: p.get("gpu_name") or "–")
    row("CPU", lambda p: p["cpu_name"])
    row("OS", lambda p: p["os"].get("macos_product_version") or p["os"]["platform"])
    if any(run.builds[b].provenance.get("mac") for b in names):
        row(
            "Mac model / power / Low Power Mode",
            lambda p: " / ".join(str(p.get("mac", {}).get(k)) for k in ("model", "power_source", "low_power_mode")),
        )
    row("Python", lambda p: p["python"])
    row("torch default threads (workers used: see below)", lambda p: p["num_threads"])
    return lines + _run_lines(run) + build_rows(run) + _config_show(run)


def _run_lines(run: RunDocument) -> list[str]:
    """How the run was made: harness, timing, start-up, threads, the command to reproduce it, variables."""
    head = run.header
    timing = head.timing
    timing_text = (
        f"warm-up {timing.get('warmup_s')} s, measurement {timing.get('measure_s')} s per cell per process, "
        f"blocks of at least {timing.get('min_block_s')} s"
    )
    if timing.get("layouts", 1) > 1:
        timing_text += f"; kernel-bound cells on {timing['layouts']} memory layouts of their inputs per process"
    if timing.get("untimed_load_s"):
        timing_text += f", after {timing['untimed_load_s']} s of untimed load"
    if timing.get("duty", 1) < 1:
        timing_text += (
            f", at a duty cycle of {timing['duty']:.0%} (the device rests between blocks, so it runs at its "
            "unthrottled clock; docs/timing.md)"
        )
    if timing.get("host_bound_blocks"):
        timing_text += f"; host-bound cells {timing['host_bound_blocks']} blocks"
    startups = sorted(p.startup for p in run.processes if p.startup is not None)
    if startups:
        timing_text += (
            f"; process start-up (interpreter + import torch) median {statistics.median(startups):.1f} s, "
            f"{startups[0]:.1f}-{startups[-1]:.1f} s over {len(startups)} processes"
        )
    lines = [
        "",
        f"Harness {run.harness_version}, device `{head.device}`, "
        f"{head.rounds} round{'' if head.rounds == 1 else 's'} of fresh "
        f"processes per (build, config), order shuffled per round (seed {head.seed}); timing: {timing_text}; "
        f"torch threads in workers: {head.threads or 'torch default'}; started {head.started}, "
        f"finished {head.finished or 'not yet (interrupted)'}.",
        "",
        "Reproduce (from the torch-patch-harness checkout):",
        "",
        "```",
        nox_command(list(head.command)),
        "```",
    ]
    if head.extra_env:
        lines += [
            "",
            "Extra variables in every worker (`--env`): "
            + ", ".join(f"`{k}={v}`" for k, v in sorted(head.extra_env.items()))
            + ".",
        ]
    if head.keep_env:
        lines += ["", "Inherited variables kept (`--keep-env`): " + ", ".join(f"`{k}`" for k in head.keep_env) + "."]
    return lines


def _config_show(run: RunDocument) -> list[str]:
    """Each build's ``torch.__config__.show()``, folded."""
    lines = []
    for b in run.header.builds:
        show = run.builds[b].config_show
        if show:
            lines += [
                "",
                f"<details><summary>torch.__config__.show() of {b}</summary>",
                "",
                "```",
                show.rstrip(),
                "```",
                "",
                "</details>",
            ]
    return lines


def _throughput(cell: Cell, seconds: float | None, scale: float) -> str:
    return "–" if not seconds else f"{cell.flop / seconds / scale:.3g}"


def _median_spread(mid: float | None, spread: tuple[float, float] | None) -> str:
    """``211.1 ±0.3%``: the median of the process medians and half their IQR relative to it."""
    if mid is None:
        return "–"
    if spread is None or not mid:
        return _us(mid)
    half = (spread[1] - spread[0]) / 2 / mid
    return f"{_us(mid)} ±{half:.1%}" if half >= 0.001 else f"{_us(mid)} ±{half:.2%}"


def _peak_text(run: RunDocument, config: str, cell: Cell, seconds: float | None) -> str:
    known = peak_tflops(run.machine.gpu_name, cell.dtype, bool(run.configs[config].get("reduced_fp32")))
    if not known or not seconds:
        return "–"
    return f"{cell.flop / seconds / 1e12 / known[0]:.0%}"


def drift_section(analysis: Analysis, configs: list[str]) -> list[str]:
    lines = [
        "## Drift",
        "",
        "Per build and config: the per-round median over cells (each cell relative to its own median, in the time "
        "it is judged on: device time for a launch-bound cell that has it, whose host time sits at per-process "
        "levels) against "
        "the round index, Kendall's tau and the Theil-Sen change from the first to the last round; `drift` when "
        f"significant and at least ±{THRESHOLD:.0%} (throttling, load or warm-up of the machine over the run).",
        "",
    ]
    for config in configs:
        for b in analysis.builds:
            d = analysis.drifts[(b, config)]
            verdict = f"**{d.verdict}**" if d.verdict == "drift" else d.verdict
            lines.append(f"- `{config}` {b}: {verdict} ({d.reason})")
    return lines + [""]


def _dash(value) -> str:
    """A build manifest's field as text: ``–`` where the manifest lacks it (manifests of older builds)."""
    return "–" if value is None or value == "" else str(value)


def _code(value) -> str:
    return "–" if value is None or value == "" else f"`{value}`"


def build_rows(run: RunDocument) -> list[str]:
    """Base SHA, series and build flags from the wheels' build manifests, and whether the flags match."""
    builds = list(run.header.builds)
    manifests = {b: run.builds[b].manifest for b in builds}
    if not any(manifests.values()):
        return [
            "",
            "Build manifests: none (the inputs are not wheels built by `build_stock`/`build_patched`), so base "
            "ref, series and build flags are not recorded for this run.",
        ]
    lines = ["", "| build manifest | " + " | ".join(builds) + " |", "|---|" + "---|" * len(builds)]
    for label, fn in (
        ("base SHA", lambda m: _code(m.get("base_sha"))),
        ("series", lambda m: f"{m['series'].get('name')} {_code(m['series'].get('hash'))}" if m.get("series") else "–"),
        ("platform / build type", lambda m: f"{_dash(m.get('platform'))} / {_dash(m.get('build_type'))}"),
        ("version label", lambda m: _code(m.get("version"))),
        ("compiler", lambda m: _dash(m.get("compiler"))),
        ("CMake", lambda m: _dash(m.get("cmake"))),
        ("Metal toolchain", lambda m: macos.metal_text(m.get("metal_capability"))),
    ):
        lines.append(f"| {label} | " + " | ".join(fn(manifests[b]) if manifests[b] else "–" for b in builds) + " |")
    envs = [(manifests[b] or {}).get("environment") or {} for b in builds]
    if len(envs) == 2 and all(manifests.values()):
        differ = sorted(k for k in set(envs[0]) | set(envs[1]) if envs[0].get(k) != envs[1].get(k))
        same = [k for k in differ if k != "PYTORCH_BUILD_VERSION"]
        lines += [
            "",
            "Build flags: "
            + (
                "**identical** apart from the version label."
                if not same
                else "**differ** in " + ", ".join(f"`{k}`" for k in same) + "."
            ),
            "",
            "<details><summary>build environment (stock)</summary>",
            "",
            "```",
            *[f"{k}={v}" for k, v in sorted(envs[0].items())],
            "```",
            "",
            "</details>",
        ]
    return lines


def _notes_of(run: RunDocument, row: con.ContrastRow, config: str | None) -> list[str]:
    """A contrast row's notes: why undetermined, launch-bound, bimodal, unconverged (stock vs patched of
    ``config``, when the adaptive rounds left it above its class's target), failed/skipped."""
    cmp, notes = row.cmp, []
    if cmp.verdict == stats.UNDETERMINED:
        notes.append(cause_words(cmp.cause, cmp.threshold, cmp.confidence, cmp.floor))
    if row.launch_bound:
        notes.append("launch-bound")
    if row.time == con.DEVICE:
        d = row.dispatch.cmp
        notes.append(
            "kernel time (device); dispatch (host time) "
            f"{_us(stats.process_median(row.dispatch.a))} vs {_us(stats.process_median(row.dispatch.b))} µs, "
            f"{_ratio_ci(d.ratio, d.ci_low, d.ci_high)} {d.verdict}"
            + (f" ({cause_words(d.cause, d.threshold, d.confidence, d.floor)})" if d.verdict == UNDETERMINED else "")
            + (f", host levels: {modes_text(d)}" if d.bimodal else "")
        )
    if cmp.bimodal:
        notes.append("bimodal: " + modes_text(cmp))
    adaptive = run.header.adaptive
    if adaptive and config is not None and row.cell.key in adaptive.unconverged.get(config, ()):
        hw = cmp.half_width
        goal = POLICY.with_targets(adaptive.target, adaptive.launch_bound_target).rule(row.judged).target
        notes.append(
            f"unconverged: CI half-width {hw:.1%} > target ±{goal:.1%}"
            if math.isfinite(hw)
            else "unconverged: no CI yet"
        )
    return notes + list(row.notes)


def _verdict_text(cmp: stats.Comparison) -> str:
    """A cell's verdict column: bold when it is a change; ``below timer resolution`` for a cell that was
    not judged because a process timed blocks the clock cannot resolve."""
    if cmp.cause == stats.Cause.BELOW_RESOLUTION:
        return con.BELOW_RESOLUTION
    return f"**{cmp.verdict}**" if cmp.verdict in (stats.FASTER, stats.SLOWER) else cmp.verdict


def contrast_table(
    run: RunDocument, result: con.ContrastResult, unit: str, scale: float, config: str | None = None
) -> list[str]:
    """The full per-cell table of one contrast (the one table format of the report): A's and B's median µs
    ±IQR/2 over the paired processes, A's throughput (% of peak), speedup = B time / A time [95 % CI],
    p, verdict, notes. ``config``: the config of a stock-vs-patched contrast (its unconverged notes)."""
    a, b = result.contrast.a, result.contrast.b
    head = [
        "cell",
        "dtype",
        f"{a.label} µs ±IQR/2",
        f"{b.label} µs ±IQR/2",
        f"{a.label} {unit} (% of peak)",
        "speedup [95% CI]",
        "p (U test)",
        "verdict",
        "notes",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result.rows:
        cmp, cell = r.cmp, r.cell
        mid_a = stats.process_median(r.a) if r.a else None
        mid_b = stats.process_median(r.b) if r.b else None
        peak = _peak_text(run, a.config, cell, mid_a)
        cols = [
            f"{cell.op} {cell.label}",
            cell.dtype,
            _median_spread(mid_a, stats.iqr(r.a) if r.a else None),
            _median_spread(mid_b, stats.iqr(r.b) if r.b else None),
            _throughput(cell, mid_a, scale) + ("" if peak == "–" else f" ({peak})"),
            _ratio_ci(cmp.ratio, cmp.ci_low, cmp.ci_high),
            f"{cmp.p_value:.2g}" if math.isfinite(cmp.p_value) else "–",
            _verdict_text(cmp),
            "; ".join(_notes_of(run, r, config)),
        ]
        lines.append("| " + " | ".join(cols) + " |")
    return lines


def _bench_rows(run: RunDocument, analysis: Analysis, config: str, scale: float) -> list[str]:
    """One config's table of a one-build run (no comparison): median ±IQR/2, throughput, processes, notes."""
    b = analysis.builds[0]
    head = ["cell", "dtype", "median µs ±IQR/2", f"{'TFLOP/s' if scale == 1e12 else 'GFLOP/s'} (% of peak)"]
    lines = ["| " + " | ".join(head + ["processes", "notes"]) + " |", "|" + "---|" * (len(head) + 2)]
    for r in analysis.rows[config]:
        peak = _peak_text(run, config, r.cell, r.mid[b])
        notes = (["launch-bound"] if r.cls == CellClass.LAUNCH_BOUND else []) + r.notes
        cols = [f"{r.cell.op} {r.cell.label}", r.cell.dtype, _median_spread(r.mid[b], r.spread[b])]
        cols += [_throughput(r.cell, r.mid[b], scale) + ("" if peak == "–" else f" ({peak})"), str(len(r.medians[b]))]
        lines.append("| " + " | ".join(cols + ["; ".join(notes)]) + " |")
    return lines


def config_sections(run: RunDocument, analysis: Analysis, unit: str, scale: float) -> tuple[list, list, list]:
    """(per-config summary lines, per-config cell tables, failure/skip lines) of every config. An A/B run's
    table per config is its stock-vs-patched contrast's (:attr:`Analysis.per_config`)."""
    summaries, sections, problems = [], [], []
    for config in run.header.configs:
        env = run.configs[config]["env"]
        env_text = " ".join(f"{k}={v}" for k, v in env.items()) or "no variables"
        problems += [
            f"- `{config}` {r.cell.op} {r.cell.label} {r.cell.dtype}: {note}"
            for r in analysis.rows[config]
            for note in r.notes
        ]
        result = analysis.per_config.get(config)
        if analysis.ab and result is not None:
            gm = result.geomean
            if gm is None or not math.isfinite(gm.gm):
                summaries.append(f"- **{config}** ({env_text}): no geometric mean ({gm.reason if gm else 'no cell'})")
            else:
                left_out = f" ({gm.unresolved_text})" if gm.n_unresolved else ""
                summaries.append(
                    f"- **{config}** ({env_text}): geometric-mean speedup over "
                    f"{plural(gm.n_cells, 'cell')}{left_out} **{_ratio_ci(gm.gm, gm.lo, gm.hi)}**: {_in_words(gm)}"
                )
            table, n = contrast_table(run, result, unit, scale, config), len(result.rows)
        else:
            table, n = _bench_rows(run, analysis, config, scale), len(analysis.rows[config])
        sections += [f"<details><summary><b>{config}</b> ({env_text}): {plural(n, 'cell')}</summary>", ""]
        sections += table + ["", "</details>", ""]
    return summaries, sections, problems


def per_config_summary(head: Header, summaries: list[str]) -> list[str]:
    """The stock-vs-patched-per-config section: the rule, the adaptive sampling line, the summaries."""
    n, floor = head.rounds, stats.min_processes()
    added = head.adaptive.rounds_added if head.adaptive else 0
    more = " in the planned rounds, more for some cells in the adaptive rounds below" if added else ""
    enough = (
        f" (a verdict needs at least {floor})."
        if n >= floor
        else f"; a verdict needs at least {floor} per side, so every verdict is undetermined (use --rounds {floor} "
        "or more)."
    )
    rule = (
        "Stock vs patched under each config is the contrast `patched/C` vs `stock/C` (speedup as defined above: "
        f"stock time / patched time). {n} fresh process{'' if n == 1 else 'es'} per build and config{more}{enough} "
        "The geometric mean "
        "per config compares each round's process of each side by its geometric-mean time over the cells (a "
        f"process moves all its cells), paired by round, with the same rule at ±{THRESHOLD:.0%}."
    )
    return ["## Stock vs patched per config", "", rule, ""] + _adaptive_text(head) + summaries + [""]


def pct(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.1%}" if x < 0.1 else f"{x:.0%}"


def undetermined_section(analysis: Analysis) -> list[str]:
    """Every undetermined cell of every contrast: processes it had, CI half-width, MDE, goal, processes needed,
    and the processes the resume command gives it with the CI half-width predicted there."""
    if not analysis.needs:
        return []
    given = analysis.resume.given if analysis.resume else [f.n for f in analysis.needs]
    lines = [
        "## Undetermined cells",
        "",
        "Per undetermined cell: the processes per side it had (paired rounds), its CI half-width, the smallest "
        "change those processes could show (MDE = band + half-width), the half-width that decides it at its "
        "estimate (goal: band − |change| for equivalence, |change| − band beyond; at least a quarter of the band), "
        "the processes per side that reach it (half-width ∝ 1/√n; below the floor, predicted from the noise "
        "floor), and the processes per side the resume command above gives it with the CI half-width predicted "
        "there (check a resumed run against it). docs/reading-the-report.md.",
        "",
        "<details><summary>every undetermined cell</summary>",
        "",
        "| contrast | cell | dtype | class | processes | CI half-width | MDE | goal | processes needed "
        "| after resuming | predicted CI half-width |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f, after in zip(analysis.needs, given, strict=True):
        c = f.row.cell
        needed = str(f.processes) if f.processes is not None else f"> {und.MAX_PROCESSES}"
        predicted = pct(f.width_at(after)) if after > f.n else "–"
        lines.append(
            f"| {f.result.contrast.label} | {c.op} {c.label} | {c.dtype} | {f.row.cls.value} | {f.n} "
            f"| {pct(f.half_width)} | {pct(f.mde)} | {pct(f.goal)}{' (edge)' if f.edge else ''} | {needed} "
            f"| {after if after > f.n else '–'} | {predicted} |"
        )
    return lines + ["", "</details>", ""]


def other_contrasts(run: RunDocument, analysis: Analysis, unit: str, scale: float) -> list[str]:
    """The full tables of the contrasts that are not stock vs patched per config (those are the Cells tables)."""
    others = [r for r in analysis.contrasts if r not in analysis.per_config.values()]
    if not others:
        return []
    out = ["## Contrasts", ""]
    for result in others:
        out += [f"<details><summary>{result.contrast.label}: {plural(len(result.rows), 'cell')}</summary>", ""]
        out += contrast_table(run, result, unit, scale) if result.rows else [f"{result.why}."]
        out += ["", "</details>", ""]
    return out


def correctness_section(run: RunDocument, analysis: Analysis) -> list[str]:
    """One row per (config, cell): each build's relative error against float64, and the bound."""
    builds = analysis.builds
    lines, failed, loose, found, count = [], 0, 0, 0, 0
    for config in run.header.configs:
        for key in run.keys_of(config):
            checks = {b: next((r.check for r in run.records(config, key, b) if r.check), None) for b in builds}
            if not any(checks.values()):
                continue
            count += 1
            bound = next(c["bound"] for c in checks.values() if c)
            cols = []
            for b in builds:
                chk = checks[b]
                if chk is None:
                    cols.append("–")
                    continue
                err = "–" if chk["rel_error"] is None else f"{chk['rel_error']:.2e}"
                status = status_of(chk)
                failed += status == FAILED
                loose += status == UNINFORMATIVE
                over = chk.get("default_bound") is not None and (chk["rel_error"] or 0) > chk["default_bound"]
                found += over
                err += f" (finding: > default {chk['default_bound']:.1e})" if over else ""
                if status == FAILED:
                    err = f"**{err} NO: {chk['reason']}**"
                elif status == UNINFORMATIVE:
                    err = f"{err} **check uninformative**"
                cols.append(err)
            cell = cell_of(key)
            lines.append(
                f"| {config} | {cell.op} | {cell.label} | {cell.dtype} | " + " | ".join(cols) + f" | {bound:.1e} |"
            )
    out = [
        "## Correctness",
        "",
        "Relative error ‖out − ref‖/‖ref‖ against a float64 CPU reference (first round), "
        "per config and build, and the bound it must stay under (docs/env-configs.md).",
        "",
    ]
    if not lines:
        return out + ["No checks ran.", ""]
    out += [
        f"{count} (config, cell) pairs checked in {len(builds)} build(s): "
        + ("**all within their bounds**." if not failed else f"**{failed} check(s) over the bound**.")
        + (f" **{loose} check(s) uninformative** (bound too loose to fail on a wrong output)." if loose else "")
        + (f" {found} finding(s): a routed kernel over the default path's bound." if found else ""),
        "",
        "<details><summary>relative error per cell</summary>",
        "",
        "| config | op | shape | dtype | " + " | ".join(builds) + " | bound |",
        "|" + "---|" * (5 + len(builds)),
    ]
    return out + lines + ["", "</details>", ""]


#: the kernel-bound band (harness.policy), for the summaries and drift
THRESHOLD = POLICY.kernel_bound.band


def cell_of(key: str) -> Cell:
    """The cell of a results.json cell key.

    Raises:
        ResultsError: a key this harness cannot read (e.g. an op a newer harness added).
    """
    try:
        return Cell.from_key(key)
    except (ValueError, TypeError) as exc:
        raise ResultsError(
            f"results.json names cell {key!r}, which this harness cannot read: {exc}",
            "render it with the harness version that wrote it",
        ) from None
