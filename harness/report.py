"""``report.md`` for the pull request, rendered from ``results.json`` alone (no measuring here).

Command ``report``: ``python -m harness report results/<run>`` re-renders the report of a run.
Sections: summary per env config (geometric-mean speedup with its CI), per-cell tables
(stock and patched medians, patched/stock time ratio with a 95 % bootstrap confidence interval,
Mann-Whitney U p-value, verdict), correctness (relative error vs float64 per config and build),
failures and skips with their reasons, and provenance with the command that reproduces the run.
Long tables are folded in ``<details>`` so the PR stays readable.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from harness import results as res
from harness import stats
from harness.bench.workloads import Cell
from harness.fsutil import atomic_write_text

THRESHOLD = 0.02


def add_arguments_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=Path, help="a results directory holding results.json")


def run_report(args: argparse.Namespace) -> int:
    data = res.load(args.directory)
    directory = args.directory.parent if args.directory.name == res.RESULTS else args.directory
    path = directory / "report.md"
    atomic_write_text(path, render(data))
    print(path)
    return 0


def _us(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e6:,.1f}"


def _tflops(cell: Cell, seconds: float | None) -> str:
    return "–" if not seconds else f"{cell.flop / seconds / 1e12:.3g}"


def _ratio_ci(ratio: float, low: float, high: float) -> str:
    """``0.982 [0.975, 0.990]``; the CI is omitted when it could not be computed (NaN)."""
    if not math.isfinite(ratio):
        return "–"
    if math.isfinite(low) and math.isfinite(high):
        return f"{ratio:.3f} [{low:.3f}, {high:.3f}]"
    return f"{ratio:.3f} [no CI]"


def _adaptive_text(run: dict) -> list[str]:
    """One line on adaptive sampling, when the run used it."""
    adaptive = run.get("adaptive")
    if not adaptive:
        return []
    left = sum(map(len, adaptive["unconverged"].values()))
    return [f"Adaptive sampling to a CI half-width of ±{adaptive['target']:.1%}: {adaptive['rounds_added']} round(s) "
            f"added within a budget of {adaptive['budget_s']:g} s; "
            + (f"**{left} cell(s) did not converge** (marked in the tables)." if left else "every cell converged."), ""]


def _in_words(gm) -> str:
    """The geometric mean's verdict from its CI alone (the same band rule as a cell, without a U test)."""
    change = f"patched {abs(1 - gm.gm):.1%} {'faster' if gm.gm < 1 else 'slower'}"
    if not (math.isfinite(gm.lo) and math.isfinite(gm.hi)):
        return f"{change}, no CI ({gm.reason})"
    if gm.hi < 1 - THRESHOLD:
        return f"**{change}** (whole CI below -{THRESHOLD:.0%})"
    if gm.lo > 1 + THRESHOLD:
        return f"**{change}** (whole CI above +{THRESHOLD:.0%})"
    if 1 - THRESHOLD <= gm.lo and gm.hi <= 1 + THRESHOLD:
        return f"unchanged within ±{THRESHOLD:.0%}"
    return f"undetermined: {change} at the point estimate, but the CI reaches across the ±{THRESHOLD:.0%} band"


def _what_was_compared(data: dict) -> list[str]:
    """Warnings a reviewer needs before the numbers: is the series in either build, are the builds
    the same, do they differ in variant (CPU-only vs CUDA)."""
    builds = data["run"]["builds"]
    prov = {b: data["builds"][b]["provenance"] for b in builds}
    notes = []
    marker_hits = {b: {k: bool(v) for k, v in prov[b]["variables_in_libraries"].items() if k.startswith("PYTORCH_MPS_GEMM")}
                   for b in builds}
    for marker in sorted({k for hits in marker_hits.values() for k in hits}):
        where = [b for b in builds if marker_hits[b].get(marker)]
        if not where:
            notes.append(f"> **Note:** neither build's libraries contain `{marker}`, so this run compares two torch "
                         "builds, not the patch series (on Linux the MPS code is not compiled at all).")
        elif where != ["patched"]:
            notes.append(f"> **Note:** `{marker}` is found in: {', '.join(where)} (expected: patched only).")
    ident = {b: (prov[b]["torch_version"], prov[b]["git_version"], data["builds"][b]["input"].get("sha256")) for b in builds}
    if len(builds) == 2 and ident[builds[0]] == ident[builds[1]]:
        notes.append("> **Note:** both builds are the same torch (version, git hash, wheel): an A/A run; "
                     "any verdict other than unchanged/undetermined is a false positive.")
    variants = {b: (f"CUDA {prov[b]['cuda_version']}" if prov[b].get("cuda_version") else "CPU-only")
                + (" + MPS" if prov[b]["mps_built"] else "") for b in builds}
    if len(set(variants.values())) > 1:
        notes.append("> **Note:** the builds are different variants (" + ", ".join(f"{b}: {v}" for b, v in variants.items())
                     + "); differences may come from that, not from a patch.")
    return [line for note in notes for line in (note, "")]  # one blockquote each


