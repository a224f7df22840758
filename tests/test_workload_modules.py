"""A series' own workload module (harness.bench.plugins): loaded from the series folder, its cells run by
``compare`` like the built-in ones, and its planted defects caught: a reference off by a factor 2 fails its
accuracy check, a FLOP formula missing multiply-add's factor 2 disagrees with torch.utils.flop_counter, and
a module that cannot be used (syntax error, missing attribute, bad FLOP, a path outside the series folder)
is refused in one line at load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import fixed_rounds, run_harness

from harness import plan as planning
from harness.bench import devices, ops, plugins
from harness.bench.timer import BlockTimer
from harness.bench.worker import run_cell
from harness.bench.workloads import BUILTIN, Cell, Workload, default_cells
from harness.errors import SeriesError
from harness.manifest import load_series

DEMO = Path(__file__).parent / "data" / "workload-series" / "workload.py"
REPO = Path(__file__).resolve().parent.parent
SERIES = "demo-workload"


@pytest.fixture(autouse=True)
def registry():
    """Every test leaves :data:`harness.bench.ops.REGISTRY` as it found it (the built-in ops)."""
    before = dict(ops.REGISTRY)
    yield
    ops.REGISTRY.clear()
    ops.REGISTRY.update(before)


def series_folder(root: Path, workload_key: str | None = "workload.py", module: str | None = None) -> Path:
    """A loadable series ``demo-workload`` under ``root`` with the demo module (or ``module``'s text) beside it."""
    folder = root / SERIES
    (folder / "v1").mkdir(parents=True)
    (folder / "v1" / "0001-demo.patch").write_text("From 0000000000000000000000000000000000000000 Mon Sep 17\n")
    key = f'workload = "{workload_key}"\n' if workload_key else ""
    (folder / "series.toml").write_text(
        f'name = "{SERIES}"\ntitle = "Demo"\nupstream = "https://example.invalid/u.git"\n'
        f"[evidence]\n{key}"
        '[[base]]\nref = "v1"\ndir = "v1"\npatches = ["0001-demo.patch"]\n'
    )
    if module is None:
        shutil.copy(DEMO, folder / "workload.py")
    else:
        (folder / "workload.py").write_text(module)
    return folder


def test_the_builtin_cells_are_the_first_workload_module():
    assert BUILTIN.cells(("float32",), quick=True) == default_cells(("float32",), quick=True)
    assert [c.key for c in BUILTIN.cells(("float16",))][:2] == ["mm/512x512x512/float16", "mm/1024x1024x1024/float16"]
    assert {o.name for o in BUILTIN.ops} == set(ops.BUILTIN) and all(o.origin == "" for o in BUILTIN.ops)


def test_a_series_module_brings_ops_whose_cells_parse_label_and_count_like_builtin_ones():
    workload = plugins.load(DEMO)
    with pytest.raises(ValueError, match="unknown op 'cumsum'"):
        Cell.from_key("cumsum/64x1024/float32")  # not registered until the module is
    plugins.register(workload)
    cell = Cell.from_key("cumsum/64x1024/float32")
    assert cell.label == "R64 N1024" and cell.family == "scan" and cell.flop == 64 * 1023 and cell.reduction == 1024
    assert cell.spec.origin == str(DEMO) and cell.nbytes() == 4 * 2 * 64 * 1024
    assert [c.key for c in workload.cells(("float32",))] == [
        "cumsum/64x1024/float32",
        "gram/128x256/float32",
        "cumsum_wrongref/64x1024/float32",
        "gram_wrongflop/128x256/float32",
    ]
    assert planning.plan_cells(None, None, True, "cpu", workload) == workload.cells(("float32",))
    assert planning.plan_cells(None, ["gram/8x8/float16"], True, "cpu", workload) == [Cell("gram", (8, 8), "float16")]


def test_a_module_that_picks_builtin_cells_adds_only_what_the_builtin_set_lacks():
    series = load_series("mps-gemm-prefer-fast-math")
    assert series.workload.ops == () and series.workload.builtin_cells
    assert ("mm", (1024, 1024, 1024)) in series.workload.full and ("sdpa", (1, 8, 512, 64)) in series.workload.full
    assert planning.plan_cells(None, None, False, "mps", series.workload) == default_cells()
    own = Workload("w.py", (), (("mm", (8, 8, 8)),), (("mm", (8, 8, 8)),), builtin_cells=True)
    cells = planning.plan_cells(["float32"], None, True, "cpu", own)
    assert cells == default_cells(("float32",), quick=True) + [Cell("mm", (8, 8, 8), "float32")]


_GOOD_OP = """
from harness.bench.ops import Op
OPS = [Op("double", "scale", ("N",), ("length",), flop=lambda n: {flop}, flop_source="one multiply per element",
          inputs=lambda n: [(n,)], output=lambda n: (n,), reduction=lambda n: 1,
          call=lambda x: (lambda: 2 * x), reference=lambda x: x + x, probe_shape=(16,), example_shape=(1024,))]
CELLS = [("double", (1024,))]
"""


@pytest.mark.parametrize(
    ("flop", "refused"),
    [
        ("n", None),  # just inside: an integer count
        ("1.0 * n", None),  # an integer-valued float (2.0·M·N·K is how the built-in formulas count)
        ("0 * n", "FLOP per call at (16,) is 0, not a positive integer count"),  # just outside: zero
        ("-n", "FLOP per call at (16,) is -16, not a positive integer count"),
        ("n + 0.5", "FLOP per call at (16,) is 16.5, not a positive integer count"),
        ("float('nan')", "FLOP per call at (16,) is nan, not a positive integer count"),
        ("True", "FLOP per call at (16,) is True, not a positive integer count"),
        ("n // (n - 16)", "its size functions raised ZeroDivisionError: integer division or modulo by zero at (16,)"),
    ],
)
def test_a_flop_formula_that_is_not_a_positive_integer_count_is_refused_at_load(tmp_path, flop, refused):
    path = tmp_path / "workload.py"
    path.write_text(_GOOD_OP.format(flop=flop))
    if refused is None:
        assert plugins.load(path).ops[0].name == "double"
        return
    with pytest.raises(plugins.WorkloadError) as err:
        plugins.load(path)
    assert str(err.value) == f"{path}: op 'double': {refused}"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("OPS = []\nCELLS = = []\n", "line 2: SyntaxError: invalid syntax"),
        ("OPS = []\n", ": no CELLS (a workload module defines OPS and CELLS)"),
        ("CELLS = []\n", ": no OPS (a workload module defines OPS and CELLS)"),
        ("raise RuntimeError('no GPU here')\n", ": importing it raised RuntimeError: no GPU here"),
        ("OPS = ['mm']\nCELLS = []\n", ": OPS must be a list of harness.bench.ops.Op records"),
        ("OPS = []\nCELLS = [('conv', (1, 2))]\n", ": cell ('conv', (1, 2)) names no op of OPS nor a built-in one"),
        ("OPS = []\nCELLS = [('mm', (1, 2))]\n", ": cell ('mm', (1, 2)): mm takes 3 sizes"),
        ("OPS = []\nCELLS = [7]\n", ": CELLS must be a sequence of (op, shape) pairs, e.g. ('mm', (512, 512, 512))"),
        ("OPS = []\nCELLS = []\nBUILTIN_CELLS = 1\n", ": BUILTIN_CELLS must be True or False, not 1"),
        (
            _GOOD_OP.format(flop="n").replace('Op("double"', 'Op("mm"'),
            ": op 'mm' is a built-in op; give the series' op its own name",
        ),
    ],
)
def test_a_module_that_cannot_be_used_is_refused_in_one_line(tmp_path, text, said):
    path = tmp_path / "workload.py"
    path.write_text(text)
    with pytest.raises(plugins.WorkloadError) as err:
        plugins.load(path)
    assert str(err.value).startswith(str(path)) and said in str(err.value) and "\n" not in str(err.value)
    assert set(ops.REGISTRY) == set(ops.BUILTIN)  # nothing registered


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("../outside.py", "[evidence] key 'workload': '../outside.py' is not a file of the series folder"),
        ("/etc/hostname", "[evidence] key 'workload': '/etc/hostname' is not a file of the series folder"),
        ("absent.py", "absent.py does not exist"),
    ],
)
def test_series_toml_names_only_a_workload_file_inside_the_series_folder(tmp_path, key, said):
    (tmp_path / "outside.py").write_text("OPS = []\nCELLS = []\n")  # a usable module, but not the series'
    folder = series_folder(tmp_path / "patches", key)
    with pytest.raises(SeriesError) as err:
        load_series(folder)
    assert said in err.value.cause and "\n" not in err.value.cause


