"""Every child process has a deadline named with its step, children answer JSON on a channel
nothing else writes, an interpreter that does not start is said to, and two runs share one environment.

Slow and hanging interpreters are small shell wrappers around this one (a fake ``torch`` package that
sleeps, a ``sitecustomize`` that prints); the deadlines are module constants shortened here, so no test
waits for a real deadline.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import run_harness

from harness import configs as cfg
from harness import seriestests, supervise, venvs
from harness.build import preflight
from harness.build import wheel as wheel_mod
from harness.errors import HarnessError
from harness.paths import slug

#: the probe's steps, each shortened to a second
SHORT = {"importing torch": 1.0, "probing the device": 1.0, "making torch's collect_env report": 1.0}


def wrapper(tmp_path: Path, name: str, *, pythonpath: Path | None = None, before: str = "") -> Path:
    """An executable ``name`` that runs ``before`` (shell) and then this interpreter, with ``pythonpath``
    put first on ``PYTHONPATH`` (a fake torch, a sitecustomize)."""
    script = tmp_path / name
    path = f'PYTHONPATH={pythonpath}:"$PYTHONPATH" ' if pythonpath else ""
    script.write_text(f'#!/bin/sh\n{before}\n{path}exec {sys.executable} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def fake_torch(tmp_path: Path, body: str) -> Path:
    """A folder holding a package ``torch`` whose import runs ``body`` (and writes its pid to ``pid``)."""
    folder = tmp_path / "fake"
    (folder / "torch").mkdir(parents=True)
    (folder / "torch" / "__init__.py").write_text(
        f"import os, time\nopen({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))\n{body}\n"
    )
    return folder


def _gone(pid: int) -> bool:
    """The process ``pid`` has ended (a zombie left to a container's init that does not reap counts)."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return True
    return state == "Z"


# ------------------------------------------------------------------------------ 1: deadlines
def test_a_probe_whose_torch_import_hangs_is_stopped_naming_the_step(tmp_path, monkeypatch):
    """An `import torch` that does not return hung `doctor`/`compare` until Ctrl-C (no deadline); a slow one
    left the user without a word. Stopped at its step's deadline, named, and the process is gone."""
    monkeypatch.setattr(supervise, "PROBE_STEPS", SHORT)
    python = wrapper(tmp_path, "python", pythonpath=fake_torch(tmp_path, "time.sleep(8)"))
    started = time.monotonic()
    with pytest.raises(HarnessError) as info:
        supervise.probe_build("stock", python, "cpu")
    assert time.monotonic() - started < 6
    assert info.value.cause == f"build stock probe ({python}): importing torch took longer than 1 s (stopped)"
    assert "run it by hand" in info.value.remedy
    assert _gone(int((tmp_path / "pid").read_text()))  # killed with its process group, not left running


def test_a_slow_torch_import_is_said_while_it_runs_and_when_it_ends(tmp_path, monkeypatch, capsys):
    """A 20 s import passed unmentioned: past SLOW_S it is said, with its deadline."""
    monkeypatch.setattr("harness.children.SLOW_S", 0.3)
    body = "time.sleep(1.2)\nraise ImportError('this fake torch is not torch')"
    python = wrapper(tmp_path, "python", pythonpath=fake_torch(tmp_path, body))
    with pytest.raises(HarnessError, match="cannot run the probe: ImportError: this fake torch is not torch"):
        supervise.probe_build("stock", python, "cpu")
    err = capsys.readouterr().err
    assert f"build stock probe ({python}): importing torch has taken 0 s so far (stopped at 120 s)" in err
    assert f"build stock probe ({python}): importing torch took 1 s" in err


def test_a_worker_stopped_before_it_started_blames_no_cell(tmp_path):
    """doctor with a 130 s import said "worker timed out ... while measuring mm/16x16x16/float16" though no
    worker had started: now the step it was in (its `importing` record) is named, and no cell is blamed."""
    python = wrapper(tmp_path, "python", pythonpath=fake_torch(tmp_path, "time.sleep(8)"))
    cells = ["mm/16x16x16/float32", "mm/32x32x32/float32"]
    spec = {"device": "cpu", "cells": cells, "check": False, "seed": 0, "threads": 1, "timing": {}}
    record = supervise.run_worker(python, spec, cfg.EnvConfig("default"), tmp_path, "w", timeout=1.5)
    reason = "worker timed out after 1.5 s before it started: importing torch took longer than that"
    assert record["reason"] == reason
    assert {c["reason"] for c in record["cells"].values()} == {reason}


def test_a_series_test_past_its_deadline_is_stopped_with_its_grandchildren(tmp_path, monkeypatch):
    """harness/seriestests.py uses its TIMEOUT_S; a grandchild holding the output pipe no longer holds the
    harness past it (subprocess.run's kill reached the child only, then waited for the pipe)."""
    monkeypatch.setattr(seriestests, "TIMEOUT_S", 1.0)
    python = wrapper(tmp_path, "python", before="sleep 20 & wait; exit 0")
    (tmp_path / "src" / "test").mkdir(parents=True)
    (tmp_path / "src" / "test" / "test_x.py").write_text("def test_x():\n    pass\n")
    test = seriestests.SeriesTest("x", "test/test_x.py")
    started = time.monotonic()
    record = seriestests.run_one(str(python), test, tmp_path / "src", tmp_path / "junit.xml")
    assert time.monotonic() - started < 8
    assert record == {
        "outcome": "error",
        "reason": "pytest test/test_x.py took longer than 1 s (stopped)",
        "returncode": None,
    }


def test_a_hanging_toolchain_probe_is_stopped_and_named(tmp_path, monkeypatch):
    """A build's preflight (`c++ --version`, `cmake --version`) ran 120 s before a silent give-up, the
    message Python's own; the deadline is a constant now, and named."""
    monkeypatch.setattr(preflight, "TOOL_PROBE_S", 0.5, raising=False)
    cmake = tmp_path / "cmake"
    cmake.write_text("#!/bin/sh\nsleep 5\necho 'cmake version 3.30.0'\n")
    cmake.chmod(0o755)
    assert preflight.first_line([str(cmake), "--version"]) == (
        -1,
        f"`{cmake} --version` took longer than 0.5 s (stopped)",
    )


def test_a_pip_install_past_its_deadline_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(venvs, "PIP_INSTALL_S", 0.5, raising=False)
    monkeypatch.setattr(venvs, "pip_command", lambda python: [sys.executable, "-c", "import time; time.sleep(5)"])
    with pytest.raises(HarnessError) as info:
        venvs.ensure_interpreter(venvs.parse_input("torch==2.13.0", "stock"), envs_dir=tmp_path / "envs")
    assert info.value.cause == "pip install torch==2.13.0 took longer than 0.5 s (stopped)"


# ------------------------------------------------------------------- 2: the answer channel
def test_probe_and_consistency_answer_past_an_interpreter_that_prints(tmp_path):
    """A sitecustomize (or .pth) printing at start-up, and bytes written to fd 1 from C at exit, broke the probe
    (JSONDecodeError at supervise.probe_build) and, when only the consistency subprocess printed, lost the
    run's results.json after every worker had run. Both answer on a channel of their own now."""
    import torch

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import atexit, os\nprint('hello from sitecustomize')\n"
        "atexit.register(lambda: os.write(1, b'{not json written to fd 1\\n'))\n"
    )
    python = wrapper(tmp_path, "python", pythonpath=site)
    info = supervise.probe_build("stock", python, "cpu")
    assert info["torch_version"] == torch.__version__ and info["device_error"] is None
    pair = ("no_vec", "default")
    configs = {c.name: c for c in cfg.PROFILES["cpu"]}
    raw = tmp_path / "raw"
    raw.mkdir()
    key = "mm/8x8x8/float32"
    out = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
    for name in pair:
        torch.save({key: out}, raw / f"r00-stock-{name}.outputs.pt")
    result = supervise.run_consistency({"stock": {"interpreter": str(python)}}, "cpu", configs, raw)
    assert result["pair"] == list(pair)
    assert result["builds"]["stock"]["cells"][key]["rel_diff"] == 0.0
    assert result["builds"]["stock"]["cells"][key]["passed"] is True


