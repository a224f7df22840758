"""The patch series manifest: ``patches/<series>/series.toml`` loaded into :class:`Series` and its :class:`Base`
entries, and the edits the operations make to it (:mod:`harness.series` checks, applies, refreshes and rebases).

The manifest (the project's shared series contract): top-level ``name``, ``title``,
``upstream``, optional ``related``, ``[evidence]`` (parsed once into :class:`harness.evidence.Evidence`:
markers, configs, routing, contrasts, tests; ``env``, the top-level list of older manifests, is read as
``[evidence] markers``), and one or more ``[[base]]`` with
``ref``, optional ``commit`` (pinned 40-hex SHA), ``dir`` (default: the ref), ordered ``patches``
(``git format-patch`` files in ``patches/<series>/<dir>/``), optional ``files``, ``notes`` and
``[[base.read]]`` provenance (``path``, ``commit``, optional ``blob``: the file's git blob SHA when it was
read whole; ``repo``: where it was read, when not the upstream; ``applies``: whether the base's patch that
changes the file must apply to that version), and ``[base.accumulators.<path>]`` per kernel path the
series routes GEMMs to (``accumulator``: ``float32`` or ``input``, what that base's kernel sums in;
``source``: where in that base's upstream source it was read, file and commit), and ``[base.routes.<device>]``
(``config = { op = path }``, the shape of ``[evidence.<device>.routes]``: where that base's upstream code
sends each op under each config, on builds of that base; it replaces the series-wide routes for them,
:meth:`harness.evidence.Evidence.routes_of`). An optional ``[pr]`` table holds the pull request's text
(:mod:`harness.pr`): ``why`` (the problem the series solves), ``alternative`` (the nearest thing a user can
already do, markdown, read as "Why not <alternative>?") and ``over_alternative`` (what the series adds over
it). Unknown keys are errors; every error names the file and the key.

Paths stay inside the series folder: a manifest whose patch or folder is a link, or leaves the folder, is
refused (:func:`load_series`); the edits (:func:`set_base_patches`, :func:`add_base`) write series.toml only.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness import progress
from harness.bench import plugins
from harness.bench.accuracy import ACCUMULATORS
from harness.bench.ops import REGISTRY
from harness.bench.workloads import DTYPES, Workload
from harness.configs import DEVICES, ROUTES
from harness.errors import SeriesError
from harness.evidence import TEST_BUILDS, Evidence, EvidenceError, route_problem
from harness.evidence import validate as validate_evidence
from harness.fsutil import atomic_write_text, inside
from harness.paths import slug

#: Folder that holds the series when ``--series`` is a bare name.
PATCHES_DIR = Path("patches")
MANIFEST = "series.toml"
_TOP_KEYS = {
    "name": str,
    "title": str,
    "upstream": str,
    "related": list,
    "env": list,
    "base": list,
    "evidence": dict,
    "pr": dict,
}
_TOP_REQUIRED = ("name", "title", "upstream", "base")
_BASE_KEYS = {
    "ref": str,
    "commit": str,
    "dir": str,
    "patches": list,
    "files": list,
    "notes": str,
    "read": list,
    "accumulators": dict,
    "routes": dict,
}
_BASE_REQUIRED = ("ref", "patches")
_READ_KEYS = {"path": str, "commit": str, "blob": str, "repo": str, "applies": bool}
_ACCUMULATOR_KEYS = {"accumulator": str, "source": str}
#: ``[pr]``: the pull request's "why" paragraph and what the series adds over the nearest alternative
_PR_KEYS = {"why": str, "alternative": str, "over_alternative": str}
_SHA = re.compile(r"[0-9a-f]{40}")
#: an environment variable name as POSIX's portable character set allows one (IEEE Std 1003.1, Base
#: Definitions, 8.1 "Environment Variable Definition": letters, digits and _, not starting with a digit):
#: what a marker (``[evidence] markers``, top-level ``env``) must be
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAMES_REMEDY = "fix the name in series.toml (docs/new-series.md lists what each key may name)"


# ------------------------------------------------------------------------------------- manifest
@dataclass(frozen=True)
class Base:
    """One ``[[base]]`` of a series: the patches that apply at one upstream ref."""

    index: int
    ref: str
    dir: str
    patches: tuple[str, ...]
    commit: str | None = None
    files: tuple[str, ...] | None = None
    notes: str = ""
    read: tuple[dict, ...] = ()
    #: kernel path -> ``{"accumulator": "float32" | "input", "source": citation}`` (harness.bench.accuracy)
    accumulators: dict = field(default_factory=dict)
    #: device -> config -> op -> kernel path on this base's upstream code (``[base.routes.<device>]``)
    routes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Series:
    """A validated ``series.toml`` (see :func:`load_series`)."""

    path: Path
    name: str
    title: str
    upstream: str
    bases: tuple[Base, ...]
    related: tuple[str, ...] = ()
    #: ``[evidence]``, parsed and validated (its ``markers`` also from an older manifest's top-level ``env``)
    evidence: Evidence = field(default_factory=Evidence)
    #: ``[pr]``: ``why``, ``alternative`` and ``over_alternative``, the pull request's text (harness.pr)
    pr: dict = field(default_factory=dict)
    #: ``[evidence] workload``: the series' own workload module, loaded and its ops registered (None: none)
    workload: Workload | None = None

    @property
    def manifest(self) -> Path:
        """The ``series.toml`` file."""
        return self.path / MANIFEST

    def base(self, ref: str | None) -> Base:
        """The ``[[base]]`` of ``ref`` (the only one when ``ref`` is None).

        Raises:
            SeriesError: no such base, or ``ref`` is None and there are several.
        """
        refs = ", ".join(b.ref for b in self.bases)
        if ref is None:
            if len(self.bases) == 1:
                return self.bases[0]
            raise SeriesError(
                f"{shown(self.manifest)}: {len(self.bases)} [[base]] entries ({refs})", "pick one with --base REF"
            )
        for base in self.bases:
            if ref in (base.ref, base.dir, slug(base.ref)):
                return base
        raise SeriesError(
            f"{shown(self.manifest)}: unknown base {ref!r}: no [[base]] with that ref (bases: {refs})",
            "pass --base with one of those refs, or `rebase --onto` to add a base variant",
        )

    def patch_paths(self, base: Base) -> list[Path]:
        """The base's patch files, in series order (each one inside the base's folder: :func:`inside`)."""
        folder = inside(self.path, base.dir, f"{shown(self.manifest)}: [[base]] #{base.index} key 'dir'")
        return [
            inside(folder, name, f"{shown(self.manifest)}: [[base]] #{base.index} key 'patches':")
            for name in base.patches
        ]

    def hash_of(self, base: Base) -> str:
        """The series hash of ``base``: :func:`patches_hash` of its patch files (:func:`series_hash`)."""
        return patches_hash(self.patch_paths(base))


def patches_hash(patches: Iterable[Path]) -> str:
    """The series hash: sha256 (hex, 64 chars) over the patch files' bytes in series order; labels use ``[:8]``."""
    digest = hashlib.sha256()
    for path in patches:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def series_hash(series: Series, base: Base) -> str:
    """:func:`patches_hash` of the base's patches."""
    return series.hash_of(base)


