"""The merged document of several machines' runs (``merge --out``): typed values, read and written by
:mod:`harness.merge`, validated on read (:meth:`MergeDocument.from_json`). Its own kind and version, apart
from a run's schema (:mod:`harness.document`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from harness.document import Machine
from harness.errors import ResultsError
from harness.evidence import Contrast

#: ``kind`` of a merged results.json; its own version, apart from a run's schema
MERGE_KIND, MERGE_VERSION = "merge", 1


def _finite(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


@dataclass(frozen=True)
class CellResult:
    """A vs B on one cell (or, with ``key`` None, over a contrast's cells as one geometric mean of whole
    processes): the A/B time ratio and its exact 95 % CI (None where not computable), the verdict, the band
    it was judged by, the processes per side and whether the cell is launch-bound; ``below_resolution``: not
    judged, a process timed it below the timer's resolution (:attr:`harness.contrasts.ContrastRow.below_resolution`;
    written to JSON only when true, so merged documents from before it read the same)."""

    key: str | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str
    threshold: float
    n_a: int
    n_b: int
    launch_bound: bool = False
    cells: int = 1
    below_resolution: bool = False

    @property
    def verdict_text(self) -> str:
        """The verdict in a table: bold when it is a change; ``below timer resolution`` when not judged."""
        if self.below_resolution:
            return "below timer resolution"
        return f"**{self.verdict}**" if self.verdict in ("faster", "slower") else self.verdict

    def speedup_ci(self) -> str:
        """B time / A time with its CI, ``1.018× [1.010, 1.025]`` (> 1: A faster); "–" without a ratio (None, or
        NaN as :func:`harness.merge.evaluate` gives it before the document is written)."""
        if self.ratio is None or not math.isfinite(self.ratio) or self.ratio <= 0:
            return "–"
        if self.ci_low and self.ci_high and self.ci_low > 0:
            return f"{1 / self.ratio:.3f}× [{1 / self.ci_high:.3f}, {1 / self.ci_low:.3f}]"
        return f"{1 / self.ratio:.3f}× [no CI]"

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "ratio": _finite(self.ratio),
            "ci_low": _finite(self.ci_low),
            "ci_high": _finite(self.ci_high),
            "verdict": self.verdict,
            "threshold": self.threshold,
            "n_a": self.n_a,
            "n_b": self.n_b,
            "launch_bound": self.launch_bound,
            "cells": self.cells,
            **({"below_resolution": True} if self.below_resolution else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping) -> CellResult:
        return cls(
            d["key"],
            _finite(d["ratio"]),
            _finite(d["ci_low"]),
            _finite(d["ci_high"]),
            str(d["verdict"]),
            float(d["threshold"]),
            int(d["n_a"]),
            int(d["n_b"]),
            bool(d["launch_bound"]),
            int(d["cells"]),
            d.get("below_resolution") is True,
        )


@dataclass(frozen=True)
class ContrastRecord:
    """One contrast as one machine's run evaluates it (:func:`harness.contrasts.evaluate`): the claim's
    outcome and its one-line why, the whole-process geometric mean over its cells (``summary``) and every
    covered cell."""

    label: str
    outcome: str
    why: str
    summary: CellResult
    cells: tuple[CellResult, ...]

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "outcome": self.outcome,
            "why": self.why,
            "summary": self.summary.to_json(),
            "cells": [c.to_json() for c in self.cells],
        }

    @classmethod
    def from_json(cls, d: Mapping) -> ContrastRecord:
        return cls(
            d["label"],
            d["outcome"],
            d["why"],
            CellResult.from_json(d["summary"]),
            tuple(CellResult.from_json(c) for c in d["cells"]),
        )


@dataclass(frozen=True)
class Source:
    """One merged run: where its results.json was (``path`` as given) and its sha256 and size (the merge
    never writes there), the machine, each build's torch (``(role, version)`` in the run's order), processes
    per cell, its contrasts and its series tests in a few words."""

    label: str
    path: str
    sha256: str
    size: int
    command: tuple[str, ...]
    machine: Machine
    torch: tuple[tuple[str, str], ...]
    processes: tuple[int, int]
    contrasts: tuple[ContrastRecord, ...]
    tests: str = ""

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "path": self.path,
            "results_sha256": self.sha256,
            "results_bytes": self.size,
            "command": list(self.command),
            "machine": dict(self.machine.__dict__),
            "torch": [list(pair) for pair in self.torch],
            "processes": list(self.processes),
            "contrasts": [c.to_json() for c in self.contrasts],
            "tests": self.tests,
        }

    @classmethod
    def from_json(cls, d: Mapping) -> Source:
        return cls(
            d["label"],
            d["path"],
            d["results_sha256"],
            int(d["results_bytes"]),
            tuple(d["command"]),
            Machine(**d["machine"]),
            tuple((str(role), str(version)) for role, version in d["torch"]),
            (int(d["processes"][0]), int(d["processes"][1])),
            tuple(ContrastRecord.from_json(c) for c in d["contrasts"]),
            d.get("tests", ""),
        )


@dataclass(frozen=True)
class MergeDocument:
    """Several machines' runs of one series, device and contrast declarations (:mod:`harness.merge`):
    the declarations, each :class:`Source`, and the lines that say how the machines' builds differ."""

    device: str
    series: str | None
    series_hash: str | None
    contrasts: tuple[Contrast, ...]
    sources: tuple[Source, ...]
    builds_differ: tuple[str, ...]
    command: tuple[str, ...]
    harness_version: str
    #: when no build differs: what every machine's builds share (one line), else ""
    builds_same: str = ""
    #: ``compare --plant-k`` of every source (a calibration merge: all sources planted the same K), else None
    plant_k: float | None = None
    #: whether every source compared one torch with itself (an A/A merge); None: not recorded (older merges)
    aa: bool | None = None

    def to_json(self) -> dict:
        return {
            **({"plant_k": self.plant_k} if self.plant_k else {}),
            "kind": MERGE_KIND,
            "merge_version": MERGE_VERSION,
            "harness_version": self.harness_version,
            "command": list(self.command),
            "device": self.device,
            "series": self.series,
            "series_hash": self.series_hash,
            "contrasts": [c.to_json() for c in self.contrasts],
            "builds_differ": list(self.builds_differ),
            "builds_same": self.builds_same,
            **({"runs_are_aa": self.aa} if self.aa is not None else {}),
            "sources": [s.to_json() for s in self.sources],
        }

    @classmethod
    def from_json(cls, d: Mapping, where: str = "results.json") -> MergeDocument:
        """Raises:
        ResultsError: not a merged document of a version this harness reads (a newer one names the harness
            version that wrote it), malformed (a missing key, a wrong type), or of the wrong shape (fewer than
            two sources, a source without the document's contrasts): the message names the file."""
        version = d.get("merge_version") if is_merge(d) else None
        if isinstance(version, int) and not isinstance(version, bool) and version > MERGE_VERSION:
            raise ResultsError(
                f"{where} is a merged document of version {version}; this harness reads version {MERGE_VERSION}",
                f"read it with the harness version that wrote it ({d.get('harness_version') or 'not recorded'})",
            )
        if version != MERGE_VERSION:
            raise ResultsError(
                f"{where} is not a merged document of version {MERGE_VERSION}",
                "merge the runs again with this harness: `python -m harness merge DIR DIR --out DIR`",
            )
        again = "merge the sources again: the sources are unchanged by a merge"
        try:
            merged = cls(
                d["device"],
                d["series"],
                d["series_hash"],
                tuple(Contrast.from_json(c) for c in d["contrasts"]),
                tuple(Source.from_json(s) for s in d["sources"]),
                tuple(d["builds_differ"]),
                tuple(d["command"]),
                d["harness_version"],
                str(d.get("builds_same", "")),
                _finite(d.get("plant_k")),
                d["runs_are_aa"] if isinstance(d.get("runs_are_aa"), bool) else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ResultsError(f"{where} is a damaged merged document ({type(exc).__name__}: {exc})", again) from None
        found = merged.shape_problem()
        if found:
            raise ResultsError(f"{where} is a damaged merged document ({found})", again)
        return merged

    def shape_problem(self) -> str | None:
        """What makes the document unrenderable, in a few words, or None: fewer than two sources, or a source
        whose contrasts are not the document's (one record per declared contrast, by label, in order)."""
        if len(self.sources) < 2:
            return f"{len(self.sources)} source(s); a merge has at least two"
        labels = [c.label for c in self.contrasts]
        for i, source in enumerate(self.sources):
            have = [r.label for r in source.contrasts]
            if have != labels:
                return f"sources[{i}]'s {len(have)} contrast record(s) are not the document's {len(labels)} contrasts"
        return None


def is_merge(data) -> bool:
    """Whether a parsed results.json is a merged document (:class:`MergeDocument`), not a run."""
    return isinstance(data, Mapping) and data.get("kind") == MERGE_KIND and "sources" in data
