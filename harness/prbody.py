"""The PR-body block of ``report.md``: what a reviewer reads first, pasteable as is.

One paragraph of what was measured where (device and chip, OS and build, power source, torch versions
and commits, series and its hash, rounds), then one bullet per contrast (:mod:`harness.contrasts`): its
claim, the outcome with the count of verdicts and the speedup range, what the outcome means for the
series (its ``means``, else the claim's own words), the kernels each side ran when observed, and a
table of only the cells that decide or contradict it (at most :data:`DECIDING_ROWS`); then the
report's launch-bound and undetermined lines, then the series' tests on each build against their
expected outcomes. Every per-cell table is in the report's details, once. Fits one screen (≤ 60
lines) for the default matrix of every device. Rendered from results.json alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness import contrasts as con
from harness import document as doc
from harness import observed, stats
from harness.document import Build, RunDocument, SeriesTests
from harness.evidence import EQUIVALENCE_CLAIMS, Contrast


@dataclass(frozen=True)
class Listed:
    """Items a sentence counts and names. The count and the list of a sentence come from one of these, so
    they cannot part: :meth:`counted` writes ``<N> <what>: a, b, c and K more`` with N the number of items
    and K the ones not named."""

    items: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.items)

    def names(self, limit: int) -> str:
        """The first ``limit`` items, then ``and K more`` for the rest."""
        more = len(self.items) - limit
        shown = ", ".join(self.items[: limit if more > 0 else len(self.items)])
        return shown + (f" and {more} more" if more > 0 else "")

    def counted(self, what: str, limit: int) -> str:
        """``<N> <what>: <names>``: ``what`` may carry a parenthesis, never a colon."""
        return f"{len(self.items)} {what}: {self.names(limit)}"


#: words for a claim's outcome in the block
OUTCOME_WORDS = {
    con.SHOWN: "**shown**",
    con.NOT_SHOWN: "**not shown**",
    con.CONTRADICTED: "**contradicted**",
    con.NO_CLAIM: "",
    con.NOT_MEASURED: "not measured",
}


def declared(run: RunDocument) -> tuple[Contrast, ...]:
    """The run's contrasts (:func:`harness.contrasts.for_run`): those recorded in results.json ``evidence``,
    then ``patched/C`` vs ``stock/C`` for every config C no declared contrast compares that way."""
    return doc.of(run).contrasts


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


#: rows of the deciding-cells tables of all contrasts together in the PR block (each gets a share, at least
#: :data:`MIN_DECIDING_ROWS`); the rest are in the details
DECIDING_ROWS = 20
MIN_DECIDING_ROWS = 3


def deciding_table(result: con.ContrastResult, limit: int = DECIDING_ROWS) -> list[str]:
    """The cells that decide the outcome or contradict the claim (:attr:`harness.contrasts.ContrastResult.deciding`),
    at most ``limit`` (a last row counts the rest); empty when none."""
    rows = result.deciding
    if not rows:
        return []
    a, b = result.contrast.a.label, result.contrast.b.label
    lines = [f"| cell | dtype | {a} µs | {b} µs | speedup [95% CI] | verdict |", "|---|---|---|---|---|---|"]
    shown = rows if len(rows) <= limit else rows[: limit - 1]
    for r in shown:
        lines.append(
            f"| {r.cell.op} {r.cell.label} | {r.cell.dtype} | {_us(r.a_median)} | {_us(r.b_median)} "
            f"| {speedup_ci(r.cmp)} | {_verdict(r.cmp)}{_label(r)} |"
        )
    if len(rows) > len(shown):
        lines.append(f"| … {len(rows) - len(shown)} more in the details | | | | | |")
    return ["", *lines]


def _label(row: con.ContrastRow) -> str:
    """What a deciding row's verdict rests on, when not plain host time of a kernel-bound cell."""
    if row.time == con.DEVICE:
        return " (launch-bound; kernel time)"
    return " (launch-bound)" if row.launch_bound else ""


