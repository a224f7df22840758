"""Typed results documents for tests (:mod:`harness.document`): a reduced results.json, holding only what
one reader reads, completed from the cpu example; a record or a process of a results.json as its typed value."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path

from harness import document as doc

TEMPLATE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "cpu-ab" / "results.json"
SECTIONS = ("configs", "kernels", "processes", "evidence", "consistency", "series_tests")


def run_of(data: Mapping | doc.RunDocument) -> doc.RunDocument:
    """``data`` as a :class:`harness.document.RunDocument`: its ``run`` keys over the cpu example's, its
    sections in place of the example's, each build's keys (and provenance facts) over the example's."""
    if isinstance(data, doc.RunDocument):
        return data
    full = json.loads(TEMPLATE.read_text())
    full["run"].update(copy.deepcopy(data.get("run", {})))
    full.update({k: copy.deepcopy(data[k]) for k in SECTIONS if k in data})
    given = data.get("builds") or {}
    full["builds"] = {
        b: _build(full["builds"].get(b, full["builds"]["stock"]), given.get(b, {})) for b in full["run"]["builds"]
    }
    return doc.from_json(full, validated=True)


def _build(template: dict, given: Mapping) -> dict:
    """A build entry: ``given``'s keys over the template's, its provenance facts over the template's."""
    out = {**template, **copy.deepcopy(dict(given))}
    out["provenance"] = {**template["provenance"], **copy.deepcopy(dict(given.get("provenance") or {}))}
    return out


def record(rec: Mapping, config: str = "default", key: str = "cell", build: str = "stock") -> doc.CellRecord:
    """One cell record of a process (``status`` "ok" when it has none)."""
    return doc.CellRecord(
        config,
        key,
        build,
        int(rec.get("round", 0)),
        rec.get("status", "ok"),
        rec.get("reason"),
        rec.get("measurement"),
        rec.get("check"),
    )


def process(proc: Mapping) -> doc.Process:
    """One process record (its cells typed by :func:`record`)."""
    build, config, rnd = proc.get("build", "stock"), proc.get("config", "default"), proc.get("round", 0)
    cells = tuple(record({**c, "round": rnd}, config, k, build) for k, c in proc.get("cells", {}).items())
    times = (proc.get("started"), proc.get("worker_started"), proc.get("finished"))
    return doc.Process(proc.get("name", ""), build, config, rnd, cells, *times)
