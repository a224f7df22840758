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
pytest could not run or selected nothing (the reason is kept: e.g. pytest is not installed in that
build's environment).
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path, PurePosixPath

from harness import configs as cfg
from harness.evidence import SeriesTest

#: seconds one test selection may take on one build
TIMEOUT_S = 900.0


def junit_outcome(path: Path) -> dict:
    """Counts and outcome from a junit XML file (pytest's ``--junitxml``).

    Returns ``{outcome, passed, failed, skipped, errors, skips: [reason, ...], failures: [first line, ...]}``;
    ``outcome`` is ``pass``/``fail``/``skip``, or ``error`` when nothing was selected."""
    root = ET.parse(path).getroot()
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    skips, failures = [], []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}.{case.get('name', '')}".strip(".")
        tags = {child.tag: child for child in case}
        if "failure" in tags or "error" in tags:
            counts["failed" if "failure" in tags else "errors"] += 1
            node = tags.get("failure", tags.get("error"))
            first = (node.get("message") or (node.text or "")).strip().splitlines()
            failures.append(f"{name}: {first[0][:200] if first else 'failed'}")
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
    return {"outcome": outcome, **counts, "skips": skips[:5], "failures": failures[:5]}


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
        "--junitxml",
        str(junit),
    ]
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
    try:
        proc = subprocess.run(
            command(python, test, junit), cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return {"outcome": "error", "reason": f"timed out after {TIMEOUT_S:g} s", "returncode": None}
    tail = ((proc.stderr or proc.stdout).strip().splitlines() or [""])[-1][:300]
    if not junit.is_file():
        fix = (
            f"; install it: {python} -m pip install pytest expecttest hypothesis"
            if "No module named pytest" in tail
            else ""
        )
        return {
            "outcome": "error",
            "returncode": proc.returncode,
            "reason": f"pytest did not run (exit status {proc.returncode}): {tail}{fix}",
        }
    record = {**junit_outcome(junit), "returncode": proc.returncode, "junit": junit.name}
    record["reason"] = f"no test selected (exit status {proc.returncode})" if record["outcome"] == "error" else ""
    return record


def run_all(
    tests: tuple[SeriesTest, ...],
    interpreters: dict[str, str],
    source: Path | None,
    folder: Path,
    keep: tuple[str, ...] = (),
) -> dict:
    """Every test on every build -> ``{"source": str, "tests": [{name, file, k, env, expect, builds:
    {build: record with "expected" and "as_expected"}}]}`` (recorded as results.json ``series_tests``).
    ``source`` None: nothing runs, and the record says why."""
    if not tests:
        return {}
    if source is None:
        return {
            "source": None,
            "skipped": "no source tree given: pass --tests-source DIR (the patched worktree, "
            "e.g. work/<base>/patched)",
            "tests": [t.to_json() for t in tests],
        }
    out = []
    for number, test in enumerate(tests, start=1):
        per_build = {}
        for build, python in interpreters.items():
            record = run_one(python, test, source, folder / f"{number:02d}-{build}.xml", keep)
            expected = test.expect.get(build)
            record.update(expected=expected, as_expected=None if expected is None else record["outcome"] == expected)
            per_build[build] = record
        out.append({**test.to_json(), "builds": per_build})
    return {"source": str(source), "tests": out}
