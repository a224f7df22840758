"""Verification of a built wheel: installed into a fresh virtual environment it imports, its version
carries the label, MPS is built (macOS), and its compiled libraries contain (patched) or lack (stock)
the series' marker strings. A wheel that fails is moved aside (:func:`reject_wheel`).
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from harness import children
from harness.build.convention import VERSION_ENV
from harness.build.plan import BuildPlan, SeriesRef
from harness.build.platforms import compiles_on, host_platform, platform_spec
from harness.errors import BuildError
from harness.fsutil import inside
from harness.series import paths_in_patch
from harness.venvs import PIP_INSTALL_S, pip_command, venv_python


class VerifyError(BuildError):
    """A built wheel that fails verification (one line)."""

    exit_code = 1


_PROBE = r"""
import importlib, json, sys
mod = importlib.import_module(sys.argv[1])
out = {"version": str(getattr(mod, "__version__", "")), "file": getattr(mod, "__file__", None)}
if sys.argv[1] == "torch":
    out["mps_built"] = bool(mod.backends.mps.is_built())
with open(sys.argv[-1], "a") as fh:  # the answer channel (harness.bench.channel): ``--answer FILE``
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
        for name in paths_in_patch(Path(patch).read_text(encoding="utf-8", errors="surrogateescape")):
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
    compiles one of ``series_files`` (:func:`~harness.build.platforms.compiles_on`; no files = yes), every marker is in
    (True) or absent from (False) the wheel's compiled libraries.

    Raises:
        VerifyError: one line naming the failed check.
    """
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


def verify_built(plan: BuildPlan, wheel: Path) -> VerifyResult:
    """:func:`verify_wheel` of the wheel a plan built, against the plan's series (markers present in
    patched, absent from stock); a wheel that fails is moved aside (:func:`reject_wheel`).

    Raises:
        VerifyError: the wheel is wrong (the cause names where it was moved).
    """
    series = plan.series
    try:
        return verify_wheel(
            wheel,
            plan.version,
            platform=plan.platform,
            markers=series.markers if series else (),
            must_contain=(plan.kind == "patched") if series else None,
            series_files=touched_files(series) if series else (),
        )
    except VerifyError as exc:
        moved = reject_wheel(wheel, plan.dist_dir)
        raise VerifyError(f"{exc.cause} (moved aside to {moved})", exc.remedy) from None
