"""[evidence] of series.toml, --contrast, contrasts paired by round with their claims, the PR-body block."""

from __future__ import annotations

import copy
import json
import random
import sys
from pathlib import Path

import pytest

from harness import contrasts as con
from harness import prbody, report
from harness.bench.workloads import DTYPES, default_cells
from harness.document import SeriesTests
from harness.errors import SeriesError, UsageError
from harness.evidence import Contrast, Evidence, EvidenceError, Side, parse_contrast, validate
from harness.manifest import load_series

MPS_SERIES = "mps-gemm-prefer-fast-math"
TEMPLATE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "cpu-ab" / "results.json"


def mps_evidence() -> Evidence:
    return load_series(MPS_SERIES).evidence


def test_the_mps_series_declares_configs_markers_routing_contrasts_and_tests():
    ev = mps_evidence()
    assert ev.markers == ("PYTORCH_MPS_GEMM_PREFER_FAST_MATH",)
    assert ev.consistency_pair("mps") == ("all", "vanilla") and ev.consistency_pair("cpu") == ("no_vec", "default")
    routes = {c.name: dict(c.routes) for c in ev.profiles("mps")}
    assert routes["all"] == routes["prefer_metal"] == {"mm": "metal", "addmm": "metal"} and routes["vanilla"] == {}
    assert [(c.a.label, c.b.label, c.claim) for c in ev.contrasts] == [
        ("patched/all", "stock/fast_math+prefer_metal", "faster"),
        ("patched/vanilla", "stock/vanilla", "unchanged"),
        ("patched/all", "stock/vanilla", "equivalent"),
        ("stock/prefer_metal", "stock/vanilla", "equivalent"),
    ]
    assert [(t.k, dict(t.expect)) for t in ev.tests] == [
        ("TestGemmPreferFastMath", {"stock": "fail", "patched": "pass"}),
        ("TestMPS and (test_mm or test_addmm or test_linear or test_bmm)", {"stock": "pass", "patched": "pass"}),
    ]
    assert Evidence.from_json(json.loads(json.dumps(ev.to_json()))) == ev  # what results.json records reads back


@pytest.mark.parametrize(
    "table, message",
    [
        (
            {"contrast": [{"a": "patched/all", "b": "stock/vanilla", "claim": "better"}]},
            "[[evidence.contrast]] #1: claim 'better' is not one of faster, unchanged, equivalent, none",
        ),
        (
            {"contrast": [{"a": "patched", "b": "stock/vanilla"}]},
            "[[evidence.contrast]] #1 key 'a': 'patched' is not BUILD/CONFIG",
        ),
        ({"contrast": [{"a": "stock/x", "b": "stock/x"}]}, "both sides are stock/x"),
        ({"contrast": [{"a": "stock/x", "b": "stock/y", "op": ["mm"]}]}, "unknown key 'op'"),
        ({"test": [{"name": "t", "file": "test/t.py", "expect": {"stock": "passes"}}]}, "stock = 'passes'"),
        (
            {"test": [{"name": "t", "file": "../t.py", "expect": {"stock": "pass"}}]},
            "must be a path inside the source tree",
        ),
        ({"mps": {"consistency": ["all"]}}, "must name two configs"),
        (
            {"contrast": [{"a": "stock/x", "b": "stock/y", "means": {"shwon": "x"}}]},
            "key 'means': 'shwon' is not one of shown, not_shown, contradicted",
        ),
        ({"contrast": [{"a": "stock/x", "b": "stock/y", "means": {"shown": " "}}]}, "key 'means': 'shown'"),
        ({"tpu": ["x"]}, "unknown key 'tpu'"),
        ({"cpu": {"env": {"default": {"X": "1"}}}}, "[evidence.cpu].env.default: 'default' is a generic cpu config"),
    ],
)
def test_malformed_evidence_names_the_key(table, message):
    with pytest.raises(EvidenceError) as info:
        validate(table)
    assert message in str(info.value)


def test_a_malformed_evidence_key_is_one_series_error_naming_file_and_key(project):
    folder = project / "patches" / "demo"
    (folder / "v1").mkdir(parents=True)
    (folder / "v1" / "0001-x.patch").write_text("x\n")
    (folder / "series.toml").write_text(
        'name = "demo"\ntitle = "t"\nupstream = "u"\n[[base]]\nref = "v1"\n'
        'patches = ["0001-x.patch"]\n[[evidence.contrast]]\na = "patched/x"\n'
    )
    with pytest.raises(SeriesError) as info:
        load_series("demo")
    assert "series.toml: [[evidence.contrast]] #1: key 'b' is missing" in info.value.cause
    assert "docs/new-series.md" in info.value.remedy