#: what an outcome means when the series declares no sentence for it (``{a}``/``{b}``: the sides)
MEANS = {
    ("faster", con.SHOWN): "`{a}` is faster than `{b}` beyond the band on every covered cell.",
    ("faster", con.NOT_SHOWN): "`{a}` is not shown faster on every covered cell at these processes (nor refuted).",
    ("faster", con.CONTRADICTED): "`{a}` is slower than `{b}` on some covered cell: the claim does not hold.",
    ("equivalent", con.SHOWN): "`{a}` and `{b}` take the same time within the band on every covered cell.",
    ("equivalent", con.NOT_SHOWN): "No covered cell moved beyond the band; equivalence is not shown here.",
    ("equivalent", con.CONTRADICTED): "`{a}` and `{b}` differ beyond the band on some covered cell.",
}


def meaning(result: con.ContrastResult) -> str:
    """The contrast's one-sentence consequence: the series' ``means`` for the outcome, else :data:`MEANS`."""
    c = result.contrast
    declared = c.meaning(result.outcome)
    if declared:
        return declared
    claim = "equivalent" if c.claim in EQUIVALENCE_CLAIMS else c.claim
    return MEANS.get((claim, result.outcome), "").format(a=c.a.label, b=c.b.label)


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


def contrast_block(result: con.ContrastResult, run: RunDocument, limit: int = DECIDING_ROWS) -> list[str]:
    """One contrast in the PR block: a bullet with its heading and consequence, the kernels line when
    observed (not for a config that never started: :func:`harness.observed.never_started`), then the table
    of the cells that decide or contradict it (at most ``limit`` rows)."""
    line = f"- {_heading(result)}"
    said = meaning(result) if result.contrast.claim != "none" else ""
    out = [line + (f" {said}" if said else "")]
    never = observed.never_started(run)
    if run.kernels and not {result.contrast.a.config, result.contrast.b.config} & set(never):
        out.append(f"  - {observed.contrast_line(run, result.contrast)}")
    table = deciding_table(result, limit)
    return out + (table + [""] if table else [])


def _provenance_sentence(run: RunDocument) -> str:
    head, machine = run.header, run.machine
    builds = head.builds
    mac = run.builds[builds[0]].provenance.get("mac") or {}
    device = machine.gpu_name
    where = [f"`{head.device}`" + (f" ({device})" if device else ""), f"CPU {machine.cpu_name}"]
    if machine.model:
        where.append(f"Mac {machine.model}")
    where.append(machine.os_text)
    if mac.get("power_source"):
        where.append(f"power: {mac['power_source']}")
    if mac.get("low_power_mode") is not None:
        where.append(f"Low Power Mode {'on' if mac['low_power_mode'] else 'off'}")
    torches = "; ".join(
        f"{b} torch {run.builds[b].torch_version} (`{(run.builds[b].git_version or 'unknown')[:12]}`"
        + _series_text(run.builds[b])
        + ")"
        for b in builds
    )
    series = f" Series `{run.evidence.series}`." if run.evidence.series else ""
    return (
        f"Measured on {', '.join(where)}. {torches}.{series} {_rounds_text(run)}, interleaved; configs: "
        + ", ".join(
            f"`{c}` ({' '.join(f'{k}={v}' for k, v in run.configs[c]['env'].items()) or 'no variables'})"
            for c in head.configs
        )
        + "."
    )


def _rounds_text(run: RunDocument) -> str:
    """How many fresh processes measured each cell: the planned rounds, and the adaptive ones when any ran."""
    head, adaptive = run.header, run.header.adaptive
    text = f"{head.rounds} round{'' if head.rounds == 1 else 's'} of fresh processes per (build, config)"
    added = adaptive.rounds_added if adaptive else 0
    if added:
        lo, hi = run.processes_per_cell()
        span = f"{lo}" if lo == hi else f"{lo}-{hi}"
        launch = adaptive.launch_bound_target
        target = f"±{adaptive.target:.1%}" + (f" (launch-bound cells ±{launch:.1%})" if launch else "")
        text += f" + {added} adaptive rounds for the cells whose CI was wider than {target}"
        text += f": {span} processes per cell and side"
    return text