def test_a_program_that_is_not_python_is_one_line(tmp_path):
    """`doctor --build python:/bin/true`: a JSONDecodeError traceback; now one line, cause and remedy."""
    with pytest.raises(HarnessError) as info:
        supervise.probe_build("stock", Path("/bin/true"), "cpu")
    assert info.value.cause == (
        "build stock (/bin/true) did not answer the probe (exit status 0, no answer written): "
        "it is not a Python interpreter that runs the harness"
    )
    ran = run_harness("doctor", "--build", "python:/bin/true", "--out", str(tmp_path / "doctor"))
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    cause = info.value.cause.replace("build stock", "the build")  # doctor's one build: not "build build"
    remedy = "pass python:/path/to/python of an environment that has torch (python -c 'import torch')"
    assert errors == [f"error: {cause} -- {remedy}"]


# ---------------------------------------------------------- 3: an interpreter that does not start
FATAL = "the build's interpreter did not start under this environment: Fatal Python error: init_fs_encoding"


def test_a_worker_whose_interpreter_does_not_start_says_so(tmp_path):
    """`--env PYTHONHOME=/nonexistent` gave every cell "worker exited with status 1: <no Python frame>"."""
    spec = {"device": "cpu", "cells": ["mm/16x16x16/float32", "mm/32x32x32/float32"], "check": False, "timing": {}}
    record = supervise.run_worker(
        Path(sys.executable), spec, cfg.EnvConfig("default"), tmp_path, "w", 60.0, extra={"PYTHONHOME": "/nonexistent"}
    )
    assert record["reason"].startswith(FATAL), record["reason"]
    assert {c["reason"] for c in record["cells"].values()} == {record["reason"]}