def test_contrast_option_syntax():
    c = parse_contrast("stock/tf32_override vs stock/default : mm/float32,addmm/float32 : faster")
    assert (c.a, c.b, c.ops, c.dtypes, c.claim) == (
        Side("stock", "tf32_override"),
        Side("stock", "default"),
        ("mm", "addmm"),
        ("float32",),
        "faster",
    )
    assert parse_contrast("patched/all vs stock/vanilla").claim == "none"
    c = parse_contrast("patched/default vs stock/default : : equivalent")
    assert (c.ops, c.dtypes, c.claim) == ((), (), "equivalent")
    assert parse_contrast("a/x vs b/y : */float16 : unchanged").dtypes == ("float16",)
    with pytest.raises(UsageError, match="is not 'A vs B"):
        parse_contrast("stock/default against stock/no_vec")
    with pytest.raises(UsageError, match="claim 'quicker'"):
        parse_contrast("stock/a vs stock/b : mm : quicker")


@pytest.mark.parametrize(
    "claim, verdicts, outcome",
    [
        ("faster", ["faster", "faster"], con.SHOWN),
        ("faster", ["faster", "undetermined"], con.NOT_SHOWN),
        ("faster", ["faster", "slower"], con.CONTRADICTED),
        ("equivalent", ["equivalent"] * 3, con.SHOWN),
        ("unchanged", ["equivalent", "undetermined"], con.NOT_SHOWN),
        ("unchanged", ["equivalent", "faster"], con.CONTRADICTED),
        ("none", ["faster"], con.NO_CLAIM),
        ("faster", [], con.NOT_MEASURED),
    ],
)
def test_claim_outcome(claim, verdicts, outcome):
    assert con.claim_outcome(claim, verdicts) == outcome


def synthetic(device: str, configs: dict[str, dict], cells: list[str], rounds: int, time_of, seed: int = 0) -> dict:
    """A results.json object from the cpu example's shape: every (build, config, round) process, the
    per-process median of each cell = ``time_of(build, config, cell key, round)`` seconds."""
    data = json.loads(TEMPLATE.read_text())
    data["run"].update(device=device, configs=list(configs), cells=cells, rounds=rounds)
    data["configs"] = {
        name: {"name": name, "env": env, "about": "", "reduced_fp32": False, "routes": {}}
        for name, env in configs.items()
    }
    template = next(iter(data["processes"][0]["cells"].values()))
    processes = []
    for rnd in range(rounds):
        for build in ("stock", "patched"):
            for config in configs:
                proc = {
                    **{k: v for k, v in data["processes"][0].items() if k != "cells"},
                    "build": build,
                    "config": config,
                    "round": rnd,
                    "name": f"r{rnd:02d}-{build}-{config}",
                    "cells": {},
                }
                for key in cells:
                    t = time_of(build, config, key, rnd)
                    rec = copy.deepcopy(template)
                    rec["measurement"].update(median=t, samples=[t] * 3, enqueue=[t] * 3)
                    proc["cells"][key] = rec
                processes.append(proc)
    data["processes"] = processes
    data["evidence"] = {}
    return data


def _noise(*parts) -> float:
    return 1 + random.Random("/".join(map(str, parts))).uniform(-0.004, 0.004)


def test_cross_config_contrast_pairs_by_round_and_judges_claims():
    def time_of(build, config, key, rnd):
        return 1e-3 * (0.8 if config == "fast" else 1.0) * _noise(build, config, key, rnd)

    cells = ["mm/512x512x512/float32", "sdpa/1x8x512x64/float32"]
    data = synthetic("cpu", {"base": {}, "fast": {"X": "1"}}, cells, 6, time_of)
    faster = Contrast(Side("stock", "fast"), Side("stock", "base"), ("mm",), (), "faster")
    same = Contrast(Side("patched", "base"), Side("stock", "base"), (), (), "unchanged")
    result = con.evaluate(data, faster)
    assert result.outcome == con.SHOWN and [r.cell.key for r in result.rows] == cells[:1]
    assert 1.2 < result.rows[0].cmp.speedup < 1.3 and result.rows[0].cmp.verdict == "faster"
    held = con.evaluate(data, same)
    assert held.outcome == con.SHOWN and held.why.startswith("equivalent within ±2% on all 2 cells")
    # a round that only one side ran is left out of the pairing
    data["processes"] = [p for p in data["processes"] if not (p["round"] == 5 and p["config"] == "fast")]
    assert con.evaluate(data, faster).rows[0].rounds == (0, 1, 2, 3, 4)
    absent = con.evaluate(data, Contrast(Side("stock", "nope"), Side("stock", "base")))
    assert absent.outcome == con.NOT_MEASURED and "stock/nope not in this run" in absent.why


