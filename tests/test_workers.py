"""Runner: workers in their own process group that die with the driver, the cell a killed worker was
in, --retry-failed, --fresh with raw/ as a link and per-environment locks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness import configs as cfg
from harness import rundir, supervise
from harness.commands import run as run_command
from harness.errors import ResultsError
from harness.fsutil import exclusive_lock
from harness.paths import slug
from harness.venvs import MARKER, BuildInput, ensure_interpreter, env_key

CELLS = ["mm/8x8x8/float32", "mm/16x16x16/float32", "mm/32x32x32/float32"]


def _fake_python(tmp_path: Path, body: str) -> Path:
    """An 'interpreter' for run_worker: a shell script given ``-m harness.bench.worker SPEC OUT``."""
    path = tmp_path / "python"
    path.write_text('#!/bin/sh\nspec="$3"; out="$4"\n' + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z" if Path(f"/proc/{pid}").exists() else True


def test_signal_kill_names_the_signal_and_the_cell_not_a_warning(tmp_path):
    """item 10: the reason was the last stderr line (a NumPy warning), not the signal and the cell."""
    raw = tmp_path / "raw"
    raw.mkdir()
    python = _fake_python(
        tmp_path,
        f"""
        echo '{{"type": "start", "pid": 1, "env": {{}}}}' >> "$out"
        echo '{{"type": "cell", "key": "{CELLS[0]}", "status": "ok"}}' >> "$out"
        echo "UserWarning: Failed to initialize NumPy: _ARRAY_API not found" >&2
        kill -9 $$
    """,
    )
    record = supervise.run_worker(python, {"cells": CELLS}, cfg.EnvConfig("default"), raw, "r00-stock-default", 30)
    assert record["status"] == "failed" and record["returncode"] == -signal.SIGKILL
    assert record["reason"] == f"worker killed by SIGKILL while measuring {CELLS[1]}"
    assert record["cells"][CELLS[0]] == {"status": "ok"}
    assert record["cells"][CELLS[1]]["reason"] == record["reason"]
    assert record["cells"][CELLS[2]]["reason"] == f"not measured: worker killed by SIGKILL while measuring {CELLS[1]}"
    assert "NumPy" not in json.dumps({k: v for k, v in record.items() if k != "stderr"})  # kept as context only
    assert record["stderr"] == ["UserWarning: Failed to initialize NumPy: _ARRAY_API not found"]


def test_retry_failed_runs_failed_processes_again_and_keeps_their_records(tmp_path):
    """item 10: killed cells stayed failed on every rerun; --fresh (drop everything) was the only retry."""
    parser = __import__("argparse").ArgumentParser()
    run_command.add_arguments_compare(parser)
    args = parser.parse_args(["--stock", "a", "--patched", "b", "--device", "cpu", "--out", "x", "--retry-failed"])
    assert args.retry_failed
    status = tmp_path / "r00-stock-default.status.json"
    failed = {
        "status": "failed",
        "reason": "worker killed by SIGKILL while measuring mm/8x8x8/float32",
        "cells": {"mm/8x8x8/float32": {"status": "failed", "reason": "killed"}},
    }
    status.write_text(json.dumps(failed))
    assert rundir.kept_record(status, retry_failed=False) == failed  # a plain rerun keeps it
    assert rundir.kept_record(status, retry_failed=True) is None  # runs again
    (kept,) = tmp_path.glob("r00-stock-default.status.json.retried-*")
    assert json.loads(kept.read_text()) == failed and not status.exists()
    ok = {
        "status": "ok",
        "reason": "",
        "cells": {"mm/8x8x8/float32": {"status": "ok", "measurement": {"median": 1e-5, "samples": [1e-5]}}},
    }
    status.write_text(json.dumps(ok))
    assert rundir.kept_record(status, retry_failed=True) == ok  # only failed ones are retried


_DRIVER = """
import sys
from pathlib import Path
from harness import configs as cfg, supervise
supervise.run_worker(Path(sys.argv[1]), {"cells": ["mm/8x8x8/float32"]}, cfg.EnvConfig("default"), Path(sys.argv[2]),
                  "r00-stock-default", 300)
