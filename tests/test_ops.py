"""harness.bench.ops: every registry entry agrees with a direct computation on the CPU, and an
unknown op name is a one-line error everywhere it can enter (worker code, the run plan, the report)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from harness import plan as planning
from harness import report
from harness.bench import ops
from harness.bench.provenance import dtype_support, unsupported_reason
from harness.bench.workloads import OPS, Cell, make_inputs, op_callable, probe_cell, reference
from harness.errors import ResultsError, UsageError

#: op -> (a shape, its label, its reduction length): written out by hand, not from the registry
EXPECTED = {
    "mm": ((32, 48, 64), "M32 N48 K64", 64),
    "addmm": ((32, 48, 64), "M32 N48 K64", 64),
    "bmm": ((3, 32, 48, 64), "B3 M32 N48 K64", 64),
    "linear": ((32, 48, 64), "M32 N48 K64", 64),
    "sdpa": ((2, 3, 40, 16), "B2 H3 L40 D16", 40),
    "sdpa_causal": ((2, 3, 40, 16), "B2 H3 L40 D16", 40),
}


def test_every_registered_op_is_tested_here():
    assert set(EXPECTED) == set(ops.REGISTRY) == set(OPS)


def _counted_flop(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("name", list(EXPECTED))
def test_flop_is_what_torch_flop_counter_counts_for_the_computation(name):
    shape, _, _ = EXPECTED[name]
    cell = Cell(name, shape, "float64")
    inputs = make_inputs(cell, "cpu")
    # the explicit float64 reference is the op's arithmetic spelled out (SDPA: Q·Kᵀ then P·V)
    counted = _counted_flop(lambda: reference(cell, inputs))
    if name == "sdpa_causal":
        counted /= 2  # the FlashAttention convention: causal does half the work
    assert counted > 0 and cell.flop == counted
    assert cell.spec.flop_source  # every formula names where it comes from


@pytest.mark.parametrize("name", list(EXPECTED))
def test_label_shapes_and_reduction_agree_with_the_tensors(name):
    shape, label, reduction = EXPECTED[name]
    cell = Cell(name, shape, "float32")
    assert cell.label == label and cell.reduction == reduction
    assert cell.key == f"{name}/{'x'.join(map(str, shape))}/float32" and Cell.from_key(cell.key) == cell
    inputs = make_inputs(cell, "cpu")
    assert [tuple(t.shape) for t in inputs] == cell.input_shapes()
    out = op_callable(cell, inputs)()
    assert tuple(out.shape) == cell.output_shape() == tuple(reference(cell, inputs).shape)
    assert cell.nbytes() == 4 * (sum(t.numel() for t in inputs) + out.numel())


@pytest.mark.parametrize("name", list(EXPECTED))
def test_reference_matches_torch_on_float64_inputs(name):
    shape, _, _ = EXPECTED[name]
    cell = Cell(name, shape, "float64")
    inputs = make_inputs(cell, "cpu", seed=5)
    ref = reference(cell, inputs)
    assert ref.dtype == torch.float64
    # an independent spelling of each op, through torch's own entry points
    direct = {
        "mm": lambda a, b: torch.mm(a, b),
        "addmm": lambda c, a, b: torch.addmm(c, a, b),
        "bmm": lambda a, b: torch.einsum("bmk,bkn->bmn", a, b),
        "linear": lambda x, w, bias: torch.einsum("mk,nk->mn", x, w) + bias,
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "sdpa_causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }[name](*inputs)
    assert torch.allclose(ref, direct, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(ref, direct * 1.001, rtol=1e-10, atol=1e-12)


def test_probe_shapes_are_tiny_and_run_on_cpu_in_every_dtype_the_cpu_supports():
    support = dtype_support(torch, "cpu")
    for name, op in ops.REGISTRY.items():
        assert max(op.probe_shape) <= 16 and probe_cell(name, "float32").shape == op.probe_shape
        for dtype in ("float16", "bfloat16", "float32", "float64"):
            assert support[dtype][name] is None, (dtype, name, support[dtype][name])


def test_unknown_op_is_a_one_line_value_error_naming_the_known_ops():
    with pytest.raises(ValueError) as err:
        ops.get("conv2d")
    known = ", ".join(ops.REGISTRY)
    assert known.startswith("mm, addmm, bmm, linear, ") and "sdpa_causal" in known
    assert str(err.value) == f"unknown op 'conv2d'; choose one of {known}"
    for make in (
        lambda: Cell("conv2d", (1, 2, 3), "float16"),
        lambda: Cell.from_key("conv2d/1x2x3/float16"),
        lambda: probe_cell("conv2d", "float16"),
    ):
        with pytest.raises(ValueError, match="^unknown op 'conv2d'; choose one of mm, "):
            make()


def test_an_op_missing_from_the_support_table_is_unsupported_not_assumed_to_run():
    table = {"float16": {"mm": None, "bmm": "RuntimeError: no"}}
    assert unsupported_reason(table, "float16", "mm") is None
    assert unsupported_reason(table, "float16", "bmm") == "RuntimeError: no"
    assert unsupported_reason(table, "float16", "addmm") == (
        "not probed by harness.bench.provenance " "(its table lists mm, bmm in float16)"
    )
    assert "no op" in unsupported_reason(table, "float32", "mm")
    assert unsupported_reason({}, "float16", "addmm") is None  # no table at all: nothing to go by


def test_unknown_op_in_the_plan_is_a_usage_error_with_every_ops_layout():
    with pytest.raises(UsageError) as err:
        planning.plan_cells(None, ["conv2d/1x2x3/float16"], quick=True)
    assert (
        err.value.cause
        == f"bad cell 'conv2d/1x2x3/float16': unknown op 'conv2d'; choose one of {', '.join(ops.REGISTRY)}"
    )
    assert err.value.remedy.startswith("write cells as op/MxNxK/dtype, e.g. mm/512x512x512/float16 (op/layout: ")
    assert "bmm/BxMxNxK" in err.value.remedy and "sdpa_causal/BxHxLxD" in err.value.remedy
    with pytest.raises(UsageError) as err:
        planning.plan_cells(None, ["bmm/8x64x64/float32"], quick=True)
    assert err.value.remedy == (
        "write bmm cells as bmm/BxMxNxK/dtype (batch, rows of the output, columns of the "
        "output, inner dimension), e.g. bmm/8x512x512x512/float16"
    )


def test_quick_on_cpu_measures_float32_unless_asked():
    def dtypes(cells):
        return sorted({c.dtype for c in cells})

    cpu = planning.plan_cells(None, None, quick=True, device="cpu")
    assert dtypes(cpu) == ["float32"] and len(cpu) == 8
    assert dtypes(planning.plan_cells(None, None, quick=True, device="cuda")) == ["bfloat16", "float16", "float32"]
    assert dtypes(planning.plan_cells(None, None, quick=False, device="cpu")) == ["bfloat16", "float16", "float32"]
    asked = planning.plan_cells(["float16"], None, quick=True, device="cpu")
    assert dtypes(asked) == ["float16"] and len(asked) == 8


def test_unknown_op_in_results_json_is_a_results_error_not_a_traceback():
    assert report.cell_of("mm/2x3x4/float16") == Cell("mm", (2, 3, 4), "float16")
    with pytest.raises(ResultsError) as err:
        report.cell_of("conv2d/1x2x3/float16")
    assert "results.json names cell 'conv2d/1x2x3/float16'" in err.value.cause
    assert "unknown op 'conv2d'" in err.value.cause
