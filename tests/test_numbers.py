"""Every numeric option of every command is parsed by one function (harness.numbers.number)
that refuses NaN, infinities and out-of-range values with the range in the message; the manifest's
env keys follow the ``--env`` rule. Property-based (hypothesis): random and extreme values for every
numeric option and every manifest env field give one line, exit status 2 and nothing written."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_containment import tree_digest

from harness import cli, options, rundir
from harness.errors import UsageError
from harness.numbers import Bound, number

PYTHON = f"python:{sys.executable}"
#: the leading arguments that make each command's parser accept a numeric option alone
PREFIX = {
    "compare": ["compare", "--stock", PYTHON, "--patched", PYTHON, "--device", "cpu", "--out", "out"],
    "bench": ["bench", "--build", PYTHON, "--device", "cpu", "--out", "out"],
    "doctor": ["doctor", "--device", "cpu", "--out", "out"],
    "build": ["build", "--kind", "stock", "--dist", "out"],
    "build_stock": ["build_stock", "--dist", "out"],
    "build_patched": ["build_patched", "--dist", "out"],
    "preview": ["preview", "out"],
}
#: every numeric option, by command (the test below fails when a command gains one not listed here)
NUMERIC = {
    "compare": [
        "--rounds",
        "--timeout",
        "--stall-timeout",
        "--duty",
        "--seed",
        "--threads",
        "--target-ci",
        "--target-ci-launch-bound",
        "--budget-s",
        "--plant-k",
    ],
    "bench": ["--rounds", "--timeout", "--stall-timeout", "--duty", "--seed", "--threads"],
    "doctor": ["--step-timeout"],
    "build": ["--jobs"],
    "build_stock": ["--jobs"],
    "build_patched": ["--jobs"],
    "preview": ["--width"],
}


def numeric_options() -> dict[str, dict[str, Bound]]:
    """{command: {option: its Bound}} from the parsers themselves."""
    found: dict[str, dict[str, Bound]] = {}
    for command in cli.COMMANDS:
        for action in cli.build_parser(command)._actions:
            bound = getattr(action.type, "bound", None)
            if bound is not None:
                found.setdefault(command, {})[action.option_strings[0]] = bound
    return found


OPTIONS = numeric_options()
CASES = [(command, option) for command, options in OPTIONS.items() for option in options]


def test_every_numeric_option_goes_through_the_one_parser():
    assert {c: sorted(o) for c, o in OPTIONS.items()} == {c: sorted(o) for c, o in NUMERIC.items()}
    for command in cli.COMMANDS:  # a numeric default without the one parser would be a number it never checks
        for action in cli.build_parser(command)._actions:
            assert action.type not in (int, float), f"{command} {action.option_strings}: parse it with numbers.option"
            if isinstance(action.default, (int, float)) and not isinstance(action.default, bool):
                assert getattr(action.type, "bound", None) is not None, (command, action.option_strings)
                assert action.type.bound.holds(action.default), (command, action.option_strings)
            if getattr(action.type, "bound", None) is not None:
                assert action.type.bound.describe() in action.help  # the range is in --help


def test_number_parses_and_refuses_with_the_range():
    seconds = Bound(0, 86400, low_open=True, unit="seconds")
    assert number("2.5", "--timeout", seconds) == 2.5 and number(86400, "--timeout", seconds) == 86400.0
    assert number(" 7 ", "--rounds", options.BOUNDS["rounds"]) == 7
    assert number(8.0, "--rounds", options.BOUNDS["rounds"]) == 8
    for value, problem in [
        ("nan", "not a finite number"),
        (float("inf"), "not a finite number"),
        ("0", "out of range"),
        ("86400.5", "out of range"),
        ("ten", "not a number"),
        (True, "not a number"),
    ]:
        with pytest.raises(UsageError) as info:
            number(value, "--timeout", seconds)
        assert info.value.line().endswith(f": {problem} -- give --timeout a number of seconds in (0, 86400]")
    for value in ("1e3", "2.5", 2.5, "1" * 5000, "0x10"):
        with pytest.raises(UsageError, match="not an integer"):
            number(value, "--rounds", options.BOUNDS["rounds"])


@pytest.fixture
def no_run_writes(monkeypatch):
    """A command that got past parsing fails at its first step, before anything runs or is written:
    a run at its --out lock, the doctor, a build, a preview (the base code accepted these values and
    ran without deadlines, or grew memory without bound)."""
    from harness import doctor, workflow
    from harness.commands import preview

    def refuse(*args, **kwargs):
        raise AssertionError(f"a command started with {args}")

    monkeypatch.setattr(rundir, "exclusive_lock", refuse)
    for module, name in ((doctor, "run"), (workflow, "resolve_sources"), (preview, "write_html")):
        monkeypatch.setattr(module, name, refuse)


@pytest.mark.parametrize(
    "option, value, line",
    [
        ("--timeout", "nan", "--timeout nan: not a finite number -- give --timeout a number of seconds in [1, 86400]"),
        ("--stall-timeout", "nan", "--stall-timeout nan: not a finite number -- give --stall-timeout a number of "),
        ("--budget-s", "nan", "--budget-s nan: not a finite number -- give --budget-s a number of seconds in (0, "),
        ("--rounds", "9" * 20, f"--rounds {'9' * 20}: out of range -- give --rounds a whole number of rounds in [1, "),
        ("--threads", str(10**20), f"--threads {10**20}: out of range -- give --threads a whole number of threads in "),
        (
            "--threads",
            "1e20",
            "--threads 1e20: not an integer -- give --threads a whole number of threads in [0, 4096]",
        ),
        ("--seed", str(10**23), f"--seed {10**23}: out of range -- give --seed a whole number in [0, 4294967295]"),
    ],
)
def test_reproductions_are_refused_at_parse_time(tmp_path, monkeypatch, capsys, no_run_writes, option, value, line):
    monkeypatch.chdir(tmp_path)
    rc = cli.main([*PREFIX["compare"], "--cells", "mm/8x8x8/float32", option, value])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"error: {line}"), err
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- property-based
def _beyond(bound: Bound) -> st.SearchStrategy[str]:
    """Texts of values outside ``bound``: below, above, fractions of an integer option, NaN, infinities,
    huge exponents and words; in the spellings a user may type."""
    low = st.floats(max_value=bound.low, allow_nan=False, allow_infinity=False).filter(lambda v: not bound.holds(v))
    high = st.floats(min_value=bound.high, allow_nan=False, allow_infinity=False).filter(lambda v: not bound.holds(v))
    # %e keeps 6 digits: a value just above the bound can round onto it (6.048000e+05 for budget 604800 s)
    rounded = high.map(lambda v: f"{v:e}").filter(lambda t: not bound.holds(float(t)))
    spellings = [low.map(repr), high.map(repr), rounded]
    if bound.integer:
        spellings += [
            st.integers(max_value=int(bound.low) - 1).map(str),
            st.integers(min_value=int(bound.high) + 1).map(str),
            st.floats(min_value=bound.low, max_value=bound.high)
            .filter(lambda v: not v.is_integer())
            .map(repr),  # a fraction inside the range
        ]
    else:
        spellings.append(st.integers(min_value=int(bound.high) + 1).map(str))
    words = st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400", "-1e400", "", " ", "0x10"])
    junk = st.text(max_size=12).filter(lambda t: _not_a_number(t))
    return st.one_of(*spellings, words, junk)


def _not_a_number(text: str) -> bool:
    try:
        return not math.isfinite(float(text))
    except ValueError:
        return True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_bad_number_for_any_option_is_one_line_rc_2_and_nothing_written(
    tmp_path, capsys, monkeypatch, no_run_writes, data
):
    monkeypatch.chdir(tmp_path)
    command, option = data.draw(st.sampled_from(CASES))
    value = data.draw(_beyond(OPTIONS[command][option]))
    before = tree_digest(tmp_path)
    rc = cli.main([*PREFIX[command], f"{option}={value}"])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == "", captured
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: "), captured.err
    assert OPTIONS[command][option].describe() in captured.err or "expected one argument" in captured.err
    assert tree_digest(tmp_path) == before


# ------------------------------------------------------------------ manifest env fields
_MANIFEST = """name = "demo"
title = "Demo"
upstream = "https://example.invalid/demo.git"

