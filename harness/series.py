"""Patch series: ``patches/<series>/series.toml`` and the operations check / apply / refresh / rebase.

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

Operations, all on the worktrees of :mod:`harness.upstream`:

- :func:`check_series` -- does the series apply at the base? Applied patch by patch to a
  temporary index (``git apply --cached``; 3-way when plain fails), so worktrees are untouched; a
  failing patch is split into its hunks and each file + hunk that fails is named.
- :func:`apply_series` -- ``git am --3way`` into ``patched``: one commit per patch, author,
  date and message from the patch headers.
- :func:`refresh_series` -- write ``patched``'s commits back as the series with
  ``git format-patch --zero-commit --no-signature -N --abbrev=12`` under a neutral git config
  (no volatile ``From <sha>``, git version or numbering); a patch whose content and headers did
  not change keeps its bytes, so a no-op refresh leaves no diff.
- :func:`rebase_series` -- ``git am --3way`` the series onto another base; success writes a new
  ``[[base]]`` variant; a conflict leaves the worktree mid-``am`` and names the files and the
  command to continue.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness import progress
from harness.bench.accuracy import ACCUMULATORS
from harness.configs import DEVICES, ROUTES
from harness.errors import HarnessError, SeriesError
from harness.evidence import Evidence, EvidenceError, route_problem
from harness.evidence import validate as validate_evidence
from harness.fsutil import atomic_write_text, inside
from harness.paths import slug
from harness.upstream import (
    Checkout,
    dirty_files,
    git_run,
)

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
#: format-patch options of refresh/rebase: stable bytes for the same commits (see module doc).
FORMAT_PATCH_ARGS = (
    "format-patch",
    "--zero-commit",
    "--no-signature",
    "-N",
    "--abbrev=12",
    "-M",
    "--no-cover-letter",
    "--no-thread",
    "--no-attach",
    "--encoding=UTF-8",
)
#: Environment that hides the user's global/system git config (format.signoff, format.headers ...).
NEUTRAL_GIT_CONFIG = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
#: Committer identity used only when git has none configured (the author always comes from the patch).
FALLBACK_COMMITTER = {"GIT_COMMITTER_NAME": "torch-patch-harness", "GIT_COMMITTER_EMAIL": "harness@localhost.invalid"}


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
    return Series(folder, data["name"], data["title"], data["upstream"], tuple(bases), related, evidence, pr)


def _load_evidence(where: str, data: dict) -> Evidence:
    """``[evidence]`` of a manifest, parsed (:func:`harness.evidence.validate`); the top-level ``env`` of an
    older manifest is read as ``[evidence] markers``, and where both are given they must agree.

    Raises:
        SeriesError: a malformed key, named; ``env`` and ``markers`` that name different markers.
    """
    env = _strings(where, "env", data.get("env", []))
    table = data.get("evidence", {})
    try:
        evidence = validate_evidence(table, env, data["name"])
    except EvidenceError as exc:
        raise SeriesError(f"{where}: {exc}", "fix that key (docs/new-series.md lists every [evidence] key)") from None
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
    """Append a ``[[base]]`` variant to series.toml (validated by re-loading before it is written)."""
    text = series.manifest.read_text(encoding="utf-8")
    lines = ["", "[[base]]", f"ref = {json.dumps(ref)}"]
    if commit:
        lines.append(f"commit = {json.dumps(commit)}")
    if directory != ref:
        lines.append(f"dir = {json.dumps(directory)}")
    lines.append(f"patches = {_toml_list(patches)}")
    if files is not None:
        lines.append(f"files = {_toml_list(files)}")
    if notes:
        lines.append(f"notes = {json.dumps(notes)}")
    _write_manifest(series, text.rstrip("\n") + "\n" + "\n".join(lines) + "\n")


def _write_manifest(series: Series, text: str) -> None:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - our own edit broke the file
        raise SeriesError(f"{shown(series.manifest)}: edit would not parse ({exc})", "edit it by hand") from None
    atomic_write_text(series.manifest, text)


# ------------------------------------------------------------------------------------------- pin
def check_pin(kind: str, commit: str, entry: Base) -> None:
    """Raise when a git upstream's base commit differs from the ``commit`` pinned in series.toml."""
    if entry.commit and kind == "git" and entry.commit != commit:
        raise SeriesError(
            f"base {entry.ref!r} is {commit} upstream but series.toml pins commit {entry.commit}",
            "the ref moved upstream: rebase the series onto it, or fix the pin",
        )
    if entry.commit and kind == "archive":
        progress.note(f"series: pinned commit of {entry.ref} not checked (archive upstream has its own import commit)")


