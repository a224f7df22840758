"""harness.report: verdict causes and bimodal cells in words (the numbers come from harness.stats)."""

from __future__ import annotations

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
