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
``merge`` for ``merge --out``)
and lists (as ``fnmatch`` patterns of the folder's top-level names) what the harness writes there;
every later command of the same kind that writes into the folder adds its own patterns, and a
command of another kind is refused (``compare --fresh --out`` on a ``--dist`` folder would delete its
wheels). ``--fresh`` removes only the entries the marker lists *and* the command writes
(:func:`clear`), never anything else in the folder, and only patterns of :data:`KNOWN` (a marker
edited to list ``*`` removes nothing more than the harness's own names).
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import harness
from harness import results
from harness.errors import HarnessError, ResultsError
from harness.fsutil import atomic_write_json

#: the marker file a run writes first into its output folder
MARKER = ".torch-patch-harness-out.json"
TOOL = "torch-patch-harness"
#: what each kind of output folder holds at its top (fnmatch patterns); the marker lists these
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
#: every pattern the harness ever writes: a marker's entries outside it are ignored
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
    """The patterns the marker of ``folder`` lists, or None when there is no marker.

    Raises:
        ResultsError: the marker is damaged (not a JSON object of this harness with a list of names).
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


def _read_marker(folder: Path) -> tuple[list[str], str] | None:
    """The marker's patterns and kind, or None when there is none (:func:`read_marker`'s errors)."""
    path = folder / MARKER
    if not path.is_file() and not path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # nested 10^5 deep: RecursionError
        data = None
    writes = data.get("writes") if isinstance(data, dict) and data.get("tool") == TOOL else None
    kind = data.get("kind", None) if isinstance(writes, list) else None
    if (
        path.is_symlink()
        or not isinstance(writes, list)
        or not all(isinstance(w, str) for w in writes)
        or (kind is not None and kind not in KINDS)
    ):
        raise ResultsError(
            f"{path} is damaged (not the harness's record of what it wrote in {folder})",
            f"delete it if {folder} holds only a run of the harness, else {_REMEDY}",
        )
    return writes, kind or kind_of(writes)


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
    """Check that ``folder`` may receive a run's files, then write its marker (first), listing ``writes``.

    Args:
        folder: the output folder as given (created when new, with its parents).
        what: the option or argument, for the message (``"--out"``, ``"report DIR"``).
        writes: fnmatch patterns of the top-level names this command writes there (of :data:`KNOWN`);
            they set the folder's kind (:func:`kind_of`), which a marked folder's must equal.
        legacy: recognises a run of ours written before the marker existed (it is then marked).
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
    listed: list[str] = []
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
        if marked is not None:
            listed = marked[0]
        elif entries and not (legacy and legacy(path)):
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise ResultsError(
                f"{what} {given} holds files that are not a run of the harness ({shown})",
                f"{_REMEDY}: the harness writes only into folders it marked ({MARKER})",
            )
    if set(writes) - set(listed) or not (path / MARKER).is_file():
        atomic_write_json(
            path / MARKER,
            {
                "tool": TOOL,
                "kind": kind,
                "about": "written by torch-patch-harness: --fresh removes only the names listed here",
                "writes": sorted(set(listed) | set(writes)),
            },
        )
    return path


def clear(folder: Path, writes: Iterable[str]) -> list[str]:
    """``--fresh``: remove the entries of ``folder`` that its marker lists and ``writes`` (the patterns
    the command writes) names, of :data:`KNOWN` only (``.lock`` and the marker stay); returns the names
    removed. A folder without a marker loses nothing.

    Raises:
        ResultsError: an entry cannot be removed; a damaged marker.
    """
    folder = Path(folder)
    mine = set(writes)
    patterns = [p for p in read_marker(folder) or [] if p in KNOWN and p in mine and p != ".lock"]
    removed = []
    for entry in sorted(folder.iterdir()):
        if entry.name == MARKER or not _listed(entry.name, patterns):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as exc:
            raise ResultsError(
                f"--fresh cannot remove {entry}: {exc.strerror or exc}", "fix its permissions, or use a new --out"
            ) from None
        removed.append(entry.name)
    return removed
