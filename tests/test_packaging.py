"""The Python the harness claims to support is one it runs on (pyproject.toml, docs/quickstart-macos.md)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parent.parent
#: standard-library modules newer than 3.10, and the first Python that has them
NEWER_STDLIB = {"tomllib": "3.11"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_requires_python_covers_the_stdlib_the_harness_imports():
    spec = SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"])
    used = set().union(*(_imports(p) for p in (REPO / "harness").rglob("*.py")))
    assert "tomllib" in used  # what makes 3.10 unsupported
    for module, first in NEWER_STDLIB.items():
        if module in used:
            older = f"{first.split('.')[0]}.{int(first.split('.')[1]) - 1}"
            assert older not in spec, f"harness imports {module} (Python {first}+) but requires-python allows {older}"
    assert "3.11" in spec and "3.13" in spec


def test_quickstart_claims_the_same_python():
    text = (REPO / "docs" / "quickstart-macos.md").read_text()
    assert "Python 3.11-3.13" in text and "the harness needs 3.11+" in text
    assert not re.search(r"harness needs 3\.10|Python 3\.10-", text)
