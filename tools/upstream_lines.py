"""Derived data of upstream files read through the `search` tool, and the files rebuilt from it.

A patch written without a checkout must still be checked against the real upstream files, but nothing
from upstream may be committed here except the context lines a patch carries, and CI has neither
network nor the search tool. So each version of a file the main series changes is kept as *derived*
data only: its size in characters, the git blob SHA where it was read whole, and for each window of
lines that was read, the first 12 hex digits of the SHA-256 of each line (UTF-8, without its newline).

:func:`rebuild` turns that record back into a file for a given set of candidate lines (the pre-image
lines of the patches to try): line i is the candidate whose hash equals the recorded hash of line i,
else a placeholder that names the hash; an unread stretch of the file is one placeholder line.
``git apply`` matches a hunk's context and removed lines exactly and nowhere else, so ``git apply
--check`` of those patches on the rebuilt file answers as on the real one for every line read. Where
only windows were read (files of 80-550 KB: their text had to pass through the reader by hand), a
hunk found in a window applies to the real file too; a hunk not found there could in principle match
in an unread stretch, which the windows are chosen to exclude (they hold the function or module tail
the patch changes).

Usage (the read text is kept outside the repository, e.g. /work/tmp-upstream/)::

    python tools/upstream_lines.py SPEC.json OUT_DIR

SPEC.json is a list of versions: ``{"name", "path", "repo", "commit", "chars", "text": <file with the
read text>, "whole": bool, "to_end": bool, "start": <char offset of the text, or null>, "checks":
[[fragment, char offset where the store's index found it], ...]}``. One ``OUT_DIR/<name>.json`` is
written per version. Errors: :class:`ValueError` naming the version when the text's length or a check
disagrees with what the store reported.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path

HASH_HEX = 12
UNREAD = "<<< not read from upstream >>>"


def line_hash(line: str) -> str:
    """The first 12 hex digits of the SHA-256 of one line (UTF-8, without its newline)."""
    return hashlib.sha256(line.encode()).hexdigest()[:HASH_HEX]


def blob_sha(data: bytes) -> str:
    """The git blob SHA-1 of ``data`` (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def derive(spec: dict, text: str) -> dict:
    """The derived record of one read version (see the module doc); ``text`` ends with a newline.

    Raises:
        ValueError: the text does not end a line, a whole read's length differs from ``chars``, a
            window reaching the end gives a negative start, or a check's fragment is not at its offset.
    """
    name = spec["name"]
    if not text.endswith("\n"):
        raise ValueError(f"{name}: the read text must end with a whole line")
    start = spec.get("start")
    if spec.get("whole"):
        if len(text) != spec["chars"]:
            raise ValueError(f"{name}: read {len(text)} characters, the store has {spec['chars']}")
        start = 0
    elif spec.get("to_end"):
        start = spec["chars"] - len(text)
        if start < 0:
            raise ValueError(f"{name}: the text is longer than the file")
    for fragment, offset in spec.get("checks", []):
        if start is None or text.find(fragment, offset - start) != offset - start:
            raise ValueError(f"{name}: {fragment!r} is not at character {offset}")
    window = {
        "start": start,
        "line": 1 if start == 0 else None,
        "to_end": bool(spec.get("whole") or spec.get("to_end")),
        "lines": [line_hash(line) for line in text.split("\n")[:-1]],
    }
    record = {key: spec[key] for key in ("path", "repo", "commit", "chars")}
    if spec.get("whole"):
        record["blob"] = blob_sha(text.encode())
    record["windows"] = [window]
    return record


def rebuild(record: dict, candidates: Iterable[str]) -> str | None:
    """The file rebuilt from ``record`` for the candidate lines (see the module doc); ``None`` where
    the record says the version has no such file (``"absent": true``)."""
    if record.get("absent"):
        return None
    known = {line_hash(line): line for line in candidates}
    out: list[str] = []
    for window in record["windows"]:
        if window["start"] != 0:
            out.append(UNREAD)
        out += [known.get(h, f"<<< upstream line {h} >>>") for h in window["lines"]]
    if not record["windows"] or not record["windows"][-1]["to_end"]:
        out.append(UNREAD)
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tools/upstream_lines.py SPEC.json OUT_DIR", file=sys.stderr)
        return 2
    spec_path, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for spec in json.loads(spec_path.read_text()):
        text = (spec_path.parent / spec["text"]).read_text(encoding="utf-8")
        try:
            record = derive(spec, text)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        (out / f"{spec['name']}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"{spec['name']}: {len(record['windows'][0]['lines'])} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
