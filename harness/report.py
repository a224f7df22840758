"""``report.md`` for the pull request, rendered from ``results.json`` alone (no measuring here).

Command ``report``: ``python -m harness report results/<run>`` re-renders the report of a run.
Sections: summary per env config (geometric-mean speedup with its CI), per-cell tables
(stock and patched medians, speedup = stock/patched time as a Hodges-Lehmann estimate with its exact
95 % Moses confidence interval, exact Mann-Whitney U p-value, verdict), correctness (relative error vs
float64 per config and build),
failures and skips with their reasons, and provenance with the command that reproduces the run.
Long tables are folded in ``<details>`` so the PR stays readable. Plots (``harness.plots``) are
written next to it and linked: ``speedup.png``, ``contrast-<n>.png`` (one forest plot per contrast) and
``latency-<family>.png`` (only where a line has more than one size).

Deterministic: the same results.json gives byte-identical report.md and PNGs (exact statistics,
no resampling, no render timestamp), so ``report`` can re-create them from results.json alone.
"""

from __future__ import annotations

import math
import shlex
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import configs as cfg
from harness import observed, plots, prbody, stats
from harness import results as res
from harness.bench.workloads import Cell
from harness.checks.accuracy import FAILED, UNINFORMATIVE, UNKNOWN, status_of
from harness.errors import ResultsError
from harness.fsutil import atomic_write_text
from harness.peaks import peak_tflops

THRESHOLD = 0.02
#: the band of launch-bound cells: their time is host latency, whose spread between processes is
#: wide (37 % for GEMM 512³ on an H200); at 4 processes per side the exact test's smallest p
#: (2/70) put a CI beyond ±2 % in 3 of 109 launch-bound cells of an H200 A/A run (docs/methodology.md)
LAUNCH_BOUND_THRESHOLD = 0.05


def write(directory: Path, data: dict) -> list[Path]:
    """Render ``report.md`` and its PNGs into ``directory`` (atomically); returns the paths written."""
    analysis = analyse(data)
    written = (
        [
            plots.speedup_png(
                directory / SPEEDUP_PNG,
                {
                    c: [
                        plots.SpeedupPoint(
                            f"{r.cell.op} {r.cell.label} {r.cell.dtype}",
                            r.cmp.ratio,
                            r.cmp.ci_low,
                            r.cmp.ci_high,
                            r.cmp.verdict,
                        )
                        for r in rows
                    ]
                    for c, rows in analysis.rows.items()
                },
                THRESHOLD,
                "patched vs stock, " + data["run"]["device"],
            )
        ]
        if analysis.ab
        else []
    )
    for family in analysis.families:
        png = plots.latency_png(
            directory / latency_png_name(family), latency_points(analysis, family), family, clock_label(data)
        )
        written += [png] if png else []
    written += plots.contrast_pngs(directory, prbody.evaluate_all(data, THRESHOLD, LAUNCH_BOUND_THRESHOLD))
    path = directory / "report.md"
    atomic_write_text(path, render(data, analysis))
    return [path, *written]


#: Measurement.method -> the words under a latency plot (older runs timed GPUs with device events)
CLOCKS = {
    "perf_counter": "host clock",
    "synchronize+perf_counter": "synchronize + host clock",
    "cuda-events": "device events",
    "mps-events": "device events",
}


def clock_label(data: dict) -> str:
    """What the run's timer measured, from the method its measurements recorded."""
    methods = {
        rec["measurement"].get("method")
        for p in data["processes"]
        for rec in p["cells"].values()
        if rec.get("measurement")
    }
    return " / ".join(sorted(CLOCKS.get(m, str(m)) for m in methods)) or "host clock"


SPEEDUP_PNG = "speedup.png"


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


@dataclass
class Row:
    """One cell of one config: per-build process medians (seconds), their median and IQR, the
    comparison (A/B only) and the notes for the table."""

    cell: Cell
    medians: dict[str, list[float]]
    mid: dict[str, float | None]
    spread: dict[str, tuple[float, float] | None]
    cmp: stats.Comparison | None
    notes: list[str] = field(default_factory=list)


