"""Progress for long work (clone, build steps, benchmark cells): rich bars on a terminal only.

When stderr is not a terminal (CI logs, pipes) nothing animated is drawn; callers
still get a plain one-line log of each finished step via :func:`note`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


def interactive() -> bool:
    """True when stderr is a terminal (bars are drawn only then)."""
    return sys.stderr.isatty()


def note(message: str) -> None:
    """One plain line on stderr (always shown; the permanent log of what happened)."""
    print(message, file=sys.stderr, flush=True)


class _Task:
    def __init__(self, progress, task_id, total: float | None = None) -> None:
        self._progress, self._id, self._total = progress, task_id, total

    @property
    def total(self) -> float | None:
        """The bar's current total (kept also when no bar is drawn)."""
        return self._total

    def advance(self, amount: float = 1.0, description: str | None = None) -> None:
        if self._progress is not None:
            kwargs = {"description": description} if description else {}
            self._progress.update(self._id, advance=amount, **kwargs)

    def update(
        self, completed: float | None = None, total: float | None = None, description: str | None = None
    ) -> None:
        if total is not None:
            self._total = total
        if self._progress is not None:
            kwargs = {
                k: v
                for k, v in (("completed", completed), ("total", total), ("description", description))
                if v is not None
            }
            self._progress.update(self._id, **kwargs)


@contextmanager
def task(description: str, total: float | None = None) -> Iterator[_Task]:
    """A progress bar with ETA on a terminal; a no-op handle elsewhere."""
    if not interactive():
        yield _Task(None, None, total)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with Progress(*columns, transient=False) as progress:
        yield _Task(progress, progress.add_task(description, total=total), total)
