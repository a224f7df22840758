"""The base's build convention: what its own files say about building it.

Its release (``version.txt``), the variable through which it takes its version, its macOS deployment
target, what CMake 4 means for it, its build requirements and wheel command (or upstream's macOS wheel
build of it, :mod:`harness.macos`), the CMake version it asks for, and the free disk a build of it
needs. Reads files; runs nothing.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness import macos
from harness.build.platforms import GIB, MACOS_ARM64_FLOOR, platform_spec
from harness.errors import BuildError
from harness.numbers import Bound, number

#: Version variable the base must read (PyTorch: ``tools/generate_torch_version.py``).
VERSION_ENV = "PYTORCH_BUILD_VERSION"
BUILD_NUMBER_ENV = "PYTORCH_BUILD_NUMBER"

#: For other bases: this many times the source tree's size, at least 512 MiB.
OTHER_DISK_FACTOR = 20
OTHER_DISK_MIN = 512 << 20
#: GiB of free disk a build needs, overriding :func:`disk_estimate` (for a user who measured their
#: own build, and for tests that provoke the "disk nearly full" refusal with a real free-space check).
FREE_GIB_ENV = "TORCH_PATCH_HARNESS_BUILD_FREE_GIB"
#: the range of $TORCH_PATCH_HARNESS_BUILD_FREE_GIB (GiB: up to an exbibyte, which int() of bytes holds)
FREE_GIB_BOUND = Bound(0, 10**9, unit="GiB")


def base_release(source_dir: Path) -> str:
    """``version.txt`` of the base normalised to its release (``2.6.0a0`` -> ``2.6.0``).

    Raises:
        BuildError: version.txt missing or not a PEP 440 version.
    """
    path = Path(source_dir) / "version.txt"
    try:
        return Version(path.read_text().strip()).base_version
    except OSError:
        raise BuildError(f"{path} is missing", "point --source/--upstream at the base's source root") from None
    except InvalidVersion:
        raise BuildError(f"{path} is not a PEP 440 version", "check the base's version.txt") from None


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

    Rule: a base whose top-level ``CMakeLists.txt`` or ``cmake/**/*.cmake`` mentions
    ``CMAKE_POLICY_VERSION_MINIMUM`` handles CMake 4 itself (nothing is set); any other base with a
    ``CMakeLists.txt`` gets ``CMAKE_POLICY_VERSION_MINIMUM=3.5`` in its build environment (PyTorch's
    ``tools/setup_helpers/cmake.py`` passes every ``CMAKE_*`` variable to CMake as ``-D``). The variable
    changes only projects that declare a policy version below 3.5, so CMake 3.x ignores it.
    ``--build-env CMAKE_POLICY_VERSION_MINIMUM=...`` overrides it. Why (CMake 4.0, v2.6.0's submodules,
    upstream's fix for 2.7): docs/building.md, "CMake 4 and CMAKE_POLICY_VERSION_MINIMUM".

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


def python_minor() -> str:
    """This interpreter's ``major.minor`` (the key of a recipe's pins)."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def recipe_requirements(recipe: macos.WheelRecipe, source_dir: Path, python: str | None = None) -> tuple[str, ...]:
    """What upstream's macOS wheel build of the base installs: its requirement files (in the recipe's
    order) then the scripts' pins for this Python (``major.minor``; :meth:`~harness.macos.WheelRecipe.pins_for`).

    Raises:
        BuildError: the scripts name no pins for this Python (upstream does not build that wheel).
    """
    python = python or python_minor()
    pins = recipe.pins_for(python)
    if pins is None:
        known = ", ".join(k for k in recipe.pins if k != "*")
        raise BuildError(
            f"upstream's {recipe.name} macOS wheel build has no pins for Python {python} ({recipe.citation})",
            f"run the harness with one of Python {known}",
        )
    reqs = [line for rel in recipe.requirement_files for line in _requirement_lines(Path(source_dir) / rel)]
    return tuple(dict.fromkeys([*reqs, *pins]))


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
        return platform_spec(platform).disk_estimate, "the PyTorch estimate, harness.build.platforms.REGISTRY"
    root = Path(source_dir)
    pytorch = (root / "aten").is_dir() and (root / "torch").is_dir()
    return disk_estimate(root, platform), (
        "the PyTorch estimate, harness.build.platforms.REGISTRY"
        if pytorch
        else f"{OTHER_DISK_FACTOR}x the source tree's size"
    )


def disk_estimate(source_dir: Path, platform: str) -> int:
    """Free bytes a build of this source needs (see
    :attr:`harness.build.platforms.Platform.disk_estimate`, :data:`OTHER_DISK_FACTOR`)."""
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


_CMAKE_MIN_RE = re.compile(r"^\s*cmake_minimum_required\s*\(\s*VERSION\s+(\d+(?:\.\d+)*)", re.IGNORECASE | re.MULTILINE)


def cmake_required(source_dir: Path) -> str | None:
    """The CMake version the base asks for: ``cmake_minimum_required(VERSION X ...)`` of its top-level
    ``CMakeLists.txt`` (v2.6.0: 3.18), or None when it has none."""
    path = Path(source_dir) / "CMakeLists.txt"
    match = _CMAKE_MIN_RE.search(path.read_text(errors="replace")) if path.is_file() else None
    return match.group(1) if match else None


def command_for(source_dir: Path, python: str, dist_dir: Path, recipe: macos.WheelRecipe | None) -> tuple[str, ...]:
    """The build command: upstream's macOS wheel command of the base (:func:`recipe_command`) when it has
    a recipe, else the base's own convention (:func:`build_command`)."""
    return recipe_command(recipe, python, dist_dir) if recipe else build_command(source_dir, python, dist_dir)
