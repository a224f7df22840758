import math
from pathlib import Path

import pytest
import torch

from harness.bench.accuracy import bound, check, judge
from harness.bench.workloads import Cell, make_inputs, op_callable, reference


def test_bound_formula():
    u16 = 2.0**-11
    assert bound("float16", 1024) == 2 * u16 + 4 * 2.0**-24 * 32
    # TF32 (reduced_fp32): float32 inputs rounded to 2^-11, accumulated in float32: a term that does not
    # grow with K; other dtypes are not touched by it (CUDABlas.cpp: float only)
    u32 = 2.0**-24
    assert bound("float32", 1024, reduced_fp32=True) == 2 * u32 + 8 * u16 + 4 * u32 * 32
    assert bound("float32", 4096, reduced_fp32=True) < 4e-3 < 0.022 / 2  # informative at 4096 rows
    assert bound("float16", 1024, reduced_fp32=True) == bound("float16", 1024)
    # the H200's TF32 errors (docs/examples/h200-aa-default-matrix: 2.9e-4 at K 256..4096) lie within it
    assert 2.94e-4 * 10 < bound("float32", 256, reduced_fp32=True)
    assert bound("bfloat16", 64) > bound("float16", 64) > bound("float32", 64)


def test_real_results_pass_and_a_one_percent_error_fails():
    cell = Cell("mm", (64, 64, 256), "float16")
    inputs = make_inputs(cell, "cpu")
    out = op_callable(cell, inputs)()
    ref = reference(cell, inputs)
    good = check(cell, out, ref)
    assert good.passed and 0 < good.rel_error < good.bound
    bad = check(cell, out * 1.01, ref)
    assert not bad.passed
    assert math.isclose(bad.rel_error, 0.01, rel_tol=0.1)
    assert "exceeds the float16 bound" in bad.reason


def test_non_finite_output_fails_with_a_count():
    cell = Cell("mm", (4, 4, 4), "float32")
    inputs = make_inputs(cell, "cpu")
    out = op_callable(cell, inputs)()
    out[0, 0], out[1, 1] = float("nan"), float("inf")
    result = check(cell, out, reference(cell, inputs))
    assert not result.passed and result.rel_error is None
    assert result.reason == "2 non-finite values (NaN/Inf) in the output"


def test_shape_mismatch_fails():
    cell = Cell("mm", (4, 4, 4), "float32")
    result = check(cell, torch.zeros(4, 5), torch.zeros(4, 4, dtype=torch.float64))
    assert not result.passed and "shape" in result.reason


# --- bounds that can fail, per base ----------------------------------------------------------------
def test_informative_rule_in_numbers():
    from harness.bench.accuracy import informative, smallest_defect

    big = Cell("mm", (4096, 4096, 4096), "bfloat16")
    assert math.isclose(bound("bfloat16", 4096, accumulator="input"), 2 * 2**-8 + 4 * 2**-8 * 64)  # 1.008
    assert math.isclose(smallest_defect(big), math.sqrt(2 / 4096))  # one row of 4096 wrong
    assert not informative(bound("bfloat16", 4096, accumulator="input"), big)
    assert informative(bound("bfloat16", 4096), big)  # float32 accumulation: 0.0078 <= 0.022 / 2
    thin = Cell("mm", (4096, 4096, 256), "float16")
    assert not informative(bound("float16", 256, accumulator="input"), thin)  # 0.032 > 0.011
    gemv = Cell("mm", (1, 1024, 1024), "float16")  # one row: the dropped 1/8 of K is the smallest
    assert math.isclose(smallest_defect(gemv), math.sqrt(1 / 8))
    assert informative(bound("float16", 1024, accumulator="input"), gemv)
    assert smallest_defect(Cell("sdpa", (1, 8, 512, 64), "float16")) == 1.0
    assert bound("float16", 64, accumulator="unknown") == bound("float16", 64, accumulator="input")
    with pytest.raises(ValueError, match="unknown accumulator 'metal'"):
        bound("float16", 64, accumulator="metal")


def test_a_bound_that_cannot_fail_reports_uninformative_never_passed():
    cell = Cell("mm", (64, 64, 4096), "bfloat16")
    inputs = make_inputs(cell, "cpu")
    ref = reference(cell, inputs)
    zeros = check(cell, torch.zeros(64, 64, dtype=torch.bfloat16), ref, accumulator="input")
    assert zeros.status == "uninformative" and not zeros.passed and zeros.rel_error == 1.0
    assert zeros.default_bound < 0.01
    # the reason names what the bound cannot see: here every planted defect, the all-zero output among them
    assert (
        "cannot tell all zeros, a transposed operand, the previous cell's output, the last 1/8 of K dropped, "
        "one row of 64 taken from another (expected error 1, 1.41, 1.41, 0.354, 0.177)" in zeros.reason
    )
    # a bound that fails zeros, transposes and a dropped K but not one row of 4096: only that is named
    thin = Cell("mm", (4096, 4096, 256), "float16")
    assert judge(thin, 0.001, bound("float16", 256, accumulator="input")) == (
        "uninformative",
        "bound 0.0322 is not below half the smallest planted defect's error (0.0221): it cannot tell one row "
        "of 4096 taken from another (expected error 0.0221) from a right output",
    )
    assert check(cell, torch.zeros(64, 64, dtype=torch.bfloat16), ref).status == "failed"  # float32 accumulation
    right = check(cell, op_callable(cell, inputs)(), ref)
    assert right.status == "passed" and right.passed and right.accumulator == "float32" and right.default_bound is None