def test_compare_under_an_env_that_stops_the_interpreter_is_refused_before_any_worker(tmp_path, this_python):
    out = tmp_path / "out"
    ran = run_harness(
        "compare",
        *("--stock", this_python, "--patched", this_python, "--device", "cpu", "--configs", "default"),
        *("--cells", "mm/16x16x16/float32", "--rounds", "1", "--env", "PYTHONHOME=/nonexistent", "--out", str(out)),
    )
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"build stock's interpreter {sys.executable} did not start" in errors[0], errors
    assert "Fatal Python error: init_fs_encoding" in errors[0] and "(--env PYTHONHOME=/nonexistent)" in errors[0]
    assert not list(out.glob("raw/*.jsonl"))  # no worker ran


def test_bench_under_an_env_that_stops_the_interpreter_names_the_build_once(tmp_path, this_python):
    """bench's one build is named ``build``: its line said "build build's interpreter"."""
    ran = run_harness(
        "bench",
        *("--build", this_python, "--device", "cpu", "--configs", "default", "--cells", "mm/16x16x16/float32"),
        *("--rounds", "1", "--env", "PYTHONHOME=/nonexistent", "--out", str(tmp_path / "out")),
    )
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert ran.returncode == 2 and len(errors) == 1, ran.stderr
    assert f"error: the build's interpreter {sys.executable} did not start" in errors[0], errors
    assert "build build" not in ran.stderr
    assert [supervise.who_of(n) for n in ("stock", "patched", "build", "")] == [
        "build stock",
        "build patched",
        "the build",
        "the build",
    ]


# -------------------------------------------------------------- 5: two runs, one environment
def test_two_runs_creating_one_environment_share_it(tmp_path, monkeypatch, capsys):
    """The second of two `compare` runs with the same requirement stopped at once ("is in use by pid ...");
    it waits for the first one's environment (saying so) and shares it."""
    monkeypatch.setattr(venvs, "WAIT_POLL_S", 0.05, raising=False)
    slow_pip = [sys.executable, "-c", "import time; time.sleep(1.5)"]  # "installs" nothing, slowly
    monkeypatch.setattr(venvs, "pip_command", lambda python: slow_pip)
    build, envs = venvs.parse_input("torch==2.13.0", "stock"), tmp_path / "envs"
    got: dict[str, object] = {}

    def compare(name: str) -> None:
        try:
            got[name] = venvs.ensure_interpreter(build, envs_dir=envs)
        except HarnessError as exc:
            got[name] = exc.line()

    first = threading.Thread(target=compare, args=("first",))
    first.start()
    time.sleep(0.5)  # the first one holds the environment's lock, installing
    compare("second")
    first.join()
    python = got["first"][0]
    assert got == {"first": (python, False), "second": (python, True)}, got
    assert f"waiting for environment {python.parent.parent.name}: " in capsys.readouterr().err


