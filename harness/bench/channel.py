"""The answer channel of a child process: a file named on its command line that nothing else writes.

A child that answers the harness in JSON (the provenance probe :mod:`harness.bench.provenance`, the
consistency check :mod:`harness.bench.consistency`) is given ``--answer PATH`` and appends JSON lines
to that file: one ``{"step": "<what it starts now>"}`` per step (so that a deadline can name the step it
ran out in: "importing torch took longer than 120 s"), and last ``{"answer": <value>}``. Its stdout is
never read: an interpreter whose ``.pth`` files or ``sitecustomize`` print at start-up, or a library that
writes to file descriptor 1 from C, cannot corrupt the answer. The parent's side (deadlines per step,
reading the answer) is :mod:`harness.children`. Standard library only: it runs in a build's interpreter.
"""

from __future__ import annotations

import json
from pathlib import Path

#: the value :func:`read` returns for a child that wrote no complete answer
NO_ANSWER = object()


class Channel:
    """The child's end: ``step`` and ``answer`` append one JSON line each to ``path`` (flushed at once)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None

    def _write(self, record: dict) -> None:
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    def step(self, name: str) -> None:
        """Say that the child starts ``name`` (a phrase: "importing torch")."""
        self._write({"step": name})

    def answer(self, value) -> None:
        """Write the child's answer (any JSON value); the last line of the channel."""
        self._write({"answer": value})


def read(path: Path) -> tuple[list[str], object]:
    """(the steps a child announced, in order; its answer or :data:`NO_ANSWER`). Torn lines are left out."""
    steps, answer = [], NO_ANSWER
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return steps, answer
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), str):
            steps.append(record["step"])
        elif isinstance(record, dict) and "answer" in record:
            answer = record["answer"]
    return steps, answer
