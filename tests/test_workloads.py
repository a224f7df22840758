import pytest
import torch

from harness.bench.workloads import Cell, default_cells, make_inputs, op_callable, reference


def test_flop_counts_follow_the_documented_formulas():
    assert Cell("mm", (512, 512, 512), "float16").flop == 2 * 512**3
    assert Cell("addmm", (333, 444, 555), "float32").flop == 2 * 333 * 444 * 555
    assert Cell("bmm", (8, 64, 32, 16), "float32").flop == 8 * 2 * 64 * 32 * 16
    assert Cell("sdpa", (2, 16, 1024, 64), "float16").flop == 4 * 2 * 16 * 1024 * 1024 * 64
    assert Cell("sdpa_causal", (2, 16, 1024, 64), "float16").flop == 2 * 2 * 16 * 1024 * 1024 * 64


def test_key_round_trips_and_labels_use_field_notation():
    cell = Cell("bmm", (4, 256, 128, 64), "bfloat16")
    assert Cell.from_key(cell.key) == cell
    assert cell.key == "bmm/4x256x128x64/bfloat16"
    assert cell.label == "B4 M256 N128 K64"
    assert Cell("sdpa", (1, 8, 512, 64), "float16").label == "B1 H8 L512 D64"


@pytest.mark.parametrize(
    "bad",
    [
        ("conv", (1, 2, 3), "float16"),
        ("mm", (1, 2), "float16"),
        ("mm", (0, 2, 3), "float16"),
        ("mm", (1, 2, 3), "int8"),
    ],
)
def test_bad_cells_are_rejected(bad):
    with pytest.raises(ValueError):
        Cell(*bad)


def test_default_cells_cover_the_seed_and_reviewer_shapes():
    keys = {c.key for c in default_cells()}
    for key in [
        "mm/512x512x512/float16",
        "mm/1024x1024x1024/float16",
        "mm/2048x2048x2048/float16",
        "sdpa/1x8x512x64/float16",
        "sdpa/2x16x1024x64/float16",
        "mm/1x1024x1024/bfloat16",
        "mm/4096x4096x256/float32",
        "mm/333x444x555/float32",
        "mm/4096x4096x4096/float16",
        "sdpa_causal/2x16x1024x64/bfloat16",
    ]:
        assert key in keys
    assert {c.op for c in default_cells()} == {"mm", "addmm", "bmm", "linear", "sdpa", "sdpa_causal"}
    quick = default_cells(("float32",), quick=True)
    assert len(quick) < len(default_cells(("float32",)))
    assert {c.op for c in quick} == {"mm", "addmm", "bmm", "linear", "sdpa", "sdpa_causal"}


@pytest.mark.parametrize("cell", default_cells(("float64",), quick=True), ids=lambda c: c.key)
def test_each_op_matches_its_independent_float64_reference(cell):
    inputs = make_inputs(cell, "cpu", seed=3)
    out = op_callable(cell, inputs)()
    assert tuple(out.shape) == cell.output_shape()
    ref = reference(cell, inputs)
    assert torch.allclose(out, ref, rtol=1e-10, atol=1e-12)


def test_inputs_are_seeded_and_identical_across_calls():
    cell = Cell("mm", (8, 8, 8), "float16")
    a, b = make_inputs(cell, "cpu", seed=1), make_inputs(cell, "cpu", seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], make_inputs(cell, "cpu", seed=2)[0])


def test_inputs_of_one_shape_are_drawn_once_and_every_dtype_gets_the_same_values_as_new_tensors():
    import torch

    from harness.bench import workloads

    workloads._input_cache.clear()
    a = workloads.make_inputs(Cell("mm", (8, 16, 32), "float32"), "cpu")
    b = workloads.make_inputs(Cell("mm", (8, 16, 32), "bfloat16"), "cpu")
    assert len(workloads._input_cache) == 1  # drawn once for both dtypes
    assert all(torch.equal(x.to(torch.bfloat16), y) for x, y in zip(a, b))
    again = workloads.make_inputs(Cell("mm", (8, 16, 32), "float32"), "cpu")
    assert all(torch.equal(x, y) and x.data_ptr() != y.data_ptr() for x, y in zip(a, again))  # new tensors
    a[0].zero_()  # what a caller does to its inputs never reaches the next cell's
    assert workloads.make_inputs(Cell("mm", (8, 16, 32), "float32"), "cpu")[0].abs().sum() > 0
    other_seed = workloads.make_inputs(Cell("mm", (8, 16, 32), "float32"), "cpu", seed=1)
    assert not torch.equal(other_seed[0], again[0])


def test_the_input_cache_drops_the_oldest_shapes_beyond_its_bytes(monkeypatch):
    from harness.bench import workloads

    workloads._input_cache.clear()
    monkeypatch.setattr(workloads, "INPUT_CACHE_BYTES", 40_000)  # 32 KiB fit, 48 KiB do not
    workloads.make_inputs(Cell("mm", (64, 64, 64), "float32"), "cpu")  # two tensors
    workloads.make_inputs(Cell("mm", (64, 64, 64), "float16"), "cpu")  # the same two: nothing new
    assert len(workloads._input_cache) == 1
    workloads.make_inputs(Cell("mm", (64, 64, 32), "float32"), "cpu")  # two more 8 KiB tensors: over the cap
    assert [k[0] for k in workloads._input_cache] == [((64, 32), (32, 64))]
