"""Supervision of the harness's short child processes: every one runs under a deadline, and the
message of a child that runs out of time names the step it was in.

:func:`run` starts a program (an argument list, never a shell string) in its own process group, with
stdout and stderr in temporary files (never a pipe that a grandchild could hold open), and waits:

- a child with an answer channel (``answer=True``: :mod:`harness.bench.channel`) announces its steps there
  ("importing torch", "probing the device", ...); each step has its own deadline (``steps``; the
  time before the first announcement is :data:`START_STEP`, :data:`START_S`), and the error says which
  one ran out: "build stock probe (/usr/bin/python3): importing torch took longer than 120 s";
- any other child has one deadline for the whole program (``deadline``).

A step that runs longer than :data:`SLOW_S` is said on stderr while it runs (with its deadline) and
again when it ends, so a slow ``import torch`` is never silent. On a deadline the whole process group
is killed (SIGKILL) and :class:`ChildTimeout` raised; on Ctrl-C it is killed too.

The worker processes of a measurement run are watched by :func:`harness.supervise.run_worker` (cells,
stalls); the patch and upstream git commands go through GitPython (:mod:`harness.upstream`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.bench import channel
from harness.errors import HarnessError
from harness.progress import note

#: seconds a step runs before the harness says that it is slow (its deadline does not change)
SLOW_S = 10.0
#: the step of a channel child before it announced any: Python's start-up and ``import harness``
START_STEP = "starting the interpreter"
#: seconds allowed for :data:`START_STEP` (a cold start on a network filesystem takes a few seconds)
START_S = 60.0
#: seconds for ``import torch`` in a child: about 2 s on an H200 host, 4-6 s on a 2-core VM, up to ~20 s
#: the first time after an install without bytecode (:data:`harness.venvs.NO_COMPILE`) on a slow disk
IMPORT_TORCH_S = 120.0
#: seconds between two polls of a running child
POLL_S = 0.05
#: the line Python prints when the interpreter stops before running any code (Python/pylifecycle.c)
FATAL = "Fatal Python error"


class ChildTimeout(HarnessError):
    """A child process that ran past its deadline (it was killed); the message names the step."""


@dataclass(frozen=True)
class Outcome:
    """How a child ended: exit status, its output, the steps it announced and its answer
    (:data:`harness.bench.channel.NO_ANSWER` when it wrote none), and its wall time in seconds."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    steps: tuple[str, ...] = ()
    answer: object = field(default=channel.NO_ANSWER)

    @property
    def answered(self) -> bool:
        return self.answer is not channel.NO_ANSWER

    def last_line(self, default: str = "no output") -> str:
        """The last non-empty line of stderr (else of stdout), at most 300 characters."""
        lines = self.stderr.strip().splitlines() or self.stdout.strip().splitlines()
        return (lines[-1].strip() if lines else default)[:300]

    def fatal(self) -> str | None:
        """The "Fatal Python error: ..." line when the interpreter stopped before running any code
        (e.g. ``PYTHONHOME`` pointing nowhere: "init_fs_encoding: failed to get the Python codec ..."),
        else None."""
        return fatal_line(self.stderr)


def fatal_line(stderr: str) -> str | None:
    """The first line of ``stderr`` that starts with :data:`FATAL`, or None."""
    return next((ln.strip()[:300] for ln in stderr.splitlines() if ln.startswith(FATAL)), None)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and anything it started
    except OSError:
        pass
    proc.wait()


def run(
    cmd: Sequence[str],
    *,
    what: str,
    deadline: float,
    steps: Mapping[str, float] | None = None,
    answer: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    remedy: str = "",
) -> Outcome:
    """Run ``cmd`` to its end under its deadline(s); see the module docstring.

    Args:
        cmd: the argument list; with ``answer`` ``--answer <file>`` is appended (:mod:`harness.bench.channel`).
        what: the child, for messages ("build stock probe (/path/to/python)").
        deadline: seconds for the whole child, or (with ``answer``) for a step not in ``steps``.
        steps: step name -> seconds, for the steps a channel child announces.
        env, cwd: the child's environment (default: this process's) and working directory.
        remedy: the remedy of the :class:`ChildTimeout` line.

    Raises:
        ChildTimeout: a step (or the whole child) ran past its deadline; the child was killed.
        HarnessError: the program cannot be started (missing, not executable).
    """
    limits = {START_STEP: START_S, **(steps or {})}
    with tempfile.TemporaryDirectory(prefix="harness-child-") as tmp:
        out_path, err_path, answer_path = Path(tmp, "stdout"), Path(tmp, "stderr"), Path(tmp, "answer.jsonl")
        full = [*map(str, cmd), *(["--answer", str(answer_path)] if answer else [])]
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(
                    full, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True
                )
            except OSError as exc:
                raise HarnessError(f"{what} cannot start: {exc.strerror or exc}", remedy) from None
        started = time.monotonic()
        try:
            announced = _watch(proc, what, deadline, limits, answer_path if answer else None, remedy)
        finally:
            if proc.poll() is None:
                _kill(proc)  # Ctrl-C or an error here: the child does not outlive the harness
        seconds = time.monotonic() - started
        said, value = channel.read(answer_path) if answer else ([], channel.NO_ANSWER)
        return Outcome(
            proc.returncode,
            out_path.read_text(errors="replace"),
            err_path.read_text(errors="replace"),
            seconds,
            tuple(said or announced),
            value,
        )


def _watch(
    proc: subprocess.Popen,
    what: str,
    deadline: float,
    limits: Mapping[str, float],
    answer_path: Path | None,
    remedy: str,
) -> list[str]:
    """Poll ``proc`` until it ends; kill it and raise :class:`ChildTimeout` when its current step
    (``answer_path``'s last announced one, else the whole child) overruns. Returns the steps seen."""
    step = START_STEP if answer_path else what
    seen: list[str] = []
    step_at, size, slow_said = time.monotonic(), -1, False
    while proc.poll() is None:
        time.sleep(POLL_S)
        now = time.monotonic()
        if answer_path is not None:
            grown = answer_path.stat().st_size if answer_path.exists() else 0
            if grown != size:  # parse only when the child wrote something
                size = grown
                announced, _ = channel.read(answer_path)
                if len(announced) > len(seen):
                    _said_slow(f"{what}: {step}", now - step_at, slow_said)
                    seen, step, step_at, slow_said = announced, announced[-1], now, False
        limit = limits.get(step, deadline) if answer_path else deadline
        label = f"{what}: {step}" if answer_path else what
        if not slow_said and now - step_at >= SLOW_S and limit > SLOW_S:
            note(f"{label} has taken {now - step_at:.0f} s so far (stopped at {limit:g} s)")
            slow_said = True
        if now - step_at >= limit:
            _kill(proc)
            raise ChildTimeout(f"{label} took longer than {limit:g} s (stopped)", remedy)
    _said_slow(f"{what}: {step}" if answer_path else what, time.monotonic() - step_at, slow_said)
    return seen


def _said_slow(label: str, seconds: float, running_note_said: bool) -> None:
    """After a step that was said to be slow while it ran: how long it took in the end."""
    if running_note_said:
        note(f"{label} took {seconds:.0f} s")
