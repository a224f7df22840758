"""Code, tests and docs say what a thing is, never which tracker entry of this project it came from.

A citation such as "the Nth issue" by number (``[Ii]ssues? #?N``) cannot be opened by a newcomer: it is
refused in every ``.py`` and ``.md`` file under harness/, tests/, docs/ and in README.md. An upstream
PyTorch issue stays, named as such ("pytorch issue N" or "pytorch/pytorch issue N", a line break or a
comment's ``#`` between the two words allowed); another project's issue is written ``owner/repo#N``
(e.g. ``ml-explore/mlx#103``), which the pattern does not match.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: the word, then its number (a ``#`` before it allowed), across a line break
CITATION = re.compile(r"\b[Ii]ssues?\s+#?\d+")
#: what may stand right before a citation: the upstream it belongs to (comment markers between allowed)
UPSTREAM = re.compile(r"\bpytorch(?:/pytorch)?[\s#:]*$", re.IGNORECASE)
SUFFIXES = {".py", ".md"}


def scanned(root: Path) -> list[Path]:
    """The files the rule covers under ``root``: ``.py`` and ``.md`` of harness/, tests/, docs/, and README.md."""
    files = [p for d in ("harness", "tests", "docs") for p in sorted((root / d).rglob("*")) if p.suffix in SUFFIXES]
    return [*files, *([root / "README.md"] if (root / "README.md").is_file() else [])]


def citations(text: str) -> list[tuple[int, str]]:
    """(line number, the citation) of every issue number in ``text`` that is not an upstream PyTorch one."""
    found = []
    for m in CITATION.finditer(text):
        if UPSTREAM.search(text[max(0, m.start() - 40) : m.start()]):
            continue
        found.append((text.count("\n", 0, m.start()) + 1, " ".join(m.group().split())))
    return found


def citations_under(root: Path) -> list[str]:
    """``path:line: citation`` for every citation in the files :func:`scanned` covers under ``root``."""
    return [f"{p.relative_to(root)}:{n}: {c}" for p in scanned(root) for n, c in citations(p.read_text("utf-8"))]


def test_no_file_cites_an_internal_issue_number():
    files = {p.relative_to(REPO).as_posix() for p in scanned(REPO)}
    # the scan reaches every kind of file it covers (a wrong root or suffix would pass on nothing)
    assert {"README.md", "docs/methodology.md", "harness/runner.py", "tests/test_no_issue_numbers.py"} <= files
    assert len(files) > 100
    found = citations_under(REPO)
    assert not found, "say what the thing is instead of its issue number:\n" + "\n".join(found)


def test_a_planted_citation_is_caught_and_upstream_ones_are_not(tmp_path):
    word = "Iss" + "ue"  # spelt apart so this file does not cite one itself
    planted = {
        f"({word.lower()} 30's RunDocument)": (1, f"{word.lower()} 30"),
        f"{word} 18 item 3: every path": (1, f"{word} 18"),
        f"a hostile review of\n# {word.lower()} 27, N11": (2, f"{word.lower()} 27"),
        f"actions/runner-images {word.lower()}s 9918 and 11899": (1, f"{word.lower()}s 9918"),
        f"see {word.lower()} #7": (1, f"{word.lower()} #7"),
    }
    for text, hit in planted.items():
        assert citations(text) == [hit], text
    upstream = [
        f"hangs (pytorch {word.lower()} 162872)",
        f"(pytorch/pytorch {word.lower()} 150149)",
        f"can hang (pytorch\n{word.lower()} 162872)",
        f"the kernel choice (pytorch\n#: {word.lower()} 182815)",
        "(ml-explore/mlx#103, the same for every CMake project)",
        "no issue here, 30 of them",
    ]
    for text in upstream:
        assert citations(text) == [], text
    # planted into a copy of a real doc and a real module: the tree scan names the file and the line
    for rel in ("docs/methodology.md", "harness/runner.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((REPO / rel).read_text(encoding="utf-8"), encoding="utf-8")
    assert citations_under(tmp_path) == []
    doc = tmp_path / "docs" / "methodology.md"
    lines = doc.read_text(encoding="utf-8").splitlines(keepends=True)
    doc.write_text("".join([*lines[:9], f"**Met on the H200 ({word.lower()} 15):** as planned\n", *lines[9:]]))
    assert citations_under(tmp_path) == [f"docs/methodology.md:10: {word.lower()} 15"]