@dataclass
class Analysis:
    """Everything the markdown and the plots show, computed once from results.json."""

    builds: list[str]
    ab: bool
    table: dict[str, dict[str, dict[str, list[dict]]]]  # results.cell_table(data)
    rows: dict[str, list[Row]]
    geomeans: dict[str, stats.GeoMean]
    drifts: dict[tuple[str, str], stats.Drift]
    families: list[str]


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


def analyse(data: dict) -> Analysis:
    """Per config and cell: medians, IQRs, comparisons; per config: the geometric mean over whole
    processes (:func:`harness.stats.geomean_by_process`); per (build, config): drift."""
    run = data["run"]
    builds = run["builds"]
    ab = builds == ["stock", "patched"]
    table = res.cell_table(data)
    rows: dict[str, list[Row]] = {}
    geomeans: dict[str, stats.GeoMean] = {}
    drifts: dict[tuple[str, str], stats.Drift] = {}
    for config in run["configs"]:
        per_cell = table.get(config, {})
        rows[config] = []
        for key, per_build in per_cell.items():
            medians = {b: res.process_medians(per_build.get(b, [])) for b in builds}
            row = Row(
                cell_of(key),
                medians,
                {b: (stats.process_median(m) if m else None) for b, m in medians.items()},
                {b: (stats.iqr(m) if m else None) for b, m in medians.items()},
                stats.compare(medians["stock"], medians["patched"], **cell_rule(per_build)) if ab else None,
                _notes([r for b in builds for r in per_build.get(b, [])]),
            )
            rows[config].append(row)
        if ab:
            keys = [k for k, r in zip(per_cell, rows[config]) if r.cmp is not None and math.isfinite(r.cmp.ratio)]
            sides = [res.process_matrix(per_cell, b, keys) for b in ("stock", "patched")]
            geomeans[config] = stats.geomean_by_process(
                *(np.array(m, dtype=float).reshape(len(m), len(keys)) for m in sides), threshold=THRESHOLD
            )
        for b in builds:
            drifts[(b, config)] = stats.drift(res.round_series(per_cell, b), threshold=THRESHOLD)
    families = sorted({r.cell.family for rs in rows.values() for r in rs if any(r.mid.values())})
    return Analysis(builds, ab, table, rows, geomeans, drifts, families)


def _us(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e6:,.1f}"


def _tflops(cell: Cell, seconds: float | None) -> str:
    return "–" if not seconds else f"{cell.flop / seconds / 1e12:.3g}"


def _ratio_ci(ratio: float, low: float, high: float) -> str:
    """A patched/stock *time* ratio and its CI shown as a speedup (stock time / patched time, > 1:
    patched faster): ``1.018× [1.010, 1.025]``; the CI is omitted when it could not be computed."""
    if not (math.isfinite(ratio) and ratio > 0):
        return "–"
    if math.isfinite(low) and math.isfinite(high) and low > 0:
        return f"{1 / ratio:.3f}× [{1 / high:.3f}, {1 / low:.3f}]"
    return f"{1 / ratio:.3f}× [no CI]"


def _cause_words(cause: stats.Cause, threshold: float, confidence: float, floor: int = stats.MIN_PROCESSES) -> str:
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
    }[cause]


