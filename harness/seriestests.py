"""The series' own upstream tests, run against every build with the outcome each build should have.

A series declares test selections in ``series.toml`` (``[[evidence.test]]``: ``file``, optional
``k`` and ``env``, ``expect = { stock = "fail", patched = "pass" }``; :class:`harness.evidence.SeriesTest`).
Each runs once per build as::

    <build python> -m pytest <file name> [-k K] -q -p no:cacheprovider --junitxml raw/tests/<n>-<build>.xml

with the working directory the test file's folder in the **source tree** given to ``compare
--tests-source`` (the patched worktree: it holds the tests the series adds). The folder is
``test/``, not the tree's root, so the tree's unbuilt ``torch/`` package cannot shadow the build's
installed one (``python -m`` puts the working directory first on ``sys.path``). The environment is
the worker rule (:func:`harness.configs.worker_environment`: inherited ``PYTORCH_MPS_*``/``TORCH_*``/
``ATEN_*`` cleared) plus the test's ``env``.

Outcome per build from pytest's junit XML: ``fail`` when any test failed or errored, else ``pass``
when any passed, else ``skip`` (every selected test skipped; pytest's reasons kept); ``error`` when
pytest could not run, the file could not be collected, or nothing was selected (the reason is kept:
e.g. pytest is not installed in that build's environment). A file that collects nothing (exit status
5) or fails to collect after printing why it skips itself is a ``skip`` with that line as reason:
upstream ``test/test_mps.py`` (v2.6.0, line 1109) prints "MPS not available, skipping tests" and
turns its TestCase into NoTest on a machine without MPS; on Linux its next line, ``sysctl -n
hw.memsize``, then stops the collection. A ``skip`` where ``pass``/``fail`` was expected is not
evidence either way (``as_expected`` None), never a mismatch.

An expected ``fail`` must be the expected failure (:func:`judge`): a test that errored (junit ``<error>``:
a fixture's setup or teardown), a collection error, or a failure whose first line (pytest's junit
``<failure message>``: ``ModuleNotFoundError: No module named 'x'`` for an import inside the test,
``AssertionError: Tensor-likes are not equal!`` for ``torch.testing``/``TestCase.assertEqual``) does not
start with the test's ``fails_with`` (plain text) is not as expected. Without ``fails_with`` only assertion failures
(``AssertionError``) count, and the record says the expected failure was not declared.

``[evidence] test_requirements`` (e.g. ``["pytest<9", "expecttest", "hypothesis", "numpy"]``: what
upstream's test files import; v2.6.0's ``test/conftest.py`` declares a hook argument pytest 9 removed)
is installed by pip into each build environment the harness created (:mod:`harness.venvs`; this
interpreter's pip, :func:`harness.venvs.pip_command`: those environments have none of their own); a
``python:`` interpreter is used as it is, and the record says so.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path, PurePosixPath

from harness import children
from harness import configs as cfg
from harness.errors import BuildInputError, HarnessError
from harness.evidence import SeriesTest
from harness.fsutil import inside
from harness.paths import cache_dir
from harness.venvs import NO_COMPILE, PIP_INSTALL_S, pip_command

#: seconds one test selection may take on one build
TIMEOUT_S = 900.0
#: a line a test file prints when it skips itself on this machine (test_mps.py, test_cuda.py: "X not available,
#: skipping tests")
SELF_SKIP = re.compile(r"(?im)^[^\n]*\b(?:not available|skipping tests?)\b[^\n]*$")
#: pytest's junit message for a module that could not be imported
COLLECTION_FAILURE = "collection failure"


def junit_outcome(path: Path) -> dict:
    """Counts and outcome from a junit XML file (pytest's ``--junitxml``).

    Returns ``{outcome, passed, failed, skipped, errors, skips: [reason, ...], failures: ["test: first line",
    ...] (the first 5), first_lines: [first line of every failed or errored test's message], collection:
    [last line of each collection error]}``; ``outcome`` is ``pass``/``fail``/``skip``, or ``error`` when no
    test ran (nothing selected, or the file could not be collected)."""
    root = ET.parse(path).getroot()
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    skips, failures, first_lines, collection = [], [], [], []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}.{case.get('name', '')}".strip(".")
        tags = {child.tag: child for child in case}
        if "error" in tags and tags["error"].get("message") == COLLECTION_FAILURE:
            lines = [ln.strip() for ln in (tags["error"].text or "").splitlines() if ln.strip()]
            cause = next((ln[1:].strip() for ln in reversed(lines) if ln.startswith("E ")), lines[-1] if lines else "")
            collection.append(f"{name}: {cause[:200]}")
        elif "failure" in tags or "error" in tags:
            counts["failed" if "failure" in tags else "errors"] += 1
            node = tags.get("failure", tags.get("error"))
            first = (node.get("message") or (node.text or "")).strip().splitlines()
            first_lines.append(first[0][:200] if first else "")
            failures.append(f"{name}: {first_lines[-1] or 'failed'}")
        elif "skipped" in tags:
            counts["skipped"] += 1
            reason = (tags["skipped"].get("message") or "").strip()
            skips.append(f"{name}: {reason[:200]}" if reason else name)
        else:
            counts["passed"] += 1
    if counts["failed"] or counts["errors"]:
        outcome = "fail"
    elif counts["passed"]:
        outcome = "pass"
    elif counts["skipped"]:
        outcome = "skip"
    else:
        outcome = "error"
    return {
        "outcome": outcome,
        **counts,
        "skips": skips[:5],
        "failures": failures[:5],
        "first_lines": first_lines,
        "collection": collection[:5],
    }


#: the harness cache's folder for the bytecode of what the series' tests import (:func:`run_one`)
PYCACHE = "pycache"


def source_bytecode(source: Path) -> Path:
    """Where Python keeps the bytecode of the source tree ``source`` under the prefix (CPython 3.8+
    ``importlib._bootstrap_external.cache_from_source``: the absolute path, symbolic links as they are, below
    the prefix, a Windows drive's colon dropped; pytest's rewritten modules, its ``get_cache_dir``, the same).
    A folder of the cache."""
    return cache_dir() / PYCACHE / Path(*Path(os.path.abspath(source)).parts[1:])


def forget_source_bytecode(source: Path) -> None:
    """Drop the bytecode of ``source``'s own modules (test files, their helpers, conftest.py) kept by an
    earlier run: Python trusts a kept .pyc while its source has the same whole-second mtime and size, which
    a file restored with ``cp -p``, ``rsync -a`` or ``tar`` can keep with other content. What the builds'
    environments import stays (an environment's files never change: it is made once per wheel or requirement).

    Raises:
        OutsideFolder: a symbolic link in the cache leads that folder out of ``<cache>/pycache``."""
    for tree in {source.resolve(), Path(os.path.abspath(source))}:  # the prefix mirrors the path imported by
        kept = inside(cache_dir() / PYCACHE, source_bytecode(tree), "the --tests-source tree's bytecode in the cache")
        shutil.rmtree(kept, ignore_errors=True)


def command(python: str, test: SeriesTest, junit: Path) -> list[str]:
    """The argument list that runs ``test`` in ``python`` (from the test file's folder)."""
    cmd = [
        python,
        "-m",
        "pytest",
        PurePosixPath(test.file).name,
        "-q",
        "-p",
        "no:cacheprovider",
        "--capture=tee-sys",
        "--junitxml",
        str(junit),
    ]  # tee-sys: what the file prints while collected
    return cmd + (["-k", test.k] if test.k else [])


def run_one(python: str, test: SeriesTest, source: Path, junit: Path, keep: tuple[str, ...] = ()) -> dict:
    """Run one selection on one build; the outcome record (see :func:`junit_outcome`) plus
    ``returncode`` and ``reason`` (why it is ``error``, else "")."""
    folder = source / PurePosixPath(test.file).parent
    if not (source / test.file).is_file():
        return {"outcome": "error", "reason": f"{test.file} is not in the source tree {source}", "returncode": None}
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    env = cfg.worker_environment(cfg.EnvConfig(f"test {test.name}", dict(test.env)), keep=keep)
    env.pop("PYTHONPATH", None)
    # no __pycache__ left in the user's worktree (the source tree's), yet bytecode kept: under a prefix in the
    # harness cache (Python 3.8+ PYTHONPYCACHEPREFIX; pytest 6.0+ writes its rewritten test modules there too, its
    # changelog: "sys.pycache_prefix ... will be used by pytest"; an older pytest writes them beside the file). A
    # test file that imports torch.testing's internals loads modules torch's own import does not (v2.6.0
    # test/test_mps.py: opinfo, inductor); without bytecode each run compiled them again (test_mps.py's
    # collection on Linux: 20 s a run, 11 s once they are kept; torch 2.13.0 CPU build, docs/measurements.md)
    env["PYTHONDONTWRITEBYTECODE"] = ""
    env["PYTHONPYCACHEPREFIX"] = str(cache_dir() / PYCACHE)
    try:
        proc = children.run(
            command(python, test, junit), what=f"pytest {test.file}", deadline=TIMEOUT_S, cwd=folder, env=env
        )
    except HarnessError as exc:  # out of time (or not startable): this selection's record says so
        return {"outcome": "error", "reason": exc.cause, "returncode": None}
    tail = ((proc.stderr or proc.stdout).strip().splitlines() or [""])[-1][:300]
    if not junit.is_file():
        fix = ""
        if "No module named pytest" in tail:
            fix = '; declare [evidence] test_requirements = ["pytest", ...] (or pip install it into that interpreter)'
        elif "can not be found in the hookspec" in tail:  # a conftest.py written for an older pytest
            fix = '; this tree\'s conftest.py needs an older pytest: [evidence] test_requirements = ["pytest<9", ...]'
        return {
            "outcome": "error",
            "returncode": proc.returncode,
            "reason": f"pytest did not run (exit status {proc.returncode}): {tail}{fix}",
        }
    record = {**junit_outcome(junit), "returncode": proc.returncode, "junit": junit.name, "reason": ""}
    if record["outcome"] == "error":
        record.update(no_test_reason(record, proc.returncode, (proc.stdout or "") + "\n" + (proc.stderr or "")))
    return record


def no_test_reason(record: dict, returncode: int, output: str) -> dict:
    """Why no test ran, from pytest's junit record and output: ``{outcome, reason}``. ``skip`` when the file
    printed that it skips itself here (:data:`SELF_SKIP`; e.g. "MPS not available, skipping tests"), else
    ``error``: the collection error, or nothing selected (a ``-k`` that matches no test)."""
    said = SELF_SKIP.search(output)
    stopped = record.get("collection") or []
    if said:
        reason = f"no test collected: {said.group(0).strip()[:150]}"  # the collection error stays in "collection"
        return {"outcome": "skip", "reason": reason + (" (then its collection stopped)" if stopped else "")}
    if stopped:
        return {"outcome": "error", "reason": f"collection failed: {stopped[0]}"}
    return {"outcome": "error", "reason": f"no test selected (exit status {returncode})"}


#: the first line of an assertion failure: unittest's and torch.testing's asserts and pytest's rewritten
#: ``assert`` raise AssertionError (junit message "AssertionError: ...")
ASSERTION = re.compile(r"^(?:[\w.]+\.)?AssertionError\b")


def judge(record: dict, expected: str | None, fails_with: str = "") -> tuple[bool | None, str]:
    """``(as_expected, why)`` of one build's record (:func:`junit_outcome` plus ``outcome``).

    None when nothing was expected, or when a ``skip`` stands where ``pass``/``fail`` was expected (a
    test that did not run here is not evidence either way). Where ``fail`` is expected, the failure must
    be the expected one: False when a test errored (junit ``<error>``), the file had a collection error,
    no failing test was recorded, or a failing test's first line does not start with ``fails_with``
    (plain text, so a hostile manifest cannot make the match take exponential time), or, without
    ``fails_with``, is not an ``AssertionError``.
    ``why``: a short phrase saying which (the record's ``first_lines`` hold the lines); for an
    undeclared failure that counted, that it was not declared; else ""."""
    outcome = record.get("outcome")
    if expected is None or (outcome == "skip" and expected != "skip"):
        return None, ""
    if outcome != expected or expected != "fail":
        return outcome == expected, ""
    if record.get("errors"):
        return False, "a test errored (setup or teardown), not the expected failure"
    if record.get("collection"):
        return False, f"collection error, not the expected failure: {record['collection'][0]}"
    lines = failure_lines(record)
    if not record.get("failed") or not lines:
        return False, "no failing test recorded"
    if fails_with:
        if any(not line.startswith(fails_with) for line in lines):  # plain text: no pattern to backtrack on
            return False, f"not the declared failure (fails_with `{fails_with}`)"
        return True, ""
    if any(not ASSERTION.match(line) for line in lines):
        return False, "not an assertion failure (no fails_with declared)"
    return True, "expected failure not declared (fails_with)"


def failure_lines(record: dict) -> list[str]:
    """The first line of each failed or errored test's message (records from before ``first_lines``
    existed: taken from their "test: first line" entries)."""
    lines = record.get("first_lines")
    if lines is None:
        lines = [f.split(": ", 1)[-1] for f in record.get("failures") or []]
    return lines


def install_requirements(python: str, requirements: tuple[str, ...], managed: bool) -> dict:
    """Install ``requirements`` (pip requirement strings) into ``python`` when the harness created its
    environment (``managed``); ``{"requirements": [...], "installed": bool, "reason": str}``."""
    record = {"requirements": list(requirements), "installed": False, "reason": ""}
    if not managed:
        record["reason"] = "python: interpreter used as it is (install them into it yourself)"
        return record
    try:
        pip = pip_command(python)
    except BuildInputError as exc:
        record["reason"] = f"{exc.cause} -- {exc.remedy}"
        return record
    cmd = [*pip, "install", "--disable-pip-version-check", "--no-input", "-q", NO_COMPILE, *requirements]
    try:
        proc = children.run(cmd, what=f"pip install {' '.join(requirements)}", deadline=PIP_INSTALL_S)
    except HarnessError as exc:
        record["reason"] = exc.cause
        return record
    if proc.returncode:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.startswith("ERROR")] or [""]
        record["reason"] = f"pip exit status {proc.returncode}: {lines[-1][:200]}"
    record["installed"] = proc.returncode == 0
    return record


def run_all(
    tests: tuple[SeriesTest, ...],
    interpreters: dict[str, str],
    source: Path | None,
    folder: Path,
    keep: tuple[str, ...] = (),
    requirements: tuple[str, ...] = (),
    managed: frozenset[str] = frozenset(),
) -> dict:
    """Every test on every build -> ``{"source": str, "requirements": {build: record}, "tests": [{name, file, k,
    env, expect, builds: {build: record with "expected" and "as_expected"}}]}`` (results.json ``series_tests``).
    ``requirements`` are installed first into the builds named in ``managed`` (:func:`install_requirements`).
    Builds with one interpreter (an A/A run of one ``python:`` path or one requirement) share one install
    and one run of each selection (the same inputs: interpreter, file, ``-k``, env, source tree), as they
    share one provenance probe (:func:`harness.runner.probe_builds`); each gets a copy of the record, whose
    ``junit`` names the first such build's file. ``source`` None: nothing runs, and the record says why."""
    if not tests:
        return {}
    if source is None:
        return {
            "source": None,
            "skipped": "no source tree given: pass --tests-source DIR (the patched worktree, "
            "e.g. work/<base>/patched)",
            "tests": [t.to_json() for t in tests],
        }
    forget_source_bytecode(source)  # once a run: its selections share what the first compiled
    installed, done = {}, {}
    for build, python in interpreters.items() if requirements else ():
        key = (python, build in managed)
        if key not in done:
            done[key] = install_requirements(python, requirements, build in managed)
        installed[build] = copy.deepcopy(done[key])
    out = []
    for number, test in enumerate(tests, start=1):
        per_build, ran = {}, {}
        for build, python in interpreters.items():
            if python not in ran:  # builds of one interpreter share its run
                ran[python] = run_one(python, test, source, folder / f"{number:02d}-{build}.xml", keep)
            record = copy.deepcopy(ran[python])
            expected = test.expect.get(build)
            as_expected, why = judge(record, expected, test.fails_with)
            record.update(expected=expected, as_expected=as_expected, expectation=why)
            per_build[build] = record
        out.append({**test.to_json(), "builds": per_build})
    return {"source": str(source), **({"requirements": installed} if installed else {}), "tests": out}