[[base]]
ref = "v1"
patches = ["0001-x.patch"]

{evidence}
"""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _toml(text: str) -> str:
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\U{ord(c):08x}" for c in text) + '"'


FIELDS = {
    "config env key": lambda k, v: f"[evidence.cpu.env.mine]\n{_toml(k)} = {_toml(v)}\n",
    "test env key": lambda k, v: (
        f'[[evidence.test]]\nname = "t"\nfile = "test/t.py"\nexpect = {{ stock = "pass" }}\n'
        f"env = {{ {_toml(k)} = {_toml(v)} }}\n"
    ),
}


def _series(tmp_path: Path) -> Path:
    folder = tmp_path / "demo"
    (folder / "v1").mkdir(parents=True, exist_ok=True)
    (folder / "v1" / "0001-x.patch").write_text("From: x\n")
    return folder


def test_a_valid_manifest_env_is_accepted_so_the_property_below_tests_the_keys(tmp_path):
    from harness.manifest import load_series

    folder = _series(tmp_path)
    for field in FIELDS.values():
        (folder / "series.toml").write_text(_MANIFEST.format(evidence=field("MY_VAR", "1")))
        assert load_series(folder).evidence


@pytest.mark.parametrize("key", ["A=B", "A\0B", "PYTHONPATH", ""])
def test_manifest_env_keys_follow_the_env_rule(tmp_path, monkeypatch, capsys, no_run_writes, key):
    """ "A=B" or NUL: ValueError traceback; PYTHONPATH or "": accepted and silently not applied."""
    monkeypatch.chdir(tmp_path)
    folder = _series(tmp_path)
    (folder / "series.toml").write_text(_MANIFEST.format(evidence=FIELDS["config env key"](key, "1")))
    rc = cli.main([*PREFIX["bench"], "--series", str(folder), "--configs", "mine"])
    err = capsys.readouterr().err
    why = "the harness sets PYTHONPATH for its workers" if key == "PYTHONPATH" else "is not an environment variable"
    assert rc == 2 and err.count("\n") == 1 and "[evidence.cpu].env.mine: " in err and why in err, err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_bad_manifest_env_field_is_one_line_rc_2_and_nothing_written(
    tmp_path, capsys, monkeypatch, no_run_writes, data
):
    monkeypatch.chdir(tmp_path)
    folder = _series(tmp_path)
    field = data.draw(st.sampled_from(sorted(FIELDS)))
    extreme = st.sampled_from(["A=B", "=", "\0", "A\0", "PYTHONPATH", "", "1X", "Ä", "A B", "A-B", "x" * 300])
    key = data.draw(st.one_of(extreme, st.text(max_size=10)).filter(lambda k: not _ENV_NAME.fullmatch(k)))
    key = data.draw(st.sampled_from([key, "PYTHONPATH"]))
    value = data.draw(st.one_of(st.just("1"), st.text(max_size=8)))
    (folder / "series.toml").write_text(_MANIFEST.format(evidence=FIELDS[field](key, value)), encoding="utf-8")
    before = tree_digest(tmp_path)
    rc = cli.main([*PREFIX["bench"], "--series", str(folder)])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == "", captured
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: "), captured.err
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("option, name", [("--timeout", "timeout"), ("--stall-timeout", "stall_timeout")])
def test_a_timeout_below_what_one_worker_needs_is_refused_with_the_minimum(
    tmp_path, monkeypatch, capsys, no_run_writes, option, name
):
    """``--timeout 1e-300`` was accepted: every process failed and the report's resume command repeated it.
    The minimum is named in the message; just inside it parses, just outside it does not."""
    low = options.MIN_SECONDS[name]
    assert 0.1 <= low <= 2.0  # a floor for "can never work", not a guess at a good value
    assert number(repr(low), option, options.BOUNDS[name]) == low  # just inside
    monkeypatch.chdir(tmp_path)
    for value in ("1e-300", repr(low * (1 - 1e-9))):  # far and just outside
        rc = cli.main([*PREFIX["compare"], "--cells", "mm/8x8x8/float32", option, value])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1, err
        wanted = f"error: {option} {value}: out of range -- give {option} a number of seconds in [{low:g}, 86400]"
        assert err.startswith(wanted)
    assert list(tmp_path.iterdir()) == []


def test_the_stall_minimum_covers_one_cells_timed_blocks_under_every_plan():
    """--stall-timeout counts from the start record to each finished cell: its minimum is at least one cell's
    warm-up and timed blocks under every plan (harness.plan.TIMING), so a cell can finish within it."""
    from harness.plan import TIMING

    one_cell = max(t["warmup_s"] + t["measure_s"] for per in TIMING.values() for t in per.values())
    assert options.MIN_SECONDS["stall_timeout"] >= one_cell
