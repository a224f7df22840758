"""The plan of one build: everything it needs, computed before anything runs (``--dry-run`` prints it).

The two builds of an A/B (``stock`` and ``patched``) share ONE build configuration: the same
platform environment, build type, job count, compiler launcher, build requirements and command.
Only the source differs (the series applied) and the local version label, so that pip can
never confuse the two wheels:

- stock:   ``X+stock.<base sha8>``
- patched: ``X+<series>.<series hash8>``

where ``X`` is the base's ``version.txt`` normalised to its release (``2.6.0a0`` -> ``2.6.0``)
and the label is written in PEP 440 normal form (``packaging``: ``-`` becomes ``.``), so the
wheel's file name, its metadata and ``module.__version__`` all carry the same string.
PyTorch reads the version from ``PYTORCH_BUILD_VERSION`` (and asserts ``PYTORCH_BUILD_NUMBER``
is set; a number > 1 appends ``.postN``): ``tools/generate_torch_version.py`` of v2.6.0,
``get_torch_version``. :func:`harness.build.convention.version_env` checks that the base reads that variable.

A plan is assembled in one place (:func:`_assemble`) from the platform, the options and what the base's
files decide (:class:`BaseFacts`): read from a source tree by :func:`plan_build`, or ``<...>``
placeholders by :func:`plan_without_source` (``--dry-run`` before a checkout).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness import macos
from harness.build.convention import (
    CMAKE_POLICY_ENV,
    CMAKE_POLICY_MINIMUM,
    base_release,
    build_requirements,
    cmake_policy_env,
    command_for,
    macos_deployment_target,
    pip_wheel_command,
    python_minor,
    recipe_command,
    recipe_requirements,
    required_free_bytes,
    version_env,
)
from harness.build.platforms import (
    GIB,
    MACOS_ARM64_FLOOR,
    find_launcher,
    macos_cross_compiling,
    parse_env_overrides,
    platform_env,
    platform_spec,
)
from harness.errors import BuildError, UsageError
from harness.manifest import patches_hash
from harness.paths import cache_dir
from harness.upstream import git_run
from harness.venvs import venv_python

KINDS = ("stock", "patched")


@dataclass(frozen=True)
class SeriesRef:
    """The part of a patch series a build needs.

    Attributes:
        name: series name (``patches/<name>/``), used in the patched local version label.
        patches: the base's patch files, in order (``git format-patch`` files).
        markers: strings the patched binary must contain (``series.toml`` ``env``).
        files: upstream paths the series touches (``[[base]] files``); decides where markers are checked.
    """

    name: str
    patches: tuple[Path, ...]
    markers: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    @property
    def hash(self) -> str:
        """The series hash (:func:`harness.manifest.patches_hash`) of :attr:`patches`."""
        return patches_hash(self.patches)


def _hex_segment(digest: str) -> str:
    """First 8 hex digits as a local-label segment. An all-digit prefix with a leading zero would
    lose the zero in PEP 440 normal form (numeric segments are integers), so it gets git's ``g``
    prefix (``01234567`` -> ``g01234567``); every other prefix is kept as is."""
    head = digest[:8].lower()
    return f"g{head}" if head.isdigit() and head.startswith("0") else head


def local_version(
    release: str,
    kind: str,
    *,
    base_sha: str | None = None,
    series: SeriesRef | None = None,
    series_hash: str | None = None,
) -> str:
    """The version with its local label, in PEP 440 normal form.

    stock: ``<release>+stock.<base_sha[:8]>``; patched: ``<release>+<series.name>.<series hash[:8]>``
    (``-`` in the series name becomes ``.``, as pip would normalise it; see :func:`_hex_segment`
    for the one case where the 8 hex digits get a ``g`` prefix).

    Raises:
        BuildError: the result is not a valid PEP 440 version with a local label.
    """
    if kind == "stock":
        if not base_sha:
            raise BuildError("a stock label needs the base commit SHA", "build from a git worktree of the base")
        raw = f"{release}+stock.{_hex_segment(base_sha)}"
    elif kind == "patched":
        if series is None:
            raise BuildError("a patched build needs a patch series", "pass --series NAME")
        raw = f"{release}+{series.name}.{_hex_segment(series_hash or series.hash)}"
    else:
        raise UsageError(f"unknown kind {kind!r}", "choose stock or patched")
    try:
        version = Version(raw)
    except InvalidVersion:
        raise BuildError(
            f"{raw!r} is not a valid PEP 440 version", "rename the series to letters, digits and '-'"
        ) from None
    if not version.local:
        raise BuildError(f"{raw!r} has no local version label", "report this as a harness bug")
    return str(version)


@dataclass(frozen=True)
class BuildPlan:
    """Everything one build needs, computed before anything runs (printed by ``--dry-run``).

    Attributes:
        source_dir: the tree that is built (stock worktree, patched worktree, or the stock tree
            with the series applied for ``incremental``).
        platform, kind, build_type, jobs: the configuration.
        base_sha: the base commit (40 hex) or None when the source is not a git worktree.
        series: the patch series (patched builds) or None.
        version: version with local label, PEP 440 normal form.
        env: the variables set for the build (platform + version + launcher + ``--env``), not os.environ.
        requirements: build requirements installed into the build venv.
        command: the build command, ``{python}`` standing for the build venv's interpreter.
        dist_dir: where the wheel and its manifest go.
        incremental: build in ``source_dir`` (the stock tree) with the series applied, reusing its build tree.
        min_free_bytes: refuse to start below this much free disk (:func:`required_free_bytes`).
        notes: provenance lines (deployment target source, launcher).
        recipe: the name of upstream's macOS wheel build it follows (:data:`harness.macos.RECIPES`), or None.
    """

    source_dir: Path
    platform: str
    kind: str
    build_type: str
    jobs: int
    base_sha: str | None
    series: SeriesRef | None
    version: str
    env: dict[str, str]
    requirements: tuple[str, ...]
    command: tuple[str, ...]
    dist_dir: Path
    incremental: bool = False
    min_free_bytes: int = 0
    notes: tuple[str, ...] = ()
    free_bytes_source: str = "estimate"
    recipe: str | None = None

    def inputs(self, toolchain: Mapping[str, str]) -> dict:
        """The inputs that decide the wheel (compared to skip identical rebuilds)."""
        return {
            "source_dir": str(self.source_dir),
            "base_sha": self.base_sha,
            "kind": self.kind,
            "series": None if self.series is None else {"name": self.series.name, "hash": self.series.hash},
            "platform": self.platform,
            "build_type": self.build_type,
            "version": self.version,
            "env": dict(sorted(self.env.items())),
            "requirements": list(self.requirements),
            "command": list(self.command),
            "incremental": self.incremental,
            "toolchain": dict(toolchain),
        }

    def command_in(self, dist_dir: Path) -> tuple[str, ...]:
        """:attr:`command` writing its wheel to ``dist_dir`` instead (:func:`command_for`)."""
        recipe = macos.RECIPES.get(self.recipe) if self.recipe else None
        return command_for(self.source_dir, "{python}", dist_dir, recipe)

    def describe(self) -> str:
        """Multi-line text for ``--dry-run``: environment and command, exactly as run."""
        lines = [
            f"# {self.kind} build, platform {self.platform}, build type {self.build_type}"
            + (" (incremental, in the stock tree)" if self.incremental else ""),
            f"# source: {self.source_dir}",
            f"# base commit: {self.base_sha or 'unknown'}",
        ]
        if self.series is not None:
            lines.append(f"# series: {self.series.name} {self.series.hash[:8]} ({len(self.series.patches)} patches)")
        lines.append(f"# version: {self.version}")
        lines += [f"# {note}" for note in self.notes]
        lines.append(f"# build venv requirements: {shlex.join(self.requirements) or '(none)'}")
        lines += [f"{key}={shlex.quote(value)}" for key, value in sorted(self.env.items())]
        python = str(venv_python(build_venv_path(self.requirements)))
        lines.append(shlex.join([python if part == "{python}" else part for part in self.command]))
        return "\n".join(lines)


def git_head(source_dir: Path) -> str | None:
    """The commit SHA checked out in ``source_dir`` (40 hex), or None when it is not a git worktree."""
    if not (Path(source_dir) / ".git").exists():
        return None
    result = git_run(source_dir, "rev-parse", "HEAD", check=False)
    return result.out.strip() if result.rc == 0 else None


@dataclass(frozen=True)
class BaseFacts:
    """What a plan takes from the base's files (:mod:`harness.build.convention`), or the ``<...>``
    placeholders that stand for them before a checkout.

    Attributes:
        source_dir: the tree (None: no source yet).
        release: ``version.txt``'s release.
        target: ``MACOSX_DEPLOYMENT_TARGET`` and where it comes from (one line).
        recipe: upstream's macOS wheel build of the base (:func:`harness.macos.recipe_for`), or None.
        policy: the CMake-4 variable to set (or {}) and why (:func:`harness.build.convention.cmake_policy_env`).
        requirements: the build venv's requirements.
        command: the wheel command, ``{python}`` standing for the build venv's interpreter.
    """

    source_dir: Path | None
    release: str
    target: tuple[str, str]
    recipe: macos.WheelRecipe | None
    policy: tuple[dict[str, str], str]
    requirements: tuple[str, ...]
    command: tuple[str, ...]


def base_facts(source_dir: Path, platform: str, dist_dir: Path) -> BaseFacts:
    """What ``source_dir``'s own files decide for a ``platform`` build writing to ``dist_dir``.

    Raises:
        UsageError: unknown platform.
        BuildError: no version.txt, no build convention, no pins of upstream's recipe for this Python.
    """
    release = base_release(source_dir)
    recipe = macos.recipe_for(release, source_dir) if platform_spec(platform).macos else None
    return BaseFacts(
        source_dir,
        release,
        macos_deployment_target(source_dir),
        recipe,
        cmake_policy_env(source_dir),
        recipe_requirements(recipe, source_dir) if recipe else build_requirements(source_dir),
        command_for(source_dir, "{python}", dist_dir, recipe),
    )


#: the interpreter a plan without a source names (no build venv can be named before its requirements are known)
_PLACEHOLDER_PYTHON = "<build venv>/bin/python"


def placeholder_facts(platform: str, base: str | None, dist_dir: Path) -> BaseFacts:
    """:class:`BaseFacts` before a checkout: upstream's macOS recipe of ``base`` where one is declared
    (its deployment target from its wheel tag, its requirement files and pins), else ``<...>`` placeholders."""
    recipe = macos.recipe_for(base) if base and platform_spec(platform).macos else None
    policy_note = f"{CMAKE_POLICY_MINIMUM} is added unless the base's CMake files set it (CMake 4)"
    if recipe is None:
        target = (MACOS_ARM64_FLOOR, "the base's own value raised to the arm64 floor 11.0")
        requirements: tuple[str, ...] = ("<pyproject.toml [build-system] requires + requirements.txt>",)
        command = pip_wheel_command(_PLACEHOLDER_PYTHON, "<source>", dist_dir)
    else:
        target = (
            ".".join(recipe.wheel_tag.split("_")[1:3]),
            f"upstream's {recipe.wheel_tag} wheels; the base's files decide",
        )
        requirements = (*(f"<{f}>" for f in recipe.requirement_files), *(recipe.pins_for(python_minor()) or ()))
        command = recipe_command(recipe, _PLACEHOLDER_PYTHON, dist_dir)
    return BaseFacts(None, "<version.txt release>", target, recipe, ({}, policy_note), requirements, command)


@dataclass(frozen=True)
class _Options:
    """The build options a plan is assembled from (besides the base's files)."""

    platform: str
    kind: str
    jobs: int | None
    build_type: str
    launcher: str | None


def _check_kind(kind: str, incremental: bool) -> None:
    if kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}", "choose stock or patched")
    if incremental and kind != "patched":
        raise UsageError("--incremental applies to patched builds only", "drop --incremental for --kind stock")


