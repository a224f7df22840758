"""Numbers from the command line and from manifests: parsed and range-checked by one function.

Every numeric option of every command (``--rounds``, ``--timeout``, ``--seed``, ``--jobs``, ...) goes
through :func:`number`, as the argparse ``type`` built by :func:`option` and again where a library
entry point receives a plain value (:func:`harness.plan.plan`, :func:`harness.doctor.run`), so the
rule is the same wherever a number comes from: NaN and infinities are refused (``nan <= 0`` is false,
so a bare ``<= 0`` check lets NaN through and turns a deadline off), and so is any value outside the
option's :class:`Bound`, with the allowed range in the one-line message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from harness.errors import HarnessError, UsageError


@dataclass(frozen=True)
class Bound:
    """The allowed values of one number: ``low``..``high`` (each end closed unless ``*_open``), integers
    only when ``integer``; ``unit`` names what it counts (for the message: ``"seconds"``)."""

    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    high_open: bool = False
    unit: str = ""

    def describe(self) -> str:
        """The range in words: ``a whole number of rounds in [1, 1000]``, ``a number of seconds in (0, 86400]``."""
        what = ("a whole number" if self.integer else "a number") + (f" of {self.unit}" if self.unit else "")
        low, high = (str(int(v)) if self.integer else f"{v:g}" for v in (self.low, self.high))
        return f"{what} in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"

    def holds(self, value: float) -> bool:
        """True when ``value`` (finite) lies in the range."""
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below


def number(value: object, what: str, bound: Bound, error: type[HarnessError] = UsageError) -> int | float:
    """``value`` (a command-line string, or an int/float from a caller or a manifest) as a number in ``bound``.

    Args:
        value: the text or number given.
        what: the option or key, for the message (``"--timeout"``, ``"series.toml [evidence] key 'x'"``).
        bound: the allowed range; ``bound.integer`` also refuses fractions, ``1e3`` and booleans.
        error: the :class:`~harness.errors.HarnessError` type raised (``UsageError`` for options).

    Returns:
        an ``int`` when ``bound.integer``, else a ``float``.

    Raises:
        error: not a number, NaN, an infinity, a fraction where an integer is wanted, or outside ``bound``;
            the message names ``what``, the value given and the range.
    """
    shown = _shown(value)
    remedy = f"give {what} {bound.describe()}"
    parsed: int | float
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise error(f"{what} {shown}: not a number", remedy)
    if bound.integer:
        try:
            parsed = int(value.strip(), 10) if isinstance(value, str) else value  # type: ignore[assignment]
        except ValueError:
            raise error(f"{what} {shown}: not an integer", remedy) from None
        if isinstance(parsed, float):
            if not (math.isfinite(parsed) and parsed.is_integer()):
                raise error(f"{what} {shown}: not an integer", remedy)
            parsed = int(parsed)
    else:
        try:
            parsed = float(value)
        except (ValueError, OverflowError):
            raise error(f"{what} {shown}: not a number", remedy) from None
        if not math.isfinite(parsed):
            raise error(f"{what} {shown}: not a finite number", remedy)
    if not bound.holds(parsed):
        raise error(f"{what} {shown}: out of range", remedy)
    return parsed


def _shown(value: object) -> str:
    """``value`` for a one-line message: printable text as given, anything else as its repr, 40 characters at most."""
    text = value if isinstance(value, str) and value.isprintable() else repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def option(flag: str, bound: Bound) -> Callable[[str], int | float]:
    """The argparse ``type=`` of a numeric option: :func:`number` of the text given (its
    :class:`~harness.errors.UsageError` leaves ``parse_args`` as the command's one line)."""

    def parse(text: str) -> int | float:
        return number(text, flag, bound)

    parse.__name__ = flag  # argparse names the type in its own messages
    parse.bound = bound  # type: ignore[attr-defined]  # harness.cli adds the range to the option's help
    return parse
