"""The command line, apart from the library (the layout of asv's ``asv/commands/``).

One module per noun: :mod:`.checkout`, :mod:`.series` (``check``, ``apply``, ``refresh``, ``rebase``),
:mod:`.pr`, :mod:`.build`, :mod:`.run` (``compare``, ``bench``), :mod:`.doctor`, :mod:`.report`,
:mod:`.preview`. Each defines ``add_arguments_<command>(parser)`` and ``run_<command>(args) -> int``:
the only code that sees an ``argparse.Namespace``. ``run_*`` turns it into plain values, calls library
functions that take values and return values, and prints what the user reads.
:mod:`harness.cli` imports only the module of the command it runs.
"""


def names(text: str) -> tuple[str, ...]:
    """A comma-separated option (``--keep-env A,B``) as a tuple of its non-empty, stripped names."""
    return tuple(n.strip() for n in text.split(",") if n.strip())
