"""Microbenchmarks that run inside a build's interpreter: workloads, timers, the worker.

Standard library + torch only (the build's venv holds nothing else).
"""


def words(exc: BaseException, limit: int = 300) -> str:
    """An exception in one line for a record or a message: ``Type: first line of its message`` (at most
    ``limit`` characters of it), or ``Type`` alone for an empty message (no IndexError on ``str(exc) == ""``)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit]}" if text else type(exc).__name__
