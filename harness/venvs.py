"""Torch builds under test: turn a ``--stock`` / ``--patched`` input into an interpreter.

An input is one of:

- ``python:/path/to/python``: an existing interpreter, used as it is;
- a path to a wheel (``*.whl``): installed into its own virtual environment;
- a folder that ``build --dist`` wrote (``dist/``, a path with a ``/``): the role's wheel there, chosen by
  its build manifest (:func:`wheel_in`), then used as that wheel's path;
- a requirement (``torch==2.13.0``): installed by pip into its own virtual environment.

Each environment lives in ``<cache>/envs/<slug>-<key8>`` where the key hashes the input (the
wheel's sha256 for a file, the requirement text otherwise) and the base interpreter's version.
It is created once and reused while the input is unchanged: a ``harness-input.json`` written after
a successful install records the input; a venv without it (an interrupted install) is rebuilt.
Environment creation runs under a lock of that environment (``<cache>/envs/.locks/<env>``,
:func:`harness.fsutil.exclusive_lock`); a ready environment is used without one, and a second process
that needs an environment another one is creating waits for it and shares it. An environment has no
pip of its own: this interpreter's pip installs into it (``pip --python``, pip >= 22.3,
:func:`pip_command`), which saves ``ensurepip`` (about 7 s and 15 MB per environment).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import sys
import time
import venv
from collections.abc import Collection, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from harness import children
from harness.errors import BuildInputError, HarnessError
from harness.fsutil import LockHeld, atomic_write_json, exclusive_lock, inside, sha256_file
from harness.paths import cache_dir, slug
from harness.progress import note

MARKER = "harness-input.json"
#: pip's byte-compilation of all of torch's ~4,000 modules takes about 25 s of a 35 s install (torch
#: 2.13.0 CPU wheel, one core); without it the first import writes the bytecode of the modules it loads
#: (about 2 s, once: the build's probe) and modules never imported are never compiled
NO_COMPILE = "--no-compile"
#: seconds one ``pip install`` may take: a CUDA torch wheel and its nvidia-* dependencies are about 3 GB
#: (5 minutes at 10 MB/s); a local wheel installs in under a minute
PIP_INSTALL_S = 1800.0
#: seconds a second process waits for another that is creating the same environment (its pip install
#: and a minute to spare), and between two lines saying that it still waits, and between two looks
ENV_WAIT_S = PIP_INSTALL_S + 60.0
WAIT_NOTE_S = 30.0
WAIT_POLL_S = 1.0
#: the first pip with ``--python`` (run this interpreter's pip on another environment): pip 22.3 (2022-10)
PIP_WITH_PYTHON = Version("22.3")


@dataclass(frozen=True)
class BuildInput:
    """A parsed build input. ``kind`` is ``python`` | ``wheel`` | ``requirement``; ``value`` the
    interpreter path, the wheel path (absolute) or the requirement text."""

    kind: str
    value: str
    sha256: str | None = None  # the wheel's, when kind == "wheel"

    def to_json(self) -> dict:
        return {"kind": self.kind, "value": self.value, "sha256": self.sha256}


#: the build manifest ``harness.build`` writes beside each wheel: ``<wheel>.build.json``
MANIFEST_SUFFIX = ".build.json"
#: the roles whose wheels a build manifest names (its ``inputs.kind``, harness.build.plan.KINDS)
ROLES = ("stock", "patched")


def _manifests(directory: Path) -> list[tuple[Path, dict]]:
    """(wheel, manifest ``inputs`` with ``end``) of each readable build manifest in ``directory`` whose wheel exists."""
    found = []
    for manifest in sorted(directory.glob(f"*.whl{MANIFEST_SUFFIX}")):
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            inputs = dict(data["inputs"])
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            continue
        wheel = manifest.with_name(manifest.name[: -len(MANIFEST_SUFFIX)])
        if wheel.is_file():
            found.append((wheel, {**inputs, "end": str(data.get("end") or "")}))
    return found


def _series_name(inputs: dict) -> str | None:
    series = inputs.get("series")
    return series.get("name") if isinstance(series, dict) else None


def wheel_in(
    directory: Path,
    role: str,
    *,
    series: str | None = None,
    base_sha: str | None = None,
    series_hashes: Collection[str] | None = None,
) -> Path:
    """The ``role`` wheel (``stock`` | ``patched``) that ``build --dist directory`` wrote, by its build manifest
    (``<wheel>.build.json``, :mod:`harness.build`): ``inputs.kind`` is ``role``; for ``patched``, ``inputs.series``
    names ``series`` (a name or a series folder; any when None) and, when given, has a hash of ``series_hashes``
    (the series' current state at its bases, :meth:`harness.manifest.Series.hash_of`); its
    ``inputs.base_sha`` is ``base_sha`` when given. Of several such wheels the newest (manifest ``end``) is taken
    (an older one is a build of an older state of the series); wheels of several series (no ``series`` given) or,
    for ``stock`` without ``base_sha``, of several bases are ambiguous. Unreadable manifests and manifests whose
    wheel is gone are skipped.

    Raises:
        BuildInputError: ``role`` is not stock or patched; no such wheel in ``directory`` (the line names the
            series and bases its wheels of that role are of); the choice is ambiguous.
    """
    where = f"--{role} {directory}/"
    if role not in ROLES:
        raise BuildInputError(
            f"{where} is a folder: only --stock/--patched take a build folder (its manifests say which wheel is which)",
            "pass the wheel's path (dist/torch-...whl)",
        )
    name = Path(series).name if series else None
    build = f"nox -s build_{role} -- --series SERIES --base REF --dist {directory}"
    remedy = f"build it ({build}, which writes <wheel>{MANIFEST_SUFFIX} beside it) or pass a wheel path"
    mine = [(w, i) for w, i in _manifests(directory) if i.get("kind") == role]
    if not mine:
        raise BuildInputError(f"{where} holds no {role} wheel with a build manifest (<wheel>{MANIFEST_SUFFIX})", remedy)
    if role == "patched":
        names = sorted({str(_series_name(i)) for _, i in mine})
        if name is not None:
            mine = [(w, i) for w, i in mine if _series_name(i) == name]
            if not mine:
                raise BuildInputError(
                    f"{where} holds no patched wheel of series {name} (its patched wheels: {', '.join(names)})", remedy
                )
        elif len(names) > 1:
            raise BuildInputError(
                f"{where} holds patched wheels of {len(names)} series ({', '.join(names)}): which one is ambiguous",
                "name it with --series, or pass the wheel's path",
            )
        if series_hashes is not None:
            hashes = sorted({str((i.get("series") or {}).get("hash"))[:8] for _, i in mine})
            mine = [(w, i) for w, i in mine if (i.get("series") or {}).get("hash") in series_hashes]
            if not mine:
                raise BuildInputError(
                    f"{where} holds patched wheels of {name or 'the series'} built from another state of the series "
                    f"(hash {', '.join(hashes)}, not {', '.join(sorted(h[:8] for h in series_hashes))})",
                    remedy,
                )
    bases = sorted({str(i.get("base_sha"))[:12] for _, i in mine})
    if base_sha is not None:
        mine = [(w, i) for w, i in mine if i.get("base_sha") == base_sha]
        if not mine:
            raise BuildInputError(
                f"{where} holds no {role} wheel of base {base_sha[:12]}"
                + (" (the --patched wheel's base)" if role == "stock" else "")
                + f"; its {role} wheels are of base {', '.join(bases)}",
                remedy,
            )
    elif role == "stock" and len(bases) > 1:
        raise BuildInputError(
            f"{where} holds stock wheels of {len(bases)} bases ({', '.join(bases)}): which one is ambiguous",
            "pass --patched as a wheel with its build manifest (its base picks the stock wheel), or the wheel's path",
        )
    return max(mine, key=lambda found: (found[1]["end"], found[0].name))[0]


def parse_input(
    text: str,
    role: str,
    *,
    series: str | None = None,
    base_sha: str | None = None,
    series_hashes: Collection[str] | None = None,
) -> BuildInput:
    """Parse one ``--stock`` / ``--patched`` value; a build folder becomes its role's wheel (:func:`wheel_in`,
    with ``series``, ``base_sha`` and ``series_hashes``) and is then parsed as that wheel's path.

    Raises:
        BuildInputError: the interpreter or wheel does not exist, the folder holds no wheel of the role or an
            ambiguous choice, or the text is neither a path nor a valid requirement.
    """
    if text.startswith("python:"):
        path = Path(text[len("python:") :]).expanduser()
        if not path.is_file():
            raise BuildInputError(
                f"--{role}: interpreter {path} does not exist",
                "pass python:/absolute/path/to/python of an environment that has torch",
            )
        return BuildInput("python", str(path))
    if text.endswith(".whl") or "/" in text or text.startswith("."):
        path = Path(text).expanduser().resolve()
        if path.is_dir():
            path = wheel_in(path, role, series=series, base_sha=base_sha, series_hashes=series_hashes)
        if not path.exists() and (text.endswith("/") or path.suffix != ".whl"):
            raise BuildInputError(
                f"--{role}: build folder {path} does not exist",
                f"build the wheels into it first (nox -s build_stock / build_patched -- --dist {text}), or pass a "
                "wheel, a requirement like torch==2.13.0 or python:/path/to/python",
            )
        if not path.is_file():
            raise BuildInputError(
                f"--{role}: wheel {path} does not exist",
                "build it first (nox -s build_stock / build_patched) or pass a requirement like torch==2.13.0",
            )
        if path.suffix != ".whl":
            raise BuildInputError(
                f"--{role}: {path} is not a wheel (.whl)", "pass a .whl file, a requirement, or python:/path"
            )
        return BuildInput("wheel", str(path), sha256_file(path))
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise BuildInputError(
            f"--{role}: {text!r} is neither a wheel path nor a requirement ({str(exc).splitlines()[0]})",
            "pass e.g. torch==2.13.0, ./dist/torch-...whl, dist/ (a build folder) or python:/path/to/python",
        ) from None
    return BuildInput("requirement", str(req))


def manifest_base(build: BuildInput | None) -> str | None:
    """``inputs.base_sha`` of the build manifest beside a wheel input, else None."""
    if build is None or build.kind != "wheel":
        return None
    try:
        data = json.loads(Path(build.value + MANIFEST_SUFFIX).read_text(encoding="utf-8"))
        base = data["inputs"]["base_sha"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return base if isinstance(base, str) else None


def parse_inputs(
    texts: Mapping[str, str], series: str | None = None, series_hashes: Collection[str] | None = None
) -> dict[str, BuildInput]:
    """Parse a run's ``{role: text}`` inputs (:func:`parse_input`), ``patched`` first: when ``stock`` is a build
    folder, the base of the patched wheel's build manifest picks its stock wheel, so a pair never mixes bases;
    a patched wheel from a folder is one of ``series`` at one of ``series_hashes`` (when given).
    Returns the inputs in the order given.

    Raises:
        BuildInputError: as :func:`parse_input`.
    """
    parsed: dict[str, BuildInput] = {}
    for role in sorted(texts, key=lambda r: r != "patched"):
        base = manifest_base(parsed.get("patched")) if role == "stock" else None
        parsed[role] = parse_input(texts[role], role, series=series, base_sha=base, series_hashes=series_hashes)
    return {role: parsed[role] for role in texts}


def env_key(build: BuildInput, base_python: str = sys.executable) -> str:
    """A stable key for the environment of ``build`` created from ``base_python``."""
    identity = build.sha256 if build.kind == "wheel" else build.value
    text = json.dumps([build.kind, identity, sys.version_info[:2], str(Path(base_python).resolve())])
    return hashlib.sha256(text.encode()).hexdigest()


def venv_python(root: Path) -> Path:
    """The interpreter of the virtual environment at ``root`` (``bin/python``; ``Scripts/python.exe`` on Windows)."""
    return root / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def pip_command(python: Path | str) -> list[str]:
    """``[this interpreter, -m, pip, --python, python]``: this interpreter's pip acting on the environment of
    ``python`` (its ``install`` puts packages there), so that environments need no pip of their own.

    Raises:
        BuildInputError: this interpreter has no pip, or one older than 22.3 (no ``--python``).
    """
    try:
        version = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        version = None
    try:
        too_old = version is None or Version(version) < PIP_WITH_PYTHON
    except InvalidVersion:
        too_old = True
    if too_old:
        raise BuildInputError(
            f"pip {version or '(none)'} of {sys.executable} cannot install into another environment "
            f"(pip --python needs pip >= {PIP_WITH_PYTHON})",
            (
                f"{sys.executable} -m pip install --upgrade 'pip>={PIP_WITH_PYTHON}'"
                if version
                else f"{sys.executable} -m ensurepip --upgrade && {sys.executable} -m pip install --upgrade "
                f"'pip>={PIP_WITH_PYTHON}'"
            ),
        )
    return [sys.executable, "-m", "pip", "--python", str(python)]


def ensure_interpreter(build: BuildInput, *, envs_dir: Path | None = None) -> tuple[Path, bool]:
    """Return (interpreter, reused) for ``build``, creating its venv if needed.

    Raises:
        BuildInputError: pip cannot install the input (the message quotes pip's own cause), or this
            interpreter's pip is older than 22.3 (:func:`pip_command`).
    """
    if build.kind == "python":
        return Path(build.value), True
    envs_dir = envs_dir or cache_dir() / "envs"
    name = slug(Path(build.value).name if build.kind == "wheel" else build.value)[:60]
    root = inside(envs_dir, f"{name}-{env_key(build)[:8]}", "environment")
    python = venv_python(root)
    if _ready(root, python, build):  # a ready environment needs no lock: it is only read
        return python, True
    pip = pip_command(python)  # before the lock and the environment: an old pip is said at once
    # one lock per environment: a compare creating one does not block another that uses ready ones
    with creation_lock(inside(envs_dir, f".locks/{root.name}", "environment lock"), root):
        if _ready(root, python, build):
            return python, True
        if root.exists():
            shutil.rmtree(root)  # interrupted or stale: rebuild from scratch
        note(f"creating environment {root} for {build.value}")
        venv.EnvBuilder(with_pip=False, clear=True).create(root)
        target = build.value
        cmd = [*pip, "install", "--disable-pip-version-check", "--no-input", NO_COMPILE, target]
        proc = children.run(
            cmd,
            what=f"pip install {target}",
            deadline=PIP_INSTALL_S,
            remedy="check the network (pip download it by hand) and run the command again",
        )
        if proc.returncode != 0:
            log = root.parent / f"{root.name}.pip.log"  # with_suffix would cut a version's dots
            log.write_text(proc.stdout + proc.stderr)
            shutil.rmtree(root, ignore_errors=True)
            remedy = (
                "check that the file is a complete wheel built for this Python and platform"
                if build.kind == "wheel"
                else "check that the version exists (pip index versions torch)"
            )
            raise BuildInputError(
                f"pip could not install {target}: {_pip_cause(proc.stdout + proc.stderr)}",
                f"{remedy}; pip's log: {log}",
            )
        atomic_write_json(root / MARKER, {"input": build.to_json()})
    return python, False


@contextmanager
def creation_lock(
    lock_dir: Path,
    root: Path,
    kind: str = "environment",
    wait_s: float | None = None,
    error: type[HarnessError] = BuildInputError,
) -> Iterator[None]:
    """Hold the lock of the ``kind`` ``root`` (an environment of this module, a build venv of
    :func:`harness.build.wheel.ensure_build_venv`) for its creation. While another process holds it (a second
    ``compare`` with the same input, a second ``build`` with the same build requirements, started before the
    first one's is ready), wait for it: a line when the wait starts and every :data:`WAIT_NOTE_S`, up to
    ``wait_s`` seconds (default :data:`ENV_WAIT_S`: longer than the creation's own deadlines); the caller then
    finds it ready and shares it (or, when the other process failed or died, creates it itself).

    Raises:
        error (default BuildInputError): the other process still holds the lock after ``wait_s`` seconds.
    """
    wait_s = ENV_WAIT_S if wait_s is None else wait_s
    waited_from = said = None
    while True:
        held = ExitStack()
        try:
            held.enter_context(exclusive_lock(lock_dir, f"creating {root.name}"))
        except LockHeld as exc:
            now = time.monotonic()
            waited_from = now if waited_from is None else waited_from
            if now - waited_from >= wait_s:
                raise error(
                    f"waited {wait_s:g} s for another process creating {kind} {root}: {exc.cause}", exc.remedy
                ) from None
            if said is None or now - said >= WAIT_NOTE_S:
                note(f"waiting for {kind} {root.name}: {exc.cause} ({now - waited_from:.0f} s of {wait_s:g} s)")
                said = now
            time.sleep(WAIT_POLL_S)
            continue
        with held:
            if waited_from is not None:
                note(f"{kind} {root.name}: its lock is free after {time.monotonic() - waited_from:.0f} s")
            yield
        return


def _ready(root: Path, python: Path, build: BuildInput) -> bool:
    """The environment was installed completely for ``build`` (its marker is written last)."""
    marker = root / MARKER
    if not (marker.is_file() and python.is_file()):
        return False
    try:
        return json.loads(marker.read_text()).get("input") == build.to_json()
    except (OSError, ValueError, RecursionError):
        return False


def _pip_cause(output: str) -> str:
    """The most telling line of pip's output: a full disk first (pip reports it as a bare
    "ERROR: Exception:" over a traceback), else its ERROR line, else the last non-empty line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if any("No space left on device" in line for line in lines):
        return "no space left on device (a torch build needs up to ~6 GB in the cache; see `df -h`)"
    errors = [line for line in lines if line.startswith("ERROR:") and line != "ERROR: Exception:"]
    return (errors[0] if errors else (lines[-1] if lines else "no output"))[:300]