def test_a_series_whose_module_is_refused_does_not_load(tmp_path):
    folder = series_folder(tmp_path, module="OPS = []\n")
    with pytest.raises(SeriesError) as err:
        load_series(folder)
    assert err.value.cause.endswith(
        f"series.toml: [evidence] key 'workload': {folder / 'workload.py'}: no CELLS (a workload module defines OPS "
        "and CELLS)"
    )
    assert err.value.remedy == "fix the module (docs/new-series.md, 'Your own workload')"
    assert load_series(series_folder(tmp_path / "ok")).workload.name == "workload.py"  # the demo loads


def _run(key: str) -> dict:
    device = devices.profile("cpu", torch)
    timing = {"warmup_s": 0.0, "measure_s": 0.0, "min_block_s": 0.0, "min_samples": 1}
    spec = {"device": "cpu", "check": True, "timing": timing}
    return run_cell(torch, BlockTimer(device), device, Cell.from_key(key), spec, {})


def test_a_reference_off_by_a_factor_fails_its_accuracy_check_in_the_worker():
    plugins.register(plugins.load(DEMO))
    good, wrong = _run("cumsum/64x1024/float32"), _run("cumsum_wrongref/64x1024/float32")
    assert good["status"] == "ok" and good["check"]["status"] == "passed" and good["check"]["rel_error"] < 1e-6
    assert wrong["status"] == "failed" and wrong["check"]["status"] == "failed"
    assert wrong["check"]["rel_error"] == pytest.approx(0.5, rel=1e-6)  # ‖x - 2x‖ / ‖2x‖
    assert wrong["reason"].startswith("check failed: relative error 0.5 exceeds the float32 bound")