def shown(path: Path) -> str:
    """``path`` relative to the current folder when it is inside it (for messages), else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def find_series(spec: str | Path) -> Path:
    """The series folder of ``--series``: a path (folder or its series.toml) or a name under ``patches/``.

    Raises:
        SeriesError: neither exists.
    """
    path = Path(spec)
    if path.name == MANIFEST and path.is_file():
        return path.parent
    if (path / MANIFEST).is_file():
        return path
    if (PATCHES_DIR / spec / MANIFEST).is_file():
        return PATCHES_DIR / spec
    raise SeriesError(
        f"series {str(spec)!r}: no {MANIFEST} at {path} nor at {PATCHES_DIR / spec}",
        f"pass --series as a folder under {PATCHES_DIR}/ or a path to a folder with {MANIFEST}",
    )


def _check_keys(where: str, table: dict, allowed: dict, required: tuple[str, ...], remedy: str) -> None:
    for key in table:
        if key not in allowed:
            raise SeriesError(f"{where}: unknown key {key!r}", f"allowed keys: {', '.join(allowed)}")
    for key in required:
        if key not in table:
            raise SeriesError(f"{where}: missing key {key!r}", remedy.format(key=key))
    for key, kind in allowed.items():
        if key not in table:
            continue
        value = table[key]
        if not isinstance(value, kind):
            raise SeriesError(
                f"{where}: key {key!r} must be a {kind.__name__}, not {type(value).__name__}",
                "see the manifest format in `harness.series`'s docstring",
            )
        if kind is str and not value.strip():
            raise SeriesError(f"{where}: key {key!r} is empty", "give it a value")
        if kind is str and "\0" in value:
            raise SeriesError(f"{where}: key {key!r} contains a NUL byte", "remove it")


def _strings(where: str, key: str, value: list) -> tuple[str, ...]:
    if not all(isinstance(item, str) and item for item in value):
        raise SeriesError(f"{where}: key {key!r} must be a list of non-empty strings", "quote each entry")
    if any("\0" in item for item in value):
        raise SeriesError(f"{where}: key {key!r} contains a NUL byte", "remove it")
    return tuple(value)


def _load_base(where: str, folder: Path, number: int, table: dict) -> Base:
    """One ``[[base]]`` table of ``series.toml``, checked (see :func:`load_series`).

    Raises:
        SeriesError: a missing or mistyped key, a bad SHA, a folder or patch file outside the series, a
            patch file absent.
    """
    ref_note = f" (ref {table['ref']!r})" if isinstance(table.get("ref"), str) else ""
    label = f"{where}: [[base]] #{number}{ref_note}"
    _check_keys(
        label,
        table,
        _BASE_KEYS,
        _BASE_REQUIRED,
        "add `{key} = ...` to that [[base]] (patches: ordered format-patch file names)",
    )
    if "commit" in table and not _SHA.fullmatch(table["commit"]):
        raise SeriesError(
            f"{label}: key 'commit' is not a 40-hex SHA: {table['commit']!r}",
            "pin the full commit SHA, or drop the key",
        )
    patches = _strings(label, "patches", table["patches"])
    if not patches:
        raise SeriesError(f"{label}: key 'patches' is empty", "list the patch files in order")
    directory = table.get("dir", table["ref"])
    if Path(directory).is_absolute() or ".." in Path(directory).parts:
        raise SeriesError(
            f"{label}: key 'dir' must be a folder inside {folder}: {directory!r}", "use a relative folder name"
        )
    inside(folder, directory, f"{label}: key 'dir'")
    seen: dict[Path, str] = {}
    for name in patches:
        if Path(name).is_absolute() or ".." in Path(name).parts or len(Path(name).parts) != 1:
            raise SeriesError(
                f"{label}: key 'patches': {name!r} is not a file name in {shown(folder / directory)}",
                "list bare patch file names (no folders, no '..', no absolute paths)",
            )
        path = inside(folder / directory, name, f"{label}: key 'patches':")
        if not path.is_file():
            raise SeriesError(
                f"{label}: key 'patches': patch file absent: {shown(folder / directory / name)}",
                "add the file, or remove it from 'patches'",
            )
        if path in seen:  # names compared resolved: "./0001-x.patch" is "0001-x.patch"
            raise SeriesError(
                f"{label}: key 'patches' lists {shown(path)} twice ({seen[path]!r} and {name!r})",
                "list each patch file once",
            )
        seen[path] = name
    reads = table.get("read", [])
    for item in reads:
        if not isinstance(item, dict):
            raise SeriesError(f"{label}: [[base.read]] must be tables", "use [[base.read]] path/commit")
        _check_keys(
            f"{label} [[base.read]]",
            item,
            _READ_KEYS,
            ("path", "commit"),
            "add `{key} = ...` to that [[base.read]]",
        )
    accumulators, routes = _accumulators(label, table.get("accumulators", {})), _routes(label, table.get("routes", {}))
    files = _strings(label, "files", table["files"]) if "files" in table else None
    return Base(
        number,
        table["ref"],
        directory,
        patches,
        table.get("commit"),
        files,
        table.get("notes", ""),
        tuple(reads),
        accumulators,
        routes,
    )


def _accumulators(label: str, accumulators: dict) -> dict:
    """A base's ``[base.accumulators.<path>]`` tables, checked: ``path`` a routed kernel path
    (:data:`harness.configs.ROUTES` but ``default``: a misspelt one would be ignored), ``accumulator``
    one of :data:`harness.bench.accuracy.ACCUMULATORS` and a ``source``.

    Raises:
        SeriesError: the first bad table, named.
    """
    routed = [r for r in ROUTES if r != "default"]
    for path, item in accumulators.items():
        where_acc = f"{label} [base.accumulators.{path}]"
        if path not in routed:
            raise SeriesError(
                f"{where_acc}: {path!r} is not a routed kernel path ({', '.join(routed)})",
                "name the path the routes send GEMMs to",
            )
        if not isinstance(item, dict):
            raise SeriesError(f"{where_acc} must be a table", "give it accumulator = ... and source = ...")
        _check_keys(where_acc, item, _ACCUMULATOR_KEYS, ("accumulator", "source"), "add `{key} = ...` to that table")
        if item["accumulator"] not in ACCUMULATORS:
            raise SeriesError(
                f"{where_acc}: accumulator {item['accumulator']!r} is not one of {', '.join(ACCUMULATORS)}",
                "name what that base's kernel sums in, read in its source",
            )
    return dict(accumulators)


def _routes(label: str, routes: dict) -> dict:
    """A base's ``[base.routes.<device>]`` tables, checked: a known device, config = { op = path } with
    every path one of :data:`harness.configs.ROUTES` (configs are checked against the device's profiles
    by :func:`load_series`).

    Raises:
        SeriesError: the first bad table, named.
    """
    for device, per_config in routes.items():
        where_routes = f"{label} [base.routes.{device}]"
        if device not in DEVICES:
            raise SeriesError(f"{where_routes}: unknown device {device!r}", f"use one of {', '.join(DEVICES)}")
        if not isinstance(per_config, dict):
            raise SeriesError(f"{where_routes} must be a table", 'give it config = { op = "path" } entries')
        for config, per_op in per_config.items():
            if not isinstance(per_op, dict) or not all(isinstance(v, str) for v in per_op.values()):
                raise SeriesError(
                    f"{where_routes} key {config!r} must be a table of op = path strings",
                    'write it as prefer_metal = { mm = "metal" }',
                )
            try:
                route_problem(f"{where_routes} key {config!r}", per_op)
            except EvidenceError as exc:
                raise SeriesError(str(exc), 'write it as prefer_metal = { mm = "metal" }') from None
    return {d: {c: dict(o) for c, o in t.items()} for d, t in routes.items()}


def _refuse_links(folder: Path) -> None:
    """No symbolic link anywhere inside the series folder (its contents, listed or not): refresh writes
    patch files by name, and a link to a sibling patch would carry one commit's text into the other.

    Raises:
        SeriesError: names the first link found and where it points.
    """
    for root, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            path = Path(root) / name
            if path.is_symlink():
                raise SeriesError(
                    f"{Path(shown(Path(root))) / name} is a symbolic link (to {os.readlink(path)}): a series folder "
                    "holds only its own "
                    "files (refresh would write through the link)",
                    "replace the link with a copy of the file or folder it points to, or remove it",
                )


def load_series(spec: str | Path) -> Series:
    """Load and validate ``series.toml``; every patch file named must exist.

    Raises:
        SeriesError: unreadable TOML, unknown/missing/mistyped key, name != folder name, bad SHA,
            duplicate base ref, two bases in one folder, a patch file absent or listed twice (names
            compared resolved), a symbolic link anywhere in the series folder. The line names the file
            and the offending key.
    """
    folder = find_series(spec).resolve()
    manifest = folder / MANIFEST
    where = shown(manifest)
    try:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SeriesError(f"{where}: not valid TOML ({exc})", "fix the syntax") from None
    _check_keys(where, data, _TOP_KEYS, _TOP_REQUIRED, "add `{key} = ...` at the top of the file")
    if data["name"] != folder.resolve().name:
        raise SeriesError(
            f"{where}: key 'name' is {data['name']!r} but the folder is {folder.resolve().name!r}", "make them equal"
        )
    related = _strings(where, "related", data.get("related", []))
    pr = data.get("pr", {})
    _check_keys(f"{where}: [pr]", pr, _PR_KEYS, (), "")
    evidence = _load_evidence(where, data)
    if not data["base"] or not all(isinstance(b, dict) for b in data["base"]):
        raise SeriesError(f"{where}: key 'base' must be one or more [[base]] tables", "add a [[base]] table")
    _refuse_links(folder)
    bases: list[Base] = []
    for number, table in enumerate(data["base"], start=1):
        base = _load_base(where, folder, number, table)
        label = f"{where}: [[base]] #{number} (ref {base.ref!r})"
        for device, per_config in base.routes.items():
            known = [c.name for c in evidence.profiles(device)]
            stray = [c for c in per_config if c not in known]
            if stray:
                raise SeriesError(
                    f"{label} [base.routes.{device}]: {stray[0]!r} is not a {device} config ({', '.join(known)})",
                    "name a generic config or one of [evidence.<device>.env]",
                )
        if any(b.ref == base.ref for b in bases):
            raise SeriesError(f"{label}: key 'ref': duplicate base ref {base.ref!r}", "keep one [[base]] per ref")
        same = [b for b in bases if (folder / b.dir).resolve() == (folder / base.dir).resolve()]
        if same:  # refresh of one would write into, and remove stale patches from, the other's folder
            raise SeriesError(
                f"{label}: key 'dir': {base.dir!r} is the folder of [[base]] #{same[0].index} ({same[0].dir!r})",
                "give each [[base]] its own folder",
            )
        bases.append(base)
    workload = _load_workload(where, folder, evidence.workload.get("file"))
    if workload:
        evidence = replace(evidence, workload={**evidence.workload, "path": workload.path})
    check_names(where, evidence, bases)
    return Series(folder, data["name"], data["title"], data["upstream"], tuple(bases), related, evidence, pr, workload)


def _load_workload(where: str, folder: Path, name: str | None) -> Workload | None:
    """``[evidence] workload``: the module file ``name`` inside ``folder``, loaded (:func:`harness.bench.plugins.load`)
    and its ops registered; None when the series declares none.

    Raises:
        SeriesError: the path leaves the series folder or is not a file there, or the module is refused.
    """
    if name is None:
        return None
    label = f"{where}: [evidence] key 'workload'"
    path = (folder / name).resolve()
    if Path(name).is_absolute() or not path.is_relative_to(folder):
        raise SeriesError(
            f"{label}: {name!r} is not a file of the series folder", 'write e.g. workload = "workload.py"'
        )
    if not path.is_file():
        raise SeriesError(f"{label}: {shown(path)} does not exist", "create it or remove the key (docs/new-series.md)")
    try:
        workload = plugins.load(path)
        plugins.register(workload)
    except ValueError as exc:  # WorkloadError, or a built-in name: one line
        raise SeriesError(f"{label}: {exc}", "fix the module (docs/new-series.md, 'Your own workload')") from None
    return workload


def nearest(name: str, valid: Iterable[str]) -> str:
    """``did you mean 'x'?`` for the valid name closest to ``name`` (:func:`difflib.get_close_matches`, its
    default cutoff 0.6), else ``valid: 'a', 'b'`` (every valid name)."""
    valid = list(valid)
    close = difflib.get_close_matches(name, valid, n=1)
    return f"did you mean {close[0]!r}?" if close else "valid: " + ", ".join(map(repr, valid))


def _exists(where: str, kind: str, name: str, valid: Iterable[str], what: str) -> None:
    valid = list(valid)
    if name not in valid:
        raise SeriesError(f"{where}: {kind} {name!r} is not {what} ({nearest(name, valid)})", _NAMES_REMEDY)


def check_markers(where: str, key: str, markers: Iterable[str]) -> None:
    """Every marker is an environment variable name (:data:`ENV_NAME`): a marker is the variable the patch
    adds, looked for in each build's libraries; ``A=B`` or ``A B`` would be found as text, not as a variable.

    Raises:
        SeriesError: the field (``key``) and the first bad marker.
    """
    for marker in markers:
        if not ENV_NAME.fullmatch(marker):
            raise SeriesError(
                f"{where}: {key}: {marker!r} is not an environment variable name "
                "(letters, digits and _, not starting with a digit)",
                "name the variable the patch adds, e.g. PYTORCH_MPS_GEMM_PREFER_FAST_MATH",
            )


def check_names(where: str, evidence: Evidence, bases: Iterable[Base]) -> None:
    """The manifest as a whole: every name it uses names something that exists. A device table's
    ``configs``, ``consistency``, ``routes``, ``patched_routes`` and ``about`` name configs of that device
    (:meth:`harness.evidence.Evidence.profiles`: generic and the series' own); every route names ops of
    :data:`harness.bench.ops.REGISTRY`, in ``[evidence.<device>]`` and in each base's ``[base.routes.<device>]``;
    a contrast's sides name a build of :data:`harness.evidence.TEST_BUILDS` and a config of any device the
    series has (a series' contrasts are not per device: a run on another device reports them as not
    measured), its ``ops`` ops of the registry and its ``dtypes`` of :data:`harness.bench.workloads.DTYPES`.
    A misspelt name would otherwise surface only after a whole ``compare``, as "not measured".

    Raises:
        SeriesError: the field, the name and the nearest valid name (:func:`nearest`), one line.
    """
    ops = list(REGISTRY)
    for device, table in evidence.device.items():
        known = [c.name for c in evidence.profiles(device)]
        what = f"a {device} config"
        for key in ("configs", "consistency"):
            for name in table.get(key, ()):
                _exists(f"{where}: [evidence.{device}] key {key!r}", "config", name, known, what)
        for key in ("routes", "patched_routes", "about"):
            for name, per_op in table.get(key, {}).items():
                _exists(f"{where}: [evidence.{device}.{key}]", "config", name, known, what)
                for op in per_op if key != "about" else ():
                    _exists(f"{where}: [evidence.{device}.{key}] key {name!r}", "op", op, ops, "an op")
    for base in bases:
        for device, per_config in base.routes.items():
            for name, per_op in per_config.items():
                label = f"{where}: [[base]] #{base.index} (ref {base.ref!r}) [base.routes.{device}] key {name!r}"
                for op in per_op:
                    _exists(label, "op", op, ops, "an op")
    configs = list(dict.fromkeys(c.name for device in DEVICES for c in evidence.profiles(device)))
    for i, contrast in enumerate(evidence.contrasts, start=1):
        label = f"{where}: [[evidence.contrast]] #{i}"
        for key, side in (("a", contrast.a), ("b", contrast.b)):
            _exists(f"{label} key {key!r}", "build", side.build, TEST_BUILDS, "a build")
            _exists(f"{label} key {key!r}", "config", side.config, configs, "a config of this series")
        for op in contrast.ops:
            _exists(f"{label} key 'ops'", "op", op, ops, "an op")
        for dtype in contrast.dtypes:
            _exists(f"{label} key 'dtypes'", "dtype", dtype, DTYPES, "a dtype")


def _load_evidence(where: str, data: dict) -> Evidence:
    """``[evidence]`` of a manifest, parsed (:func:`harness.evidence.validate`); the top-level ``env`` of an
    older manifest is read as ``[evidence] markers``, and where both are given they must agree.

    Raises:
        SeriesError: a malformed key, named; ``env`` and ``markers`` that name different markers.
    """
    env = _strings(where, "env", data.get("env", []))
    check_markers(where, "key 'env'", env)
    table = data.get("evidence", {})
    try:
        evidence = validate_evidence(table, env, data["name"])
    except EvidenceError as exc:
        raise SeriesError(f"{where}: {exc}", "fix that key (docs/new-series.md lists every [evidence] key)") from None
    check_markers(where, "[evidence] key 'markers'", evidence.markers)
    if env and set(env) != set(evidence.markers):
        raise SeriesError(
            f"{where}: top-level key 'env' {list(env)} and [evidence] key 'markers' {list(evidence.markers)} "
            "name different markers",
            "declare the markers once, as [evidence] markers (env is their older name)",
        )
    return evidence


# ------------------------------------------------------------------------------------- manifest edits
def _base_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of each ``[[base]]`` block (up to the next non-base.* header)."""
    headers = [
        (m.start(), m.group(1).strip()) for m in re.finditer(r"^[ \t]*\[\[?([^\]\n]+)\]\]?[ \t]*(?:#.*)?$", text, re.M)
    ]
    spans = []
    for i, (start, name) in enumerate(headers):
        if name != "base" or not text[start:].lstrip().startswith("[["):
            continue
        end = len(text)
        for later, later_name in headers[i + 1 :]:
            if not later_name.startswith("base."):
                end = later
                break
        spans.append((start, end))
    return spans


def _toml_list(items: list[str]) -> str:
    return "[\n" + "".join(f"    {json.dumps(item)},\n" for item in items) + "]"


def set_base_patches(series: Series, base: Base, patches: list[str]) -> None:
    """Rewrite the ``patches = [...]`` of one ``[[base]]`` in series.toml (comments elsewhere are kept).

    Raises:
        SeriesError: the block or its ``patches`` array cannot be located, or the result does not parse.
    """
    text = series.manifest.read_text(encoding="utf-8")
    start, end = _base_spans(text)[base.index - 1]
    block = text[start:end]
    match = re.search(r"^([ \t]*patches[ \t]*=[ \t]*)\[[^\]]*\]", block, re.M)
    if not match:
        raise SeriesError(
            f"{shown(series.manifest)}: [[base]] #{base.index}: cannot locate key 'patches' to update",
            f"set it by hand to {patches}",
        )
    block = block[: match.start()] + match.group(1) + _toml_list(patches) + block[match.end() :]
    _write_manifest(series, text[:start] + block + text[end:])


def add_base(
    series: Series,
    ref: str,
    directory: str,
    patches: list[str],
    *,
    commit: str | None,
    files: list[str] | None,
    notes: str,
) -> None:
    """Add a ``[[base]]`` variant to series.toml after the last ``[[base]]`` (before the comments that open the
    table after it, e.g. ``[evidence]``'s), so the bases stay together; the file is parsed before it is written."""
    text = series.manifest.read_text(encoding="utf-8")
    spans, cut = _base_spans(text), len(text)
    if spans and spans[-1][1] < len(text):  # a table follows the last base: insert above it and its comments
        kept = text[: spans[-1][1]].splitlines(keepends=True)
        while kept and (not kept[-1].strip() or kept[-1].lstrip().startswith("#")):
            kept.pop()
        cut = len("".join(kept))
    lines = ["", "[[base]]", f"ref = {json.dumps(ref)}"]
    lines += _base_lines(ref, directory, patches, commit=commit, files=files, notes=notes)
    _write_manifest(series, text[:cut].rstrip("\n") + "\n" + "\n".join(lines) + "\n" + text[cut:])


def _base_lines(
    ref: str, directory: str, patches: list[str], *, commit: str | None, files: list[str] | None, notes: str
) -> list[str]:
    """The keys of a new ``[[base]]`` after its ``ref`` (:func:`add_base`)."""
    lines = []
    if commit:
        lines.append(f"commit = {json.dumps(commit)}")
    if directory != ref:
        lines.append(f"dir = {json.dumps(directory)}")
    lines.append(f"patches = {_toml_list(patches)}")
    if files is not None:
        lines.append(f"files = {_toml_list(files)}")
    if notes:
        lines.append(f"notes = {json.dumps(notes)}")
    return lines


def _write_manifest(series: Series, text: str) -> None:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - our own edit broke the file
        raise SeriesError(f"{shown(series.manifest)}: edit would not parse ({exc})", "edit it by hand") from None
    atomic_write_text(series.manifest, text)


# ------------------------------------------------------------------------------------------- pin
def check_pin(kind: str, commit: str, entry: Base) -> None:
    """Raise when a git upstream's base commit differs from the ``commit`` pinned in series.toml. On an
    archive upstream (whose base is the archive's own import commit, :func:`harness.upstream.import_archive`)
    a pin that is that commit passes silently; another pin (a git upstream's commit, say) is noted, not
    checked: the archive's import commit can never be it."""
    if entry.commit and kind == "git" and entry.commit != commit:
        raise SeriesError(
            f"base {entry.ref!r} is {commit} upstream but series.toml pins commit {entry.commit}",
            "the ref moved upstream: rebase the series onto it, or fix the pin",
        )
    if entry.commit and kind == "archive" and entry.commit != commit:
        progress.note(
            f"series: pinned commit of {entry.ref} ({entry.commit[:12]}) not checked: the archive upstream's "
            f"{entry.ref} is its own import commit ({commit[:12]}), never a git upstream's"
        )