def plan_build(
    source_dir: Path,
    platform: str,
    *,
    kind: str = "stock",
    series: SeriesRef | None = None,
    jobs: int | None = None,
    env_overrides: Mapping[str, str] | Iterable[str] = (),
    build_type: str = "Release",
    dist_dir: Path = Path("dist"),
    base_sha: str | None = None,
    incremental: bool = False,
    launcher: str | None | bool = True,
) -> BuildPlan:
    """Compute a build plan (no side effects beyond reading files).

    Args:
        source_dir: root of the tree to build (has version.txt, pyproject.toml/setup.py).
        platform: a :data:`~harness.build.platforms.REGISTRY` name.
        kind: ``stock`` or ``patched`` (patched needs ``series``).
        jobs: ``MAX_JOBS``; default the CPU count.
        env_overrides: ``KEY=VALUE`` strings or a mapping; applied last, over everything.
        base_sha: the base commit; default the HEAD of ``source_dir`` (a patched worktree's HEAD is
            the series' last commit, so pass the base's SHA there).
        incremental: patched only: ``source_dir`` is the already-built stock tree.
        launcher: compiler cache program; True = detect (:func:`~harness.build.platforms.find_launcher`),
            None/False = none.

    Raises:
        UsageError: bad platform/build type/jobs/--env; incremental for a stock build.
        BuildError: the source lacks version.txt, a build convention or the version variable.
    """
    source_dir = Path(source_dir).resolve()
    dist_dir = Path(dist_dir).resolve()
    _check_kind(kind, incremental)
    overrides = dict(env_overrides) if isinstance(env_overrides, Mapping) else parse_env_overrides(env_overrides)
    facts = base_facts(source_dir, platform, dist_dir)
    base_sha = base_sha or git_head(source_dir)
    version = local_version(facts.release, kind, base_sha=base_sha, series=series)
    options = _Options(platform, kind, jobs, build_type, find_launcher() if launcher is True else launcher or None)
    return _assemble(facts, options, version, base_sha, series, overrides, dist_dir, incremental=incremental)


