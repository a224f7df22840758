"""Output folders: the harness writes into a folder only when it is new, empty, or holds a run of its own.

Every command that writes an output folder (``compare``/``bench --out``, ``report DIR``, ``preview
DIR``, ``doctor --out``, ``build --dist``) claims it first through :func:`claim`, the one rule:

- ``/``, the home folder, the harness's project root and any folder holding a ``.git`` are refused,
  whatever they hold (a run's files and ``--fresh`` do not belong there);
- a new or empty folder is taken; so is one holding the marker :data:`MARKER` that a run of the
  harness wrote; so is a folder written before the marker existed that holds a run of ours
  (``legacy``: e.g. a results.json of ours, :func:`harness.results.is_run`), which is then marked;
- anything else (the user's own files) is refused in one line, nothing written.

The marker is written *first*, before anything else of the run, and records the folder's kind
(:data:`KINDS`: ``run`` for compare/bench/report/preview, ``doctor``, ``dist`` for ``build --dist``,
``merge`` for ``merge --out``; a command of another kind is refused: ``compare --fresh --out`` on a
``--dist`` folder would delete its wheels) and lists, file by file (paths relative to the folder), every
file the harness wrote there: what a command finds at its claim is left out, what it writes or rewrites
is added when it ends (:func:`finish`) and, in a run, after each process (:func:`record`). With each
file the marker records what the harness wrote there (``written``: its size in bytes and the sha256 of its
bytes, :func:`edited`): a listed file whose content differs now was edited or copied over by the user and is
the user's. sha256 rather than size + mtime: ``cp -p``/``cp -a`` and ``touch -r`` carry an mtime over and an
edit can keep the size, so only the content tells; each file is hashed once when written (about 1 s per GB),
and checked only before the harness overwrites or removes it. ``--fresh`` and every cleanup (a stale plot of
an earlier render) remove only listed files that are as the harness wrote them (:func:`clear`, :func:`is_ours`),
all of them or none; a file the harness is about to write that it did not write, or that was edited since,
is set aside by name (:func:`make_room`), never overwritten. A marker that lists files without that record
(an older harness) is trusted by name only for a file no newer than the marker itself; one changed after it
cannot be verified and is set aside, never overwritten or deleted. A marker of an older harness still listed
``fnmatch`` patterns of names: nothing under it is provably ours, so it counts as listing no file
(``--fresh`` removes nothing there and says so). A command that fails without writing anything takes its
new marker back.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import harness
from harness import results
from harness.errors import HarnessError, ResultsError
from harness.fsutil import atomic_write_json, sha256_file
from harness.progress import note

#: the marker file a run writes first into its output folder
MARKER = ".torch-patch-harness-out.json"
TOOL = "torch-patch-harness"
#: what each kind of output folder holds at its top (fnmatch patterns): they tell a folder's kind and which
#: names must not be links; the marker lists the files themselves
RESULTS_WRITES = ("results.json", "raw", "report.md", "speedup.png", "latency-*.png", "contrast-*.png", ".lock")
PREVIEW_WRITES = ("report.html", "report.png")
DOCTOR_WRITES = ("doctor.md", "doctor.json", "raw")
DIST_WRITES = ("*.whl", "*.whl.build.json", "logs", "rejected")
#: ``merge --out``: the merged document and its report (harness.merge); never a run's raw/ or plots
MERGE_WRITES = ("results.json", "report.md")
#: kind of output folder -> what the commands of that kind write there (preview adds its page to a run's folder)
KINDS = {
    "run": RESULTS_WRITES + PREVIEW_WRITES,
    "doctor": DOCTOR_WRITES,
    "dist": DIST_WRITES,
    "merge": MERGE_WRITES + PREVIEW_WRITES,
}
#: every pattern the harness ever writes: a link of such a name in an output folder is refused
KNOWN = frozenset(RESULTS_WRITES + PREVIEW_WRITES + DOCTOR_WRITES + DIST_WRITES + MERGE_WRITES)
#: the folder holding the harness package (a checkout of this project): never an output folder
PROJECT_ROOT = Path(harness.__file__).resolve().parent.parent
_REMEDY = "give a new or empty folder, e.g. results/<name>"


def refusal(folder: Path) -> str | None:
    """Why ``folder`` (resolved) may never be an output folder, or None."""
    if folder == folder.parent:
        return "the file-system root"
    if folder == Path.home().resolve():
        return "your home folder"
    if folder == PROJECT_ROOT:
        return "the harness's project root"
    if (folder / ".git").exists():
        return "a git checkout (it holds .git)"
    return None


def kind_of(writes: Iterable[str]) -> str:
    """The kind (:data:`KINDS`) of a folder whose commands write ``writes``; a marker written before
    kinds were recorded has its kind read off its patterns the same way (wheels make it a ``dist``)."""
    writes = set(writes)
    if writes & set(DIST_WRITES):
        return "dist"
    if "doctor.md" in writes:
        return "doctor"
    return "run"


def read_marker(folder: Path) -> list[str] | None:
    """The files (paths relative to ``folder``, POSIX) its marker lists as written by the harness, or None
    when there is no marker. A marker of an older harness listed ``fnmatch`` patterns of names, not files:
    nothing in such a folder is provably ours, so it lists none (``[]``) until a run records its own.

    Raises:
        ResultsError: the marker is damaged (not a JSON object of this harness with a list of files or names).
    """
    found = _read_marker(Path(folder))
    return None if found is None else found[0]


def marked_kind(folder: Path) -> str | None:
    """The kind (:data:`KINDS`) the marker of ``folder`` records, or None without a marker (``preview`` adds
    its page to a run's or a merge's folder alike).

    Raises:
        ResultsError: a damaged marker (:func:`read_marker`).
    """
    found = _read_marker(Path(folder))
    return None if found is None else found[1]


def is_legacy(folder: Path) -> bool:
    """Whether the marker of ``folder`` is of an older harness (patterns of names, not files: :func:`read_marker`)."""
    found = _read_marker(Path(folder))
    return found is not None and found[2]


def _safe(rel: str) -> bool:
    """A listed path the harness may have written: relative, no ``..``, not the marker or the lock."""
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts and rel not in (MARKER, ".lock")


def _read_marker(folder: Path) -> tuple[list[str], str, bool] | None:
    """The marker's files, kind and whether it is of an older harness (patterns), or None when there is
    none (:func:`read_marker`'s errors)."""
    path = folder / MARKER
    if not path.is_file() and not path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # nested 10^5 deep: RecursionError
        data = None
    ours = isinstance(data, dict) and data.get("tool") == TOOL
    legacy = ours and "files" not in data
    listed = (data.get("writes") if legacy else data.get("files")) if ours else None
    kind = data.get("kind", None) if isinstance(listed, list) else None
    if (
        path.is_symlink()
        or not isinstance(listed, list)
        or not all(isinstance(w, str) and (legacy or _safe(w)) for w in listed)
        or (kind is not None and kind not in KINDS)
    ):
        raise ResultsError(
            f"{path} is damaged (not the harness's record of what it wrote in {folder})",
            f"delete it if {folder} holds only a run of the harness, else {_REMEDY}",
        )
    return ([] if legacy else listed), kind or kind_of(listed if legacy else []), legacy


def holds_results(directory: Path) -> bool:
    """Whether ``directory`` holds a results.json that :func:`harness.results.load` accepts: how ``report``
    and ``preview`` recognise a run of ours written before output folders were marked (a report.md or a
    damaged results.json alone is not enough: it may be the user's)."""
    try:
        results.load(directory)
    except (HarnessError, RecursionError):
        return False
    return True


def _listed(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def claim(
    folder: Path | str,
    what: str,
    writes: Iterable[str],
    legacy: Callable[[Path], bool] | None = None,
    kind: str | None = None,
) -> Path:
    """Check that ``folder`` may receive a run's files, then write its marker (first; listing no file yet)
    and remember what the folder held (:func:`record` lists what the command writes, :func:`finish` at its end).

    Args:
        folder: the output folder as given (created when new, with its parents).
        what: the option or argument, for the message (``"--out"``, ``"report DIR"``).
        writes: fnmatch patterns of the top-level names this command writes there (of :data:`KNOWN`);
            they set the folder's kind (:func:`kind_of`), which a marked folder's must equal.
        legacy: recognises a run of ours written before the marker existed (it is then marked, its files
            not listed: none of them is provably ours).
        kind: the folder's kind (:data:`KINDS`) where ``writes`` alone cannot tell it (``merge`` writes a
            run's names); default :func:`kind_of` ``(writes)``.

    Returns:
        the folder, resolved.

    Raises:
        ResultsError: ``folder`` is refused (:func:`refusal`), is not a folder, holds files that are not
            a run of the harness, has a damaged marker, is marked as another kind of folder (a
            ``--dist`` folder for ``compare --out``), or a name the harness writes there is a
            symbolic link. Nothing is written then.
    """
    given = Path(folder)
    path = given.resolve()
    why = refusal(path)
    if why:
        raise ResultsError(
            f"{what} {given} is {why}: the harness writes its files there and --fresh deletes them", _REMEDY
        )
    writes = tuple(writes)
    kind = kind or kind_of(writes)
    if path.exists():
        if not path.is_dir():
            raise ResultsError(f"{what} {given} is not a folder", _REMEDY)
        entries = sorted(p.name for p in path.iterdir())
        for name in entries:
            link = given / name
            if name != MARKER and _listed(name, KNOWN) and link.is_symlink():
                raise ResultsError(
                    f"{link} is a symbolic link (to {link.readlink()}): the harness writes only inside {what}",
                    f"replace it with a folder or file of its own (move its target's files into {link}), "
                    f"or {_REMEDY}",
                )
        marked = _read_marker(path)
        if marked is not None and marked[1] != kind:
            raise ResultsError(
                f"{what} {given} is a {marked[1]} folder of the harness (its {MARKER}), not a {kind} folder: "
                f"the harness does not mix them",
                _REMEDY,
            )
        if marked is None and entries and not (legacy and legacy(path)):
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise ResultsError(
                f"{what} {given} holds files that are not a run of the harness ({shown})",
                f"{_REMEDY}: the harness writes only into folders it marked ({MARKER})",
            )
    made = not (path / MARKER).is_file()
    if made:
        _write_marker(path, kind, [])
    if path not in _CLAIMS:
        _CLAIMS[path] = _Claim(kind, _snapshot(path), made)
    return path


class _Claim:
    """A folder claimed by this process: its kind, its files when claimed (:func:`_snapshot`), whether
    this claim wrote its marker."""

    def __init__(self, kind: str, before: dict[str, tuple[int, int]], made: bool) -> None:
        self.kind, self.before, self.made = kind, before, made
        self.aside: set[str] = set()  # files set aside (:func:`set_aside`): renamed, not written
        self.hashed: dict[str, tuple[tuple[int, int], dict]] = {}  # rel -> (snapshot stat, its record)


#: the folders claimed by this process (resolved) -> their claim; emptied by :func:`finish`
_CLAIMS: dict[Path, _Claim] = {}


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """``{relative POSIX path: (mtime ns, size)}`` of every file (and link) under ``folder``, the marker and
    the lock left out; folders reached through a link are not entered."""
    found: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
        for name in filenames + [d for d in os.listdir(here) if (here / d).is_symlink() and d not in filenames]:
            rel = (here / name).relative_to(folder).as_posix()
            if rel in (MARKER, ".lock"):
                continue
            try:
                st = (here / name).lstat()
            except OSError:
                continue
            found[rel] = (st.st_mtime_ns, st.st_size)
    return found


def _write_marker(folder: Path, kind: str, files: Iterable[str], written: dict[str, dict] | None = None) -> None:
    files = sorted(set(files))
    written = written or {}
    atomic_write_json(
        folder / MARKER,
        {
            "tool": TOOL,
            "kind": kind,
            "about": "written by torch-patch-harness: the files it wrote here, each with its size (bytes) and "
            "sha256 as written; --fresh removes these, when unchanged, and nothing else",
            "files": files,
            "written": {f: written[f] for f in files if f in written},
        },
    )


def _content(path: Path) -> dict:
    """``{"size": bytes, "sha256": hex}`` of the file at ``path`` (:func:`edited`'s record)."""
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def _records(folder: Path) -> dict[str, dict]:
    """The marker's ``written`` record (listed file -> ``{"size", "sha256"}``); entries of another shape and
    markers without it give none (:func:`edited` cannot verify those files)."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    written = data.get("written") if isinstance(data, dict) else None
    if not isinstance(written, dict):
        return {}
    return {
        rel: rec
        for rel, rec in written.items()
        if isinstance(rec, dict) and isinstance(rec.get("size"), int) and isinstance(rec.get("sha256"), str)
    }


def edited(folder: Path, rel: str) -> bool | None:
    """Whether the listed file ``folder/rel`` differs from what the harness wrote there (its marker's record of
    size and sha256: edited, or copied over, by the user): True or False; None when the marker has no record
    of it (not listed, a marker of an older harness, no marker) or it is not a plain file."""
    folder = Path(folder)
    rec = _records(folder).get(rel)
    path = folder / rel
    if rec is None or path.is_symlink() or not path.is_file():
        return None
    try:
        return path.stat().st_size != rec["size"] or sha256_file(path) != rec["sha256"]
    except OSError:
        return True  # unreadable now: not provably as the harness wrote it


def _unverified(folder: Path, rel: str) -> bool:
    """A listed file without a record (:func:`edited` None) changed after the marker was last written: the
    harness cannot tell it from the user's edit."""
    try:
        return (folder / rel).lstat().st_mtime_ns > (folder / MARKER).stat().st_mtime_ns
    except OSError:
        return False


def is_ours(folder: Path, rel: str) -> bool:
    """Whether the harness wrote ``folder/rel`` as it is now: this process's claim of ``folder`` did not find
    it there (written since), or its marker lists it and its content is what the marker recorded
    (:func:`edited`); under a marker without that record, listed and no newer than the marker."""
    folder = Path(folder).resolve()
    claimed_ = _CLAIMS.get(folder)
    if claimed_ is not None and rel not in claimed_.before and rel not in claimed_.aside and (folder / rel).exists():
        return True
    try:
        if rel not in (read_marker(folder) or []):
            return False
    except ResultsError:
        return False
    changed = edited(folder, rel)
    return not changed if changed is not None else not _unverified(folder, rel)


def record(folder: Path) -> list[str]:
    """Add to the marker of ``folder`` (claimed by this process) every file written or rewritten since the
    claim, and drop the listed files that are gone; returns the files listed. A file of the user's that was
    there at the claim and left as it was is never listed."""
    folder = Path(folder).resolve()
    claimed_ = _CLAIMS.get(folder)
    if claimed_ is None or not folder.is_dir():
        return []
    try:
        found = _read_marker(folder)
    except ResultsError:
        return []
    listed = found[0] if found else []
    now = _snapshot(folder)
    new = {f for f, st in now.items() if claimed_.before.get(f) != st and f not in claimed_.aside}
    files = {f for f in listed if f in now} | new
    earlier = _records(folder)
    written = {f: earlier[f] for f in files if f in earlier and f not in new}
    for f in sorted(new):  # hashed once per version written: a run records after each process
        cached = claimed_.hashed.get(f)
        if cached is None or cached[0] != now[f]:
            path = folder / f
            if path.is_symlink() or not path.is_file():
                continue
            try:
                cached = (now[f], _content(path))
            except OSError:
                continue
            claimed_.hashed[f] = cached
        written[f] = cached[1]
    if found is None or found[2] or sorted(files) != sorted(listed) or written != earlier:
        _write_marker(folder, claimed_.kind, files, written)
    return sorted(files)


def finish(failed: bool) -> None:
    """The end of a command: each folder it claimed records what it wrote (:func:`record`); a command that
    failed without writing anything there takes back the marker its claim wrote (a refused run leaves
    nothing new)."""
    for folder, claimed_ in list(_CLAIMS.items()):
        try:
            if failed and claimed_.made and folder.is_dir() and _snapshot(folder) == claimed_.before:
                (folder / MARKER).unlink(missing_ok=True)
            else:
                record(folder)
        except OSError:
            pass  # the folder went away or is read-only now: its marker stays as it was
    _CLAIMS.clear()


def set_aside(path: Path, suffix: str) -> Path:
    """Rename ``path`` to ``<name>.<suffix>-<UTC time>`` beside it (never deleted); returns the new path. In a
    folder this process claimed, the new name is never listed as the harness's (what it held stays the user's,
    or unprovable, as it was)."""
    path = Path(path)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    kept, n = path.with_name(f"{path.name}.{suffix}-{stamp}"), 1
    while kept.exists() or kept.is_symlink():
        kept, n = path.with_name(f"{path.name}.{suffix}-{stamp}-{n}"), n + 1
    path.rename(kept)
    where = kept.parent.resolve() / kept.name
    for folder, claimed_ in _CLAIMS.items():
        if where.is_relative_to(folder):
            claimed_.aside.add(where.relative_to(folder).as_posix())
    return kept


def make_room(folder: Path, rel: str) -> Path | None:
    """Before the harness writes ``folder/rel``: a file there that it did not write, or that was edited since
    (:func:`is_ours`), is set aside as ``<name>.kept-<UTC time>`` (with a note naming it), never overwritten;
    returns its new path, or None."""
    path = Path(folder) / rel
    if not (path.exists() or path.is_symlink()) or is_ours(folder, rel):
        return None
    kept = set_aside(path, "kept")
    note(f"{path} was not written by the harness: kept it as {kept.name}")
    return kept


def clear(folder: Path) -> tuple[list[str], list[str]]:
    """``--fresh``: remove the files the marker of ``folder`` lists (:func:`read_marker`: written by the harness)
    that are as the harness wrote them, then the folders they leave empty; returns ``(removed, kept)``, the files
    removed and the files left (relative POSIX paths: the user's, or unprovable under a marker of an older
    harness). A listed file edited since the harness wrote it (:func:`edited`) stays, with a note; one that
    cannot be verified (a marker without records, the file newer than it) is set aside by name
    (:func:`set_aside`), never deleted. All or none: every file is first moved into one hidden folder inside
    ``folder``; when one cannot be moved, those moved go back and nothing is removed. A file reached through
    a linked folder is never removed; nothing is removed without a marker.

    Raises:
        ResultsError: a file cannot be removed (nothing was); a damaged marker.
    """
    folder = Path(folder)
    listed = set(read_marker(folder) or [])
    doomed = []
    for rel in sorted(listed):
        path = folder / rel
        linked = any(p.is_symlink() for p in path.parents if p != folder and p.is_relative_to(folder))
        if linked or not (path.is_file() or path.is_symlink()):
            continue
        changed = edited(folder, rel)
        if changed:
            note(f"--fresh: {path} was edited since the harness wrote it: kept it")
        elif changed is None and not path.is_symlink() and _unverified(folder, rel):
            kept = set_aside(path, "kept")
            note(f"--fresh: {path} changed after the harness listed it and cannot be verified: kept it as {kept.name}")
        else:
            doomed.append(rel)
    removed = _remove_all(folder, doomed)
    if removed and folder.is_dir():
        _write_marker(folder, marked_kind(folder) or "run", [f for f in listed if f not in removed], _records(folder))
    kept = sorted(_snapshot(folder)) if folder.is_dir() else []
    return removed, kept


def _remove_all(folder: Path, rels: list[str]) -> list[str]:
    """Remove ``folder/rel`` for every ``rel`` or none of them (:func:`clear`): each is renamed into a hidden
    folder of ``folder`` first (a file that cannot be renamed cannot be unlinked either: both write its
    folder), the moved ones go back when one fails; then that folder is deleted, and the folders the files
    leave empty. Returns ``rels``.

    Raises:
        ResultsError: a file (or ``folder`` itself) refused; nothing was removed.
    """
    if not rels:
        return []
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    bin_ = folder / f".fresh-{stamp}"
    moved: list[tuple[Path, Path]] = []
    path = folder
    try:
        bin_.mkdir()
        for n, rel in enumerate(rels):
            path = folder / rel
            path.rename(bin_ / str(n))
            moved.append((path, bin_ / str(n)))
    except OSError as exc:
        for back, there in reversed(moved):
            there.rename(back)
        if bin_.is_dir():
            bin_.rmdir()
        raise ResultsError(
            f"--fresh cannot remove {path}: {exc.strerror or exc}",
            "nothing was removed; fix its permissions (an immutable file: chattr -i), or use a new --out",
        ) from None
    shutil.rmtree(bin_)
    for rel in rels:
        for parent in (folder / rel).parents:
            if parent == folder or not parent.is_relative_to(folder):
                break
            if parent.is_dir():
                if any(parent.iterdir()):
                    break
                parent.rmdir()
    return list(rels)
