"""Wheel builds of a base and of base + patch series: one configuration, two labels, verified.

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
``get_torch_version``. :func:`version_env` checks that the base reads that variable.

Pipeline of one build (:func:`build_wheel`): preflight (submodules, compiler, CMake, free disk)
-> dedicated build virtual environment with the base's build requirements (``pyproject.toml``
``[build-system] requires`` + ``requirements.txt``) -> the base's own build command (PEP 517:
``python -m pip wheel . --no-build-isolation --no-deps -v``; in-tree, so the CMake build
directory survives for ``--incremental``) -> the full log to a file -> a build manifest JSON
beside the wheel. A build whose inputs equal an existing manifest's is skipped. A build interrupted
midway (Ctrl-C, a kill) resumes when run again: the CMake build directory is in-tree and kept, so
only the translation units not finished are compiled.

:func:`verify_wheel` installs a wheel into a fresh virtual environment and checks that it imports,
that its version carries the label, that MPS is built (macOS), and that its compiled libraries
contain (patched) or lack (stock) the series' marker strings.

Everything here uses the standard library, ``packaging``, and git through
:func:`harness.upstream.git_run`. Commands are argument lists, never shell strings.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import platform as _platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import children, macos, progress
from harness import series as series_mod
from harness import upstream as upstream_mod
from harness.errors import BuildError, HarnessError, UsageError
from harness.fsutil import atomic_write_json, exclusive_lock, inside, open_write, sha256_file
from harness.numbers import Bound, number
from harness.paths import cache_dir, slug
from harness.series import patches_hash
from harness.upstream import git_run
from harness.upstream import missing_submodules as upstream_missing
from harness.venvs import PIP_INSTALL_S, pip_command, venv_python

KINDS = ("stock", "patched")
BUILD_TYPES = ("Release", "RelWithDebInfo", "Debug", "MinSizeRel")
#: --jobs: parallel compile jobs (MAX_JOBS); 0 would silently mean "the CPU count"
JOBS = Bound(1, 4096, integer=True, unit="compile jobs")

#: Apple-silicon floor: macOS 11.0 is the first release that runs on arm64, and PyTorch's own
#: arm64 wheels are tagged ``macosx_11_0_arm64`` (``.ci/wheel/build_wheel.sh``, ``mac_version``).
MACOS_ARM64_FLOOR = "11.0"

#: Default ``TORCH_CUDA_ARCH_LIST`` (our choice, override with ``--build-env``): compute capabilities
#: 8.0 (A100), 8.6 (RTX 30xx/A10), 8.9 (L4/RTX 40xx), 9.0 (H100/H200). PyTorch's release wheels
#: list more (back to 5.0) at several times the compile time.
DEFAULT_CUDA_ARCH_LIST = "8.0;8.6;8.9;9.0"

#: Version variable the base must read (PyTorch: ``tools/generate_torch_version.py``).
VERSION_ENV = "PYTORCH_BUILD_VERSION"
BUILD_NUMBER_ENV = "PYTORCH_BUILD_NUMBER"

#: Free-disk estimates (bytes) a PyTorch build tree + wheel needs, by platform. Our estimate, NOT
#: measured by this project (no full PyTorch build runs on its CI): a v2.6 ``build/`` directory of
#: ~10 GB (CPU, Release) and ~30 GB (CUDA, 4 archs), plus headroom for the wheel, the build venv
#: and the compiler cache. :data:`FREE_GIB_ENV` overrides it.
GIB = 1 << 30


@dataclass(frozen=True)
class Platform:
    """One build platform: everything the build, the preflight, the verification and ``doctor`` know
    of it. Adding a platform is one :data:`REGISTRY` entry (plus its test).

    Attributes:
        name: ``--platform`` value.
        env: fixed build variables (``USE_*``; PyTorch's ``setup.py`` header lists them).
        languages: CMake languages beyond C and CXX that get the compiler launcher.
        disk_estimate: free bytes a PyTorch build tree + wheel needs (our estimate, see below).
        compiles: the source kinds it compiles (:func:`source_kind`: ``common``, ``mps``, ``cuda``);
            decides where the series' markers can be checked.
        arch_list: ``(variable, default)`` of the GPU architecture list, or None.
        macos: the macOS arm64 rules: ``ARCHFLAGS``, ``MACOSX_DEPLOYMENT_TARGET`` (raised to
            :data:`MACOS_ARM64_FLOOR`), ``CMAKE_OSX_ARCHITECTURES`` when cross-compiling, the Metal
            toolchain check, and ``torch.backends.mps.is_built()`` in verification.
        wheel_tag: the platform tag of its wheels (PEP 425), ``<floor>`` standing for the deployment target.
        install: remedy text per tool (``compiler``, ``cmake``, ``cmake-upgrade``) on this platform.
    """

    name: str
    env: Mapping[str, str]
    languages: tuple[str, ...] = ()
    disk_estimate: int = 20 * (1 << 30)
    compiles: frozenset[str] = frozenset({"common"})
    arch_list: tuple[str, str] | None = None
    macos: bool = False
    wheel_tag: str = "linux_x86_64"
    install: Mapping[str, str] = field(default_factory=lambda: dict(LINUX_INSTALL))


LINUX_INSTALL = {
    "compiler": "install one: `apt-get install -y build-essential` (Debian/Ubuntu) or `dnf install gcc-c++` (Fedora)",
    "cmake": "`apt-get install -y cmake`",
    "cmake-upgrade": "a newer cmake from your package manager",
}
MACOS_INSTALL = {
    "compiler": "install the Xcode command line tools: `xcode-select --install`",
    "cmake": "`brew install cmake`",
    "cmake-upgrade": "`brew upgrade cmake`",
}

#: The build platforms. Free-disk estimates are ours, NOT measured by this project (no full PyTorch
#: build runs on its CI): a v2.6 ``build/`` directory of ~10 GB (CPU, Release) and ~30 GB (CUDA, 4
#: archs), plus headroom for the wheel, the build venv and the compiler cache. :data:`FREE_GIB_ENV`
#: overrides them. macos-arm64 follows ``.ci/wheel/mac/`` and ``.ci/pytorch/macos-build.sh`` (see
#: :func:`platform_env`).
REGISTRY: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform(
            "macos-arm64",
            {"USE_MPS": "1", "USE_CUDA": "0", "USE_ROCM": "0"},
            ("OBJC", "OBJCXX"),
            20 * GIB,
            frozenset({"common", "mps"}),
            macos=True,
            wheel_tag="macosx_<floor>_arm64",
            install=MACOS_INSTALL,
        ),
        Platform("linux-cpu", {"USE_CUDA": "0", "USE_MPS": "0", "USE_ROCM": "0"}, (), 20 * GIB),
        Platform(
            "linux-cuda",
            {"USE_CUDA": "1", "USE_MPS": "0", "USE_ROCM": "0"},
            ("CUDA",),
            50 * GIB,
            frozenset({"common", "cuda"}),
            arch_list=("TORCH_CUDA_ARCH_LIST", DEFAULT_CUDA_ARCH_LIST),
        ),
    )
}
PLATFORMS = tuple(REGISTRY)


def platform_spec(name: str) -> Platform:
    """The :class:`Platform` called ``name``.

    Raises:
        UsageError: no such platform (one line naming the known ones).
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown platform {name!r}", f"choose one of: {', '.join(REGISTRY)}") from None


#: For other bases: this many times the source tree's size, at least 512 MiB.
OTHER_DISK_FACTOR = 20
OTHER_DISK_MIN = 512 << 20
#: GiB of free disk a build needs, overriding :func:`disk_estimate` (for a user who measured their
#: own build, and for tests that provoke the "disk nearly full" refusal with a real free-space check).
FREE_GIB_ENV = "TORCH_PATCH_HARNESS_BUILD_FREE_GIB"
#: the range of $TORCH_PATCH_HARNESS_BUILD_FREE_GIB (GiB: up to an exbibyte, which int() of bytes holds)
FREE_GIB_BOUND = Bound(0, 10**9, unit="GiB")

#: Lines of the log shown on failure.
TAIL_LINES = 40

#: A compile step in a CMake-generated build's output (Ninja ``[3/9] Building CXX object x.o``
#: or Makefiles ``[ 50%] Building CXX object x.o``).
_COMPILE_LINE = re.compile(r"Building (?:C|CXX|OBJC|OBJCXX|CUDA|HIP) object (\S+)")
#: Cause-line patterns, most specific first: compiler diagnostics, CMake, ninja/make, Python, pip.
_CAUSE_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r"(fatal )?error:",
        r"CMake Error",
        r"^FAILED:|\*\*\* \[",
        r"^\w*(Error|Exception)\b",
        r"^error:|^ERROR:",
    )
)
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------------------------
# Series reference (what a build needs to know of a patch series)


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
        """The series hash (:func:`harness.series.patches_hash`) of :attr:`patches`."""
        return patches_hash(self.patches)


# --------------------------------------------------------------------------------------------
# Pure parts: platform environments, overrides, labels


