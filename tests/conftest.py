"""Shared fixtures: a tiny generated upstream, a project folder with patches/, Debian's real PyTorch source.

Every test runs in its own harness cache (``$TORCH_PATCH_HARNESS_CACHE``, set by the autouse
:func:`isolated_cache`; only its build venvs are the run's, :func:`build_venvs`), never the user's;
module- and session-scoped fixtures, which are set up before any test's own cache exists, get one
private cache for the whole session (:func:`session_cache`). The one thing read from outside is
Debian's source tarball: when the user's cache (or the cache named by ``$TORCH_PATCH_HARNESS_CACHE``
when the tests started) already holds it, it is hard-linked (or copied) into the run's cache
(:func:`run_cache`, where it is imported once for all pytest-xdist workers) and never written there."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from harness import cli
from harness.paths import CACHE_ENV

REPO = Path(__file__).resolve().parent.parent

#: the harness cache outside the tests (the user's): read once, for Debian's source tarball only
OUTER_CACHE = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "torch-patch-harness")

AUTHOR = {
    "GIT_AUTHOR_NAME": "Patch Author",
    "GIT_AUTHOR_EMAIL": "author@example.org",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.org",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
}


#: the slowest test files, longest first (seconds of one file in a 2-worker run on this 2-core machine:
#: 100-135 s for the first three, the first a single test that also imports Debian's tarball for the
#: run; 15-65 s for the rest). pytest-xdist (``-n auto --dist loadfile``, pyproject.toml) hands whole
#: files to its workers in collection order, so these start first and no worker is left running a long
#: file alone at the end; every other file keeps its place after them.
SLOWEST_FILES = (
    "test_real_upstream_tests.py",
    "test_runner.py",
    "test_reliability.py",
    "test_conformance.py",
    "test_build_e2e.py",
    "test_evidence_e2e.py",
    "test_examples.py",
    "test_patch_series.py",
    "test_series.py",
    "test_hostile_names.py",
    "test_build.py",
    "test_simulation.py",
    "test_doctor.py",
    "test_upstream.py",
    "test_cli.py",
)


def pytest_xdist_auto_num_workers(config) -> int | None:
    """``-n auto`` (pyproject.toml) starts one worker per core plus one: each worker waits on its subprocesses
    (worker processes starting torch, pip, git, the compiler) a good part of the time, and the extra worker
    fills those waits. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still overrides it (None: pytest-xdist's own rule)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1


def pytest_terminal_summary(terminalreporter) -> None:
    """Print the planted-defect catch table (tests/test_planted_defects.py, recorded as the test's
    ``catch_table`` property) after the run: it shows with or without ``-s`` and from xdist workers."""
    for rep in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        for name, value in getattr(rep, "user_properties", ()):
            if name == "catch_table":
                terminalreporter.write_sep("-", "planted-defect catch table")
                terminalreporter.write_line(value)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run :data:`SLOWEST_FILES` first, in that order (a stable sort: tests keep their order in a file)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def git(cwd: Path, *args: str, env: dict | None = None, check: bool = True) -> str:
    """Run git in ``cwd`` for test set-up (argument list; author/committer fixed); return stdout."""
    result = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **AUTHOR, **(env or {})}, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout


