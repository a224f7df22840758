"""Observed kernel paths against declared routes: what results.json ``kernels`` says ran, per
(build, config, cell), read against each config's ``routes`` (:attr:`harness.configs.EnvConfig.routes`).

Rule (one, for every device): a config's route for an op is the accuracy path the manifest says the
op takes there (``default`` where none is declared). Each build's observed call has a route
(:func:`harness.bench.kernels.classify`). Where the runner told a build's base and that base declares its
routes (results.json ``builds.<b>.base.routes``: series.toml ``[base.routes.<device>]``, with
``patched_routes`` laid over them on a build carrying the series; :meth:`harness.evidence.Evidence.routes_of`),
the build is judged exactly: any observed route other than its own declared one is a mismatch. Other
builds are judged against the config's series-wide routes, the looser rule: an observed route that is
neither the declared one nor the default is a mismatch; so is ``default`` declared and another route
observed. A declared non-default route must be observed on at least one of those builds: where stock and
patched route an op differently under one config, the series-wide table names the looser path, which
one build takes, so a build taking the default path there is not itself a mismatch; no build taking it
is (which build takes it that table does not say: the PR block's kernels line shows each side's).
:func:`rules` says which rule judged each build; the Kernels details print it (runs of a series with
bases). A call whose trace printed nothing (``no trace``) or could not be classified has no route and is
not judged; a declared non-default route that no build's observation could judge is named as not
verified (:func:`unverified`).

No measuring, no file access: this module reads a results document."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from harness import configs as cfg
from harness.bench.kernels import RULES, TRACES, label, main_index
from harness.bench.workloads import Cell
from harness.document import RunDocument

#: characters of a kernel name shown in the report
SHOWN_CHARS = 60


@dataclass(frozen=True)
class Mismatch:
    """Builds whose observed kernel path for (op, dtype) under ``config`` is not the declared route."""

    config: str
    op: str
    dtype: str
    declared: str
    observed: str
    builds: tuple[str, ...]
    cells: int
    #: the base whose ``[base.routes]`` declared it (the exact per-build rule); "" for the series-wide routes
    base: str = ""

    @property
    def text(self) -> str:
        where = f"{self.cells} cells" if self.cells > 1 else "1 cell"
        whose = f" for base {self.base}" if self.base else ""
        return (
            f"declared {self.declared}{whose}, observed {self.observed} for {self.op} {self.dtype} under "
            f"`{self.config}` on {', '.join(self.builds)} ({where})"
        )


def seen(run: RunDocument, build: str, config: str, key: str) -> dict | None:
    """The observation of one (build, config, cell), or None where the run recorded none."""
    return ((run.kernels or {}).get(build) or {}).get(config, {}).get(key)


def _base(run: RunDocument, build: str) -> dict:
    """The base the runner told for ``build`` ({} when none)."""
    return (run.builds[build].base if build in run.builds else None) or {}


def build_routes(run: RunDocument, build: str) -> dict | None:
    """Config -> op -> declared path of one build, exact for it (its base's routes, module rule), or None
    where the runner recorded none (base not told, no routes for it): the series-wide routes hold."""
    return _base(run, build).get("routes")


def rules(run: RunDocument) -> dict[str, str]:
    """Build -> one line: which rule judges its observed routes (module rule)."""
    out = {}
    for b in run.header.builds:
        told = _base(run, b)
        if build_routes(run, b) is not None:
            out[b] = f"exact, the routes of base {told.get('ref')}"
        else:
            why = f"base {told['ref']} declares no routes here" if told.get("ref") else "base not told"
            out[b] = f"series-wide routes, the looser rule ({why})"
    return out


def _judged(run: RunDocument, config: str, key: str):
    """(build, declared route, observation, base or "") for every build whose observation has a route, and
    the builds judged by the looser rule, for one (config, cell)."""
    op = Cell.from_key(key).op
    shared = (run.configs.get(config) or {}).get("routes", {}).get(op, "default")
    exact, loose = [], []
    for b in run.header.builds:
        own = build_routes(run, b)
        declared = own.get(config, {}).get(op, "default") if own is not None else shared
        base = _base(run, b).get("ref", "") if own is not None else ""
        (exact if own is not None else loose).append((b, declared, seen(run, b, config, key), base or ""))
    return exact, loose, shared


def _each_judged(run: RunDocument):
    """(config, cell key, :class:`Cell`, :func:`_judged`) for every planned config and cell, in plan order."""
    for config in run.header.configs:
        for key in run.header.cells:
            yield config, key, Cell.from_key(key), _judged(run, config, key)


def mismatches(run: RunDocument) -> list[Mismatch]:
    """Every declared route the observed kernels contradict (module rule), grouped by config, op, dtype,
    declared and observed path and declaring base, in plan order."""
    if not run.kernels:
        return []
    groups = {}
    for config, key, cell, (exact, loose, shared) in _each_judged(run):
        bad = [(b, d, o, base) for b, d, o, base in exact if o and o.get("route") and o["route"] != d]
        routes_seen = {b: o["route"] for b, _, o, _ in loose if o and o.get("route")}
        if shared == "default":
            wrong = [b for b, r in routes_seen.items() if r != "default"]
        elif shared not in routes_seen.values():
            wrong = list(routes_seen)
        else:
            wrong = [b for b, r in routes_seen.items() if r not in (shared, "default")]
        bad += [(b, shared, seen(run, b, config, key), "") for b in wrong]
        for b, declared, obs, base in bad:
            group = (config, cell.op, cell.dtype, declared, label(obs["path"]), base)
            builds, keys = groups.setdefault(group, ([], set()))
            if b not in builds:
                builds.append(b)
            keys.add(key)
    return [
        Mismatch(c, op, dt, d, o, tuple(builds), len(keys), base)
        for (c, op, dt, d, o, base), (builds, keys) in groups.items()
    ]


def unverified(run: RunDocument) -> list[tuple[str, str, str, str, int]]:
    """(config, op, dtype, declared route, cells) where a non-default route is declared and no observation
    that could judge it has a route (no trace, unclassified, or not observed): the declaration went
    unchecked. Judged per build where its base's routes are exact, over the other builds together
    otherwise. On mps every GEMM logs a profiler line, so this means the trace itself failed, never that
    the route held."""
    if not run.kernels:
        return []
    groups = {}
    for config, _key, cell, (exact, loose, shared) in _each_judged(run):
        missing = {d for _, d, o, _ in exact if d != "default" and not (o and o.get("route"))}
        if loose and shared != "default" and not any(o and o.get("route") for _, _, o, _ in loose):
            missing.add(shared)
        for declared in sorted(missing):
            group = (config, cell.op, cell.dtype, declared)
            groups[group] = groups.get(group, 0) + 1
    return [(*g, n) for g, n in groups.items()]


def error_notes(run: RunDocument) -> list[str]:
    """The report's first-screen errors: one blockquote per :class:`Mismatch`, and one per declared route
    no observation could check (:func:`unverified`)."""
    notes = [
        f"> **Error:** {m.text}: the accuracy bound and any claim about this config rest on a kernel path "
        "that did not run (observed kernels: Kernels in the details)."
        for m in mismatches(run)
    ]
    for config, op, dtype, declared, cells in unverified(run):
        where = f"{cells} cells" if cells > 1 else "1 cell"
        notes.append(
            f"> **Route not verified:** declared {declared} for {op} {dtype} under `{config}`, but no build's "
            f"trace named a kernel ({where}): the bound rests on the declaration alone (Kernels in the details)."
        )
    return notes


def short(name: str) -> str:
    """A kernel name cut to :data:`SHOWN_CHARS`, safe in a markdown table cell."""
    name = "".join(c if c.isprintable() else " " for c in name).replace("|", "/").replace("`", "'")
    return name if len(name) <= SHOWN_CHARS else name[: SHOWN_CHARS - 1] + "…"


def never_started(run: RunDocument) -> dict[str, str]:
    """Config -> why, for each config none of whose processes started: the build's interpreter stopped
    before running any code under the config's environment (``PYTHONHOME=/nonexistent`` in series.toml), in
    every process the run has of it. Such a config has no measurement and no observed kernel."""
    out = {}
    for config in run.header.configs:
        procs = [p for p in run.processes if p.config == config]
        if procs and all(p.did_not_start for p in procs):
            out[config] = procs[0].did_not_start
    return out


def short_line(text: str, limit: int = 200) -> str:
    """A line of a process's output for the report: printable, no backquote, at most ``limit`` characters."""
    text = "".join(c if c.isprintable() else " " for c in text).replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def timed(obs: dict | None) -> bool:
    """Whether the observation recorded each kernel's device duration (``device_us``; older results.json
    did not)."""
    return bool(obs) and isinstance(obs.get("device_us"), list) and len(obs["device_us"]) == len(obs["names"])


def main_kernel(run: RunDocument, obs: dict | None) -> str | None:
    """The kernel that did the work in one observation (:func:`harness.bench.kernels.main_index`: the largest
    device time, else the first that is not a memset, copy or reduction); None without names or with an error."""
    if not obs or obs.get("error") or not obs.get("names"):
        return None
    device = run.header.device
    if device not in RULES:
        return obs["names"][0]
    return obs["names"][main_index(device, obs["names"], obs.get("device_us") if timed(obs) else None)]


def others(run: RunDocument, obs: dict | None) -> list[str]:
    """The names of the call's other kernels (all but :func:`main_kernel`), in call order."""
    main = main_kernel(run, obs)
    if main is None:
        return []
    at = obs["names"].index(main)
    return [n for i, n in enumerate(obs["names"]) if i != at]


def describe(obs: dict | None, run: RunDocument | None = None) -> str:
    """One observation in words: ``<path> `<kernel that did the work>``` (with its device time where
    recorded), ``no trace``, or ``not observed: <why>``."""
    if obs is None:
        return "not observed"
    if obs.get("error"):
        return f"not observed: {obs['error']}"
    if not obs["names"]:
        return label(None)
    main = main_kernel(run, obs) if run is not None else obs["names"][0]
    us = f" {obs['device_us'][obs['names'].index(main)]:,.1f} µs" if timed(obs) else ""
    return f"{label(obs['path'])} `{short(main)}`{us}"


def default_config(device: str) -> str:
    """The device's default env config (the first of :data:`harness.configs.PROFILES`), against which
    "same kernel" is said."""
    return cfg.PROFILES[device][0].name


def same_kernel(run: RunDocument, build: str, config: str, key: str) -> bool:
    """Whether ``config`` ran the kernel that did the work (:func:`main_kernel`) that the device's default
    config ran for this build and cell."""
    mine = main_kernel(run, seen(run, build, config, key))
    return mine is not None and mine == main_kernel(run, seen(run, build, default_config(run.header.device), key))


def _side_words(run: RunDocument, side, keys: list[str]) -> str:
    found = [seen(run, side.build, side.config, k) for k in keys]
    paths = Counter(describe(o) if o is None or o.get("error") else label(o["path"]) for o in found)
    names = sorted({m for o in found if (m := main_kernel(run, o))})
    text = ", ".join(f"{p} ×{n}" for p, n in paths.items())
    if 0 < len(names) <= 2:
        text += " (" + ", ".join(f"`{short(n)}`" for n in names) + ")"
    return f"`{side.label}` {text}"


#: the PR block's line for a run whose results.json has no ``kernels`` (made before kernels were observed)
NOT_OBSERVED = "Kernels: not observed (this run's results.json predates kernel observation)."


def contrast_line(run: RunDocument, contrast) -> str:
    """One line for a contrast's PR block: which kernel ran on each side over its covered cells, and
    whether it was the same kernel, said only of cells with a kernel observed on both sides."""
    keys = [k for k in run.header.cells if contrast.covers(Cell.from_key(k).op, Cell.from_key(k).dtype)]
    if not run.kernels:
        return NOT_OBSERVED
    if not keys:
        return "Kernels: no cell of this run is covered."
    both = [  # cells with a kernel observed on both sides: only those can be the same or different
        (main_kernel(run, a), main_kernel(run, b))
        for k in keys
        if (a := seen(run, contrast.a.build, contrast.a.config, k))
        and (b := seen(run, contrast.b.build, contrast.b.config, k))
        and all(o["names"] and not o.get("error") for o in (a, b))
    ]
    same = sum(1 for a, b in both if a == b)
    part = f" observed on both sides ({len(both)} of {len(keys)})" if len(both) < len(keys) else ""
    if not both:
        verdict = "no cell has a kernel observed on both sides"
    elif same == len(both):
        verdict = "A and B ran the same kernel in every cell" + part
    elif same:
        verdict = f"A and B ran the same kernel in {same} of {len(both)} cells" + part
    else:
        verdict = "A and B ran a different kernel in every cell" + part
    if both and any(m.config in (contrast.a.config, contrast.b.config) for m in mismatches(run)):
        verdict += " (A against B; the declared route against both: the errors above)"
    which = ""
    if run.header.device in TIMED_DEVICES:  # where a trace records device durations
        which = f" ({'the one with the largest device time' if _all_timed(run, contrast, keys) else UNTIMED})"
    return f"Kernels{which}: A {_side_words(run, contrast.a, keys)}; B {_side_words(run, contrast.b, keys)}; {verdict}."


#: devices whose trace records each kernel's device duration (:attr:`harness.bench.kernels.Trace.durations`)
TIMED_DEVICES = tuple(d for d, t in TRACES.items() if t.durations is not None)


#: said where an observation has no device durations (older results.json)
UNTIMED = "the first that is not a memset or copy: durations not recorded in this results.json"


def _all_timed(run: RunDocument, contrast, keys: list[str]) -> bool:
    return all(
        timed(o) or not (o and o.get("names"))
        for side in (contrast.a, contrast.b)
        for o in (seen(run, side.build, side.config, k) for k in keys)
    )


def details(run: RunDocument) -> list[str]:
    """The report's Kernels section: per config, each cell's observed kernel per build, "same kernel as
    `<default>`" where the config ran what the device's default config ran."""
    out = ["## Kernels", ""]
    if not run.kernels:
        return out + ["Not observed: this run's results.json predates kernel observation.", ""]
    head = run.header
    base = default_config(head.device)
    traces = sorted({o["trace"] for per in run.kernels.values() for c in per.values() for o in c.values()})
    out += [
        f"One untimed call per (build, config, cell) in the first round, observed through {', '.join(traces)} "
        "(harness/bench/kernels.py); shown: the kernel that did the work"
        + (
            (
                ", the one with the largest device time (a memset or copy only when it is the largest)"
                + (
                    ""
                    if all(
                        timed(o) for per in run.kernels.values() for c in per.values() for o in c.values() if o["names"]
                    )
                    else "; where durations were not recorded (results.json before they were), the first kernel that "
                    "is not a memset, copy or reduction"
                )
            )
            if head.device in TIMED_DEVICES
            else ", the first kernel that is not a memset, copy or reduction (this trace records no durations)"
        )
        + ". The calls' other kernels are counted below each table.",
        "",
    ]
    if any(_base(run, b) for b in head.builds):  # a series with bases
        out += [f"Routes judged on {b}: {why}." for b, why in rules(run).items()] + [""]
    out += [f"- **Error:** {m.text}" for m in mismatches(run)] + ([""] if mismatches(run) else [])
    for config in head.configs:
        out += [f"`{config}`", "", "| cell | " + " | ".join(head.builds) + " |", "|---" * (1 + len(head.builds)) + "|"]
        for key in head.cells:
            row = [
                f"same kernel as `{base}`"
                if config != base and same_kernel(run, b, config, key)
                else describe(seen(run, b, config, key), run)
                for b in head.builds
            ]
            out.append(f"| {key} | " + " | ".join(row) + " |")
        out.append("")
        rest = Counter(
            short(n) for key in head.cells for b in head.builds for n in others(run, seen(run, b, config, key))
        )
        if rest:
            ranked = sorted(rest.items(), key=lambda p: (-p[1], p[0]))
            out += [
                "Other kernels of these calls (not shown above): "
                + ", ".join(f"`{n}` in {plural(c, 'call')}" for n, c in ranked)
                + ".",
                "",
            ]
    return out


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
