"""Build platforms as a registry: one :class:`Platform` record per ``--platform``, its build variables
(:func:`platform_env`), the host's platform and compiler cache, ``--build-env`` overrides, and which
upstream files each platform compiles.

Pure functions of their arguments and the host; nothing here reads a base's files (that is
:mod:`harness.build.convention`) or runs a tool (:mod:`harness.build.preflight`).
"""

from __future__ import annotations

import platform as _platform
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness.errors import UsageError
from harness.numbers import Bound, number

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

#: bytes in a GiB (the unit of the free-disk estimates and of :data:`harness.build.convention.FREE_GIB_ENV`)
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
#: archs), plus headroom for the wheel, the build venv and the compiler cache.
#: :data:`harness.build.convention.FREE_GIB_ENV` overrides them. macos-arm64 follows ``.ci/wheel/mac/``
#: and ``.ci/pytorch/macos-build.sh`` (see :func:`platform_env`).
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


_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
        macos_deployment_target: ``MACOSX_DEPLOYMENT_TARGET`` (macOS only), see
            :func:`harness.build.convention.macos_deployment_target`.
        cuda_arch_list: the platform's GPU architecture list (``TORCH_CUDA_ARCH_LIST`` on linux-cuda;
            default :attr:`Platform.arch_list`'s).
        launcher: compiler cache program (``ccache``/``sccache``) for ``CMAKE_<LANG>_COMPILER_LAUNCHER``.
        cross_compile: macos-arm64 only: the build host is not arm64 (:func:`macos_cross_compiling`).

    macos-arm64 sets ``ARCHFLAGS=-arch arm64`` on every build and ``CMAKE_OSX_ARCHITECTURES=arm64`` only
    when cross-compiling, as upstream's wheel build and CI do; on a native arm64 host that variable would
    send v2.6.0 down its cross-compiling branch (docs/building.md, "macOS arm64: ARCHFLAGS and
    CMAKE_OSX_ARCHITECTURES").

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