def test_a_run_without_declared_contrasts_gets_the_stock_vs_patched_family():
    data = synthetic(
        "cpu",
        {"default": {}, "no_vec": {"ATEN_CPU_CAPABILITY": "default"}},
        ["mm/512x512x512/float32"],
        4,
        lambda *a: 1e-3 * _noise(*a),
    )
    assert [c.label for c in prbody.declared(data)] == [
        "patched/default vs stock/default",
        "patched/no_vec vs stock/no_vec",
    ]
    text = report.render(data)
    block = text.split("<details>")[0]
    # one line per contrast in the PR block; a contrast whose cells did not change has no table there
    assert "- `patched/no_vec` vs `stock/no_vec` (1 equivalent of 1 cell; speedup" in block
    assert "| mm M512 N512 K512 | float32 |" not in block
    # every cell's row once in the whole report: stock vs patched per config is a contrast like any other,
    # its table is the Cells table (no second "every cell" copy)
    assert text.count("| mm M512 N512 K512 | float32 |") == 2 and "## Contrasts" not in text


def test_pr_body_of_the_mps_default_matrix_is_under_60_lines():
    ev = mps_evidence()
    configs = {c.name: dict(c.env) for c in ev.profiles("mps") if c.name in ev.default_configs("mps")}
    cells = [c.key for c in default_cells(DTYPES)]
    slow = {("stock", "fast_math+prefer_metal"), ("stock", "all"), ("patched", "fast_math+prefer_metal")}

    def time_of(build, config, key, rnd):
        gemm = key.split("/")[0] in ("mm", "addmm")
        return 1e-3 * (1.5 if gemm and (build, config) in slow else 1.0) * _noise(build, config, key, rnd)

    data = synthetic("mps", configs, cells, 6, time_of)
    data["evidence"] = ev.to_json()
    from harness.seriestests import judge

    warning = "'Ignoring invalid value for boolean flag PYTORCH_MPS_GEMM_PREFER_FAST_MATH' not found in ''"
    ran = {
        "pass": {"outcome": "pass", "passed": 1, "failed": 0, "first_lines": []},
        "fail": {"outcome": "fail", "passed": 0, "failed": 1, "first_lines": [f"AssertionError: {warning}"]},
    }
    data["series_tests"] = {
        "source": "work/main/patched",
        "tests": [
            {
                **t.to_json(),
                "builds": {
                    b: {
                        **ran[t.expect[b]],
                        "expected": t.expect[b],
                        **dict(zip(("as_expected", "expectation"), judge(ran[t.expect[b]], t.expect[b], t.fails_with))),
                    }
                    for b in ("stock", "patched")
                },
            }
            for t in ev.tests
        ],
    }
    text = report.render(data)
    block = text.split("<details>")[0]
    assert len(block.splitlines()) < 60, block
    assert "the fix: GEMM under all three variables vs the slow case" in block and "**shown**" in block
    assert "equivalent within ±2% on all 33 cells" in block  # patched/vanilla vs stock/vanilla on mm, addmm, linear
    # each contrast's consequence, from series.toml's `means` for its outcome
    fix, premise = ev.contrasts[0], ev.contrasts[3]
    assert fix.meaning("shown").startswith("With all three variables the patched build keeps mm on MPSGraph")
    assert fix.meaning("shown") in block and premise.meaning("shown") in block
    assert "unsetting PREFER_METAL loses nothing today" in block and premise.meaning("not shown") not in block
    assert "| the series' new test (0003) |" in block
    assert f"| fail (1 failed): `AssertionError: {warning}` ✓ | pass (1 passed) ✓ |" in block
    assert text.index("## For the pull request") < text.index("<details><summary><b>Details</b>")