# ------------------------------------------------------------------------------------------ check
@dataclass(frozen=True)
class PatchCheck:
    """Outcome of one patch in :func:`check_series`: ``status`` is ok, 3way, failed or not-checked."""

    patch: str
    status: str
    failures: tuple[str, ...] = ()


def _split_hunks(text: str) -> list[tuple[str, str, list[str]]]:
    """(file, file header, hunks) of each file section of a patch's diff."""
    sections = []
    for part in re.split(r"(?m)^(?=diff --git )", text)[1:]:
        part = re.split(r"(?m)^-- \n", part)[0]  # format-patch signature, if any
        match = re.match(r"diff --git a/(.*?) b/(.*)", part)
        name = match.group(2) if match else "?"
        pieces = re.split(r"(?m)^(?=@@ )", part)
        sections.append((name, pieces[0], pieces[1:]))
    return sections


_PATH_LINE = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.*)$", re.M)
#: git's own refusals of a path in a patch (not a context mismatch)
_GIT_PATH_REFUSAL = re.compile(r"^error: (invalid path .*|.*beyond a symbolic link.*|.*outside repository.*)$", re.M)


def paths_in_patch(text: str) -> list[str]:
    """Every file path a patch names (``---``/``+++`` headers, renames and copies), ``a/``/``b/`` stripped."""
    found = []
    for match in _PATH_LINE.finditer(text):
        line = match.group(0)
        name = match.group(1).split("\t")[0].strip()
        if name == "/dev/null" or not name:
            continue
        if line.startswith(("--- ", "+++ ")) and name[:2] in ("a/", "b/"):
            name = name[2:]
        if name not in found:
            found.append(name)
    return found


def check_patch_paths(root: Path, patch: Path) -> None:
    """Refuse a patch that names a path outside ``root`` (a worktree), before git reads or writes it.

    Raises:
        SeriesError: the patch and the path (see :func:`harness.fsutil.inside`).
    """
    text = patch.read_text(encoding="utf-8", errors="surrogateescape")
    for name in paths_in_patch(text):
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise SeriesError(
                f"{patch.name} names the path {name!r}, which leaves the source tree",
                "fix the patch: it may touch only files inside the upstream tree",
            )
        inside(root, name, f"{patch.name}: patched file")
        for parent in list(Path(name).parents)[:-1]:  # git's own rule, said before a 3-way merge hides it
            if (root / parent).is_symlink():
                raise SeriesError(
                    f"{patch.name}: affected file {name!r} is beyond a symbolic link ({parent})",
                    "fix the patch: it may touch only files inside the upstream tree, not through links",
                )


def _git_path_refusals(result) -> list[str]:
    """git's own reasons (invalid path, beyond a symbolic link) in a failed ``git apply``."""
    return [f"git refuses the path: {m.group(1)}" for m in _GIT_PATH_REFUSAL.finditer(result.err or "")]


def _failing_hunks(store: Path, env: dict[str, str], patch: Path, tmp: Path) -> list[str]:
    failures = []
    for name, header, hunks in _split_hunks(patch.read_text(encoding="utf-8", errors="surrogateescape")):
        if not hunks:
            probe = tmp / "probe.patch"
            probe.write_text(header, encoding="utf-8", errors="surrogateescape")
            result = git_run(store, "apply", "--cached", "--check", str(probe), env=env, check=False)
            if result.rc != 0:
                failures.append(f"{name}: {result.last_line().removeprefix('error: ')}")
            continue
        for number, hunk in enumerate(hunks, start=1):
            probe = tmp / "probe.patch"
            probe.write_text(header + hunk, encoding="utf-8", errors="surrogateescape")
            result = git_run(store, "apply", "--cached", "--check", "--recount", str(probe), env=env, check=False)
            if result.rc != 0:
                head = hunk.splitlines()[0]
                ranges, _, context = head.partition(" @@")
                shown = f"{ranges} @@" + (f" {context.strip()[:48]}" if context.strip() else "")
                failures.append(f"{name}: hunk #{number} `{shown}` does not apply")
    return failures