def _adaptive_text(run: dict) -> list[str]:
    """One line on adaptive sampling, when the run used it."""
    adaptive = run.get("adaptive")
    if not adaptive:
        return []
    left = sum(map(len, adaptive["unconverged"].values()))
    launch = adaptive.get("launch_bound_target")
    target = f"±{adaptive['target']:.1%} (launch-bound cells ±{launch:.1%})" if launch else f"±{adaptive['target']:.1%}"
    return [
        f"Adaptive sampling to a CI half-width of {target}: {adaptive['rounds_added']} round(s) "
        f"added; the worker processes had a budget of {adaptive['budget_s']:g} s in all; "
        + (f"**{left} cell(s) did not converge** (marked in the tables)." if left else "every cell converged."),
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
    why = _cause_words(gm.cause, gm.threshold, gm.confidence)
    if gm.verdict in (stats.FASTER, stats.SLOWER):
        return f"**{change}** ({why}, {p})"
    if gm.verdict == stats.EQUIVALENT:
        return f"equivalent ({why}, {p})"
    return f"undetermined, {change} at the point estimate ({why}; {p})"


def _what_was_compared(data: dict) -> list[str]:
    """Warnings a reviewer needs before the numbers: is the series in either build, are the builds
    the same, do they differ in variant (CPU-only vs CUDA)."""
    builds = data["run"]["builds"]
    prov = {b: data["builds"][b]["provenance"] for b in builds}
    notes = []
    markers = series_markers(data)
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
    if data["run"].get("plant_k"):
        notes.append(
            f"> **Calibration:** the patched side ran every GEMM with K grown by at least "
            f"{data['run']['plant_k']:.0%} (`--plant-k`; both sides are otherwise the same torch): every "
            "kernel-bound GEMM cell whose grown K really costs more than the band should come out slower "
            "(what K' costs on the device: benchmarks/planted_cost.py); SDPA cells are unchanged."
        )
    elif len(builds) == 2 and same_identity(data, *builds):
        inputs = [data["builds"][b]["input"] for b in builds]
        if inputs[0].get("sha256") == inputs[1].get("sha256"):
            notes.append(
                "> **Note:** both builds are the same torch (version, git hash, wheel): an A/A run; "
                "any verdict other than equivalent/undetermined is a false positive."
            )
        else:
            shown = ", ".join(
                f"{b}: {i.get('kind')} `{Path(str(i.get('value'))).name}`" for b, i in zip(builds, inputs)
            )
            notes.append(
                f"> **Note:** both builds are the same torch (version `{prov[builds[0]]['torch_version']}`, "
                f"git hash `{_short(prov[builds[0]]['git_version'])}`"
                + (", source tree" if tree_identity(data["builds"][builds[0]]) else "")
                + f") although their files differ ({shown}): an A/A run; any verdict other than "
                "equivalent/undetermined is a false positive."
            )
    variants = {
        b: (f"CUDA {prov[b]['cuda_version']}" if prov[b].get("cuda_version") else "CPU-only")
        + (" + MPS" if prov[b]["mps_built"] else "")
        for b in builds
    }
    if len(set(variants.values())) > 1:
        notes.append(
            "> **Note:** the builds are different variants ("
            + ", ".join(f"{b}: {v}" for b, v in variants.items())
            + "); differences may come from that, not from a patch."
        )
    return [line for note in notes for line in (note, "")]  # one blockquote each


#: cells a first-screen note names before it says "and N more"
NAMED_CELLS = 6


def checked(data: dict) -> list[tuple[str, str, str, dict]]:
    """Every accuracy check record of the run: ``(config, cell key, build, check)``, in process order."""
    return [
        (proc["config"], key, proc["build"], rec["check"])
        for proc in data["processes"]
        for key, rec in proc.get("cells", {}).items()
        if isinstance(rec, dict) and isinstance(rec.get("check"), dict)
    ]


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:NAMED_CELLS])
    return shown + (f" and {len(items) - NAMED_CELLS} more" if len(items) > NAMED_CELLS else "")


def _cell_words(key: str) -> str:
    cell = cell_of(key)
    return f"{cell.op} {cell.label} {cell.dtype}"