def test_junit_outcomes(tmp_path):
    from harness.seriestests import junit_outcome

    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite><testcase classname="t" name="a"/>'
        '<testcase classname="t" name="b"><skipped message="MPS not available"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert junit_outcome(xml) | {"skips": None} == {
        "outcome": "pass",
        "passed": 1,
        "failed": 0,
        "skipped": 1,
        "errors": 0,
        "skips": None,
        "failures": [],
        "first_lines": [],
        "collection": [],
    }
    assert junit_outcome(xml)["skips"] == ["t.b: MPS not available"]
    xml.write_text(
        '<testsuite><testcase classname="t" name="c"><failure message="assert 1 == 2"/></testcase></testsuite>'
    )
    assert junit_outcome(xml)["outcome"] == "fail" and junit_outcome(xml)["failures"] == ["t.c: assert 1 == 2"]
    xml.write_text('<testsuite><testcase classname="t" name="d"><skipped message="Linux"/></testcase></testsuite>')
    assert junit_outcome(xml)["outcome"] == "skip"
    xml.write_text("<testsuite/>")
    assert junit_outcome(xml)["outcome"] == "error"
    # pytest's record of a module that could not be imported: not a failed test, no test ran
    xml.write_text(
        '<testsuite><testcase classname="" name="test_mps"><error message="collection failure">'
        "test_mps.py:1114: in &lt;module&gt;\n    total_memory = int(...)\n"
        "E   subprocess.CalledProcessError: Command '['sysctl', '-n', 'hw.memsize']' returned non-zero"
        "</error></testcase></testsuite>"
    )
    record = junit_outcome(xml)
    assert (record["outcome"], record["errors"], record["failed"]) == ("error", 0, 0)
    assert record["collection"] == [
        "test_mps: subprocess.CalledProcessError: Command '['sysctl', '-n', " "'hw.memsize']' returned non-zero"
    ]


def test_no_test_ran_is_a_skip_only_when_the_file_says_why():
    from harness.seriestests import judge, no_test_reason

    stopped = {"collection": ["test_mps: subprocess.CalledProcessError: sysctl"]}
    said = "Running 0 items in this shard\nMPS not available, skipping tests\nsysctl: cannot stat /proc/sys/hw/memsize"
    assert no_test_reason(stopped, 2, said) == {
        "outcome": "skip",
        "reason": "no test collected: MPS not available, skipping tests (then its collection stopped)",
    }
    assert no_test_reason({"collection": []}, 5, "CUDA not available, skipping tests\n") == {
        "outcome": "skip",
        "reason": "no test collected: CUDA not available, skipping tests",
    }
    assert no_test_reason(stopped, 2, "ImportError") == {
        "outcome": "error",
        "reason": "collection failed: test_mps: subprocess.CalledProcessError: sysctl",
    }
    assert no_test_reason({"collection": []}, 5, "no tests ran in 0.1s") == {
        "outcome": "error",
        "reason": "no test selected (exit status 5)",
    }
    failed = {"outcome": "fail", "failed": 1, "first_lines": ["AssertionError: 1 != 2"]}
    assert [
        judge({"outcome": "skip"}, "fail")[0],
        judge({"outcome": "skip"}, "skip")[0],
        judge({"outcome": "pass"}, "fail")[0],
        judge(failed, "fail")[0],
        judge({"outcome": "error"}, "pass")[0],
        judge({"outcome": "pass"}, None)[0],
    ] == [None, True, False, True, False, None]


def test_builds_of_one_interpreter_share_each_install_and_run_and_get_their_own_records(monkeypatch, tmp_path):
    """An A/A run (one interpreter for both builds) runs each selection and installs the requirements
    once; each build gets its own copy, judged against its own expectation. Two interpreters: each runs."""
    from harness import seriestests
    from harness.evidence import SeriesTest

    runs, installs = [], []

    def run_one(python, test, source, junit, keep=()):
        runs.append((python, test.name, junit.name))
        return {"outcome": "pass", "passed": 1, "junit": junit.name, "reason": ""}

    def install(python, requirements, managed):
        installs.append((python, managed))
        return {"requirements": list(requirements), "installed": managed, "reason": ""}

    monkeypatch.setattr(seriestests, "run_one", run_one)
    monkeypatch.setattr(seriestests, "install_requirements", install)
    tests = (
        SeriesTest("a", "test/test_a.py", "", {}, {"stock": "fail", "patched": "pass"}),
        SeriesTest("b", "test/test_b.py", "", {}, {}),
    )
    one, two = "/envs/one/bin/python", "/envs/two/bin/python"
    both = frozenset({"stock", "patched"})
    result = seriestests.run_all(tests, {"stock": one, "patched": one}, tmp_path, tmp_path / "raw", (), ("x",), both)
    assert runs == [(one, "a", "01-stock.xml"), (one, "b", "02-stock.xml")]
    assert installs == [(one, True)]
    builds = result["tests"][0]["builds"]
    assert [(b, r["outcome"], r["expected"], r["as_expected"], r["junit"]) for b, r in builds.items()] == [
        ("stock", "pass", "fail", False, "01-stock.xml"),
        ("patched", "pass", "pass", True, "01-stock.xml"),
    ]
    assert builds["stock"] is not builds["patched"]
    assert result["requirements"] == {b: {"requirements": ["x"], "installed": True, "reason": ""} for b in both}
    assert result["requirements"]["stock"] is not result["requirements"]["patched"]
    runs.clear()
    installs.clear()
    seriestests.run_all(tests, {"stock": one, "patched": two}, tmp_path, tmp_path / "raw", (), ("x",), both)
    assert runs == [
        (one, "a", "01-stock.xml"),
        (two, "a", "01-patched.xml"),
        (one, "b", "02-stock.xml"),
        (two, "b", "02-patched.xml"),
    ]
    assert installs == [(one, True), (two, True)]