def check_series(series: Series, entry: Base, store: Path, commit: str) -> list[PatchCheck]:
    """Apply the series at ``commit`` to a temporary index (worktrees untouched) and report per patch.

    A patch that fails plain ``git apply`` but applies with ``--3way`` is status ``3way``; one that
    fails both is ``failed`` with one line per failing file + hunk; patches after a failure are
    ``not-checked``. When the base lists ``files``, a mismatch with the touched paths adds a failure.
    """
    results: list[PatchCheck] = []
    with tempfile.TemporaryDirectory(prefix="harness-check-") as tmp_name:
        tmp = Path(tmp_name)
        env = {"GIT_INDEX_FILE": str(tmp / "index"), **FALLBACK_COMMITTER}
        git_run(store, "read-tree", commit, env=env, error=SeriesError)
        failed = False
        for name, path in zip(entry.patches, series.patch_paths(entry)):
            if failed:
                results.append(PatchCheck(name, "not-checked"))
                continue
            if git_run(store, "apply", "--cached", str(path), env=env, check=False).rc == 0:
                results.append(PatchCheck(name, "ok"))
                continue
            saved = (tmp / "index").read_bytes()
            if git_run(store, "apply", "--cached", "--3way", str(path), env=env, check=False).rc == 0:
                results.append(PatchCheck(name, "3way"))
                continue
            (tmp / "index").write_bytes(saved)
            whole = git_run(store, "apply", "--cached", "--check", str(path), env=env, check=False)
            try:
                check_patch_paths(tmp / "tree", path)
                refusals = _git_path_refusals(whole)
            except HarnessError as exc:
                refusals = [exc.cause]
            failures = (
                refusals
                or _failing_hunks(store, env, path, tmp)
                or [git_run(store, "apply", "--cached", "--check", str(path), env=env, check=False).last_line()]
            )
            results.append(PatchCheck(name, "failed", tuple(failures)))
            failed = True
        if not failed and entry.files is not None:
            tree = git_run(store, "write-tree", env=env).out.strip()
            touched = git_run(store, "diff", "--name-only", "--no-renames", commit, tree).out.split()
            if sorted(touched) != sorted(entry.files):
                extra = sorted(set(touched) - set(entry.files))
                absent = sorted(set(entry.files) - set(touched))
                results.append(
                    PatchCheck(
                        "files",
                        "failed",
                        (
                            f"{shown(series.manifest)}: [[base]] #{entry.index} key 'files' does not match the series' "
                            f"diff (touched but not listed: {extra or 'none'}; listed but not touched: "
                            f"{absent or 'none'})",
                        ),
                    )
                )
    return results


# ------------------------------------------------------------------------------------------ apply
def _am_in_progress(worktree: Path) -> bool:
    gitdir = Path(git_run(worktree, "rev-parse", "--path-format=absolute", "--git-dir").out.strip())
    return (gitdir / "rebase-apply").is_dir()


def _committer_env(worktree: Path) -> dict[str, str]:
    has = git_run(worktree, "config", "user.email", check=False).rc == 0
    return {} if has else dict(FALLBACK_COMMITTER)


def _commits(worktree: Path, base_commit: str) -> list[str]:
    return git_run(worktree, "rev-list", "--reverse", f"{base_commit}..HEAD").out.split()


def _patch_id(worktree: Path, patch_file: Path) -> str:
    out = git_run(worktree, "patch-id", "--stable", stdin=patch_file).out.split()
    return out[0] if out else ""