def check_notes(data: dict) -> list[str]:
    """First-screen lines about the checks themselves (harness.checks.accuracy): checks whose bound is too
    loose to fail on a plainly wrong output (**check uninformative**, with bound and error), the routed
    kernel's errors over the default path's bound (**finding**), builds whose base could not be told,
    and uninformative consistency pairs."""
    notes = []
    records = checked(data)
    loose = [
        f"`{c}` {_cell_words(k)} on {b} (bound {r['bound']:.3g}, error {_err(r['rel_error'])})"
        for c, k, b, r in records
        if status_of(r) == UNINFORMATIVE
    ]
    if loose:
        notes.append(
            f"> **Check uninformative:** {len(loose)} accuracy check(s) have a bound too loose to fail on a plainly "
            "wrong output (twice the bound exceeds the smallest planted defect's error; docs/env-configs.md): "
            + _named(loose)
            + ". Their errors are recorded, not passed."
        )
    finding = [
        f"`{c}` {_cell_words(k)} on {b}: {r['rel_error']:.2e} > {r['default_bound']:.1e}"
        for c, k, b, r in records
        if r.get("default_bound") is not None and r.get("rel_error") is not None and r["rel_error"] > r["default_bound"]
    ]
    if finding:
        notes.append(
            f"> **Finding:** {len(finding)} check(s) on a routed kernel (accumulating in the input dtype, or in "
            "an accumulator not stated for its base) err "
            "beyond the default path's (float32-accumulation) bound, evidence about that kernel: "
            + _named(finding)
            + "."
        )
    unknown = sorted({b for _, _, b, r in records if r.get("accumulator") == UNKNOWN})
    for b in unknown:
        how = (data["builds"].get(b, {}).get("base") or {}).get("how", "no base recorded")
        base = (data["builds"].get(b, {}).get("base") or {}).get("ref")
        where = f"on base {base} it is not stated in series.toml" if base else f"the base could not be told ({how})"
        notes.append(
            f"> **Note:** build {b}: the accumulator of its routed kernels is unknown ({where}), so their "
            "checks use the looser (input-dtype accumulation) bound."
        )
    pairs = [
        f"{_cell_words(k)} on {b} (bound {v['bound']:.2g})"
        for b, result in ((data.get("consistency") or {}).get("builds") or {}).items()
        for k, v in (result.get("cells") or {}).items()
        if status_of(v) == UNINFORMATIVE
    ]
    if pairs:
        a, b = data["consistency"]["pair"]
        notes.append(
            f"> **Check uninformative:** {len(pairs)} `{a}` vs `{b}` consistency check(s) have a sum of bounds too "
            "loose to fail on a wrong side: " + _named(pairs) + "."
        )
    return [line for note in notes for line in (note, "")]


def _err(x: float | None) -> str:
    return "–" if x is None else f"{x:.2e}"


def series_markers(data: dict) -> list[str]:
    """The series' markers: recorded in results.json ``evidence``; for runs before it was recorded, the
    variables looked for in the libraries that no generic config of the device sets."""
    recorded = (data.get("evidence") or {}).get("markers")
    if recorded is not None:
        return list(recorded)
    generic = set(cfg.variables(data["run"]["device"]))
    looked = {k for b in data["run"]["builds"] for k in data["builds"][b]["provenance"]["variables_in_libraries"]}
    return sorted(looked - generic)


def tree_identity(build: dict) -> tuple | None:
    """The source tree of a harness-built wheel (base commit + series hash from its build manifest);
    None when the build has no manifest (a requirement, an interpreter, a foreign wheel)."""
    manifest = build.get("build")
    if not isinstance(manifest, dict) or not manifest.get("base_sha"):
        return None
    series = manifest.get("series")
    return manifest["base_sha"], (series or {}).get("hash") if isinstance(series, dict) else None


def same_identity(data: dict, a: str, b: str) -> bool:
    """Whether two builds are the same build: torch version + git hash + (for harness-built wheels,
    both sides) the manifest's source tree. The wheel's bytes do not count: a rebuilt wheel with a
    different zip comment, or a wheel and the requirement of the same torch, are the same build."""
    pa, pb = data["builds"][a]["provenance"], data["builds"][b]["provenance"]
    if (pa["torch_version"], pa["git_version"]) != (pb["torch_version"], pb["git_version"]):
        return False
    ta, tb = tree_identity(data["builds"][a]), tree_identity(data["builds"][b])
    return ta is None or tb is None or ta == tb


def _modes_text(cmp: stats.Comparison) -> str:
    """Each side's modes with their shares, and the speedup within each mode when both sides have the
    same number of modes (never a ratio across modes)."""
    parts = [
        f"{side} " + " / ".join(f"{_us(m.center)} µs ({m.share:.0%})" for m in found)
        for side, found in (("stock", cmp.stock_modes), ("patched", cmp.patched_modes))
    ]
    if cmp.mode_ratios:
        parts.append("speedup per mode " + " / ".join(f"{1 / m.ratio:.3f}×" for m in cmp.mode_ratios))
    return "; ".join(parts)


def _short(sha: str | None) -> str:
    return (sha or "unknown")[:12]


