"""Typed errors that the CLI shows as one line: the cause, then the remedy.

Every failure a user can cause (bad input, missing tools, unreachable upstream)
is raised as a :class:`HarnessError`; :func:`harness.cli.main` prints
``error: <cause> -- <remedy>`` and exits with :attr:`HarnessError.exit_code`,
never a traceback. Programming errors are not wrapped: they keep their traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """A failure with a known cause and a remedy the user can act on.

    Args:
        cause: what went wrong, one sentence, naming the offending input.
        remedy: what to do about it, one sentence (may be empty).
    """

    exit_code = 2

    def __init__(self, cause: str, remedy: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.remedy = remedy

    def line(self) -> str:
        """The one line shown to the user."""
        return f"error: {self.cause}" + (f" -- {self.remedy}" if self.remedy else "")


class UsageError(HarnessError):
    """Bad command-line input (unknown device, malformed --env, unknown config)."""


class BuildInputError(HarnessError):
    """A --stock/--patched input that cannot become an interpreter with torch."""


class ResultsError(HarnessError):
    """A results directory that cannot be read, resumed or written."""


class UpstreamError(HarnessError):
    """Upstream checkout problems: unreachable URL, missing ref, dirty worktree."""


class SeriesError(HarnessError):
    """An invalid series manifest or a patch series that does not apply."""


class BuildError(HarnessError):
    """A wheel build that cannot start or failed."""