def parse_env_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` -> dict, later keys win.

    Raises:
        UsageError: an item without ``=`` or with a key that is not an environment variable name.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _ENV_KEY.match(key):
            raise UsageError(
                f"malformed --build-env {item!r}", "write --build-env KEY=VALUE, KEY a shell variable name"
            )
        out[key] = value
    return out


def platform_env(
    platform: str,
    *,
    jobs: int,
    build_type: str = "Release",
    macos_deployment_target: str = MACOS_ARM64_FLOOR,
    cuda_arch_list: str | None = None,
    launcher: str | None = None,
    cross_compile: bool = False,
) -> dict[str, str]:
    """The build environment variables of one platform (a pure function).

    Variables follow PyTorch's build (``setup.py`` header; ``tools/setup_helpers/cmake.py`` passes
    every ``BUILD_*``, ``USE_*`` and ``CMAKE_*`` variable to CMake as ``-D``; ``MAX_JOBS`` caps the
    compile jobs; ``CMAKE_BUILD_TYPE`` wins over ``DEBUG``/``REL_WITH_DEB_INFO``).

    Args:
        platform: a :data:`REGISTRY` name.
        jobs: parallel compile jobs (``MAX_JOBS``), >= 1.
        build_type: CMake build type, one of :data:`BUILD_TYPES`.
        macos_deployment_target: ``MACOSX_DEPLOYMENT_TARGET`` (macOS only), see :func:`macos_deployment_target`.
        cuda_arch_list: the platform's GPU architecture list (``TORCH_CUDA_ARCH_LIST`` on linux-cuda;
            default :attr:`Platform.arch_list`'s).
        launcher: compiler cache program (``ccache``/``sccache``) for ``CMAKE_<LANG>_COMPILER_LAUNCHER``.
        cross_compile: macos-arm64 only: the build host is not arm64 (:func:`macos_cross_compiling`).

    macos-arm64 sets ``ARCHFLAGS=-arch arm64`` (upstream's wheel build does so for every macOS arm64
    wheel: ``.ci/wheel/mac/build_wheel.py`` at pytorch/pytorch 97ddf012, ``env.setdefault("ARCHFLAGS",
    "-arch arm64")``) and ``CMAKE_OSX_ARCHITECTURES=arm64`` ONLY when cross-compiling, as upstream CI
    does (``.ci/pytorch/macos-build.sh`` at 15470b7f: ``cross_compile_arm64`` when ``uname -m`` is not
    arm64, ``compile_arm64`` without it otherwise). On a native arm64 host that variable would make
    v2.6.0 (Debian 2.6.0+dfsg source) take the cross-compiling branch: its ``CMakeLists.txt`` (lines 788-820) sets
    ``CROSS_COMPILING_MACOSX`` whenever ``CMAKE_OSX_ARCHITECTURES`` matches ``^(x86_64|arm64)$`` and
    first builds a universal host ``protoc`` (``scripts/build_host_protoc.sh``), and its ``setup.py``
    ("Cross-compile for M1") adds ``-arch``/``-isysroot`` flags.

    Raises:
        UsageError: unknown platform or build type, jobs outside :data:`JOBS`.
    """
    spec = platform_spec(platform)
    if build_type not in BUILD_TYPES:
        raise UsageError(f"unknown build type {build_type!r}", f"choose one of: {', '.join(BUILD_TYPES)}")
    number(jobs, "--jobs", JOBS)
    env = {"MAX_JOBS": str(jobs), "CMAKE_BUILD_TYPE": build_type, "BUILD_TEST": "0", **spec.env}
    if spec.macos:
        env.update(ARCHFLAGS="-arch arm64", MACOSX_DEPLOYMENT_TARGET=macos_deployment_target)
        if cross_compile:
            env["CMAKE_OSX_ARCHITECTURES"] = "arm64"
    if spec.arch_list is not None:
        variable, default = spec.arch_list
        env[variable] = cuda_arch_list or default
    if launcher:
        env.update({f"CMAKE_{lang}_COMPILER_LAUNCHER": launcher for lang in ("C", "CXX", *spec.languages)})
    return env


def host_platform() -> str:
    """The platform of this machine: ``macos-arm64`` on Apple silicon, else ``linux-cpu``.

    ``linux-cuda`` is never guessed; ask for it with ``--platform linux-cuda``.
    """
    if sys.platform == "darwin" and _platform.machine() == "arm64":
        return "macos-arm64"
    return "linux-cpu"


def macos_cross_compiling() -> bool:
    """Whether a macos-arm64 build here is a cross-compile: a Mac whose machine is not arm64 (an Intel
    Mac, or an x86 Python under Rosetta, which is what ``uname -m`` reports there too). Off a Mac, where
    only ``--dry-run`` can describe a macOS build, the native arm64 build is described."""
    return sys.platform == "darwin" and _platform.machine() != "arm64"


def find_launcher() -> str | None:
    """The compiler cache on PATH: ``ccache`` first, then ``sccache``; None when neither is installed."""
    for name in ("ccache", "sccache"):
        if shutil.which(name):
            return name
    return None


def base_release(source_dir: Path) -> str:
    """``version.txt`` of the base normalised to its release (``2.6.0a0`` -> ``2.6.0``).

    Raises:
        BuildError: version.txt missing or not a PEP 440 version.
    """
    from packaging.version import InvalidVersion, Version

    path = Path(source_dir) / "version.txt"
    try:
        return Version(path.read_text().strip()).base_version
    except OSError:
        raise BuildError(f"{path} is missing", "point --source/--upstream at the base's source root") from None
    except InvalidVersion:
        raise BuildError(f"{path} is not a PEP 440 version", "check the base's version.txt") from None


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
    from packaging.version import InvalidVersion, Version

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


def version_env(source_dir: Path | None, version: str) -> dict[str, str]:
    """The variables through which the base takes its build version.

    The base must read :data:`VERSION_ENV` (PyTorch: ``tools/generate_torch_version.py``); it
    asserts :data:`BUILD_NUMBER_ENV` is set, and a build number > 1 would append ``.postN``,
    so it is ``0`` (as PyTorch's own ``OVERRIDE_PACKAGE_VERSION`` path does).

    Raises:
        BuildError: the base's setup.py / tools/*.py never mention :data:`VERSION_ENV`.
    """
    if source_dir is not None:
        root = Path(source_dir)
        candidates = [root / "setup.py", *sorted((root / "tools").glob("*.py"))]
        if not any(p.is_file() and VERSION_ENV in p.read_text(errors="replace") for p in candidates):
            raise BuildError(
                f"{root} does not read {VERSION_ENV} (setup.py, tools/*.py)",
                "the local version label cannot be set; build a base that takes its version from that variable",
            )
    return {VERSION_ENV: version, BUILD_NUMBER_ENV: "0"}


#: ``MACOSX_DEPLOYMENT_TARGET=14.0`` (shell), ``"MACOSX_DEPLOYMENT_TARGET": "14.0"`` (a Python dict
#: entry, upstream's ``.ci/wheel/mac/build_env_setup.py``) or ``CMAKE_OSX_DEPLOYMENT_TARGET "14.0"`` (CMake)
_DEPLOYMENT_RE = re.compile(
    r"(?:MACOSX_DEPLOYMENT_TARGET[\"']?\s*[=:]\s*[\"']?|CMAKE_OSX_DEPLOYMENT_TARGET\s+\"?)(\d+(?:\.\d+)*)"
)


def macos_deployment_target(source_dir: Path | None) -> tuple[str, str]:
    """``MACOSX_DEPLOYMENT_TARGET`` for an arm64 build of this base, and where it came from.

    Reads the base's wheel-build files (``.ci/wheel/build_wheel.sh``, ``.ci/wheel/mac/*.py``,
    ``setup.py``, ``CMakeLists.txt``, ``cmake/*.cmake`` except iOS) for a deployment target, takes the
    highest, and raises it to :data:`MACOS_ARM64_FLOOR`. PyTorch v2.6's ``.ci/wheel/build_wheel.sh``
    exports 10.15 (and tags arm64 wheels 11.0); on main the macOS wheel build moved to
    ``.ci/wheel/mac/``, whose ``build_env_setup.py`` holds the value in a dict, ``MACOS_BUILD_ENV =
    {..., "MACOSX_DEPLOYMENT_TARGET": "14.0", ...}`` (pytorch/pytorch 29832279), exported by
    ``.ci/wheel/mac/build.sh``. The Debian v2.6.0 tree has no ``.ci/`` and sets none, which gives the floor.

    Returns:
        (version string, one-line provenance).
    """
    from packaging.version import Version

    found: list[tuple[str, str]] = []
    if source_dir is not None:
        root = Path(source_dir)
        files = [root / ".ci/wheel/build_wheel.sh", *sorted((root / ".ci/wheel/mac").glob("*.py"))]
        files += [root / "setup.py", root / "CMakeLists.txt"]
        files += [p for p in sorted((root / "cmake").glob("*.cmake")) if "ios" not in p.name.lower()]
        for path in files:
            if not path.is_file():
                continue
            for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if line.lstrip().startswith("#"):
                    continue
                match = _DEPLOYMENT_RE.search(line)
                if match:
                    found.append((match.group(1), f"{path.relative_to(root)}:{lineno}"))
    if not found:
        return MACOS_ARM64_FLOOR, "base sets no deployment target; arm64 floor 11.0"
    value, where = max(found, key=lambda item: Version(item[0]))
    if Version(value) < Version(MACOS_ARM64_FLOOR):
        return MACOS_ARM64_FLOOR, f"base sets {value} ({where}); raised to the arm64 floor 11.0"
    return value, f"base sets {value} ({where})"


#: The policy version CMake >= 4 is told to assume for projects that declare an older one.
CMAKE_POLICY_MINIMUM = "3.5"
CMAKE_POLICY_ENV = "CMAKE_POLICY_VERSION_MINIMUM"


def _own_cmake_files(root: Path) -> list[Path]:
    """The base's own CMake files: the top-level ``CMakeLists.txt`` and ``cmake/**/*.cmake`` (not third_party)."""
    return [p for p in (root / "CMakeLists.txt", *sorted((root / "cmake").rglob("*.cmake"))) if p.is_file()]


def cmake_policy_env(source_dir: Path | None) -> tuple[dict[str, str], str]:
    """``CMAKE_POLICY_VERSION_MINIMUM=3.5`` for a CMake base that does not handle CMake 4 itself, and why.

    CMake 4.0 removed compatibility with policy versions below 3.5: a ``cmake_minimum_required``
    below 3.5 is an error unless ``CMAKE_POLICY_VERSION_MINIMUM`` says otherwise. PyTorch v2.6.0's
    submodules (protobuf first) declare such versions, so v2.6.0 fails at configure under the
    ``cmake`` its build requirements install today (pytorch/pytorch issues 150149, 150167, and 150328:
    "PyTorch 2.6 is lately not buildable anymore"). Upstream fixed it for 2.7 by setting the variable
    in its own CMake files around those ``add_subdirectory`` calls (PR 150203, cherry-picked to
    release/2.7 as PR 150460), and rejected pinning ``cmake<4`` (PR 150201).

    Rule: a base whose top-level ``CMakeLists.txt`` or ``cmake/**/*.cmake`` mentions
    ``CMAKE_POLICY_VERSION_MINIMUM`` handles CMake 4 itself (nothing is set); any other base with a
    ``CMakeLists.txt`` gets ``CMAKE_POLICY_VERSION_MINIMUM=3.5`` in its build environment. PyTorch's
    ``tools/setup_helpers/cmake.py`` passes every ``CMAKE_*`` variable to CMake as ``-D`` (v2.6.0,
    ``generate``). It changes only projects that declare a policy version below 3.5 (CMake's
    documentation of the variable), so CMake 3.x ignores it and the build's own 3.18 floor is untouched.
    The Debian v2.6.0 tree mentions the variable nowhere. ``--env CMAKE_POLICY_VERSION_MINIMUM=...``
    overrides it.

    Returns:
        ({variable: value} or {}, one-line provenance).
    """
    if source_dir is None:
        return {}, "no source"
    root = Path(source_dir)
    files = _own_cmake_files(root)
    if not files:
        return {}, "not a CMake base"
    for path in files:
        if CMAKE_POLICY_ENV in path.read_text(errors="replace"):
            return {}, f"the base sets it itself ({path.relative_to(root)}): CMake 4 is handled"
    return (
        {CMAKE_POLICY_ENV: CMAKE_POLICY_MINIMUM},
        f"set to {CMAKE_POLICY_MINIMUM}: the base's CMake files do not set it, and CMake >= 4 refuses submodules "
        "that declare a policy version below 3.5 (pytorch/pytorch issue 150149)",
    )


def source_kind(path: str) -> str:
    """Which builds compile the upstream file ``path``: ``mps`` (Objective-C(++) ``.mm``/``.m``,
    ``.metal``, ``/mps/``), ``cuda`` (``.cu``/``.cuh``, ``/cuda/``) or ``common`` (every build)."""
    lower = path.lower()
    if lower.endswith((".mm", ".m", ".metal")) or "/mps/" in lower:
        return "mps"
    if lower.endswith((".cu", ".cuh")) or "/cuda/" in lower:
        return "cuda"
    return "common"


def compiles_on(path: str, platform: str) -> bool:
    """Whether ``platform``'s build compiles the upstream file ``path`` (so its markers can be checked):
    its :func:`source_kind` is in the platform's ``compiles``.

    Raises:
        UsageError: unknown platform.
    """
    return source_kind(path) in platform_spec(platform).compiles


# --------------------------------------------------------------------------------------------
# Reading the base's build convention


def build_requirements(source_dir: Path) -> tuple[str, ...]:
    """The base's build requirements: ``pyproject.toml`` ``[build-system] requires`` then
    ``requirements.txt`` (comments and blank lines dropped; environment markers kept), deduplicated.

    Raises:
        BuildError: pyproject.toml cannot be parsed.
    """
    root = Path(source_dir)
    reqs: list[str] = []
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise BuildError(f"{pyproject}: {exc}", "fix the base's pyproject.toml") from None
        reqs += list(data.get("build-system", {}).get("requires", []))
    requirements = root / "requirements.txt"
    if requirements.is_file():
        for line in requirements.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                reqs.append(line)
    seen: dict[str, None] = {}
    for req in reqs:
        seen.setdefault(req, None)
    return tuple(seen)


def pip_wheel_command(python: str, source: str, dist_dir: Path) -> tuple[str, ...]:
    """The PEP 517 build of ``source`` through pip (see :func:`build_command`)."""
    return (python, "-m", "pip", "wheel", source, "--no-build-isolation", "--no-deps", "-v", "-w", str(dist_dir))


def build_command(source_dir: Path, python: str, dist_dir: Path) -> tuple[str, ...]:
    """The base's own wheel-build command.

    A ``pyproject.toml`` with ``[build-system]`` (PyTorch v2.6: setuptools' legacy backend) is
    built by PEP 517 through pip, without build isolation (the build venv already holds the
    requirements) and in-tree (pip >= 21.3), so the CMake build directory persists between
    builds: ``python -m pip wheel <src> --no-build-isolation --no-deps -v -w <dist>``. A base with
    only ``setup.py`` gets ``python setup.py bdist_wheel -d <dist>`` (PyTorch's ``.ci/wheel`` form).

    Raises:
        BuildError: the source has neither.
    """
    root = Path(source_dir)
    if (root / "pyproject.toml").is_file() and "build-system" in tomllib.loads((root / "pyproject.toml").read_text()):
        return pip_wheel_command(python, str(root), dist_dir)
    if (root / "setup.py").is_file():
        return (python, "setup.py", "bdist_wheel", "-d", str(dist_dir))
    raise BuildError(
        f"{root} has neither pyproject.toml [build-system] nor setup.py", "point at the base's source root"
    )


def recipe_command(recipe: macos.WheelRecipe, python: str, dist_dir: Path) -> tuple[str, ...]:
    """The wheel command of upstream's macOS build of a base (:class:`harness.macos.WheelRecipe`):
    ``python setup.py bdist_wheel -d <dist>`` (v2.6's ``.ci/wheel/build_wheel.sh``: setup.py runs
    ``build_deps`` once, where ``pip wheel`` of v2.6 runs it twice) or ``python -m build --wheel
    --no-isolation --outdir <dist>`` (main's ``.ci/wheel/mac/build_wheel.py``)."""
    if recipe.command == "bdist_wheel":
        return (python, "setup.py", "bdist_wheel", "-d", str(dist_dir))
    return (python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist_dir))


def _requirement_lines(path: Path) -> list[str]:
    if not path.is_file():
        return []
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(errors="replace").splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def _python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def recipe_requirements(recipe: macos.WheelRecipe, source_dir: Path, python: str | None = None) -> tuple[str, ...]:
    """What upstream's macOS wheel build of the base installs: its requirement files (in the recipe's
    order) then the scripts' pins for this Python (``major.minor``; :meth:`~harness.macos.WheelRecipe.pins_for`).

    Raises:
        BuildError: the scripts name no pins for this Python (upstream does not build that wheel).
    """
    python = python or _python()
    pins = recipe.pins_for(python)
    if pins is None:
        known = ", ".join(k for k in recipe.pins if k != "*")
        raise BuildError(
            f"upstream's {recipe.name} macOS wheel build has no pins for Python {python} ({recipe.citation})",
            f"run the harness with one of Python {known}",
        )
    reqs = [line for rel in recipe.requirement_files for line in _requirement_lines(Path(source_dir) / rel)]
    return tuple(dict.fromkeys([*reqs, *pins]))


# --------------------------------------------------------------------------------------------
# Preflight


def missing_submodules(source_dir: Path) -> list[str]:
    """Submodules the source lacks (:func:`harness.upstream.missing_submodules`: ``.gitmodules``, or
    PyTorch's default list for a tree without one, like the Debian tarball)."""

    return list(upstream_missing(Path(source_dir)))


def required_free_bytes(source_dir: Path | None, platform: str) -> tuple[int, str]:
    """Free bytes a build needs and where the number comes from: ``$TORCH_PATCH_HARNESS_BUILD_FREE_GIB``
    (:data:`FREE_GIB_ENV`) when set, else :func:`disk_estimate` of ``source_dir``, else (no source yet:
    ``doctor`` without ``--source``) the platform's PyTorch estimate.

    Raises:
        UsageError: the variable is not a number of GiB in :data:`FREE_GIB_BOUND` (named with the range).
    """
    text = os.environ.get(FREE_GIB_ENV)
    if text is not None:  # harness.numbers' one rule: NaN, inf, 1e400 and negatives refused in one line
        gib = number(text, f"${FREE_GIB_ENV}", FREE_GIB_BOUND)
        return int(gib * GIB), f"set by {FREE_GIB_ENV}"
    if source_dir is None:
        return platform_spec(platform).disk_estimate, "the PyTorch estimate, harness.build.REGISTRY"
    root = Path(source_dir)
    pytorch = (root / "aten").is_dir() and (root / "torch").is_dir()
    return disk_estimate(root, platform), (
        "the PyTorch estimate, harness.build.REGISTRY" if pytorch else f"{OTHER_DISK_FACTOR}x the source tree's size"
    )


def disk_estimate(source_dir: Path, platform: str) -> int:
    """Free bytes a build of this source needs (see :attr:`Platform.disk_estimate`, :data:`OTHER_DISK_FACTOR`)."""
    root = Path(source_dir)
    if (root / "aten").is_dir() and (root / "torch").is_dir():
        return platform_spec(platform).disk_estimate
    size = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", "build")]
        for name in filenames:
            try:
                size += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return max(OTHER_DISK_MIN, OTHER_DISK_FACTOR * size)


def _release_hint(source_dir: Path) -> str:
    try:
        release = base_release(source_dir)
    except BuildError:
        release = "X.Y.Z"
    return (
        f"get a complete source: `git clone --recursive --branch v{release} https://github.com/pytorch/pytorch` "
        f"or the release tarball pytorch-v{release}.tar.gz from https://github.com/pytorch/pytorch/releases "
        f"(it includes the submodules), then pass it as --upstream"
    )


