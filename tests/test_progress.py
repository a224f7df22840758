"""harness.progress: bars on a terminal, plain lines elsewhere (CI logs stay readable)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = """
import time
from harness.progress import note, task
with task("cells", total=4) as bar:
    for i in range(4):
        time.sleep(0.05)
        bar.advance(1)
        note(f"[{i + 1}/4] done")
"""


def _run(stderr_to_terminal: bool) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "100"}
    if not stderr_to_terminal:
        proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=60) == 0
    os.close(master)
    return b"".join(chunks).decode(errors="replace")


def test_bar_with_count_on_a_terminal():
    out = _run(True)
    assert "━" in out and "4/4" in out and "\x1b[" in out  # rich's bar, count and cursor control
    assert "[4/4] done" in out


def test_plain_lines_and_no_bar_when_not_a_terminal():
    out = _run(False)
    assert out.splitlines() == [f"[{i}/4] done" for i in range(1, 5)]
    assert "━" not in out and "\x1b[" not in out
