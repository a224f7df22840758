"""results.json is validated on read and an A/A run is named whatever the bytes."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from harness import cli, report
from harness import results as res

#: the range of a time, as the message gives it
RANGE = "not a finite number of seconds > 0 and <= 86400"
EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "cpu-ab" / "results.json"


@pytest.fixture(scope="module")
def good() -> dict:
    return json.loads(EXAMPLE.read_text())


def _ok_cell(data: dict, build: str) -> tuple[int, str]:
    for i, proc in enumerate(data["processes"]):
        if proc["build"] == build:
            for key, rec in proc["cells"].items():
                if rec["status"] == "ok":
                    return i, key
    raise AssertionError("no ok cell")


def _report_line(tmp_path: Path, data: dict, capsys) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps(data))  # json writes NaN/Infinity as Python does
    rc = cli.main(["report", str(out)])
    captured = capsys.readouterr()
    return rc, captured.err + captured.out, out


def _set_patched_samples(data: dict, value: float) -> None:
    for proc in data["processes"]:
        if proc["build"] == "patched":
            for rec in proc["cells"].values():
                if rec["status"] == "ok":
                    rec["measurement"]["samples"] = [value] * len(rec["measurement"]["samples"])


@pytest.mark.parametrize(
    "value, shown",
    [
        (math.nan, f"is nan (process r00-patched-default), {RANGE}"),
        (-1e-3, f"is -0.001 (process r00-patched-default), {RANGE}"),
        (1e-300, "is 1e-300 (process r00-patched-default): 1 call per block makes a block of 1e-300 s, under"),
    ],
)
def test_patched_samples_nan_negative_or_absurd_are_refused(good, tmp_path, capsys, value, shown):
    """item 5: NaN or negative samples rendered the same report as the original, exit 0."""
    data = copy.deepcopy(good)
    _set_patched_samples(data, value)
    rc, out, folder = _report_line(tmp_path, data, capsys)
    assert rc == 2 and out.count("\n") == 1 and "measurement.samples[0] " + shown in out, out
    assert not (folder / "report.md").exists()


def test_median_of_1e300_is_not_a_speedup(good, tmp_path, capsys):
    """item 5: a median of 1e-300 s was reported as a 10^298x `faster` with p = 0.021."""
    data = copy.deepcopy(good)
    i, key = _ok_cell(data, "patched")
    data["processes"][i]["cells"][key]["measurement"]["median"] = 1e-300
    rc, out, _ = _report_line(tmp_path, data, capsys)
    assert rc == 2 and f"processes[{i}].cells['{key}'].measurement.median is 1e-300, outside its samples" in out, out


def _drop(path: str):
    def edit(data):
        *parents, last = path.split(".")
        node = data
        for p in parents:
            node = node[p]
        del node[last]

    return edit


def _cell_edit(fn):
    def edit(data):
        i, key = _ok_cell(data, "stock")
        fn(data["processes"][i], key)

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (_drop("run.device"), "run.device is missing"),
        (_drop("run.timing"), "run.timing is missing"),
        (_drop("builds.stock.provenance"), "builds.stock.provenance is missing"),
        (lambda d: d["run"].update(rounds="four"), "run.rounds is string 'four', not int"),
        (lambda d: d["run"].update(device="tpu"), "run.device is 'tpu', not one of cpu, cuda, mps"),
        (lambda d: d["run"]["timing"].pop("measure_s"), "run.timing.measure_s is None, not a positive number"),
        (
            lambda d: d["builds"]["patched"]["provenance"].pop("torch_version"),
            "builds.patched.provenance.torch_version is missing",
        ),
        (
            _cell_edit(lambda proc, key: proc["cells"][key]["measurement"].update(median=math.inf)),
            "measurement.median is inf, not a finite number of seconds",
        ),
        (
            _cell_edit(lambda proc, key: proc["cells"][key]["measurement"].update(layouts=[0, 10**6])),
            "measurement.layouts is [0, 1000000], not rising block indices from 0",
        ),
        (
            _cell_edit(lambda proc, key: proc["cells"][key]["measurement"].update(layouts=["0"])),
            "measurement.layouts is ['0'], not rising block indices from 0",
        ),
        (
            _cell_edit(lambda proc, key: proc["cells"][key]["measurement"].update(deferred="yes")),
            "measurement.deferred is string, not true, false or null",
        ),
        (
            _cell_edit(lambda proc, key: proc["cells"].update({"mm/7x7x7/float32": proc["cells"][key]})),
            "cells['mm/7x7x7/float32'] is a cell that is not in run.cells (the plan)",
        ),
        (
            lambda d: d["processes"][0].update(config="ghost"),
            "processes[0].config is 'ghost', which is not in run.configs",
        ),
    ],
)
def test_schema_faults_are_one_line_naming_the_key(good, tmp_path, capsys, edit, message):
    """item 8: these gave KeyError/TypeError/ValueError tracebacks."""
    data = copy.deepcopy(good)
    edit(data)
    rc, out, _ = _report_line(tmp_path, data, capsys)
    assert rc == 2 and out.startswith("error: ") and out.count("\n") == 1 and message in out, out
    assert "Traceback" not in out


def test_examples_still_validate(good):
    assert res.problem(good) is None


def test_deferred_is_optional_and_read_as_not_measured_when_absent(good):
    """Results written before the timer's deferral probe have no ``deferred``, and a cell the probe left out
    has null: valid, read as None (not measured); a string is not."""
    data = copy.deepcopy(good)
    i, key = _ok_cell(data, "patched")
    m = data["processes"][i]["cells"][key]["measurement"]
    m.pop("deferred", None)
    assert res.problem(data) is None and res.measurement(m).deferred is None
    m["deferred"] = None
    assert res.problem(data) is None and res.measurement(m).deferred is None
    m["deferred"] = True
    assert res.problem(data) is None and res.measurement(m).deferred is True
    m["deferred"] = 0
    assert res.problem(data).endswith("measurement.deferred is number, not true, false or null")


@pytest.mark.parametrize("how", ["zip comment", "wheel vs requirement"])
def test_aa_is_named_when_the_bytes_differ(good, how):
    """item 4: same torch version and git hash, different wheel bytes (or a wheel and the requirement of
    the same torch): the report read as an A/B."""
    data = copy.deepcopy(good)
    stock, patched = data["builds"]["stock"], data["builds"]["patched"]
    for key in ("torch_version", "git_version", "cuda_version", "variables_in_libraries"):
        patched["provenance"][key] = stock["provenance"][key]
    stock["input"] = {"kind": "wheel", "value": "/d/torch-2.13.0-cp311-linux_x86_64.whl", "sha256": "a" * 64}
    patched["input"] = (
        {"kind": "wheel", "value": "/e/torch-2.13.0-cp311-linux_x86_64.whl", "sha256": "b" * 64}
        if how == "zip comment"
        else {"kind": "requirement", "value": "torch==2.13.0", "sha256": None}
    )
    text = report.render(data)
    top = text.split("\n## ")[1]  # the summary, first section of the report
    assert "an A/A run; any verdict other than equivalent/undetermined is a false positive" in top
    assert "although their files differ" in top


def test_harness_built_wheels_of_different_trees_are_not_aa(good):
    data = copy.deepcopy(good)
    stock, patched = data["builds"]["stock"], data["builds"]["patched"]
    patched["provenance"].update({k: stock["provenance"][k] for k in ("torch_version", "git_version")})
    stock["build"] = {"base_sha": "1" * 40, "series": None}
    patched["build"] = {"base_sha": "1" * 40, "series": {"name": "s", "hash": "2" * 64}}
    assert not report.same_identity(data, "stock", "patched")
    patched["build"] = {"base_sha": "1" * 40, "series": None}
    assert report.same_identity(data, "stock", "patched")


# ------------------------------------------------------------------ ranges and verdicts
def _one_line(rc: int, out: str) -> str:
    assert rc == 2 and "Traceback" not in out and out.count("\n") == 1, out
    return out


def test_samples_of_1e308_are_damage_not_an_overflow(good, tmp_path, capsys):
    """Samples (and a median) of 1e308 s passed validation and overflowed the statistics:
    a ValueError traceback from `report`. No timed block lasts a day (res.MAX_SECONDS)."""
    data = copy.deepcopy(good)
    _set_patched_samples(data, 1e308)
    for proc in data["processes"]:
        for rec in proc["cells"].values():
            if proc["build"] == "patched" and rec["status"] == "ok":
                rec["measurement"]["median"] = 1e308
    rc, out, folder = _report_line(tmp_path, data, capsys)
    i, key = _ok_cell(data, "patched")
    line = _one_line(rc, out)
    name = data["processes"][i]["name"]  # the samples come first: a bad median follows from bad samples
    assert f"processes[{i}].cells['{key}'].measurement.samples[0] is 1e+308 (process {name}), {RANGE}" in line
    assert not (folder / "report.md").exists()
    _set_patched_samples(data, 86400.5)  # just over a day, a median in range: the samples are named
    for proc in data["processes"]:
        for rec in proc["cells"].values():
            if proc["build"] == "patched" and rec["status"] == "ok":
                rec["measurement"]["median"] = 86400.0
                rec["measurement"]["samples"][0] = 86400.0
    rc, out, _ = _report_line(tmp_path, data, capsys)
    assert f"measurement.samples[1] is 86400.5 (process {name}), {RANGE}" in _one_line(rc, out)


@pytest.mark.parametrize(
    "check, shown",
    [
        # the issue's case: rendered as passing
        ({"rel_error": math.nan, "passed": True, "bound": -1}, ".check.bound is -1, not a finite number > 0"),
        ({"rel_error": math.nan, "passed": True, "bound": 1e-3}, ".check.rel_error is nan, not a number >= 0 or null"),
        ({"rel_error": -1e-9, "passed": False, "bound": 1e-3}, ".check.rel_error is -1e-09, not a number >= 0"),
        (
            {"rel_error": 0.5, "passed": True, "bound": 1e-3},
            ".check.passed is true but its rel_error 0.5 is not within",
        ),
        ({"rel_error": None, "passed": True, "bound": 1e-3}, ".check.passed is true but its rel_error None is not"),
        ({"rel_error": 1e-7, "passed": "yes", "bound": 1e-3}, ".check.passed is string 'yes', not a boolean"),
        ({"rel_error": 1e-7, "passed": True, "bound": math.inf}, ".check.bound is inf, not a finite number > 0"),
    ],
)
def test_a_check_out_of_range_or_at_odds_with_its_verdict_is_damage(good, tmp_path, capsys, check, shown):
    data = copy.deepcopy(good)
    i, key = _ok_cell(data, "patched")
    data["processes"][i]["cells"][key]["check"] = check
    rc, out, folder = _report_line(tmp_path, data, capsys)
    assert f"processes[{i}].cells['{key}']{shown}" in _one_line(rc, out)
    assert not (folder / "report.md").exists()


def test_verdicts_that_hold_and_unknown_keys_are_accepted(good):
    """A failed check over its bound, an infinite error (all-zero reference) that failed, no error at all
    (non-finite output) that failed, and keys this harness does not know (in a check, a new top-level
    section) are all valid: the rule is local, passed implies an error within the bound."""
    data = copy.deepcopy(good)
    i, key = _ok_cell(data, "patched")
    cells = data["processes"][i]["cells"]
    for value in (0.5, math.inf, None):
        cells[key]["check"] = {"rel_error": value, "bound": 1e-3, "passed": False, "status": "failed", "x": [1]}
        data["kernel_observation"] = {"anything": 1}
        assert res.problem(data) is None
    build = next(iter(data["consistency"]["builds"]))
    first = next(iter(data["consistency"]["builds"][build]["cells"]))
    data["consistency"]["builds"][build]["cells"][first] = {"rel_diff": math.nan, "bound": 1e-5, "passed": False}
    assert res.problem(data) is None  # an output holding NaN: a failed comparison, recorded as such


def test_a_consistency_verdict_at_odds_with_its_numbers_is_damage(good, tmp_path, capsys):
    data = copy.deepcopy(good)
    build = next(iter(data["consistency"]["builds"]))
    first = next(iter(data["consistency"]["builds"][build]["cells"]))
    data["consistency"]["builds"][build]["cells"][first] = {"rel_diff": 2.0, "bound": 1e-5, "passed": True}
    rc, out, _ = _report_line(tmp_path, data, capsys)
    line = _one_line(rc, out)
    assert f"consistency.builds['{build}'].cells['{first}'].passed is true but its rel_diff 2.0 is not within" in line


@pytest.mark.parametrize(
    "stopped, shown",
    [
        ({"why": "tired"}, "run.adaptive.stopped is {'why': 'tired'}, not {why: converged | max_rounds | budget}"),
        ({"why": "budget", "next_round_s": -1, "left_s": 3}, "run.adaptive.stopped.next_round_s is -1"),
        ({"why": "budget", "next_round_s": 4.0}, "run.adaptive.stopped.left_s is None"),
    ],
)
def test_a_damaged_adaptive_stop_reason_is_refused(good, stopped, shown):
    data = copy.deepcopy(good)
    data["run"]["adaptive"]["stopped"] = stopped
    assert shown in res.problem(data)
    data["run"]["adaptive"]["stopped"] = {"why": "budget", "next_round_s": 4.0, "left_s": 1.5}
    assert res.problem(data) is None


# ----------------------------------------------------------------- times under the clock's unit or resolution

#: the cell the issue's case edited: 1 call per block in every process of the cpu example
SUB_CELL = "mm/512x512x512/float32"


def _set_block(data: dict, build: str, config: str, block_s: float, key: str = SUB_CELL) -> str:
    """Every process of (build, config) gets blocks of ``block_s`` seconds for ``key``: its samples (per call)
    and median become ``block_s / number``. Returns the name of the first such process."""
    names = []
    for proc in data["processes"]:
        rec = proc["cells"].get(key)
        if proc["build"] == build and proc["config"] == config and rec and rec["status"] == "ok":
            m = rec["measurement"]
            per_call = block_s / m["number"]
            m.update(samples=[per_call] * len(m["samples"]), median=per_call)
            names.append(proc["name"])
    assert names, "no process measured the cell"
    return names[0]


@pytest.mark.parametrize("per_call", [1e-12, 1e-10])
def test_the_issues_sub_nanosecond_samples_are_refused_naming_the_sample(good, tmp_path, capsys, per_call):
    """The issue's case: stock samples of one cell set to 1e-12 s or 1e-10 s (1 call per block: a block far
    under the host clock's 1 ns unit) passed validation (its floor was 1e-12 s) and rendered
    ``0.000x [0.000, 0.000] | **slower**`` and a geometric mean 'patched 941.1% slower'. Now refused: one
    line naming the sample, its process and cell, and a remedy that exists (this folder has no raw/)."""
    data = copy.deepcopy(good)
    name = _set_block(data, "stock", "default", per_call)
    rc, out, folder = _report_line(tmp_path, data, capsys)
    i = next(j for j, p in enumerate(data["processes"]) if p["name"] == name)
    assert rc == 2 and out.count("\n") == 1, out
    assert f"processes[{i}].cells['{SUB_CELL}'].measurement.samples[0] is {per_call!r} (process {name})" in out
    assert "under the host clock's 1 ns unit" in out and "raw/" not in out, out
    assert not (folder / "report.md").exists()


def test_the_validator_floor_is_one_clock_unit_per_block(good, tmp_path, capsys):
    """The edge: a block of exactly 1 ns (the unit of time.perf_counter_ns) is a reading of the clock and
    passes validation; a block a millionth shorter is not one and is refused. 10 calls per block: the
    floor is on the block, not the per-call sample (1e-10 s per call is then a 1 ns block)."""
    data = copy.deepcopy(good)
    i, key = _ok_cell(data, "stock")
    m = data["processes"][i]["cells"][key]["measurement"]
    m.update(number=10, samples=[1e-10] * len(m["samples"]), median=1e-10)
    assert res.problem(data) is None
    m.update(samples=[1e-10 * (1 - 1e-6)] * len(m["samples"]), median=1e-10 * (1 - 1e-6))
    found = res.problem(data)
    assert found is not None and found.startswith(f"processes[{i}].cells['{key}'].measurement.samples[0] is 9.99")
    assert "10 calls per block make a block of 1e-09 s, under the host clock's 1 ns unit" in found, found


@pytest.mark.parametrize("value", [0.0, -0.0, -1e-6])
def test_a_zero_or_negative_sample_names_the_sample_not_the_median(good, tmp_path, capsys, value):
    """Exactly 0 (with its median 0 too) was refused as 'measurement.median is 0.0, not a positive number of
    seconds' and the remedy said to rebuild results.json from a raw/ the folder did not have."""
    data = copy.deepcopy(good)
    i, key = _ok_cell(data, "stock")
    m = data["processes"][i]["cells"][key]["measurement"]
    m["samples"][2] = value
    m["median"] = value
    rc, out, folder = _report_line(tmp_path, data, capsys)
    name = data["processes"][i]["name"]
    assert rc == 2 and f".cells['{key}'].measurement.samples[2] is {value!r} (process {name})" in out, out
    assert "median" not in out and "raw/" not in out and "python -m harness compare" in out, out
    (folder / "raw").mkdir()  # a run's own folder: the runner can rebuild results.json from raw/
    rc, out, _ = _report_line(tmp_path, data, capsys)
    assert rc == 2 and "rebuilds results.json from raw/" in out, out