def preflight_source(source_dir: Path) -> None:
    """Refuse a source without its submodules, before anything is installed or compiled.

    Raises:
        BuildError: one line naming the missing submodules and how to get a complete source.
    """
    missing = missing_submodules(source_dir)
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise BuildError(
            f"{source_dir} lacks its git submodules ({shown}); it cannot be built", _release_hint(source_dir)
        )


def _requires_cmake(requirements: Sequence[str]) -> bool:
    from packaging.requirements import InvalidRequirement, Requirement

    for text in requirements:
        try:
            if Requirement(text).name.lower() == "cmake":
                return True
        except InvalidRequirement:
            continue
    return False


@dataclass(frozen=True)
class Check:
    """One toolchain check: ``item``, whether it passed, a one-line ``detail``, and the error a build's
    preflight raises for it (None when it passed or does not stop a build)."""

    item: str
    ok: bool
    detail: str
    error: BuildError | None = None


_CMAKE_MIN_RE = re.compile(r"^\s*cmake_minimum_required\s*\(\s*VERSION\s+(\d+(?:\.\d+)*)", re.IGNORECASE | re.MULTILINE)
_CMAKE_VERSION_RE = re.compile(r"cmake version (\d+(?:\.\d+)*)")


def cmake_required(source_dir: Path) -> str | None:
    """The CMake version the base asks for: ``cmake_minimum_required(VERSION X ...)`` of its top-level
    ``CMakeLists.txt`` (v2.6.0: 3.18), or None when it has none."""
    path = Path(source_dir) / "CMakeLists.txt"
    match = _CMAKE_MIN_RE.search(path.read_text(errors="replace")) if path.is_file() else None
    return match.group(1) if match else None


#: seconds a toolchain probe (``c++ --version``, ``cmake --version``, ``xcrun metal --version``) may take
TOOL_PROBE_S = 120.0