"""


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's; macOS: reap_orphans")
def test_worker_has_its_own_process_group_and_dies_with_a_sigkilled_driver(tmp_path):
    """item 11: an orphaned worker of a SIGKILLed driver kept running and overlapped the next run."""
    raw = tmp_path / "raw"
    raw.mkdir()
    pidfile = tmp_path / "worker.pid"
    python = _fake_python(tmp_path, f"echo $$ > {pidfile}\nexec sleep 120\n")
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(python), str(raw)], cwd=Path(supervise.__file__).resolve().parent.parent
    )
    record = raw / "r00-stock-default.worker.json"  # written by the driver once the worker started
    deadline = time.monotonic() + 20
    while not (pidfile.is_file() and pidfile.read_text().strip() and record.is_file()) and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = int(pidfile.read_text())
    assert os.getpgid(worker) == worker != os.getpgid(driver.pid)  # its own process group
    assert json.loads(record.read_text()) == {"pid": worker}
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker)


def test_reap_orphans_kills_a_worker_left_by_a_killed_driver(tmp_path):
    """item 11, where the driver cannot make its workers die with it (macOS): the next run kills them."""
    raw = tmp_path / "raw"
    raw.mkdir()
    spec = raw / "r00-stock-default.spec.json"
    # its command line names the worker module and this raw/ folder, as a real worker's does
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "-m", "harness.bench.worker", str(spec)],
        start_new_session=True,
    )
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    (raw / "r00-stock-default.worker.json").write_text(json.dumps({"pid": orphan.pid}))
    (raw / "r01-stock-default.worker.json").write_text(json.dumps({"pid": bystander.pid}))  # pid reused
    try:
        assert supervise.reap_orphans(raw) == [orphan.pid]
        assert bystander.poll() is None  # not a worker of this run: left alone
    finally:
        bystander.kill()
    assert orphan.wait(timeout=5) == -signal.SIGKILL
    assert not (raw / "r00-stock-default.worker.json").exists()


def test_fresh_with_raw_as_a_symlink_is_refused_not_resumed(tmp_path, this_python):
    """item 11: --fresh with raw/ a symbolic link silently resumed instead."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (elsewhere / "r00-stock-default.status.json").write_text("{}")
    (out / "raw").symlink_to(elsewhere)
    parser = __import__("argparse").ArgumentParser()
    run_command.add_arguments_bench(parser)
    args = parser.parse_args(["--build", this_python, "--device", "cpu", "--out", str(out), "--fresh"])
    with pytest.raises(ResultsError) as info:
        run_command.run_bench(args)
    assert info.value.cause.startswith(f"{out / 'raw'} is a symbolic link (to {elsewhere})")
    assert (elsewhere / "r00-stock-default.status.json").read_text() == "{}"


def test_a_ready_environment_is_used_while_another_is_being_created(tmp_path):
    """item 11: the whole envs/ cache was locked by one compare; a second with ready environments was refused."""
    envs = tmp_path / "envs"
    build = BuildInput("requirement", "torch==2.13.0")
    root = envs / f"{slug(build.value)}-{env_key(build)[:8]}"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    (root / MARKER).write_text(json.dumps({"input": build.to_json()}))
    # another compare is creating a different environment (lock files as the old and the new code take them)
    (envs / ".lock").write_text(
        json.dumps(
            {"pid": os.getpid(), "host": __import__("socket").gethostname(), "what": "creating torch_2.14.1-xxxx"}
        )
    )
    with exclusive_lock(envs / ".locks" / "torch_2.14.1-xxxxxxxx", "creating torch_2.14.1"):
        python, reused = ensure_interpreter(build, envs_dir=envs)
    assert reused and python == (root / "bin" / "python").resolve()


