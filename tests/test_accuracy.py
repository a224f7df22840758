import math

import torch

from harness.bench.workloads import Cell, make_inputs, op_callable, reference
from harness.checks.accuracy import bound, check


def test_bound_formula():
    u16 = 2.0**-11
    assert bound("float16", 1024) == 2 * u16 + 4 * 2.0**-24 * 32
    # reduced-precision configs hold fp32 to the TF32 roundoff and accumulate in half precision
    assert bound("float32", 1024, reduced_fp32=True) == 2 * u16 + 4 * u16 * 32
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