def plan_without_source(
    platform: str,
    kind: str,
    *,
    jobs: int | None = None,
    build_type: str = "Release",
    workdir: Path | str = "work",
    dist_dir: Path = Path("dist"),
    overrides: Mapping[str, str] | None = None,
    series: SeriesRef | None = None,
    series_name: str | None = None,
    base: str | None = None,
) -> BuildPlan:
    """``--dry-run`` with no worktree at hand: the plan :func:`plan_build` would make, with ``<...>`` for
    what only the base's files decide (release, base SHA, requirements; :func:`placeholder_facts`).
    ``series``: the loaded series (its real label), else ``series_name`` names the label's first part."""
    _check_kind(kind, False)
    dist_dir = Path(dist_dir).resolve()
    facts = placeholder_facts(platform, base, dist_dir)
    if kind == "stock":
        label = "stock.<base sha8>"
    elif series is not None:
        label = local_version("0", "patched", series=series).split("+", 1)[1]
    else:
        label = (re.sub(r"[-_]", ".", series_name) if series_name else "<series>") + ".<series hash8>"
    first = (
        f"no worktree of {base or '<base>'} in {workdir} yet: values in <> come from the base's files "
        "(run checkout first)"
    )
    options = _Options(platform, kind, jobs, build_type, find_launcher())
    version = f"{facts.release}+{label}"
    return _assemble(facts, options, version, None, series, dict(overrides or {}), dist_dir, first=first)