def test_the_metal_accumulator_is_a_fact_of_each_base_with_its_citation():
    from harness.evidence import for_run
    from harness.manifest import load_series

    ev = for_run(load_series("mps-gemm-prefer-fast-math"), [])
    assert ev.accumulators("v2.6.0") == {"metal": "input"} and ev.accumulators("main") == {"metal": "float32"}
    assert ev.accumulators(None) == {"metal": "unknown"}  # the bases disagree: never the favourable one
    sources = {b["ref"]: b["accumulators"]["metal"]["source"] for b in ev.bases}
    assert "LinearAlgebra.metal" in sources["v2.6.0"] and "85b82e3acd6e" in sources["v2.6.0"]
    assert "0055b0d0e8513f445bd23273d9cd9ebcb08a9cd0" in sources["main"] and "opmath_t" in sources["main"]
    main = next(b for b in ev.bases if b["ref"] == "main")
    v26 = next(b for b in ev.bases if b["ref"] == "v2.6.0")
    builds = {
        "patched": {"build": {"series": {"name": "x", "hash": main["hash"]}, "base_sha": "a" * 40}},
        "stock": {
            "build": {"series": None, "base_sha": "a" * 40},
            "provenance": {"torch_version": "2.12.0a0+stock.aaaaaaaa"},
        },
        "labelled": {"provenance": {"torch_version": f"2.6.0a0+mps.gemm.prefer.fast.math.{v26['hash'][:8]}"}},
        "release": {"provenance": {"torch_version": "2.6.0"}},
        "pip": {"provenance": {"torch_version": "2.9.1"}},
        "devel": {"provenance": {"torch_version": "2.6.0a0"}},
    }
    told = ev.base_of(builds)
    assert {b: t["ref"] for b, t in told.items()} == {
        "patched": "main",
        "stock": "main",  # same manifest base commit as the patched build
        "labelled": "v2.6.0",
        "release": "v2.6.0",
        "pip": None,
        "devel": None,  # a 2.6.0a0 source build could be any commit before the release
    }
    assert "same base commit" in told["stock"]["how"] and "names none of the series' bases" in told["pip"]["how"]


def test_a_base_that_does_not_state_the_accumulator_gets_unknown_and_a_bad_one_is_an_error(tmp_path):
    import shutil

    from harness.errors import SeriesError
    from harness.manifest import load_series

    folder = tmp_path / "mps-gemm-prefer-fast-math"
    shutil.copytree(Path(__file__).resolve().parent.parent / "patches" / folder.name, folder)
    manifest = folder / "series.toml"
    text = manifest.read_text()
    start = text.index('[base.accumulators.metal]\naccumulator = "float32"')
    manifest.write_text(text[:start] + text[text.index("# Patched files:") :])
    from harness.evidence import for_run

    ev = for_run(load_series(folder), [])  # as after `rebase` added a base nobody read yet
    assert ev.accumulators("main") == {"metal": "unknown"} and ev.accumulators("v2.6.0") == {"metal": "input"}
    manifest.write_text(text.replace('accumulator = "input"', 'accumulator = "half"'))
    with pytest.raises(SeriesError, match="accumulator 'half' is not one of float32, input"):
        load_series(folder)


def test_results_refuse_an_uninformative_check_that_reads_as_passed():
    from harness.results import check_problem

    good = {"rel_error": 0.5, "bound": 1.0, "passed": False, "status": "uninformative"}
    assert check_problem(good, "c") is None
    assert check_problem({**good, "passed": True}, "c") == "c.passed is True with status 'uninformative'"
    assert "not one of" in check_problem({**good, "status": "ok"}, "c")
    assert check_problem({"rel_error": 0.1, "bound": 1.0, "passed": True}, "c") is None  # before status existed


def test_consistency_sum_of_bounds_that_cannot_fail_is_uninformative():
    from harness.bench.consistency import compare_outputs, config_accumulator

    key = "mm/64x64x4096/bfloat16"
    ones = torch.ones(64, 64)
    metal = {"routes": {"mm": "metal"}, "accumulators": {"metal": "input"}}
    result = compare_outputs({key: ones * 0.5}, {key: ones}, metal, {})
    assert result[key]["status"] == "uninformative" and not result[key]["passed"]  # 0.5 within 1.02
    assert compare_outputs({key: ones * 0.5}, {key: ones}, {}, {})[key]["status"] == "failed"
    cell = Cell.from_key(key)
    assert config_accumulator(cell, {"routes": {"mm": "metal"}}) == "unknown"  # no base told: looser, named
    nan = compare_outputs({key: ones * float("nan")}, {key: ones}, {}, {})[key]
    assert nan["status"] == "failed" and nan["rel_diff"] is None


def test_worker_checks_a_routed_cell_under_its_bases_accumulator():
    from harness.bench import devices
    from harness.bench.timer import BlockTimer
    from harness.bench.worker import run_cell

    device = devices.profile("cpu", torch)
    cell = Cell("mm", (16, 16, 4096), "bfloat16")
    timing = {"warmup_s": 0.0, "measure_s": 0.0, "min_block_s": 0.0}
    spec = {"device": "cpu", "check": True, "routes": {"mm": "metal"}, "timing": timing}
    records = {
        accs: run_cell(torch, BlockTimer(device), device, cell, {**spec, "accumulators": dict(accs)}, {})
        for accs in ((("metal", "input"),), (("metal", "float32"),), ())
    }
    v26, main, unknown = (records[k] for k in records)
    assert v26["status"] == "ok" and v26["check"]["status"] == "uninformative"  # recorded, not a failed cell
    assert v26["check"]["accumulator"] == "input" and v26["check"]["default_bound"] < 0.01
    assert main["check"]["status"] == "passed" and main["check"]["accumulator"] == "float32"
    assert unknown["check"]["accumulator"] == "unknown" and unknown["check"]["status"] == "uninformative"
