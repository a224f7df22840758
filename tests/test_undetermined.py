"""Undetermined made actionable (harness.undetermined): noise floor, MDE, processes and minutes to a verdict,
and a resume command that ``compare`` accepts. In-process, synthetic results (tests/test_evidence.synthetic)."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path

import numpy as np
import pytest
from test_evidence import synthetic

from harness import contrasts as con
from harness import details, report, runner, stats
from harness import undetermined as und
from harness.cli import build_parser
from harness.errors import UsageError
from harness.policy import POLICY, CellClass

CELLS = ["mm/512x512x512/float32", "mm/333x444x555/float32"]


def _lognormal(sd: float, shift: float = 1.0):
    """time_of for synthetic(): patched = ``shift`` x stock, every process's median lognormal(sd) around it."""

    def time_of(build, config, key, rnd):
        z = random.Random(f"{build}/{config}/{key}/{rnd}").gauss(0, sd)
        return 1e-3 * (shift if build == "patched" else 1.0) * math.exp(z)

    return time_of


def _run(sd: float, rounds: int, shift: float = 1.0) -> dict:
    data = synthetic("cpu", {"default": {}}, CELLS, rounds, _lognormal(sd, shift))
    data["run"]["command"] = "python -m harness compare --stock a --patched b --device cpu --out r".split()
    data["run"]["rounds"] = rounds
    data["run"].pop("adaptive", None)
    return data


def test_noise_floor_is_the_between_process_spread():
    data = _run(0.05, 12)
    (floor,) = und.noise_floors(con.evaluate_all(data))
    assert (floor.config, floor.cls, floor.cells) == ("default", CellClass.KERNEL_BOUND, 2)
    assert 0.03 < floor.sd < 0.07  # planted 5 % (log sd)


def test_mde_and_processes_follow_the_ci_and_reach_the_predicted_width():
    """An A/A cell at 6 processes with 3 % spread is undetermined; the processes the report asks for give a CI
    within a factor 1.5 of the goal, measured on fresh synthetic processes."""
    data = _run(0.03, 6)
    results = con.evaluate_all(data)
    floors = und.noise_floors(results)
    needs = und.needs(results, floors)
    assert needs and all(f.row.cmp.verdict == stats.UNDETERMINED for f in needs)
    for f in needs:
        assert f.mde == pytest.approx(POLICY.kernel_bound.band + f.half_width)
        assert f.goal == pytest.approx(max(abs(0.02 - abs(f.row.cmp.ratio - 1)), 0.005))
        assert f.sd == pytest.approx(und.spread(f.row))
        # the fewest processes whose predicted width reaches the goal: one fewer would not
        assert f.width_at(f.processes) <= f.goal < f.width_at(f.processes - 1) or f.processes == 4
    f = needs[0]
    rng = np.random.default_rng(7)
    widths = [
        stats.compare(np.exp(rng.normal(0, 0.03, f.processes)), np.exp(rng.normal(0, 0.03, f.processes))).half_width
        for _ in range(20)
    ]
    predicted = und.predicted_half_width(0.03, f.processes)  # at the spread the processes were drawn with
    assert predicted / 1.5 <= float(np.median(widths)) <= predicted * 1.5


