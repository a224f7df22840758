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