def _assemble(
    facts: BaseFacts,
    options: _Options,
    version: str,
    base_sha: str | None,
    series: SeriesRef | None,
    overrides: Mapping[str, str],
    dist_dir: Path,
    *,
    incremental: bool = False,
    first: str | None = None,
) -> BuildPlan:
    """The one assembly of a :class:`BuildPlan`: platform variables, upstream's recipe flags, the CMake-4
    variable, the version variables, then ``overrides`` over everything; and the notes that say where
    each value came from."""
    platform = options.platform
    env = platform_env(
        platform,
        jobs=options.jobs or os.cpu_count() or 1,
        build_type=options.build_type,
        macos_deployment_target=facts.target[0],
        launcher=options.launcher,
        cross_compile=macos_cross_compiling(),
    )
    if facts.recipe is not None:  # upstream's macOS wheel flags of this base (harness.macos)
        env.update(facts.recipe.env)
    env.update(facts.policy[0])
    env.update(version_env(facts.source_dir, version))
    env.update(overrides)
    jobs = int(env["MAX_JOBS"]) if env.get("MAX_JOBS", "").isdigit() else options.jobs
    min_free, free_source = required_free_bytes(facts.source_dir, platform)
    return BuildPlan(
        source_dir=facts.source_dir or Path("<source>"),
        platform=platform,
        kind=options.kind,
        build_type=env.get("CMAKE_BUILD_TYPE", options.build_type),
        jobs=jobs or os.cpu_count() or 1,
        base_sha=base_sha,
        series=series,
        version=version,
        env=env,
        requirements=facts.requirements,
        command=facts.command,
        dist_dir=dist_dir,
        incremental=incremental,
        min_free_bytes=min_free,
        notes=tuple(_notes(facts, options, env, (min_free, free_source), first)),
        free_bytes_source=free_source,
        recipe=facts.recipe.name if facts.recipe else None,
    )