def test_a_worker_that_exits_non_zero_after_its_cells_is_failed_in_words_not_its_last_stderr_line(tmp_path):
    """A build whose interpreter exits with status 3 after the worker finished (a sitecustomize calling
    ``os._exit(3)`` at exit) was recorded with the last stderr line, torch's NumPy warning, as its reason;
    the reason says what happened and the stderr lines are kept as context."""
    raw = tmp_path / "raw"
    raw.mkdir()
    cells = "".join(f'echo \'{{"type": "cell", "key": "{k}", "status": "ok"}}\' >> "$out"\n' for k in CELLS)
    python = _fake_python(
        tmp_path,
        'echo "torch/_subclasses/functional_tensor.py:279: UserWarning: Failed to initialize NumPy" >&2\n'
        'echo \'{"type": "start", "pid": 1, "env": {}}\' >> "$out"\n'
        + cells
        + 'echo \'{"type": "end"}\' >> "$out"\nexit 3\n',
    )
    record = supervise.run_worker(python, {"cells": CELLS}, cfg.EnvConfig("default"), raw, "r00-stock-default", 30)
    assert record["status"] == "failed" and record["returncode"] == 3
    assert record["reason"] == "worker exited with status 3 after its cells finished"
    assert record["stderr"] == ["torch/_subclasses/functional_tensor.py:279: UserWarning: Failed to initialize NumPy"]
    assert all(c == {"status": "ok"} for c in record["cells"].values())


def test_a_worker_error_record_is_the_reason_of_its_exit(tmp_path):
    """The worker's own words (its ``error`` record) name the failure, not a stderr line printed after it."""
    raw = tmp_path / "raw"
    raw.mkdir()
    python = _fake_python(
        tmp_path,
        """
        echo '{"type": "start", "pid": 1, "env": {}}' >> "$out"
        echo '{"type": "error", "reason": "OSError: [Errno 28] No space left on device"}' >> "$out"
        echo "Exception ignored in atexit callback" >&2
        exit 1
    """,
    )
    record = supervise.run_worker(python, {"cells": CELLS}, cfg.EnvConfig("default"), raw, "r00-stock-default", 30)
    assert record["status"] == "failed"
    assert record["reason"] == (
        f"worker exited with status 1: OSError: [Errno 28] No space left on device while measuring {CELLS[0]}"
    )


def test_a_worker_that_said_nothing_quotes_its_last_stderr_line_as_context_not_as_the_cause(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    python = _fake_python(
        tmp_path,
        f"""
        echo '{{"type": "start", "pid": 1, "env": {{}}}}' >> "$out"
        echo '{{"type": "cell", "key": "{CELLS[0]}", "status": "ok"}}' >> "$out"
        echo "UserWarning: Failed to initialize NumPy" >&2
        exit 2
    """,
    )
    record = supervise.run_worker(python, {"cells": CELLS}, cfg.EnvConfig("default"), raw, "r00-stock-default", 30)
    context = "(its last stderr line: UserWarning: Failed to initialize NumPy)"
    why = f"worker exited with status 2 while measuring {CELLS[1]} {context}"
    assert record["reason"] == why and record["cells"][CELLS[1]]["reason"] == why


def test_the_worker_writes_its_own_words_before_it_fails(tmp_path):
    """harness.bench.worker records an exception outside a cell as an ``error`` record, then fails."""
    from harness.bench import worker

    spec, out = tmp_path / "spec.json", tmp_path / "out.jsonl"
    spec.write_text(json.dumps({"device": "nope", "cells": CELLS}))
    with pytest.raises(ValueError, match="unknown device 'nope'"):
        worker.main([str(spec), str(out)])
    error = [json.loads(line) for line in out.read_text().splitlines() if '"error"' in line]
    assert error == [{"type": "error", "reason": "ValueError: unknown device 'nope'; choose one of cpu, cuda, mps"}]


def test_an_exception_in_one_line_also_when_its_message_is_empty():
    """harness.bench.words: the one formatter of an exception for records and messages (it replaced seven
    copies; two of them indexed ``str(exc).splitlines()[0]`` and raised IndexError on an empty message,
    e.g. the build probe's device health check of a device whose matmul raised ``RuntimeError()``)."""
    from harness.bench import provenance, words

    assert words(RuntimeError()) == "RuntimeError"
    assert words(ValueError("first\nsecond")) == "ValueError: first"
    assert words(OSError("x" * 500), 200) == "OSError: " + "x" * 200

    def empty(*args, **kwargs):
        raise RuntimeError()  # the device's first allocation fails with no message

    fake = type("FakeTorch", (), {"empty": staticmethod(empty), "float32": None})
    assert provenance.health(fake, "mps") == "RuntimeError"  # was IndexError out of the except clause
