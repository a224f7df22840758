"""Thin nox sessions: each installs what it needs and calls ``python -m harness <command>``.

The harness works without nox too; every session here but ``tests`` is ``python -m harness <session name>`` with
the session's arguments (``doctor`` adds ``--build`` of the interpreter it tests when none is given).
Arguments after ``--`` are passed through, e.g.::

    nox -s compare -- --stock torch==2.13.0 --patched torch==2.14.1 --device cpu --quick --out results/cpu-ab

Every session but ``tests`` runs in one shared environment, ``.nox/harness`` (:func:`_harness_env`): the
harness, its dependencies and, once ``doctor`` needed it, torch. ``tests`` has its own (``.nox/tests``).
Remove ``.nox/`` to start over.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import nox

# the harness sessions make no environment of their own (they share _harness_env's); tests asks for a venv
nox.options.default_venv_backend = "none"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests"]

#: torch used by the toolkit's own tests (a CPU wheel; the builds under test get their own venvs)
TEST_TORCH = "torch==2.13.0"
#: the test environment's pip, installed first when the venv's own is older (Python 3.11.7's bundled pip is
#: 23.2.1): the tests' install resolves with it, and so does every install the tests' harness runs through
#: harness.venvs.pip_command (build inputs' environments; a build venv uses its own bundled pip). pip 26.3
#: took 16 user-CPU s for the tests' install where 23.2.1 took 26 (docs/measurements.md)
TEST_PIP = "pip>=25"
#: the one environment of the harness sessions (relative to this file's folder, where nox runs sessions)
HARNESS_ENV = Path(".nox") / "harness"
#: bytecode caches on for what the sessions run (an inherited PYTHONDONTWRITEBYTECODE=1 would make every
#: ``python -m harness`` compile the package and its dependencies again: pip installs them with --no-compile)
BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}


def _env_python() -> Path:
    """The interpreter of :data:`HARNESS_ENV` (an absolute path)."""
    return HARNESS_ENV.resolve() / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def _harness_env(session: nox.Session, *requirements: str) -> str:
    """The interpreter of :data:`HARNESS_ENV`, created on first use, with ``requirements`` installed (pip
    ``--no-compile``). pip runs only when they, ``pyproject.toml`` or the interpreter nox runs under changed
    since it last installed them there (a stamp file per set of requirements)."""
    root, python = HARNESS_ENV.resolve(), _env_python()
    if not python.is_file():
        session.run(sys.executable, "-m", "venv", "--clear", str(root), external=True)
    what = [sys.version, sys.executable, Path("pyproject.toml").read_text(), *requirements]
    stamp = root / f"installed-{hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]}"
    if not stamp.is_file():
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile"]
        session.run(*pip, *requirements, external=True, silent=True)  # its output shows when it fails
        stamp.write_text(json.dumps(requirements) + "\n")
    return str(python)


def _harness(session: nox.Session, command: str, *args: str, extra: str = "", also: tuple[str, ...] = ()) -> None:
    """``python -m harness command *args *posargs`` in the shared environment: the package installed with
    ``extra``, and the requirements ``also`` (the doctor's torch)."""
    python = _harness_env(session, "-e", f".{extra}", *also)
    session.run(python, "-m", "harness", command, *args, *session.posargs, env=BYTECODE, external=True)


def _option(args: list[str], name: str) -> str | None:
    """The value of ``name`` in ``args`` (``--device mps`` or ``--device=mps``), else None."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


#: started by :func:`tests` before pytest in a new test environment, side by side: one process imports torch,
#: the other the rest of what the tests import (none of it imports torch; about 1 s longer here) and then
#: collects them, so that the pytest-xdist workers, which start together, find it all byte-compiled instead
#: of each compiling it (about 9 CPU s a worker here: docs/measurements.md). Its children's exit status is
#: pytest's business, not this warm-up's: only its deadline stops the session.
WARM_UP = """
import subprocess, sys, time
rest = "import matplotlib.pyplot, scipy.stats, hypothesis, git, rich, pytest; "
collect = "raise SystemExit(pytest.main(['--collect-only', '-qq', '-n', '0', '-p', 'no:cacheprovider']))"
children = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for code in ("import torch", rest + collect)]
deadline = time.monotonic() + 300
for child in children:
    try:
        child.wait(timeout=max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        for c in children:
            c.kill()
        sys.exit("tests: the byte-compiling warm-up ran past its 300 s deadline: " + " ".join(child.args))
"""


@nox.session(venv_backend="venv")
def tests(session: nox.Session) -> None:
    """The toolkit's own tests: ruff (lint and format, configured in pyproject.toml), then pytest."""
    # --no-compile: pip's byte-compilation of torch's ~4,000 modules is most of its install time; the
    # tests compile what they import, once (WARM_UP; harness/venvs.py does the same for the builds' venvs).
    # The environment keeps its own pip: the tests' builds install with it (harness.venvs.pip_command).
    session.install("--no-compile", TEST_PIP)  # only when the venv's pip is older: no index query otherwise
    session.install("--no-compile", "-e", ".[test]", TEST_TORCH)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # once per environment, for the whole suite (a chosen file or test would not pay back a full collection)
    warmed = Path(session.virtualenv.location) / "warmed-up"
    if not session.posargs and not warmed.is_file():
        session.run("python", "-c", WARM_UP, env=BYTECODE)
        warmed.write_text("the byte-compiling warm-up ran (noxfile.py WARM_UP)\n")
    # bytecode caches on (an inherited PYTHONDONTWRITEBYTECODE=1 makes every `python -m harness` a test
    # starts compile the package again, ~0.5 s each, and every pytest worker rewrite every test module)
    session.run("python", "-m", "pytest", *(session.posargs or ["-q"]), env=BYTECODE)


@nox.session
def doctor(session: nox.Session) -> None:
    """Two-minute self-test before any build: device health, every op under every env config, timer, toolchain.

    Tests the torch of the interpreter nox runs under when it has one; otherwise installs torch
    (PyPI's, which on macOS is the MPS build; elsewhere the small CPU wheel the tests use).
    Pass ``-- --build X`` to test another torch. ``--device mps`` off macOS stops at once, in one line.
    """
    if sys.platform != "darwin" and _option(session.posargs, "--device") == "mps":
        session.error(
            f"MPS is not available on this host ({sys.platform}): it needs an Apple-silicon Mac with macOS; "
            "run this on the Mac, or test this host with --device cpu (or cuda)"
        )
    build, torch = [], ()
    if "--build" not in session.posargs:
        if importlib.util.find_spec("torch") is not None:
            build = ["--build", f"python:{sys.executable}"]
        else:  # into the shared environment, tested there
            torch = ("torch" if sys.platform == "darwin" else TEST_TORCH,)
            build = ["--build", f"python:{_env_python()}"]
    _harness(session, "doctor", *build, also=torch)


@nox.session
def checkout(session: nox.Session) -> None:
    """Upstream (git URL, path or source archive) -> stock and patched worktrees at --base."""
    _harness(session, "checkout")


@nox.session
def init(session: nox.Session) -> None:
    """A new series from your commits on the patched worktree: patches + series.toml with every line commented."""
    _harness(session, "init")


@nox.session
def check(session: nox.Session) -> None:
    """Does the patch series apply at the base? Names each failing file and hunk."""
    _harness(session, "check")


@nox.session
def apply(session: nox.Session) -> None:
    """git am --3way the patch series into the patched worktree, one commit per patch."""
    _harness(session, "apply")


@nox.session
def refresh(session: nox.Session) -> None:
    """Write the patched worktree's commits back as the patch series (stable bytes)."""
    _harness(session, "refresh")


@nox.session
def rebase(session: nox.Session) -> None:
    """Carry the patch series onto --onto REF with 3-way merge; success adds a [[base]] variant."""
    _harness(session, "rebase")


@nox.session
def pr(session: nox.Session) -> None:
    """Pushable branch of the applied series with your git identity, and PR.md beside the worktrees."""
    _harness(session, "pr")


@nox.session
def build(session: nox.Session) -> None:
    """Wheel of either worktree (--kind stock|patched): what build_stock and build_patched run."""
    _harness(session, "build")


@nox.session
def build_stock(session: nox.Session) -> None:
    """Wheel of the base (stock worktree) into dist/, verified in a fresh venv."""
    _harness(session, "build_stock")


@nox.session
def build_patched(session: nox.Session) -> None:
    """Wheel of base + series (patched worktree, or --incremental in the stock tree), verified."""
    _harness(session, "build_patched")


@nox.session
def bench(session: nox.Session) -> None:
    """Checks + microbenchmarks of one build under every env config of a device."""
    _harness(session, "bench")


@nox.session
def compare(session: nox.Session) -> None:
    """A/B evidence: stock vs patched, interleaved fresh worker processes, results.json + report.md."""
    _harness(session, "compare")


@nox.session
def report(session: nox.Session) -> None:
    """Re-render report.md (and plots) from results/<run>/results.json alone."""
    _harness(session, "report")


@nox.session
def merge(session: nox.Session) -> None:
    """Finished runs of one series on several machines -> one merged results.json and report.md (--out DIR)."""
    _harness(session, "merge")


@nox.session
def preview(session: nox.Session) -> None:
    """report.md rendered as GitHub does (cmark-gfm) to report.html; --screenshot: report.png (Chromium)."""
    _harness(session, "preview", extra="[preview]")
