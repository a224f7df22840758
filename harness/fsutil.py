"""Files that are never half-written, and locks that say who holds them.

Every result the user produced is written through :func:`atomic_write_text`
(temporary file in the same directory, fsync, rename), so an interrupt or a
crash leaves either the old file or the new one, never a torn one. The rename
replaces a symbolic link at the path (``rename(2)`` acts on the link itself), so
an atomic write never writes through a link; a file written in place (a
worker's stderr, its records, a build log) is opened by :func:`open_write`,
which refuses a link.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from harness.bench.files import open_nofollow
from harness.errors import HarnessError

try:  # the stale-lock takeover guard (Linux, macOS); Windows has no flock
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None


class OutsideFolder(HarnessError):
    """A path from a manifest, an argument or a patch that would leave its folder."""


#: longest file-name component most filesystems take (bytes)
_NAME_MAX = 255


def inside(root: Path | str, name: Path | str, what: str) -> Path:
    """``root / name`` resolved (symbolic links followed), refused unless it stays inside ``root``.

    The one check every path that comes from a manifest, an argument or a patch goes through before
    anything is read, written or deleted there (series folder, worktree, cache, ``--out``): an
    absolute ``name``, ``..`` that climbs out, a symbolic link that points out, a NUL byte or a
    component too long for the filesystem is refused with the path named.

    Args:
        root: the folder the path must stay in (it need not exist yet).
        name: the path, relative to ``root`` (an absolute one must still be inside ``root``).
        what: what the path is, for the message (``"series.toml [[base]] #1 patch"``).

    Raises:
        OutsideFolder: the resolved path is not ``root`` itself or below it.
    """
    text = os.fspath(name)
    if "\0" in text or "\0" in os.fspath(root):
        raise OutsideFolder(f"{what} {text!r} contains a NUL byte", "use an ordinary file name")
    if any(len(part.encode("utf-8", "surrogateescape")) > _NAME_MAX for part in Path(text).parts):
        raise OutsideFolder(
            f"{what} {text[:80]!r}... has a name longer than {_NAME_MAX} bytes", "use a shorter file name"
        )
    base = Path(root).resolve()
    try:
        target = (base / text).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise OutsideFolder(f"{what} {text!r} cannot be resolved ({exc})", "use an ordinary file name") from None
    if target != base and not target.is_relative_to(base):
        raise OutsideFolder(
            f"{what} {text!r} resolves to {target}, outside {base}",
            f"name a path inside {base} (no absolute paths, no '..', no links that lead out)",
        )
    return target


class LinkRefused(HarnessError):
    """A file the harness writes in place is a symbolic link: it is not followed."""


def open_write(path: Path | str, append: bool = False, binary: bool = False) -> IO[Any]:
    """``path`` opened for writing (created; truncated, or appended to with ``append``), never through
    a symbolic link (``O_NOFOLLOW``): a link planted at ``path`` (``raw/<proc>.stderr -> ~/precious``)
    is refused, its target untouched (:func:`harness.bench.files.open_nofollow`, which a worker uses).
    Text files are UTF-8.

    Raises:
        LinkRefused: ``path`` is a symbolic link (the message names it and its target).
        OSError: any other failure to open.
    """
    try:
        return open_nofollow(path, append, binary)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EMLINK) or not os.path.islink(path):
            raise
        raise LinkRefused(
            f"{path} is a symbolic link (to {os.readlink(path)}): the harness does not write through links",
            f"delete {path} (its target stays as it is) and run again",
        ) from None


class WriteFailed(HarnessError, OSError):
    """An atomic write the file system refused: names the file written (never its temporary file) and the
    cause. Also an :class:`OSError` (``errno``, ``strerror``, ``filename`` set), for code that catches those."""

    def __init__(self, path: Path, exc: OSError) -> None:
        why = exc.strerror or str(exc)
        if exc.errno in (errno.EPERM, errno.EACCES, errno.EROFS):
            remedy = (
                "check that you may write there (its permissions and its folder's, an immutable file: "
                "lsattr/chattr -i, a read-only file system)"
            )
        elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
            remedy = "free some space on that disk (or quota), or write to another folder"
        else:
            remedy = "check that its folder exists and is writable"
        super().__init__(f"cannot write {path}: {why}", remedy)
        self.errno, self.strerror, self.filename = exc.errno, why, os.fspath(path)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (same-directory temp file, fsync, ``os.replace``); a symbolic
    link at ``path`` is replaced by the file, its target untouched.

    Raises:
        WriteFailed: the file system refused (a read-only or immutable file or folder, a full disk): it names
            ``path``, never the temporary file; ``path`` is as it was.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, HarnessError):
            raise WriteFailed(path, exc) from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data: Any) -> None:
    """:func:`atomic_write_text` of ``json.dumps(data, indent=1, sort_keys=True)`` plus a newline."""
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


class LockHeld(HarnessError):
    """Another live process holds the lock."""


def live_holder(directory: Path) -> dict | None:
    """The owner (``{"pid", "host", "what"}``) that ``<directory>/.lock`` (:func:`exclusive_lock`) names when a
    live process holds it, or None: no lock, or its process is gone (same host). A lock of another host, or
    one being written (``{}``), counts as held."""
    found = _holder(Path(directory) / ".lock")
    if found is None:
        return None
    if found.get("host") == socket.gethostname() and isinstance(found.get("pid"), int) and not _pid_alive(found["pid"]):
        return None
    return found


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _takeover_guard(directory: Path) -> Iterator[None]:
    """Serialise the stale-lock takeovers of ``directory``: ``fcntl.flock`` on the directory itself (no file
    left in it), held for a read and an unlink. Without it two waiters that both read a dead owner's pid could
    each delete the lock, the second deleting the first one's new live lock. Where ``flock`` is missing or
    refuses a directory, no guard."""
    fd = os.open(directory, os.O_RDONLY) if fcntl is not None else None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                os.close(fd)
                fd = None
        yield
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _holder(lock: Path) -> dict | None:
    """The owner a lock file names (``{}`` when unreadable or being written), or None when it is gone."""
    try:
        holder = json.loads(lock.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        return {}
    return holder if isinstance(holder, dict) else {}


#: how many times :func:`exclusive_lock` tries to create its lock file after finding it stale or gone
LOCK_TRIES = 5


def _publish(lock: Path, me: dict) -> bool:
    """Create ``lock`` holding ``me`` in one step: a hard link to a complete temporary file beside it, so that
    a waiter never reads it empty (it once took a lock being written for one held by "pid ?"). Returns
    False when a lock is there already. Where the file system has no hard links: an exclusive create, then
    the write."""
    fd, tmp = tempfile.mkstemp(prefix=".lock-", dir=lock.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(me, fh)
        os.link(tmp, lock)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as fh:
            json.dump(me, fh)
        return True
    finally:
        os.unlink(tmp)


@contextmanager
def exclusive_lock(directory: Path, what: str) -> Iterator[Path]:
    """Hold ``<directory>/.lock`` for the duration; a stale lock (dead pid, same host) is taken over, one
    process at a time (:func:`_takeover_guard`).

    Raises:
        LockHeld: another live process holds it; the message names its pid, host and command.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / ".lock"
    me = {"pid": os.getpid(), "host": socket.gethostname(), "what": what}
    holder: dict = {}
    held = False
    for _ in range(LOCK_TRIES):
        held = _publish(lock, me)
        if held:
            break
        with _takeover_guard(directory):
            found = _holder(lock)
            if found is None:  # released since: try again
                continue
            holder = found
            if holder.get("host") == me["host"] and isinstance(holder.get("pid"), int):
                if not _pid_alive(holder["pid"]):
                    lock.unlink(missing_ok=True)  # stale: its process is gone
                    continue
        break  # a live process holds it
    if not held:
        raise LockHeld(
            f"{directory} is in use by pid {holder.get('pid', '?')} on {holder.get('host', '?')} "
            f"({holder.get('what', 'unknown command')})",
            f"wait for it to finish, or delete {lock} if that process no longer exists",
        )
    try:
        yield lock
    finally:
        lock.unlink(missing_ok=True)