def _first_line(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Exit status and first line of stdout (else the last of stderr) of ``cmd``; (-1, reason) when it cannot
    run or takes over :data:`TOOL_PROBE_S` (the reason names the command and the deadline)."""
    try:
        proc = children.run(list(cmd), what=f"`{' '.join(map(str, cmd[:3]))}`", deadline=TOOL_PROBE_S, env=env)
    except HarnessError as exc:
        return -1, exc.cause
    lines = proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines()[-1:] or ["no output"]
    return proc.returncode, lines[0].strip()


def check_compiler(platform: str, path: str, cxx: str | None = None) -> Check:
    """A C++ compiler on ``path``: ``cxx`` (``$CXX``) when given, else ``c++``, ``g++`` or ``clang++``."""
    names = [cxx] if cxx else ["c++", "g++", "clang++"]
    found = next((exe for exe in (shutil.which(n, path=path) for n in names) if exe), None)
    if found:
        return Check("compiler", True, found)
    remedy = platform_spec(platform).install["compiler"]
    error = BuildError(f"no C++ compiler found ({cxx or 'c++, g++, clang++'} not on PATH)", remedy)
    return Check("compiler", False, error.line(), error)


def check_cmake(platform: str, path: str, source_dir: Path | None = None, *, venv_installs: bool = False) -> Check:
    """CMake on ``path``, and (with ``source_dir``) its version against the base's
    ``cmake_minimum_required`` (:func:`cmake_required`) and what CMake 4 means for the base
    (:func:`cmake_policy_env`).

    ``venv_installs``: the base's build requirements install CMake into the build venv, and the build
    uses that one (the newest on PyPI), so one missing from or too old on ``path`` is no failure. A
    version that cannot be read is not held against the build.
    """
    from packaging.version import InvalidVersion, Version

    exe = shutil.which("cmake", path=path)
    if exe is None and not venv_installs:
        error = BuildError(
            "cmake not found on PATH or in the build environment",
            "`python -m pip install cmake`, or " + platform_spec(platform).install["cmake"],
        )
        return Check("cmake", False, error.line(), error)
    version = None
    if exe is not None:
        rc, first = _first_line([exe, "--version"])
        match = _CMAKE_VERSION_RE.search(first) if rc == 0 else None
        version = match.group(1) if match else None
    required = cmake_required(source_dir) if source_dir is not None else None
    try:
        too_old = bool(version and required and Version(version) < Version(required))
        cmake4 = bool(version and Version(version) >= Version("4"))
    except InvalidVersion:
        too_old = cmake4 = False
    if too_old and not venv_installs:
        error = BuildError(
            f"cmake {version} ({exe}) is older than the {required} this base requires "
            "(cmake_minimum_required in its CMakeLists.txt)",
            f"`python -m pip install 'cmake>={required}'`, or " + platform_spec(platform).install["cmake-upgrade"],
        )
        return Check("cmake", False, error.line(), error)
    detail = f"{exe}: {version or 'version unknown'}" if exe else "not on PATH"
    if source_dir is not None:
        detail += f" (the base requires {required or 'no minimum'}{'; this one is older' if too_old else ''})"
    if venv_installs:
        detail += "; the build uses the build venv's own (the base's build requirements list cmake)"
    if source_dir is not None and (cmake4 or venv_installs):
        policy, _ = cmake_policy_env(source_dir)
        detail += (
            f"; CMake 4: the build sets {CMAKE_POLICY_ENV}={CMAKE_POLICY_MINIMUM}"
            if policy
            else "; CMake 4: the base handles it"
        )
    return Check("cmake", True, detail)


def check_disk(platform: str, where: Path, need: int, need_source: str) -> Check:
    """At least ``need`` bytes free at ``where`` (``shutil.disk_usage``)."""
    free = shutil.disk_usage(where).free
    if free >= need:
        return Check(
            "disk",
            True,
            f"{free / GIB:.1f} GiB free at {where}; a {platform} build of this base needs "
            f"about {need / GIB:.1f} GiB ({need_source})",
        )
    error = BuildError(
        f"only {free / GIB:.1f} GiB free at {where}; a {platform} build of this base needs about "
        f"{need / GIB:.1f} GiB ({need_source})",
        "free disk space, or put the worktrees (--workdir) and --dist on a larger volume",
    )
    return Check("disk", False, error.line(), error)


#: What to do when ``xcrun metal`` does not work (docs/quickstart-macos.md, "The Metal shader compiler").
METAL_REMEDY = (
    "Xcode 26 and later ship the Metal toolchain apart: `xcodebuild -downloadComponent MetalToolchain`; "
    "before Xcode 26 install the full Xcode and `sudo xcode-select -s /Applications/Xcode.app`"
)


def check_metal(path: str) -> Check:
    """``xcrun metal --version`` works (macOS): the Metal shader compiler PyTorch's CMake probes for
    ``CAN_COMPILE_METAL`` (v2.6.0 ``cmake/Metal.cmake``: ``xcrun metal -std=metal3.1``). Without it the
    build still succeeds, with the shaders compiled at run time, so it never stops a build."""
    xcrun = shutil.which("xcrun", path=path)
    if xcrun is None:
        return Check(
            "metal",
            False,
            "xcrun not found (no Xcode command line tools) -- " "`xcode-select --install`, then: " + METAL_REMEDY,
        )
    rc, line = _first_line([xcrun, "metal", "--version"])
    if rc == 0:
        capability = metal_capability(path)
        return Check(
            "metal",
            True,
            f"{line}; {macos.metal_text(capability)}"
            + (
                ""
                if capability.get("CAN_COMPILE_METAL_40") == "YES"
                else " (a main base builds without its Metal-4 kernels; v2.6.0 has none)"
            ),
        )
    return Check("metal", False, f"`xcrun metal --version` fails ({line}) -- {METAL_REMEDY}")


#: ``cmake/Metal.cmake``'s probes: cache entry -> (``-std``, probe shader). v2.6.0 (Debian tree) compiles
#: ``bfloat_inc.metal`` with ``xcrun metal -std=metal3.1`` for ``CAN_COMPILE_METAL``; main (pytorch/pytorch
#: 001f694a) then, when that passed, ``xcrun metal -std=metal4.0 -c lambda_test.metal -o /dev/null`` for
#: ``CAN_COMPILE_METAL_40`` (without it main builds no Metal-4 kernels). The shaders are upstream's probes.
METAL_PROBES: dict[str, tuple[str, str]] = {
    "CAN_COMPILE_METAL": (
        "metal3.1",
        "kernel void inc(device bfloat* ptr, uint idx [[thread_position_in_grid]]) { ptr[idx] += 1; }\n",
    ),
    "CAN_COMPILE_METAL_40": (
        "metal4.0",
        "kernel void test(device float* ptr, uint idx [[thread_position_in_grid]]) {\n"
        "  auto fn = [](float x) { return x + 1.0; };\n  ptr[idx] = fn(ptr[idx]);\n}\n",
    ),
}


def metal_probes_of(source_dir: Path | None) -> tuple[str, ...]:
    """The :data:`METAL_PROBES` entries the base's own ``cmake/Metal.cmake`` sets (v2.6.0: only
    ``CAN_COMPILE_METAL``; main: both); all of them without a source or that file."""
    path = Path(source_dir) / "cmake" / "Metal.cmake" if source_dir is not None else None
    if path is None or not path.is_file():
        return tuple(METAL_PROBES)
    text = path.read_text(errors="replace")
    return tuple(name for name in METAL_PROBES if re.search(rf"\b{name}\b", text))


def metal_capability(path: str, names: Sequence[str] = tuple(METAL_PROBES)) -> dict[str, str]:
    """Which Metal language versions this host's shader compiler builds, as ``cmake/Metal.cmake`` decides
    it: ``{"CAN_COMPILE_METAL": "YES"|"NO", "CAN_COMPILE_METAL_40": "YES"|"NO"}`` (:data:`METAL_PROBES`,
    each ``xcrun metal -std=<std> -c <probe> -o /dev/null`` an argument list under :data:`TOOL_PROBE_S`;
    Metal 4.0 is probed only when 3.1 compiles, as upstream does); ``names``: the entries the base probes
    (:func:`metal_probes_of`). Without ``xcrun`` on ``path``: NO, with the reason in ``"how"``."""
    xcrun = shutil.which("xcrun", path=path)
    if xcrun is None:
        return {name: "NO" for name in names} | {"how": "no xcrun on PATH"}
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="metal-probe-") as tmp:
        for name in names:
            std, source = METAL_PROBES[name]
            if out and out.get("CAN_COMPILE_METAL") != "YES":
                out[name] = "NO"
                continue
            probe = Path(tmp) / f"{name.lower()}.metal"
            probe.write_text(source)
            rc, _ = _first_line([xcrun, "metal", f"-std={std}", "-c", str(probe), "-o", os.devnull])
            out[name] = "YES" if rc == 0 else "NO"
    return out | {"how": "xcrun metal -std=metal3.1 / -std=metal4.0 on cmake/Metal.cmake's probe shaders"}


def host_need_of(platform: str, source_dir: Path | None = None, base: str | None = None) -> macos.HostNeed | None:
    """What the base needs of the Mac (:func:`harness.macos.host_need`): from the base's files when
    ``source_dir`` is given (``version.txt``, :func:`macos_deployment_target`), else from the recipe of
    ``base`` (default ``main``). None off macos-arm64."""
    if not platform_spec(platform).macos:
        return None
    if source_dir is not None:
        try:
            release = base_release(source_dir)
        except BuildError:
            release = base or "main"
        value, note = macos_deployment_target(source_dir)
        found = re.match(r"base sets ([\d.]+) \(([^)]*)\)(.*)", note)  # "base sets 14.0 (file:line)"
        target = (value, found[2] + (f", {found[1]} raised to the arm64 floor" if found[3] else "") if found else note)
        name = base or f"v{release}"
        recipe = macos.recipe_for(release, source_dir)
        if recipe is not None and (Path(source_dir) / recipe.script).is_file():
            return macos.host_need(name, release, target)
        if recipe is not None:  # a tree without the scripts (Debian's): upstream's wheel tag says it
            tag = recipe.wheel_tag.split("_")
            target = (f"{tag[1]}.{tag[2]}", f"upstream's {recipe.name} wheel tag {recipe.wheel_tag}, {recipe.citation}")
        return macos.host_need(name, release, target)
    release = base or "main"
    recipe = macos.recipe_for(release)
    if recipe is None:
        return macos.host_need(release, release, (MACOS_ARM64_FLOOR, "the arm64 floor"))
    tag = recipe.wheel_tag.split("_")
    return macos.host_need(release, release, (f"{tag[1]}.{tag[2]}", f"{recipe.script}, {recipe.citation}"))


def check_host_macos(
    platform: str, source_dir: Path | None = None, base: str | None = None, host: str | None = None
) -> Check | None:
    """This Mac's macOS against what the base needs (:func:`host_need_of`): the wheel's deployment target
    (pip refuses a newer tag) and the MPS run-time need. None off a Mac (``host`` default
    :func:`harness.macos.host_macos`) or off macos-arm64."""
    host = host or macos.host_macos()
    need = host_need_of(platform, source_dir, base) if host else None
    if need is None:
        return None
    refusal = need.refusal(host)
    wanted = ".".join(map(str, need.macos))
    if refusal:
        remedy = f"update this Mac to macOS {wanted} or newer (System Settings > General > Software Update)"
        if need.macos > macos.MPS_OLDEST_MACOS:
            remedy += f", or build --base v2.6.0 (its MPS runs from macOS {'.'.join(map(str, macos.MPS_OLDEST_MACOS))})"
        error = BuildError(refusal, remedy)
        return Check("macOS", False, error.line(), error)
    assumed = "" if need.runtime.established else " (assumed)"
    return Check(
        "macOS",
        True,
        f"macOS {host}; {need.base} needs {wanted}: {need.wheel_tag} wheels, MPS from macOS "
        f"{'.'.join(map(str, need.runtime.macos))}{assumed}",
    )


def refuse_host(platform: str, source_dir: Path | None = None, base: str | None = None) -> None:
    """Before any checkout or build: refuse a Mac older than the base needs (:func:`check_host_macos`).

    Raises:
        BuildError: one line with the macOS the base needs and the host's.
    """
    check = check_host_macos(platform, source_dir, base)
    if check is not None and check.error is not None:
        raise check.error


def preflight_tools(plan: BuildPlan, path: str, *, cmake: bool = True) -> None:
    """Refuse to start without a C++ compiler, CMake (on ``path``, at least the base's
    ``cmake_minimum_required``) or the estimated free disk (:attr:`BuildPlan.min_free_bytes`,
    checked with ``shutil.disk_usage`` where the build writes).

    Called twice by :func:`build_wheel`: before the build venv is made (``cmake=False`` when the
    base's build requirements install CMake into it), then with the venv's ``bin`` on ``path``.

    Raises:
        BuildError: one line naming what is missing and how to install it on this platform.
    """
    cxx = plan.env.get("CXX") or os.environ.get("CXX")
    checks = [check_compiler(plan.platform, path, cxx)]
    if cmake:
        checks.append(check_cmake(plan.platform, path, plan.source_dir))
    where = next(p for p in (plan.source_dir, plan.dist_dir, *plan.dist_dir.parents) if p.exists())
    checks.append(check_disk(plan.platform, where, plan.min_free_bytes, plan.free_bytes_source))
    checks.append(check_host_macos(plan.platform, plan.source_dir))
    for check in filter(None, checks):
        if check.error is not None:
            raise check.error


def toolchain_checks(platform: str, source_dir: Path | None) -> list[tuple[str, bool, str]]:
    """``(item, ok, one-line detail)`` for ``doctor``: compiler, CMake (its version against the base's
    needs when ``source_dir`` is given), the Metal toolchain (macos-arm64 only), free disk (against
    :func:`required_free_bytes` for the base, else the platform's :attr:`Platform.disk_estimate`).

    The same checks as a build's preflight (:func:`preflight_tools`), on this process's ``PATH``; a
    missing tool is ``ok=False`` with the remedy in the detail, never an exception.

    Raises:
        UsageError: unknown platform.
    """
    spec = platform_spec(platform)
    path = os.environ.get("PATH", "")
    root = Path(source_dir).resolve() if source_dir is not None else None
    checks = [check_compiler(platform, path, os.environ.get("CXX"))]
    try:
        venv_installs = root is not None and _requires_cmake(build_requirements(root))
    except BuildError:
        venv_installs = False
    checks.append(check_cmake(platform, path, root, venv_installs=venv_installs))
    if spec.macos:
        checks.append(check_metal(path))
        host = check_host_macos(platform, root)
        if host is not None:
            checks.append(host)
    try:
        need, need_source = required_free_bytes(root, platform)  # the variable counts without a source too
        where = next(p for p in ((root or Path.cwd()), *(root or Path.cwd()).parents) if p.exists())
        checks.append(check_disk(platform, where, need, need_source))
    except UsageError as exc:  # a malformed TORCH_PATCH_HARNESS_BUILD_FREE_GIB
        checks.append(Check("disk", False, exc.line()))
    return [(c.item, c.ok, c.detail) for c in checks]


# --------------------------------------------------------------------------------------------
# Plan


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
        platform: a :data:`REGISTRY` name.
        kind: ``stock`` or ``patched`` (patched needs ``series``).
        jobs: ``MAX_JOBS``; default the CPU count.
        env_overrides: ``KEY=VALUE`` strings or a mapping; applied last, over everything.
        base_sha: the base commit; default the HEAD of ``source_dir`` (a patched worktree's HEAD is
            the series' last commit, so pass the base's SHA there).
        incremental: patched only: ``source_dir`` is the already-built stock tree.
        launcher: compiler cache program; True = detect (:func:`find_launcher`), None/False = none.

    Raises:
        UsageError: bad platform/build type/jobs/--env; incremental for a stock build.
        BuildError: the source lacks version.txt, a build convention or the version variable.
    """
    source_dir = Path(source_dir).resolve()
    dist_dir = Path(dist_dir).resolve()
    if kind not in KINDS:
        raise UsageError(f"unknown kind {kind!r}", "choose stock or patched")
    if incremental and kind != "patched":
        raise UsageError("--incremental applies to patched builds only", "drop --incremental for --kind stock")
    overrides = dict(env_overrides) if isinstance(env_overrides, Mapping) else parse_env_overrides(env_overrides)
    base_sha = base_sha or git_head(source_dir)
    target, target_note = macos_deployment_target(source_dir)
    if launcher is True:
        launcher = find_launcher()
    env = platform_env(
        platform,
        jobs=jobs or os.cpu_count() or 1,
        build_type=build_type,
        macos_deployment_target=target,
        launcher=launcher or None,
        cross_compile=macos_cross_compiling(),
    )
    release = base_release(source_dir)
    recipe = macos.recipe_for(release, source_dir) if platform_spec(platform).macos else None
    if recipe is not None:  # upstream's macOS wheel flags of this base (harness.macos)
        env.update(recipe.env)
    policy_env, policy_note = cmake_policy_env(source_dir)
    env.update(policy_env)
    version = local_version(release, kind, base_sha=base_sha, series=series)
    env.update(version_env(source_dir, version))
    env.update(overrides)
    if env.get("MAX_JOBS", "").isdigit():
        jobs = int(env["MAX_JOBS"])
    notes = [
        f"compiler launcher: {launcher}" if launcher else "compiler launcher: none (install ccache to speed rebuilds)"
    ]
    if platform_spec(platform).macos:
        notes.append(f"MACOSX_DEPLOYMENT_TARGET: {target_note}")
    notes.append(f"{CMAKE_POLICY_ENV}: {policy_note}")
    notes += recipe_notes(recipe, env, source_dir)
    min_free, free_source = required_free_bytes(source_dir, platform)
    notes.append(f"free disk needed: {min_free / GIB:.1f} GiB ({free_source})")
    return BuildPlan(
        source_dir=source_dir,
        platform=platform,
        kind=kind,
        build_type=env.get("CMAKE_BUILD_TYPE", build_type),
        jobs=jobs or os.cpu_count() or 1,
        base_sha=base_sha,
        series=series,
        version=version,
        env=env,
        requirements=recipe_requirements(recipe, source_dir) if recipe else build_requirements(source_dir),
        command=command_for(source_dir, "{python}", dist_dir, recipe),
        dist_dir=dist_dir,
        incremental=incremental,
        min_free_bytes=min_free,
        notes=tuple(notes),
        free_bytes_source=free_source,
        recipe=recipe.name if recipe else None,
    )


def command_for(source_dir: Path, python: str, dist_dir: Path, recipe: macos.WheelRecipe | None) -> tuple[str, ...]:
    """The build command: upstream's macOS wheel command of the base (:func:`recipe_command`) when it has
    a recipe, else the base's own convention (:func:`build_command`)."""
    return recipe_command(recipe, python, dist_dir) if recipe else build_command(source_dir, python, dist_dir)


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


# --------------------------------------------------------------------------------------------
# Build venv, toolchain, running


#: build-step counters in a build log: ninja's ``[12/345]`` and make's ``[ 45%]``
_STEP = re.compile(r"^\[\s*(\d+)/(\d+)\]|^\[\s*(\d+)%\]", re.MULTILINE)


def build_steps(text: str) -> tuple[int, int] | None:
    """The last build-step counter in ``text`` (a chunk of a build log) as ``(done, total)``:
    ninja ``[12/345] Building CXX object …`` gives (12, 345), make ``[ 45%] Building …`` gives
    (45, 100). None when the chunk holds no counter."""
    last = None
    for m in _STEP.finditer(text):
        last = (int(m[1]), int(m[2])) if m[1] else (int(m[3]), 100)
    return last


#: seconds one logged build step may run (the base's build command, a build venv's pip install): a
#: from-scratch PyTorch build with CUDA takes 1-4 h on a workstation (docs/building.md); 12 h stops a
#: build that waits for input or deadlocks without cutting a slow one short
BUILD_STEP_S = 12 * 3600.0


def _run_logged(
    cmd: Sequence[str],
    log,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> int:
    """Run ``cmd`` with its output appended to the open ``log``; on a terminal, a progress bar
    follows the build-step counters (:func:`build_steps`) the log gains. Returns the exit status.

    Raises:
        BuildError: it ran past ``deadline`` seconds (default :data:`BUILD_STEP_S`); it was killed.
    """
    deadline = BUILD_STEP_S if deadline is None else deadline
    log.write(f"$ {shlex.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(
        list(cmd), cwd=cwd, env=dict(env) if env else None, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    started = time.monotonic()
    try:
        with progress.task(f"build: {Path(cmd[0]).name} {' '.join(cmd[1:3])}") as bar, open(log.name, "rb") as tail:
            tail.seek(0, os.SEEK_END)
            while proc.poll() is None:
                time.sleep(0.5)
                if time.monotonic() - started > deadline:
                    raise BuildError(
                        f"`{shlex.join(cmd[:3])}` took longer than {deadline:g} s (stopped); its log: {log.name}",
                        "read the end of the log: a build waiting for input or a hung compiler",
                    )
                steps = build_steps(tail.read().decode(errors="replace")) if progress.interactive() else None
                if steps:
                    bar.update(completed=steps[0], total=steps[1])
        return proc.returncode
    finally:  # Ctrl-C, the deadline or an error here: the build must not outlive the harness
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()


def build_venv_path(requirements: Sequence[str]) -> Path:
    """Where the build venv for ``requirements`` lives: ``<cache>/build-venvs/py3X-<hash12>``
    (hash over this Python's version and the requirements, in order)."""
    key = hashlib.sha256("\n".join([sys.version, *requirements]).encode()).hexdigest()[:12]
    return cache_dir() / "build-venvs" / f"py{sys.version_info.major}{sys.version_info.minor}-{key}"


def ensure_build_venv(requirements: Sequence[str], log_path: Path) -> Path:
    """A virtual environment holding ``requirements`` (cached at :func:`build_venv_path`).

    Returns:
        the venv directory. Raises BuildFailed (with the pip log) when creation or install fails.
    """
    venv = build_venv_path(requirements)
    stamp = venv / ".harness-complete"
    if stamp.is_file():
        return venv
    with exclusive_lock(venv.parent / f".{venv.name}", "build venv"):
        if stamp.is_file():
            return venv
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as log:
            progress.note(f"build venv: creating {venv} ({len(requirements)} requirements)")
            steps = [[sys.executable, "-m", "venv", "--clear", str(venv)]]
            if requirements:
                steps.append([str(venv_python(venv)), "-m", "pip", "install", *requirements])
            for step in steps:
                if _run_logged(step, log) != 0:
                    raise BuildFailed("could not create the build environment", log_path)
        stamp.write_text("\n".join(requirements) + "\n")
    return venv


def toolchain_versions(env: Mapping[str, str]) -> dict[str, str]:
    """First lines of ``c++ --version`` (or $CXX) and ``cmake --version`` under ``env``; "missing" if absent."""
    out = {}
    cxx = env.get("CXX") or "c++"
    for key, cmd in (("compiler", [cxx, "--version"]), ("cmake", ["cmake", "--version"])):
        exe = shutil.which(cmd[0], path=env.get("PATH"))
        if exe is None:
            out[key] = "missing"
            continue
        rc, line = _first_line([exe, *cmd[1:]], env)
        out[key] = line if rc == 0 else "unknown"
    return out


def cmake_cache_value(source_dir: Path, name: str) -> str | None:
    """``name``'s value in the base's CMake cache, ``<source>/build/CMakeCache.txt`` (PyTorch's build
    directory: ``BUILD_DIR = "build"`` in ``tools/setup_helpers/env.py``, v2.6.0), or None. For
    ``CAN_COMPILE_METAL`` this is what upstream's CMake decided (v2.6.0 ``cmake/Metal.cmake``: ``YES``
    when ``xcrun metal -std=metal3.1`` compiled its probe shader, else ``NO``; no entry off Apple)."""
    cache = Path(source_dir) / "build" / "CMakeCache.txt"
    if not cache.is_file():
        return None
    pattern = re.compile(rf"^{re.escape(name)}(?::[A-Za-z]+)?=(.*)$", re.MULTILINE)
    match = pattern.search(cache.read_text(errors="replace"))
    return match.group(1).strip() if match else None


class BuildFailed(BuildError):
    """A build step that ran and failed: carries the log path and its last lines."""

    exit_code = 1

    def __init__(self, what: str, log_path: Path) -> None:
        lines = Path(log_path).read_text(errors="replace").splitlines() if Path(log_path).is_file() else []
        cause = next((ln.strip() for pattern in _CAUSE_PATTERNS for ln in lines if pattern.search(ln)), None)
        if cause is None:
            cause = next((ln.strip() for ln in reversed(lines) if ln.strip()), "no output")
        super().__init__(f"{what}: {cause[:300]}", f"full log: {log_path}")
        self.log_path = Path(log_path)
        self.tail = lines[-TAIL_LINES:]


def count_compiled_units(log_text: str) -> int:
    """Number of distinct translation units a CMake build compiled, from its output (:data:`_COMPILE_LINE`)."""
    return len(set(_COMPILE_LINE.findall(log_text)))


@dataclass(frozen=True)
class BuildResult:
    """Outcome of :func:`build_wheel`.

    Attributes:
        wheel: the wheel file. manifest: its ``<wheel>.build.json``. log: full build log.
        skipped: True when an identical earlier build was reused (nothing ran).
        duration_s: wall seconds of the build command (0 when skipped).
        compiled_units: translation units compiled (from the log; 0 when skipped).
    """

    wheel: Path
    manifest: Path
    log: Path
    skipped: bool
    duration_s: float
    compiled_units: int


def find_identical(dist_dir: Path, inputs: dict) -> Path | None:
    """A manifest in ``dist_dir`` with the same inputs whose wheel still exists unchanged."""
    for manifest in sorted(Path(dist_dir).glob("*.whl.build.json")):
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        wheel = manifest.with_name(manifest.name[: -len(".build.json")])
        if data.get("inputs") == inputs and wheel.is_file() and sha256_file(wheel) == data.get("wheel_sha256"):
            return manifest
    return None


def _apply_series_in_tree(tree: Path, patches: Sequence[Path], *, reverse: bool = False) -> None:
    """``git apply`` (or ``-R``) the series to the working files of ``tree``, no commit (incremental builds)."""
    args = ["apply", *(["-R"] if reverse else []), *[str(Path(p).resolve()) for p in patches]]
    result = git_run(tree, *args, check=False)
    if result.rc != 0:
        raise BuildError(
            f"series does not {'revert' if reverse else 'apply'} in {tree}: {result.last_line()}",
            "rebuild the stock tree from a clean worktree (build_stock) and retry",
        )


def _build_environment(plan: BuildPlan, venv: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The build's environment (this process's, the build venv first on PATH, the plan's variables) after
    the tool preflight on it, and the toolchain versions it finds.

    Raises:
        BuildError: a tool is missing (see :func:`preflight_tools`).
    """
    env = dict(os.environ)
    env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(venv)
    env.update(plan.env)
    preflight_tools(plan, env["PATH"])
    toolchain = toolchain_versions(env)
    if platform_spec(plan.platform).macos:  # the shader compiler decides what the wheel holds (check_metal)
        toolchain["metal"] = check_metal(env["PATH"]).detail
    return env, toolchain


def built_metal_capability(source_dir: Path, probed: Mapping[str, str] | None) -> dict[str, str] | None:
    """The Metal capability a build used: ``cmake/Metal.cmake``'s own decision in the CMake cache
    (:func:`cmake_cache_value` of each :data:`METAL_PROBES` entry; v2.6.0 has no ``CAN_COMPILE_METAL_40``,
    which counts as NO) when the cache has ``CAN_COMPILE_METAL``, else the host probe (:func:`metal_capability`);
    None off macOS."""
    if probed is None:
        return None
    if cmake_cache_value(source_dir, "CAN_COMPILE_METAL") is None:
        return dict(probed)
    out = {name: _yes_no(cmake_cache_value(source_dir, name)) for name in probed if name in METAL_PROBES}
    return out | {"how": "CMakeCache.txt (cmake/Metal.cmake)"}


def host_metal(plan: BuildPlan, path: str, dist_dir: Path) -> dict[str, str] | None:
    """This host's Metal capability for a macOS build (:func:`metal_capability` of the probes the base
    makes), None off macOS; a patched build whose stock pair differs is refused here, before it starts.

    Raises:
        BuildError: :func:`refuse_metal_pair`.
    """
    if not platform_spec(plan.platform).macos:
        return None
    capability = metal_capability(path, metal_probes_of(plan.source_dir))
    if plan.kind == "patched":
        refuse_metal_pair(dist_dir, plan, capability)
    return capability


def macos_record(plan: BuildPlan, capability: Mapping[str, str] | None) -> dict:
    """The build manifest's macOS entries: ``can_compile_metal`` (CMake's cache), ``metal_capability``
    (:func:`built_metal_capability`), ``upstream_recipe`` (which upstream wheel build it follows, cited)
    and ``release_differs`` (its flags that differ from upstream's wheel build of the base and from the
    released wheel's build settings, :func:`harness.macos.recipe_release_differs`)."""
    return {
        "can_compile_metal": cmake_cache_value(plan.source_dir, "CAN_COMPILE_METAL"),
        "metal_capability": built_metal_capability(plan.source_dir, capability),
        "upstream_recipe": _recipe_record(plan),
        "release_differs": macos.recipe_release_differs(plan.env, macos.RECIPES.get(plan.recipe or "")),
    }


def _yes_no(value: str | None) -> str:
    return "YES" if (value or "").upper() in ("YES", "ON", "TRUE", "1", "Y") else "NO"


def _recipe_record(plan: BuildPlan) -> dict | None:
    recipe = macos.RECIPES.get(plan.recipe or "")
    if recipe is None:
        return None
    return {"name": recipe.name, "command": recipe.command, "wheel_tag": recipe.wheel_tag, "citation": recipe.citation}


def refuse_metal_pair(dist_dir: Path, plan: BuildPlan, capability: Mapping[str, str]) -> None:
    """Before a patched build: refuse when the stock wheel of the same base in ``dist_dir`` (its manifest:
    same ``base_sha`` and platform, kind stock) was built with another Metal capability than this host's.

    Raises:
        BuildError: one line (:func:`harness.macos.metal_mismatch`).
    """
    for manifest in sorted(Path(dist_dir).glob("*.whl.build.json")):
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        inputs = data.get("inputs") if isinstance(data, dict) else None
        if not isinstance(inputs, dict) or inputs.get("kind") != "stock":
            continue
        if inputs.get("base_sha") != plan.base_sha or inputs.get("platform") != plan.platform:
            continue
        line = macos.metal_mismatch(data, {"metal_capability": capability})
        if line:
            raise BuildError(f"{line} (stock: {manifest.name})", macos.METAL_PAIR_REMEDY)


def build_wheel(plan: BuildPlan, dist_dir: Path | None = None, *, force: bool = False) -> BuildResult:
    """Run one build: preflight, build venv, the base's command, log, manifest.

    Incremental (``plan.incremental``): the series is ``git apply``-ed to the already-built stock
    tree, the same command rebuilds in its build directory (only translation units whose sources
    changed recompile), and the series is reverted afterwards (even on failure). The label change
    costs PyTorch no recompiles: CMake takes only major.minor.patch of ``PYTORCH_BUILD_VERSION``
    into ``torch/version.h`` (``caffe2_parse_version_str``, v2.6.0 CMakeLists.txt), the same for
    both labels. A later stock rebuild recompiles the units the series touched.

    Args:
        plan: from :func:`plan_build`.
        dist_dir: default ``plan.dist_dir``.
        force: rebuild even when an identical manifest exists.

    Raises:
        BuildError: preflight refused (one line). BuildFailed: the build ran and failed
            (``.tail`` holds the last 40 log lines, ``.log_path`` the log).
    """
    dist_dir = Path(dist_dir or plan.dist_dir).resolve()
    if dist_dir != plan.dist_dir:
        plan = dataclasses.replace(plan, dist_dir=dist_dir, command=plan.command_in(dist_dir))
    preflight_source(plan.source_dir)
    logs = dist_dir / "logs"
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = logs / f"{plan.kind}-{slug(plan.version)}-{stamp}.log"
    with exclusive_lock(cache_dir() / "locks" / slug(str(plan.source_dir)), f"build {plan.kind} {plan.source_dir}"):
        # before the (slow) build venv: a missing compiler or a full disk is said at once
        preflight_tools(plan, os.environ.get("PATH", ""), cmake=not _requires_cmake(plan.requirements))
        venv = ensure_build_venv(plan.requirements, log_path)
        python = str(venv_python(venv))
        env, toolchain = _build_environment(plan, venv)
        capability = host_metal(plan, env["PATH"], dist_dir)
        inputs = plan.inputs(toolchain)
        if not force:
            existing = find_identical(dist_dir, inputs)
            if existing is not None:
                data = json.loads(existing.read_text())
                wheel = existing.with_name(existing.name[: -len(".build.json")])
                progress.note(
                    f"build {plan.kind}: inputs identical to {existing.name}; skipped (use --force to rebuild)"
                )
                return BuildResult(wheel, existing, Path(data.get("log", "")), True, 0.0, 0)
        if plan.incremental and not (plan.source_dir / "build").is_dir():
            raise BuildError(
                f"{plan.source_dir} has no build tree to reuse",
                "run build_stock first, then build_patched --incremental",
            )
        command = [python if part == "{python}" else part for part in plan.command]
        dist_dir.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        before = {p.name: p.stat().st_mtime_ns for p in dist_dir.glob("*.whl")}
        applied = False
        started = _dt.datetime.now(_dt.UTC)
        t0 = time.monotonic()
        try:
            if plan.incremental:
                _apply_series_in_tree(plan.source_dir, plan.series.patches)
                applied = True
            progress.note(f"build {plan.kind}: {shlex.join(command)} (log: {log_path})")
            with open_write(log_path, append=True) as log:  # never through a link in --dist/logs
                log.write("".join(f"{k}={v}\n" for k, v in sorted(plan.env.items())))
                rc = _run_logged(command, log, cwd=plan.source_dir, env=env)
        finally:
            if applied:
                _apply_series_in_tree(plan.source_dir, plan.series.patches, reverse=True)
        duration = time.monotonic() - t0
        ended = _dt.datetime.now(_dt.UTC)
        if rc != 0:
            raise BuildFailed(f"{plan.kind} build failed (exit {rc})", log_path)
        new = [p for p in dist_dir.glob("*.whl") if before.get(p.name) != p.stat().st_mtime_ns]
        wheel = _pick_wheel(new, plan.version, log_path)
        log_text = log_path.read_text(errors="replace")
        manifest = wheel.with_name(wheel.name + ".build.json")
        atomic_write_json(
            manifest,
            {
                "schema": 1,
                "inputs": inputs,
                "base_sha": plan.base_sha,
                "series": inputs["series"],
                "environment": inputs["env"],
                "compiler": toolchain["compiler"],
                "cmake": toolchain["cmake"],
                "metal": toolchain.get("metal"),
                **macos_record(plan, capability),
                "start": started.isoformat(timespec="seconds"),
                "end": ended.isoformat(timespec="seconds"),
                "duration_s": round(duration, 3),
                "log": str(log_path),
                "wheel": wheel.name,
                "wheel_sha256": sha256_file(wheel),
                "compiled_units": count_compiled_units(log_text),
            },
        )
        progress.note(f"build {plan.kind}: {wheel.name} in {duration:.1f} s (manifest {manifest.name})")
        return BuildResult(wheel, manifest, log_path, False, duration, count_compiled_units(log_text))


def _pick_wheel(candidates: list[Path], version: str, log_path: Path) -> Path:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    for path in candidates:
        try:
            if parse_wheel_filename(path.name)[1] == Version(version):
                return path
        except InvalidWheelFilename:
            continue
    found = ", ".join(p.name for p in candidates) or "no new wheel"
    raise BuildError(
        f"the build wrote {found}, not a wheel of version {version}", f"the base ignored {VERSION_ENV}; see {log_path}"
    )


# --------------------------------------------------------------------------------------------
# Verification


class VerifyError(BuildError):
    """A built wheel that fails verification (one line)."""

    exit_code = 1


_PROBE = r"""
import importlib, json, sys
mod = importlib.import_module(sys.argv[1])
out = {"version": str(getattr(mod, "__version__", "")), "file": getattr(mod, "__file__", None)}
if sys.argv[1] == "torch":
    out["mps_built"] = bool(mod.backends.mps.is_built())
with open(sys.argv[-1], "a") as fh:  # the answer channel (harness.channel): ``--answer FILE``
    fh.write(json.dumps({"answer": out}) + "\n")
"""

_LIBRARY_SUFFIXES = (".so", ".dylib", ".pyd", ".dll")


def _wheel_top_level(wheel: zipfile.ZipFile) -> str:
    names = wheel.namelist()
    for name in names:
        if name.endswith(".dist-info/top_level.txt"):
            first = wheel.read(name).decode().split()
            if first:
                return first[0]
    for name in names:
        top = name.split("/", 1)[0]
        if "/" in name and not top.endswith((".dist-info", ".data")):
            return top
    raise VerifyError(f"{wheel.filename} holds no importable package", "check the base's packaging")


def marker_hits(wheel_path: Path, markers: Sequence[str]) -> dict[str, list[str]]:
    """For each marker, the compiled libraries in the wheel whose bytes contain it."""
    hits: dict[str, list[str]] = {m: [] for m in markers}
    with zipfile.ZipFile(wheel_path) as wheel:
        for name in wheel.namelist():
            base = name.rsplit("/", 1)[-1]
            if base.endswith(_LIBRARY_SUFFIXES) or ".so." in base:
                data = wheel.read(name)
                for marker in markers:
                    if marker.encode() in data:
                        hits[marker].append(name)
    return hits


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify_wheel` checked: imported version, MPS, markers (None = not checked, with why)."""

    wheel: Path
    version: str
    mps_built: bool | None
    markers_checked: bool
    notes: tuple[str, ...] = field(default=())


#: upstream files whose change reaches the compiled libraries (a series touching one needs markers)
COMPILED_SUFFIXES = (
    ".c",
    ".cc",
    ".cpp",
    ".cxx",
    ".cu",
    ".cuh",
    ".h",
    ".hh",
    ".hpp",
    ".hxx",
    ".m",
    ".mm",
    ".metal",
    ".s",
    ".inl",
    ".cmake",
    "cmakelists.txt",
)


def touched_files(series: SeriesRef) -> tuple[str, ...]:
    """The upstream files a series touches: ``[[base]] files`` when listed, else read from its patches."""
    if series.files:
        return series.files

    found: list[str] = []
    for patch in series.patches:
        for name in series_mod.paths_in_patch(Path(patch).read_text(encoding="utf-8", errors="surrogateescape")):
            if name not in found:
                found.append(name)
    return tuple(found)


def reject_wheel(wheel: Path, dist_dir: Path) -> Path:
    """Move a wheel that failed verification (and its manifest) to ``<dist>/rejected/``, so nothing is
    left under its label for a later ``compare`` to pick up; returns its new path (never overwrites)."""
    dist_dir = Path(dist_dir).resolve()
    folder = inside(dist_dir, "rejected", "--dist rejected folder")
    folder.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    target = inside(folder, f"{stamp}-{wheel.name}", "rejected wheel")
    manifest = wheel.with_name(wheel.name + ".build.json")
    os.replace(inside(dist_dir, wheel.name, "wheel"), target)
    if manifest.is_file():
        os.replace(inside(dist_dir, manifest.name, "build manifest"), target.with_name(target.name + ".build.json"))
    return target


def _check_markers(
    wheel: Path, platform: str, markers: Sequence[str], must_contain: bool | None, series_files: Sequence[str]
) -> tuple[list[str], bool]:
    """The marker part of :func:`verify_wheel`: its notes, and whether the markers were checked.

    Raises:
        VerifyError: no markers for a series of compiled code; a marker missing (patched) or present (stock).
    """
    notes: list[str] = []
    markers_checked = False
    if must_contain is not None and not markers:
        compiled = [f for f in series_files if f.lower().endswith(COMPILED_SUFFIXES)]
        if compiled or not series_files:
            shown = ", ".join(compiled[:3]) if compiled else "files not known"
            raise VerifyError(
                f"{wheel.name}: the series changes compiled code ({shown}) but series.toml declares no markers (env)",
                "add to `env` in series.toml a string the patched code adds (e.g. its environment variable), so "
                "verification can prove the series is in the patched wheel and absent from stock",
            )
        notes.append(f"marker check: the series changes no compiled code ({', '.join(series_files[:3])})")
    if must_contain is not None and markers:
        if series_files and not any(compiles_on(f, platform) for f in series_files):
            notes.append(f"marker check skipped: {platform} does not compile {', '.join(series_files)}")
        else:
            hits = marker_hits(wheel, markers)
            for marker, where in hits.items():
                if must_contain and not where:
                    raise VerifyError(
                        f"{wheel.name}: no compiled library contains the marker {marker!r}",
                        "the series was not compiled in; rebuild build_patched from the patched worktree",
                    )
                if not must_contain and where:
                    raise VerifyError(
                        f"{wheel.name}: {where[0]} contains the patched marker {marker!r}",
                        "the stock wheel was built from a patched tree; rebuild build_stock",
                    )
            markers_checked = True
    return notes, markers_checked


def _install_and_probe(wheel: Path, import_name: str, venv_dir: Path | None) -> dict:
    """Install ``wheel`` into a fresh venv (in ``venv_dir``) and import it there: :data:`_PROBE`'s answer.

    Raises:
        VerifyError: the install or the import fails.
        BuildInputError: this interpreter's pip is older than 22.3 (:func:`harness.venvs.pip_command`).
    """
    with tempfile.TemporaryDirectory(prefix="verify-", dir=venv_dir) as tmp:
        venv = Path(tmp) / "venv"
        # a venv without its own pip (fast); this interpreter's pip installs into it (pip >= 22.3 --python)
        for what, step in (
            ("creating a venv", [sys.executable, "-m", "venv", "--without-pip", str(venv)]),
            (f"pip install {wheel.name}", [*pip_command(venv_python(venv)), "install", "--quiet", str(wheel)]),
        ):
            proc = children.run(step, what=f"verify: {what}", deadline=PIP_INSTALL_S)
            if proc.returncode != 0:
                raise VerifyError(
                    f"installing {wheel.name} into a fresh venv failed: {proc.last_line()}", "see pip's message"
                )
        proc = children.run(
            [str(venv_python(venv)), "-c", _PROBE, import_name],
            what=f"verify: importing {import_name} from {wheel.name}",
            deadline=children.IMPORT_TORCH_S,
            answer=True,
            cwd=tmp,
        )
        if proc.returncode != 0 or not isinstance(proc.answer, dict):
            raise VerifyError(
                f"{wheel.name}: `import {import_name}` fails in a fresh venv: {proc.last_line()}", "fix the build"
            )
        probe = proc.answer
    return probe


def verify_wheel(
    wheel: Path,
    expected_version: str,
    *,
    platform: str | None = None,
    markers: Sequence[str] = (),
    must_contain: bool | None = None,
    series_files: Sequence[str] = (),
    venv_dir: Path | None = None,
) -> VerifyResult:
    """Install ``wheel`` into a fresh venv and check it.

    Checks: the wheel file's version equals ``expected_version`` (PEP 440 comparison, local label
    included); the package imports and its ``__version__`` equals it; on ``macos-arm64`` torch
    reports ``torch.backends.mps.is_built()``; when ``must_contain`` is not None and the platform
    compiles one of ``series_files`` (:func:`compiles_on`; no files = yes), every marker is in
    (True) or absent from (False) the wheel's compiled libraries.

    Raises:
        VerifyError: one line naming the failed check.
    """
    from packaging.utils import parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    wheel = Path(wheel).resolve()
    platform = platform or host_platform()
    expected = Version(expected_version)
    wheel_version = parse_wheel_filename(wheel.name)[1]
    if wheel_version != expected:
        raise VerifyError(
            f"{wheel.name} has version {wheel_version}, expected {expected}",
            "rebuild it with build_stock/build_patched",
        )
    with zipfile.ZipFile(wheel) as zf:
        import_name = _wheel_top_level(zf)
    notes, markers_checked = _check_markers(wheel, platform, markers, must_contain, series_files)
    probe = _install_and_probe(wheel, import_name, venv_dir)
    try:
        imported_ok = Version(str(probe["version"])) == expected
    except InvalidVersion:  # not PEP 440: certainly not the label we built
        imported_ok = False
    if not imported_ok:
        raise VerifyError(
            f"{wheel.name}: {import_name}.__version__ is {probe['version']!r}, expected {expected}",
            f"the base did not take {VERSION_ENV}; rebuild",
        )
    mps = probe.get("mps_built")
    if platform_spec(platform).macos and import_name == "torch" and not mps:
        raise VerifyError(
            f"{wheel.name}: torch.backends.mps.is_built() is False", "build with USE_MPS=1 on macOS >= 12.3 SDK"
        )
    return VerifyResult(wheel, probe["version"], mps, markers_checked, tuple(notes))


# --------------------------------------------------------------------------------------------
# Sources and the whole build (the command ``build`` is harness/commands/build.py)


@dataclass(frozen=True)
class Sources:
    """What the CLI builds: the two trees, the base commit and the series (None = not resolved)."""

    stock: Path | None
    patched: Path | None
    base_sha: str | None
    series: SeriesRef | None
    base: str | None = None


def series_ref(series, entry) -> SeriesRef:
    """:class:`harness.series.Series` + its ``Base`` entry -> :class:`SeriesRef` (patches of that base,
    its markers, ``files``)."""
    return SeriesRef(series.name, tuple(series.patch_paths(entry)), series.evidence.markers, tuple(entry.files or ()))


def resolve_sources(
    kind: str,
    *,
    source: Path | None = None,
    series: str | None = None,
    base: str | None = None,
    upstream: str | None = None,
    workdir: Path | str = "work",
    dry_run: bool = False,
    incremental: bool = False,
) -> Sources:
    """The trees a build of ``kind`` uses, through :mod:`harness.upstream` and :mod:`harness.series`.

    ``source``: that directory is both trees (``series`` only names the label and markers).
    ``dry_run``: existing worktrees are read, nothing is cloned, imported or applied.
    Otherwise: checkout (worktrees at the base), the submodule preflight (one line, before the
    series is applied or anything installed), then ``apply`` of the series into ``patched``
    (a patched, non-incremental build).

    Raises:
        SeriesError, UpstreamError: from series/upstream (bad series, unknown base, unreachable upstream).
        BuildError: the source lacks its submodules; the series does not apply.
    """
    if source is not None:
        src = Path(source)
        if not src.is_dir():
            raise BuildError(
                f"--source {src}: no such directory",
                "pass the root of a source tree (it holds version.txt and setup.py or pyproject.toml), "
                "or drop --source to build the worktrees of --base",
            )
        ref = None
        if series:
            loaded = series_mod.load_series(series)
            ref = series_ref(loaded, loaded.base(base))
        return Sources(src, src, git_head(src), ref, base)
    if dry_run and not (series or base):
        return Sources(None, None, None, None)
    ctx = series_mod.resolve_context(series, base, upstream, need_series=kind == "patched")
    ref = series_ref(ctx.series, ctx.entry) if ctx.series is not None else None
    if dry_run:
        stock, patched = upstream_mod.worktrees(workdir, ctx.base)
        if not stock.is_dir():
            return Sources(None, None, None, ref, ctx.base)
        return Sources(stock, patched, git_head(stock), ref, ctx.base)
    co = upstream_mod.checkout(ctx.upstream, ctx.base, workdir, ctx.series.name if ctx.series else None)
    preflight_source(co.stock)
    if kind == "patched" and not incremental:
        outcome = series_mod.apply_series(ctx.series, ctx.entry, co)
        if outcome is not None and not outcome.ok:
            raise BuildError(
                f"series {ctx.series.name} does not apply in {co.patched} ({outcome.stopped_at}: " f"{outcome.reason})",
                f"resolve it with `python -m harness apply --series {ctx.series.name}`",
            )
    return Sources(co.stock, co.patched, co.commit, ref, ctx.base)


def check_markers_declared(series: SeriesRef | None) -> None:
    """Before a build of hours: a series that changes compiled code must declare markers to verify with.

    Raises:
        VerifyError: it changes compiled files and its ``series.toml`` ``env`` is empty.
    """
    if series is None or series.markers:
        return
    compiled = [f for f in touched_files(series) if f.lower().endswith(COMPILED_SUFFIXES)]
    if compiled:
        raise VerifyError(
            f"series {series.name} changes compiled code ({', '.join(compiled[:3])}) but declares no "
            "markers (env) to verify the wheels with",
            "add to `env` in series.toml a string the patched code adds (e.g. its environment variable)",
        )


def build_and_verify(
    plan: BuildPlan, *, force: bool = False, verify: bool = True
) -> tuple[BuildResult, VerifyResult | None]:
    """:func:`build_wheel`, then (``verify``) :func:`verify_wheel` against the plan's series markers;
    a wheel that fails verification is moved aside (:func:`reject_wheel`).

    Raises:
        BuildFailed: the build failed (its log tail in ``tail``). VerifyError: the wheel is wrong.
    """
    result = build_wheel(plan, force=force)
    if not verify:
        return result, None
    series = plan.series
    try:
        verified = verify_wheel(
            result.wheel,
            plan.version,
            platform=plan.platform,
            markers=series.markers if series else (),
            must_contain=(plan.kind == "patched") if series else None,
            series_files=touched_files(series) if series else (),
        )
    except VerifyError as exc:
        moved = reject_wheel(result.wheel, plan.dist_dir)
        raise VerifyError(f"{exc.cause} (moved aside to {moved})", exc.remedy) from None
    return result, verified


def describe_without_source(
    platform: str,
    kind: str,
    *,
    jobs: int | None = None,
    build_type: str = "Release",
    workdir: Path | str = "work",
    dist_dir: Path = Path("dist"),
    overrides: Mapping[str, str] | None = None,
    sources: Sources | None = None,
    series_name: str | None = None,
) -> str:
    """``--dry-run`` with no worktree at hand: :meth:`BuildPlan.describe` of a plan whose ``<...>``
    values only the base's files decide (release, base SHA, requirements)."""
    env = platform_env(
        platform,
        jobs=jobs or os.cpu_count() or 1,
        build_type=build_type,
        launcher=find_launcher(),
        cross_compile=macos_cross_compiling(),
    )
    ref = sources.series if sources else None
    if kind == "stock":
        label = "stock.<base sha8>"
    elif ref is not None:
        label = local_version("0", "patched", series=ref).split("+", 1)[1]
    else:
        label = (re.sub(r"[-_]", ".", series_name) if series_name else "<series>") + ".<series hash8>"
    version = f"<version.txt release>+{label}"
    env.update({VERSION_ENV: version, BUILD_NUMBER_ENV: "0"})
    env.update(overrides or {})
    base = sources.base if sources and sources.base else "<base>"
    notes = [f"no worktree of {base} in {workdir} yet: values in <> come from the base's files (run checkout first)"]
    recipe = macos.recipe_for(base) if platform_spec(platform).macos and base != "<base>" else None
    if recipe is not None:  # upstream's flags of the base, under --build-env
        target = ".".join(recipe.wheel_tag.split("_")[1:3])  # macosx_14_0_arm64 -> 14.0
        env.update({k: v for k, v in recipe.env.items() if k not in (overrides or {})})
        if "MACOSX_DEPLOYMENT_TARGET" not in (overrides or {}):
            env["MACOSX_DEPLOYMENT_TARGET"] = target
        notes += recipe_notes(recipe, env, None)
    if recipe is not None:
        notes.append(f"MACOSX_DEPLOYMENT_TARGET: upstream's {recipe.wheel_tag} wheels; the base's files decide")
    elif platform_spec(platform).macos:
        notes.append("MACOSX_DEPLOYMENT_TARGET: the base's own value raised to the arm64 floor 11.0")
    notes.append(f"{CMAKE_POLICY_ENV}={CMAKE_POLICY_MINIMUM} is added unless the base's CMake files set it (CMake 4)")
    return BuildPlan(
        source_dir=Path("<source>"),
        platform=platform,
        kind=kind,
        build_type=env.get("CMAKE_BUILD_TYPE", build_type),
        jobs=jobs or os.cpu_count() or 1,
        base_sha=None,
        series=ref,
        version=version,
        env=env,
        requirements=(
            (*(f"<{f}>" for f in recipe.requirement_files), *(recipe.pins_for(_python()) or ()))
            if recipe
            else ("<pyproject.toml [build-system] requires + requirements.txt>",)
        ),
        command=recipe_command(recipe, "<build venv>/bin/python", Path(dist_dir).resolve())
        if recipe
        else pip_wheel_command("<build venv>/bin/python", "<source>", Path(dist_dir).resolve()),
        dist_dir=Path(dist_dir).resolve(),
        notes=tuple(notes),
    ).describe()