def test_the_predicted_width_is_the_exact_cis_at_small_n_not_the_large_sample_formula():
    """At 4 + 4 processes the exact 95 % CI is the range of all 16 differences: 1.66 times the large-sample
    formula; by 64 + 64 the two agree within 4 %. Recomputed here from normal samples (benchmarks/moses_width.py
    with fewer pairs): a table entry off by more than the Monte Carlo error is caught."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "moses_width", Path(__file__).resolve().parent.parent / "benchmarks" / "moses_width.py"
    )
    mw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mw)
    for n in (4, 6, 10, 24):
        assert mw.factor(n, 3000, seed=3) == pytest.approx(und.MOSES_SMALL_N[n - 4], rel=0.04), n
    z = 1.959963984540054
    large = math.expm1(z * 0.02 * math.sqrt(2 / 4) * math.sqrt(math.pi / 3))
    assert und.predicted_half_width(0.02, 4) / large == pytest.approx(1.655, rel=0.01)
    assert math.isnan(und.predicted_half_width(0.02, 3))
    assert und.predicted_half_width(0.02, 500) == pytest.approx(
        math.expm1(z * 0.02 * math.sqrt(2 / 500) * math.sqrt(math.pi / 3) * und.MOSES_SMALL_N[-1])
    )


def test_a_cell_below_its_floor_is_predicted_from_the_noise_floor():
    data = _run(0.02, 3)  # 3 processes: below the floor, no CI
    results = con.evaluate_all(data)
    floors = und.noise_floors(results)
    f = und.needs(results, floors)[0]
    assert not math.isfinite(f.half_width) and f.row.cmp.cause == stats.Cause.BELOW_FLOOR
    assert f.processes >= POLICY.kernel_bound.floor and math.isfinite(f.mde)


def _args(argv: list[str]):
    assert argv[:4] == ["python", "-m", "harness", "compare"]
    return build_parser("compare").parse_args(argv[4:])


def _timed(data: dict, wall: dict[str, float] | None = None) -> dict:
    """Every process 2 s of start-up; its wall time ``wall[build]`` (default 4 s)."""
    for i, proc in enumerate(data["processes"]):
        proc.update(started=100.0 * i, worker_started=100.0 * i + 2)
        proc["finished"] = 100.0 * i + (wall or {}).get(proc["build"], 4.0)
    return data


def _adaptive(data: dict, target: float = 0.01) -> dict:
    data["run"]["adaptive"] = {
        "target": target,
        "launch_bound_target": 0.05,
        "budget_s": 100.0,
        "rounds_added": 0,
        "unconverged": {},
    }
    data["run"]["command"] += ["--budget-s", "100"]
    return data


def _resume(data: dict) -> tuple[list[und.Need], und.Resume]:
    results = con.evaluate_all(data)
    found = und.needs(results, und.noise_floors(results))
    return found, und.resume(data, results, found)


def test_the_resume_command_is_one_compare_accepts():
    data = _timed(_run(0.03, 6))
    found, plain = _resume(data)
    need = max(f.processes for f in found)
    assert _args(plain.argv).rounds == need and plain.argv.count("--rounds") == 1  # a run without adaptive rounds
    _, adaptive_resume = _resume(_adaptive(data))
    adaptive = _args(adaptive_resume.argv)
    goal = min(min(f.goal for f in found), POLICY.kernel_bound.target)  # never looser than the run's target
    assert adaptive.target_ci == math.floor(goal * 1000) / 1000
    assert adaptive.budget_s == max(60, math.ceil(adaptive_resume.seconds * 1.2 / 10) * 10)
    assert adaptive.rounds is None and adaptive_resume.argv.count("--budget-s") == 1
    assert und._target([0.0004], 0.01) == 0.001  # never 0, which would turn adaptive rounds off
    with pytest.raises(UsageError):  # the parser is real: an option compare lacks is refused
        _args([*plain.argv, "--base", "main"])


def test_the_pr_block_says_the_noise_floor_processes_minutes_and_the_command():
    data = _timed(_run(0.03, 6))
    text = report.render(data)
    block = text.split("<details>")[0]
    assert "cells undetermined.** Noise floor (sd of the log per-process medians between processes): " in block
    assert "**2 of 2 stock-vs-patched cells undetermined.**" in block  # one config, two cells
    assert "`default` " in block and "processes per side" in block and " min of worker time" in block
    command = block.split("```\n", 1)[1].split("\n```", 1)[0]
    assert command.startswith("nox -s compare -- --stock a --patched b --device cpu --out r --rounds ")
    assert "## Undetermined cells" in text and "| patched/default vs stock/default | mm M512 N512 K512 |" in text


def test_fixed_rounds_minutes_count_every_process_the_command_runs():
    """``--rounds N`` re-runs every cell under every (build, config) in each added round: the minutes are the
    added rounds x each side's process wall time, not only the cells still short (the review's defect:
    cpu-contrasts said ~4 min for 28 rounds x 4 processes x 8.5 s)."""
    data = _timed(_run(0.03, 6), {"stock": 10.0, "patched": 12.0})
    found, resume = _resume(data)
    extra = max(f.processes for f in found) - 6
    assert extra > 1 and (resume.rounds, resume.until, resume.processes) == (extra, 6 + extra, 2 * extra)
    assert resume.seconds == pytest.approx(extra * (10.0 + 12.0))
    assert resume.given == [6 + extra] * len(found) and not resume.beyond
    block = report.render(data).split("<details>")[0]
    assert f"adds {extra} rounds ({6 + extra} in all) of every cell under every build and config, which run " in block
    assert f"{2 * extra} worker processes, ~{math.ceil(extra * 22 / 60)} min of worker time" in block


def test_adaptive_minutes_come_from_the_runs_own_processes():
    data = _adaptive(_timed(_run(0.03, 6)))
    found, resume = _resume(data)
    startup, overhead = 2.0, (4.0 - 2.0) / 2 - 3e-3  # 2 cells per process; each cell's 3 blocks of ~1 ms are timed
    extra = {f.row.cell.key: g - f.n for f, g in zip(found, resume.given, strict=True)}
    expected = 2 * sum(  # two builds of the one config, one process per round each
        startup + sum(overhead + 3e-3 for e in extra.values() if e >= r) for r in range(1, max(extra.values()) + 1)
    )
    assert resume.adaptive and resume.seconds == pytest.approx(expected, rel=1e-2)
    assert resume.processes == 2 * max(extra.values())


def test_time_unknown_when_the_processes_carry_no_start_time():
    """h200-aa's processes carry no worker start time: the block said "~0 min"; it must say the time is
    unknown, never 0."""
    data = _run(0.03, 6)
    for proc in data["processes"]:
        proc.pop("started", None)
        proc.pop("worker_started", None)
    _, resume = _resume(data)
    assert resume.argv and resume.seconds is None
    _, adaptive = _resume(_adaptive(copy.deepcopy(data)))
    assert adaptive.argv and adaptive.seconds is None and "--budget-s" in adaptive.argv  # the run's own, kept
    block = report.render(data).split("<details>")[0]
    assert "time unknown (this run's processes carry no start time)" in block and "~0 min" not in block


def test_the_cap_is_the_runners():
    assert und.MAX_ROUNDS == runner.MAX_ROUNDS


def test_adaptive_resume_is_capped_at_max_rounds_and_says_which_cells_it_cannot_decide():
    """Adaptive rounds stop at runner.MAX_ROUNDS rounds in all: a cell that needs more processes is named, its
    processes after resuming are capped, and the command still takes it as far as it goes (cpu-ab said "up to
    123 processes per side" under a command that can give at most 64)."""
    data = _adaptive(_timed(_run(0.04, 10)))
    found, resume = _resume(data)
    assert any(f.processes is not None and f.processes > runner.MAX_ROUNDS for f in found)  # the planted need
    assert resume.argv and resume.until <= runner.MAX_ROUNDS
    assert all(g <= runner.MAX_ROUNDS for g in resume.given) and max(resume.given) == runner.MAX_ROUNDS
    assert resume.beyond == [
        f for f, g in zip(found, resume.given, strict=True) if f.processes is None or f.processes > g
    ]
    block = report.render(data).split("<details>")[0]
    cap = runner.MAX_ROUNDS
    assert f"{cap} rounds in all, runner.MAX_ROUNDS, so it gives them at most {cap} processes per side" in block
    # every undetermined cell is out of its reach here: the block prints no command it says cannot decide a
    # cell, and says what would (the old block printed the command above "It cannot bring 2 of the 2")
    assert len(resume.beyond) == len(found)
    assert "cannot bring any of them to a verdict (adaptive rounds stop at " in block and "```" not in block
    assert f"What would: more processes per side than the {cap} a resume of this run can give" in block


def test_the_details_state_the_predicted_width_at_the_processes_the_command_gives():
    """Resuming with the printed command narrows the CIs as predicted (within a factor 1.5). The
    details give, per undetermined cell, the processes after resuming and the half-width predicted there;
    fresh synthetic processes at that count land within 1.5 of it."""
    data = _timed(_run(0.03, 6))
    found, resume = _resume(data)
    text = report.render(data)
    for f, given in zip(found, resume.given, strict=True):
        c = f.row.cell
        assert f"| {c.op} {c.label} | {c.dtype} |" in text
        assert f"| {given} | {details.pct(f.width_at(given))} |" in text
    f, given = found[0], resume.given[0]
    rng = np.random.default_rng(11)
    widths = [
        stats.compare(np.exp(rng.normal(0, 0.03, given)), np.exp(rng.normal(0, 0.03, given))).half_width
        for _ in range(20)
    ]
    assert f.width_at(given) / 1.5 <= float(np.median(widths)) <= f.width_at(given) * 1.5


def test_the_prediction_holds_on_runs_that_have_the_later_rounds():
    """Resuming narrows the CIs as predicted. Three committed runs that went on past 10 rounds
    (cpu-ab, the README command's kind; the H200 A/A and planted default matrix), cut back to their first 4
    rounds: the width predicted there for 10 processes per side is within a factor 1.5 of the width the
    first 10 rounds really have for 22 of the 28 rows (the CI's own width scaled by 1/√n: 13 of them)."""
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("resume_prediction", root / "benchmarks" / "resume_prediction.py")
    rp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rp)
    rows = []
    for name in ("cpu-ab", "h200-aa-default-matrix", "h200-planted-default-matrix"):
        rows += rp.evaluate(root / "docs" / "examples" / name / "results.json", 4, 10)
    ratios = [actual / predicted for _, predicted, actual in rows]
    assert len(rows) == 28
    assert sum(1 / 1.5 <= r <= 1.5 for r in ratios) == 22
    assert 0.9 <= float(np.median(ratios)) <= 1.1
