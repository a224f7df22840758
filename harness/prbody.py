"""The PR-body block of ``report.md``: what a reviewer reads first, pasteable as is.

One paragraph of what was measured where (device and chip, OS and build, power source, torch versions
and commits, series and its hash, rounds), then per contrast (:mod:`harness.contrasts`) its claim's
outcome and a table per shape and dtype of the ops it covers (A and B median µs, A's throughput,
speedup = B time / A time with its exact 95 % CI, verdict), then the series' tests on each build
against their expected outcomes. Equivalence claims (``unchanged``/``equivalent``) that hold take
one line ("equivalent within ±2 % on all N cells"); their per-cell tables, and every other number,
are in the report's details. Rendered from results.json alone.
"""

from __future__ import annotations

import math

from harness import contrasts as con
from harness import observed, stats
from harness import results as res
from harness.evidence import EQUIVALENCE_CLAIMS, Contrast, Evidence, default_contrasts

#: words for a claim's outcome in the block
OUTCOME_WORDS = {
    con.SHOWN: "**shown**",
    con.NOT_SHOWN: "**not shown**",
    con.CONTRADICTED: "**contradicted**",
    con.NO_CLAIM: "",
    con.NOT_MEASURED: "not measured",
}


def declared(data: dict) -> tuple[Contrast, ...]:
    """The run's contrasts: those recorded in results.json ``evidence``, else the default family
    (patched/C vs stock/C for every config C, no claim)."""
    evidence = Evidence.from_json(data.get("evidence"))
    return evidence.contrasts or default_contrasts(data["run"]["builds"], data["run"]["configs"])


def evaluate_all(data: dict, threshold: float, launch_threshold: float) -> list[con.ContrastResult]:
    return [con.evaluate(data, c, threshold, launch_threshold) for c in declared(data)]


def _us(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e6:,.1f}"


def speedup_ci(cmp: stats.Comparison) -> str:
    """B time / A time with its CI, ``1.018× [1.010, 1.025]`` (the CI of the A/B time ratio inverted)."""
    ratio, low, high = cmp.ratio, cmp.ci_low, cmp.ci_high
    if not (math.isfinite(ratio) and ratio > 0):
        return "–"
    if math.isfinite(low) and math.isfinite(high) and low > 0:
        return f"{1 / ratio:.3f}× [{1 / high:.3f}, {1 / low:.3f}]"
    return f"{1 / ratio:.3f}× [no CI]"


def _verdict(cmp: stats.Comparison) -> str:
    """The cell's verdict (``faster``: A faster than B), bold when it is a change."""
    v = cmp.verdict
    return f"**{v}**" if v in (stats.FASTER, stats.SLOWER) else v


