"""A run's out folder: claimed and held, made ready (``--fresh``, orphans reaped, a damaged results.json set
aside), and what a resumed run keeps of it (finished rounds, the plan it was measured with, each finished
process's status file). :mod:`harness.runner` decides what to run; this module what is already there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import document as doc
from harness import outdir
from harness import results as res
from harness.errors import ResultsError
from harness.fsutil import atomic_write_json, exclusive_lock, inside
from harness.outdir import MARKER, RESULTS_WRITES, claim, clear, set_aside
from harness.progress import note
from harness.supervise import reap_orphans

#: what must be equal for finished processes of an earlier run to be reused (:func:`harness.results.resume_plan`)
PLAN_KEYS = res.RESUME_KEYS


def finished_rounds(raw: Path) -> int:
    """Rounds the finished processes in ``raw/`` reach: 1 + the highest round of a status file
    (planned and adaptive rounds alike), 0 when none has finished."""
    found = [int(m.group(1)) for p in raw.glob("r*.status.json") if (m := re.match(r"r(\d+)-", p.name))]
    return max(found) + 1 if found else 0


def check_resumable(raw: Path, plan: dict, rounds: int, adaptive: bool = False) -> None:
    """Refuse to reuse ``raw/`` when it was measured with a different plan (builds, cells, configs...),
    when its plan record is damaged, or when ``rounds`` would leave finished rounds out of results.json.
    ``adaptive`` (--target-ci): rounds beyond the planned ones are re-decided, so only the earlier
    planned ``rounds`` (kept in plan.json) must be covered.

    Raises:
        ResultsError: names the keys that differ, the damaged plan.json, or the rounds left out.
    """
    path = raw / "plan.json"
    earlier_rounds = finished_rounds(raw)
    if path.is_file():
        try:
            earlier = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            earlier = None
        if not isinstance(earlier, dict):
            raise ResultsError(
                f"{path} is damaged (not a JSON object): the finished processes in {raw} cannot be "
                "checked against this command's plan",
                f"run with a new --out directory ({raw.parent} stays as it is), or --fresh to discard it",
            )
        differ = [k for k in PLAN_KEYS if earlier.get(k) != plan.get(k)]
        if differ:
            raise ResultsError(
                f"{raw.parent} holds a run measured with different {', '.join(differ)}",
                "pass --fresh to discard it, or a new --out directory",
            )
        if adaptive and isinstance(earlier.get("rounds"), int):
            earlier_rounds = earlier["rounds"]
    elif any(raw.glob("*.status.json")):
        raise ResultsError(
            f"{raw.parent} holds finished processes but no record of their plan",
            "pass --fresh to discard them, or a new --out directory",
        )
    if rounds < earlier_rounds:
        left = f"round {rounds}" if rounds == earlier_rounds - 1 else f"rounds {rounds}..{earlier_rounds - 1}"
        raise ResultsError(
            f"{raw.parent} holds {earlier_rounds} rounds; --rounds {rounds} would leave {left} " "out of results.json",
            f"pass --rounds {earlier_rounds} (or more) to resume, or --fresh / a new --out",
        )
    atomic_write_json(path, {**plan, "rounds": max(rounds, earlier_rounds)})


def kept_record(status: Path, retry_failed: bool) -> dict | None:
    """The record of a process finished earlier, or None when it must run (again): no status file, a
    damaged one (:func:`read_status`), or a failed one with ``--retry-failed`` (its status file is
    kept as ``.retried-<UTC time>``)."""
    record = read_status(status) if status.is_file() else None
    if record is not None and retry_failed and record.get("status") == "failed":
        kept = set_aside(status, "retried")
        note(
            f"--retry-failed: running {status.name.removesuffix('.status.json')} again "
            f"({record.get('reason') or 'failed cells'}); the earlier record is kept as {kept.name}"
        )
        return None
    return record


def read_status(status: Path) -> dict | None:
    """A finished process's ``raw/<proc>.status.json``, or None when it is damaged (not JSON, not an
    object, malformed cells: see :func:`harness.results.cells_problem`): that file is set aside as
    ``.damaged-<UTC time>`` (with a note) and the process counts as unfinished, to be run again."""
    try:
        record = json.loads(status.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        found = f"not readable JSON ({exc})"
    else:
        found = res.cells_problem(record.get("cells"), "cells") if isinstance(record, dict) else "not a JSON object"
        if found is None:
            return record
    kept = set_aside(status, "damaged")
    note(f"{status} is damaged ({found}): kept it as {kept.name}; running that process again")
    return None


@contextmanager
def removed_on_failure(out: Path, created: list[Path]) -> Iterator[None]:
    """A run that fails before measuring leaves no empty --out behind (when it created it)."""
    try:
        yield
    except BaseException:
        if created:
            _remove_if_empty(out, created[-1])
        raise


def _remove_if_empty(out: Path, top: Path) -> None:
    """Remove ``out`` when it holds nothing but this run's traces (``.lock``, the marker, ``raw/plan.json``), then
    its parents up to ``top`` (the highest folder this run created) while they are empty."""
    traces = {Path(".lock"), Path(MARKER), Path("raw"), Path("raw") / "plan.json"}
    try:
        if out.is_dir() and all(p.relative_to(out) in traces for p in out.rglob("*")):
            shutil.rmtree(out)
            for parent in out.parents:
                if not parent.is_relative_to(top) or any(parent.iterdir()):
                    break
                parent.rmdir()
    except OSError:
        pass  # it stays; nothing in it is the user's


@contextmanager
def claimed(out: Path, command: str) -> Iterator[Path]:
    """``out`` claimed as a run's folder (:func:`harness.outdir.claim`: new, empty, or a run of ours;
    its marker written first), then held (:func:`harness.fsutil.exclusive_lock`)."""
    claim(out, "--out", RESULTS_WRITES, res.is_run)
    with exclusive_lock(out, command) as lock:
        yield lock


def open_out(out: Path, fresh: bool) -> Path:
    """Make ``out/raw`` ready: no symbolic link, orphans of a killed run reaped, ``fresh`` (``--fresh``)
    honoured, a damaged results.json set aside. Returns the raw folder (not created yet). ``out`` was
    claimed (:func:`claimed`).

    ``--fresh`` removes the files the folder's marker lists (:func:`harness.outdir.clear`: the harness wrote
    them), sets aside by name what it did not write and a fresh run would resume, be refused by or
    overwrite (results.json and the names of :data:`_RUN_FILE` in ``raw/``), keeps everything else and says so.

    Raises:
        ResultsError: ``raw`` is a symbolic link; ``--fresh`` cannot remove a file; results.json is of
            another schema version.
    """
    raw = out / "raw"
    if raw.is_symlink():
        raise ResultsError(
            f"{raw} is a symbolic link (to {os.readlink(raw)}): results are kept only inside --out",
            f"replace it with a folder (move its target's files into {raw}), or use a new --out",
        )
    raw = inside(out, "raw", "--out folder")
    reap_orphans(raw)
    if fresh:
        _fresh(out, raw)
    elif (out / res.RESULTS).exists():
        try:
            res.load(out)  # refuse to resume from (and overwrite) a results.json of another schema version
        except res.DamagedResults as exc:
            kept = set_aside(out / res.RESULTS, "damaged")
            note(f"{exc.cause}: kept it as {kept.name}; rebuilding {res.RESULTS} from raw/")
    return raw


#: names in raw/ that a run writes (and a later one resumes from or overwrites): a process's files, the kept
#: consistency results, the plan, the series tests' junit XML (harness.supervise, harness.seriestests)
_RUN_FILE = re.compile(
    r"r\d+-.+\.(status\.json|spec\.json|stderr|jsonl|outputs\.pt|worker\.json)"
    r"|consistency-.+\.(json|jsonl|stderr|pt)|plan\.json|tests/\d+-.+\.xml"
)


def _fresh(out: Path, raw: Path) -> None:
    """``--fresh`` (:func:`open_out`): remove what the marker lists, set aside what would resume, say what stayed."""
    legacy = outdir.is_legacy(out)
    removed, _ = clear(out)
    said = [f"--fresh: removed {len(removed)} file(s) the harness wrote in {out}"]
    if legacy:
        said[0] = (
            f"--fresh: {out / MARKER} is of an older harness (it lists names, not files): nothing in {out} is "
            "provably the harness's, so nothing was removed"
        )
    found = [out / res.RESULTS] + [
        p for p in sorted(raw.rglob("*")) if _RUN_FILE.fullmatch(p.relative_to(raw).as_posix())
    ]
    aside = [set_aside(p, "earlier") for p in found if p.is_file() and not p.is_symlink()]
    for kept in aside[:1] if aside and aside[0].parent == out else []:
        note(f"{out / res.RESULTS} was not written by the harness: kept it as {kept.name}")
    if in_raw := [p.relative_to(raw).as_posix() for p in aside if p.parent != out]:
        shown = ", ".join(in_raw[:4]) + (", ..." if len(in_raw) > 4 else "")
        note(
            f"{raw}: {len(in_raw)} file(s) of a run that the harness did not write (a fresh run would resume or "
            f"overwrite them) set aside by name: {shown}"
        )
    kept = sorted(outdir._snapshot(out))
    if kept:
        shown = ", ".join(kept[:8]) + (", ..." if len(kept) > 8 else "")
        said.append(f"kept {len(kept)} file(s) the harness did not write: {shown}")
    note("; ".join(said))


def check_earlier_results(out: Path, plan: dict, raw: Path) -> None:
    """Before a run rebuilds ``out/results.json`` from ``raw/``: an earlier results.json measured with another
    plan (:func:`harness.results.resume_plan`) is refused, naming the keys that differ; one that is not what
    the harness wrote there (its marker's size and sha256: :func:`harness.outdir.edited`; copied over from
    another run of the same plan, or edited) or whose processes are not all in ``raw/`` (copied, or written by
    another run) is set aside by name, never overwritten.

    Raises:
        ResultsError: the earlier results.json has a different plan.
    """
    path = out / res.RESULTS
    if not path.is_file():
        return
    if outdir.edited(out, res.RESULTS):
        kept = set_aside(path, "kept")
        note(
            f"{path} is not what the harness wrote there (edited or copied over): kept it as {kept.name}; "
            f"this run writes a new {res.RESULTS} from {raw}"
        )
        return
    earlier = res.load(out)
    try:
        theirs = res.resume_plan(earlier)
    except (KeyError, TypeError, IndexError):
        theirs = {}
    differ = [k for k in PLAN_KEYS if theirs.get(k) != plan.get(k)]
    if differ:
        discard = "discard it" if outdir.is_ours(out, res.RESULTS) else "set it aside"
        raise ResultsError(
            f"{out} holds a run measured with different {', '.join(differ)}",
            f"pass --fresh to {discard}, or a new --out directory",
        )
    names = [p.name for p in doc.from_json(earlier, validated=True).processes]
    missing = [n for n in names if not (raw / f"{n}.status.json").is_file()]
    if missing:
        kept = set_aside(path, "earlier")
        note(
            f"{path} holds {len(missing)} process(es) that are not in {raw} ({missing[0]}, ...): kept it as "
            f"{kept.name}; this run writes a new {res.RESULTS}"
        )
