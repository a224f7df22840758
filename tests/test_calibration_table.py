"""benchmarks/calibration_table.py: methodology numbers recomputed from calibration files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("calibration_table", ROOT / "benchmarks" / "calibration_table.py")
table = importlib.util.module_from_spec(_spec)
sys.modules["calibration_table"] = table
_spec.loader.exec_module(table)


def _file(mode, rows):
    return {
        "summary": {
            "device": "cpu",
            "mode": mode,
            "rounds": 6,
            "threshold": 0.02,
            "timing": {"measure_s": 0.3},
            # a stale summary: the table must not copy it
            "false_positives": 99,
            "median_half_width": 9.9,
        },
        "rows": rows,
    }


def test_rows_with_medians_are_recomputed_with_the_current_stats():
    rng = np.random.default_rng(5)
    rows = []
    for i, factor in enumerate((1.0, 1.0, 1.10)):
        s = list(np.exp(rng.normal(0, 0.003, 6)))
        p = list(factor * np.exp(rng.normal(0, 0.003, 6)))
        rows.append(
            {
                "cell": f"c{i}",
                "expected_ratio": 1.0,
                "ratio": 5.0,
                "ci": [4.0, 6.0],
                "verdict": "faster",
                "half_width": 0.5,
                "measured_s": 1.8,
                "n": [6, 6],
                "s_to_1pct": None,
                "stock_medians": s,
                "patched_medians": p,
            }
        )
    s = table.summary(_file("aa", rows))
    assert s["recomputed"] and s["cells"] == 3 and s["n"] == 6
    assert s["false_positives"] == 1  # the planted 10 % cell, seen as an A/A false positive; the stale 99 is ignored
    recomputed, _ = table.rows(_file("aa", rows))
    assert [r["verdict"] for r in recomputed] == ["equivalent", "equivalent", "slower"]
    assert recomputed[2]["ratio"] == pytest.approx(1.10, rel=0.01)
    assert s["median_half_width"] < 0.01


def test_stored_files_say_they_could_not_be_recomputed():
    path = ROOT / "docs" / "calibration" / "h200-large_planted.json"
    s = table.summary(json.loads(path.read_text()))
    assert not s["recomputed"]
    assert (s["cells"], s["n"], s["detected"], s["eligible"], s["undetermined"]) == (20, 6, 17, 20, 3)
    assert s["median_half_width"] == pytest.approx(0.0080, abs=5e-5)
    assert table.summary_line(path).endswith("| stored bootstrap |")