def test_tests_table_shows_outcomes_against_expectations_and_skip_reasons():
    section = {
        "source": "/src",
        "tests": [
            {
                "name": "new",
                "file": "test/test_mps.py",
                "k": "TestX",
                "env": {"A": "1"},
                "expect": {"stock": "fail", "patched": "pass"},
                "builds": {
                    "stock": {
                        "outcome": "skip",
                        "skipped": 2,
                        "skips": ["t.a: MPS not available"],
                        "expected": "fail",
                        "as_expected": None,
                        "reason": "",
                    },
                    "patched": {
                        "outcome": "error",
                        "reason": "pytest did not run (exit status 1): No module named pytest",
                        "expected": "pass",
                        "as_expected": False,
                    },
                },
            }
        ],
    }
    (row,) = (
        line
        for line in prbody.tests_table(SeriesTests.from_json(section), ["stock", "patched"])
        if line.startswith("| new")
    )
    assert row == (
        "| new | `test/test_mps.py` `-k TestX` `A=1` | skip (2 skipped): t.a: MPS not available "
        "(expected fail; a skip here is not evidence either way) "
        "| error: pytest did not run (exit status 1): No module named pytest **✗ expected pass** |"
    )
    assert (
        prbody.tests_table(SeriesTests.from_json({"skipped": "no source tree given", "tests": []}), ["stock"])[2]
        == "- not run: no source tree given"
    )


def test_a_contrast_outside_the_run_is_a_one_line_error_before_anything_runs(tmp_path):
    """A --contrast naming a config the run lacks, or an op the harness does not know, used to run
    to the end and show "not measured"; the user's own contrast is checked up front."""
    from harness.errors import UsageError
    from harness.plan import RunRequest, plan

    def request(text: str) -> RunRequest:
        python = f"python:{sys.executable}"
        return RunRequest(
            inputs={"stock": python, "patched": python}, device="cpu", out=tmp_path / "o", contrasts=(text,)
        )

    with pytest.raises(UsageError) as err:
        plan(request("stock/default vs stock/nope : mm : faster"))
    assert err.value.cause.endswith("stock/nope is not a build/config of this run")
    assert err.value.remedy == "builds: stock, patched; configs: default, no_vec (see --configs)"
    with pytest.raises(UsageError, match="unknown op conv"):
        plan(request("stock/default vs patched/default : conv : faster"))
    assert plan(request("stock/no_vec vs stock/default : mm/float32 : faster")).evidence.contrasts
    assert not (tmp_path / "o").exists()


def test_a_contrast_without_declared_meaning_gets_the_claims_own_words():
    cells = ["mm/512x512x512/float32"]
    data = synthetic("cpu", {"base": {}, "fast": {"X": "1"}}, cells, 6, lambda *a: 1e-3 * _noise(*a))
    result = con.evaluate(data, Contrast(Side("stock", "fast"), Side("stock", "base"), claim="faster"))
    assert result.outcome == con.NOT_SHOWN and not result.deciding
    assert prbody.meaning(result) == (
        "`stock/fast` is not shown faster on every covered cell at these processes (nor refuted)."
    )
    said = Contrast(Side("stock", "fast"), Side("stock", "base"), claim="faster", means=(("not_shown", "Unproven."),))
    assert prbody.meaning(con.evaluate(data, said)) == "Unproven."


@pytest.mark.parametrize("flag", ["--markers", "--vars"])
def test_the_provenance_probe_takes_markers_and_still_reads_its_older_flag_vars(flag, monkeypatch, capsys):
    """``python -m harness.bench.provenance --markers A,B`` (``--vars``: the older name, still accepted)."""
    from harness.bench import provenance

    asked = []
    monkeypatch.setattr(provenance, "probe", lambda device, names, collect: asked.append(names) or {})
    assert provenance.main(["--device", "cpu", flag, "MY_MARKER,OTHER"]) == 0
    assert asked == [["MY_MARKER", "OTHER"]] and capsys.readouterr().out == "{}"