@pytest.mark.parametrize("number", [0, -1, 1.5, True, "10"])
def test_a_block_size_that_is_not_a_count_of_calls_is_damage(good, number):
    data = copy.deepcopy(good)
    i, key = _ok_cell(data, "stock")
    data["processes"][i]["cells"][key]["measurement"]["number"] = number
    assert res.problem(data) == (
        f"processes[{i}].cells['{key}'].measurement.number is {number!r}, not a number of calls >= 1"
    )


def test_a_process_recorded_twice_is_damage_not_more_processes(good, tmp_path, capsys):
    """A results.json whose process record was appended again (a hand edit, a bad concatenation) was read as
    more processes (the report's start-up line counted 11 where 8 ran): one fresh process per (build, config,
    round), a second record of one is refused in one line naming both."""
    assert res.problem(good) is None
    twice = copy.deepcopy(good)
    twice["processes"].append(copy.deepcopy(twice["processes"][1]))
    n = len(good["processes"])
    p = twice["processes"][1]
    assert res.problem(twice) == (
        f"processes[{n}] repeats processes[1] (build {p['build']!r}, config {p['config']!r}, round {p['round']}): "
        "one process recorded twice"
    )
    rc, line, _ = _report_line(tmp_path, twice, capsys)
    assert rc == 2 and "one process recorded twice" in line
    # just inside: the same record under another round is another process
    other = copy.deepcopy(good)
    extra = copy.deepcopy(other["processes"][1])
    extra["round"] = max(q["round"] for q in other["processes"]) + 1
    extra["name"] = f"r{extra['round']:02d}-{extra['build']}-{extra['config']}"
    other["processes"].append(extra)
    assert res.problem(other) is None
