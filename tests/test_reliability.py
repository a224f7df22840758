"""Every fault ends in one line (``error: cause -- remedy``, exit 2) and nothing finished is lost.

The faults are real: worker interpreters whose probe or timer really fails, a real out-of-memory
shape, real git processes killed mid-clone, real missing executables (PATH without them), a real
build killed mid-compile and resumed. Cases already covered elsewhere: worker crash / hang and
resume (tests/test_runner.py), bad numbers and unknown configs (tests/test_cli.py), locks and
atomic writes (tests/test_fsutil.py), dirty worktree for apply/refresh and unknown base
(tests/test_series.py), missing base ref and unreachable URL (tests/test_upstream.py).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import export_series, fixed_rounds, git, probes_as, run_harness, share_build_venvs

from harness import cli, outdir
from harness.upstream import patched_branch, worktrees

REPO = Path(__file__).resolve().parent.parent
CELL = "mm/32x32x32/float32"


def _default_sigint() -> None:
    """Give the child the default SIGINT action. A shell starts background jobs with SIGINT
    ignored, which children inherit (and Python then installs no KeyboardInterrupt handler), so a
    test suite run in the background would otherwise never see the Ctrl-C it sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def harness(*args: str, env: dict | None = None, cwd: Path = REPO):
    """``python -m harness *args`` in this process (``harness.cli.main``; workers are real processes)."""
    return run_harness(*fixed_rounds(args), env=env, cwd=cwd)


def one_line_error(text: str, code: int, expected_code: int = 2) -> str:
    """The single ``error: cause -- remedy`` line of a failed command's stderr (asserts there is exactly one)."""
    assert code == expected_code, text
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, text
    assert " -- " in errors[0], errors[0]
    return errors[0]


def hooked_python(tmp_path: Path, module: str, hook: str) -> str:
    """A build input (``python:<script>``) that is this interpreter, except that ``-m <module>`` first runs
    ``hook`` (Python code) in the same process: the fault is injected there, the module then runs for real."""
    hook_file = tmp_path / f"hook_{module.replace('.', '_')}.py"
    hook_file.write_text(
        f"import runpy, sys\n{hook}\nsys.argv = [{module!r}, *sys.argv[1:]]\n"
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    )
    script = tmp_path / f"python-{module.replace('.', '-')}"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ] && [ "$2" = {module} ]; then shift 2; exec {sys.executable} {hook_file} "$@"; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    if module != "harness.bench.provenance":
        probes_as(script)  # its probe is this interpreter's (replayed in-process, conftest.probe_once)
    return f"python:{script}"


# ------------------------------------------------------------------------------------------ run
@pytest.mark.parametrize(
    "hook, fragment",
    [
        # MPS that says it is there, then fails its first allocation (GitHub-hosted macOS runners)
        (
            "import torch\ntorch.backends.mps.is_built = lambda: True\ntorch.backends.mps.is_available = lambda: True",
            "device mps is not usable in build stock (torch {v}): NotImplementedError: Could not run 'aten::empty",
        ),
        # MPS compiled in but not available (macOS < 12.3, a VM): said distinctly from "not built"
        (
            "import torch\ntorch.backends.mps.is_built = lambda: True\ntorch.backends.mps.is_available = lambda: False",
            "device mps is not usable in build stock (torch {v}): MPS is built but "
            "torch.backends.mps.is_available() is False",
        ),
    ],
)
def test_failing_mps_probe_refuses_to_produce_evidence(tmp_path, this_python, hook, fragment):
    import torch

    out = tmp_path / "out"
    stock = hooked_python(tmp_path, "harness.bench.provenance", hook)
    proc = harness(
        "compare",
        "--stock",
        stock,
        "--patched",
        this_python,
        "--device",
        "mps",
        "--cells",
        CELL,
        "--rounds",
        "1",
        "--out",
        str(out),
    )
    line = one_line_error(proc.stderr, proc.returncode)
    assert fragment.format(v=torch.__version__) in line
    assert line.endswith("-- refusing to produce evidence for it; choose another --device (cpu always works)")
    assert not (out / "results.json").exists() and not (out / "raw").exists()  # no evidence, not even partial


def test_nan_timing_and_nan_output_fail_their_cells_and_the_run_goes_on(tmp_path, this_python):
    # patched before the worker module runs: it imports op_callable from workloads, and BlockTimer
    hook = (
        "import math, harness.bench.timer as t, harness.bench.workloads as w\n"
        "measure = t.BlockTimer.measure\n"
        "t.CURRENT = None\n"
        "def nan_measure(self, fn, **kw):\n"
        "    m = measure(self, fn, **kw)\n"
        "    if t.CURRENT == 'mm':\n"
        "        m.samples[0] = math.nan\n"
        "    return m\n"
        "t.BlockTimer.measure = nan_measure\n"
        "op = w.op_callable\n"
        "def nan_op(cell, inputs):\n"
        "    fn = op(cell, inputs)\n"
        "    t.CURRENT = cell.op\n"
        "    return (lambda: fn() * math.inf) if cell.op == 'addmm' else fn\n"
        "w.op_callable = nan_op\n"
    )
    patched = hooked_python(tmp_path, "harness.bench.worker", hook)
    cells = f"{CELL},addmm/32x32x32/float32"
    out = tmp_path / "out"
    proc = harness(
        "compare",
        "--stock",
        this_python,
        "--patched",
        patched,
        "--device",
        "cpu",
        "--configs",
        "default",
        "--cells",
        cells,
        "--rounds",
        "1",
        "--out",
        str(out),
    )
    assert proc.returncode == 1, proc.stderr
    data = json.loads((out / "results.json").read_text())
    by_build = {p["build"]: p for p in data["processes"]}
    assert all(c["status"] == "ok" for c in by_build["stock"]["cells"].values())
    bad = by_build["patched"]["cells"]
    assert bad[CELL] == {**bad[CELL], "status": "failed", "reason": "1 timing samples are not finite positive seconds"}
    assert bad["addmm/32x32x32/float32"]["status"] == "failed"
    assert bad["addmm/32x32x32/float32"]["reason"] == "check failed: 1024 non-finite values (NaN/Inf) in the output"
    assert "1 timing samples are not finite positive seconds" in (out / "report.md").read_text()