def test_two_builds_creating_one_build_venv_share_it(tmp_path, monkeypatch, capsys):
    """A second ``build`` needing the build venv another one is creating (stock and patched built at once,
    or two pytest-xdist workers) stopped at once ("is in use by pid ..."); it waits and shares it."""
    monkeypatch.setattr(venvs, "WAIT_POLL_S", 0.05)
    venv = tmp_path / "build-venvs" / "py3-shared"
    monkeypatch.setattr(wheel_mod, "build_venv_path", lambda requirements: venv)
    ran: list[list[str]] = []

    def slow_step(cmd, log, **kwargs) -> int:  # makes an empty folder for the venv, slowly
        ran.append(list(cmd))
        time.sleep(1.5)
        venv.mkdir(exist_ok=True)
        return 0

    monkeypatch.setattr(wheel_mod, "_run_logged", slow_step)
    got: dict[str, object] = {}

    def build(name: str) -> None:
        try:
            got[name] = wheel_mod.ensure_build_venv(["numpy", "cmake"], tmp_path / f"{name}.log")
        except HarnessError as exc:
            got[name] = exc.line()

    first = threading.Thread(target=build, args=("first",))
    first.start()
    time.sleep(0.5)  # the first one holds the build venv's lock, creating it
    build("second")
    first.join()
    assert got == {"first": venv, "second": venv}, got
    assert [cmd[1:3] for cmd in ran] == [["-m", "venv"], ["-m", "pip"]]  # created once, by the first
    assert f"waiting for build venv {venv.name}: " in capsys.readouterr().err


def test_a_build_venv_whose_creator_failed_is_created_by_the_one_that_waited(tmp_path, monkeypatch, capsys):
    """The creator's ``python -m venv`` fails (its lock is released, no stamp): the build that waited for it
    creates the build venv itself, under its own lock, and the creator's failure stays the creator's."""
    monkeypatch.setattr(venvs, "WAIT_POLL_S", 0.05)
    venv = tmp_path / "build-venvs" / "py3-shared"
    monkeypatch.setattr(wheel_mod, "build_venv_path", lambda requirements: venv)
    ran: list[tuple[str, list[str]]] = []

    def step(cmd, log, **kwargs) -> int:
        who = threading.current_thread().name
        ran.append((who, list(cmd[1:3])))
        time.sleep(1.0)
        if who == "first":
            return 1  # the creator's venv step fails
        venv.mkdir(exist_ok=True)
        return 0

    monkeypatch.setattr(wheel_mod, "_run_logged", step)
    got: dict[str, object] = {}

    def build() -> None:
        name = threading.current_thread().name
        try:
            got[name] = wheel_mod.ensure_build_venv(["numpy"], tmp_path / f"{name}.log")
        except HarnessError as exc:
            got[name] = exc.cause

    first = threading.Thread(target=build, name="first")
    first.start()
    time.sleep(0.4)
    second = threading.Thread(target=build, name="second")
    second.start()
    first.join()
    second.join()
    assert got == {"first": "could not create the build environment: no output", "second": venv}, got
    assert ran == [("first", ["-m", "venv"]), ("second", ["-m", "venv"]), ("second", ["-m", "pip"])]
    assert (venv / ".harness-complete").read_text() == "numpy\n"
    assert f"waiting for build venv {venv.name}: " in capsys.readouterr().err


def test_waiting_for_an_environment_has_a_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(venvs, "WAIT_POLL_S", 0.05)
    monkeypatch.setattr(venvs, "ENV_WAIT_S", 0.3)
    monkeypatch.setattr(venvs, "pip_command", lambda python: [sys.executable, "-c", "pass"])
    build, envs = venvs.parse_input("torch==2.13.0", "stock"), tmp_path / "envs"
    root = envs / f"{slug(build.value)[:60]}-{venvs.env_key(build)[:8]}"
    lock = envs / ".locks" / root.name / ".lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "what": "creating it"}))
    with pytest.raises(HarnessError) as info:
        venvs.ensure_interpreter(build, envs_dir=envs)
    assert info.value.cause.startswith(f"waited 0.3 s for another process creating environment {root}: ")
    assert f"is in use by pid {os.getppid()}" in info.value.cause


def test_waiting_for_a_build_venv_has_a_deadline_and_is_a_build_error(tmp_path, monkeypatch):
    from harness.errors import BuildError

    monkeypatch.setattr(venvs, "WAIT_POLL_S", 0.05)
    monkeypatch.setattr(wheel_mod, "BUILD_VENV_WAIT_S", 0.3)
    venv = tmp_path / "build-venvs" / "py3-held"
    monkeypatch.setattr(wheel_mod, "build_venv_path", lambda requirements: venv)
    monkeypatch.setattr(wheel_mod, "_run_logged", lambda *a, **k: pytest.fail("created while another held it"))
    lock = venv.parent / f".{venv.name}" / ".lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "what": "creating it"}))
    with pytest.raises(BuildError) as info:
        wheel_mod.ensure_build_venv(["numpy"], tmp_path / "build.log")
    assert info.value.cause.startswith(f"waited 0.3 s for another process creating build venv {venv}: ")
    assert f"is in use by pid {os.getppid()}" in info.value.cause