def test_a_flop_formula_that_disagrees_with_torchs_flop_counter_fails_the_cell():
    plugins.register(plugins.load(DEMO))
    good, wrong = _run("gram/128x256/float32"), _run("gram_wrongflop/128x256/float32")
    assert good["status"] == "ok" and plugins.flop_problem(Cell.from_key("gram/128x256/float32")) is None
    assert wrong["status"] == "failed" and wrong["check"]["status"] == "passed"  # right values, wrong count
    assert wrong["reason"] == (
        "FLOP formula gives 4.1943e+06 per call but torch.utils.flop_counter counts 8.38861e+06 for the op's "
        "call (fix flop in workload.py)"
    )
    # an op torch does not count (cumsum) and the built-in ops are not cross-checked here
    assert plugins.flop_problem(Cell.from_key("cumsum/64x1024/float32")) is None
    assert plugins.flop_problem(Cell("sdpa_causal", (1, 2, 64, 16), "float32")) is None


@pytest.mark.e2e
def test_compare_measures_a_series_workload_and_reports_its_planted_defects(tmp_path, this_python):
    """The one end-to-end run: compare --quick on a series with the demo module (its 4 cells, both builds)."""
    folder = series_folder(tmp_path / "patches")
    out = tmp_path / "run"
    args = ["compare", "--stock", this_python, "--patched", this_python, "--series", str(folder)]
    args += ["--device", "cpu", "--quick", "--configs", "default", "--rounds", "1", "--out", str(out)]
    ran = run_harness(*fixed_rounds(tuple(args)), cwd=REPO)
    assert ran.returncode in (0, 1), ran.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    keys = ["cumsum/64x1024/float32", "gram/128x256/float32"]
    planted = ["cumsum_wrongref/64x1024/float32", "gram_wrongflop/128x256/float32"]
    assert data["run"]["cells"] == keys + planted
    recorded = data["evidence"]["workload"]
    assert recorded["file"] == "workload.py" and recorded["flop"]["gram/128x256/float32"] == 2 * 128 * 128 * 256
    assert recorded["ops"]["cumsum"]["dims"] == ["R", "N"]
    for proc in data["processes"]:
        cells = proc["cells"]
        assert all(cells[k]["status"] == "ok" and cells[k]["measurement"]["samples"] for k in keys)
        assert cells[planted[0]]["reason"].startswith("check failed: relative error 0.5 exceeds")
        assert cells[planted[1]]["reason"].startswith("FLOP formula gives 4.1943e+06 per call but torch.utils")
    report = (out / "report.md").read_text()
    assert "R64 N1024" in report and "M128 K256" in report
    assert "relative error 0.5 exceeds the float32 bound" in report
    assert "torch.utils.flop_counter counts 8.38861e+06" in report
    # re-rendered later where the module is not loaded: the recorded labels and FLOP make the same report
    for name in ("cumsum", "gram", "cumsum_wrongref", "gram_wrongflop"):
        del ops.REGISTRY[name]
    (out / "report.md").unlink()
    assert run_harness("report", str(out), cwd=REPO).returncode in (0, 1)
    assert (out / "report.md").read_text() == report