def cell_rule(per_build: dict[str, list[dict]]) -> dict:
    """The verdict band and floor of one cell, as :func:`harness.stats.compare` keywords: when it is
    launch-bound (:func:`harness.results.launch_bound` over both builds' processes)
    :data:`LAUNCH_BOUND_THRESHOLD` and :data:`harness.stats.MIN_PROCESSES_LAUNCH_BOUND` processes
    per side, else :data:`THRESHOLD` and :data:`harness.stats.MIN_PROCESSES`."""
    slow_host = res.launch_bound([r for recs in per_build.values() for r in recs])
    return {"threshold": LAUNCH_BOUND_THRESHOLD if slow_host else THRESHOLD, "floor": stats.floor_for(slow_host)}


def _notes(records: list[dict]) -> list[str]:
    notes = []
    for r in records:
        if r.get("status") in ("failed", "skipped") and r.get("reason"):
            text = f"{r['status']}: {r['reason']}"
            if text not in notes:
                notes.append(text)
    if res.launch_bound(records):
        notes.append("launch-bound")
    return notes


def _consistency(section: dict | None, builds: list[str]) -> list[str]:
    """The cross-config consistency section (harness.checks.consistency)."""
    if not section:
        return []
    if not section.get("pair"):
        return ["## Config consistency", "", f"- skipped: {section.get('skipped') or 'no pair'}", ""]
    a, b = section["pair"]
    lines = [
        "## Config consistency",
        "",
        f"GEMM outputs under `{a}` against `{b}` in the same build (first round), relative difference "
        "against the sum of both configs' accuracy bounds.",
        "",
    ]
    if section.get("mps_check_skipped"):
        lines += [f"- {section['mps_check_skipped']}"]
    if section.get("skipped"):
        return lines + [f"- skipped: {section['skipped']}", ""]
    for build in builds:
        result = section["builds"].get(build, {"error": "no result recorded"})
        if "error" in result:
            lines.append(f"- **{build}**: not checked: {result['error']}")
            continue
        cells = result["cells"]
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


def _nox_command(command: list[str]) -> str:
    """The recorded ``python -m harness <cmd> ...`` as the nox session a user runs (README), else as is."""
    if command[:3] == ["python", "-m", "harness"] and len(command) > 3 and command[3] in ("compare", "bench"):
        return shlex.join(["nox", "-s", command[3], "--", *command[4:]])
    return shlex.join(command)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _provenance(data: dict) -> list[str]:
    run = data["run"]
    names = run["builds"]
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(str(fn(data["builds"][b])) for b in names) + " |")

    row("torch", lambda b: b["provenance"]["torch_version"])
    row("git hash", lambda b: f"`{b['provenance'].get('git_version') or 'unknown'}`")
    row("input", lambda b: f"`{b['input']['value']}`")
    row("wheel sha256", lambda b: f"`{(b['input'].get('sha256') or '–')[:16]}`")
    markers = series_markers(data)
    row(
        "series marker in libraries",
        lambda b: ", ".join(
            f"{k}: {'yes' if v else 'no'}" for k, v in b["provenance"]["variables_in_libraries"].items() if k in markers
        )
        or "–",
    )
    row("MPS built / available", lambda b: f"{b['provenance']['mps_built']} / {b['provenance']['mps_available']}")
    row("CUDA available", lambda b: b["provenance"]["cuda_available"])
    row("GPU", lambda b: b["provenance"].get("gpu_name") or "–")
    row("CPU", lambda b: b["provenance"]["cpu_name"])
    row("OS", lambda b: b["provenance"]["os"].get("macos_product_version") or b["provenance"]["os"]["platform"])
    if any(data["builds"][b]["provenance"].get("mac") for b in names):
        row(
            "Mac model / power / Low Power Mode",
            lambda b: " / ".join(
                str(b["provenance"].get("mac", {}).get(k)) for k in ("model", "power_source", "low_power_mode")
            ),
        )
    row("Python", lambda b: b["provenance"]["python"])
    row("torch default threads (workers used: see below)", lambda b: b["provenance"]["num_threads"])
    return lines + _run_lines(data) + _build_rows(data) + _config_show(data)


