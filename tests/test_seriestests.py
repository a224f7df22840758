"""An expected failure must be the expected one (harness.seriestests.judge).

A stock run expected to ``fail`` counted as expected whatever failed: an import error, a collection
error or another assertion read "fail ✓". Here real pytest runs (one tiny test file, each selection in
its own pytest process, as ``compare`` runs them) plant each wrong failure and the right one, and the
tests table shows the first line of every failure.
"""

from __future__ import annotations

import os
import sys

import pytest

from harness import prbody, seriestests
from harness.document import SeriesTests
from harness.evidence import EvidenceError, SeriesTest, validate

RIGHT = "AssertionError: 'Ignoring invalid value for boolean flag X_FLAG' not found in ''"
DECLARED = "AssertionError: 'Ignoring invalid value for boolean flag X_FLAG' not found in "

TEST_FILE = """\
import unittest


class TestPlanted(unittest.TestCase):
    def test_right_assertion(self):
        self.assertIn("Ignoring invalid value for boolean flag X_FLAG", "")

    def test_other_assertion(self):
        self.assertEqual([1.0], [2.0])

    def test_import_in_body(self):
        import not_a_module_of_this_test  # noqa: F401

    def test_passes(self):
        pass
"""
BROKEN_IMPORT = "import not_a_module_of_this_test  # noqa: F401\n\n\ndef test_never_runs():\n    pass\n"


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    """Each planted selection run once on this interpreter as the ``stock`` build, expected to fail (four
    pytest processes; the undeclared cases judge the same records without ``fails_with``)."""
    source = tmp_path_factory.mktemp("src")
    (source / "test").mkdir()
    (source / "test" / "test_planted.py").write_text(TEST_FILE)
    (source / "test" / "test_broken.py").write_text(BROKEN_IMPORT)
    fail, quick = {"stock": "fail"}, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # pytest starts in half the time
    tests = (
        SeriesTest("right", "test/test_planted.py", "test_right_assertion or test_passes", quick, fail, DECLARED),
        SeriesTest("other", "test/test_planted.py", "test_other_assertion", quick, fail, DECLARED),
        SeriesTest("import", "test/test_planted.py", "test_import_in_body", quick, fail, DECLARED),
        SeriesTest("collection", "test/test_broken.py", "", quick, fail, DECLARED),
    )
    section = seriestests.run_all(tests, {"stock": sys.executable}, source, source / "raw")
    out = {t["name"]: t for t in section["tests"]}
    for name, undeclared in (("right", "undeclared"), ("import", "undeclared import")):
        record = dict(out[name]["builds"]["stock"])
        record["as_expected"], record["expectation"] = seriestests.judge(record, "fail")
        out[undeclared] = {**out[name], "name": undeclared, "builds": {"stock": record}}
    return out


def _row(ran: dict, name: str) -> str:
    section = {"source": "src", "tests": [ran[name]]}
    (row,) = (
        line for line in prbody.tests_table(SeriesTests.from_json(section), ["stock"]) if line.startswith(f"| {name} |")
    )
    return row.split(" | ")[-1].rstrip(" |")


def test_the_declared_assertion_is_as_expected_and_shown_with_the_mixed_outcome(ran):
    record = ran["right"]["builds"]["stock"]
    assert (record["outcome"], record["as_expected"], record["first_lines"]) == ("fail", True, [RIGHT])
    # one test passed, one failed: the selection failed, and the cell says it was mixed
    assert _row(ran, "right") == f"fail, mixed (1 passed, 1 failed): `{RIGHT}` ✓"


def test_another_assertion_is_not_as_expected(ran):
    record = ran["other"]["builds"]["stock"]
    assert (record["outcome"], record["as_expected"]) == ("fail", False)
    assert record["first_lines"] == ["AssertionError: Lists differ: [1.0] != [2.0]"]
    assert _row(ran, "other") == (
        "fail (1 failed): `AssertionError: Lists differ: [1.0] != [2.0]` **✗ expected fail**: "
        f"not the declared failure (fails_with `{DECLARED}`)"
    )


def test_an_import_error_is_not_as_expected_with_its_first_line_shown(ran):
    line = "ModuleNotFoundError: No module named 'not_a_module_of_this_test'"
    assert ran["import"]["builds"]["stock"]["as_expected"] is False
    assert _row(ran, "import").startswith(f"fail (1 failed): `{line}` **✗ expected fail**: not the declared")
    # without fails_with only an assertion counts: an import error still is not the expected failure
    assert _row(ran, "undeclared import") == (
        f"fail (1 failed): `{line}` **✗ expected fail**: not an assertion failure (no fails_with declared)"
    )


def test_a_collection_error_is_not_as_expected(ran):
    record = ran["collection"]["builds"]["stock"]
    assert (record["outcome"], record["as_expected"]) == ("error", False)
    row = _row(ran, "collection")
    assert row.startswith("error: collection failed: test_broken: ModuleNotFoundError: No module named ")
    assert row.endswith("**✗ expected fail**")
    # the judgement itself refuses a collection error even where the outcome word says fail
    planted = {"outcome": "fail", "failed": 1, "first_lines": [RIGHT], "collection": ["t: ImportError: x"]}
    assert seriestests.judge(planted, "fail", DECLARED) == (
        False,
        "collection error, not the expected failure: t: ImportError: x",
    )


def test_an_undeclared_assertion_counts_and_says_it_was_not_declared(ran):
    assert ran["undeclared"]["builds"]["stock"]["as_expected"] is True
    assert _row(ran, "undeclared") == (
        f"fail, mixed (1 passed, 1 failed): `{RIGHT}` ✓ (expected failure not declared (fails_with))"
    )


