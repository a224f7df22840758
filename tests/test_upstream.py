"""harness.upstream: mirrors, archive import, worktrees, submodules -- on a tiny repo and on Debian's PyTorch."""

from __future__ import annotations

import os
import re
import tarfile
import time
import zipfile
from pathlib import Path

import git as gitpython
import pytest
from conftest import git

from harness import cli
from harness.errors import UpstreamError
from harness.upstream import checkout, import_archive, missing_submodules, patched_branch, worktrees


def test_checkout_creates_worktrees_and_warm_cache_does_no_clone(tiny_upstream, isolated_cache, tmp_path, monkeypatch):
    work = tmp_path / "work"
    first = checkout(str(tiny_upstream), "v1", work, "demo")
    assert first.upstream.created and first.upstream.kind == "git"
    assert first.upstream.store.parent == isolated_cache / "mirrors"
    stock, patched = worktrees(work, "v1")
    assert (first.stock, first.patched) == (stock, patched)
    v1 = git(tiny_upstream, "rev-parse", "v1^{commit}").strip()
    assert git(stock, "rev-parse", "HEAD").strip() == v1 == first.commit
    assert git(stock, "symbolic-ref", "-q", "HEAD", check=False) == ""  # detached
    branch = git(patched, "symbolic-ref", "--short", "HEAD").strip()
    assert branch == first.branch == patched_branch("demo", "v1", patched)
    assert re.fullmatch(r"patched/demo/v1-[0-9a-f]{8}", branch)  # named after its worktree's folder
    # both worktrees share the mirror's object store
    for tree in (stock, patched):
        common = git(tree, "rev-parse", "--path-format=absolute", "--git-common-dir").strip()
        assert Path(common) == first.upstream.store
    # warm cache: no clone at all (a clone would raise), and a fresh workdir still works
    inode = first.upstream.store.stat().st_ino

    def no_clone(*args, **kwargs):
        raise AssertionError("clone_from called with a warm cache")

    monkeypatch.setattr(gitpython.Repo, "clone_from", no_clone)
    second = checkout(str(tiny_upstream), "v1", tmp_path / "work2", None)
    assert not second.upstream.created
    assert second.upstream.store.stat().st_ino == inode
    assert (second.stock / "a.txt").read_text() == (stock / "a.txt").read_text()
    # a second workdir on the same cache gets a branch of its own for the same series and base
    third = checkout(str(tiny_upstream), "v1", tmp_path / "work3", "demo")
    assert third.branch == patched_branch("demo", "v1", third.patched) != branch
    assert git(third.patched, "symbolic-ref", "--short", "HEAD").strip() == third.branch
    # a branch is checked out in one worktree at a time: taken by hand elsewhere, it is one line
    git(third.patched, "checkout", "-q", "--detach")
    git(patched, "checkout", "-q", third.branch)
    git(first.upstream.store, "worktree", "remove", "--force", str(third.patched))
    with pytest.raises(UpstreamError, match=f"branch {third.branch} is already checked out in {patched}"):
        checkout(str(tiny_upstream), "v1", tmp_path / "work3", "demo")


def test_a_worktree_on_the_unnamespaced_branch_keeps_its_commits(tiny_upstream, tmp_path, capsys):
    """A patched worktree made before branches were named after their worktree is on
    ``patched/<series>/<base>``: its branch is renamed, never replaced by a fresh one at the base."""
    co = checkout(str(tiny_upstream), "v1", tmp_path / "work", None)
    git(co.patched, "checkout", "-q", "-b", "patched/demo/v1")
    (co.patched / "a.txt").write_text("my commit\n")
    git(co.patched, "commit", "-q", "-am", "work in progress")
    head = git(co.patched, "rev-parse", "HEAD").strip()
    again = checkout(str(tiny_upstream), "v1", tmp_path / "work", "demo")
    assert again.branch == patched_branch("demo", "v1", co.patched)
    assert git(co.patched, "symbolic-ref", "--short", "HEAD").strip() == again.branch
    assert git(co.patched, "rev-parse", "HEAD").strip() == head
    assert git(co.patched, "branch", "--list", "patched/demo/v1").strip() == ""  # renamed, not copied
    assert f"branch patched/demo/v1 of {co.patched} renamed to {again.branch}" in capsys.readouterr().err


def test_branch_base_fetches_incrementally(tiny_upstream, isolated_cache, tmp_path):
    first = checkout(str(tiny_upstream), "main", tmp_path / "work", None)
    (tiny_upstream / "new.txt").write_text("new upstream file\n")
    git(tiny_upstream, "add", "new.txt")
    git(tiny_upstream, "commit", "-q", "-m", "upstream moves on")
    moved = git(tiny_upstream, "rev-parse", "HEAD").strip()
    second = checkout(str(tiny_upstream), "main", tmp_path / "work2", None)
    assert not second.upstream.created
    assert second.commit == moved != first.commit