def contrast_table(result: con.ContrastResult, unit: str, scale: float) -> list[str]:
    """Rows per shape and dtype of one evaluated contrast."""
    a, b = result.contrast.a.label, result.contrast.b.label
    lines = [
        f"| cell | dtype | {a} µs | {b} µs | {a} {unit} | speedup [95% CI] | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result.rows:
        mid = r.a_median
        rate = "–" if not mid else f"{r.cell.flop / mid / scale:.3g}"
        note = " (launch-bound)" if r.launch_bound else ""
        lines.append(
            f"| {r.cell.op} {r.cell.label} | {r.cell.dtype} | {_us(r.a_median)} | {_us(r.b_median)} "
            f"| {rate} | "
            f"{speedup_ci(r.cmp)} | {_verdict(r.cmp)}{note} |"
        )
    return lines


def _heading(result: con.ContrastResult) -> str:
    c = result.contrast
    title = f"**{c.name}**: " if c.name else ""
    claim = {
        "none": "",
        "faster": f"claim: `{c.a.label}` faster than `{c.b.label}`",
        "unchanged": "claim: unchanged",
        "equivalent": "claim: equivalent",
    }[c.claim]
    sides = (
        f"`{c.a.label}` vs `{c.b.label}`"
        + (f" on {', '.join(c.ops)}" if c.ops else "")
        + (f" ({', '.join(c.dtypes)})" if c.dtypes else "")
    )
    outcome = OUTCOME_WORDS[result.outcome]
    return f"{title}{sides}" + (f"; {claim}: {outcome}" if claim else "") + f" ({result.why})."


def contrast_block(result: con.ContrastResult, unit: str, scale: float) -> list[str]:
    """One contrast in the PR block: a heading line and its table; an equivalence claim that holds is one line."""
    head = _heading(result)
    if not result.rows or (result.contrast.claim in EQUIVALENCE_CLAIMS and result.outcome == con.SHOWN):
        return [f"- {head}", ""]
    if result.contrast.claim in EQUIVALENCE_CLAIMS:  # not shown / contradicted: the cells that decide it
        off = [r for r in result.rows if r.cmp.verdict != stats.EQUIVALENT]
        worst = max(off, key=lambda r: abs(math.log(r.cmp.ratio)) if r.cmp.ratio > 0 else 0.0)
        return [
            f"- {head} Furthest from 1: {worst.cell.op} {worst.cell.label} {worst.cell.dtype} "
            f"{speedup_ci(worst.cmp)} {worst.cmp.verdict}; every cell in the details.",
            "",
        ]
    return [head, "", *contrast_table(result, unit, scale), ""]


def with_kernels(block: list[str], line: str) -> list[str]:
    """A contrast block with its kernels line (:func:`harness.observed.contrast_line`): a nested bullet under a
    one-line block, a paragraph under a heading with a table."""
    if block[0].startswith("- "):
        return [block[0], f"  - {line}", *block[1:]]
    return [block[0], "", line, *block[1:]]


def _provenance_sentence(data: dict) -> str:
    run = data["run"]
    builds = run["builds"]
    prov = {b: data["builds"][b]["provenance"] for b in builds}
    first = prov[builds[0]]
    mac = first.get("mac") or {}
    os_text = first["os"].get("macos_product_version")
    os_text = (
        (f"macOS {os_text}" + (f" ({mac['macos_build']})" if mac.get("macos_build") else ""))
        if os_text
        else first["os"]["platform"]
    )
    device = first.get("gpu_name") if run["device"] != "cpu" else None
    where = [f"`{run['device']}`" + (f" ({device})" if device else ""), f"CPU {first['cpu_name']}"]
    if mac.get("model"):
        where.append(f"Mac {mac['model']}")
    where.append(os_text)
    if mac.get("power_source"):
        where.append(f"power: {mac['power_source']}")
    if mac.get("low_power_mode") is not None:
        where.append(f"Low Power Mode {'on' if mac['low_power_mode'] else 'off'}")
    torches = "; ".join(
        f"{b} torch {prov[b]['torch_version']} (`{(prov[b].get('git_version') or 'unknown')[:12]}`"
        + _series_text(data["builds"][b])
        + ")"
        for b in builds
    )
    evidence = Evidence.from_json(data.get("evidence"))
    series = f" Series `{evidence.series}`." if evidence.series else ""
    return (
        f"Measured on {', '.join(where)}. {torches}.{series} {_rounds_text(data)}, interleaved; configs: "
        + ", ".join(
            f"`{c}` ({' '.join(f'{k}={v}' for k, v in data['configs'][c]['env'].items()) or 'no variables'})"
            for c in run["configs"]
        )
        + "."
    )


def _rounds_text(data: dict) -> str:
    """How many fresh processes measured each cell: the planned rounds, and the adaptive ones when any ran."""
    run = data["run"]
    text = f"{run['rounds']} rounds of fresh processes per (build, config)"
    added = (run.get("adaptive") or {}).get("rounds_added")
    if added:
        lo, hi = res.processes_range(data)
        span = f"{lo}" if lo == hi else f"{lo}-{hi}"
        launch = run["adaptive"].get("launch_bound_target")
        target = f"±{run['adaptive']['target']:.1%}" + (f" (launch-bound cells ±{launch:.1%})" if launch else "")
        text += f" + {added} adaptive rounds for the cells whose CI was wider than {target}"
        text += f": {span} processes per cell and side"
    return text


def _series_text(build: dict) -> str:
    manifest = build.get("build") or {}
    series = manifest.get("series") if isinstance(manifest, dict) else None
    if isinstance(series, dict) and series.get("hash"):
        return f", series {series.get('name')} `{str(series['hash'])[:8]}`"
    if manifest.get("base_sha"):
        return f", base `{str(manifest['base_sha'])[:12]}`"
    return ""


def tests_table(section: dict | None, builds: list[str]) -> list[str]:
    """The series' tests per build against the expected outcome (harness.seriestests)."""
    if not section:
        return []
    lines = ["Series tests (upstream test files, each build's interpreter):", ""]
    if section.get("skipped"):
        return lines + [f"- not run: {section['skipped']}", ""]
    lines += ["| test | selection | " + " | ".join(builds) + " |", "|---|---|" + "---|" * len(builds)]
    for test in section["tests"]:
        selection = (
            f"`{test['file']}`"
            + (f" `-k {test['k']}`" if test.get("k") else "")
            + "".join(f" `{k}={v}`" for k, v in test.get("env", {}).items())
        )
        cells = []
        for b in builds:
            rec = test["builds"].get(b)
            if rec is None:
                cells.append("–")
                continue
            cells.append(_test_cell(rec))
        lines.append(f"| {test['name']} | {selection} | " + " | ".join(cells) + " |")
    return lines + [""] + _requirements_lines(section.get("requirements"))


def _test_cell(rec: dict) -> str:
    """One build's cell: outcome and counts (a fail with passing tests reads "fail, mixed"), the first line
    of the first failure for every fail, the reason of a skip or error, and the judgement
    (:func:`harness.seriestests.judge`: ✓, or **✗ expected …** with why, or neither for a skip)."""
    counts = ", ".join(f"{rec[k]} {k}" for k in ("passed", "failed", "errors", "skipped") if rec.get(k))
    outcome = rec["outcome"] + (", mixed" if rec["outcome"] == "fail" and rec.get("passed") else "")
    text = outcome + (f" ({counts})" if counts else "")
    if rec["outcome"] == "fail":
        lines = rec.get("first_lines")  # older records: their "test: first line" entries
        lines = [line for line in (lines if lines is not None else _after_name(rec.get("failures"))) if line]
        if lines:
            more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
            first = lines[0][:160].replace("|", "/").replace("`", "'")
            text += f": `{first}`{more}"
    why = rec.get("reason") or (rec.get("skips") or [""])[0] if rec["outcome"] in ("skip", "error") else ""
    if why:  # pytest's skip reason, or why pytest could not run; shortened to keep the row one line
        text += f": {why[:120].replace('|', '/')}"
    judged = (rec.get("expectation") or "").replace("|", "/")
    if rec.get("expected") and rec.get("as_expected") is None:  # a skip where pass/fail was expected
        text += f" (expected {rec['expected']}; a skip here is not evidence either way)"
    elif rec.get("expected") and rec.get("as_expected"):
        text += " ✓" + (f" ({judged})" if judged else "")
    elif rec.get("expected"):
        text += f" **✗ expected {rec['expected']}**" + (f": {judged}" if judged else "")
    return text


def _after_name(failures: list[str] | None) -> list[str]:
    return [f.split(": ", 1)[-1] for f in failures or []]


def _requirements_lines(installed: dict | None) -> list[str]:
    """One line: what ``[evidence] test_requirements`` installed into which build (harness.seriestests)."""
    if not installed:
        return []
    reqs = ", ".join(next(iter(installed.values()))["requirements"])
    per_build = "; ".join(
        f"{b}: " + ("installed" if r["installed"] else f"not installed ({r['reason']})") for b, r in installed.items()
    )
    return [f"Test requirements ({reqs}) by pip: {per_build}.", ""]


def render_block(data: dict, results: list[con.ContrastResult], notes: list[str]) -> list[str]:
    """The PR-body block: provenance paragraph, warnings (``notes``), contrasts, tests."""
    gpu = data["run"]["device"] != "cpu"
    unit, scale = ("TFLOP/s", 1e12) if gpu else ("GFLOP/s", 1e9)
    out = ["## For the pull request", "", _provenance_sentence(data), "", *notes]
    if results:
        out += [
            "Speedup = B time / A time (> 1: A faster), Hodges-Lehmann over per-process medians of the rounds "
            "both sides ran, exact 95% CI; faster/slower when the whole CI lies beyond ±2% (±5% launch-bound), "
            "equivalent when it lies inside.",
            "",
        ]
    if results and not data.get("kernels"):  # said once, not under every contrast
        out += [observed.NOT_OBSERVED, ""]
    for result in results:
        block = contrast_block(result, unit, scale)
        out += with_kernels(block, observed.contrast_line(data, result.contrast)) if data.get("kernels") else block
    out += tests_table(data.get("series_tests"), data["run"]["builds"])
    return out


def details_tables(results: list[con.ContrastResult], data: dict) -> list[str]:
    """Every contrast's full per-cell table (for the details part of the report)."""
    if not results:
        return []
    gpu = data["run"]["device"] != "cpu"
    unit, scale = ("TFLOP/s", 1e12) if gpu else ("GFLOP/s", 1e9)
    out = ["## Contrasts, every cell", ""]
    for result in results:
        out += [f"<details><summary>{result.contrast.label}: {len(result.rows)} cells</summary>", ""]
        out += contrast_table(result, unit, scale) if result.rows else [f"{result.why}."]
        out += ["", "</details>", ""]
    return out


def collect_env_lines(data: dict) -> list[str]:
    """``python -m torch.utils.collect_env`` per build, folded."""
    out = []
    for b in data["run"]["builds"]:
        text = data["builds"][b]["provenance"].get("collect_env")
        if text:
            out += [
                f"<details><summary>python -m torch.utils.collect_env ({b})</summary>",
                "",
                "```",
                text.rstrip(),
                "```",
                "",
                "</details>",
                "",
            ]
    return out