def _series_text(build: Build) -> str:
    manifest = build.manifest or {}
    series = manifest.get("series") if isinstance(manifest, dict) else None
    if isinstance(series, dict) and series.get("hash"):
        return f", series {series.get('name')} `{str(series['hash'])[:8]}`"
    if manifest.get("base_sha"):
        return f", base `{str(manifest['base_sha'])[:12]}`"
    return ""


def tests_table(section: SeriesTests | None, builds: list[str]) -> list[str]:
    """The series' tests per build against the expected outcome (harness.seriestests)."""
    if not section:
        return []
    lines = ["Series tests (upstream test files, each build's interpreter):", ""]
    if section.skipped:
        return lines + [f"- not run: {section.skipped}", ""]
    lines += ["| test | selection | " + " | ".join(builds) + " |", "|---|---|" + "---|" * len(builds)]
    for test in section.tests:
        selection = (
            f"`{test.file}`"
            + (f" `-k {test.k}`" if test.k else "")
            + "".join(f" `{k}={v}`" for k, v in test.env.items())
        )
        cells = [_test_cell(test.builds[b]) if b in test.builds else "–" for b in builds]
        lines.append(f"| {test.name} | {selection} | " + " | ".join(cells) + " |")
    return lines + [""] + _requirements_lines(section.requirements)


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


def render_block(
    run: RunDocument, results: list[con.ContrastResult], notes: list[str], tail: list[str] = ()
) -> list[str]:
    """The PR-body block: provenance paragraph, warnings (``notes``), the definition of speedup, one
    bullet per contrast (:func:`contrast_block`), ``tail`` (the report's launch-bound and undetermined
    lines), the series' tests."""
    out = ["## For the pull request", "", _provenance_sentence(run), "", *notes]
    if results:
        device = any(r.time == con.DEVICE for result in results for r in result.rows)
        out += [SPEEDUP_DEFINITION + (" " + DEVICE_DEFINITION if device else ""), ""]
    if results and not run.kernels:  # said once, not under every contrast
        out += [observed.NOT_OBSERVED, ""]
    tables = sum(1 for r in results if r.deciding)
    limit = max(MIN_DECIDING_ROWS, DECIDING_ROWS // max(tables, 1))
    for result in results:  # a tight list: a blank line only around a table
        out += contrast_block(result, run, limit)
    if results and out[-1]:
        out.append("")
    out += list(tail)
    out += tests_table(run.series_tests, list(run.header.builds))
    return out


#: a cell's estimator, in the words of every report (a single run's PR block, a merge's)
CELL_ESTIMATOR = (
    "the Hodges-Lehmann estimate over the per-process medians of the rounds both sides ran, with its exact 95% CI"
)

#: the one definition of speedup, in the PR block (docs/reading-the-report.md says the same)
SPEEDUP_DEFINITION = (
    f"Speedup = B time / A time (> 1: A faster; stock vs patched: A = patched, B = stock), {CELL_ESTIMATOR}; "
    "faster/slower when the whole CI lies beyond ±2% (±5% for launch-bound cells, whose device waits for the "
    "host), equivalent when it lies inside."
)

#: what an A/A run's reports say, a single run's and a merge's alike
AA_WORDS = "an A/A run; any verdict other than equivalent/undetermined is a false positive"


#: added to :data:`SPEEDUP_DEFINITION` where some launch-bound cell was judged on device time
DEVICE_DEFINITION = (
    "A launch-bound cell with device time on both sides is judged on that instead, at ±2% (the kernels alone: "
    '**kernel**; its µs in the tables are device time, marked "kernel time"), and its host time apart '
    "(**dispatch**, ±5%, named in the launch-bound line below, not counted in the claims)."
)


def collect_env_lines(run: RunDocument) -> list[str]:
    """``python -m torch.utils.collect_env`` per build, folded."""
    out = []
    for b in run.header.builds:
        text = run.builds[b].provenance.get("collect_env")
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
