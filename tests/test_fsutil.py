import json
import os
import subprocess
import sys

import pytest

from harness.fsutil import LockHeld, atomic_write_bytes, atomic_write_json, atomic_write_text, exclusive_lock


def test_atomic_write_replaces_whole_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "sub" / "results.json"
    atomic_write_json(path, {"b": 1, "a": [1.5]})
    atomic_write_json(path, {"c": 2})
    assert json.loads(path.read_text()) == {"c": 2}
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "report.md"
    atomic_write_text(path, "old")
    with pytest.raises(TypeError):  # fails inside the write, after the temporary file exists
        atomic_write_bytes(path, None)  # type: ignore[arg-type]
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_lock_names_the_holder_and_stale_locks_are_taken_over(tmp_path):
    with exclusive_lock(tmp_path, "first command"):
        with pytest.raises(LockHeld) as info:
            with exclusive_lock(tmp_path, "second"):
                pass
        assert f"pid {os.getpid()}" in info.value.cause and "first command" in info.value.cause
    # a lock left by a process that no longer exists
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, timeout=60
    )
    import socket

    (tmp_path / ".lock").write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname(), "what": "x"}))
    with exclusive_lock(tmp_path, "after a crash"):
        assert json.loads((tmp_path / ".lock").read_text())["what"] == "after a crash"
    assert not (tmp_path / ".lock").exists()


def test_a_lock_is_never_seen_empty_while_it_is_written(tmp_path, monkeypatch):
    """A waiter that read the lock between its creation and its write found no owner in it and was refused
    with "in use by pid ? on ? (unknown command)" (a fresh-clone CI run, 2026-12-06): the lock now appears
    complete or not at all. Planted: the exclusive create then the write (as before), read mid-write: {}."""
    from harness import fsutil

    seen = []
    real_dump = json.dump

    def dump(obj, fh, *a, **k):
        seen.append(fsutil._holder(tmp_path / ".lock"))  # what a waiter reads at that moment
        return real_dump(obj, fh, *a, **k)

    monkeypatch.setattr(fsutil.json, "dump", dump)
    with exclusive_lock(tmp_path, "writer"):
        monkeypatch.setattr(fsutil.json, "dump", real_dump)
        assert json.loads((tmp_path / ".lock").read_text())["what"] == "writer"
        assert sorted(p.name for p in tmp_path.iterdir()) == [".lock"]  # the temporary file is gone
    assert seen == [None]  # not there yet, never empty
    assert list(tmp_path.iterdir()) == []


def test_two_waiters_taking_over_one_stale_lock_never_both_hold_it(tmp_path, monkeypatch):
    """Two processes that both find a dead owner's lock: each read the dead pid, then each deleted "the" lock,
    the second deleting the first one's new live lock, and both held it (pytest-xdist workers waiting for one
    build venv). The takeover is one at a time now: the second finds the first one alive and waits."""
    import socket
    import threading
    import time

    from harness import fsutil

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, timeout=60
    )
    dead_pid = int(dead.stdout)
    (tmp_path / ".lock").write_text(json.dumps({"pid": dead_pid, "host": socket.gethostname(), "what": "crashed"}))
    both_read = threading.Barrier(2, timeout=1.0)  # without the guard both waiters reach it: the race, for sure
    real = fsutil._pid_alive

    def alive(pid: int) -> bool:
        if pid == dead_pid:
            try:
                both_read.wait()
            except threading.BrokenBarrierError:
                pass  # the other waiter is held back by the guard
        return real(pid)

    monkeypatch.setattr(fsutil, "_pid_alive", alive)
    held: list[tuple[float, float]] = []
    refused: list[str] = []

    def waiter() -> None:
        try:
            with exclusive_lock(tmp_path, "waiter"):
                start = time.monotonic()
                time.sleep(0.3)
                held.append((start, time.monotonic()))
        except LockHeld as exc:
            refused.append(exc.cause)

    threads = [threading.Thread(target=waiter) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(held) == 1 and len(refused) == 1, (held, refused)
    assert f"is in use by pid {os.getpid()} " in refused[0]  # the first waiter, alive
    assert not (tmp_path / ".lock").exists() and sorted(p.name for p in tmp_path.iterdir()) == []
