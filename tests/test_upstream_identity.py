"""Upstream: one mirror per upstream and worktrees that are whole or absent."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import git

from harness import cli
from harness import upstream as up
from harness.errors import UpstreamError
from harness.upstream import checkout, worktrees


def _repo(path: Path, text: str) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "who.txt").write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", text)
    git(path, "tag", "v1")
    return path


def test_two_upstreams_whose_sanitised_names_collide_get_two_mirrors(tmp_path, isolated_cache):
    """item 2: /x/a_b/up and /x/a/b_up used to share one mirror; the second checkout got the first's tag."""
    first = _repo(tmp_path / "x" / "a_b" / "up", "first repository\n")
    second = _repo(tmp_path / "x" / "a" / "b_up", "second repository\n")
    one = checkout(str(first), "v1", tmp_path / "w1")
    two = checkout(str(second), "v1", tmp_path / "w2")
    assert two.upstream.created and one.upstream.store != two.upstream.store
    assert (two.stock / "who.txt").read_text() == "second repository\n"
    assert (one.stock / "who.txt").read_text() == "first repository\n"
    assert up.store_name("https://h/a_b/up.git") != up.store_name("https://h/a/b_up.git")


def test_ext_transport_is_one_line_and_leaves_no_folder(tmp_path, isolated_cache, capsys):
    """item 7: `ext::sh -c ...` gave an UnsafeProtocolError traceback and left a temporary mirror."""
    pwned = tmp_path / "pwned"
    rc = cli.main(
        ["checkout", "--upstream", f"ext::sh -c touch% {pwned}", "--base", "v1", "--workdir", str(tmp_path / "work")]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: upstream 'ext::sh -c") and "ext:: transport" in err, err
    assert "Traceback" not in err and not pwned.exists()
    mirrors = isolated_cache / "mirrors"
    assert not mirrors.exists() or list(mirrors.iterdir()) == []


def test_half_filled_worktree_is_not_reported_as_success(tiny_upstream, isolated_cache, tmp_path):
    """item 6: a worktree whose checkout was SIGKILLed (files half written, no index) was reused as is."""
    work = tmp_path / "work"
    co = checkout(str(tiny_upstream), "v1", work)
    stock, _ = worktrees(work, "v1")
    # what a SIGKILL during `git worktree add` leaves: registered, some files, no index
    shutil.rmtree(stock)
    git(co.upstream.store, "worktree", "prune")
    git(co.upstream.store, "worktree", "add", "--no-checkout", "--detach", str(stock), "v1")
    (stock / "a.txt").write_text("line 1\n")
    with pytest.raises(UpstreamError) as info:
        checkout(str(tiny_upstream), "v1", work)
    assert "is incomplete (no index" in info.value.cause and str(stock) in info.value.cause


def test_worktree_creation_is_atomic(tiny_upstream, isolated_cache, tmp_path, monkeypatch):
    """item 6: creation happens under a temporary name; a kill before the rename leaves no final folder,
    and the next run removes the leftover and creates a clean worktree."""
    work = tmp_path / "work"
    real = up.git_run

    def killed(cwd, *args, **kwargs):
        if args[:2] == ("worktree", "move"):
            raise KeyboardInterrupt  # the process dies after the checkout, before the rename
        return real(cwd, *args, **kwargs)

    monkeypatch.setattr(up, "git_run", killed)
    with pytest.raises(KeyboardInterrupt):
        checkout(str(tiny_upstream), "v1", work)
    stock, patched = worktrees(work, "v1")
    assert not stock.exists() and [p.name for p in stock.parent.iterdir()][0].startswith(".stock.partial-")
    monkeypatch.setattr(up, "git_run", real)
    co = checkout(str(tiny_upstream), "v1", work)
    assert sorted(p.name for p in stock.parent.iterdir()) == ["patched", "stock"]
    assert git(co.stock, "status", "--porcelain") == "" and (co.stock / "a.txt").is_file()
    assert "partial" not in git(co.upstream.store, "worktree", "list")


def test_rerun_checks_git_status_before_success(tiny_upstream, isolated_cache, tmp_path):
    """item 6: a rerun on a stock worktree with changed tracked files says so instead of success."""
    work = tmp_path / "work"
    co = checkout(str(tiny_upstream), "v1", work)
    (co.stock / "a.txt").write_text("half written\n")
    with pytest.raises(UpstreamError) as info:
        checkout(str(tiny_upstream), "v1", work)
    assert info.value.cause == f"stock worktree {co.stock} is not clean after checkout: a.txt"
    assert (co.stock / "a.txt").read_text() == "half written\n"  # nothing the user has is discarded
