"""docs/troubleshooting.md lists every message a user can see: each raise site of a HarnessError
(sub)class in harness/ must have its cause's literal text in the document, so a new message without
documentation fails CI."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import parsed

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "troubleshooting.md"
#: ValueErrors whose text the CLI shows as the cause of a UsageError (runner: ``UsageError(str(exc))``)
SHOWN_VALUE_ERRORS = (REPO / "harness" / "configs.py",)


def _error_classes(trees: dict[Path, ast.Module]) -> set[str]:
    defs = [node for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    names, grew = {"HarnessError"}, True
    while grew:
        grew = False
        for node in defs:
            if node.name not in names and any(isinstance(b, ast.Name) and b.id in names for b in node.bases):
                names.add(node.name)
                grew = True
    return names


def _literal_parts(node: ast.expr) -> list[str] | None:
    """The literal text of a message, split where a value is filled in (None: not a literal at all)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        parts = [""]
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts[-1] += value.value
            else:
                parts.append("")
        return parts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_parts(node.left), _literal_parts(node.right)
        return None if left is None or right is None else left + right
    return None


def _callee_names(func: ast.expr) -> set[str]:
    """``Error(...)`` -> {Error}; ``(error or UpstreamError)(...)`` -> {error, UpstreamError}."""
    if isinstance(func, ast.Name):
        return {func.id}
    if isinstance(func, ast.BoolOp):
        return set().union(*(_callee_names(v) for v in func.values))
    return set()


def raise_sites(sources: dict[Path, str]) -> list[tuple[str, list[str]]]:
    """(``file:line``, distinctive literal parts of the cause) of every raise of a HarnessError class,
    plus the ValueErrors of :data:`SHOWN_VALUE_ERRORS`. A part is distinctive when it has two words or
    six characters; a cause that is not literal text (``str(exc)``) is skipped."""
    trees = {path: parsed(text) for path, text in sources.items()}
    known = {path: parsed(path.read_text()) for path in (REPO / "harness").rglob("*.py")}
    classes = _error_classes({**known, **trees})
    sites = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            names = _callee_names(node.exc.func)
            if not (names & classes or (path in SHOWN_VALUE_ERRORS and "ValueError" in names)):
                continue
            parts = _literal_parts(node.exc.args[0])
            if parts is None:
                continue
            keep = [" ".join(p.split()) for p in parts]
            keep = [p for p in keep if len(p.split()) >= 2 or len(p) >= 6]
            sites.append((f"{path.relative_to(REPO)}:{node.lineno}", keep))
    return sites


def undocumented(sources: dict[Path, str], doc: str) -> list[str]:
    """``file:line: 'part'`` for every distinctive part of a cause that the document does not contain."""
    text = " ".join(doc.split())
    return [f"{where}: {part!r}" for where, parts in raise_sites(sources) for part in parts if part not in text]


def _harness_sources() -> dict[Path, str]:
    return {path: path.read_text() for path in sorted((REPO / "harness").rglob("*.py"))}


def test_every_message_is_in_troubleshooting():
    sources = _harness_sources()
    sites = raise_sites(sources)
    assert len(sites) > 100  # the parser sees the raise sites (117 when this test was written)
    assert sum(1 for _, parts in sites if parts) > 90
    missing = undocumented(sources, DOC.read_text())
    assert not missing, "add these messages to docs/troubleshooting.md:\n" + "\n".join(missing)


def test_a_new_undocumented_message_fails(tmp_path):
    path = REPO / "harness" / "new_module.py"  # never written: the source text is given directly
    source = (
        "from harness.errors import UsageError\n"
        "def f(x):\n"
        "    raise UsageError(f'the frobnicator {x} is out of flux', 'recalibrate it')\n"
    )
    assert undocumented({path: source}, DOC.read_text()) == [
        "harness/new_module.py:3: 'the frobnicator'",
        "harness/new_module.py:3: 'is out of flux'",
    ]
    documented = DOC.read_text() + "\n- `` the frobnicator <x> is out of flux `` -- Remedy: recalibrate it.\n"
    assert undocumented({path: source}, documented) == []


def test_document_has_the_five_stages():
    headings = re.findall(r"(?m)^## (.+)$", DOC.read_text())
    assert headings == [
        "1. Inputs: the command line",
        "2. Upstream and patch series",
        "3. Build",
        "4. Run (`compare`, `bench`)",
        "5. Results and report",
    ]
