"""The first screen of every example report says only what its own data says: every count of a list equals
the list's length (or the list ends "and K more" with the right K), the block's tally lines share one named
denominator that results.json gives, and no resume command is printed that its own text says cannot decide
a cell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import document as doc
from harness import report

ROOT = Path(__file__).resolve().parent.parent / "docs" / "examples"
EXAMPLES = sorted(ROOT.glob("*/results.json"))

#: a counted list: ``<N> <what, parentheses balanced, no colon outside them>: <items>``
COUNTED = re.compile(
    r"(?:^|(?<=[\s*(]))(?P<n>\d+) (?P<what>(?:[^:()]|\((?:[^()]|\([^()]*\))*\))*?): (?P<items>.+)$", re.S
)
MORE = re.compile(r"^(?P<last>.*) and (?P<k>\d+) more$", re.S)
#: a tally line's count and its named denominator
TALLY = re.compile(r"\*\*(?:Launch-bound: )?(?P<n>\d+) of (?P<m>\d+) (?P<what>stock-vs-patched cells|cell verdicts)")


def pr_block(text: str) -> str:
    """The part of a report between "## For the pull request" and the first "<details>"."""
    start = text.index("## For the pull request")
    return text[start : text.index("<details>", start)]


def _depth_split(text: str, stops: str) -> list[str]:
    """``text`` split after each character of ``stops`` that stands outside (), [] and backticks and is
    followed by a space or the end (a ``.**`` closes a clause too); the separators stay out."""
    out, depth, tick, start, i = [], 0, False, 0, 0
    while i < len(text):
        c = text[i]
        if c == "`":
            tick = not tick
        elif not tick and c in "([":
            depth += 1
        elif not tick and c in ")]":
            depth -= 1
        elif not tick and depth == 0 and c in stops:
            j = i + 1
            while j < len(text) and text[j] == "*":
                j += 1
            if j == len(text) or text[j] == " ":
                out.append(text[start:i])
                start = j + 1
                i = j
        i += 1
    return [part for part in [*out, text[start:]] if part.strip()]


def clauses(block: str) -> list[str]:
    """The block's prose clauses (split at ". " and "; "), without the provenance paragraph (counts of
    rounds, no lists), tables and code."""
    paragraphs = re.split(r"\n\s*\n", block)
    prose = []
    fenced = False
    for para in paragraphs:
        if para.startswith("```") or fenced:
            fenced = para.count("```") % 2 == (0 if fenced else 1) if not fenced else para.count("```") % 2 == 0
            continue
        if para.startswith(("## ", "Measured on ", "|")):
            continue
        prose.append(" ".join(line for line in para.splitlines() if not line.startswith("|")))
    return [c for p in prose for c in _depth_split(p, ".;")]


def count_problems(block: str) -> list[str]:
    """Every counted list whose count is not its length (``and K more`` counted in), in words."""
    found = []
    for clause in clauses(block):
        m = COUNTED.search(clause)
        if not m:
            continue
        items = m["items"]
        more = 0
        tail = MORE.match(items)
        if tail:
            items, more = tail["last"], int(tail["k"])
        listed = _depth_split(items, ",")  # at ", " outside brackets and backticks
        if int(m["n"]) != len(listed) + more:
            found.append(f"{m['n']} {m['what']!r}: {len(listed)} listed + {more} more")
    return found


def test_the_clause_parser_catches_a_count_that_parts_from_its_list():
    """Planted: a count that names fewer items than it says (the H200 kernels report's "3 of the 10" naming
    one cell) is caught; the right count and "and K more" pass."""
    bad = "It cannot bring 3 of them to a verdict (they need more than the 63 it gives): mm M1 float16."
    assert count_problems(bad) == ["3 'of them to a verdict (they need more than the 63 it gives)': 1 listed + 0 more"]
    good = "3 of them it cannot bring to a verdict (x; y): `a` mm M1 N2, `b` mm [1, 2] and 1 more. Next: a, b."
    assert count_problems(good) == []
    assert count_problems("2 cells whose dispatch changed: `c` 1.05× [1.01, 1.09] faster, `d` x.") == []
    assert count_problems("7 cells: a, b and 4 more.") == ["7 'cells': 2 listed + 4 more"]


@pytest.mark.parametrize("results", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_count_in_every_example_pr_block_is_its_list(results):
    block = pr_block((results.parent / "report.md").read_text())
    assert count_problems(block) == [], results.parent.name


@pytest.mark.parametrize("results", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_example_block_has_one_named_denominator_and_it_is_the_runs(results):
    run = doc.load(results.parent)
    analysis = report.analyse(run)
    block = pr_block((results.parent / "report.md").read_text())
    tallies = list(TALLY.finditer(block))
    assert len({(t["m"], t["what"]) for t in tallies}) <= 1, [t.group(0) for t in tallies]
    rows = [r for result in analysis.per_config.values() for r in result.rows]
    for t in tallies:
        assert t["what"] == "stock-vs-patched cells" and int(t["m"]) == len(rows)
        line = block[t.start() : block.index("\n", t.start())]
        if line.startswith("**Launch-bound"):
            assert int(t["n"]) == sum(r.launch_bound for r in rows)
        else:
            assert int(t["n"]) == sum(r.cmp.verdict == "undetermined" for r in rows)
    if analysis.needs and analysis.resume and analysis.resume.beyond and "```" in block:
        m = re.search(r"(\d+) of them it cannot bring to a verdict", block)
        assert m and int(m[1]) == len(analysis.resume.beyond) < len(analysis.needs)


@pytest.mark.parametrize("results", EXAMPLES, ids=lambda p: p.parent.name)
def test_no_example_prints_a_resume_command_its_own_text_says_cannot_decide_a_cell(results):
    block = pr_block((results.parent / "report.md").read_text())
    if "cannot bring any of them to a verdict" in block:
        assert "nox -s compare" not in block and "What would:" in block
    for m in re.finditer(r"\*\*(\d+) of \d+ [a-z-]+ cells undetermined\*\*\.?(?:, and (\d+) cells?)?", block):
        undetermined = int(m[1]) + int(m[2] or 0)
        beyond = re.search(r"(\d+) of them it cannot bring", block)
        if beyond:
            assert int(beyond[1]) < undetermined and "nox -s compare" in block


def test_the_cpu_ab_block_names_both_torch_versions_and_prints_no_resume_command():
    """The cpu-ab run compares torch 2.13.0 (CPU) with 2.14.1 (CUDA): the top says both versions; every one of
    its 16 undetermined cells needs more processes than a resume can give, so no command is printed."""
    block = pr_block((ROOT / "cpu-ab" / "report.md").read_text())
    note = next(line for line in block.splitlines() if line.startswith("> **Note:** not an A/A run"))
    assert "torch 2.13.0+cpu" in note and "torch 2.14.1+cu130" in note
    assert "```" not in block and "What would:" in block


def test_check_bound_notes_leave_the_first_screen_unless_a_claim_rests_on_them():
    """The H200 A/A default matrix's TF32-vs-default consistency bounds are a property of the config's check:
    no contrast claims anything about tf32_override vs default there, so the note is in the details."""
    text = (ROOT / "h200-aa-floor" / "report.md").read_text()
    assert "Check uninformative" not in pr_block(text)
    assert "## Notes on the checks" in text and "consistency check(s) whose sum of bounds" in text


def test_a_check_bound_note_a_claim_rests_on_stays_on_the_first_screen():
    """cpu-contrasts claims `patched/default` equivalent to `stock/default`: an uninformative accuracy check of
    patched under `default` is a note the claim rests on (first screen); the same check under `no_vec`, which
    no claimed contrast of that cell compares on patched, goes to the details."""
    import json

    data = json.loads((ROOT / "cpu-contrasts" / "results.json").read_text())
    key = "mm/333x444x555/float32"

    def planted(config: str) -> tuple[str, str]:
        copy = json.loads(json.dumps(data))
        proc = next(p for p in copy["processes"] if (p["round"], p["build"], p["config"]) == (0, "patched", config))
        proc["cells"][key]["check"] = {**proc["cells"][key]["check"], "status": "uninformative", "passed": False}
        text = report.render(doc.from_json(copy))
        return pr_block(text), text

    block, _ = planted("default")
    assert "**Check uninformative:** 1 accuracy check(s)" in block and "`default` mm M333 N444 K555" in block
    block, text = planted("no_vec")
    assert (
        "Check uninformative" not in block and "`no_vec` mm M333 N444 K555" in text.split("## Notes on the checks")[1]
    )