def _run_lines(data: dict) -> list[str]:
    """How the run was made: harness, timing, start-up, threads, the command to reproduce it, variables."""
    run = data["run"]
    timing = run["timing"]
    timing_text = (
        f"warm-up {timing.get('warmup_s')} s, measurement {timing.get('measure_s')} s per cell per process, "
        f"blocks of at least {timing.get('min_block_s')} s"
    )
    if timing.get("layouts", 1) > 1:
        timing_text += f"; kernel-bound cells on {timing['layouts']} memory layouts of their inputs per process"
    if timing.get("settle_s"):  # results of earlier harness versions
        timing_text += f", after {timing['settle_s']} s of untimed load"
    if timing.get("duty", 1) < 1:
        timing_text += (
            f", at a duty cycle of {timing['duty']:.0%} (the device rests between blocks, so it runs at its "
            "unthrottled clock; docs/timing.md)"
        )
    if timing.get("host_bound_blocks"):
        timing_text += f"; host-bound cells {timing['host_bound_blocks']} blocks"
    startups = sorted(t for t in map(res.startup_seconds, data["processes"]) if t is not None)
    if startups:
        timing_text += (
            f"; process start-up (interpreter + import torch) median {statistics.median(startups):.1f} s, "
            f"{startups[0]:.1f}-{startups[-1]:.1f} s over {len(startups)} processes"
        )
    lines = [
        "",
        f"Harness {data['harness_version']}, device `{run['device']}`, {run['rounds']} rounds of fresh "
        f"processes per (build, config), order shuffled per round (seed {run['seed']}); timing: {timing_text}; "
        f"torch threads in workers: {run.get('threads') or 'torch default'}; started {run['started']}, "
        f"finished {run.get('finished') or 'not yet (interrupted)'}.",
        "",
        "Reproduce (from the torch-patch-harness checkout):",
        "",
        "```",
        _nox_command(run["command"]),
        "```",
    ]
    if run.get("extra_env"):
        lines += [
            "",
            "Extra variables in every worker (`--env`): "
            + ", ".join(f"`{k}={v}`" for k, v in sorted(run["extra_env"].items()))
            + ".",
        ]
    if run.get("keep_env"):
        lines += ["", "Inherited variables kept (`--keep-env`): " + ", ".join(f"`{k}`" for k in run["keep_env"]) + "."]
    return lines


def _config_show(data: dict) -> list[str]:
    """Each build's ``torch.__config__.show()``, folded."""
    lines = []
    for b in data["run"]["builds"]:
        show = data["builds"][b]["provenance"].get("config_show")
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


def _peak_text(data: dict, config: str, cell: Cell, seconds: float | None) -> str:
    prov = data["builds"][data["run"]["builds"][0]]["provenance"]
    known = peak_tflops(
        prov.get("gpu_name") if data["run"]["device"] != "cpu" else None,
        cell.dtype,
        bool(data["configs"][config].get("reduced_fp32")),
    )
    if not known or not seconds:
        return "–"
    return f"{cell.flop / seconds / 1e12 / known[0]:.0%}"


