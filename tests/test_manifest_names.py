"""series.toml validated whole when it loads (harness.manifest.load_series: check, apply, compare/bench planning):
markers are environment variable names, and every contrast, config, route, test and marker names something that
exists, refused in one line naming the field and the nearest valid name. On a copy of the real MPS series; each
case plants one bad name and shows it refused, and a name just inside the rule loads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.errors import SeriesError
from harness.manifest import load_series

SERIES = Path(__file__).resolve().parent.parent / "patches" / "mps-gemm-prefer-fast-math"
MARKERS = 'markers = ["PYTORCH_MPS_GEMM_PREFER_FAST_MATH"]'


def _copy(tmp_path: Path, old: str, new: str) -> Path:
    folder = tmp_path / SERIES.name
    shutil.copytree(SERIES, folder)
    manifest = folder / "series.toml"
    text = manifest.read_text().replace('env = ["PYTORCH_MPS_GEMM_PREFER_FAST_MATH"]\n', "", 1)  # markers only
    assert old in text
    manifest.write_text(text.replace(old, new, 1))
    return folder


def _refused(folder: Path) -> str:
    with pytest.raises(SeriesError) as caught:
        load_series(folder)
    text = str(caught.value)
    assert "series.toml" in text and "\n" not in text
    return text


# ------------------------------------------------------------------ markers and env keys as variable names
@pytest.mark.parametrize("marker", ["_A1", "A", "a_b9", "PYTORCH_MPS_GEMM_PREFER_FAST_MATH"])
def test_a_marker_that_is_a_variable_name_loads(tmp_path, marker):
    folder = _copy(tmp_path, MARKERS, f'markers = ["{marker}"]')
    assert load_series(folder).evidence.markers == (marker,)


@pytest.mark.parametrize("marker", ["1A", "A=B", "A B", "A-B", "É"])
def test_a_marker_that_is_not_a_variable_name_is_refused(tmp_path, marker):
    folder = _copy(tmp_path, MARKERS, f'markers = ["{marker}"]')
    text = _refused(folder)
    assert f"[evidence] key 'markers': {marker!r} is not an environment variable name" in text


def test_an_empty_marker_is_refused(tmp_path):
    folder = _copy(tmp_path, MARKERS, 'markers = [""]')
    assert "[evidence] key 'markers'" in _refused(folder)


@pytest.mark.parametrize("name, good", [("_A1", True), ("1A", False), ("A=B", False), ("A B", False)])
def test_the_older_top_level_env_is_checked_the_same_way(tmp_path, name, good):
    """The top-level ``env`` (the markers' older name) of an older manifest."""
    folder = _copy(tmp_path, MARKERS + "\n", "")
    manifest = folder / "series.toml"
    manifest.write_text(manifest.read_text().replace("[pr]", f'env = ["{name}"]\n\n[pr]', 1))
    if good:
        assert load_series(folder).evidence.markers == (name,)
    else:
        assert f"key 'env': {name!r} is not an environment variable name" in _refused(folder)


def test_check_refuses_a_bad_marker_in_one_line(tmp_path, capsys):
    """``check`` loads the manifest first: the line comes before any upstream is fetched."""
    folder = _copy(tmp_path, MARKERS, 'markers = ["A=B"]')
    assert cli.main(["check", "--series", str(folder)]) == 2
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "[evidence] key 'markers': 'A=B' is not an environment variable name" in errors[0]


# ------------------------------------------------------------------ every name names something that exists
@pytest.mark.parametrize(
    "old, new, said",
    [
        # a contrast's config, build, op, dtype
        (
            'a = "patched/all"\nb = "stock/fast_math+prefer_metal"',
            'a = "patched/al"\nb = "stock/fast_math+prefer_metal"',
            "[[evidence.contrast]] #1 key 'a': config 'al' is not a config of this series (did you mean 'all'?)",
        ),
        (
            'a = "patched/vanilla"',
            'a = "pached/vanilla"',
            "[[evidence.contrast]] #2 key 'a': build 'pached' is not a build (did you mean 'patched'?)",
        ),
        (
            'ops = ["mm", "addmm", "linear"]',
            'ops = ["mm", "addmm", "liner"]',
            "[[evidence.contrast]] #2 key 'ops': op 'liner' is not an op (did you mean 'linear'?)",
        ),
        (
            'ops = ["mm"]\nclaim = "faster"',
            'ops = ["mm"]\ndtypes = ["float61"]\nclaim = "faster"',
            "[[evidence.contrast]] #1 key 'dtypes': dtype 'float61' is not a dtype (did you mean 'float16'?)",
        ),
        # a device table's configs, consistency and routes
        (
            'configs = ["vanilla", "prefer_metal"',
            'configs = ["vanila", "prefer_metal"',
            "[evidence.mps] key 'configs': config 'vanila' is not a mps config (did you mean 'vanilla'?)",
        ),
        (
            'consistency = ["all", "vanilla"]',
            'consistency = ["alll", "vanilla"]',
            "[evidence.mps] key 'consistency': config 'alll' is not a mps config (did you mean 'all'?)",
        ),
        (
            "[evidence.mps.routes]\nprefer_metal =",
            "[evidence.mps.routes]\nprefer_metl =",
            "[evidence.mps.routes]: config 'prefer_metl' is not a mps config (did you mean 'prefer_metal'?)",
        ),
        (
            '[evidence.mps.patched_routes]\nall = { mm = "default", addmm',
            '[evidence.mps.patched_routes]\nall = { mm = "default", adm',
            "[evidence.mps.patched_routes] key 'all': op 'adm' is not an op (did you mean 'addmm'?)",
        ),
        (
            "[evidence.mps.about]\nall =",
            "[evidence.mps.about]\nal =",
            "[evidence.mps.about]: config 'al' is not a mps config (did you mean 'all'?)",
        ),
        # a base's routes name ops that exist
        (
            '[base.routes.mps]\nprefer_metal = { mm = "metal" }',
            '[base.routes.mps]\nprefer_metal = { mmm = "metal" }',
            "[base.routes.mps] key 'prefer_metal': op 'mmm' is not an op (did you mean 'mm'?)",
        ),
        # a test's expected build
        (
            'expect = { stock = "fail", patched = "pass" }',
            'expect = { stock = "fail", patchd = "pass" }',
            "[[evidence.test]] #1 key 'expect': 'patchd' is not a build (stock, patched, build: compare's, bench's; "
            "did you mean 'patched'?)",
        ),
    ],
)
def test_a_name_that_names_nothing_is_refused_with_the_nearest(tmp_path, old, new, said):
    text = _refused(_copy(tmp_path, old, new))
    assert said in text, text


def test_a_name_near_nothing_lists_the_valid_ones(tmp_path):
    text = _refused(_copy(tmp_path, 'a = "patched/vanilla"', 'a = "patched/zzzz"'))
    assert "config 'zzzz' is not a config of this series" in text and "'vanilla'" in text and "did you" not in text


def test_a_contrast_may_name_a_config_of_any_device(tmp_path):
    """A series' contrasts are not per device: a cpu config is a config of the series (a run on mps reports
    that contrast as not measured, as before)."""
    folder = _copy(tmp_path, 'a = "patched/vanilla"\nb = "stock/vanilla"', 'a = "patched/no_vec"\nb = "stock/default"')
    assert load_series(folder).evidence.contrasts[1].a.config == "no_vec"


def test_the_real_series_and_the_planted_route_benchmark_load():
    root = SERIES.parent.parent
    assert load_series(SERIES).evidence.contrasts
    assert load_series(root / "benchmarks" / "planted-route").evidence.device["cpu"]
