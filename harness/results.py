"""The ``results.json`` schema: provenance, the run plan, and every worker process's raw samples.

Plain JSON that can be re-analysed and re-rendered later (``python -m harness report DIR``).
The full schema is documented in docs/results-schema.md. Layout of a results directory::

    <out>/results.json          assembled after every finished process (atomic rename)
    <out>/report.md             rendered from results.json alone
    <out>/raw/<proc>.jsonl      the worker's own per-cell records, appended as each cell finishes
    <out>/raw/<proc>.status.json  written by the runner once that process has ended (resume marker)

This module does no measuring and no statistics: it reads, writes and indexes.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Iterator

from harness.errors import ResultsError
from harness.fsutil import atomic_write_json

SCHEMA_VERSION = 1
RESULTS = "results.json"
#: top-level keys every results.json has
REQUIRED = ("run", "builds", "configs", "processes")


def load(directory: Path) -> dict:
    """Read ``<directory>/results.json``.

    Raises:
        ResultsError: missing, unreadable, not JSON, or another schema version (never overwritten).
    """
    directory = Path(directory)
    path = directory if directory.name == RESULTS and directory.is_file() else directory / RESULTS
    if not path.is_file():
        raise ResultsError(f"{path} does not exist", "run `python -m harness compare ... --out DIR` first")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ResultsError(f"{path} is not readable JSON ({exc})",
                           "restore it from the raw/ files by re-running the same command, or use --out with a new directory") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise ResultsError(f"{path} has schema version {found!r}; this harness reads version {SCHEMA_VERSION}",
                           "re-render it with the harness version that wrote it, or run again with --out pointing at a new directory")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ResultsError(f"{path} lacks {', '.join(missing)} (schema version {SCHEMA_VERSION} requires them)",
                           "it was edited or truncated; re-run the command that wrote it (finished processes are kept in raw/)")
    return data


def save(directory: Path, data: dict) -> Path:
    """Write ``results.json`` atomically; returns its path."""
    path = Path(directory) / RESULTS
    atomic_write_json(path, data)
    return path


def iter_cells(data: dict) -> Iterator[tuple[str, str, str, list[dict]]]:
    """Yield ``(config, cell key, build, records)`` with one record per process that ran the cell
    (records carry ``round``, ``status``, ``reason``, ``measurement``, ``check``), in plan order."""
    grouped: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for proc in data.get("processes", []):
        for key, rec in proc.get("cells", {}).items():
            grouped[(proc["config"], key, proc["build"])].append({**rec, "round": proc["round"]})
    order = {k: i for i, k in enumerate(data["run"]["cells"])}
    configs = {c: i for i, c in enumerate(data["run"]["configs"])}
    builds = {b: i for i, b in enumerate(data["run"]["builds"])}
    for (config, key, build) in sorted(grouped, key=lambda t: (configs.get(t[0], 99), order.get(t[1], 1e9), builds.get(t[2], 9))):
        yield config, key, build, sorted(grouped[(config, key, build)], key=lambda r: r["round"])


def cell_table(data: dict) -> dict[str, dict[str, dict[str, list[dict]]]]:
    """``{config: {cell key: {build: records}}}`` in plan order (see :func:`iter_cells`)."""
    table: dict[str, dict[str, dict[str, list[dict]]]] = {}
    for config, key, build, records in iter_cells(data):
        table.setdefault(config, {}).setdefault(key, {})[build] = records
    return table


def process_medians(records: list[dict]) -> list[float]:
    """Per-process medians (seconds) of the records that measured the cell."""
    return [r["measurement"]["median"] for r in records if r.get("status") == "ok" and r.get("measurement")]


def process_matrix(per_cell: dict[str, dict[str, list[dict]]], build: str, keys: list[str]) -> list[list[float]]:
    """Per-process medians of one (build, config) as rows = processes (by round), columns = ``keys``.

    ``per_cell`` is one config of :func:`cell_table`. A process that did not measure a cell
    (failed, skipped, or an adaptive round that left it out) has NaN there. Seconds."""
    rows: dict[int, list[float]] = {}
    for j, key in enumerate(keys):
        for r in per_cell.get(key, {}).get(build, []):
            if r.get("status") == "ok" and r.get("measurement"):
                rows.setdefault(r["round"], [math.nan] * len(keys))[j] = r["measurement"]["median"]
    return [rows[rnd] for rnd in sorted(rows)]


def round_series(per_cell: dict[str, dict[str, list[dict]]], build: str) -> list[float]:
    """One number per round for the drift check of one (build, config): the median over cells of
    each cell's per-process median divided by that cell's median over all rounds (1.0 = typical).

    Only the planned rounds count where every cell ran; adaptive rounds measure a subset and are
    included with the cells they measured. Dimensionless, in round order."""
    per_round: dict[int, list[float]] = {}
    for per_build in per_cell.values():
        records = [r for r in per_build.get(build, []) if r.get("status") == "ok" and r.get("measurement")]
        if not records:
            continue
        typical = statistics.median(r["measurement"]["median"] for r in records)
        for r in records:
            per_round.setdefault(r["round"], []).append(r["measurement"]["median"] / typical)
    return [statistics.median(per_round[rnd]) for rnd in sorted(per_round)]
