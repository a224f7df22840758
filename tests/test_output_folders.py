"""Issue 27: an output folder is written only when it is new, empty, or holds a run of ours
(harness.outdir: the marker a run writes first); ``--fresh`` removes only what the marker lists;
``/``, ``$HOME``, the project root and a folder holding ``.git`` are refused in one line. Every
command that writes an output folder goes through the one rule: compare/bench --out, report DIR,
preview DIR, doctor --out, build --dist."""

from __future__ import annotations

import errno
import json
import shutil
import sys
from pathlib import Path

import pytest
from test_containment import tree_digest

from harness import cli, outdir, rundir, runner, supervise

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "cpu-ab"
BENCH = ["bench", "--build", f"python:{sys.executable}", "--device", "cpu", "--cells", "mm/8x8x8/float32"]
BENCH += ["--quick", "--rounds", "1"]


def _error(capsys, *args: str) -> str:
    """The one error line of a command that must exit 2."""
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    text = captured.out + captured.err
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and "Traceback" not in text, text
    return errors[0]


@pytest.fixture
def no_run_writes(monkeypatch):
    """A run that got past the output-folder check would take its lock first: fail there, before
    anything is written (the base code wrote /results.json as root)."""

    def refuse(directory, what):
        raise AssertionError(f"a run would have written into {directory}")

    monkeypatch.setattr(rundir, "exclusive_lock", refuse)


def _foreign(folder: Path) -> dict[str, str]:
    (folder / "raw").mkdir(parents=True)
    (folder / "raw" / "mine.txt").write_text("mine\n")
    (folder / "report.md").write_text("my own report\n")
    (folder / "speedup.png").write_bytes(b"my own plot")
    return tree_digest(folder)


# --------------------------------------------------------------------- compare/bench --out
def test_fresh_does_not_delete_a_raw_folder_that_is_not_ours(tmp_path, capsys):
    """`compare --fresh --out U` deleted U/raw/ whatever it held."""
    out = tmp_path / "U"
    before = _foreign(out)
    line = _error(capsys, *BENCH, "--out", str(out), "--fresh")
    assert line.startswith(f"error: --out {out} holds files that are not a run of the harness (raw, report.md, ")
    assert line.endswith(
        f"-- give a new or empty folder, e.g. results/<name>: the harness writes only into folders "
        f"it marked ({outdir.MARKER})"
    )
    assert tree_digest(out) == before  # raw/mine.txt kept, no marker written


def test_a_non_empty_unrelated_folder_is_not_written(tmp_path, capsys):
    """`compare --out U` on an unrelated folder overwrote its report.md and speedup.png silently."""
    out = tmp_path / "U"
    before = _foreign(out)
    line = _error(capsys, *BENCH, "--out", str(out))
    assert "holds files that are not a run of the harness" in line
    assert tree_digest(out) == before


@pytest.mark.parametrize("where", ["root", "home", "project", "git"])
def test_root_home_project_and_git_folders_are_refused(tmp_path, monkeypatch, capsys, no_run_writes, where):
    """`--out /` as root wrote /results.json, /raw, /report.md."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    folder, why = {
        "root": (Path("/"), "the file-system root"),
        "home": (home, "your home folder"),
        "project": (outdir.PROJECT_ROOT, "the harness's project root"),
        "git": (tmp_path / "repo", "a git checkout (it holds .git)"),
    }[where]
    line = _error(capsys, *BENCH, "--out", str(folder))
    assert line == (
        f"error: --out {folder} is {why}: the harness writes its files there and --fresh deletes them "
        "-- give a new or empty folder, e.g. results/<name>"
    )
    assert not (folder / outdir.MARKER).exists() and not (folder / "results.json").exists()


def test_fresh_removes_only_what_the_marker_lists(tmp_path):
    out = outdir.claim(tmp_path / "run", "--out", outdir.RESULTS_WRITES)
    marker = json.loads((out / outdir.MARKER).read_text())
    assert marker["tool"] == "torch-patch-harness" and marker["writes"] == sorted(outdir.RESULTS_WRITES)
    (out / "raw").mkdir()
    (out / "raw" / "r00-build-default.status.json").write_text("{}")
    for name in ("results.json", "report.md", "latency-gemm.png", "notes.txt", ".lock"):
        (out / name).write_text("x")
    # a marker edited to list everything removes no more than the harness's own names
    marker["writes"].append("*")
    (out / outdir.MARKER).write_text(json.dumps(marker))
    assert outdir.clear(out, outdir.RESULTS_WRITES) == ["latency-gemm.png", "raw", "report.md", "results.json"]
    assert sorted(p.name for p in out.iterdir()) == [".lock", outdir.MARKER, "notes.txt"]


def test_a_damaged_marker_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "U"
    out.mkdir()
    (out / outdir.MARKER).write_text('{"tool": "torch-patch-harness", "writes": "*"}')
    line = _error(capsys, *BENCH, "--out", str(out))
    assert f"{out / outdir.MARKER} is damaged" in line and f"delete it if {out} holds only a run" in line


# --------------------------------------------------------------- runs made before the marker
def _legacy_run(folder: Path) -> Path:
    """A results folder as the harness wrote it before the marker existed, plus a file of the user's."""
    folder.mkdir(parents=True)
    shutil.copy(EXAMPLE / "results.json", folder / "results.json")
    (folder / "notes.txt").write_text("mine\n")
    return folder


