"""Evidence across machines: several finished runs of one series -> one merged document and one report.

``python -m harness merge DIR DIR ... --out DIR`` reads each run's results.json (never writing there),
refuses what cannot be merged (one line each, nothing written: :func:`check`), evaluates each run's
contrasts the way that run's own report does (:func:`harness.contrasts.evaluate` with the report's bands,
on that run's processes alone) and stores them per machine in a merged ``results.json``
(:class:`harness.document.MergeDocument`); ``report.md`` is rendered from that document alone.

No number is pooled across machines: each machine's speedup and CI are its own, and the merged
statement only counts verdicts ("faster on 3 of 3 machines"; "faster on 2 (Apple M1 Pro, Apple M2),
equivalent on 1 (Apple M4)": a disagreement is a finding, not an average).

What is refused, and why (docs/machines.md):

- runs of different series, patch hashes, devices (cpu, cuda and mps time different kernels: a cpu
  row beside a cuda row would read as two machines agreeing on one change), kinds or contrast
  declarations, or configs of the same name with different variables;
- runs made with different ``compare --plant-k`` (a calibration run beside an ordinary one, or two K's):
  a merge of calibration runs says so at the top of its PR block;
- a run that is not finished (resume it first: its own command with the directory given for ``--out``);
- the same run twice (one resolved directory, or one :func:`content_digest`: its plan and process records,
  whatever the bytes, timestamps or paths of the copy), even with ``allow_same_machine``;
- a build role whose torch differs (version without its local label, or git commit) between machines;
  builds that differ only in their wheels (each machine's own, or a pip wheel with another local label)
  are merged when their build manifests' flags match (:data:`harness.document.NEUTRAL_FLAGS` aside),
  and the report says what differs;
- the same machine twice (:attr:`harness.document.Machine.identity`) unless ``allow_same_machine``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import harness
from harness import contrasts as con
from harness import document as doc
from harness import mergedoc, prbody, stats
from harness import results as res
from harness.errors import ResultsError
from harness.fsutil import atomic_write_json, atomic_write_text, sha256_file
from harness.outdir import make_room, marked_kind
from harness.policy import POLICY

#: what a merge writes into its --out folder (harness.outdir kind "merge")
REPORT = "report.md"


class MergeRefused(ResultsError):
    """Runs that cannot be merged: the cause names the runs and what differs."""


def check(runs: Sequence[tuple[Path, doc.RunDocument]], allow_same_machine: bool = False) -> tuple[str, ...]:
    """Refuse what cannot be merged (see the module docstring); returns the lines that say how the
    machines' builds differ (empty when every build is the same wheel).

    Raises:
        MergeRefused: the first reason, one line.
    """
    if len(runs) < 2:
        raise MergeRefused("merge needs at least two runs", "name two or more results directories")
    records = [_records(run) for _, run in runs]  # each process's samples hashed once, for both checks
    _same_run(runs, records)
    for path, run in runs:
        if not run.finished:
            done = len(run.processes)
            raise MergeRefused(
                f"{path} is an unfinished run ({done} of {run.header.planned_processes} planned processes)",
                f"resume it first: {shlex.join(resume_command(run.header.command, _folder(path)))}",
            )
    first_path, first = runs[0]
    for path, run in runs[1:]:
        _same(first_path, first, path, run)
    _same_machine(runs, allow_same_machine)
    _shared_processes(runs, records)
    return _builds_differ(runs)


def _folder(path: Path) -> Path:
    """The run's folder as given (``DIR`` for ``DIR`` or ``DIR/results.json``)."""
    path = Path(path)
    return path.parent if path.name == res.RESULTS else path


def resume_command(command: Sequence[str], folder: Path) -> list[str]:
    """A run's recorded ``command`` with ``folder`` (the directory given to merge) as its ``--out``
    (``--out X`` or ``--out=X``; appended when the command has none): the command that resumes that run
    where it now lies, whatever folder it was first written to."""
    out, skip, found = [], False, False
    for i, arg in enumerate(command):
        if skip:
            skip = False
        elif arg == "--out" and i + 1 < len(command):
            out += ["--out", str(folder)]
            skip = found = True
        elif arg.startswith("--out="):
            out.append(f"--out={folder}")
            found = True
        else:
            out.append(arg)
    return out if found else [*out, "--out", str(folder)]


