"""One typed results document, read by every reader.

Outside the results modules (harness/results.py writes and validates the JSON, harness/document.py and
harness/mergedoc.py type and migrate it) nothing indexes the results document with string keys: every reader takes a
:class:`harness.document.RunDocument` and its one ``by_cell`` index. The scan below looks at code only
(comments and docstrings are skipped) for subscripts and ``.get``/``.pop``/``.setdefault`` with a key of
the document's structure (top-level sections, the run header, processes, cell records, build entries) and
for rebuilding the index (``cell_table``); the places that hold such a key in a record that is not the
results document, or that write the document, are listed with the reason.

Not covered (kept as mappings inside the typed document, read with their own keys by the module that
writes them): a build's provenance facts and manifest, a cell record's check and raw measurement, one cell's
consistency record (harness.checks.consistency), one build's series-test record (harness.seriestests) and
the kernel observations (harness.bench.kernels).
"""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent.parent / "harness"

#: the results modules: the only ones that read the JSON by key
RESULTS_MODULES = ("results.py", "document.py", "mergedoc.py")

#: keys of the results document's structure
KEYS = (
    "run",
    "builds",
    "configs",
    "processes",
    "evidence",
    "consistency",
    "series_tests",
    "kernels",
    "harness_version",
    "schema_version",
    "order",
    "adaptive",
    "cells",
    "measurement",
    "provenance",
    "interpreter",
    "worker_started",
)
_KEY = "|".join(KEYS)
PATTERNS = (
    re.compile(r"\[\s*[\"'](?:" + _KEY + r")[\"']\s*\]"),  # x["run"], rec["measurement"]
    re.compile(r"\.(?:get|pop|setdefault)\(\s*[\"'](?:" + _KEY + r")[\"']"),  # x.get("cells")
    re.compile(r"\bcell_table\("),  # the index, rebuilt: RunDocument.by_cell is built once
)

#: (module path under harness/, top-level function or class) -> why a structural key there is not a
#: reader indexing the results document
ALLOWED = {
    ("runner.py", "Recorder"): "the writer of results.json: it records processes, kernels, order and adaptive",
    ("runner.py", "execute"): "the writer of results.json: it assembles the document and its sections",
    ("runner.py", "probe_builds"): "writes each build's entry (input, interpreter, provenance) before the document",
    ("runner.py", "consistency_failures"): "counts the consistency section it has just written",
    ("supervise.py", "run_consistency"): "writes the consistency section from each build's consistency records",
    ("supervise.py", "run_series_tests"): "passes each build's interpreter to the series tests it writes",
    ("supervise.py", "read_worker_records"): "reads a worker's raw/<proc>.jsonl records (the worker's protocol)",
    ("supervise.py", "run_worker"): "reads a worker's spec and records (the worker's protocol)",
    ("rundir.py", "read_status"): "validates a worker's raw/<proc>.status.json (the worker's protocol)",
    ("doctor.py", "config_row"): "reads one doctor worker's status record, not a results.json",
    ("manifest.py", "_load_evidence"): "series.toml's [evidence] table",
    ("evidence.py", "Evidence"): "series.toml's [evidence.<device>] table (its consistency pair)",
    ("evidence.py", "_device_table"): "series.toml's [evidence.<device>] table (its consistency pair)",
    ("evidence.py", "_base_by_identity"): "reads the build entry the runner is recording (probe_builds)",
}

#: folders of code that never reads a results.json: the worker inside a build's interpreter writes records
SKIPPED = ("bench",)


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def _owner(tree: ast.Module, line: int) -> str:
    for node in tree.body:
        if node.lineno <= line <= node.end_lineno and isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ):
            return node.name
    return "<module>"


def hits(text: str) -> list[tuple[int, str, str]]:
    """(line, top-level owner, code) of every structural-key index in the code of one module's ``text``."""
    return hits_of(text, *PATTERNS)


def hits_of(text: str, *patterns: re.Pattern) -> list[tuple[int, str, str]]:
    """(line, top-level owner, code) of every line of code (comments and docstrings left out) that one of
    ``patterns`` matches."""
    return list(_hits_of(text, patterns))


@functools.cache
def _hits_of(text: str, patterns: tuple[re.Pattern, ...]) -> tuple[tuple[int, str, str], ...]:
    """:func:`hits_of`, once per text and patterns (two tests scan every module of harness/)."""
    tree = ast.parse(text)
    skip = _docstring_lines(tree)
    code = text.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):  # drop comments
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            code[row - 1] = code[row - 1][:col]
    return tuple(
        (n, _owner(tree, n), line.strip())
        for n, line in enumerate(code, start=1)
        if n not in skip and any(p.search(line) for p in patterns)
    )


