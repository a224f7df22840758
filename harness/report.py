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

from harness import configs as cfg
from harness import contrasts as con
from harness import macos, observed, plots, prbody, stats
from harness import results as res
from harness import undetermined as und
from harness.bench.accuracy import FAILED, UNINFORMATIVE, UNKNOWN, status_of
from harness.bench.workloads import Cell
from harness.errors import ResultsError
from harness.fsutil import atomic_write_text
from harness.peaks import peak_tflops
from harness.policy import POLICY, CellClass, classify

#: the kernel-bound band (harness.policy), for the summaries and drift
THRESHOLD = POLICY.kernel_bound.band


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
                        for r in result.rows
                    ]
                    for c, result in analysis.per_config.items()
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
    written += plots.contrast_pngs(directory, analysis.contrasts)
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
    table: dict[str, dict[str, dict[str, list[dict]]]]  # results.cell_table(data)
    rows: dict[str, list[Row]]
    contrasts: list[con.ContrastResult]
    per_config: dict[str, con.ContrastResult]
    drifts: dict[tuple[str, str], stats.Drift]
    families: list[str]
    floors: list[und.NoiseFloor] = field(default_factory=list)
    needs: list[und.Need] = field(default_factory=list)
    resume: und.Resume | None = None  # what the printed resume command gives the undetermined cells


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
    """Per config and cell: each build's medians and IQRs and the cell's class; every contrast of the
    run (:func:`harness.contrasts.evaluate_all`: stock vs patched per config is one, judged and summarised
    there, never here); per (build, config): drift; what the undetermined cells need (:mod:`harness.undetermined`)."""
    run = data["run"]
    builds = run["builds"]
    ab = builds == ["stock", "patched"]
    table = res.cell_table(data)
    rows: dict[str, list[Row]] = {}
    drifts: dict[tuple[str, str], stats.Drift] = {}
    for config in run["configs"]:
        per_cell = table.get(config, {})
        rows[config] = []
        for key, per_build in per_cell.items():
            medians = {b: res.process_medians(per_build.get(b, [])) for b in builds}
            records = [r for b in builds for r in per_build.get(b, [])]
            row = Row(
                cell_of(key),
                medians,
                {b: (stats.process_median(m) if m else None) for b, m in medians.items()},
                {b: (stats.iqr(m) if m else None) for b, m in medians.items()},
                classify(records),
                _notes(records),
            )
            rows[config].append(row)
        for b in builds:
            drifts[(b, config)] = stats.drift(res.round_series(per_cell, b), threshold=THRESHOLD)
    families = sorted({r.cell.family for rs in rows.values() for r in rs if any(r.mid.values())})
    results = con.evaluate_all(data)
    per_config = {
        r.contrast.a.config: r
        for r in results
        if (r.contrast.a.build, r.contrast.b.build) == ("patched", "stock")
        and r.contrast.a.config == r.contrast.b.config
        and not r.contrast.ops
        and not r.contrast.dtypes
    }
    floors = und.noise_floors(results)
    found = und.needs(results, floors)
    resume = und.resume(data, results, found) if found else None
    return Analysis(builds, ab, table, rows, results, per_config, drifts, families, floors, found, resume)


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
    stopped = adaptive.get("stopped") or {}
    why = {
        "budget": f" (the next round, ~{stopped.get('next_round_s', 0):.0f} s, did not fit the "
        f"{stopped.get('left_s', 0):.0f} s left)",
        "max_rounds": " (the adaptive rounds reached their maximum)",
    }.get(stopped.get("why"), "")
    return [
        f"Adaptive sampling to a CI half-width of {target}: {adaptive['rounds_added']} round(s) "
        f"added; the worker processes had a budget of {adaptive['budget_s']:g} s in all; "
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
    """First-screen lines about the checks themselves (harness.bench.accuracy): checks whose bound is too
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


def _notes(records: list[dict]) -> list[str]:
    """The failed/skipped reasons of a cell's records, once each (the "Failures and skips" section)."""
    return list(con._notes(records))


def _consistency(section: dict | None, builds: list[str]) -> list[str]:
    """The cross-config consistency section (harness.bench.consistency)."""
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


def _dash(value) -> str:
    """A build manifest's field as text: ``–`` where the manifest lacks it (manifests of older builds)."""
    return "–" if value is None or value == "" else str(value)


def _code(value) -> str:
    return "–" if value is None or value == "" else f"`{value}`"


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


def _notes_of(data: dict, row: con.ContrastRow, config: str | None) -> list[str]:
    """A contrast row's notes: why undetermined, launch-bound, bimodal, unconverged (stock vs patched of
    ``config``, when the adaptive rounds left it above its class's target), failed/skipped."""
    cmp, notes = row.cmp, []
    if cmp.verdict == stats.UNDETERMINED:
        notes.append(_cause_words(cmp.cause, cmp.threshold, cmp.confidence, cmp.floor))
    if row.launch_bound:
        notes.append("launch-bound")
    if cmp.bimodal:
        notes.append("bimodal: " + _modes_text(cmp))
    adaptive = data["run"].get("adaptive") or {}
    if config is not None and row.cell.key in adaptive.get("unconverged", {}).get(config, []):
        hw = cmp.half_width
        goal = POLICY.with_targets(adaptive.get("target"), adaptive.get("launch_bound_target")).rule(row.cls).target
        notes.append(
            f"unconverged: CI half-width {hw:.1%} > target ±{goal:.1%}"
            if math.isfinite(hw)
            else "unconverged: no CI yet"
        )
    return notes + list(row.notes)


def contrast_table(
    data: dict, result: con.ContrastResult, unit: str, scale: float, config: str | None = None
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
        peak = _peak_text(data, a.config, cell, mid_a)
        cols = [
            f"{cell.op} {cell.label}",
            cell.dtype,
            _median_spread(mid_a, stats.iqr(r.a) if r.a else None),
            _median_spread(mid_b, stats.iqr(r.b) if r.b else None),
            _throughput(cell, mid_a, scale) + ("" if peak == "–" else f" ({peak})"),
            _ratio_ci(cmp.ratio, cmp.ci_low, cmp.ci_high),
            f"{cmp.p_value:.2g}" if math.isfinite(cmp.p_value) else "–",
            f"**{cmp.verdict}**" if cmp.verdict in (stats.FASTER, stats.SLOWER) else cmp.verdict,
            "; ".join(_notes_of(data, r, config)),
        ]
        lines.append("| " + " | ".join(cols) + " |")
    return lines


def _bench_rows(data: dict, analysis: Analysis, config: str, scale: float) -> list[str]:
    """One config's table of a one-build run (no comparison): median ±IQR/2, throughput, processes, notes."""
    b = analysis.builds[0]
    head = ["cell", "dtype", "median µs ±IQR/2", f"{'TFLOP/s' if scale == 1e12 else 'GFLOP/s'} (% of peak)"]
    lines = ["| " + " | ".join(head + ["processes", "notes"]) + " |", "|" + "---|" * (len(head) + 2)]
    for r in analysis.rows[config]:
        peak = _peak_text(data, config, r.cell, r.mid[b])
        notes = (["launch-bound"] if r.cls == CellClass.LAUNCH_BOUND else []) + r.notes
        cols = [f"{r.cell.op} {r.cell.label}", r.cell.dtype, _median_spread(r.mid[b], r.spread[b])]
        cols += [_throughput(r.cell, r.mid[b], scale) + ("" if peak == "–" else f" ({peak})"), str(len(r.medians[b]))]
        lines.append("| " + " | ".join(cols + ["; ".join(notes)]) + " |")
    return lines


def _config_sections(data: dict, analysis: Analysis, unit: str, scale: float) -> tuple[list, list, list]:
    """(per-config summary lines, per-config cell tables, failure/skip lines) of every config. An A/B run's
    table per config is its stock-vs-patched contrast's (:attr:`Analysis.per_config`)."""
    summaries, sections, problems = [], [], []
    for config in data["run"]["configs"]:
        env = data["configs"][config]["env"]
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
                summaries.append(
                    f"- **{config}** ({env_text}): geometric-mean speedup over "
                    f"{_plural(gm.n_cells, 'cell')} **{_ratio_ci(gm.gm, gm.lo, gm.hi)}**: {_in_words(gm)}"
                )
            table, n = contrast_table(data, result, unit, scale, config), len(result.rows)
        else:
            table, n = _bench_rows(data, analysis, config, scale), len(analysis.rows[config])
        sections += [f"<details><summary><b>{config}</b> ({env_text}): {_plural(n, 'cell')}</summary>", ""]
        sections += table + ["", "</details>", ""]
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
        "Stock vs patched under each config is the contrast `patched/C` vs `stock/C` (speedup as defined above: "
        f"stock time / patched time). {n} fresh processes per build and config{more}{enough} The geometric mean "
        "per config compares each round's process of each side by its geometric-mean time over the cells (a "
        f"process moves all its cells), paired by round, with the same rule at ±{THRESHOLD:.0%}."
    )
    return ["## Stock vs patched per config", "", rule, ""] + _adaptive_text(run) + summaries + [""]


def _pct(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.1%}" if x < 0.1 else f"{x:.0%}"


def launch_bound_line(data: dict, analysis: Analysis) -> list[str]:
    """The PR block's one line on launch-bound cells (stock vs patched per config): how many, their band and
    floor, and which did not reach the floor and why (the adaptive rounds' stop reason)."""
    rows = [(c, r) for c, result in analysis.per_config.items() for r in result.rows]
    launch = [(c, r) for c, r in rows if r.launch_bound]
    if not launch:
        return []
    rule = POLICY.launch_bound
    short = [(c, r) for c, r in launch if len(r.rounds) < rule.floor]
    text = (
        f"**Launch-bound: {len(launch)} of {len(rows)} cells** (the device waited for the host: in more than a "
        "third of the processes the host took ≥ 90% of the block time to enqueue the calls), judged at "
        f"±{rule.band:.0%} with ≥ {rule.floor} processes per side"
    )
    if not short:
        return [text + "; every one reached that floor.", ""]
    stopped = ((data["run"].get("adaptive") or {}).get("stopped")) or {}
    why = {
        "budget": f"the next adaptive round (~{stopped.get('next_round_s', 0):.0f} s) did not fit the "
        f"{stopped.get('left_s', 0):.0f} s left of --budget-s",
        "max_rounds": "the adaptive rounds reached their maximum",
    }.get(
        stopped.get("why"),
        "the run had no adaptive rounds"
        if not data["run"].get("adaptive")
        else "its adaptive rounds ended first; this results.json predates the record of why",
    )
    named = _named([f"`{c}` {r.cell.op} {r.cell.label} {r.cell.dtype}" for c, r in short])
    return [text + f"; {len(short)} did not reach it ({why}): {named}.", ""]


def _resume_text(resume: und.Resume) -> str:
    """What the resume command runs: rounds, worker processes and minutes (or why the time is unknown)."""
    if resume.seconds is None:
        time_text = "time unknown (this run's processes carry no start time)"
    else:
        time_text = f"~{math.ceil(resume.seconds / 60)} min of worker time"
    if resume.adaptive:
        return (
            f"The command below continues the adaptive rounds for up to {_plural(resume.rounds, 'round')} "
            f"({resume.until} in all): {resume.processes} worker processes, {time_text}"
        )
    return (
        f"The command below adds {_plural(resume.rounds, 'round')} ({resume.until} in all) of every cell under every "
        f"build and config: {resume.processes} worker processes, {time_text}"
    )


def undetermined_lines(data: dict, analysis: Analysis) -> list[str]:
    """The PR block's few lines on undetermined cells (:mod:`harness.undetermined`): how many, the noise
    floor per config, the MDE range, the processes a verdict needs, what the resume command runs (processes,
    minutes), the cells it cannot bring to a verdict and why, and the command."""
    found = analysis.needs
    if not found:
        return []
    resume = analysis.resume or und.resume(data, analysis.contrasts, found)
    total = sum(len(r.rows) for r in analysis.contrasts)
    floors = "; ".join(
        f"`{config}` " + ", ".join(f"{_pct(f.sd)} {f.cls.value}" for f in analysis.floors if f.config == config)
        for config in dict.fromkeys(f.config for f in analysis.floors)
    )
    mdes = [f.mde for f in found if math.isfinite(f.mde)]
    mde = f"{_pct(min(mdes))}-{_pct(max(mdes))}" if mdes else "–"
    reach = [f for f in found if f.processes is not None]
    far = len(found) - len(reach)
    text = (
        f"**{len(found)} of {total} cell verdicts undetermined.** Noise floor (sd of the log per-process medians "
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
    if resume.argv:
        text += " " + _resume_text(resume) + "."
    if resume.beyond:
        given = max(g for f, g in zip(found, resume.given, strict=True) if f in resume.beyond)
        why = (
            f"adaptive rounds stop at {und.MAX_ROUNDS} rounds in all, runner.MAX_ROUNDS, so it gives them at most "
            f"{given} processes per side"
            if resume.adaptive
            else f"they need more than the {given} processes per side it gives"
        )
        cells = dict.fromkeys(f"{f.row.cell.op} {f.row.cell.label} {f.row.cell.dtype}" for f in resume.beyond)
        text += (
            f" {'It' if resume.argv else 'Resuming'} cannot bring {len(resume.beyond)} of the {len(found)} to a "
            f"verdict ({why}): {_named(list(cells))}."
        )
    text += " Per cell, the CI half-width predicted after resuming: Details, Undetermined cells."
    if resume.argv:
        text += " Resume the run:"
    lines = [text, ""]
    if resume.argv:
        lines += ["```", _nox_command(resume.argv), "```", ""]
    return lines


def _undetermined_details(analysis: Analysis) -> list[str]:
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
        predicted = _pct(f.width_at(after)) if after > f.n else "–"
        lines.append(
            f"| {f.result.contrast.label} | {c.op} {c.label} | {c.dtype} | {f.row.cls.value} | {f.n} "
            f"| {_pct(f.half_width)} | {_pct(f.mde)} | {_pct(f.goal)}{' (edge)' if f.edge else ''} | {needed} "
            f"| {after if after > f.n else '–'} | {predicted} |"
        )
    return lines + ["", "</details>", ""]


def _other_contrasts(data: dict, analysis: Analysis, unit: str, scale: float) -> list[str]:
    """The full tables of the contrasts that are not stock vs patched per config (those are the Cells tables)."""
    others = [r for r in analysis.contrasts if r not in analysis.per_config.values()]
    if not others:
        return []
    out = ["## Contrasts", ""]
    for result in others:
        out += [f"<details><summary>{result.contrast.label}: {_plural(len(result.rows), 'cell')}</summary>", ""]
        out += contrast_table(data, result, unit, scale) if result.rows else [f"{result.why}."]
        out += ["", "</details>", ""]
    return out


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
    out += macos.release_flag_lines(data["builds"])
    summaries, sections, problems = _config_sections(data, analysis, unit, scale)
    drifted = [f"`{c}` {b}" for (b, c), d in analysis.drifts.items() if d.verdict == "drift"]
    errors = [line for note in observed.error_notes(data) for line in (note, "")]
    if drifted:
        errors += [f"> **Drift:** {', '.join(drifted)} changed over the run (see Drift in the details).", ""]
    tail = launch_bound_line(data, analysis) + undetermined_lines(data, analysis)
    out += prbody.render_block(data, analysis.contrasts, errors + _what_was_compared(data) + check_notes(data), tail)
    out += [
        "<details><summary><b>Details</b>: per-config summary, every cell, undetermined cells, correctness, "
        "consistency, drift, failures, provenance</summary>",
        "",
    ]
    if analysis.ab:
        out += _per_config_summary(run, summaries) + [f"![speedup per cell with 95% CI]({SPEEDUP_PNG})", ""]
    out += [
        "## Cells",
        "",
        f"Medians of the per-process medians, ±half their interquartile range; {unit} = FLOP per call / median "
        "(GEMM 2·M·N·K, SDPA 4·B·H·L²·D, halved when causal); % of peak against the device's dense datasheet "
        "peak where known (harness/peaks.py)."
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
    out += _other_contrasts(data, analysis, unit, scale)
    out += [f"![{r.contrast.label}]({plots.contrast_png_name(i)})" for i, r in plots.plotted(analysis.contrasts)] + [""]
    out += _undetermined_details(analysis)
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