def _commit_patch_ids(worktree: Path, commits: list[str], tmp: Path) -> list[str]:
    ids = []
    for sha in commits:
        diff = tmp / f"{sha}.diff"
        diff.write_text(
            git_run(worktree, "show", "--format=", "-M", sha).out + "\n", encoding="utf-8", errors="surrogateescape"
        )
        ids.append(_patch_id(worktree, diff))
    return ids


@dataclass(frozen=True)
class AmOutcome:
    """Result of ``git am``: ``ok``; else the patch that stopped, conflicted files and the next command."""

    ok: bool
    stopped_at: str = ""
    conflicts: tuple[str, ...] = ()
    reason: str = ""
    #: when no file got conflict markers (no 3-way possible): "file: hunk #n `@@ ... @@` does not apply"
    hunks: tuple[str, ...] = ()


def _am(worktree: Path, patches: list[Path], *, resume: bool = False) -> AmOutcome:
    env = _committer_env(worktree)
    # --keep-non-patch: strip only "[PATCH n/m]", keep upstream title tags such as "[MPS]"
    args = ["am", "--continue"] if resume else ["am", "--3way", "--keep-cr", "--keep-non-patch", *map(str, patches)]
    result = git_run(worktree, *args, env=env, check=False)
    if result.rc == 0:
        return AmOutcome(True)
    gitdir = Path(git_run(worktree, "rev-parse", "--path-format=absolute", "--git-dir").out.strip())
    current = ""
    stopped: Path | None = None
    apply_dir = gitdir / "rebase-apply"
    if (apply_dir / "next").is_file():
        number = int((apply_dir / "next").read_text().strip())
        stopped = patches[number - 1] if 0 < number <= len(patches) else None
        current = stopped.name if stopped else f"patch #{number}"
    refusals = _git_path_refusals(result)
    if refusals:  # not a conflict: nothing for the user to resolve, so the worktree is put back
        git_run(worktree, "am", "--abort", check=False)
        raise SeriesError(
            f"{current or 'a patch'}: {refusals[0].removeprefix('git refuses the path: ')}",
            "fix the patch: it may touch only files inside the upstream tree, not through links",
        )
    conflicts = tuple(git_run(worktree, "diff", "--name-only", "--diff-filter=U").out.split())
    hunks = tuple(_hunks_failing_at_head(worktree, stopped)) if stopped and not conflicts else ()
    return AmOutcome(False, current, conflicts, result.last_line(), hunks)


def _hunks_failing_at_head(worktree: Path, patch: Path) -> list[str]:
    """The file + hunk of ``patch`` that do not apply to ``worktree``'s HEAD (a temporary index; nothing moves)."""
    with tempfile.TemporaryDirectory(prefix="harness-hunks-") as tmp_name:
        tmp = Path(tmp_name)
        env = {"GIT_INDEX_FILE": str(tmp / "index")}
        git_run(worktree, "read-tree", "HEAD", env=env, error=SeriesError)
        return _failing_hunks(worktree, env, patch, tmp)


def conflict_lines(out: AmOutcome, worktree: Path, continue_cmd: list[str]) -> list[str]:
    """What to tell the user when ``git am`` stopped on a conflict: the files, the hunks without a
    3-way merge, and the commands to continue or give up."""
    files = ", ".join(out.conflicts) if out.conflicts else f"none marked ({out.reason})"
    lines = [f"conflict: {out.stopped_at or 'a patch'} does not apply in {worktree}; conflicted files: {files}"]
    lines += [f"conflict:   {line} (no 3-way merge: the patch names no blob this repository has)" for line in out.hunks]
    return lines + [
        f"resolve them, then `git -C {shlex.quote(str(worktree))} add <files>` and run:",
        "  " + shlex.join(continue_cmd),
        f"(or give up: `git -C {shlex.quote(str(worktree))} am --abort`)",
    ]