def test_a_run_made_before_the_marker_is_re_rendered_and_then_marked(tmp_path, capsys):
    run = _legacy_run(tmp_path / "old")
    (run / "speedup.png").write_bytes(b"an older render's plot")  # the contrasts' forest plots replace it
    assert runner.res.is_run(run)
    assert cli.main(["report", str(run)]) == 0
    assert not (run / "speedup.png").exists()
    assert (run / "report.md").read_text() == (EXAMPLE / "report.md").read_text()
    assert json.loads((run / outdir.MARKER).read_text())["writes"] == sorted(outdir.RESULTS_WRITES)
    assert (run / "notes.txt").read_text() == "mine\n"
    # --fresh on it removes the run's names only
    (run / "raw").mkdir()
    assert {"raw", "report.md", "results.json", "contrast-1.png"} <= set(outdir.clear(run, outdir.RESULTS_WRITES))
    assert sorted(p.name for p in run.iterdir()) == [outdir.MARKER, "notes.txt"]
    assert (run / "notes.txt").read_text() == "mine\n"


def test_a_run_interrupted_before_its_first_results_json_counts_as_ours(tmp_path):
    run = tmp_path / "old"
    (run / "raw").mkdir(parents=True)
    (run / "raw" / "plan.json").write_text(json.dumps({"inputs": {}, "torch": {}, "rounds": 4}))
    assert outdir.claim(run, "--out", outdir.RESULTS_WRITES, runner.res.is_run) == run.resolve()
    (run / "raw" / "plan.json").write_text("[]")
    (run / outdir.MARKER).unlink()
    with pytest.raises(rundir.ResultsError):
        outdir.claim(run, "--out", outdir.RESULTS_WRITES, runner.res.is_run)


# ------------------------------------------------------------------------- the other commands
def test_report_refuses_a_git_checkout_holding_results(tmp_path, capsys):
    run = _legacy_run(tmp_path / "repo")
    (run / ".git").mkdir()
    before = tree_digest(run)
    line = _error(capsys, "report", str(run))
    assert f"report DIR {run} is a git checkout (it holds .git)" in line
    assert tree_digest(run) == before


def test_preview_does_not_overwrite_a_foreign_folders_page(tmp_path, capsys):
    (tmp_path / "report.md").write_text("# my report\n")
    (tmp_path / "report.html").write_text("my own page\n")
    (tmp_path / "notes.txt").write_text("mine\n")
    before = tree_digest(tmp_path)
    line = _error(capsys, "preview", str(tmp_path))
    assert f"preview DIR {tmp_path} holds files that are not a run of the harness" in line
    assert tree_digest(tmp_path) == before


def test_doctor_does_not_write_into_a_foreign_folder(tmp_path, capsys):
    out = tmp_path / "doc"
    out.mkdir()
    (out / "doctor.md").write_text("my notes on the doctor\n")
    before = tree_digest(out)
    line = _error(capsys, "doctor", "--device", "cpu", "--out", str(out))
    assert f"--out {out} holds files that are not a run of the harness (doctor.md)" in line
    assert tree_digest(out) == before


def test_build_does_not_write_into_a_foreign_dist(tmp_path, capsys):
    import small_upstream as su

    repo = su.make_upstream(tmp_path / "src")
    dist = tmp_path / "wheels"
    dist.mkdir()
    (dist / "someone-1.0-py3-none-any.whl").write_bytes(b"not ours")
    before = tree_digest(dist)
    line = _error(capsys, "build", "--kind", "stock", "--source", str(repo), "--jobs", "1", "--dist", str(dist))
    assert f"--dist {dist} holds files that are not a run of the harness (someone-1.0-py3-none-any.whl)" in line
    assert tree_digest(dist) == before