def test_errors_and_empty_failures_are_not_the_expected_failure():
    # junit <error> (a fixture's setup or teardown): not the expected failure, whatever the failures say
    errored = {"outcome": "fail", "failed": 1, "errors": 1, "first_lines": [RIGHT, "RuntimeError: fixture"]}
    assert seriestests.judge(errored, "fail", DECLARED)[0] is False
    # the rendering seen in a PR block, "fail (1 passed) ✓": a fail with no failing test recorded
    hollow = {"outcome": "fail", "passed": 1}
    assert seriestests.judge(hollow, "fail") == (False, "no failing test recorded")
    cell = prbody._test_cell({**hollow, "expected": "fail", "as_expected": False, "expectation": "no failing test"})
    assert cell == "fail, mixed (1 passed) **✗ expected fail**: no failing test"


def test_fails_with_is_validated_in_one_line():
    table = {"test": [{"name": "t", "file": "test/t.py", "expect": {"stock": "fail"}, "fails_with": "a\nb"}]}
    with pytest.raises(EvidenceError, match="key 'fails_with': one line of at most 200 characters"):
        validate(table)
    table["test"][0] |= {"fails_with": "x", "expect": {"stok": "fail"}}  # a misspelt build judged nothing
    with pytest.raises(EvidenceError, match="key 'expect': 'stok' is not a build"):
        validate(table)
    table["test"][0] |= {"fails_with": "x", "expect": {"stock": "pass"}}
    with pytest.raises(EvidenceError, match="key 'fails_with': no build is expected to fail"):
        validate(table)
    table["test"][0]["expect"] = {"stock": "fail"}
    (test,) = validate(table).tests
    assert test.fails_with == "x" and test.to_json()["fails_with"] == "x"


def test_fails_with_is_plain_text_so_a_backtracking_pattern_cannot_hang_the_judgement():
    # a regular expression like ^AssertionError: (a+)+$ took exponential time on "a" * 40 + "!" (a hostile
    # review found it): fails_with is the start of the line, compared as text
    record = {"outcome": "fail", "failed": 1, "first_lines": ["AssertionError: " + "a" * 40 + "!"]}
    import time

    start = time.perf_counter()
    assert seriestests.judge(record, "fail", "^AssertionError: (a+)+$")[0] is False
    assert seriestests.judge(record, "fail", "AssertionError: aaa") == (True, "")
    assert time.perf_counter() - start < 1.0


def test_a_selection_leaves_no_bytecode_in_the_source_tree_and_keeps_it_in_the_cache(tmp_path):
    """The user's worktree gets no ``__pycache__``; the bytecode of the test module (pytest's rewritten one) and
    of what it imports goes under the harness cache, so the next selection does not compile it again."""
    from harness.paths import cache_dir

    source = tmp_path / "src"
    (source / "test").mkdir(parents=True)
    (source / "test" / "test_planted.py").write_text(TEST_FILE)
    test = SeriesTest("passes", "test/test_planted.py", "test_passes", {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    record = seriestests.run_one(sys.executable, test, source, tmp_path / "junit.xml")
    assert (record["outcome"], record["passed"]) == ("pass", 1)
    assert [p for p in source.rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc"] == []
    kept = cache_dir() / seriestests.PYCACHE
    assert [p.name for p in kept.rglob("test_planted*.pyc")] != []  # pytest's rewritten module, under the prefix
    assert [p for p in kept.rglob("unittest/*.pyc")] != []  # and what it imported


def test_a_helper_restored_with_its_old_mtime_is_not_served_from_the_kept_bytecode(tmp_path):
    """Python trusts a kept .pyc while its source keeps its whole-second mtime and size: a helper module
    restored with its old mtime (``cp -p``, ``rsync -a``, ``tar``) and other content must not pass as the old
    one in the next run (each run forgets the source tree's bytecode; the environments' stays)."""
    source = tmp_path / "src"
    (source / "test").mkdir(parents=True)
    helper = source / "test" / "helper.py"
    helper.write_text("VALUE = 1\n")
    (source / "test" / "test_uses_helper.py").write_text(
        "import helper\n\n\ndef test_value():\n    assert helper.VALUE == 1\n"
    )
    test = SeriesTest(
        "helper", "test/test_uses_helper.py", "", {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, {"stock": "pass"}
    )

    def outcome(raw: str) -> str:
        section = seriestests.run_all((test,), {"stock": sys.executable}, source, tmp_path / raw)
        return section["tests"][0]["builds"]["stock"]["outcome"]

    assert outcome("raw1") == "pass"
    assert list(seriestests.source_bytecode(source).rglob("helper*.pyc")) != []  # kept by the first run
    before = helper.stat()
    helper.write_text("VALUE = 2\n")  # the same size
    os.utime(helper, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert outcome("raw2") == "fail"


@pytest.mark.parametrize("name", ["PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE"])
def test_a_selection_may_not_set_the_bytecode_variables_the_harness_sets(name):
    table = {"test": [{"name": "t", "file": "test/t.py", "expect": {"stock": "pass"}, "env": {name: "1"}}]}
    with pytest.raises(EvidenceError, match=f"the harness sets {name} for the series' tests"):
        validate(table)
    table["test"][0]["env"] = {"PYTORCH_MPS_PREFER_METAL": "1"}  # a variable of the test's own: fine
    (test,) = validate(table).tests
    assert dict(test.env) == {"PYTORCH_MPS_PREFER_METAL": "1"}
