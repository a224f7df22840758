"""Files a process of the build writes in place (a worker's records, its saved outputs): never through a
symbolic link. The host's side, which turns a refused link into a one-line error, is
:func:`harness.fsutil.open_write`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any


def open_nofollow(path: Path | str, append: bool = False, binary: bool = False) -> IO[Any]:
    """``path`` opened for writing (created; truncated, or appended to with ``append``), never through a
    symbolic link (``O_NOFOLLOW``): a link planted at ``path`` is refused with ``OSError`` (``ELOOP``, or
    ``EMLINK`` on some BSDs), its target untouched. Text files are UTF-8.

    Raises:
        OSError: ``path`` is a symbolic link, or any other failure to open.
    """
    mode = ("a" if append else "w") + ("b" if binary else "")
    # open()'s own flags (O_TRUNC or O_APPEND) plus O_NOFOLLOW; the file keeps its name (``fh.name``)
    return open(path, mode, encoding=None if binary else "utf-8", opener=_no_follow)  # noqa: SIM115


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)