#: the plan fields (:class:`harness.document.Header`) a run's identity rests on (:func:`content_digest`); the
#: command (its ``--out`` path) and the start and finish times are where and when, not what
PLAN_FIELDS = (
    "kind",
    "device",
    "builds",
    "configs",
    "cells",
    "rounds",
    "seed",
    "order",
    "timing",
    "quick",
    "threads",
    "keep_env",
    "extra_env",
    "plant_k",
)


def _plain(value):
    """A typed document's value as JSON data (mapping proxies and tuples as objects and lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _records(run: doc.RunDocument) -> tuple[str, ...]:
    """Each process's records as one sha256 (hex), in process order: its build, config, round and, per cell,
    key, status, reason, raw samples (``measurement``, seconds) and correctness check. The costly part of
    :func:`content_digest` and :func:`process_digests` (the samples' JSON), done once per run for both."""
    return tuple(
        _digest([p.build, p.config, p.round, [[r.key, r.status, r.reason, r.measurement, r.check] for r in p.cells]])
        for p in run.processes
    )


def content_digest(run: doc.RunDocument, records: tuple[str, ...] | None = None) -> str:
    """A run's identity, whatever bytes hold it: sha256 (hex, 64 characters) of the canonical JSON (sorted
    keys, no spaces) of its plan (:data:`PLAN_FIELDS` of its header), of every process's name and records'
    digest in process order (:func:`_records`, given as ``records`` when already made), and of the machine it
    ran on (:attr:`harness.document.Machine.identity`).
    Timestamps, paths (the command's ``--out``), pids and the host clock's readings are left out, so a copy
    of one run whose clocks were shifted, or that was written again with other spacing or key order, has
    the digest of the run; two runs differ in their samples (or seed) and so in their digests."""
    plan = {k: _plain(getattr(run.header, k)) for k in PLAN_FIELDS}
    records = _records(run) if records is None else records
    processes = [[p.name, digest] for p, digest in zip(run.processes, records, strict=True)]
    whole = {"plan": plan, "processes": processes, "machine": run.machine.identity}
    return _digest(whole)


def _json_default(value):
    """What json.dumps cannot write itself: a mapping (a typed document's read-only proxy) as an object, as
    :func:`_plain` gives it; anything else as its ``str``."""
    return dict(value) if isinstance(value, Mapping) else str(value)


def _digest(value) -> str:
    """sha256 (hex) of ``value`` as canonical JSON (sorted keys, no spaces; mappings at any depth as objects and
    tuples as lists, as :func:`_plain` gives them, without copying the document first)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default)
    return hashlib.sha256(text.encode()).hexdigest()


def process_digests(run: doc.RunDocument, records: tuple[str, ...] | None = None) -> dict[str, str]:
    """Each process's identity (name -> sha256 hex): its records' digest as :func:`content_digest` takes it
    (:func:`_records`: build, config, round, per cell its key, status, reason, raw samples and check), with the
    machine it ran on: the same process in two runs (one run's folder copied and then extended by more
    rounds) has the same digest there. Processes without cells have none."""
    records = _records(run) if records is None else records
    return {
        p.name: _digest([run.machine.identity, digest])
        for p, digest in zip(run.processes, records, strict=True)
        if p.cells
    }


def _same_run(runs: Sequence[tuple[Path, doc.RunDocument]], records: Sequence[tuple[str, ...]]) -> None:
    """Refuse one run given twice: one resolved folder, or one :func:`content_digest` (a copy, whatever its
    bytes: clocks shifted, written again). ``records``: each run's :func:`_records`."""
    seen: dict[str, Path] = {}
    for (path, run), digests in zip(runs, records, strict=True):
        folder = _folder(path)
        for key in (f"dir:{folder.resolve()}", f"content:{content_digest(run, digests)}"):
            if key in seen:
                raise MergeRefused(
                    f"{seen[key]} and {path} are the same run given twice "
                    + (
                        "(one folder)"
                        if key.startswith("dir:")
                        else "(one plan and the same process records: a copy, whatever its timestamps)"
                    ),
                    "name each machine's run once (--allow-same-machine is for two machines, not one run twice)",
                )
            seen[key] = path


def _shared_processes(runs: Sequence[tuple[Path, doc.RunDocument]], records: Sequence[tuple[str, ...]]) -> None:
    """Refuse two runs that hold the same process record (:func:`process_digests`): one run's folder copied
    and extended by more rounds, whose first rounds would count on two "machines". ``records``: each run's
    :func:`_records`."""
    owner: dict[str, tuple[Path, str]] = {}
    for (path, run), digests in zip(runs, records, strict=True):
        shared = {}
        for name, digest in process_digests(run, digests).items():
            if digest in owner and owner[digest][0] != path:
                shared.setdefault(owner[digest][0], []).append(name)
            owner.setdefault(digest, (path, name))
        for other, names in shared.items():
            raise MergeRefused(
                f"{other} and {path} share {len(names)} process record(s) ({names[0]}"
                + (", ..." if len(names) > 1 else "")
                + "): one run's processes would count as two machines",
                "merge runs measured apart, one per machine (--allow-same-machine is for two machines' own runs)",
            )


def plant_k(run: doc.RunDocument) -> float | None:
    """The run's ``compare --plant-k`` (a calibration run: the patched side's GEMMs had K grown), or None."""
    return run.header.plant_k


def _differ(what: str, a: Path, va, b: Path, vb, remedy: str) -> None:
    if va != vb:
        raise MergeRefused(f"{a} and {b} are runs of different {what} ({va} vs {vb})", remedy)


def _same(a_path: Path, a: doc.RunDocument, b_path: Path, b: doc.RunDocument) -> None:
    _differ(
        "devices",
        a_path,
        a.header.device,
        b_path,
        b.header.device,
        "merge runs of one device: cpu, cuda and mps run different kernels, so their rows would not "
        "measure one change (docs/machines.md)",
    )
    _differ("kinds", a_path, a.header.kind, b_path, b.header.kind, "merge compare runs with compare runs")
    _differ(
        "--plant-k",
        a_path,
        plant_k(a) or "none",
        b_path,
        plant_k(b) or "none",
        "merge calibration runs (compare --plant-k) only with calibration runs of the same K, ordinary runs "
        "with ordinary runs",
    )
    _differ("builds", a_path, a.header.builds, b_path, b.header.builds, "merge runs of the same builds")
    _differ("series", a_path, a.evidence.series, b_path, b.evidence.series, "merge runs of one patch series")
    for role in a.header.builds:
        x, y = a.builds[role], b.builds[role]
        _differ(
            f"{role} patch hashes",
            a_path,
            x.series_hash,
            b_path,
            y.series_hash,
            "build both machines' wheels from the same series (`nox -s check` then build_stock/build_patched)",
        )
        _differ(
            f"{role} torch",
            a_path,
            f"{x.public_version} at {(x.git_version or 'unknown')[:12]}",
            b_path,
            f"{y.public_version} at {(y.git_version or 'unknown')[:12]}",
            "merge runs whose builds hold the same torch version and commit",
        )
        if x.flags is not None or y.flags is not None:
            _flags(role, a_path, x, b_path, y)
    _differ(
        "contrast declarations",
        a_path,
        [c.label + f" ({c.claim})" for c in a.contrasts],
        b_path,
        [c.label + f" ({c.claim})" for c in b.contrasts],
        "merge runs made with the same series.toml [evidence] and --contrast options",
    )
    used = sorted({s.config for c in a.contrasts for s in (c.a, c.b)} & set(a.configs) & set(b.configs))
    for config in used:
        _differ(
            f"`{config}` variables",
            a_path,
            a.configs[config].get("env"),
            b_path,
            b.configs[config].get("env"),
            "merge runs whose env configs of one name set the same variables",
        )


def _flags(role: str, a_path: Path, x: doc.Build, b_path: Path, y: doc.Build) -> None:
    if x.flags is None or y.flags is None:
        raise MergeRefused(
            f"{role} of {a_path if x.flags is None else b_path} has no build manifest and the other has one: "
            "their build flags cannot be compared",
            "merge runs whose wheels were both built by build_stock/build_patched, or neither",
        )
    keys = sorted(k for k in set(x.flags) | set(y.flags) if x.flags.get(k) != y.flags.get(k))
    if keys:
        raise MergeRefused(
            f"the {role} wheels of {a_path} and {b_path} were built with different flags ({', '.join(keys[:4])})",
            "build every machine's wheels with the same flags (same harness, platform and --build-env)",
        )


def _same_machine(runs: Sequence[tuple[Path, doc.RunDocument]], allow: bool) -> None:
    seen: dict[str, Path] = {}
    for path, run in runs:
        ident = run.machine.identity
        if ident in seen and not allow:
            raise MergeRefused(
                f"{seen[ident]} and {path} ran on the same machine ({run.machine.chip}, {run.machine.os_text}, "
                "same provenance): the merge would count it twice",
                "merge runs of different machines, or pass --allow-same-machine for two identical machines",
            )
        seen.setdefault(ident, path)


def _builds_differ(runs: Sequence[tuple[Path, doc.RunDocument]]) -> tuple[str, ...]:
    """One line per build role (roles whose lines are the same share one) whose wheels are not one wheel
    on every machine: local labels, wheel hashes and the build settings torch reports that differ."""
    found: dict[str, list[str]] = {}
    for role in runs[0][1].header.builds:
        builds = [run.builds[role] for _, run in runs]
        labels = sorted({b.torch_version for b in builds})
        hashes = {b.wheel_sha256 for b in builds}
        settings = [b.build_settings for b in builds]
        keys = sorted(k for k in set().union(*settings) if len({s.get(k) for s in settings}) > 1)
        if len(labels) == 1 and len(hashes) == 1 and not keys:
            continue
        parts = [f"torch {' / '.join(labels)}" if len(labels) > 1 else f"torch {labels[0]} on every machine"]
        if len(hashes) > 1 and None not in hashes:
            parts.append(f"{len(hashes)} different wheel files (sha256)")
        if keys:
            shown = ", ".join(f"`{k}`" for k in keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
            parts.append(f"torch's build settings differ in {shown}")
        flags = "build manifests' flags match" if all(b.flags is not None for b in builds) else "no build manifests"
        found.setdefault("; ".join(parts) + f" ({flags}; same version and commit)", []).append(role)
    return tuple(f"{' and '.join(roles)}: {text}" for text, roles in found.items())


def _builds_same(run: doc.RunDocument) -> str:
    """What every machine's builds share when :func:`_builds_differ` found no difference (so any one run
    speaks for all): per role the torch version and commit, the same build settings, and whether a wheel
    file was hashed (a ``python:`` interpreter has none: then "the same" rests on version, commit and
    torch's own build settings)."""
    roles = [
        f"{role} torch {b.torch_version}" + (f" (`{b.git_version[:12]}`)" if b.git_version else "")
        for role, b in run.builds.items()
    ]
    hashed = all(b.wheel_sha256 for b in run.builds.values())
    files = "the same wheel file (sha256)" if hashed else "no wheel file to hash (interpreters given as python:)"
    return (
        f"Builds: the same on every machine: {', '.join(roles)}; the same build settings "
        f"(`torch.__config__.show()`); {files}."
    )


def _cell(row: con.ContrastRow) -> mergedoc.CellResult:
    cmp = row.cmp
    return mergedoc.CellResult(
        row.cell.key,
        cmp.ratio,
        cmp.ci_low,
        cmp.ci_high,
        cmp.verdict,
        cmp.threshold,
        len(row.a),
        len(row.b),
        row.launch_bound,
        below_resolution=row.below_resolution,
    )


def _summary(result: con.ContrastResult) -> mergedoc.CellResult:
    """The contrast's geometric mean over its cells as the run's own report computes it
    (:func:`harness.contrasts.geomean`, whole processes paired by round, the kernel-bound band)."""
    gm = result.geomean
    if gm is None or not result.rows:
        return mergedoc.CellResult(None, None, None, None, stats.UNDETERMINED, POLICY.kernel_bound.band, 0, 0, cells=0)
    return mergedoc.CellResult(
        None, gm.gm, gm.lo, gm.hi, gm.verdict, gm.threshold, gm.n_patched, gm.n_stock, cells=gm.n_cells
    )


def evaluate(run: doc.RunDocument) -> tuple[mergedoc.ContrastRecord, ...]:
    """Each declared contrast of one run, as its own report evaluates it (the report's bands)."""
    out = []
    for contrast in run.contrasts:
        result = con.evaluate(run, contrast)
        out.append(
            mergedoc.ContrastRecord(
                contrast.label, result.outcome, result.why, _summary(result), tuple(map(_cell, result.rows))
            )
        )
    return tuple(out)


def _tests_text(section: doc.SeriesTests | None) -> str:
    """The series' tests on one machine in a few words: how many ran as expected."""
    if section is None:
        return ""
    if section.skipped:
        return f"not run: {section.skipped}"
    judged = [rec.get("as_expected") for t in section.tests for rec in t.builds.values()]
    if not judged:
        return ""
    good = sum(1 for j in judged if j)
    return f"{good} of {len(judged)} as expected"


def _labels(runs: Sequence[doc.RunDocument]) -> list[str]:
    """Each machine's name (its chip), numbered where two share one."""
    names = [r.machine.chip.split(",")[0] for r in runs]
    counts, seen = Counter(names), Counter()
    out = []
    for name in names:
        seen[name] += 1
        out.append(f"{name} #{seen[name]}" if counts[name] > 1 else name)
    return out


def check_out(out: Path, directories: Sequence[Path]) -> None:
    """Refuse an ``--out`` that is one of the sources, or inside one: a merge never writes into a run it reads.

    Raises:
        MergeRefused: the source named, one line.
    """
    target = Path(out).resolve()
    for directory in directories:
        folder = _folder(Path(directory)).resolve()
        if target == folder or folder in target.parents:
            where = "one of the sources" if target == folder else f"inside the source {directory}"
            raise MergeRefused(
                f"--out {out} is {where}: merge only reads its sources and never writes into them",
                "give --out a folder of its own, e.g. results/merged",
            )


def stored_path(directory: Path, out: Path | None) -> str:
    """A source's folder as the merged document stores it: relative to ``out``'s parent where it lies under
    that parent (``merge runs/a runs/b --out runs/merged`` stores ``a``, ``b``), else absolute; absolute
    without ``out``. Never relative to the shell's working directory, which the document does not record."""
    folder = _folder(Path(directory)).resolve()
    if out is not None:
        base = Path(out).resolve().parent
        if folder.is_relative_to(base):
            return folder.relative_to(base).as_posix()
    return str(folder)


def merge(
    directories: Sequence[Path],
    allow_same_machine: bool = False,
    command: Sequence[str] = (),
    out: Path | None = None,
) -> mergedoc.MergeDocument:
    """Read, check (:func:`check`) and evaluate the runs in ``directories``; nothing is written. ``out``
    (the ``--out`` folder, not written here) is checked (:func:`check_out`) and anchors the stored source
    paths (:func:`stored_path`).

    Raises:
        ResultsError: a directory without a readable results.json (:func:`harness.results.load`'s messages),
            a merged document given as a source; MergeRefused: see :func:`check` and :func:`check_out`.
    """
    if out is not None:
        check_out(out, directories)
    runs = []
    for directory in directories:
        path = Path(directory)
        try:
            runs.append((path, doc.load(path)))
        except ResultsError:
            if load_merged(path.parent if path.name == res.RESULTS else path) is not None:
                raise MergeRefused(
                    f"{path} is a merged document, not a run", "merge the runs it was made from"
                ) from None
            raise
    differ = check(runs, allow_same_machine)
    first = runs[0][1]
    sources = []
    for label, (path, run) in zip(_labels([r for _, r in runs]), runs):
        results = path if path.name == res.RESULTS else path / res.RESULTS
        sources.append(
            mergedoc.Source(
                label,
                stored_path(path, out),
                sha256_file(results),
                results.stat().st_size,
                run.header.command,
                run.machine,
                tuple((role, b.torch_version) for role, b in run.builds.items()),
                run.processes_per_cell(),
                evaluate(run),
                _tests_text(run.series_tests),
            )
        )
    hashes = {b.series_hash for b in first.builds.values() if b.series_hash}
    return mergedoc.MergeDocument(
        first.header.device,
        first.evidence.series,
        next(iter(hashes)) if len(hashes) == 1 else None,
        first.contrasts,
        tuple(sources),
        differ,
        tuple(command),
        harness.__version__,
        "" if differ else _builds_same(first),
        plant_k(first),
        all(is_aa(run) for _, run in runs),
    )


def is_aa(run: doc.RunDocument) -> bool:
    """Whether a run compared one torch with itself: two builds of the same version, git commit and (where
    both were built here) source tree, as :func:`harness.report.same_identity` tells an A/A run."""
    builds = list(run.builds.values())
    if len(builds) != 2:
        return False
    a, b = builds
    same_tree = a.tree is None or b.tree is None or a.tree == b.tree
    return (a.torch_version, a.git_version) == (b.torch_version, b.git_version) and same_tree


def _peek(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None


#: how a merged results.json begins (harness.fsutil.atomic_write_json sorts keys; a run's has no builds_differ)
_MERGED_START = re.compile(r'\A\s*\{\s*"builds_differ"\s*:')


def load_merged(directory: Path) -> mergedoc.MergeDocument | None:
    """The merged document in ``directory``, or None when its results.json is not one (a run's, or none).

    Raises:
        ResultsError: a merged document that is damaged (:meth:`harness.document.MergeDocument.from_json`),
            or one that is no longer JSON (truncated) in a folder marked as a merge's (its marker's kind) or
            beginning as a merged document does: its remedy is to merge the sources again (a merge folder
            has no raw/ to rebuild from).
    """
    path = Path(directory) / res.RESULTS
    data = _peek(path) if path.is_file() else None
    if data is None and path.is_file():
        try:
            head = path.read_bytes()[:200].decode("utf-8", "replace")
            marked = marked_kind(Path(directory)) == "merge"
        except (OSError, ResultsError):
            head, marked = "", False
        if marked or _MERGED_START.match(head):
            raise ResultsError(
                f"{path} is a damaged merged document (not readable JSON: truncated?)",
                "merge the sources again (`python -m harness merge DIR DIR ... --out DIR`; the sources are "
                "unchanged by a merge, and their paths and sha256 are in report.md)",
            )
    return mergedoc.MergeDocument.from_json(data, str(path)) if mergedoc.is_merge(data) else None


def write(out: Path, merged: mergedoc.MergeDocument) -> list[Path]:
    """Write the merged ``results.json`` and ``report.md`` (rendered from it alone) into ``out``; a file of
    those names the harness did not write is set aside by name first (:func:`harness.outdir.make_room`)."""
    out = Path(out)
    make_room(out, res.RESULTS)
    atomic_write_json(out / res.RESULTS, merged.to_json())
    return [out / res.RESULTS, write_report(out, merged)]


def write_report(out: Path, merged: mergedoc.MergeDocument) -> Path:
    """``report.md`` of a merged document into ``out`` (``report DIR`` re-renders it byte-identically); a
    report.md the harness did not write is set aside by name first (:func:`harness.outdir.make_room`)."""
    make_room(Path(out), REPORT)
    atomic_write_text(Path(out) / REPORT, render(merged))
    return Path(out) / REPORT


# ------------------------------------------------------------------ the merged report (from the document alone)

#: contrasts per table of the PR block (one column each; more contrasts make more tables)
COLUMNS = 4
#: words of a claim's outcome (harness.contrasts)
CLAIM_WORDS = {"faster": "faster", "unchanged": "unchanged", "equivalent": "equivalent"}


def cell(text: object) -> str:
    """``text`` as one markdown table cell: ``|`` escaped as ``\\|`` (GitHub markdown unescapes it, also inside a
    code span, so a CPU name, path or command with ``|`` shows as it is and keeps the table's columns)."""
    return str(text).replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as a code span for a table cell (:func:`cell`): fenced by one backtick more than its longest
    run of backticks, so the text shown is exactly ``text``."""
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or runs else ""
    return cell(f"{fence}{pad}{text}{pad}{fence}")


def _verdict(v: str) -> str:
    return f"**{v}**" if v in (stats.FASTER, stats.SLOWER) else v


def _entry(record: mergedoc.ContrastRecord, claim: str, uneven: bool) -> str:
    s = record.summary
    if not s.cells:
        return record.outcome
    text = f"{s.speedup_ci()} {_verdict(s.verdict)}"
    if uneven:
        text += f" ({s.cells} cells)"
    if claim != "none":
        text += f"; claim {record.outcome}"
    return text


def _groups(labels: Sequence[str], values: Sequence[str]) -> str:
    """``faster on 3 of 3 machines``, or ``faster on 2 (A, B), equivalent on 1 (C) of 3 machines``."""
    n = len(labels)
    order = list(dict.fromkeys(values))
    if len(order) == 1:
        return f"{order[0]} on {n} of {n} machines"
    parts = [f"{v} on {values.count(v)} ({', '.join(lb for lb, x in zip(labels, values) if x == v)})" for v in order]
    return ", ".join(parts) + f" of {n} machines"


def agreement(merged: mergedoc.MergeDocument, i: int) -> str:
    """The line that says whether the machines agree on contrast ``i``: their verdicts counted (never
    pooled), the claim's outcomes counted, and the cells whose verdicts differ between machines."""
    contrast = merged.contrasts[i]
    labels = [s.label for s in merged.sources]
    records = [s.contrasts[i] for s in merged.sources]
    verdicts = [r.summary.verdict if r.summary.cells else r.outcome for r in records]
    text = _groups(labels, verdicts)
    if len(set(verdicts)) > 1:
        text += ": **the machines disagree**"
    if contrast.claim != "none":
        text += f"; claim {_groups(labels, [r.outcome for r in records])}"
    per_cell: dict[str, set[str]] = {}
    for r in records:
        for c in r.cells:
            per_cell.setdefault(c.key, set()).add(c.verdict)
    split = sum(len(v) > 1 for v in per_cell.values())
    if split:
        text += f"; cell verdicts differ between machines on {split} of {len(per_cell)} cells"
    return text


def _contrast_title(contrast) -> str:
    sides = f"`{contrast.a.label}` vs `{contrast.b.label}`" + (f" on {', '.join(contrast.ops)}" if contrast.ops else "")
    sides += f" ({', '.join(contrast.dtypes)})" if contrast.dtypes else ""
    claim = f"; claim {CLAIM_WORDS[contrast.claim]}" if contrast.claim in CLAIM_WORDS else ""
    return (f"**{contrast.name}**: " if contrast.name else "") + sides + claim


def _machines_table(merged: mergedoc.MergeDocument) -> list[str]:
    roles = [role for role, _ in merged.sources[0].torch]
    lines = [
        "| machine | chip / GPU | CPU | cores / torch threads | OS | torch ("
        + " / ".join(roles)
        + ") | processes per cell |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in merged.sources:
        m = s.machine
        lo, hi = s.processes
        row = (
            s.label,
            m.gpu_name or "–",
            m.cpu_name or "–",
            f"{m.cpus or '–'} / {m.threads}",
            m.os_text,
            " / ".join(v for _, v in s.torch),
            lo if lo == hi else f"{lo}-{hi}",
        )
        lines.append("| " + " | ".join(map(cell, row)) + " |")
    return lines + [""]


def _uneven(merged: mergedoc.MergeDocument, i: int) -> bool:
    return len({frozenset(c.key for c in s.contrasts[i].cells) for s in merged.sources}) > 1


def _contrast_tables(merged: mergedoc.MergeDocument) -> list[str]:
    out = []
    n = len(merged.contrasts)
    for start in range(0, n, COLUMNS):
        chunk = range(start, min(n, start + COLUMNS))
        out += ["| machine | " + " | ".join(f"C{i + 1}" for i in chunk) + " |", "|---|" + "---|" * len(chunk)]
        for s in merged.sources:
            entries = [_entry(s.contrasts[i], merged.contrasts[i].claim, _uneven(merged, i)) for i in chunk]
            out.append(f"| {cell(s.label)} | " + " | ".join(map(cell, entries)) + " |")
        out.append("")
    return out


def _partial_cells(merged: mergedoc.MergeDocument) -> list[str]:
    """One line: the cells measured on some machines only, counted (each machine's numbers cover its own)."""
    where: dict[str, set[str]] = {}
    for s in merged.sources:
        for record in s.contrasts:
            for c in record.cells:
                where.setdefault(c.key, set()).add(s.label)
    n = len(merged.sources)
    partial = {k: len(v) for k, v in where.items() if len(v) < n}
    if not partial:
        return []
    shown = ", ".join(f"`{k}` on {m} of {n}" for k, m in list(partial.items())[:3])
    more = f" and {len(partial) - 3} more" if len(partial) > 3 else ""
    return [
        f"Cells on some machines only: {len(partial)} of {len(where)} ({shown}{more}); each machine's numbers "
        "cover the cells it measured (every cell per machine: details).",
        "",
    ]


#: the merged block's estimator, said against a single run's (whose PR block judges each cell)
ESTIMATOR_WORDS = (
    "The tables give, per machine and contrast, another estimator than a single run's PR block: the geometric "
    "mean over the contrast's cells of whole processes paired by round, with its exact 95% CI (a single run's "
    "per-config summary, in its details); each cell per machine (details) is, as in a single run's report, "
    f"{prbody.CELL_ESTIMATOR}."
)


def pr_block(merged: mergedoc.MergeDocument) -> list[str]:
    """The merged PR-body block: where, the machines, per contrast one row per machine, the agreement lines."""
    n = len(merged.sources)
    series = f" of series `{merged.series}`" if merged.series else ""
    series += f" (`{merged.series_hash[:8]}`)" if merged.series_hash else ""
    out = [f"## For the pull request: {n} machines", ""]
    if merged.plant_k:
        out += [
            f"> **Calibration:** on every machine the patched side ran every GEMM with K grown by at least "
            f"{merged.plant_k:.0%} (`--plant-k`; both sides are otherwise the same torch): every kernel-bound "
            "GEMM cell whose grown K really costs more than the band should come out slower (what K' costs on "
            "the device: benchmarks/planted_cost.py); SDPA cells are unchanged.",
            "",
        ]
    if merged.aa:
        same = "on every machine both builds are the same torch (version, git hash)"
        out += [f"> **Note:** {same}: {prbody.AA_WORDS}.", ""]
    elif merged.aa is None:
        out += ["> **Note:** whether the runs are A/A is not recorded in this merged document (merge them again).", ""]
    out += [
        f"`{merged.device}` runs{series} on {n} machines, merged; each machine's run is its own (results.json and "
        "its sha256 in the details) and no number is pooled across machines. Speedup = B time / A time "
        f"(> 1: A faster). {ESTIMATOR_WORDS} Faster/slower when the whole CI lies beyond "
        f"±{POLICY.kernel_bound.band:.0%}, equivalent when inside. "
        "The lines under the tables count the machines' verdicts.",
        "",
    ]
    if merged.builds_differ:
        out += ["> **The wheels differ between machines:** " + " ".join(f"{x}." for x in merged.builds_differ), ""]
    elif merged.builds_same:
        out += [merged.builds_same, ""]
    out += _machines_table(merged) + _contrast_tables(merged)
    out += [f"- C{i + 1} {_contrast_title(c)}: {agreement(merged, i)}." for i, c in enumerate(merged.contrasts)]
    out += [""] + _partial_cells(merged)
    tests = [f"{s.label} {s.tests}" for s in merged.sources if s.tests]
    if tests:
        out += ["Series tests (each machine's builds): " + "; ".join(tests) + ".", ""]
    return out


def _sources(merged: mergedoc.MergeDocument) -> list[str]:
    lines = ["## Sources", "", "| machine | results.json | sha256 | bytes | command |", "|---|---|---|---|---|"]
    for s in merged.sources:
        lines.append(f"| {cell(s.label)} | {code(s.path)} | `{s.sha256}` | {s.size} | {code(shlex.join(s.command))} |")
    return lines + [
        "",
        "Each source is read, never written: `python -m harness report DIR` re-renders its own report. "
        "A folder is relative to the merge folder's parent where it lies under it, else absolute.",
        "",
    ]


def _cell_tables(merged: mergedoc.MergeDocument) -> list[str]:
    out = ["## Contrasts, every cell per machine", ""]
    labels = [s.label for s in merged.sources]
    for i, contrast in enumerate(merged.contrasts):
        keys = list(dict.fromkeys(c.key for s in merged.sources for c in s.contrasts[i].cells))
        out += [f"<details><summary>C{i + 1} {contrast.label}: {len(keys)} cells</summary>", ""]
        out += ["| cell | " + " | ".join(map(cell, labels)) + " |", "|---|" + "---|" * len(labels)]
        for key in keys:
            found = [next((c for c in s.contrasts[i].cells if c.key == key), None) for s in merged.sources]
            entries = ["not measured" if c is None else f"{c.speedup_ci()} {c.verdict_text}" for c in found]
            out.append(f"| {code(key)} | " + " | ".join(entries) + " |")
        whys = "; ".join(f"{s.label}: {s.contrasts[i].why}" for s in merged.sources)
        out += ["", f"Each machine's own outcome: {whys}.", "", "</details>", ""]
    return out


def render(merged: mergedoc.MergeDocument) -> str:
    """``report.md`` of a merged document, from the document alone (deterministic)."""
    out = pr_block(merged)
    out += ["<details><summary><b>Details</b>: sources, every cell per machine</summary>", ""]
    out += _sources(merged) + _cell_tables(merged)
    out += [
        f"Merged by torch-patch-harness {merged.harness_version}: `{shlex.join(merged.command)}`",
        "",
        "</details>",
    ]
    return "\n".join(out) + "\n"
