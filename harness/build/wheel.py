"""One wheel build: the cached build venv, the base's command with its full log, the build manifest.

Pipeline of one build (:func:`build_wheel`, after the workflow's preflight, :mod:`harness.build.preflight`):
a dedicated build virtual environment with the base's build requirements (``pyproject.toml``
``[build-system] requires`` + ``requirements.txt``) -> the base's own build command (PEP 517:
``python -m pip wheel . --no-build-isolation --no-deps -v``; in-tree, so the CMake build
directory survives for ``--incremental``) -> the full log to a file -> a build manifest JSON
beside the wheel. A build whose inputs equal an existing manifest's is skipped. A build interrupted
midway (Ctrl-C, a kill) resumes when run again: the CMake build directory is in-tree and kept, so
only the translation units not finished are compiled.

Commands are argument lists, never shell strings; git runs through :func:`harness.upstream.git_run`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from harness import macos, progress
from harness.build.convention import VERSION_ENV
from harness.build.plan import BuildPlan, build_venv_path
from harness.build.platforms import platform_spec
from harness.build.preflight import (
    METAL_PROBES,
    check_metal,
    first_line,
    metal_capability,
    metal_probes_of,
    preflight_venv,
)
from harness.errors import BuildError
from harness.fsutil import atomic_write_json, exclusive_lock, open_write, sha256_file
from harness.paths import cache_dir, slug
from harness.upstream import git_run
from harness.venvs import PIP_INSTALL_S, creation_lock, venv_python

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


#: seconds a second build waits for the build venv another is creating: its two steps (``venv``, then the
#: pip install), each under :data:`harness.venvs.PIP_INSTALL_S`, and a minute to spare
BUILD_VENV_WAIT_S = 2 * PIP_INSTALL_S + 60.0


def ensure_build_venv(requirements: Sequence[str], log_path: Path) -> Path:
    """A virtual environment holding ``requirements`` (cached at :func:`build_venv_path`), created once: a
    second process that needs it while another creates it waits and shares it
    (:func:`harness.venvs.creation_lock`, up to :data:`BUILD_VENV_WAIT_S`). Each creation step (``python -m
    venv``, ``pip install``) runs under :data:`harness.venvs.PIP_INSTALL_S`.

    Returns:
        the venv directory.
    Raises:
        BuildFailed: creation or install failed (with the pip log).
        BuildError: a step ran past its deadline, or another process was still creating it after
            :data:`BUILD_VENV_WAIT_S` seconds.
    """
    venv = build_venv_path(requirements)
    stamp = venv / ".harness-complete"
    if stamp.is_file():
        return venv
    # a second build with the same requirements (stock and patched built at once) waits for it and shares it
    with creation_lock(venv.parent / f".{venv.name}", venv, "build venv", BUILD_VENV_WAIT_S, BuildError):
        if stamp.is_file():
            return venv
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as log:
            progress.note(f"build venv: creating {venv} ({len(requirements)} requirements)")
            steps = [[sys.executable, "-m", "venv", "--clear", str(venv)]]
            if requirements:
                steps.append([str(venv_python(venv)), "-m", "pip", "install", *requirements])
            for step in steps:
                if _run_logged(step, log, deadline=PIP_INSTALL_S) != 0:
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
        rc, line = first_line([exe, *cmd[1:]], env)
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
    """The build's environment (this process's, the build venv first on PATH, the plan's variables), checked
    for the CMake the venv installed (:func:`~harness.build.preflight.preflight_venv`), and the toolchain
    versions it finds.

    Raises:
        BuildError: the build venv's CMake is older than the base requires.
    """
    env = dict(os.environ)
    env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(venv)
    env.update(plan.env)
    preflight_venv(plan, env["PATH"])
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
    """Run one build: build venv, the base's command, log, manifest (the workflow's preflight comes first,
    :func:`harness.workflow.build_and_verify`).

    Incremental (``plan.incremental``): the series is ``git apply``-ed to the already-built stock
    tree, the same command rebuilds in its build directory (only translation units whose sources
    changed recompile), and the series is reverted afterwards (even on failure). The label change
    costs PyTorch no recompiles: CMake takes only major.minor.patch of ``PYTORCH_BUILD_VERSION``
    into ``torch/version.h`` (``caffe2_parse_version_str``, v2.6.0 CMakeLists.txt), the same for
    both labels. A later stock rebuild recompiles the units the series touched.

    Args:
        plan: from :func:`harness.build.plan.plan_build`.
        dist_dir: default ``plan.dist_dir``.
        force: rebuild even when an identical manifest exists.

    Raises:
        BuildError: the build venv's CMake is too old; an incremental build without a stock build tree; a
            build venv step past its deadline, or another process still creating it (:func:`ensure_build_venv`).
        BuildFailed: the build ran and failed (``.tail`` holds the last 40 log lines, ``.log_path`` the log).
    """
    dist_dir = Path(dist_dir or plan.dist_dir).resolve()
    if dist_dir != plan.dist_dir:
        plan = dataclasses.replace(plan, dist_dir=dist_dir, command=plan.command_in(dist_dir))
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = dist_dir / "logs" / f"{plan.kind}-{slug(plan.version)}-{stamp}.log"
    with exclusive_lock(cache_dir() / "locks" / slug(str(plan.source_dir)), f"build {plan.kind} {plan.source_dir}"):
        venv = ensure_build_venv(plan.requirements, log_path)
        env, toolchain = _build_environment(plan, venv)
        capability = host_metal(plan, env["PATH"], dist_dir)
        inputs = plan.inputs(toolchain)
        skipped = None if force else _identical_build(dist_dir, inputs, plan.kind)
        if skipped is not None:
            return skipped
        command = [str(venv_python(venv)) if part == "{python}" else part for part in plan.command]
        wheel, ran = _run_build(plan, command, env, log_path)
        return _write_manifest(plan, wheel, ran, inputs, toolchain, capability)


def _identical_build(dist_dir: Path, inputs: dict, kind: str) -> BuildResult | None:
    """The earlier build with the same ``inputs`` (:func:`find_identical`) as a skipped :class:`BuildResult`."""
    existing = find_identical(dist_dir, inputs)
    if existing is None:
        return None
    data = json.loads(existing.read_text())
    wheel = existing.with_name(existing.name[: -len(".build.json")])
    progress.note(f"build {kind}: inputs identical to {existing.name}; skipped (use --force to rebuild)")
    return BuildResult(wheel, existing, Path(data.get("log", "")), True, 0.0, 0)


@dataclass(frozen=True)
class _Ran:
    """When a build command ran, and its log."""

    started: _dt.datetime
    ended: _dt.datetime
    duration_s: float
    log: Path


def _run_build(plan: BuildPlan, command: Sequence[str], env: Mapping[str, str], log_path: Path) -> tuple[Path, _Ran]:
    """Run the build ``command`` in the source tree (the series applied first and reverted after, for an
    incremental build) with its output to ``log_path``; the wheel it wrote.

    Raises:
        BuildError: an incremental build without the stock build tree; the series does not apply; no wheel of
            the plan's version. BuildFailed: the command failed.
    """
    if plan.incremental and not (plan.source_dir / "build").is_dir():
        raise BuildError(
            f"{plan.source_dir} has no build tree to reuse",
            "run build_stock first, then build_patched --incremental",
        )
    dist_dir = plan.dist_dir
    dist_dir.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
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
    ran = _Ran(started, _dt.datetime.now(_dt.UTC), time.monotonic() - t0, log_path)
    if rc != 0:
        raise BuildFailed(f"{plan.kind} build failed (exit {rc})", log_path)
    new = [p for p in dist_dir.glob("*.whl") if before.get(p.name) != p.stat().st_mtime_ns]
    return _pick_wheel(new, plan.version, log_path), ran


def _write_manifest(
    plan: BuildPlan,
    wheel: Path,
    ran: _Ran,
    inputs: dict,
    toolchain: Mapping[str, str],
    capability: Mapping[str, str] | None,
) -> BuildResult:
    """Write ``<wheel>.build.json`` (inputs, toolchain, macOS record, times, log, the wheel's sha256)."""
    units = count_compiled_units(ran.log.read_text(errors="replace"))
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
            "start": ran.started.isoformat(timespec="seconds"),
            "end": ran.ended.isoformat(timespec="seconds"),
            "duration_s": round(ran.duration_s, 3),
            "log": str(ran.log),
            "wheel": wheel.name,
            "wheel_sha256": sha256_file(wheel),
            "compiled_units": units,
        },
    )
    progress.note(f"build {plan.kind}: {wheel.name} in {ran.duration_s:.1f} s (manifest {manifest.name})")
    return BuildResult(wheel, manifest, ran.log, False, ran.duration_s, units)


def _pick_wheel(candidates: list[Path], version: str, log_path: Path) -> Path:
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


def holds_builds(dist: Path) -> bool:
    """A ``--dist`` folder written before output folders were marked (:mod:`harness.outdir`): it holds a
    build manifest of ours."""
    for manifest in dist.glob("*.whl.build.json"):
        try:
            data = json.loads(manifest.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and "schema" in data and "inputs" in data:
            return True
    return False