def _modules() -> list[Path]:
    return [
        p
        for p in sorted(HARNESS.rglob("*.py"))
        if p.name not in RESULTS_MODULES and p.relative_to(HARNESS).parts[0] not in SKIPPED
    ]


def test_no_reader_indexes_the_results_document_with_string_keys():
    found = [
        f"harness/{path.relative_to(HARNESS)}:{n} ({owner}): {line}"
        for path in _modules()
        for n, owner, line in hits(path.read_text())
        if (str(path.relative_to(HARNESS)), owner) not in ALLOWED
    ]
    assert not found, "read the typed document (harness.document.RunDocument) instead:\n" + "\n".join(found)


def test_every_allowed_place_still_holds_a_key():
    """An allow-list entry whose place no longer indexes by key is stale: remove it."""
    modules = {str(p.relative_to(HARNESS)): p for p in _modules()}
    used = {(name, owner) for name, path in modules.items() for _, owner, _ in hits(path.read_text())}
    assert set(ALLOWED) - used == set()


@pytest.mark.parametrize(
    "planted",
    [
        # the readers this change converted, as they were at f27b9dd
        'def schedule(plan, data):\n    for rnd, build, config in data["run"]["order"]:\n        pass\n',
        "def analyse(data):\n    table = res.cell_table(data)\n",
        'def clock_label(data):\n    return {r["measurement"].get("method") for p in data["processes"] for r in p}\n',
        'def rounds_done(data):\n    return [p for p in data["processes"] if isinstance(p.get("round"), int)]\n',
        'def f(r):\n    m = r.get("measurement")\n',
        'def _peak_text(data, config):\n    return data["configs"][config].get("reduced_fp32")\n',
        'def same_identity(data, a):\n    return data["builds"][a]["provenance"]\n',
        'def collect(data):\n    return data.get("series_tests")\n',
    ],
)
def test_the_scan_catches_the_string_keyed_reads_it_replaced(planted):
    assert hits(planted), planted


@pytest.mark.parametrize(
    "unrelated",
    [
        'def f(manifest):\n    return manifest["base_sha"], manifest.get("series")\n',
        'def f(table):\n    return table["name"], table.get("env", {})\n',
        '"""A docstring naming ``data["run"]["order"]``."""\n',
        'x = 1  # data["processes"] in a comment\n',
        "def f(run):\n    return run.header.order, run.by_cell\n",
    ],
)
def test_the_scan_leaves_other_dicts_comments_and_docstrings_alone(unrelated):
    assert hits(unrelated) == []


#: logic decided from display text: a note, a verdict's words or a cell's label tested by substring
DISPLAY_TEXT = re.compile(r"[\"'][\w -]+[\"']\s+(?:not\s+)?in\s+\w+(?:\.\w+)*\.notes\b|\bin\s+\w+(?:\.\w+)*\.notes\)")


def test_no_logic_is_decided_from_display_text():
    """A cell's class is :attr:`harness.contrasts.ContrastRow.cls` (harness.policy), never a note such as
    ``"launch-bound" in r.notes``."""
    assert DISPLAY_TEXT.search('if "launch-bound" in r.notes:')  # the pattern catches the old form
    found = [
        f"harness/{path.relative_to(HARNESS)}:{n}: {line}"
        for path in sorted(HARNESS.rglob("*.py"))
        for n, _, line in hits_of(path.read_text(), DISPLAY_TEXT)
    ]
    assert not found, "\n".join(found)


#: the readers as they were before the typed document, with the reads the scan must find
BEFORE = "f27b9dd"
CONVERTED = ("report.py", "contrasts.py", "undetermined.py", "prbody.py", "pr.py", "observed.py", "policy.py")


@pytest.mark.parametrize("module", CONVERTED)
def test_the_scan_finds_the_string_keyed_reads_of_each_converted_module_before_it(module):
    """Planted for real: each module this change converted, as committed at f27b9dd, is flagged by the scan
    (skipped where the checkout lacks that commit, e.g. a shallow clone)."""
    shown = subprocess.run(
        ["git", "show", f"{BEFORE}:harness/{module}"],
        cwd=HARNESS.parent,
        capture_output=True,
        text=True,
        timeout=60,  # git show of one blob: seconds at most
    )
    if shown.returncode != 0:
        pytest.skip(f"commit {BEFORE} is not in this checkout")
    assert hits(shown.stdout), module
