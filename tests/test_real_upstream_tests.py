"""The series' tests for real: upstream test files of PyTorch v2.6.0 (Debian's pytorch_2.6.0+dfsg source)
run by ``compare --tests-source`` against a torch 2.13.0 CPU build the harness installs, with the MPS
series' ``[evidence] test_requirements`` pip-installed into that build's environment.

On Linux ``test/test_mps.py`` prints "MPS not available, skipping tests" and turns its TestCase into
NoTest (v2.6.0, line 1109); its next module-level line, ``sysctl -n hw.memsize``, then stops the
collection. Both of the series' selections must come out ``skip`` with that line, never ``error`` or
``fail``, and a skip where pass/fail was expected is not evidence either way. A GEMM test that runs on
CPU (``test/test_mkldnn.py`` ``test_linear_cpu``, ``test_linear_non_contiguous_weight_cpu``) must pass
on both builds; v2.6.0's ``test/test_linalg.py`` cannot be imported with torch 2.13.0's
``torch.testing._internal`` (``bf32_on_and_off`` is gone): a collection error, reported as ``error``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import run_harness

REPO = Path(__file__).resolve().parent.parent
SERIES = "mps-gemm-prefer-fast-math"
TOP = "pytorch-v2.6.0/"
#: both builds the same CPU wheel in environments the harness makes (so test_requirements are installed);
#: one round of one config: what is asserted here is the series' tests, which run once per build whatever
#: the rounds and configs (cpu's second config, no_vec, would add two workers and a consistency check)
COMPARE = (
    f"compare --stock torch==2.13.0 --patched torch==2.13.0 --series {SERIES} --device cpu "
    "--configs default --cells mm/64x64x64/float32 --rounds 1 --target-ci 0"
)

CPU_TEST = """
[[evidence.test]]
name = "GEMM on cpu: linear"
file = "test/test_mkldnn.py"
k = "test_linear and not backward and not lowp"
expect = { stock = "pass", patched = "pass" }
"""


@pytest.fixture(scope="module")
def v260_tests(debian_import, tmp_path_factory) -> Path:
    """The ``test/`` folder of the v2.6.0 tree (nothing else: its unbuilt ``torch/`` is not needed), from
    the run's one import of the tarball (``git archive`` of its v2.6.0 commit: about 1 s, where reading
    ``test/`` out of the .tar.xz decompresses all of it, about 10 s)."""
    root = tmp_path_factory.mktemp("v260") / TOP.rstrip("/")
    root.mkdir()
    tar = subprocess.run(
        ["git", f"--git-dir={debian_import}", "archive", "--format=tar", "v2.6.0", "test/"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(root, filter="data")
    return root


@pytest.mark.slow
def test_v260_tests_on_cpu_skip_with_the_files_reason_and_gemm_passes(v260_tests, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(REPO / "patches" / SERIES, project / "patches" / SERIES)
    toml = project / "patches" / SERIES / "series.toml"
    toml.write_text(toml.read_text() + CPU_TEST)
    out = tmp_path / "run"
    proc = run_harness(*COMPARE.split(), "--tests-source", str(v260_tests), "--out", str(out), cwd=project)
    assert proc.returncode == 0, proc.stderr[-3000:]
    section = json.loads((out / "results.json").read_text())["series_tests"]
    assert {b: (r["requirements"], r["installed"]) for b, r in section["requirements"].items()} == {
        b: (["pytest<9", "expecttest", "hypothesis", "numpy"], True) for b in ("stock", "patched")
    }
    new, existing, cpu = section["tests"]
    said = "no test collected: MPS not available, skipping tests (then its collection stopped)"
    for test in (new, existing):
        for build, record in test["builds"].items():
            assert (record["outcome"], record["reason"], record["as_expected"]) == ("skip", said, None), build
            assert record["collection"] == [
                "test_mps: subprocess.CalledProcessError: Command '['sysctl', '-n', "
                "'hw.memsize']' returned non-zero exit status 1."
            ]
    assert {b: (r["outcome"], r["passed"], r["failed"], r["as_expected"]) for b, r in cpu["builds"].items()} == {
        "stock": ("pass", 2, 0, True),
        "patched": ("pass", 2, 0, True),
    }
    block = (out / "report.md").read_text().split("<details>")[0]
    assert (
        f"| the series' new test (0003) | `test/test_mps.py` `-k TestGemmPreferFastMath` | skip: {said} "
        "(expected fail; a skip here is not evidence either way) | skip: " in block
    )
    assert (
        "| GEMM on cpu: linear | `test/test_mkldnn.py` `-k test_linear and not backward and not lowp` "
        "| pass (2 passed) ✓ | pass (2 passed) ✓ |"
    ) in block

    # the same build, a v2.6.0 file whose imports torch 2.13.0 no longer has: error (collection), never fail
    from harness.evidence import SeriesTest
    from harness.seriestests import run_one

    python = json.loads((out / "results.json").read_text())["builds"]["stock"]["interpreter"]
    linalg = SeriesTest("addmm", "test/test_linalg.py", "test_addmm and cpu and float32", {}, {"stock": "pass"})
    record = run_one(python, linalg, v260_tests, tmp_path / "linalg.xml")
    assert (record["outcome"], record["failed"], record["errors"]) == ("error", 0, 0)
    assert record["reason"].startswith(
        "collection failed: test_linalg: ImportError: cannot import name "
        "'bf32_on_and_off' from 'torch.testing._internal.common_mkldnn'"
    ), record
