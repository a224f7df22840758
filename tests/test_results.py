"""harness.results: grouping records into process matrices and per-round series."""

from __future__ import annotations

import math

import pytest

from harness import results as res


def _rec(median, status="ok"):
    return (
        {"status": status, "measurement": {"samples": [median], "median": median}}
        if status == "ok"
        else {"status": status}
    )


def test_process_matrix_rows_are_processes_and_missing_cells_are_nan():
    per_cell = {
        "a": {"stock": [{**_rec(1.0), "round": 0}, {**_rec(1.1), "round": 1}, {**_rec(1.2), "round": 2}]},
        "b": {"stock": [{**_rec(2.0), "round": 0}, {**_rec(0, "failed"), "round": 1}]},
    }
    m = res.process_matrix(per_cell, "stock", ["a", "b"])
    assert m[0] == [1.0, 2.0]
    assert m[1][0] == 1.1 and math.isnan(m[1][1])  # failed: not measured
    assert m[2][0] == 1.2 and math.isnan(m[2][1])  # adaptive round without b
    assert res.process_matrix(per_cell, "patched", ["a", "b"]) == []


def test_round_series_is_the_median_of_each_cells_relative_time():
    per_cell = {
        "a": {"stock": [{**_rec(t), "round": r} for r, t in enumerate([1.0, 1.0, 1.1, 1.2, 1.3])]},
        "b": {"stock": [{**_rec(t), "round": r} for r, t in enumerate([2.0, 2.0, 2.2, 2.4, 2.6])]},
    }
    series = res.round_series(per_cell, "stock")
    assert series == pytest.approx([1 / 1.1, 1 / 1.1, 1.0, 1.2 / 1.1, 1.3 / 1.1])
    from harness import stats

    d = stats.drift(series)
    assert d.verdict == "drift" and d.rel_change > 0.2  # getting slower over the run