def apply_series(series: Series, entry: Base, co: Checkout, *, force: bool = False) -> AmOutcome | None:
    """``git am --3way`` the base's patches into ``co.patched``; one commit per patch.

    Returns None when the series is already applied (same patch-ids on the branch), else the
    :class:`AmOutcome` (not ok: a conflict left mid-``am`` for the user).

    Raises:
        SeriesError: ``patched`` has uncommitted changes, an ``am`` in progress, or other commits
            on top of the base (pass ``force`` to start over from the base; the old head is printed).
    """
    wt = co.patched
    if _am_in_progress(wt):
        raise SeriesError(
            f"a `git am` is in progress in {wt}",
            f"finish it (`git -C {wt} am --continue`) or drop it (`git -C {wt} am --abort`)",
        )
    dirty = dirty_files(wt)
    if dirty:
        raise SeriesError(
            f"patched worktree {wt} has uncommitted changes: {', '.join(dirty[:5])}",
            f"commit them and run refresh, or discard them (`git -C {wt} checkout -- .`)",
        )
    commits = _commits(wt, co.commit)
    if commits:
        with tempfile.TemporaryDirectory(prefix="harness-apply-") as tmp:
            have = _commit_patch_ids(wt, commits, Path(tmp))
        want = [_patch_id(wt, p) for p in series.patch_paths(entry)]
        if have == want:
            return None
        if not force:
            raise SeriesError(
                f"patched worktree {wt} has {len(commits)} commit(s) on {co.base} that differ from " f"the series",
                "save them with `refresh`, or pass --force to start over from the base",
            )
        head = git_run(wt, "rev-parse", "HEAD").out.strip()
        progress.note(
            f"apply: --force: resetting {co.branch} to {co.base} (old head {head}; `git branch keep {head}` "
            f"gets it back)"
        )
        git_run(wt, "reset", "--quiet", "--hard", co.commit)
    for patch in series.patch_paths(entry):
        check_patch_paths(wt, patch)
    return _am(wt, series.patch_paths(entry))


# ---------------------------------------------------------------------------------------- refresh
def _mailinfo(worktree: Path, patch: Path, tmp: Path) -> tuple[str, str]:
    msg, body = tmp / "msg", tmp / "body"
    info = git_run(
        worktree, "mailinfo", "--encoding=UTF-8", str(msg), str(body), stdin=patch, env=NEUTRAL_GIT_CONFIG, check=False
    )
    return info.out, msg.read_text(encoding="utf-8", errors="replace") if msg.exists() else ""


def _same_patch(worktree: Path, old: Path, new: Path, tmp: Path) -> bool:
    """True when two patch files carry the same change (patch-id) and the same author/date/subject/message."""
    if old.read_bytes() == new.read_bytes():
        return True
    if _patch_id(worktree, old) != _patch_id(worktree, new):
        return False
    return _mailinfo(worktree, old, tmp) == _mailinfo(worktree, new, tmp)


def write_patches(worktree: Path, base_commit: str, folder: Path, old_names: list[str]) -> tuple[list[str], int]:
    """Format ``base_commit..HEAD`` of ``worktree`` into ``folder``; unchanged patches keep their bytes.

    Returns:
        (new patch file names in order, number of files written or removed).

    Raises:
        SeriesError: no commits on top of the base.
    """
    commits = _commits(worktree, base_commit)
    if not commits:
        raise SeriesError(f"{worktree} has no commits on top of its base", "commit your change there first")
    folder.mkdir(parents=True, exist_ok=True)
    changed = 0
    with tempfile.TemporaryDirectory(prefix="harness-refresh-") as tmp_name:
        tmp = Path(tmp_name)
        out = tmp / "out"
        git_run(
            worktree,
            *FORMAT_PATCH_ARGS,
            "-o",
            str(out),
            f"{base_commit}..HEAD",
            env=NEUTRAL_GIT_CONFIG,
            error=SeriesError,
        )
        generated = sorted(out.iterdir())
        names = []
        for position, new in enumerate(generated):
            old_name = old_names[position] if position < len(old_names) else None
            old = inside(folder, old_name, "patch") if old_name else None
            if old is not None and old.is_file() and _same_patch(worktree, old, new, tmp):
                names.append(old_name)
                continue
            atomic_write_text(
                inside(folder, new.name, "patch"), new.read_text(encoding="utf-8", errors="surrogateescape")
            )
            names.append(new.name)
            changed += 1
    kept = {inside(folder, name, "patch") for name in names}  # resolved: "./0001-x.patch" is "0001-x.patch"
    for stale in dict.fromkeys(inside(folder, name, "patch") for name in old_names):
        if stale not in kept and stale.is_file():
            stale.unlink()
            changed += 1
    return names, changed


