"""An output folder is written only when it is new, empty, or holds a run of ours
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
    (run / "speedup.png").write_bytes(b"an older render's plot")  # not provably ours: it stays
    assert runner.res.is_run(run)
    assert cli.main(["report", str(run)]) == 0
    assert (run / "speedup.png").read_bytes() == b"an older render's plot"
    assert (run / "report.md").read_text() == (EXAMPLE / "report.md").read_text()
    files = json.loads((run / outdir.MARKER).read_text())["files"]
    assert files == sorted(p.name for p in EXAMPLE.iterdir() if p.name.endswith(".png") or p.name == "report.md")
    assert (run / "notes.txt").read_text() == "mine\n"
    # --fresh on it removes what the report wrote only: results.json was there before the marker
    (run / "raw").mkdir()
    removed, kept = outdir.clear(run)
    assert removed == files and kept == ["notes.txt", "results.json", "speedup.png"]
    assert sorted(p.name for p in run.iterdir()) == [outdir.MARKER, "notes.txt", "raw", "results.json", "speedup.png"]
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


# ------------------------------------------------ found by a review: links, kinds, pre-marker folders
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
    (folder / "tinyext-1.0+stock-py3-none-any.whl").write_bytes(b"a wheel of hours")
    (folder / "logs").mkdir()
    outdir.finish(failed=False)  # as the build command ends: its marker lists the wheel
    if marker is not None:  # as a harness before kinds wrote it (compare had added its names)
        (folder / outdir.MARKER).write_text(json.dumps(marker))
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
    # the marker lists the wheel the build wrote; one of an older harness (names, not files) lists none
    wheel = "tinyext-1.0+stock-py3-none-any.whl"
    assert outdir.clear(dist) == (([], [wheel]) if old else ([wheel], []))


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


# ------------------------------------- nothing lost, nothing stale: results.json and --fresh file by file
SMALL_AB = ["--device", "cpu", "--quick", "--configs", "default", "--rounds", "1", "--target-ci", "0"]


def _ab(out: Path, *extra: str, cell: str = "mm/8x8x8/float32") -> list[str]:
    this = f"python:{sys.executable}"
    return ["compare", "--stock", this, "--patched", this, *SMALL_AB, "--cells", cell, *extra, "--out", str(out)]


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def small_ab(tmp_path_factory) -> Path:
    """A finished one-cell A/A compare (2 processes) written by this harness, marked file by file."""
    out = tmp_path_factory.mktemp("ab") / "run"
    assert cli.main(_ab(out)) == 0
    return out


def test_the_marker_lists_every_file_the_run_wrote_one_by_one(small_ab):
    marker = json.loads((small_ab / outdir.MARKER).read_text())
    written = sorted(
        p.relative_to(small_ab).as_posix() for p in small_ab.rglob("*") if p.is_file() and p.name != outdir.MARKER
    )
    assert marker["kind"] == "run" and "writes" not in marker
    assert marker["files"] == written and "raw/r00-stock-default.status.json" in written
    assert not any(c in name for name in marker["files"] for c in "*?[")  # no patterns


@pytest.mark.parametrize("schema", [1, 2])
def test_an_older_results_json_of_another_plan_is_refused_and_nothing_is_left(tmp_path, capsys, schema):
    """A copied example (other builds, 8 cells, 2 configs) alone in --out: the compare replaced it by its 4
    new processes without a word; relabelled schema 2 it was refused but the marker stayed behind."""
    out = tmp_path / "F"
    out.mkdir()
    data = json.loads((EXAMPLE / "results.json").read_text())
    data["schema_version"] = schema
    (out / "results.json").write_text(json.dumps(data))
    before = tree_digest(out)
    line = _error(capsys, *_ab(out))
    if schema == 1:
        assert line.startswith(f"error: {out} holds a run measured with different cells, configs, ")
        assert line.endswith("-- pass --fresh to set it aside, or a new --out directory")
    else:
        assert "schema" in line
    assert tree_digest(out) == before  # no marker, no raw/, no lock: nothing new


def test_an_older_results_json_of_other_cells_is_refused_naming_cells(small_ab, tmp_path, capsys):
    out = tmp_path / "F"
    out.mkdir()
    shutil.copy(small_ab / "results.json", out / "results.json")
    before = tree_digest(out)
    line = _error(capsys, *_ab(out, cell="mm/16x16x16/float32"))
    assert line == (
        f"error: {out} holds a run measured with different cells -- pass --fresh to set it aside, "
        "or a new --out directory"
    )
    assert tree_digest(out) == before


def test_an_older_results_json_is_set_aside_by_name_and_fresh_keeps_the_users_files(small_ab, tmp_path, capsys):
    """A copied results.json beside the user's raw/mine.txt (no marker): the run replaced the results.json,
    and --fresh removed raw/ whole; in a marked folder --fresh removed the user's files in raw/ and the
    top-level files whose names only matched its patterns."""
    out = tmp_path / "F"
    (out / "raw").mkdir(parents=True)
    shutil.copy(small_ab / "results.json", out / "results.json")
    (out / "raw" / "mine.txt").write_text("mine\n")
    old, mine = _sha(out / "results.json"), _sha(out / "raw" / "mine.txt")
    # same plan, its processes are not in raw/: set aside under the name the message prints
    assert cli.main(_ab(out, "--fresh")) == 0
    err = capsys.readouterr().err
    kept = [p for p in out.iterdir() if p.name.startswith("results.json.")]
    assert len(kept) == 1 and _sha(kept[0]) == old
    assert f"{out / 'results.json'} was not written by the harness: kept it as {kept[0].name}" in err
    assert f"kept 2 file(s) the harness did not write: raw/mine.txt, {kept[0].name}" in err
    assert _sha(out / "raw" / "mine.txt") == mine
    files = json.loads((out / outdir.MARKER).read_text())["files"]
    assert "raw/mine.txt" not in files and kept[0].name not in files and "results.json" in files
    # the folder is marked now: the user adds files in raw/ and beside the report
    users = {
        "raw/mine.txt": None,
        "raw/r00-stock-default.notes": b"my notes on that process",
        "contrast-mine-notes.png": b"my plot",
        "latency-old.png": b"an old plot of mine",
        "notes.md": b"# my notes\n",
    }
    for name, content in users.items():
        if content is not None:
            (out / name).write_bytes(content)
    sums = {name: _sha(out / name) for name in [*users, kept[0].name]}
    stale = (out / "raw" / "r00-stock-default.status.json").stat().st_mtime_ns
    assert cli.main(_ab(out, "--fresh")) == 0
    err = capsys.readouterr().err
    assert {name: _sha(out / name) for name in sums} == sums  # byte-identical
    assert (out / "raw" / "r00-stock-default.status.json").stat().st_mtime_ns != stale  # ours: removed, rerun
    assert f"--fresh: removed {len(files)} file(s) the harness wrote in {out}; kept 6 file(s) the harness" in err
    assert len(files) == 14  # results.json, report.md, contrast-1.png, raw/plan.json, 5 files of each process
    assert not [p for p in out.iterdir() if p.name.startswith("results.json.") and p != kept[0]]


def test_fresh_removes_only_the_files_the_marker_lists(tmp_path):
    out = outdir.claim(tmp_path / "run", "--out", outdir.RESULTS_WRITES)
    (out / "raw").mkdir()
    for name in ("results.json", "report.md", "latency-gemm.png", "raw/r00-b-default.status.json"):
        (out / name).write_text("x")
    outdir.record(out)
    for name in ("notes.txt", "contrast-mine-notes.png", "latency-old.png", "raw/mine.txt"):
        (out / name).write_text("mine")
    removed, kept = outdir.clear(out)
    assert removed == ["latency-gemm.png", "raw/r00-b-default.status.json", "report.md", "results.json"]
    assert kept == ["contrast-mine-notes.png", "latency-old.png", "notes.txt", "raw/mine.txt"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == sorted([outdir.MARKER, "raw", *kept])


def test_a_marker_of_an_older_harness_lists_names_and_fresh_removes_nothing_then(tmp_path):
    out = tmp_path / "run"
    (out / "raw").mkdir(parents=True)
    old = {"tool": outdir.TOOL, "writes": ["raw", "results.json", "latency-*.png"]}
    (out / outdir.MARKER).write_text(json.dumps(old))
    for name in ("results.json", "latency-old.png", "raw/mine.txt"):
        (out / name).write_text("maybe mine")
    before = tree_digest(out)
    assert outdir.marked_kind(out) == "run" and outdir.read_marker(out) == []
    removed, kept = outdir.clear(out)
    assert removed == [] and kept == ["latency-old.png", "raw/mine.txt", "results.json"]
    assert tree_digest(out) == before


def test_fresh_under_a_marker_of_an_older_harness_removes_and_overwrites_nothing(small_ab, tmp_path, capsys):
    """Its marker lists names (``raw``, ``latency-*.png``): --fresh removed whatever matched them."""
    out = tmp_path / "F"
    shutil.copytree(small_ab, out)
    (out / outdir.MARKER).write_text(json.dumps({"tool": outdir.TOOL, "writes": list(outdir.RESULTS_WRITES)}))
    (out / "latency-old.png").write_bytes(b"mine, or an old render's")
    earlier = {p.relative_to(out).as_posix(): _sha(p) for p in out.rglob("*") if p.is_file()}
    assert cli.main(_ab(out, "--fresh")) == 0
    err = capsys.readouterr().err
    assert (
        f"--fresh: {out / outdir.MARKER} is of an older harness (it lists names, not files): nothing in {out} is "
        "provably the harness's, so nothing was removed" in err
    )
    now = {p.relative_to(out).as_posix(): _sha(p) for p in out.rglob("*") if p.is_file()}
    for name, digest in earlier.items():  # every earlier file is there, as it was, or set aside by name
        if name == outdir.MARKER:
            continue
        aside = [n for n in now if n.startswith((f"{name}.earlier-", f"{name}.kept-"))]
        assert now.get(name) == digest or [now[n] for n in aside] == [digest], name
    assert (
        "raw/r00-stock-default.status.json.earlier-" in " ".join(now)
        and now["latency-old.png"] == earlier["latency-old.png"]
    )
    assert "latency-old.png" not in json.loads((out / outdir.MARKER).read_text())["files"]


# -------------------------------- a listed file the user edited since the harness wrote it is the user's
def _copy_run(small_ab: Path, folder: Path) -> Path:
    shutil.copytree(small_ab, folder)
    (folder / ".lock").unlink(missing_ok=True)
    return folder


def test_report_sets_aside_a_hand_edited_report_md(small_ab, tmp_path, capsys):
    """`report DIR` overwrote a report.md the user had appended a note to: the marker listed it by name only."""
    run = _copy_run(small_ab, tmp_path / "R")
    with (run / "report.md").open("a") as fh:
        fh.write("my note\n")
    edited = _sha(run / "report.md")
    assert outdir.edited(run, "report.md") is True and outdir.edited(run, "results.json") is False
    assert cli.main(["report", str(run)]) == 0
    err = capsys.readouterr().err
    kept = [p for p in run.iterdir() if p.name.startswith("report.md.kept-")]
    assert len(kept) == 1 and _sha(kept[0]) == edited and kept[0].read_text().endswith("my note\n")
    assert f"{run / 'report.md'} was not written by the harness: kept it as {kept[0].name}" in err
    assert (run / "report.md").read_text() == (small_ab / "report.md").read_text()
    marker = json.loads((run / outdir.MARKER).read_text())
    assert kept[0].name not in marker["files"] and marker["written"]["report.md"]["sha256"] == _sha(run / "report.md")
    # an unedited report.md is re-rendered in place, nothing set aside
    assert cli.main(["report", str(run)]) == 0
    assert [p for p in run.iterdir() if ".kept-" in p.name] == kept


def test_the_marker_records_size_and_sha256_of_every_file(small_ab):
    marker = json.loads((small_ab / outdir.MARKER).read_text())
    assert sorted(marker["written"]) == marker["files"]
    for rel, rec in marker["written"].items():
        assert rec == {"size": (small_ab / rel).stat().st_size, "sha256": _sha(small_ab / rel)}, rel


def test_fresh_keeps_an_edited_listed_file_and_says_so(small_ab, tmp_path, capsys):
    run = _copy_run(small_ab, tmp_path / "R")
    (run / "report.md").write_text("my rewrite\n")
    assert cli.main(_ab(run, "--fresh")) == 0
    err = capsys.readouterr().err
    kept = [p for p in run.iterdir() if p.name.startswith("report.md.")]
    assert [p.read_text() for p in kept] == ["my rewrite\n"]
    assert f"--fresh: {run / 'report.md'} was edited since the harness wrote it: kept it" in err
    assert (run / "report.md").read_text() != "my rewrite\n"


def test_a_marker_without_records_never_deletes_a_file_edited_after_it(small_ab, tmp_path):
    """A marker of a harness that listed files without their size and sha256: a listed file changed after the
    marker was written cannot be verified, so --fresh sets it aside; one older than the marker is removed."""
    run = _copy_run(small_ab, tmp_path / "R")
    marker = json.loads((run / outdir.MARKER).read_text())
    del marker["written"]
    (run / outdir.MARKER).write_text(json.dumps(marker))
    import os

    old = (run / outdir.MARKER).stat().st_mtime_ns - 10**9
    for p in run.rglob("*"):
        if p.is_file() and p.name != outdir.MARKER:
            os.utime(p, ns=(old, old))
    (run / "report.md").write_text("my rewrite\n")
    new = (run / outdir.MARKER).stat().st_mtime_ns + 10**9
    os.utime(run / "report.md", ns=(new, new))
    assert outdir.edited(run, "report.md") is None and not outdir.is_ours(run, "report.md")
    assert outdir.is_ours(run, "results.json")
    removed, kept = outdir.clear(run)
    assert "report.md" not in removed and "results.json" in removed
    aside = [p for p in run.iterdir() if p.name.startswith("report.md.kept-")]
    assert [p.read_text() for p in aside] == ["my rewrite\n"] and kept == [aside[0].name]


def test_a_results_json_copied_over_a_run_is_set_aside_before_the_run_rewrites_it(small_ab, tmp_path, capsys):
    """`cp OTHER/results.json X/` (same plan, same process names, other samples), then compare --out X: the
    copy was replaced silently (only the process names were compared with raw/)."""
    other = tmp_path / "other"
    assert cli.main(_ab(other)) == 0
    run = _copy_run(small_ab, tmp_path / "X")
    shutil.copy(other / "results.json", run / "results.json")
    copied = _sha(run / "results.json")
    assert copied != _sha(small_ab / "results.json")
    capsys.readouterr()
    assert cli.main(_ab(run, "--rounds", "2")) == 0
    err = capsys.readouterr().err
    kept = [p for p in run.iterdir() if p.name.startswith("results.json.")]
    assert len(kept) == 1 and _sha(kept[0]) == copied
    assert f"{run / 'results.json'} is not what the harness wrote there (edited or copied over): kept it as " in err


def test_report_of_a_folder_being_written_names_the_run_writing_it(tmp_path, capsys):
    """`report D` while a compare writes D said 'D/results.json does not exist -- run compare first'."""
    from harness import fsutil

    out = tmp_path / "D"
    with rundir.claimed(out, "compare --out D"):
        line = _error(capsys, "report", str(out))
    assert line == (
        f"error: {out} is being written by pid {__import__('os').getpid()} (compare --out D): its results.json "
        "is not finished -- wait for that run to end, or pass another folder"
    )
    assert fsutil.live_holder(out) is None


def test_a_report_md_that_cannot_be_replaced_is_named_not_its_temp_file(small_ab, tmp_path, capsys, monkeypatch):
    """`chattr +i R/report.md`: the error named `.report.md.tbgqck1s.tmp`, a file the user never saw."""
    import os

    from harness import fsutil

    run = _copy_run(small_ab, tmp_path / "R")

    real = fsutil.os.replace

    def refuse(src, dst):
        if Path(dst).name != "report.md":
            return real(src, dst)
        raise PermissionError(1, "Operation not permitted", src)

    monkeypatch.setattr(fsutil.os, "replace", refuse)
    line = _error(capsys, "report", str(run))
    assert line == (
        f"error: cannot write {run / 'report.md'}: Operation not permitted -- check that you may write there "
        "(its permissions and its folder's, an immutable file: lsattr/chattr -i, a read-only file system)"
    )
    assert not [p for p in os.listdir(run) if p.endswith(".tmp")]


def test_fresh_that_cannot_remove_one_listed_file_removes_none(small_ab, tmp_path, capsys, monkeypatch):
    """--fresh over a folder where report.md could not be removed deleted raw/ first, then stopped."""
    from pathlib import Path as P

    run = _copy_run(small_ab, tmp_path / "R")
    before = tree_digest(run)
    real_rename, real_unlink = P.rename, P.unlink

    def refuse(self):
        if self.name == "report.md":  # as `chattr +i report.md`: neither renamed nor removed
            raise PermissionError(1, "Operation not permitted", str(self))

    monkeypatch.setattr(P, "rename", lambda self, target: refuse(self) or real_rename(self, target))
    monkeypatch.setattr(P, "unlink", lambda self, missing_ok=False: refuse(self) or real_unlink(self, missing_ok))
    line = _error(capsys, *_ab(run, "--fresh"))
    assert line == (
        f"error: --fresh cannot remove {run / 'report.md'}: Operation not permitted -- nothing was removed; "
        "fix its permissions (an immutable file: chattr -i), or use a new --out"
    )
    assert tree_digest(run) == before


def test_a_lock_left_by_a_process_that_is_gone_does_not_stop_report(small_ab, tmp_path):
    import os
    import socket

    from harness import fsutil

    run = _copy_run(small_ab, tmp_path / "R")
    dead = next(p for p in range(4_194_000, 4_194_304) if not fsutil._pid_alive(p))
    (run / ".lock").write_text(json.dumps({"pid": dead, "host": socket.gethostname(), "what": "compare"}))
    assert fsutil.live_holder(run) is None
    assert cli.main(["report", str(run)]) == 0
    (run / ".lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "what": "compare"}))
    assert fsutil.live_holder(run) == {"pid": os.getpid(), "host": socket.gethostname(), "what": "compare"}