def test_warm_cache_works_offline_when_fetch_fails(tiny_upstream, isolated_cache, tmp_path, capsys):
    first = checkout(str(tiny_upstream), "main", tmp_path / "work", None)
    # the upstream becomes unreachable: a branch base is fetched, the fetch fails, the cached commit is used
    git(first.upstream.store, "remote", "set-url", "origin", str(tmp_path / "nowhere"))
    again = checkout(str(tiny_upstream), "main", tmp_path / "work", None)
    assert again.commit == first.commit and not again.upstream.created
    assert "warning: fetch from" in capsys.readouterr().err
    # a ref the cache does not have is an error naming the upstream, in one line
    with pytest.raises(UpstreamError, match="cannot fetch upstream"):
        checkout(str(tiny_upstream), "not-cached", tmp_path / "work2", None)


def test_missing_base_ref_is_one_line(tiny_upstream, isolated_cache, tmp_path, capsys):
    rc = cli.main(["checkout", "--upstream", str(tiny_upstream), "--base", "nope", "--workdir", str(tmp_path / "w")])
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert rc == 2
    assert len(errors) == 1
    err = errors[0]
    assert "'nope'" in err and str(tiny_upstream) in err and "--base" in err and "v1" in err


def test_unreachable_url_is_one_line(isolated_cache, tmp_path, capsys):
    url = "http://127.0.0.1:9/pytorch.git"
    rc = cli.main(["checkout", "--upstream", url, "--base", "v2.6.0", "--workdir", str(tmp_path / "w")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len([ln for ln in err if ln.startswith("error:")]) == 1
    line = err[-1]
    assert url in line and "--upstream PATH" in line
    assert "fatal: unable to access" in line  # git's own reason, not a bare exit status
    assert not list((isolated_cache / "mirrors").glob("*.git"))  # no half clone left behind


def _tree(root: Path) -> Path:
    top = root / "proj-1.2.0"
    (top / "bin").mkdir(parents=True)
    (top / "version.txt").write_text("1.2.0a0\n")
    (top / ".gitignore").write_text("*.log\n")
    (top / "kept.log").write_text("ignored by .gitignore, still part of the source\n")
    (top / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (top / "bin" / "run.sh").chmod(0o755)
    return top


def test_archive_import_is_deterministic_and_tagged(tmp_path, monkeypatch):
    top = _tree(tmp_path / "src")
    tar_path = tmp_path / "proj-1.2.0.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tf:
        tf.add(top, arcname=top.name)
    zip_path = tmp_path / "proj-1.2.0.zip"
    with zipfile.ZipFile(zip_path, "w") as zf:
        for path in sorted(top.rglob("*")):
            zf.write(path, f"{top.name}/{path.relative_to(top)}")
    commits, trees = [], []
    for cache in ("c1", "c2"):
        monkeypatch.setenv("TORCH_PATCH_HARNESS_CACHE", str(tmp_path / cache))
        up = import_archive(tar_path)
        assert up.created and up.tag == "v1.2.0"
        commits.append(git(up.store, "rev-parse", "v1.2.0").strip())
        trees.append(git(up.store, "rev-parse", "v1.2.0^{tree}").strip())
        again = import_archive(tar_path)
        assert not again.created and again.store == up.store
    assert commits[0] == commits[1]  # same archive, same SHA, in any cache
    # the blobs went into a pack as they were added (no loose blob for a clone to hardlink and gc --auto to
    # repack); only the trees and the commit are loose, and the store keeps git's own bigFileThreshold
    loose = [d.name + f.name for d in (up.store / "objects").glob("[0-9a-f][0-9a-f]") for f in d.iterdir()]
    blobs = [line.split()[2] for line in git(up.store, "ls-tree", "-r", "v1.2.0").splitlines()]
    assert blobs and loose and {git(up.store, "cat-file", "-t", sha).strip() for sha in loose} <= {"tree", "commit"}
    assert git(up.store, "cat-file", "--batch-check", "--batch-all-objects").count(" blob ") == len(set(blobs))
    assert "bigfilethreshold" not in (up.store / "config").read_text().lower()
    listing = git(up.store, "ls-tree", "-r", "v1.2.0")
    assert "100755 blob" in [ln for ln in listing.splitlines() if "bin/run.sh" in ln][0]
    assert "kept.log" in listing
    zipped = import_archive(zip_path)
    assert git(zipped.store, "rev-parse", "v1.2.0^{tree}").strip() == trees[0]


def test_missing_submodules(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert missing_submodules(plain) == []
    declared = tmp_path / "declared"
    (declared / "third_party" / "present").mkdir(parents=True)
    (declared / "third_party" / "present" / "x").write_text("x")
    (declared / "third_party" / "empty").mkdir()
    (declared / ".gitmodules").write_text(
        '[submodule "a"]\n\tpath = third_party/present\n\turl = x\n'
        '[submodule "b"]\n\tpath = third_party/empty\n\turl = x\n'
        '[submodule "c"]\n\tpath = third_party/absent\n\turl = x\n'
    )
    assert missing_submodules(declared) == ["third_party/empty", "third_party/absent"]
    stripped = tmp_path / "stripped"
    (stripped / "third_party" / "gloo").mkdir(parents=True)
    (stripped / "third_party" / "gloo" / "CMakeLists.txt").write_text("")
    (stripped / "setup.py").write_text("")
    assert missing_submodules(stripped) == [
        "third_party/cpuinfo",
        "third_party/onnx",
        "third_party/fbgemm",
        "third_party/cutlass",
    ]


def test_submodules_are_initialised_recursively(tmp_path, isolated_cache, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q")
    (sub / "lib.c").write_text("int x;\n")
    git(sub, "add", "lib.c")
    git(sub, "commit", "-q", "-m", "lib")
    top = tmp_path / "top"
    top.mkdir()
    git(top, "init", "-q")
    (top / "setup.py").write_text("")
    git(top, "add", "setup.py")
    git(top, "submodule", "-q", "add", str(sub), "third_party/lib")
    git(top, "commit", "-q", "-m", "with a submodule")
    git(top, "tag", "v1")
    co = checkout(str(top), "v1", tmp_path / "work", None)
    for tree in (co.stock, co.patched):
        assert (tree / "third_party" / "lib" / "lib.c").read_text() == "int x;\n"
    assert co.missing_submodules == ()


# ------------------------------------------------------------------------------ Debian's PyTorch
@pytest.mark.slow
def test_debian_checkout_reports_no_submodules_and_warm_cache(debian_archive, tmp_path, capsys):
    """Acceptance: checkout of the Debian 2.6.0 orig archive creates both worktrees and reports
    that the source has no submodules; a rerun with the cache warm does no import."""
    args = ["checkout", "--upstream", str(debian_archive), "--base", "v2.6.0", "--workdir", str(tmp_path / "work")]
    started = time.monotonic()
    assert cli.main(args) == 0
    first_s = time.monotonic() - started
    err = capsys.readouterr().err
    stock, patched = worktrees(tmp_path / "work", "v2.6.0")
    mm = Path("aten/src/ATen/native/mps/operations/LinearAlgebra.mm")
    assert "PYTORCH_MPS_PREFER_METAL" in (stock / mm).read_text()
    assert (patched / mm).read_bytes() == (stock / mm).read_bytes()
    assert (stock / "version.txt").read_text().strip() == "2.6.0a0"
    assert "no submodules" in err and "third_party/gloo" in err
    assert missing_submodules(patched) == [
        "third_party/gloo",
        "third_party/cpuinfo",
        "third_party/onnx",
        "third_party/fbgemm",
        "third_party/cutlass",
    ]
    assert git(stock, "status", "--porcelain") == ""
    started = time.monotonic()
    assert cli.main(args[:-1] + [str(tmp_path / "work2")]) == 0
    warm_s = time.monotonic() - started
    err = capsys.readouterr().err
    assert "cache warm, no import" in err and "importing" not in err
    print(f"debian checkout: first {first_s:.1f} s (import if cold + 2 worktrees), warm cache {warm_s:.1f} s")
    assert os.path.samefile(
        git(tmp_path / "work2" / "v2.6.0" / "stock", "rev-parse", "--git-common-dir").strip(),
        git(stock, "rev-parse", "--git-common-dir").strip(),
    )


def test_submodules_are_fetched_once_per_cache_and_shared_by_every_worktree(
    tmp_path, isolated_cache, project, monkeypatch, capsys
):
    """``checkout`` made two worktrees with ``git submodule update --init --recursive``
    each, and ``rebase --onto`` two more: four fetches of every submodule. Each submodule repository (here
    one with a nested submodule of its own) is now cloned once into the cache; after that the sources are
    made unreachable, and a rebase onto a moved upstream and a checkout into a second workdir still get
    every submodule, from the mirrors. Under the old code the rebase stops: "submodule update ... failed"."""
    import small_upstream as su

    from harness import upstream

    repo = su.make_upstream(tmp_path / "up", submodule=True)
    su.make_series(repo, project / "patches")
    lib, nested = tmp_path / "up" / "tinylib", tmp_path / "up" / "tinylib-nested"
    clones, fetches = [], []
    clone_from, fetch = gitpython.Repo.clone_from, upstream._fetch

    def counting_clone(url, *args, **kwargs):
        clones.append(str(url))
        return clone_from(url, *args, **kwargs)

    def counting_fetch(store, url, **kwargs):
        fetches.append(url)
        return fetch(store, url, **kwargs)

    monkeypatch.setattr(gitpython.Repo, "clone_from", counting_clone)
    monkeypatch.setattr(upstream, "_fetch", counting_fetch)
    for key, value in {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow"}.items():
        monkeypatch.setenv(key, value)  # what the old code needed to clone file:// submodules at all
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    work = tmp_path / "work"
    co = checkout(str(repo), "v1.4.0", work, su.SERIES_NAME)
    for tree in (co.stock, co.patched):
        assert (tree / su.SUBMODULE / "tinylib.h").read_text() == "#define TINYLIB 1\n"
        assert (tree / su.SUBMODULE / su.NESTED / "nested.h").read_text() == "#define TINY_NESTED 1\n"
        # the submodule's own remote is still its upstream, not the cache: a later `git submodule update`
        # by hand goes where .gitmodules says
        assert git(tree / su.SUBMODULE, "config", "remote.origin.url").strip() == lib.as_uri()
    assert co.missing_submodules == ()
    # the submodules' sources go away; the upstream moves on (a commit on main the series does not touch)
    lib.rename(tmp_path / "up" / "tinylib-gone")
    nested.rename(tmp_path / "up" / "tinylib-nested-gone")
    (repo / "NEWS").write_text("upstream moves on\n")
    git(repo, "add", "NEWS")
    git(repo, "commit", "-q", "-m", "news")
    rc = cli.main(["rebase", "--series", su.SERIES_NAME, "--onto", "main", "--workdir", str(work)])
    assert rc == 0, capsys.readouterr().err[-3000:]
    moved_stock, moved_patched = worktrees(work, "main")
    for tree in (moved_stock, moved_patched):
        assert (tree / su.SUBMODULE / su.NESTED / "nested.h").is_file()
        assert (tree / "NEWS").is_file()
    assert (moved_patched / su.PATCHED_FILE).read_text().count(su.MARKER) >= 1  # the series was carried
    second = checkout(str(repo), "v1.4.0", tmp_path / "work2", None)
    assert (second.stock / su.SUBMODULE / su.NESTED / "nested.h").is_file()
    assert sorted(clones) == sorted([str(repo.resolve()), lib.as_uri(), nested.as_uri()])  # each one once
    assert set(fetches) == {str(repo.resolve())}  # only the superproject's moving branch was fetched
    assert "from 2 mirror(s) in the cache" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "parent", "expected"),
    [
        ("https://github.com/pytorch/cpuinfo.git", None, "https://github.com/pytorch/cpuinfo.git"),
        ("../cpuinfo.git", "https://github.com/pytorch/pytorch.git", "https://github.com/pytorch/cpuinfo.git"),
        ("./sub.git", "https://github.com/pytorch/pytorch.git/", "https://github.com/pytorch/pytorch.git/sub.git"),
        ("../../google/benchmark", "https://github.com/pytorch/pytorch", "https://github.com/google/benchmark"),
        ("../lib.git", "git@github.com:org/top.git", "git@github.com:org/lib.git"),
        ("../lib.git", None, None),
    ],
)
def test_relative_submodule_urls_resolve_as_git_resolves_them(url, parent, expected):
    from harness.upstream import absolute_url

    assert absolute_url(url, parent) == expected


def test_a_fetch_that_never_answers_is_stopped_at_its_deadline_and_named(tmp_path, monkeypatch):
    """A mirror's fetch (the upstream's or a submodule's) had no deadline: a remote that never answers
    hung checkout. It now stops after ``GIT_S`` seconds with one line that says so."""
    from harness import upstream

    store = tmp_path / "mirror.git"
    git(tmp_path, "init", "-q", "--bare", str(store))
    git(store, "remote", "add", "origin", "ssh://example.invalid/never.git")
    monkeypatch.setenv("GIT_SSH_COMMAND", "sh -c 'sleep 30' --")  # an ssh that never answers
    monkeypatch.setattr(upstream, "GIT_S", 1.0)
    started = time.monotonic()
    with pytest.raises(UpstreamError) as info:
        upstream._fetch(store, "ssh://example.invalid/never.git", required=True)
    assert time.monotonic() - started < 10
    assert (
        info.value.cause
        == "cannot fetch upstream ssh://example.invalid/never.git: `git fetch` took longer than 1 s (stopped)"
    )