def refresh_series(series: Series, entry: Base, co: Checkout) -> int:
    """Write ``patched``'s commits back as the base's patches; update series.toml's list if names changed.

    Returns the number of patch files written or removed (0: no-op refresh, no diff).

    Raises:
        SeriesError: ``am`` in progress, uncommitted changes, or no commits on ``patched``.
    """
    wt = co.patched
    if _am_in_progress(wt):
        raise SeriesError(f"a `git am` is in progress in {wt}", f"finish it first (`git -C {wt} am --continue`)")
    dirty = dirty_files(wt)
    if dirty:
        raise SeriesError(
            f"patched worktree {wt} has uncommitted changes: {', '.join(dirty[:5])}",
            "commit them (refresh writes commits, not the working tree)",
        )
    folder = inside(series.path, entry.dir, f"{shown(series.manifest)}: [[base]] #{entry.index} key 'dir'")
    names, changed = write_patches(wt, co.commit, folder, list(entry.patches))
    if names != list(entry.patches):
        set_base_patches(series, entry, names)
    return changed


# ----------------------------------------------------------------------------------------- rebase
def _write_variant(series: Series, old: Base, co: Checkout) -> Base:
    directory = slug(co.base)
    folder = inside(series.path, directory, "rebase --onto folder")
    if folder.exists() and any(folder.iterdir()):
        raise SeriesError(f"{shown(folder)} already exists and is not empty", "move it away, then run again")
    names, _ = write_patches(co.patched, co.commit, folder, [])
    files = None
    if old.files is not None:
        files = git_run(co.patched, "diff", "--name-only", "--no-renames", co.commit, "HEAD").out.split()
    commit = co.commit if co.upstream.kind == "git" else None
    add_base(
        series, co.base, directory, names, commit=commit, files=files, notes=f"rebased from {old.ref} with 3-way merge"
    )
    return load_series(series.path).base(co.base)


def rebase_series(series: Series, old: Base, co: Checkout, *, resume: bool = False) -> AmOutcome:
    """Apply ``old``'s patches onto the base of ``co`` with ``git am --3way``; on success add a base variant.

    With ``resume`` the ``am`` stopped by a conflict is continued (after the user resolved it).

    Raises:
        SeriesError: the series already has that base, or ``patched`` is not at its base.
    """
    if any(b.ref == co.base for b in series.bases):
        raise SeriesError(
            f"{shown(series.manifest)}: already has a [[base]] with ref {co.base!r}",
            "use check/apply for it, or remove that [[base]] first",
        )
    wt = co.patched
    if resume:
        if _am_in_progress(wt):
            dirty_unmerged = git_run(wt, "diff", "--name-only", "--diff-filter=U").out.split()
            if dirty_unmerged:
                return AmOutcome(False, "", tuple(dirty_unmerged), "unresolved files")
            outcome = _am(wt, series.patch_paths(old), resume=True)
            if not outcome.ok:
                return outcome
    else:
        dirty = dirty_files(wt)
        if _am_in_progress(wt) or _commits(wt, co.commit) or dirty:
            what = f"uncommitted changes: {', '.join(dirty[:5])}" if dirty else "a stopped `git am` or commits"
            raise SeriesError(
                f"patched worktree {wt} is not clean at {co.base} ({what})",
                "pass --continue to finish a stopped rebase, or remove that worktree and run again",
            )
        outcome = _am(wt, series.patch_paths(old))
        if not outcome.ok:
            return outcome
    entry = _write_variant(series, old, co)
    progress.note(
        f"rebase: wrote [[base]] {entry.ref} with {len(entry.patches)} patch(es) in "
        f"{shown(series.path / entry.dir)}"
    )
    return AmOutcome(True)