def test_shape_too_big_for_memory_is_skipped_with_the_estimate(tmp_path, this_python):
    huge = "mm/400000x400000x400000/float32"  # 3 x 640 GB: more than any machine this runs on has free
    out = tmp_path / "out"
    proc = harness(
        "bench",
        "--build",
        this_python,
        "--device",
        "cpu",
        "--configs",
        "default",
        "--cells",
        f"{huge},{CELL}",
        "--rounds",
        "1",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    (process,) = json.loads((out / "results.json").read_text())["processes"]
    skipped = process["cells"][huge]
    assert skipped["status"] == "skipped" and "measurement" not in skipped
    needs = 3 * 400000**2 * 4 * 3 / 2**30  # 3 matrices, float32, x3 with the first round's check
    assert skipped["reason"].startswith(f"needs about {needs:.2f} GiB, ") and skipped["reason"].endswith(
        " GiB free on cpu"
    )
    assert process["cells"][CELL]["status"] == "ok"


def test_env_reaches_every_worker_is_recorded_and_fingerprinted(tmp_path, this_python):
    out = tmp_path / "out"
    base = [
        "bench",
        "--build",
        this_python,
        "--device",
        "cpu",
        "--configs",
        "default,no_vec",
        "--cells",
        CELL,
        "--rounds",
        "1",
        "--out",
        str(out),
    ]
    proc = harness(*base, "--env", "HARNESS_TEST_MARK=a=b", "--env", "OMP_NUM_THREADS=1")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "results.json").read_text())
    assert data["run"]["extra_env"] == {"HARNESS_TEST_MARK": "a=b", "OMP_NUM_THREADS": "1"}
    envs = {p["config"]: p["env"] for p in data["processes"]}
    # recorded by each worker from its own os.environ: the variables reached it, on top of its config's
    assert envs == {
        "default": {"HARNESS_TEST_MARK": "a=b", "OMP_NUM_THREADS": "1"},
        "no_vec": {"ATEN_CPU_CAPABILITY": "default", "HARNESS_TEST_MARK": "a=b", "OMP_NUM_THREADS": "1"},
    }
    assert json.loads((out / "raw" / "plan.json").read_text())["extra_env"] == data["run"]["extra_env"]
    before = (out / "results.json").read_text()
    again = harness(*base, "--env", "HARNESS_TEST_MARK=other", "--env", "OMP_NUM_THREADS=1")
    line = one_line_error(again.stderr, again.returncode)
    assert f"{out} holds a run measured with different extra_env -- pass --fresh" in line
    assert (out / "results.json").read_text() == before


@pytest.mark.parametrize(
    "items, fragment",
    [
        (["NOEQUALS"], "malformed --env 'NOEQUALS': no '=' -- write --env KEY=VALUE"),
        (["=1"], "malformed --env '=1': '' is not an environment variable name"),
        (["1X=2"], "malformed --env '1X=2': '1X' is not an environment variable name"),
        (["A-B=2"], "malformed --env 'A-B=2': 'A-B' is not an environment variable name"),
        (["X=1", "X=2"], "--env X is given twice ('1' and '2')"),
        (["PYTHONPATH=/tmp"], "--env PYTHONPATH: the harness sets PYTHONPATH for its workers"),
        (
            ["PYTORCH_MPS_LOG_PROFILE_INFO=385"],
            "--env PYTORCH_MPS_LOG_PROFILE_INFO: the harness sets PYTORCH_MPS_LOG_PROFILE_INFO in its probe processes "
            "only: it would slow every timed call",
        ),
        (
            ["ATEN_CPU_CAPABILITY=avx2"],
            "--env ATEN_CPU_CAPABILITY conflicts with the cpu env configs, which set it "
            "themselves (no_vec) -- drop ATEN_CPU_CAPABILITY from --env",
        ),
    ],
)
def test_malformed_env_is_one_line_before_anything_runs(tmp_path, this_python, items, fragment):
    out = tmp_path / "o"
    (out).mkdir()
    (out / "results.json").write_text("{}")  # whatever is there stays untouched
    args = [a for item in items for a in ("--env", item)]
    proc = harness(
        "compare", "--stock", this_python, "--patched", this_python, "--device", "cpu", *args, "--out", str(out)
    )
    assert fragment in one_line_error(proc.stderr, proc.returncode)
    assert sorted(p.name for p in out.iterdir()) == ["results.json"] and (out / "results.json").read_text() == "{}"