def _notes(
    facts: BaseFacts, options: _Options, env: Mapping[str, str], free: tuple[int, str], first: str | None
) -> list[str]:
    """The ``--dry-run`` provenance lines of a plan: launcher, deployment target, CMake 4, upstream's
    recipe (:func:`recipe_notes`) and the free disk it needs."""
    notes = [first] if first else []
    launcher = options.launcher
    notes.append(
        f"compiler launcher: {launcher}" if launcher else "compiler launcher: none (install ccache to speed rebuilds)"
    )
    if platform_spec(options.platform).macos:
        notes.append(f"MACOSX_DEPLOYMENT_TARGET: {facts.target[1]}")
    notes.append(f"{CMAKE_POLICY_ENV}: {facts.policy[1]}")
    notes += recipe_notes(facts.recipe, env, facts.source_dir)
    notes.append(f"free disk needed: {free[0] / GIB:.1f} GiB ({free[1]})")
    return notes


def recipe_notes(recipe: macos.WheelRecipe | None, env: Mapping[str, str], source_dir: Path | None) -> list[str]:
    """``--dry-run`` lines about upstream's macOS wheel build of the base: which recipe, the host tools
    it installs, where the base's own scripts disagree with the declaration, and which variables of this
    build differ from upstream's (``--build-env``)."""
    if recipe is None:
        return []
    notes = [f"upstream wheel build: {recipe.name}, {recipe.command} ({recipe.citation})"]
    notes += [f"host tool: {tool}" for tool in recipe.host_tools]
    if source_dir is not None:
        notes += [
            f"the base's scripts disagree with the {recipe.name} declaration: {d}"
            for d in macos.recipe_drift(recipe, source_dir)
        ]
    differ = macos.declared_differ(env, recipe)
    if differ:
        notes.append("flags differ from the released wheel's: " + ", ".join(differ))
    reference = macos.release_reference(recipe)
    if reference is not None:
        wheel, nearest = reference
        released = macos.released_differ(env, wheel, nearest=nearest)
        what = f"{wheel.wheel}{', nearest release' if nearest else ''}"
        notes.append(
            f"flags against the released wheel's build settings ({what}): " + ("; ".join(released) or "they agree")
        )
    return notes


def shared_configuration(stock: BuildPlan, patched: BuildPlan) -> dict[str, tuple[str | None, str | None]]:
    """Environment variables on which two plans differ (stock vs patched should differ only in the
    version variable): ``{key: (stock value, patched value)}``."""
    keys = set(stock.env) | set(patched.env)
    return {k: (stock.env.get(k), patched.env.get(k)) for k in sorted(keys) if stock.env.get(k) != patched.env.get(k)}


def build_venv_path(requirements: Sequence[str]) -> Path:
    """Where the build venv for ``requirements`` lives: ``<cache>/build-venvs/py3X-<hash12>``
    (hash over this Python's version and the requirements, in order)."""
    key = hashlib.sha256("\n".join([sys.version, *requirements]).encode()).hexdigest()[:12]
    return cache_dir() / "build-venvs" / f"py{sys.version_info.major}{sys.version_info.minor}-{key}"