def test_a_git_command_past_its_deadline_is_stopped_and_named(tmp_path, monkeypatch):
    """git commands (worktrees, apply, submodules) had no deadline: one that hangs hung the harness."""
    from harness import upstream

    monkeypatch.setattr(upstream, "GIT_S", 0.5, raising=False)
    started = time.monotonic()
    with pytest.raises(HarnessError) as info:
        upstream.git_run(tmp_path, "-c", "alias.hang=!sleep 6", "hang")
    assert time.monotonic() - started < 5
    assert info.value.cause.startswith(f"`git -c alias.hang=!sleep 6 hang` failed in {tmp_path}: Timeout: the command")
    assert info.value.cause.endswith("did not complete in 0.5 secs.")


def test_a_build_step_past_its_deadline_is_stopped_with_what_it_started(tmp_path):
    """The base's build command and a build venv's pip install ran without a deadline."""
    log_path = tmp_path / "build.log"
    step = ["/bin/sh", "-c", f"sleep 30 & echo $! > {tmp_path / 'pid'}; wait"]
    started = time.monotonic()
    with open(log_path, "a") as log, pytest.raises(HarnessError) as info:
        wheel_mod._run_logged(step, log, deadline=0.5)
    assert time.monotonic() - started < 5
    command = f"/bin/sh -c 'sleep 30 & echo $! > {tmp_path / 'pid'}; wait'"
    assert info.value.cause == f"`{command}` took longer than 0.5 s (stopped); its log: {log_path}"
    time.sleep(0.2)
    assert _gone(int((tmp_path / "pid").read_text()))  # the grandchild too


# --------------------------------------------- doctor's processes and the consistency check
def test_an_assumption_process_that_never_answers_is_reported_within_its_timeout_naming_the_step(tmp_path, monkeypatch):
    """An interpreter that never starts Python (it sleeps forever) and one whose `import torch` never returns:
    each is stopped at its step's deadline, and the doctor row says which step."""
    from harness import assumptions as asm
    from harness import children

    monkeypatch.setattr(children, "START_S", 1.0)
    monkeypatch.setattr(asm, "STEP_S", {**asm.STEP_S, "importing torch": 1.0})
    spec = asm.spec("cpu", ["sync"], None)
    silent = tmp_path / "silent-python"
    silent.write_text("#!/bin/sh\nexec sleep 1000\n")
    silent.chmod(0o755)
    hung = wrapper(tmp_path, "python", pythonpath=fake_torch(tmp_path, "time.sleep(1000)"))
    config = cfg.PROFILES["cpu"][0]
    for python, step in ((silent, "starting the interpreter"), (hung, "importing torch")):
        started = time.monotonic()
        answer = asm.run_child(python, config, spec, tmp_path, "assumptions-default")
        assert time.monotonic() - started < 6
        assert answer == {
            "error": f"doctor assumptions under default ({python}): {step} took longer than 1 s (stopped)"
        }
    m = asm.Measured("cpu", {"default": answer}, [], {"default": "vectorised ATen"}, 180.0, {})
    status, detail = asm.row_text(asm.ASSUMPTIONS[0], asm.judge_sync(m))
    assert status == "failed" and detail.startswith("not measured (vectorised ATen: doctor assumptions under default")
    assert _gone(int((tmp_path / "pid").read_text()))


def test_a_consistency_check_whose_torch_import_hangs_is_stopped_naming_the_step(tmp_path, monkeypatch):
    monkeypatch.setattr(supervise, "CONSISTENCY_STEPS", {"importing torch": 1.0, "loading the saved outputs": 1.0})
    python = wrapper(tmp_path, "python", pythonpath=fake_torch(tmp_path, "time.sleep(1000)"))
    started = time.monotonic()
    result = supervise.consistency_of("stock", str(python), ["a.pt", "b.pt", "{}", "{}"])
    assert time.monotonic() - started < 6
    assert result == {
        "error": "consistency check did not finish: consistency check of build stock: importing torch took longer "
        "than 1 s (stopped)"
    }
