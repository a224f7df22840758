"""harness.report: verdict causes and bimodal cells in words (the numbers come from harness.stats)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness import details, report, stats


@pytest.mark.parametrize("cause", list(stats.Cause))
def test_every_cause_has_words(cause):
    words = details.cause_words(cause, 0.02, 0.95)
    assert words
    band = (stats.Cause.BEYOND_BAND, stats.Cause.INSIDE_BAND, stats.Cause.STRADDLES_BAND)
    assert ("±2%" in words) == (cause in band)


def test_below_floor_words_name_the_floor():
    assert details.cause_words(stats.Cause.BELOW_FLOOR, 0.02, 0.95) == "fewer than 4 processes per side: no verdict"
    assert "fewer than 5" in details.cause_words(stats.Cause.BELOW_FLOOR, 0.02, 0.99)


def test_bimodal_cell_shows_modes_and_per_mode_speedups_not_a_ratio_across_modes():
    rng = np.random.default_rng(3)
    s = 1e-5 * np.r_[np.exp(rng.normal(0, 0.005, 6)), 2.5 * np.exp(rng.normal(0, 0.005, 4))]
    p = 1e-5 * np.r_[1.1 * np.exp(rng.normal(0, 0.005, 5)), 2.75 * np.exp(rng.normal(0, 0.005, 5))]
    text = details.modes_text(stats.compare(s, p))
    assert text == (
        "stock 10.0 µs (60%) / 24.9 µs (40%); patched 11.0 µs (50%) / 27.5 µs (50%); "
        "speedup per mode 0.909× / 0.908×"
    )


def test_a_build_manifest_without_compiler_or_cmake_renders_a_dash():
    """A manifest of an older build lacks ``compiler``/``cmake``: results.json passes validation, and the
    report rendered ``None`` into a join and crashed with TypeError; it shows "–" for the missing fields."""
    import math
    import random

    from test_evidence import synthetic

    from harness import results as res

    def time_of(build, config, key, rnd):
        return 1e-3 * math.exp(random.Random(f"{build}/{key}/{rnd}").gauss(0, 0.01))

    data = synthetic("cpu", {"default": {}}, ["mm/512x512x512/float32"], 4, time_of)
    for name in ("stock", "patched"):
        data["builds"][name]["build"] = {
            "base_sha": "0" * 40,
            "platform": "linux",
            "build_type": "Release",
            "version": f"2.13.0+{name}",
            "environment": {"USE_CUDA": "0", "PYTORCH_BUILD_VERSION": f"2.13.0+{name}"},
        }
    data["builds"]["patched"]["build"]["compiler"] = "gcc 13.2"
    assert res.problem(data) is None
    text = report.render(data)
    assert "| compiler | – | gcc 13.2 |" in text and "| CMake | – | – |" in text
    assert f"| base SHA | `{'0' * 40}` | `{'0' * 40}` |" in text and "| series | – | – |" in text


# ----------------------------------------------------------------- times below the timer's resolution


def _example(name: str) -> dict:
    import json
    from pathlib import Path

    examples = Path(__file__).resolve().parent.parent / "docs" / "examples"
    return json.loads((examples / name / "results.json").read_text())


def _blocks_of(data: dict, build: str, config: str, key: str, block_s: float) -> int:
    """Every process of (build, config) times ``key`` in blocks of ``block_s`` seconds; returns how many."""
    n = 0
    for proc in data["processes"]:
        rec = proc["cells"].get(key)
        if proc["build"] == build and proc["config"] == config and rec and rec["status"] == "ok":
            m = rec["measurement"]
            m.update(samples=[block_s / m["number"]] * len(m["samples"]), median=block_s / m["number"])
            n += 1
    return n


#: the resolution floor of the host clock, seconds per block: 100 ticks of 125/3 ns (Apple silicon's
#: mach_absolute_time, the coarsest host clock the harness runs on)
FLOOR_S = 100 * 125 / 3 * 1e-9


@pytest.mark.parametrize("inside", [True, False])
def test_a_cell_below_timer_resolution_gets_no_verdict_and_leaves_the_geomean(tmp_path, inside):
    """The issue's case, at the floor's edge: stock blocks of mm 512³ fp32 (1 call per block) a hair over
    the resolution floor are a measurement (judged: patched 4.3 ms vs stock 4.2 µs is slower); a hair
    under it they were judged just the same (``0.000x [0.000, 0.000] | **slower**``, geometric mean
    'patched 1467.7% slower'). Now: 'below timer resolution', no verdict, no ratio, and the geometric
    mean is over the other 7 cells with the one left out said."""
    from harness import cli

    data = _example("cpu-ab")
    block = FLOOR_S * (1 + 1e-9) if inside else FLOOR_S * (1 - 1e-6)
    assert _blocks_of(data, "stock", "default", "mm/512x512x512/float32", block) >= 4
    out = tmp_path / "run"
    out.mkdir()
    import json

    (out / "results.json").write_text(json.dumps(data))
    assert cli.main(["report", str(out)]) == 0
    text = (out / "report.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| mm M512 N512 K512 | float32 | 4,"))
    summary = next(line for line in text.splitlines() if line.startswith("- **default**"))
    if inside:
        assert "| **slower** |" in row and "below timer resolution" not in text.lower()
        assert "geometric-mean speedup over 8 cells" in summary and "below timer resolution" not in summary
    else:
        assert "**slower**" not in row and "| – |" in row and "below timer resolution" in row, row
        assert "geometric-mean speedup over 7 cells (1 cell below timer resolution left out)" in summary, summary
        assert "1467.7" not in text and "**slower**" not in summary
        # said once in the PR block; not among the undetermined cells whose remedy is more processes
        assert "**Below timer resolution: 1 cell, not judged**" in text
        assert "(7 undetermined, 1 below timer resolution of 8 cells;" in text
        assert "`patched/default vs stock/default` mm M512 N512 K512 float32." in text
        assert "| patched/default vs stock/default | mm M512 N512 K512 | float32 | kernel-bound |" not in text


def test_a_contrast_across_configs_takes_the_same_rule():
    """A declared contrast across configs (``stock/default`` faster than ``stock/no_vec`` on sdpa, the cpu
    example) is judged by the same rule: stock/default's sdpa blocks under the floor would have 'shown'
    the claim at a 6000x speedup; now the cell has no verdict and the claim is not shown."""
    from harness import contrasts
    from harness import document as doc

    data = _example("cpu-contrasts")
    assert _blocks_of(data, "stock", "default", "sdpa/1x8x512x64/float32", FLOOR_S * (1 - 1e-6)) >= 4
    run = doc.from_json(data, "edited cpu-contrasts")
    faster = next(r for r in contrasts.evaluate_all(run) if r.contrast.claim == "faster")
    (row,) = faster.rows
    assert row.cmp.verdict == stats.UNDETERMINED and row.cmp.cause == stats.Cause.BELOW_RESOLUTION
    assert not math.isfinite(row.cmp.ratio) and faster.outcome == contrasts.NOT_SHOWN
    assert faster.geomean.n_unresolved == 1 and faster.geomean.n_cells == 0


def test_the_drift_series_leaves_out_a_record_below_timer_resolution():
    """A process's time below the timer's resolution is not a time: the drift check reads the other records,
    as if that one had not measured the cell (its round's ratio for that cell was ~1e-6 before)."""
    import copy

    from harness import document as doc

    data = _example("cpu-ab")
    proc = next(p for p in data["processes"] if (p["build"], p["config"], p["round"]) == ("stock", "default", 0))
    failed = copy.deepcopy(data)
    m = proc["cells"]["mm/512x512x512/float32"]["measurement"]
    m.update(samples=[1e-9] * len(m["samples"]), median=1e-9)
    for p in failed["processes"]:
        if p["name"] == proc["name"]:
            p["cells"]["mm/512x512x512/float32"].update(status="failed", reason="planted")
    series = report.round_series(doc.from_json(data), "default", "stock")
    assert series == report.round_series(doc.from_json(failed), "default", "stock")
    assert series != report.round_series(doc.from_json(_example("cpu-ab")), "default", "stock")


def test_the_noise_floor_leaves_out_a_cell_below_timer_resolution():
    """The noise floor (what one more process buys back) is read from judged cells only: a cell below the
    timer's resolution counts as one that measured nothing (its constant stock side pulled the floor down)."""
    from harness import contrasts, undetermined
    from harness import document as doc

    def floors(data):
        return [
            (f.config, f.sd, f.cells) for f in undetermined.noise_floors(contrasts.evaluate_all(doc.from_json(data)))
        ]

    data, failed = _example("cpu-ab"), _example("cpu-ab")
    _blocks_of(data, "stock", "default", "mm/512x512x512/float32", 1e-9)
    for p in failed["processes"]:
        if (p["build"], p["config"]) == ("stock", "default"):
            p["cells"]["mm/512x512x512/float32"].update(status="failed", reason="planted")
    assert floors(data) == floors(failed) != floors(_example("cpu-ab"))


def _never_started_run():
    """Two configs over 4 rounds: ``default`` measured (patched 20 % faster: decided), ``broken``
    (``PYTHONHOME=/nonexistent`` in series.toml) whose interpreter never started in any process."""
    import math
    import random

    from test_evidence import synthetic

    def time_of(build, config, key, rnd):
        return (
            1e-3 * (0.8 if build == "patched" else 1.0) * math.exp(random.Random(f"{build}{key}{rnd}").gauss(0, 1e-3))
        )

    cells = ["mm/512x512x512/float32"]
    data = synthetic("cpu", {"default": {}, "broken": {"PYTHONHOME": "/nonexistent"}}, cells, 4, time_of)
    why = (
        "the build's interpreter did not start under this environment: Fatal Python error: init_fs_encoding: "
        "failed to get the Python codec of the filesystem encoding"
    )
    for proc in data["processes"]:
        if proc["config"] == "broken":
            proc.update(status="failed", reason=why, did_not_start=why, returncode=1, worker_started=None)
            proc["cells"] = {k: {"status": "failed", "reason": why} for k in cells}
    seen = {"names": ["mkl:SGEMM(N,N,512,512,512)"], "path": "mkl", "route": "default", "trace": "MKL_VERBOSE"}
    data["kernels"] = {
        b: {
            "default": {k: seen for k in cells},
            "broken": {k: {**seen, "names": [], "path": None, "route": None, "error": why} for k in cells},
        }
        for b in ("stock", "patched")
    }
    data["run"]["command"] = ["python", "-m", "harness", "compare", "--rounds", "4", "--out", "x"]
    return data, why


def test_a_config_that_never_started_is_one_line_on_top_and_no_resume_or_kernel_comparison():
    """A series.toml config with ``PYTHONHOME=/nonexistent``: the report proposed more rounds of it and its
    Kernels line said "a different kernel in every cell" although no kernel was observed on either side."""
    from harness import results as res

    data, why = _never_started_run()
    assert res.problem(data) is None
    analysis = report.analyse(data)
    assert [f.row.cell.key for f in analysis.needs] == [] and analysis.resume is None
    text = report.render(data, analysis)
    first_screen = text.split("<details>")[0]
    assert f"> **Error:** config `broken` never started: {why}." in first_screen
    assert first_screen.index("never started") < first_screen.index("Speedup = ")  # the first of the notes
    assert "different kernel" not in text and "Resume the run" not in text and "--rounds" not in first_screen
    assert "Kernels: A `patched/default`" in text  # the config that ran keeps its line


def test_different_kernel_is_said_only_of_kernels_observed_on_both_sides():
    """The Kernels line counted a cell with nothing observed as "a different kernel"."""
    from harness import observed
    from harness.contrasts import Contrast, Side

    data, _ = _never_started_run()
    data["kernels"]["stock"]["broken"] = data["kernels"]["stock"]["default"]  # one side observed, one not
    line = observed.contrast_line(report.doc.of(data), Contrast(Side("patched", "broken"), Side("stock", "broken")))
    assert "different kernel" not in line and line.endswith("no cell has a kernel observed on both sides.")
    data["kernels"]["patched"]["broken"] = {
        "mm/512x512x512/float32": {
            **data["kernels"]["stock"]["default"]["mm/512x512x512/float32"],
            "names": ["mkl:SGEMM(N,T,512,512,512)"],
        }
    }
    line = observed.contrast_line(report.doc.of(data), Contrast(Side("patched", "broken"), Side("stock", "broken")))
    assert line.endswith("a different kernel in every cell.")


def test_the_run_ends_naming_a_config_that_never_started_not_its_cells():
    """The run ended "N cell measurements failed; see report.md" for a config whose interpreter never started."""
    from harness import document as doc
    from harness.runner import closing_notes

    data, why = _never_started_run()
    assert closing_notes(doc.from_json(data)) == [f"config broken never started: {why}"]
    ran = [p for p in data["processes"] if p["config"] == "default"]
    ran[0]["cells"]["mm/512x512x512/float32"] = {"status": "failed", "reason": "RuntimeError: x"}
    ran[1].update(status="failed", reason="worker exited with status 3 after its cells finished")
    assert closing_notes(doc.from_json(data))[1:] == [
        "1 cell measurements failed; see report.md",
        "1 worker processes failed after their cells; see report.md",
    ]