# ------------------------------------------------ review of issue 27: links, kinds, pre-marker folders
def test_no_file_in_an_output_folder_is_written_through_a_link(tmp_path):
    """N1: a ``raw/<proc>.stderr`` link to the user's file: run_worker's open(err, "w") emptied it."""
    from harness import configs as cfg
    from harness import fsutil
    from harness.bench import worker

    precious = tmp_path / "v.txt"
    precious.write_text("precious\n")
    raw = tmp_path / "out" / "raw"
    raw.mkdir(parents=True)
    (raw / "r00-stock-default.stderr").symlink_to(precious)
    with pytest.raises(fsutil.LinkRefused) as info:
        supervise.run_worker(
            Path(sys.executable), {"cells": []}, cfg.EnvConfig("default"), raw, "r00-stock-default", 5.0
        )
    assert info.value.cause == (
        f"{raw / 'r00-stock-default.stderr'} is a symbolic link (to {precious}): "
        "the harness does not write through links"
    )
    # the worker's records and a build's log are opened the same way; an atomic write replaces the link
    (raw / "w.jsonl").symlink_to(precious)
    with pytest.raises(OSError) as refused:  # in the build's interpreter: O_NOFOLLOW's own error (bench.files)
        worker.main([str(raw / "r00-stock-default.spec.json"), str(raw / "w.jsonl")])
    assert refused.value.errno in (errno.ELOOP, errno.EMLINK) and (raw / "w.jsonl").is_symlink()
    with pytest.raises(fsutil.LinkRefused):
        fsutil.open_write(raw / "w.jsonl", append=True)
    (raw / "report.md").symlink_to(precious)
    fsutil.atomic_write_text(raw / "report.md", "ours\n")
    assert not (raw / "report.md").is_symlink() and (raw / "report.md").read_text() == "ours\n"
    assert precious.read_text() == "precious\n"


def _dist(folder: Path, marker: dict | None = None) -> dict[str, str]:
    outdir.claim(folder, "--dist", outdir.DIST_WRITES)
    if marker is not None:  # as a harness before kinds wrote it (compare had added its names)
        (folder / outdir.MARKER).write_text(json.dumps(marker))
    (folder / "tinyext-1.0+stock-py3-none-any.whl").write_bytes(b"a wheel of hours")
    (folder / "logs").mkdir()
    return tree_digest(folder)


@pytest.mark.parametrize("old", [False, True])
def test_fresh_out_on_a_dist_folder_is_refused_and_deletes_no_wheel(tmp_path, capsys, no_run_writes, old):
    """N2: `compare --fresh --out D` on a `build --dist` folder deleted its wheels."""
    dist = tmp_path / "dist"
    marker = {"tool": outdir.TOOL, "writes": sorted(outdir.DIST_WRITES + outdir.RESULTS_WRITES)} if old else None
    before = _dist(dist, marker)
    if not old:
        assert json.loads((dist / outdir.MARKER).read_text())["kind"] == "dist"
    line = _error(capsys, *BENCH, "--out", str(dist), "--fresh")
    assert line == (
        f"error: --out {dist} is a dist folder of the harness (its {outdir.MARKER}), not a run folder: the "
        "harness does not mix them -- give a new or empty folder, e.g. results/<name>"
    )
    assert tree_digest(dist) == before
    for what, writes in (("doctor --out", outdir.DOCTOR_WRITES), ("preview DIR", outdir.PREVIEW_WRITES)):
        with pytest.raises(rundir.ResultsError, match=r"is a dist folder of the harness"):
            outdir.claim(dist, what, writes)
    # --fresh removes only what the marker lists and the command writes: a run's clear leaves the wheels
    assert outdir.clear(dist, outdir.RESULTS_WRITES) == []
    assert outdir.clear(dist, outdir.DIST_WRITES) == ["logs", "tinyext-1.0+stock-py3-none-any.whl"]


def test_preview_and_report_take_an_unmarked_folder_only_with_a_results_json_that_loads(tmp_path, capsys):
    """N3: a folder of the user's holding only report.md and report.html counted as ours."""
    mine = tmp_path / "D"
    mine.mkdir()
    (mine / "report.md").write_text("# mine\n")
    (mine / "report.html").write_text("mine\n")
    before = tree_digest(mine)
    line = _error(capsys, "preview", str(mine))
    assert line.startswith(f"error: preview DIR {mine} holds files that are not a run of the harness (report.html, ")
    assert tree_digest(mine) == before
    # a results.json with the run's keys that does not load is not enough either (report loads it first)
    copied = json.loads((EXAMPLE / "results.json").read_text())
    (mine / "results.json").write_text(json.dumps({**copied, "processes": None}))
    assert runner.res.is_run(mine) and not outdir.holds_results(mine)
    before = tree_digest(mine)
    assert "results.json" in _error(capsys, "preview", str(mine)) and tree_digest(mine) == before
    assert "results.json" in _error(capsys, "report", str(mine)) and tree_digest(mine) == before
    # a run of ours from before the marker: report, then preview of its report.md, both work
    run = _legacy_run(tmp_path / "old")
    assert outdir.holds_results(run) and cli.main(["report", str(run)]) == 0
    (run / outdir.MARKER).unlink()
    assert cli.main(["preview", str(run)]) == 0 and (run / "report.html").is_file()