def test_unknown_and_missing_arguments_are_one_line(tmp_path, this_python):
    proc = harness(
        "compare",
        "--stock",
        this_python,
        "--patched",
        this_python,
        "--device",
        "cpu",
        "--bogus",
        "--out",
        str(tmp_path / "o"),
    )
    line = one_line_error(proc.stderr, proc.returncode)
    assert line == (
        "error: python -m harness compare: unrecognized arguments: --bogus -- " "see `python -m harness compare --help`"
    )
    line = one_line_error(*_cli("bench", "--device", "cpu"))
    assert "the following arguments are required: --build, --out" in line
    # 0 jobs used to mean "the CPU count" silently
    assert one_line_error(*_cli("build", "--kind", "stock", "--jobs", "0", "--dry-run")) == (
        "error: --jobs 0: out of range -- give --jobs a whole number of compile jobs in [1, 4096]"
    )
    assert not (tmp_path / "o").exists()


def _cli(*args: str) -> tuple[str, int]:
    proc = harness(*args)
    return proc.stderr, proc.returncode


# ------------------------------------------------------------------------- damaged results dirs
SMALL = ["--device", "cpu", "--configs", "default", "--cells", CELL, "--quick"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, this_python) -> tuple[Path, list[str]]:
    """A finished 2-round compare (4 processes); tests copy it and damage the copy."""
    out = tmp_path_factory.mktemp("finished") / "out"
    args = ["compare", "--stock", this_python, "--patched", this_python, *SMALL, "--rounds", "2"]
    proc = harness(*args, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out, args


def _copy(run: Path, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(run, out)
    return out


def _snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "damage, fragment",
    [
        (lambda text: text[: len(text) // 2], "results.json is not readable JSON ("),
        (lambda text: "[]", "results.json is not a results.json object (a JSON array): damaged"),
        (lambda text: '{"schema": 1}', "results.json has no schema_version: damaged, or not a results.json"),
    ],
)
def test_damaged_results_json_is_set_aside_and_rebuilt_by_the_rerun(finished_run, tmp_path, damage, fragment):
    run, args = finished_run
    out = _copy(run, tmp_path)
    good = json.loads((out / "results.json").read_text())
    damaged = damage((out / "results.json").read_text())
    (out / "results.json").write_text(damaged)
    line = one_line_error(*_cli("report", str(out)))
    assert fragment in line and "has schema version" not in line
    assert line.endswith(
        "-- re-run the compare (or bench) command that wrote it: it rebuilds results.json from "
        "raw/, keeping the damaged file as results.json.damaged-<UTC time>"
    )
    again = harness(*args, "--out", str(out))  # the remedy, as the line says it
    assert again.returncode == 0, again.stderr
    (kept,) = out.glob("results.json.damaged-*")
    assert kept.read_text() == damaged  # never deleted
    assert (
        f"{fragment.split(' (')[0]}" in again.stderr
        and f"kept it as {kept.name}; rebuilding results.json from raw/" in again.stderr
    )
    rebuilt = json.loads((out / "results.json").read_text())
    assert again.stderr.count("] kept r0") == 4 and "] ran " not in again.stderr  # from raw/, nothing measured again
    assert [(p["name"], p["cells"]) for p in rebuilt["processes"]] == [
        (p["name"], p["cells"]) for p in good["processes"]
    ]
    assert rebuilt["run"]["finished"] is not None


@pytest.mark.parametrize(
    "edit, path",
    [
        (lambda d: d["processes"][3].update(cells=None), "processes[3].cells is null, not an object of cell records"),
        (lambda d: d["run"]["configs"].append("ghost"), "run.configs names 'ghost', which is not in configs"),
        (lambda d: d["run"]["builds"].append("other"), "run.builds names 'other', which is not in builds"),
        (
            lambda d: d["processes"][1]["cells"][CELL]["measurement"].update(median="fast"),
            f"processes[1].cells['{CELL}'].measurement.median is 'fast', not a positive number of seconds",
        ),
        (
            lambda d: d["processes"][0]["cells"][CELL]["measurement"].update(samples=[1e-3, None]),
            f"processes[0].cells['{CELL}'].measurement.samples is not a list of numbers",
        ),
        (lambda d: d["processes"][2].pop("round"), "processes[2].round is null (missing)"),
    ],
)
def test_malformed_results_json_names_the_json_path(finished_run, tmp_path, capsys, edit, path):
    run, _ = finished_run
    out = _copy(run, tmp_path)
    data = json.loads((out / "results.json").read_text())
    edit(data)
    (out / "results.json").write_text(json.dumps(data))
    before = _snapshot(out)
    line = _cli_line(capsys, "report", str(out))
    assert line.startswith(f"error: {out / 'results.json'} is malformed: {path} -- re-run the compare (or bench)")
    assert _snapshot(out) == before


def test_damaged_status_files_are_set_aside_and_those_processes_run_again(finished_run, tmp_path):
    """Three damages (cut short, null cells, not an object), one per process, set aside in one rerun."""
    run, args = finished_run
    out = _copy(run, tmp_path)
    damages = {
        "r01-stock-default": '{"status": "ok", "cells": nu',
        "r01-patched-default": '{"status": "ok", "cells": null}',
        "r00-stock-default": "[1, 2]",
    }
    for name, damage in damages.items():
        (out / "raw" / f"{name}.status.json").write_text(damage)
    again = harness(*args, "--out", str(out))
    assert again.returncode == 0, again.stderr
    for name, damage in damages.items():
        status = out / "raw" / f"{name}.status.json"
        (kept,) = (out / "raw").glob(f"{name}.status.json.damaged-*")
        assert kept.read_text() == damage
        assert f"{status} is damaged (" in again.stderr
        assert f"kept it as {kept.name}; running that process again" in again.stderr
        assert f"] ran {name}: 1 cells ok" in again.stderr
        assert json.loads(status.read_text())["cells"][CELL]["status"] == "ok"  # the process's new status file
    assert again.stderr.count("] kept r0") == 1 and again.stderr.count("] ran r0") == 3
    data = json.loads((out / "results.json").read_text())
    assert len(data["processes"]) == 4 and all(p["cells"][CELL]["status"] == "ok" for p in data["processes"])


def test_damaged_plan_is_refused_with_a_remedy_that_keeps_the_run(finished_run, tmp_path):
    run, args = finished_run
    out = _copy(run, tmp_path)
    (out / "raw" / "plan.json").write_text("garbage{")
    before = _snapshot(out)
    line = one_line_error(*_proc_err(harness(*args, "--out", str(out))))
    assert line == (
        f"error: {out / 'raw' / 'plan.json'} is damaged (not a JSON object): the finished processes in "
        f"{out / 'raw'} cannot be checked against this command's plan -- run with a new --out directory "
        f"({out} stays as it is), or --fresh to discard it"
    )
    assert _snapshot(out) == before


def test_fewer_rounds_than_finished_are_refused(finished_run, tmp_path):
    run, args = finished_run
    out = _copy(run, tmp_path)
    before = _snapshot(out)
    rounds = args.index("--rounds") + 1
    fewer = [*args[:rounds], "1", *args[rounds + 1 :]]
    line = one_line_error(*_proc_err(harness(*fewer, "--out", str(out))))
    assert line == (
        f"error: {out} holds 2 rounds; --rounds 1 would leave round 1 out of results.json -- "
        "pass --rounds 2 (or more) to resume, or --fresh / a new --out"
    )
    assert _snapshot(out) == before


@pytest.mark.parametrize(
    "args",
    [
        ["--device", "mps", "--cells", CELL],  # no MPS on this machine: refused after the probe
        ["--device", "cpu", "--cells", CELL, "--dtypes", "float32", "--env", "X=1", "--keep-env", "TORCH_X"],
    ],
)
def test_a_run_that_fails_before_measuring_leaves_no_out_dir(tmp_path, this_python, args):
    out = tmp_path / "new" / "out"
    build = this_python if args[1] == "mps" else "python:" + str(tmp_path / "no-such-python")
    proc = harness("bench", "--build", build, *args, "--out", str(out))
    one_line_error(proc.stderr, proc.returncode)
    assert list(tmp_path.iterdir()) == []  # neither out nor the parent this run made
    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("keep")
    proc = harness("bench", "--build", build, *args, "--out", str(existing))
    one_line_error(proc.stderr, proc.returncode)
    assert _snapshot(existing) == {"notes.txt": b"keep"}


@pytest.mark.e2e
def test_interrupted_compare_rerenders_the_report_from_the_saved_results(finished_run, tmp_path):
    run, args = finished_run
    out = _copy(run, tmp_path)
    earlier = (out / "report.md").read_text()
    rounds = args.index("--rounds") + 1
    more = [*args[:rounds], "8", *args[rounds + 1 :]]  # resumes the 2 rounds, then measures more
    first = subprocess.Popen(
        [sys.executable, "-m", "harness", *more, "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    ran = out / "raw" / "r02-stock-default.status.json"
    deadline = time.monotonic() + 120
    while not ran.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ran.exists(), first.communicate()
    time.sleep(0.3)
    os.killpg(first.pid, signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    assert "Traceback" not in err
    data = json.loads((out / "results.json").read_text())
    assert data["run"]["finished"] is None and 5 <= len(data["processes"]) < 16
    report_md = out / "report.md"
    assert report_md.stat().st_mtime_ns >= (out / "results.json").stat().st_mtime_ns
    from harness import report

    text = report_md.read_text()
    assert text != earlier and text == report.render(data, report.analyse(data))  # from the current results.json
    assert "incomplete" in text.lower()  # the report's banner for run.finished == None


def _proc_err(proc) -> tuple[str, int]:
    return proc.stderr, proc.returncode


# ----------------------------------------------------------------------------------- upstream
UNREACHABLE = "http://127.0.0.1:9/pytorch.git"  # port 9 (discard): connection refused at once


def _cli_line(capsys, *args: str, code: int = 2) -> str:
    rc = cli.main(list(args))
    return one_line_error(capsys.readouterr().err, rc, code)


def _point_series_at(folder: Path, upstream: str) -> None:
    manifest = folder / "series.toml"
    text = manifest.read_text()
    start = text.index('upstream = "')
    end = text.index('"\n', start + len('upstream = "'))
    manifest.write_text(text[:start] + f'upstream = "{upstream}' + text[end:])


def test_refresh_without_a_worktree_is_one_line_and_touches_no_network(tiny_upstream, project, isolated_cache, capsys):
    folder = export_series(tiny_upstream, project)
    _point_series_at(folder, UNREACHABLE)
    before = {p.name: p.read_bytes() for p in (folder / "v1").iterdir()}
    line = _cli_line(capsys, "refresh", "--series", "demo")
    assert line.startswith(
        f"error: no patched worktree of v1 at {Path('work') / 'v1' / 'patched'}: nothing to "
        "refresh from -- run `python -m harness apply --series demo` (same --workdir) first"
    )
    assert not (isolated_cache / "mirrors").exists()  # no clone was even tried
    assert {p.name: p.read_bytes() for p in (folder / "v1").iterdir()} == before


def test_refresh_with_a_worktree_works_offline(tiny_upstream, project, isolated_cache, capsys, monkeypatch):
    import git as gitpython

    from harness import upstream

    folder = export_series(tiny_upstream, project)
    assert cli.main(["apply", "--series", "demo"]) == 0
    _point_series_at(folder, UNREACHABLE)  # the network is gone; refresh must not need it

    def no_network(*args, **kwargs):
        raise AssertionError("refresh opened the upstream")

    monkeypatch.setattr(gitpython.Repo, "clone_from", no_network)
    monkeypatch.setattr(upstream, "_fetch", no_network)
    _, patched = worktrees(project / "work", "v1")
    (patched / "a.txt").write_text((patched / "a.txt").read_text().replace("line 9\n", "line 9 offline\n"))
    git(patched, "commit", "-q", "-am", "a: offline edit")
    capsys.readouterr()
    assert cli.main(["refresh", "--series", "demo"]) == 0
    assert "refresh: patches/demo/v1: 1 file(s) written or removed" in capsys.readouterr().out
    assert "+line 9 offline" in (folder / "v1" / "0003-a-offline-edit.patch").read_text()


def test_second_checkout_says_the_cache_was_warm(tiny_upstream, isolated_cache, tmp_path, capsys):
    args = ["checkout", "--upstream", str(tiny_upstream), "--base", "v1"]
    assert cli.main([*args, "--workdir", str(tmp_path / "w1")]) == 0
    assert "(cloned into the cache)" in capsys.readouterr().err
    assert cli.main([*args, "--workdir", str(tmp_path / "w2")]) == 0
    assert "(cache warm, no clone)" in capsys.readouterr().err


def test_nonexistent_upstream_path_or_archive_is_one_line(isolated_cache, tmp_path, capsys):
    for missing in (tmp_path / "no-such-repo", tmp_path / "pytorch-v2.6.0.tar.gz"):
        line = _cli_line(
            capsys, "checkout", "--upstream", str(missing), "--base", "v1", "--workdir", str(tmp_path / "w")
        )
        assert line.startswith(
            f"error: upstream {missing}: no such file or directory -- pass --upstream with an "
            "existing local repository, mirror or source archive, or a git URL"
        )
    assert not (isolated_cache / "mirrors").exists() and not (tmp_path / "w").exists()


def test_dirty_worktrees_are_never_reset(tiny_upstream, project, isolated_cache, capsys):
    export_series(tiny_upstream, project)
    assert cli.main(["apply", "--series", "demo"]) == 0
    _, patched = worktrees(project / "work", "v1")
    edited = (patched / "docs" / "b.md").read_text() + "my unsaved notes\n"
    (patched / "docs" / "b.md").write_text(edited)
    capsys.readouterr()
    # --force resets to the base, but never over uncommitted work
    line = _cli_line(capsys, "apply", "--series", "demo", "--force")
    assert line == (
        "error: patched worktree work/v1/patched has uncommitted changes: docs/b.md -- commit them and "
        "run refresh, or discard them (`git -C work/v1/patched checkout -- .`)"
    )
    assert (patched / "docs" / "b.md").read_text() == edited
    # a rebase onto a base whose patched worktree the user has edited
    assert cli.main(["checkout", "--upstream", str(tiny_upstream), "--base", "v2"]) == 0
    _, onto = worktrees(project / "work", "v2")
    (onto / "a.txt").write_text("edited by hand\n")
    capsys.readouterr()
    line = _cli_line(capsys, "rebase", "--series", "demo", "--onto", "v2")
    assert line == (
        f"error: worktree work/v2/patched is on a detached HEAD, not {patched_branch('demo', 'v2', onto)}, "
        "and has uncommitted changes: a.txt -- commit or discard them (`git -C work/v2/patched status`)"
    )
    assert (onto / "a.txt").read_text() == "edited by hand\n"


def _slow_clone_shim(tmp_path: Path) -> tuple[dict, Path]:
    """PATH with a ``git`` that clones through a real transport whose upload-pack waits 120 s first:
    a clone that is killed midway, with its partial repository on disk."""
    import shutil

    real = shutil.which("git")
    started = tmp_path / "upload-pack-started"
    shim = tmp_path / "shim"
    shim.mkdir()
    slow = shim / "slow-upload-pack"
    slow.write_text(f'#!/bin/sh\ntouch {started}\nsleep 120\nexec {real} upload-pack "$@"\n')
    (shim / "git").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = clone ]; then shift; exec {real} clone --no-local --upload-pack={slow} "$@"; fi\n'
        f'exec {real} "$@"\n'
    )
    for script in (slow, shim / "git"):
        script.chmod(0o755)
    return {"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}, started


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_clone_is_recovered_by_the_rerun(tiny_upstream, isolated_cache, tmp_path, sig):
    env, started = _slow_clone_shim(tmp_path)
    args = [
        sys.executable,
        "-m",
        "harness",
        "checkout",
        "--upstream",
        str(tiny_upstream),
        "--base",
        "v1",
        "--workdir",
        str(tmp_path / "w"),
    ]
    first = subprocess.Popen(
        args,
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + 60
    while not started.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), first.communicate()
    time.sleep(0.2)
    os.killpg(first.pid, sig)  # the whole process group, as a terminal's Ctrl-C or a killed session does
    _, err = first.communicate(timeout=60)
    if sig == signal.SIGINT:
        assert first.returncode == 130
        assert err.splitlines()[-1] == (
            "interrupted: finished results are on disk; run the same command again " "to resume"
        )
    else:
        assert first.returncode == -signal.SIGKILL
    mirrors = isolated_cache / "mirrors"
    partial = list(mirrors.glob(".*.git.*"))
    assert len(partial) == 1 and not list(mirrors.glob("*.git"))  # a partial clone, no mirror
    again = harness(*args[3:])
    assert again.returncode == 0, again.stderr
    assert "removed 1 partial clone(s) of" in again.stderr and "left by an interrupted run" in again.stderr
    assert not list(mirrors.glob(".*")) and len(list(mirrors.glob("*.git"))) == 1
    stock, patched = worktrees(tmp_path / "w", "v1")
    assert git(stock, "rev-parse", "HEAD") == git(tiny_upstream, "rev-parse", "v1^{commit}")
    assert (patched / "a.txt").is_file()


# -------------------------------------------------------------------------------------- build
def _tools_path(tmp_path: Path, *names: str) -> str:
    """A PATH folder holding only ``git`` and ``names`` (links to the real tools): the rest is missing."""
    import shutil

    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name in ("git", *names):
        (folder / name).symlink_to(shutil.which(name))
    return str(folder)


@pytest.fixture
def tiny_source(tmp_path):
    """The generated ``tinyext`` upstream (tests/small_upstream.py: CMake + C++), with an earlier wheel in dist/."""
    import small_upstream as su

    repo = su.make_upstream(tmp_path / "src")
    dist = tmp_path / "dist"
    outdir.claim(dist, "--dist", outdir.DIST_WRITES)  # a --dist of the harness
    (dist / "tinyext-1.4.0+stock.earlier-py3-none-any.whl").write_bytes(b"an earlier build")
    return repo, dist


def _build(repo: Path, dist: Path, tmp_path: Path, *extra: str, env: dict | None = None):
    """``python -m harness build --kind stock --source repo`` in this process, without ``CXX`` and
    ``TORCH_PATCH_HARNESS_BUILD_FREE_GIB`` from the environment unless ``env`` sets them."""
    with pytest.MonkeyPatch.context() as patch:
        for key in ("CXX", "TORCH_PATCH_HARNESS_BUILD_FREE_GIB"):
            patch.delenv(key, raising=False)
        return run_harness(
            "build",
            "--kind",
            "stock",
            "--source",
            str(repo),
            "--jobs",
            "2",
            "--dist",
            str(dist),
            "--no-verify",
            *extra,
            env={"TORCH_PATCH_HARNESS_CACHE": str(tmp_path / "cache"), **(env or {})},
            cwd=REPO,
        )


@pytest.mark.parametrize(
    "tools, platform, fragment",
    [
        (
            (),
            "linux-cpu",
            "no C++ compiler found (c++, g++, clang++ not on PATH) -- install one: "
            "`apt-get install -y build-essential` (Debian/Ubuntu) or `dnf install gcc-c++` (Fedora)",
        ),
        (
            (),
            "macos-arm64",
            "no C++ compiler found (c++, g++, clang++ not on PATH) -- install the Xcode command line "
            "tools: `xcode-select --install`",
        ),
        (
            ("c++",),
            "linux-cpu",
            "cmake not found on PATH or in the build environment -- `python -m pip install cmake`, "
            "or `apt-get install -y cmake`",
        ),
    ],
)
def test_missing_compiler_or_cmake_is_one_line_before_anything_is_installed(
    tiny_source, tmp_path, tools, platform, fragment
):
    repo, dist = tiny_source
    proc = _build(repo, dist, tmp_path, "--platform", platform, env={"PATH": _tools_path(tmp_path, *tools)})
    assert one_line_error(proc.stderr, proc.returncode).endswith(fragment)
    assert not (tmp_path / "cache" / "build-venvs").exists()  # refused before the build venv was made
    assert sorted(p.name for p in dist.iterdir()) == [outdir.MARKER, "tinyext-1.4.0+stock.earlier-py3-none-any.whl"]
    assert not (repo / "build").exists()


def test_disk_nearly_full_is_refused_against_the_real_free_space(tiny_source, tmp_path):
    import re
    import shutil

    repo, dist = tiny_source
    proc = _build(repo, dist, tmp_path, env={"TORCH_PATCH_HARNESS_BUILD_FREE_GIB": "1000000"})
    line = one_line_error(proc.stderr, proc.returncode)
    match = re.fullmatch(
        rf"error: only ([\d.]+) GiB free at {re.escape(str(repo))}; a linux-cpu build of this base "
        r"needs about 1000000\.0 GiB \(set by TORCH_PATCH_HARNESS_BUILD_FREE_GIB\) -- free disk "
        r"space, or put the worktrees \(--workdir\) and --dist on a larger volume",
        line,
    )
    assert match, line
    assert abs(float(match.group(1)) - shutil.disk_usage(repo).free / 2**30) < 1.0  # the real free space
    assert sorted(p.name for p in dist.iterdir()) == [outdir.MARKER, "tinyext-1.4.0+stock.earlier-py3-none-any.whl"]
    assert not (tmp_path / "cache" / "build-venvs").exists()
    bad = _build(repo, dist, tmp_path, env={"TORCH_PATCH_HARNESS_BUILD_FREE_GIB": "lots"})
    assert one_line_error(bad.stderr, bad.returncode) == (
        "error: $TORCH_PATCH_HARNESS_BUILD_FREE_GIB lots: not a number -- "
        "give $TORCH_PATCH_HARNESS_BUILD_FREE_GIB a number of GiB in [0, 1e+09]"
    )


def test_nonexistent_source_is_one_line(tmp_path):
    proc = _build(tmp_path / "nowhere", tmp_path / "dist", tmp_path)
    assert one_line_error(proc.stderr, proc.returncode).startswith(
        f"error: --source {tmp_path / 'nowhere'}: no such directory -- pass the root of a source tree"
    )
    assert not (tmp_path / "dist").exists()


@pytest.mark.slow
@pytest.mark.e2e
def test_interrupted_build_resumes_compiling_only_what_was_left(tiny_source, tmp_path, build_venvs):
    """Ctrl-C while the last translation unit compiles; the rerun compiles that one unit only."""
    import glob

    import small_upstream as su

    repo, dist = tiny_source
    hold, done = tmp_path / "hold", tmp_path / "done"
    done.mkdir()
    # a compiler launcher (like ccache) that stalls on config.cpp while `hold` exists, and notes each finished unit
    launcher = tmp_path / "hold-launcher"
    launcher.write_text(
        '#!/bin/sh\ncase "$*" in\n  *config.cpp*)\n'
        f"    touch {done}/config-started\n    while [ -e {hold} ]; do sleep 0.1; done;;\nesac\n"
        f'"$@" || exit $?\nfor a in "$@"; do last="$a"; done\necho $$ > "{done}/$(basename "$last")"\n'
    )
    launcher.chmod(0o755)
    hold.touch()
    args = ["--build-env", f"CMAKE_CXX_COMPILER_LAUNCHER={launcher}"]
    environ = {k: v for k, v in os.environ.items() if k != "CXX"}
    environ["TORCH_PATCH_HARNESS_CACHE"] = str(share_build_venvs(tmp_path / "cache", build_venvs))
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "build",
            "--kind",
            "stock",
            "--source",
            str(repo),
            "--jobs",
            "2",
            "--dist",
            str(dist),
            "--no-verify",
            *args,
        ],
        cwd=REPO,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )
    objects = str(repo / "build" / "cmake-Release" / "**" / "*.o")
    build_dir = repo / "build" / "cmake-Release"
    finished = {u for u in su.UNITS if u != "config.cpp"}

    def reaped(marker: Path) -> bool:
        pid = marker.read_text().strip()  # the launcher's, once written
        if not pid.isdigit():
            return False
        try:
            os.kill(int(pid), 0)  # a launcher not yet reaped (a zombie) still answers
        except ProcessLookupError:
            return True
        return False

    def recorded() -> bool:
        # the launcher notes a unit before it exits; a unit finished but not yet reaped is compiled again on resume
        # (CI saw 2 units instead of 1 once): ninja records it in .ninja_log only after reaping it, and make, when
        # interrupted, deletes the object of a command it has not reaped
        markers = {p.name: p for p in done.iterdir()}
        if not ({"config-started", *finished} <= set(markers)):
            return False
        if not all(reaped(markers[u]) for u in finished):
            return False
        if not (build_dir / "build.ninja").is_file():  # make: the reaped unit's object is its record
            return True
        log = build_dir / ".ninja_log"  # written from the first unit ninja records
        lines = log.read_text().splitlines()[1:] if log.is_file() else []
        logged = {Path(line.split("\t")[3]).name for line in lines if line.count("\t") >= 4}
        return {f"{u}.o" for u in finished} <= logged

    deadline = time.monotonic() + 400
    while first.poll() is None and time.monotonic() < deadline:
        if recorded():
            break
        time.sleep(0.2)
    else:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate()
            pytest.fail(f"the finished units were not all recorded in 400 s: {sorted(p.name for p in done.iterdir())}")
    assert first.poll() is None, first.communicate()
    os.killpg(first.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole process group
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    assert err.splitlines()[-1] == "interrupted: finished results are on disk; run the same command again to resume"
    assert len(glob.glob(objects, recursive=True)) == len(su.UNITS) - 1  # finished units kept
    hold.unlink()
    again = _build(repo, dist, tmp_path, *args)
    assert again.returncode == 0, again.stderr
    wheel = Path(again.stdout.strip())
    manifest = json.loads(wheel.with_name(wheel.name + ".build.json").read_text())
    assert manifest["compiled_units"] == 1  # only config.cpp, the unit the interrupt stopped
    assert "src/config.cpp.o" in Path(manifest["log"]).read_text()
    assert (dist / "tinyext-1.4.0+stock.earlier-py3-none-any.whl").read_bytes() == b"an earlier build"


def test_keep_env_refuses_a_variable_the_harness_sets_itself():
    # a hostile review found: --keep-env PYTHONPATH was reported "kept" while every worker got the
    # harness's own PYTHONPATH; it follows the --env rule now
    from harness.errors import UsageError
    from harness.plan import check_keep_env

    with pytest.raises(UsageError, match="--keep-env PYTHONPATH: the harness sets PYTHONPATH for its workers"):
        check_keep_env(["PYTHONPATH"])
    with pytest.raises(UsageError, match="'A=B' is not an environment variable name"):
        check_keep_env(["A=B"])
    with pytest.raises(UsageError, match="--keep-env PYTORCH_MPS_TRACE_SIGNPOSTS: .* in its probe processes only"):
        check_keep_env(["PYTORCH_MPS_TRACE_SIGNPOSTS"])  # the MPS profiler: probe processes only
    check_keep_env(["NVIDIA_TF32_OVERRIDE"])  # a name the workers would not inherit: fine


# ------------------------------------------------------ a review found tracebacks on hostile files
DEEP = "[" * 200000 + "]" * 200000  # json.loads: RecursionError, not ValueError


def test_json_nested_too_deep_is_damaged_in_one_line(finished_run, tmp_path, capsys):
    """N5: a results.json, marker, status, plan or worker record nested 200000 deep: RecursionError tracebacks."""
    from harness import rundir, supervise

    run, args = finished_run
    out = _copy(run, tmp_path)
    (out / "results.json").write_text(DEEP)
    line = _cli_line(capsys, "report", str(out))
    assert line.startswith(f"error: {out / 'results.json'} is not readable JSON (maximum recursion depth exceeded")
    assert not outdir.holds_results(out)
    marker = out / outdir.MARKER
    marker.write_text(DEEP)
    line = _cli_line(capsys, *args, "--out", str(out))
    assert line.startswith(f"error: {marker} is damaged (not the harness's record of what it wrote in {out})")
    raw = out / "raw"
    status = raw / "r00-stock-default.status.json"
    status.write_text(DEEP)
    assert rundir.read_status(status) is None and not status.exists()  # set aside, to be run again
    (raw / "plan.json").write_text(DEEP)
    with pytest.raises(rundir.ResultsError, match=r"plan\.json is damaged \(not a JSON object\)"):
        rundir.check_resumable(raw, {}, 2)
    (raw / "d.worker.json").write_text(DEEP)
    assert supervise.reap_orphans(raw) == [] and not (raw / "d.worker.json").exists()


@pytest.mark.parametrize("pid", [99999999999999999999, 2**22 + 1, -5, 0, 1, True, "12", None])
def test_a_worker_record_naming_no_possible_pid_is_stale(tmp_path, capsys, pid):
    """N6: `{"pid": 99999999999999999999}` in raw/d.worker.json: OverflowError at os.killpg."""
    from harness import supervise

    (tmp_path / "d.worker.json").write_text(json.dumps({"pid": pid}))
    assert supervise.reap_orphans(tmp_path) == []
    assert not (tmp_path / "d.worker.json").exists()
    shown = str(pid)[:30]
    assert f"d.worker.json names no process of this machine (pid {shown}): a stale record, removed" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("text", ["inf", "nan", "1e400", "-1", "1e10"])
def test_build_free_gib_is_parsed_by_the_one_number_rule(tmp_path, monkeypatch, text):
    """N7: TORCH_PATCH_HARNESS_BUILD_FREE_GIB=inf: OverflowError in required_free_bytes (int(inf * GIB))."""
    from harness.build import convention, platforms, preflight
    from harness.errors import UsageError

    monkeypatch.setenv(convention.FREE_GIB_ENV, text)
    with pytest.raises(UsageError) as info:
        convention.required_free_bytes(tmp_path, "linux-cpu")
    assert info.value.cause.startswith(f"${convention.FREE_GIB_ENV} {text}: ")
    assert info.value.remedy == f"give ${convention.FREE_GIB_ENV} a number of GiB in [0, 1e+09]"
    disk = {item: (ok, d) for item, ok, d in preflight.toolchain_checks("linux-cpu", tmp_path)}["disk"]
    assert disk == (False, f"error: {info.value.cause} -- {info.value.remedy}")  # doctor's row, no traceback
    # doctor without --source read no variable at all (re-check of the review): it counts there too
    disk = {item: (ok, d) for item, ok, d in preflight.toolchain_checks("linux-cpu", None)}["disk"]
    assert disk == (False, f"error: {info.value.cause} -- {info.value.remedy}")
    monkeypatch.setenv(convention.FREE_GIB_ENV, "30")
    assert convention.required_free_bytes(tmp_path, "linux-cpu") == (
        30 * platforms.GIB,
        f"set by {convention.FREE_GIB_ENV}",
    )