def _modes_text(cmp) -> str:
    parts = []
    for side, found in (("stock", cmp.stock_modes), ("patched", cmp.patched_modes)):
        if len(found) > 1:
            parts.append(f"{side} " + " / ".join(f"{_us(m.center)} µs ({m.share:.0%})" for m in found))
    return "; ".join(parts)


def _short(sha: str | None) -> str:
    return (sha or "unknown")[:12]


def _notes(records: list[dict]) -> list[str]:
    notes = []
    for r in records:
        if r.get("status") in ("failed", "skipped") and r.get("reason"):
            text = f"{r['status']}: {r['reason']}"
            if text not in notes:
                notes.append(text)
    if any(r.get("measurement", {}).get("launch_bound") for r in records):
        notes.append("launch-bound (host-visible latency, not kernel time)")
    return notes


def _consistency(section: dict | None, builds: list[str]) -> list[str]:
    """The cross-config consistency section (harness.checks.consistency)."""
    if not section:
        return []
    a, b = section["pair"]
    lines = ["## Config consistency", "",
             f"GEMM outputs under `{a}` against `{b}` in the same build (first round), relative difference "
             "against the sum of both configs' accuracy bounds.", ""]
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
        bad = {k: v for k, v in cells.items() if not v["passed"]}
        worst = max(cells.items(), key=lambda kv: kv[1]["rel_diff"] / kv[1]["bound"], default=None)
        text = f"- **{build}**: {len(cells) - len(bad)}/{len(cells)} cells agree"
        if worst:
            text += f"; largest difference {worst[1]['rel_diff']:.2e} (bound {worst[1]['bound']:.1e}) in `{worst[0]}`"
        lines.append(text + "".join(f"; **differs** `{k}` {v['rel_diff']:.2e} > {v['bound']:.1e}" for k, v in bad.items()))
    return lines + [""]


def _provenance(data: dict) -> list[str]:
    run = data["run"]
    names = run["builds"]
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(str(fn(data["builds"][b])) for b in names) + " |")

    row("torch", lambda b: b["provenance"]["torch_version"])
    row("git hash", lambda b: f"`{_short(b['provenance'].get('git_version'))}`")
    row("input", lambda b: f"`{b['input']['value']}`")
    row("wheel sha256", lambda b: f"`{(b['input'].get('sha256') or '–')[:16]}`")
    row("series marker in libraries", lambda b: ", ".join(
        f"{k}: {'yes' if v else 'no'}" for k, v in b["provenance"]["variables_in_libraries"].items()
        if k.startswith("PYTORCH_MPS_GEMM")) or "–")
    row("MPS built / available", lambda b: f"{b['provenance']['mps_built']} / {b['provenance']['mps_available']}")
    row("CUDA available", lambda b: b["provenance"]["cuda_available"])
    row("GPU", lambda b: b["provenance"].get("gpu_name") or "–")
    row("CPU", lambda b: b["provenance"]["cpu_name"])
    row("OS", lambda b: b["provenance"]["os"].get("macos_product_version") or b["provenance"]["os"]["platform"])
    row("Python", lambda b: b["provenance"]["python"])
    row("torch default threads (workers used: see below)", lambda b: b["provenance"]["num_threads"])
    lines += ["", f"Harness {data['harness_version']}, device `{run['device']}`, {run['rounds']} rounds of fresh "
              f"processes per (build, config), order shuffled per round (seed {run['seed']}), "
              f"timing {run['timing']}, torch threads in workers: {run.get('threads') or 'torch default'}; started {run['started']}, finished {run['finished']}.", "",
              "Reproduce:", "", "```", " ".join(run["command"]), "```"]
    return lines