@dataclass(frozen=True)
class Ran:
    """What a command left: its exit status and its stdout and stderr (the fields of ``CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


def run_harness(*args: str, env: dict | None = None, cwd: Path | None = None) -> Ran:
    """``python -m harness *args`` in this process (:func:`harness.cli.main`): the same exit status and
    output as the subprocess, without starting an interpreter. ``sys.argv`` reads as that command line
    (the run records it); ``env`` is added to ``os.environ`` and ``cwd`` entered for the call only.
    Worker processes still start for real, with the build's interpreter.
    """
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        patch.setattr(sys, "argv", [str(REPO / "harness" / "__main__.py"), *args])
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        if cwd is not None:
            patch.chdir(cwd)
        code = cli.main(list(args))
    return Ran(code, out.getvalue(), err.getvalue())


@cache
def noxfile() -> ModuleType:
    """``noxfile.py`` as a module, loaded once per process: each load registers its sessions with nox again
    (a FutureWarning per session, an error in a future nox)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("noxfile", REPO / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def parsed(text: str) -> ast.Module:
    """``ast.parse(text)``, once per text in a test process: several test files walk every module of harness/
    (the trees are only read)."""
    return ast.parse(text)


def _lines(n: int, tag: str = "") -> str:
    return "".join(f"line {i}{tag}\n" for i in range(1, n + 1))


@pytest.fixture(scope="session")
def this_python() -> str:
    """``python:<this interpreter>``: a build input that needs no new environment (it has torch)."""
    return f"python:{sys.executable}"


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory) -> Iterator[Path]:
    """The harness cache of module- and session-scoped fixtures: private to this test session."""
    path = tmp_path_factory.mktemp("session-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(path))
        yield path


@pytest.fixture(scope="session", autouse=True)
def no_background_gc() -> Iterator[None]:
    """``gc.auto=0`` for every git the tests start (theirs and the harness's, through the environment:
    ``GIT_CONFIG_COUNT``). A repository over git's threshold of 6,700 loose objects starts a detached
    ``git gc --auto`` after a commit, ``am`` or fetch, left running beside the tests that follow (Debian's
    source was 9,914 loose objects in each clone until ``import_archive`` packed its blobs: a repack of
    all of PyTorch's source, tens of CPU seconds, per clone). No test asserts on git's housekeeping."""
    count = int(os.environ.get("GIT_CONFIG_COUNT", "0"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(f"GIT_CONFIG_KEY_{count}", "gc.auto")
        patch.setenv(f"GIT_CONFIG_VALUE_{count}", "0")
        patch.setenv("GIT_CONFIG_COUNT", str(count + 1))
        yield


#: build interpreters whose probe is another's: wrapper scripts that exec that interpreter for everything
#: but the worker module (``-m harness.bench.worker``), so ``-m harness.bench.provenance`` runs it unchanged.
#: Filled by :func:`probes_as`, read by :func:`probe_once`.
PROBE_AS: dict[str, str] = {}


def probes_as(wrapper: Path, python: str = sys.executable) -> None:
    """Declare that ``wrapper`` runs ``-m harness.bench.provenance`` as ``python`` does (it changes the worker only)."""
    PROBE_AS[str(wrapper)] = python


@pytest.fixture(scope="session", autouse=True)
def probe_once(run_cache) -> Iterator[None]:
    """Commands run in-process probe each build interpreter (``harness.supervise.probe_build``: a
    subprocess that imports torch and makes torch's collect_env report: about 4 s) on every
    call. The facts of one interpreter, device and environment do not change within a run, so each
    distinct probe runs for real once per run (its answer kept in :func:`run_cache`, shared by the
    pytest-xdist workers) and is replayed (a copy) after that; so is a probe whose interpreter ran and
    reported the device unusable (the same ``HarnessError`` again). An interpreter that cannot run the
    probe is never kept, and a wrapper declared by :func:`probes_as` replays its interpreter's probe.
    Subprocess runs (``e2e``) always probe for real."""
    import hashlib
    import json

    from harness import configs as cfg
    from harness import supervise
    from harness.errors import HarnessError

    real, kept = supervise.probe_build, run_cache / "probes"
    kept.mkdir(exist_ok=True)

    def probe(name: str, python: Path, device: str, keep: tuple[str, ...] = (), *args, **kwargs) -> dict:
        env = cfg.worker_environment(cfg.EnvConfig("probe"), keep=keep)
        interpreter = PROBE_AS.get(str(python), str(python))
        key = (interpreter, device, tuple(keep), repr(args), repr(sorted(kwargs.items())), tuple(sorted(env.items())))
        digest = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
        answer, refusal = kept / f"{digest}.json", kept / f"{digest}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
        with waiting_lock(kept / f"{digest}.lock"):  # one probe of a key at a time, across workers
            if refusal.is_file():  # the message names the build: kept per name
                raise HarnessError(*json.loads(refusal.read_text()))
            if not answer.is_file():
                try:
                    answer.write_text(json.dumps(real(name, python, device, keep, *args, **kwargs)))
                except HarnessError as exc:
                    if f"is not usable in build {name} " in exc.cause:  # it ran: the device is missing or broken
                        refusal.write_text(json.dumps([exc.cause, exc.remedy]))
                    raise
            return json.loads(answer.read_text())  # a copy of its own for each call

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(supervise, "probe_build", probe)
        yield


@pytest.fixture(scope="session")
def build_venvs(run_cache) -> Path:
    """The run's one folder of build venvs (``<cache>/build-venvs``: a venv per list of build
    requirements, :func:`harness.build.wheel.ensure_build_venv`), in :func:`run_cache`. Builds only run
    their interpreter, so every test's cache links it (:func:`share_build_venvs`) and the small upstream's
    numpy + cmake venv is created once per run, not once per building test or pytest-xdist worker (about
    5.5 CPU s each here: ``ensurepip`` 4.2-4.5 s, the pip install about 1 s); a worker that needs it while another
    creates it waits for it (:func:`harness.venvs.creation_lock`)."""
    path = run_cache / "build-venvs"
    path.mkdir(exist_ok=True)
    return path


def share_build_venvs(cache: Path, shared: Path) -> Path:
    """Make ``cache/build-venvs`` a symbolic link to the run's :func:`build_venvs`; return ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "build-venvs").symlink_to(shared, target_is_directory=True)
    return cache


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch, build_venvs) -> Path:
    """A private harness cache for each test (autouse), beside its ``tmp_path``, not inside it, so
    that tests which check that nothing else appeared in ``tmp_path`` are not disturbed by it. Its
    build venvs are the run's (:func:`build_venvs`); everything else in it is the test's own."""
    path = share_build_venvs(tmp_path_factory.mktemp("cache"), build_venvs)
    monkeypatch.setenv(CACHE_ENV, str(path))
    return path


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A git repository (the user's project) as cwd, with an empty patches/."""
    path = tmp_path / "project"
    (path / "patches").mkdir(parents=True)
    git(path, "init", "-q")
    git(path, "config", "user.email", "committer@example.org")
    git(path, "config", "user.name", "Test Committer")
    monkeypatch.chdir(path)
    return path


@pytest.fixture
def tiny_upstream(tmp_path) -> Path:
    """A small upstream repository with tags ``v1``, ``v2`` (moves a.txt far from the series' hunk),
    ``v3`` (rewrites the line the series edits: a rebase conflict) and ``v4`` (edits a context line of
    the series' hunk: only a 3-way merge applies it), plus a branch ``feature``
    from v1 with two commits (a.txt line 5; docs/b.md) that tests export as a patch series.
    """
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text(_lines(40))
    (repo / "docs").mkdir()
    (repo / "docs" / "b.md").write_text("# Docs\n\nSome text.\n\nMore text.\n")
    (repo / "version.txt").write_text("1.0.0a0\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    git(repo, "tag", "v1")
    git(repo, "checkout", "-q", "-b", "feature")
    text = (repo / "a.txt").read_text().replace("line 5\n", "line 5 patched\n")
    (repo / "a.txt").write_text(text)
    git(repo, "commit", "-q", "-am", "a: patch line 5\n\nWhy: the test series needs a reason.")
    (repo / "docs" / "b.md").write_text("# Docs\n\nSome text, documented.\n\nMore text.\n")
    git(repo, "commit", "-q", "-am", "docs: document the change")
    git(repo, "checkout", "-q", "main")
    (repo / "a.txt").write_text(_lines(40).replace("line 35\n", "line 35 upstream\n"))
    git(repo, "commit", "-q", "-am", "v2: upstream moves")
    git(repo, "tag", "v2")
    (repo / "a.txt").write_text(
        _lines(40).replace("line 35\n", "line 35 upstream\n").replace("line 5\n", "line 5 rewritten upstream\n")
    )
    git(repo, "commit", "-q", "-am", "v3: upstream rewrites line 5")
    git(repo, "tag", "v3")
    git(repo, "checkout", "-q", "-b", "context", "v1")
    (repo / "a.txt").write_text(_lines(40).replace("line 3\n", "line 3 context moved\n"))
    git(repo, "commit", "-q", "-am", "v4: upstream edits the series' context, not its line")
    git(repo, "tag", "v4")
    git(repo, "checkout", "-q", "main")
    return repo


def export_series(
    upstream: Path, project: Path, name: str = "demo", base: str = "v1", rev_range: str = "v1..feature", extra: str = ""
) -> Path:
    """Write ``patches/<name>/series.toml`` + ``<base>/*.patch`` from ``rev_range`` of ``upstream``.

    The patches come from plain ``git format-patch`` (numbered, with signature): what a user has.
    """
    folder = project / "patches" / name
    out = folder / base
    out.mkdir(parents=True)
    git(upstream, "format-patch", "-q", "-o", str(out), rev_range)
    patches = sorted(p.name for p in out.iterdir())
    listed = ", ".join(f'"{p}"' for p in patches)
    (folder / "series.toml").write_text(
        f'name = "{name}"\ntitle = "Demo series"\nupstream = "{upstream}"\n'
        f'env = ["DEMO_ENV"]\n\n[[base]]\nref = "{base}"\npatches = [{listed}]\n{extra}'
    )
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "series")
    return folder


@pytest.fixture(scope="session")
def run_cache(tmp_path_factory, session_cache) -> Path:
    """The harness cache of Debian's tarball and its import (read-only after they are made), the
    build probes' answers (:func:`probe_once`) and the build venvs (:func:`build_venvs`): under pytest-xdist
    one for all workers of this run (in the run's base folder), so that the tarball is imported, each probe
    runs and each build venv is made once per run, not once per worker; without workers, the session cache."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return session_cache
    path = tmp_path_factory.getbasetemp().parent / "run-cache"
    path.mkdir(exist_ok=True)
    return path


@contextlib.contextmanager
def waiting_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the block, waiting while another worker holds it
    (``harness.fsutil.exclusive_lock`` refuses a second holder instead of waiting)."""
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def debian_tarball(run_cache) -> Path:
    """Debian's pytorch 2.6.0+dfsg-7 orig tarball in :func:`run_cache`: hard-linked from the user's
    cache when it is there (read-only), else fetched once per run with apt-get."""
    from debian_source import ORIG, PACKAGE, VERSION, Unavailable, fetch_orig_archive

    folder = Path("debian-src") / f"{PACKAGE}_{VERSION}"
    shared, private = OUTER_CACHE / folder, run_cache / folder
    names = (ORIG, f"{PACKAGE}_{VERSION}.dsc")
    with waiting_lock(run_cache / ".debian-src.lock"):
        if not (private / ORIG).is_file() and all((shared / n).is_file() for n in names):
            private.mkdir(parents=True, exist_ok=True)
            for name in names:
                try:
                    os.link(shared / name, private / name)
                except OSError:  # another file system, or no hard links there
                    shutil.copyfile(shared / name, private / name)
        try:
            return fetch_orig_archive(run_cache)
        except Unavailable as exc:
            pytest.skip(str(exc))


@pytest.fixture(scope="session")
def debian_import(debian_tarball, run_cache) -> Path:
    """The tarball imported once per run (``harness.upstream.import_archive``) in :func:`run_cache`;
    tests take clones of it (:func:`seed_import`), never change it."""
    from harness import upstream

    with waiting_lock(run_cache / ".debian-import.lock"), pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(run_cache))
        return upstream.import_archive(debian_tarball).store


def seed_import(cache: Path, store: Path) -> Path:
    """Put a local clone of the imported archive ``store`` (hard-linked objects) into ``cache``, where
    the harness looks for that archive's import: the worktrees and branches made there stay in ``cache``."""
    seeded = cache / "imports" / store.name
    seeded.parent.mkdir(parents=True, exist_ok=True)
    git(seeded.parent, "clone", "-q", "--bare", "--local", str(store), str(seeded))
    git(seeded, "remote", "remove", "origin")
    return seeded


@pytest.fixture
def debian_archive(debian_tarball, debian_import, isolated_cache) -> Path:
    """The tarball's path, with its import already in this test's own cache (:func:`seed_import`)."""
    seed_import(isolated_cache, debian_import)
    return debian_tarball


def fixed_rounds(args: tuple[str, ...]) -> tuple[str, ...]:
    """A compare runs exactly its planned rounds in tests (adaptive rounds are on by default)."""
    return (*args, "--target-ci", "0") if args[:1] == ("compare",) and "--target-ci" not in args else args
