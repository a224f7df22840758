"""Preflight: refuse a build early, in one line, before anything is installed or compiled.

The checks, each a :class:`Check` (``doctor`` shows the same ones as rows, :func:`toolchain_checks`):
the source's submodules (:func:`preflight_source`), this Mac's macOS against what the base needs
(:func:`refuse_host`, before any checkout), a C++ compiler, CMake and the free disk
(:func:`preflight_build`, before the build venv), and the CMake the build venv installed
(:func:`preflight_venv`, once it exists). The workflow (:mod:`harness.workflow`) runs each once per build.
The Metal toolchain is reported, never refused: a build without it compiles its shaders at run time.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from harness import children, macos
from harness.build.convention import (
    CMAKE_POLICY_ENV,
    CMAKE_POLICY_MINIMUM,
    base_release,
    build_requirements,
    cmake_policy_env,
    cmake_required,
    macos_deployment_target,
    required_free_bytes,
)
from harness.build.plan import BuildPlan
from harness.build.platforms import GIB, MACOS_ARM64_FLOOR, platform_spec
from harness.errors import BuildError, HarnessError, UsageError
from harness.upstream import missing_submodules as upstream_missing


def missing_submodules(source_dir: Path) -> list[str]:
    """Submodules the source lacks (:func:`harness.upstream.missing_submodules`: ``.gitmodules``, or
    PyTorch's default list for a tree without one, like the Debian tarball)."""

    return list(upstream_missing(Path(source_dir)))


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


def requires_cmake(requirements: Sequence[str]) -> bool:
    """Whether the build requirements install CMake (into the build venv, whose own the build then uses)."""
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


_CMAKE_VERSION_RE = re.compile(r"cmake version (\d+(?:\.\d+)*)")

TOOL_PROBE_S = 120.0


def first_line(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str]:
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
    ``cmake_minimum_required`` (:func:`~harness.build.convention.cmake_required`) and what CMake 4 means
    for the base (:func:`~harness.build.convention.cmake_policy_env`).

    ``venv_installs``: the base's build requirements install CMake into the build venv, and the build
    uses that one (the newest on PyPI), so one missing from or too old on ``path`` is no failure. A
    version that cannot be read is not held against the build.
    """
    exe = shutil.which("cmake", path=path)
    if exe is None and not venv_installs:
        error = BuildError(
            "cmake not found on PATH or in the build environment",
            "`python -m pip install cmake`, or " + platform_spec(platform).install["cmake"],
        )
        return Check("cmake", False, error.line(), error)
    version = None
    if exe is not None:
        rc, first = first_line([exe, "--version"])
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
    rc, line = first_line([xcrun, "metal", "--version"])
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
            rc, _ = first_line([xcrun, "metal", f"-std={std}", "-c", str(probe), "-o", os.devnull])
            out[name] = "YES" if rc == 0 else "NO"
    return out | {"how": "xcrun metal -std=metal3.1 / -std=metal4.0 on cmake/Metal.cmake's probe shaders"}


def host_need_of(platform: str, source_dir: Path | None = None, base: str | None = None) -> macos.HostNeed | None:
    """What the base needs of the Mac (:func:`harness.macos.host_need`): from the base's files when
    ``source_dir`` is given (``version.txt``,
    :func:`~harness.build.convention.macos_deployment_target`), else from the recipe of
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
    checked with ``shutil.disk_usage`` where the build writes). ``cmake=False`` when the base's build
    requirements install CMake into the build venv (:func:`requires_cmake`; :func:`preflight_venv` checks
    that one).

    Raises:
        BuildError: one line naming what is missing and how to install it on this platform.
    """
    cxx = plan.env.get("CXX") or os.environ.get("CXX")
    checks = [check_compiler(plan.platform, path, cxx)]
    if cmake:
        checks.append(check_cmake(plan.platform, path, plan.source_dir))
    where = next(p for p in (plan.source_dir, plan.dist_dir, *plan.dist_dir.parents) if p.exists())
    checks.append(check_disk(plan.platform, where, plan.min_free_bytes, plan.free_bytes_source))
    for check in checks:
        if check.error is not None:
            raise check.error


def preflight_build(plan: BuildPlan) -> None:
    """The build's preflight, once, before its build venv is made: :func:`preflight_tools` on this process's
    ``PATH`` (CMake there only when the base's build requirements do not install it, :func:`requires_cmake`).

    Raises:
        BuildError: one line naming what is missing and how to install it on this platform.
    """
    preflight_tools(plan, os.environ.get("PATH", ""), cmake=not requires_cmake(plan.requirements))


def preflight_venv(plan: BuildPlan, path: str) -> None:
    """Once the build venv exists: the CMake its requirements installed (first on ``path``) against the
    base's ``cmake_minimum_required``. Nothing to check when the requirements do not list CMake
    (:func:`preflight_tools` checked the one on the host's PATH).

    Raises:
        BuildError: one line (:func:`check_cmake`).
    """
    if requires_cmake(plan.requirements):
        check = check_cmake(plan.platform, path, plan.source_dir)
        if check.error is not None:
            raise check.error


def toolchain_checks(platform: str, source_dir: Path | None) -> list[tuple[str, bool, str]]:
    """``(item, ok, one-line detail)`` for ``doctor``: compiler, CMake (its version against the base's
    needs when ``source_dir`` is given), the Metal toolchain (macos-arm64 only), free disk (against
    :func:`~harness.build.convention.required_free_bytes` for the base, else the platform's estimate).

    The same checks as a build's preflight (:func:`preflight_tools`, :func:`refuse_host`), on this
    process's ``PATH``; a missing tool is ``ok=False`` with the remedy in the detail, never an exception.

    Raises:
        UsageError: unknown platform.
    """
    spec = platform_spec(platform)
    path = os.environ.get("PATH", "")
    root = Path(source_dir).resolve() if source_dir is not None else None
    checks = [check_compiler(platform, path, os.environ.get("CXX"))]
    try:
        venv_installs = root is not None and requires_cmake(build_requirements(root))
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