def render(data: dict) -> str:
    """The markdown report of one run (see module docstring). Deterministic for the same data."""
    run = data["run"]
    builds = data["run"]["builds"]  # plan order (results.json sorts its keys)
    ab = builds == ["stock", "patched"]
    table = res.cell_table(data)
    names = " vs ".join(f"{b} (torch {data['builds'][b]['provenance']['torch_version']})" for b in builds)
    out = [f"# {'A/B' if ab else 'Benchmark'}: {names} on `{run['device']}`", ""]

    summaries, sections, accuracy, problems = [], [], [], []
    for config in run["configs"]:
        env = data["configs"][config]["env"]
        env_text = " ".join(f"{k}={v}" for k, v in env.items()) or "no variables"
        rows = []
        comparisons = []
        for key, per_build in table.get(config, {}).items():
            cell = Cell.from_key(key)
            medians = {b: res.process_medians(per_build.get(b, [])) for b in builds}
            mid = {b: (stats.process_median(m) if m else None) for b, m in medians.items()}
            notes = _notes([r for b in builds for r in per_build.get(b, [])])
            base = [cell.op, cell.label, cell.dtype]
            if ab:
                cmp = stats.compare(medians["stock"], medians["patched"], threshold=THRESHOLD)
                comparisons.append(cmp)
                ci = _ratio_ci(cmp.ratio, cmp.ci_low, cmp.ci_high)
                p = f"{cmp.p_value:.2g}" if math.isfinite(cmp.p_value) else "–"
                verdict = f"**{cmp.verdict}**" if cmp.verdict in ("faster", "slower") else cmp.verdict
                if cmp.verdict == "undetermined":
                    notes.insert(0, cmp.reason)
                if cmp.bimodal:
                    notes.append("bimodal: " + _modes_text(cmp))
                if key in run.get("adaptive", {}).get("unconverged", {}).get(config, []):
                    hw = cmp.half_width
                    notes.append(f"unconverged: CI half-width {hw:.1%} > target ±{run['adaptive']['target']:.1%}"
                                 if math.isfinite(hw) else "unconverged: no CI yet")
                rows.append(base + [_us(mid["stock"]), _us(mid["patched"]), _tflops(cell, mid["stock"]),
                                    _tflops(cell, mid["patched"]), ci, p, verdict, "; ".join(notes)])
            else:
                b = builds[0]
                spread = stats.iqr(medians[b]) if len(medians[b]) >= 2 else None
                iqr_text = "–" if spread is None else f"{_us(spread[0])} – {_us(spread[1])}"
                rows.append(base + [_us(mid[b]), iqr_text, _tflops(cell, mid[b]), str(len(medians[b])), "; ".join(notes)])
            for b in builds:
                checks = [r["check"] for r in per_build.get(b, []) if r.get("check")]
                for chk in checks:
                    accuracy.append((config, cell, b, chk))
            for note in notes:
                if note.startswith(("failed: ", "skipped: ")):
                    problems.append(f"- `{config}` {cell.op} {cell.label} {cell.dtype}: {note}")
        if ab:
            gm = stats.geomean(comparisons)
            if not math.isfinite(gm.gm):
                summaries.append(f"- **{config}** ({env_text}): no geometric mean ({gm.reason})")
            else:
                summaries.append(f"- **{config}** ({env_text}): geometric mean of the time ratio over "
                                 f"{gm.n_cells} cells **{_ratio_ci(gm.gm, gm.lo, gm.hi)}**: {_in_words(gm)}")
            head = ["op", "shape", "dtype", "stock µs", "patched µs", "stock TFLOP/s", "patched TFLOP/s",
                    "patched/stock [95% CI]", "p (U test)", "verdict", "notes"]
        else:
            head = ["op", "shape", "dtype", "median µs", "IQR of process medians µs", "TFLOP/s", "processes", "notes"]
        sections += [f"<details><summary><b>{config}</b> ({env_text}): {len(rows)} cells</summary>", "",
                     "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        sections += ["| " + " | ".join(r) + " |" for r in rows]
        sections += ["", "</details>", ""]

    if ab:
        n = run["rounds"]
        floor = 2 / math.comb(2 * n, n)
        out += ["## Summary", ""] + _what_was_compared(data) + [
            f"Time ratio patched/stock (< 1: patched faster); verdict threshold ±{THRESHOLD:.0%}; 95% bootstrap "
            f"confidence intervals over per-process medians; {n} fresh processes per build and config, so the "
            f"smallest possible U-test p is {floor:.2g}"
            + (" and no verdict other than undetermined is possible (use --rounds 4 or more)." if floor >= 0.05 else "."),
            ""] + _adaptive_text(run) + summaries + [""]
    out += ["## Cells", ""] + sections
    out += ["## Correctness", "", "Relative error ‖out − ref‖/‖ref‖ against a float64 CPU reference (first round).", ""]
    if accuracy:
        out += ["<details><summary>relative error per cell</summary>", "",
                "| config | op | shape | dtype | build | rel. error | bound | passed |", "|---|---|---|---|---|---|---|---|"]
        for config, cell, b, chk in accuracy:
            err = "–" if chk["rel_error"] is None else f"{chk['rel_error']:.2e}"
            out.append(f"| {config} | {cell.op} | {cell.label} | {cell.dtype} | {b} | {err} | {chk['bound']:.1e} | "
                       f"{'yes' if chk['passed'] else 'NO: ' + chk['reason']} |")
        out += ["", "</details>", ""]
    else:
        out += ["No checks ran.", ""]
    out += _consistency(data.get("consistency"), builds)
    out += ["## Failures and skips", ""] + (problems or ["None."]) + [""]
    out += ["## Provenance", ""] + _provenance(data) + [""]
    return "\n".join(out)