def _drift_lines(analysis: Analysis, configs: list[str]) -> list[str]:
    lines = [
        "## Drift",
        "",
        "Per build and config: the per-round median over cells (each cell relative to its own median) against "
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


def _build_rows(data: dict) -> list[str]:
    """Base SHA, series and build flags from the wheels' build manifests, and whether the flags match."""
    builds = data["run"]["builds"]
    manifests = {b: data["builds"][b].get("build") for b in builds}
    if not any(manifests.values()):
        return [
            "",
            "Build manifests: none (the inputs are not wheels built by `build_stock`/`build_patched`), so base "
            "ref, series and build flags are not recorded for this run.",
        ]
    lines = ["", "| build manifest | " + " | ".join(builds) + " |", "|---|" + "---|" * len(builds)]
    for label, fn in (
        ("base SHA", lambda m: f"`{m.get('base_sha')}`"),
        ("series", lambda m: f"{m['series']['name']} `{m['series']['hash']}`" if m.get("series") else "–"),
        ("platform / build type", lambda m: f"{m.get('platform')} / {m.get('build_type')}"),
        ("version label", lambda m: f"`{m.get('version')}`"),
        ("compiler", lambda m: m.get("compiler")),
        ("CMake", lambda m: m.get("cmake")),
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


def _cell_rows(data: dict, analysis: Analysis, config: str, scale: float) -> tuple[list[list[str]], list[str]]:
    """One config's table rows (cells) and its failed/skipped lines for "Failures and skips"."""
    run, builds, ab = data["run"], analysis.builds, analysis.ab
    problems: list[str] = []
    lines = []
    for r in analysis.rows[config]:
        cell, notes = r.cell, list(r.notes)
        base = [f"{cell.op} {cell.label}", cell.dtype]
        if ab:
            cmp = r.cmp
            ci = _ratio_ci(cmp.ratio, cmp.ci_low, cmp.ci_high)
            p = f"{cmp.p_value:.2g}" if math.isfinite(cmp.p_value) else "–"
            verdict = f"**{cmp.verdict}**" if cmp.verdict in (stats.FASTER, stats.SLOWER) else cmp.verdict
            if cmp.verdict == stats.UNDETERMINED:
                notes.insert(0, _cause_words(cmp.cause, cmp.threshold, cmp.confidence, cmp.floor))
            if cmp.bimodal:
                notes.append("bimodal: " + _modes_text(cmp))
            if cell.key in run.get("adaptive", {}).get("unconverged", {}).get(config, []):
                hw, adaptive = cmp.half_width, run["adaptive"]
                goal = (adaptive.get("launch_bound_target") if "launch-bound" in r.notes else None) or adaptive[
                    "target"
                ]
                notes.append(
                    f"unconverged: CI half-width {hw:.1%} > target ±{goal:.1%}"
                    if math.isfinite(hw)
                    else "unconverged: no CI yet"
                )
            peak = _peak_text(data, config, cell, r.mid["patched"])
            lines.append(
                base
                + [
                    _median_spread(r.mid["stock"], r.spread["stock"]),
                    _median_spread(r.mid["patched"], r.spread["patched"]),
                    _throughput(cell, r.mid["patched"], scale) + ("" if peak == "–" else f" ({peak})"),
                    ci,
                    p,
                    verdict,
                    "; ".join(notes),
                ]
            )
        else:
            b = builds[0]
            peak = _peak_text(data, config, cell, r.mid[b])
            lines.append(
                base
                + [
                    _median_spread(r.mid[b], r.spread[b]),
                    _throughput(cell, r.mid[b], scale) + ("" if peak == "–" else f" ({peak})"),
                    str(len(r.medians[b])),
                    "; ".join(notes),
                ]
            )
        for note in notes:
            if note.startswith(("failed: ", "skipped: ")):
                problems.append(f"- `{config}` {cell.op} {cell.label} {cell.dtype}: {note}")
    return lines, problems


def _config_sections(data: dict, analysis: Analysis, unit: str, scale: float) -> tuple[list, list, list]:
    """(per-config summary lines, per-config cell tables, failure/skip lines) of every config."""
    summaries, sections, problems = [], [], []
    for config in data["run"]["configs"]:
        env = data["configs"][config]["env"]
        env_text = " ".join(f"{k}={v}" for k, v in env.items()) or "no variables"
        lines, found = _cell_rows(data, analysis, config, scale)
        problems += found
        if analysis.ab:
            gm = analysis.geomeans[config]
            if not math.isfinite(gm.gm):
                summaries.append(f"- **{config}** ({env_text}): no geometric mean ({gm.reason})")
            else:
                summaries.append(
                    f"- **{config}** ({env_text}): geometric-mean speedup over "
                    f"{_plural(gm.n_cells, 'cell')} **{_ratio_ci(gm.gm, gm.lo, gm.hi)}**: {_in_words(gm)}"
                )
            head = ["cell", "dtype", "stock µs ±IQR/2", "patched µs ±IQR/2", f"patched {unit} (% of peak)"]
            head += ["speedup [95% CI]", "p (U test)", "verdict", "notes"]
        else:
            head = ["cell", "dtype", "median µs ±IQR/2", f"{unit} (% of peak)", "processes", "notes"]
        sections += [
            f"<details><summary><b>{config}</b> ({env_text}): {_plural(len(lines), 'cell')}</summary>",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        sections += ["| " + " | ".join(x) + " |" for x in lines]
        sections += ["", "</details>", ""]
    return summaries, sections, problems


def _per_config_summary(run: dict, summaries: list[str]) -> list[str]:
    """The stock-vs-patched-per-config section: the rule, the adaptive sampling line, the summaries."""
    n, floor = run["rounds"], stats.min_processes()
    added = (run.get("adaptive") or {}).get("rounds_added")
    more = " in the planned rounds, more for some cells in the adaptive rounds below" if added else ""
    enough = (
        f" (a verdict needs at least {floor})."
        if n >= floor
        else f"; a verdict needs at least {floor} per side, so every verdict is undetermined (use --rounds {floor} "
        "or more)."
    )
    rule = (
        "Speedup = stock time / patched time (> 1: patched faster), the Hodges-Lehmann estimate over the "
        f"per-process medians with its exact 95% (Moses) confidence interval; verdict threshold ±{THRESHOLD:.0%}: "
        f"faster/slower when the whole CI lies beyond it, equivalent when inside. {n} fresh processes per build "
        f"and config{more}{enough} The geometric mean per config compares each process's geometric-mean time over the "
        "cells (a process moves all its cells), with the same rule."
    )
    return ["## Stock vs patched per config", "", rule, ""] + _adaptive_text(run) + summaries + [""]


def render(data: dict, analysis: Analysis | None = None) -> str:
    """The markdown report of one run (see module docstring). Deterministic for the same data."""
    analysis = analysis or analyse(data)
    run = data["run"]
    unit, scale = ("TFLOP/s", 1e12) if run["device"] != "cpu" else ("GFLOP/s", 1e9)
    names = " vs ".join(f"{b} (torch {data['builds'][b]['provenance']['torch_version']})" for b in analysis.builds)
    out = [f"# {'A/B' if analysis.ab else 'Benchmark'}: {names} on `{run['device']}`", ""]
    if not run.get("finished"):
        done, planned = len(data["processes"]), len(run.get("order", []))
        out += [
            f"> **Incomplete run:** {done} of {planned} planned worker processes finished before it was "
            "interrupted; the numbers below use those. Run the same command again to resume.",
            "",
        ]
    summaries, sections, problems = _config_sections(data, analysis, unit, scale)
    drifted = [f"`{c}` {b}" for (b, c), d in analysis.drifts.items() if d.verdict == "drift"]
    contrasts = prbody.evaluate_all(data, THRESHOLD, LAUNCH_BOUND_THRESHOLD)
    errors = [line for note in observed.error_notes(data) for line in (note, "")]
    out += prbody.render_block(data, contrasts, errors + _what_was_compared(data) + check_notes(data))
    if drifted:
        out += [f"> **Drift:** {', '.join(drifted)} changed over the run (see Drift in the details).", ""]
    out += [
        "<details><summary><b>Details</b>: per-config summary, every cell, correctness, consistency, drift, "
        "failures, provenance</summary>",
        "",
    ]
    if analysis.ab:
        out += _per_config_summary(run, summaries) + [f"![speedup per cell with 95% CI]({SPEEDUP_PNG})", ""]
    out += [
        "## Cells",
        "",
        f"Medians of the per-process medians, ±half their interquartile range; {unit} = FLOP per call / median "
        "(GEMM 2·M·N·K, SDPA 4·B·H·L²·D, halved when causal); % of peak against the device's dense datasheet "
        "peak where known (harness/peaks.py).",
        "",
    ] + sections
    out += [
        f"![latency vs size: {f}]({latency_png_name(f)})"
        for f in analysis.families
        if plots.sizes_vary(latency_points(analysis, f))
    ] + [""]
    out += prbody.details_tables(contrasts, data)
    out += [f"![{r.contrast.label}]({plots.contrast_png_name(i)})" for i, r in plots.plotted(contrasts)] + [""]
    out += _correctness(data, analysis)
    out += _consistency(data.get("consistency"), analysis.builds)
    out += observed.details(data)
    out += _drift_lines(analysis, run["configs"])
    out += ["## Failures and skips", ""] + (problems or ["None."]) + [""]
    out += ["## Provenance", ""] + _provenance(data) + [""] + prbody.collect_env_lines(data)
    out += ["</details>", ""]
    return "\n".join(out)


def _correctness(data: dict, analysis: Analysis) -> list[str]:
    """One row per (config, cell): each build's relative error against float64, and the bound."""
    builds = analysis.builds
    table = analysis.table
    lines, failed, loose, found, count = [], 0, 0, 0, 0
    for config in data["run"]["configs"]:
        for key, per_build in table.get(config, {}).items():
            checks = {b: next((r["check"] for r in per_build.get(b, []) if r.get("check")), None) for b in builds}
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
