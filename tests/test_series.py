"""harness.series: manifest validation and check / apply / refresh / rebase, on a tiny repo and on Debian's PyTorch."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
from conftest import AUTHOR, export_series, git

from harness import cli
from harness.manifest import load_series, series_hash
from harness.upstream import checkout, patched_branch, worktrees


def _errors(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]


def _run(capsys, *args: str) -> tuple[int, str]:
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


# ------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda t: t.replace('title = "Demo series"\n', ""), "missing key 'title'"),
        (lambda t: re.sub(r"patches = \[.*\]\n", "", t), "[[base]] #1 (ref 'v1'): missing key 'patches'"),
        (lambda t: t + 'colour = "blue"\n', "unknown key 'colour'"),
        (
            lambda t: t.replace("0002-docs-document-the-change.patch", "0002-absent.patch"),
            "patch file absent: patches/demo/v1/0002-absent.patch",
        ),
        (lambda t: t.replace('name = "demo"', 'name = "other"'), "key 'name' is 'other'"),
        (lambda t: t.replace('ref = "v1"', 'ref = "v1"\ncommit = "abc"'), "key 'commit' is not a 40-hex SHA"),
        (lambda t: t.replace('env = ["DEMO_ENV"]', "env = [1]"), "key 'env' must be a list of non-empty strings"),
        (
            lambda t: t + '[evidence]\nmarkers = ["OTHER_ENV"]\n',
            "top-level key 'env' ['DEMO_ENV'] and [evidence] key 'markers' ['OTHER_ENV'] name different markers",
        ),
    ],
)
def test_invalid_manifest_is_one_line_naming_file_and_key(tiny_upstream, project, capsys, edit, expected):
    folder = export_series(tiny_upstream, project)
    manifest = folder / "series.toml"
    manifest.write_text(edit(manifest.read_text()))
    rc = cli.main(["check", "--series", "demo"])
    errors = _errors(capsys)
    assert rc == 2 and len(errors) == 1
    assert errors[0].startswith("error: patches/demo/series.toml: ")
    assert expected in errors[0]


def test_unknown_base_is_one_line(tiny_upstream, project, capsys):
    export_series(tiny_upstream, project)
    assert cli.main(["apply", "--series", "demo", "--base", "v9"]) == 2
    errors = _errors(capsys)
    assert len(errors) == 1
    assert "patches/demo/series.toml: unknown base 'v9'" in errors[0] and "(bases: v1)" in errors[0]


def test_series_hash_is_sha256_of_patch_bytes_in_order(tiny_upstream, project):
    folder = export_series(tiny_upstream, project)
    series = load_series("demo")
    entry = series.base(None)
    data = b"".join((folder / "v1" / name).read_bytes() for name in entry.patches)
    assert series_hash(series, entry) == hashlib.sha256(data).hexdigest()
    assert entry.patches == ("0001-a-patch-line-5.patch", "0002-docs-document-the-change.patch")
    assert series.evidence.markers == ("DEMO_ENV",) and series.upstream == str(tiny_upstream)


def test_markers_are_one_field_declared_as_evidence_markers_or_by_their_older_name_env(tiny_upstream, project):
    """``[evidence] markers`` and an older manifest's top-level ``env`` give the same ``evidence.markers``."""
    manifest = export_series(tiny_upstream, project) / "series.toml"
    old = load_series("demo")
    text = manifest.read_text().replace('env = ["DEMO_ENV"]\n', "")
    manifest.write_text(text + '[evidence]\nmarkers = ["DEMO_ENV"]\n')
    new = load_series("demo")
    manifest.write_text(manifest.read_text().replace("[[base]]", 'env = ["DEMO_ENV"]\n\n[[base]]', 1))
    both = load_series("demo")
    assert old.evidence.markers == new.evidence.markers == both.evidence.markers == ("DEMO_ENV",)
    assert old.evidence.series == new.evidence.series == "demo"


def test_full_contract_manifest_loads(project):
    """Every key of the shared series contract, as the real MPS series uses them."""
    folder = project / "patches" / "mps-gemm-prefer-fast-math"
    (folder / "v2.6.0-src").mkdir(parents=True)
    (folder / "v2.6.0-src" / "0001-mps-gemm.patch").write_text("From 0 Mon Sep 17 00:00:00 2001\n")
    sha = "a" * 40
    (folder / "series.toml").write_text(f"""\
name = "mps-gemm-prefer-fast-math"
title = "MPS: PYTORCH_MPS_GEMM_PREFER_FAST_MATH lets GEMM keep MPSGraph under PREFER_METAL"
upstream = "https://github.com/pytorch/pytorch.git"
related = ["https://github.com/pytorch/pytorch/pull/167424"]
env = ["PYTORCH_MPS_GEMM_PREFER_FAST_MATH"]

[[base]]
ref = "v2.6.0"
commit = "{sha}"
dir = "v2.6.0-src"
patches = ["0001-mps-gemm.patch"]
files = ["aten/src/ATen/native/mps/operations/LinearAlgebra.mm"]
notes = "free text"
[[base.read]]
path = "aten/src/ATen/native/mps/operations/LinearAlgebra.mm"
commit = "{sha}"

[evidence]
mps = ["vanilla", "fast_math", "prefer_metal", "fast_math+prefer_metal"]
""")
    series = load_series("mps-gemm-prefer-fast-math")
    entry = series.base("v2.6.0")
    assert entry.commit == sha and entry.dir == "v2.6.0-src" and entry.notes == "free text"
    assert entry.read == ({"path": "aten/src/ATen/native/mps/operations/LinearAlgebra.mm", "commit": sha},)
    assert series.related == ("https://github.com/pytorch/pytorch/pull/167424",)
    assert series.evidence.device["mps"]["configs"][-1] == "fast_math+prefer_metal"  # the short form: generic configs
    assert series.patch_paths(entry) == [folder.resolve() / "v2.6.0-src" / "0001-mps-gemm.patch"]
    assert load_series(folder / "series.toml").name == series.name  # a path works too


# ------------------------------------------------------------------------------- operations, tiny
def _work_clean(project: Path, base: str = "v1") -> list[str]:
    out = []
    for tree in worktrees(project / "work", base):
        if tree.exists():
            out.append(git(tree, "status", "--porcelain"))
    return out


def test_check_ok_then_stale_patch_names_file_and_hunk(tiny_upstream, project, isolated_cache, capsys):
    folder = export_series(tiny_upstream, project)
    rc, out = _run(capsys, "checkout", "--series", "demo")
    assert rc == 0
    stock, patched = worktrees(project / "work", "v1")
    heads = [git(t, "rev-parse", "HEAD") for t in (stock, patched)]
    rc, out = _run(capsys, "check", "--series", "demo")
    assert rc == 0, out
    assert "0001-a-patch-line-5.patch: applies" in out and ": ok" in out
    # make 0001 stale: its context no longer matches the base
    patch = folder / "v1" / "0001-a-patch-line-5.patch"
    patch.write_text(patch.read_text().replace(" line 4\n", " line four\n"))
    rc, out = _run(capsys, "check", "--series", "demo")
    assert rc == 1
    assert "0001-a-patch-line-5.patch: FAILS" in out
    assert "a.txt: hunk #1 `@@ -2,7 +2,7 @@" in out
    assert "0002-docs-document-the-change.patch: not checked" in out
    assert _work_clean(project) == ["", ""]
    assert [git(t, "rev-parse", "HEAD") for t in (stock, patched)] == heads


def test_pinned_commit_must_match_a_git_upstream(tiny_upstream, project, isolated_cache, capsys):
    v1 = git(tiny_upstream, "rev-parse", "v1^{commit}").strip()
    export_series(tiny_upstream, project, extra=f'commit = "{v1}"\n')
    assert _run(capsys, "check", "--series", "demo")[0] == 0
    manifest = project / "patches" / "demo" / "series.toml"
    manifest.write_text(manifest.read_text().replace(v1, "0" * 40))
    assert cli.main(["check", "--series", "demo"]) == 2
    errors = _errors(capsys)
    assert len(errors) == 1 and f"base 'v1' is {v1} upstream but series.toml pins commit {'0' * 40}" in errors[0]


def test_check_and_apply_fall_back_to_three_way(tiny_upstream, project, isolated_cache, capsys):
    export_series(tiny_upstream, project, base="v4")  # patches made on v1, declared for v4
    rc, out = _run(capsys, "check", "--series", "demo")
    assert rc == 0, out
    assert "0001-a-patch-line-5.patch: applies only with 3-way merge" in out
    rc, out = _run(capsys, "apply", "--series", "demo")
    assert rc == 0, out
    _, patched = worktrees(project / "work", "v4")
    text = (patched / "a.txt").read_text()
    assert "line 3 context moved\nline 4\nline 5 patched\n" in text


def test_check_files_key_must_match_the_diff(tiny_upstream, project, isolated_cache, capsys):
    export_series(tiny_upstream, project, extra='files = ["a.txt"]\n')
    rc, out = _run(capsys, "check", "--series", "demo")
    assert rc == 1
    assert "key 'files' does not match" in out and "docs/b.md" in out


def test_apply_one_commit_per_patch_then_noop_refresh(tiny_upstream, project, isolated_cache, capsys):
    folder = export_series(tiny_upstream, project)
    before = {p.name: p.read_bytes() for p in (folder / "v1").iterdir()}
    rc, out = _run(capsys, "apply", "--series", "demo")
    assert rc == 0, out
    stock, patched = worktrees(project / "work", "v1")
    log = git(patched, "log", "--format=%an <%ae>|%s", "v1..HEAD").splitlines()
    assert log == [
        "Patch Author <author@example.org>|docs: document the change",
        "Patch Author <author@example.org>|a: patch line 5",
    ]
    assert git(patched, "log", "-1", "--format=%b", "HEAD~1").strip() == "Why: the test series needs a reason."
    assert "line 5 patched" in (patched / "a.txt").read_text()
    assert "line 5 patched" not in (stock / "a.txt").read_text()
    # a second apply recognises the series by patch-id and does nothing
    rc, out = _run(capsys, "apply", "--series", "demo")
    assert rc == 0 and "already applied" in out
    rc, out = _run(capsys, "refresh", "--series", "demo")
    assert rc == 0 and "unchanged" in out
    assert git(project, "status", "--porcelain", "patches/") == ""
    assert {p.name: p.read_bytes() for p in (folder / "v1").iterdir()} == before


def test_two_clones_sharing_one_cache_apply_the_same_series(
    tiny_upstream, project, isolated_cache, tmp_path, monkeypatch, capsys
):
    """A second clone's apply failed before (regression test) with "branch patched/<series>/<base> is already checked
    out in <the other clone>/work/...": both clones' worktrees live in the one cached mirror."""
    export_series(tiny_upstream, project)
    other = tmp_path / "other-clone"
    git(tmp_path, "clone", "-q", str(project), str(other))
    trees = []
    for clone in (project, other):
        monkeypatch.chdir(clone)
        rc, out = _run(capsys, "apply", "--series", "demo")
        assert rc == 0, out
        _, patched = worktrees(clone / "work", "v1")
        branch = patched_branch("demo", "v1", patched)
        assert f"apply: 2 commit(s) on {branch} in work/v1/patched" in out
        assert "line 5 patched" in (patched / "a.txt").read_text()
        trees.append((patched, branch))
    (first, first_branch), (second, second_branch) = trees
    assert first_branch != second_branch
    assert git(first, "rev-parse", "--git-common-dir") == git(second, "rev-parse", "--git-common-dir")  # one mirror
    assert len(list((isolated_cache / "mirrors").glob("*.git"))) == 1
    # each clone goes on with its own branch: a commit in one is not seen by the other's refresh
    (second / "a.txt").write_text((second / "a.txt").read_text().replace("line 9\n", "line 9 other\n"))
    git(second, "commit", "-q", "-am", "a: only in the other clone")
    assert _run(capsys, "refresh", "--series", "demo")[0] == 0
    assert len(list((other / "patches" / "demo" / "v1").glob("*.patch"))) == 3
    monkeypatch.chdir(project)
    rc, out = _run(capsys, "refresh", "--series", "demo")
    assert rc == 0 and "unchanged" in out


def test_refresh_writes_changes_with_stable_bytes(tiny_upstream, project, isolated_cache, capsys):
    folder = export_series(tiny_upstream, project)
    assert _run(capsys, "apply", "--series", "demo")[0] == 0
    _, patched = worktrees(project / "work", "v1")
    old_hash = series_hash(load_series("demo"), load_series("demo").base(None))
    # amend the first commit: new content and subject
    git(patched, "rebase", "-q", "--exec", "true", "v1")  # no-op, keeps the branch as is
    git(patched, "checkout", "-q", "HEAD~1")
    (patched / "a.txt").write_text((patched / "a.txt").read_text().replace("line 6\n", "line 6 too\n"))
    git(patched, "commit", "-q", "-a", "--amend", "-m", "a: patch lines 5 and 6")
    amended = git(patched, "rev-parse", "HEAD").strip()
    git(patched, "checkout", "-q", patched_branch("demo", "v1", patched))
    git(patched, "rebase", "-q", "--onto", amended, "HEAD~1")
    rc, out = _run(capsys, "refresh", "--series", "demo")
    assert rc == 0 and "2 file(s) written or removed" in out  # new name written, old name removed
    series = load_series("demo")
    entry = series.base(None)
    assert entry.patches == ("0001-a-patch-lines-5-and-6.patch", "0002-docs-document-the-change.patch")
    assert not (folder / "v1" / "0001-a-patch-line-5.patch").exists()
    text = (folder / "v1" / entry.patches[0]).read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n")
    assert "Subject: [PATCH] a: patch lines 5 and 6" in text and "+line 6 too" in text
    assert not re.search(r"(?m)^-- \n\d", text)  # no git-version signature
    assert series_hash(series, entry) != old_hash
    written = {p.name: p.read_bytes() for p in (folder / "v1").iterdir()}
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "refreshed")
    rc, out = _run(capsys, "refresh", "--series", "demo")
    assert rc == 0 and "unchanged" in out
    assert {p.name: p.read_bytes() for p in (folder / "v1").iterdir()} == written
    assert git(project, "status", "--porcelain", "patches/") == ""


def test_dirty_patched_worktree_is_refused(tiny_upstream, project, isolated_cache, capsys):
    export_series(tiny_upstream, project)
    assert _run(capsys, "checkout", "--series", "demo")[0] == 0
    _, patched = worktrees(project / "work", "v1")
    (patched / "a.txt").write_text("local edit\n")
    for command in ("apply", "refresh"):
        assert cli.main([command, "--series", "demo"]) == 2
        errors = _errors(capsys)
        assert len(errors) == 1 and "uncommitted changes: a.txt" in errors[0]
    assert (patched / "a.txt").read_text() == "local edit\n"  # nothing the user wrote is lost


def test_rebase_clean_writes_new_base_variant(tiny_upstream, project, isolated_cache, capsys):
    folder = export_series(tiny_upstream, project)
    rc, out = _run(capsys, "rebase", "--series", "demo", "--onto", "v2")
    assert rc == 0, out
    series = load_series("demo")
    assert [b.ref for b in series.bases] == ["v1", "v2"]
    v2 = series.base("v2")
    assert v2.commit == git(tiny_upstream, "rev-parse", "v2^{commit}").strip()
    assert [p.name for p in sorted((folder / "v2").iterdir())] == list(v2.patches)
    assert len(v2.patches) == 2
    rc, out = _run(capsys, "check", "--series", "demo", "--base", "v2")
    assert rc == 0, out
    _, patched = worktrees(project / "work", "v2")
    text = (patched / "a.txt").read_text()
    assert "line 5 patched" in text and "line 35 upstream" in text


def test_rebase_conflict_leaves_worktree_and_says_how_to_continue(tiny_upstream, project, isolated_cache, capsys):
    export_series(tiny_upstream, project)
    manifest_before = (project / "patches" / "demo" / "series.toml").read_text()
    rc, out = _run(capsys, "rebase", "--series", "demo", "--onto", "v3")
    assert rc == 1
    _, patched = worktrees(project / "work", "v3")
    assert "conflict: 0001-a-patch-line-5.patch" in out and "conflicted files: a.txt" in out
    assert "-m harness rebase --series demo --base v1 --onto v3 --workdir work --continue" in out
    assert (Path(git(patched, "rev-parse", "--path-format=absolute", "--git-dir").strip()) / "rebase-apply").is_dir()
    assert "<<<<<<<" in (patched / "a.txt").read_text()
    assert (project / "patches" / "demo" / "series.toml").read_text() == manifest_before
    # continuing with the conflict unresolved says so again
    rc, out = _run(capsys, "rebase", "--series", "demo", "--onto", "v3", "--continue")
    assert rc == 1 and "conflicted files: a.txt" in out
    resolved = (patched / "a.txt").read_text()
    resolved = re.sub(r"<<<<<<< [^\n]*\n.*?=======\n(.*?)>>>>>>> [^\n]*\n", r"\1", resolved, flags=re.S)
    (patched / "a.txt").write_text(resolved)
    git(patched, "add", "a.txt")
    rc, out = _run(capsys, "rebase", "--series", "demo", "--onto", "v3", "--continue")
    assert rc == 0, out
    # as docs/new-series.md step 7 shows: the new [[base]] is checked at its base
    assert f"check: demo at v3 ({git(tiny_upstream, 'rev-parse', 'v3').strip()[:12]}): ok" in out.splitlines()
    series = load_series("demo")
    assert [b.ref for b in series.bases] == ["v1", "v3"]
    assert git(patched, "rev-list", "--count", "v3..HEAD").strip() == "2"


# --------------------------------------------------------------------------- Debian's PyTorch
MM = "aten/src/ATen/native/mps/operations/LinearAlgebra.mm"
DOC = "docs/source/mps_environment_variables.rst"
METAL = '  static bool always_use_metal = std::getenv("PYTORCH_MPS_PREFER_METAL") != nullptr;\n'


#: the test series on the real tree: (message, path, edit of that file's text), one commit each
DEBIAN_SERIES = (
    (
        "mps: note on the GEMM path\n\nA test series on the real tree.",
        MM,
        lambda text: text.replace(METAL, METAL + "  // test series: GEMM keeps MPSGraph when asked\n", 1),
    ),
    ("docs: mention the test series", DOC, lambda text: text + "\n.. note:: test series documentation line.\n"),
)


@pytest.fixture(scope="module")
def debian_patches(debian_import, tmp_path_factory) -> dict[str, bytes]:
    """The small series authored on the real PyTorch 2.6.0 tree (:data:`DEBIAN_SERIES`), once per module:
    its ``git format-patch`` files by name. Authored in a bare clone of the run's import (plumbing, no
    worktree: 15,000 files of PyTorch checked out only where a test is about worktrees)."""
    root = tmp_path_factory.mktemp("debian-series")
    repo = root / "pytorch.git"
    git(root, "clone", "-q", "--bare", "--local", str(debian_import), str(repo))  # hard links: fast
    assert METAL in git(repo, "show", f"v2.6.0:{MM}")
    tip = "v2.6.0"
    for message, path, edit in DEBIAN_SERIES:
        tip = _commit_edits(repo, tip, {path: edit}, message)
    out = root / "patches"
    git(repo, "format-patch", "-q", "-o", str(out), f"v2.6.0..{tip}")
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.fixture
def debian_project(debian_patches, project) -> str:
    """A project (cwd) whose series ``demo-real`` is :func:`debian_patches`, at base v2.6.0; its name."""
    name = "demo-real"
    out = project / "patches" / name / "v2.6.0"
    out.mkdir(parents=True)
    for patch, data in debian_patches.items():
        (out / patch).write_bytes(data)
    (project / "patches" / name / "series.toml").write_text(
        f'name = "{name}"\ntitle = "Test series on PyTorch 2.6.0"\n'
        f'upstream = "https://github.com/pytorch/pytorch.git"\n\n[[base]]\nref = "v2.6.0"\n'
        f'patches = {sorted(debian_patches)!r}\nfiles = ["{DOC}", "{MM}"]\n'.replace("'", '"')
    )
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "series")
    return name


@pytest.fixture
def debian_worktrees(debian_archive, debian_project, project) -> tuple[Path, Path]:
    """The project's worktrees of v2.6.0 from Debian's archive (``checkout`` in the test's own cache):
    (stock, patched), both at the base."""
    co = checkout(str(debian_archive), "v2.6.0", project / "work", debian_project)
    assert (co.stock, co.patched) == worktrees(project / "work", "v2.6.0")
    base = git(co.stock, "rev-parse", "v2.6.0^{commit}")
    assert [git(t, "rev-parse", "HEAD") for t in (co.stock, co.patched)] == [base, base]
    return co.stock, co.patched


@pytest.mark.slow
def test_debian_check_apply_refresh_and_stale(debian_archive, debian_project, debian_worktrees, project, capsys):
    """Acceptance on the real tree: check passes; apply gives one commit per patch; refresh right
    after leaves `git status --porcelain patches/` empty; a stale patch fails check naming the file
    and hunk, with the worktrees clean."""
    name, (stock, patched) = debian_project, debian_worktrees
    common = ["--upstream", str(debian_archive), "--base", "v2.6.0", "--series", name]
    rc, out = _run(capsys, "check", *common)
    assert rc == 0, out
    rc, out = _run(capsys, "apply", *common)
    assert rc == 0, out
    assert git(patched, "rev-list", "--count", "v2.6.0..HEAD").strip() == "2"
    assert git(patched, "log", "--format=%an|%s", "v2.6.0..HEAD").splitlines() == [
        f"{AUTHOR['GIT_AUTHOR_NAME']}|docs: mention the test series",
        f"{AUTHOR['GIT_AUTHOR_NAME']}|mps: note on the GEMM path",
    ]
    assert "GEMM keeps MPSGraph" in (patched / MM).read_text()
    assert "GEMM keeps MPSGraph" not in (stock / MM).read_text()
    rc, out = _run(capsys, "refresh", *common)
    assert rc == 0 and "unchanged" in out
    assert git(project, "status", "--porcelain", "patches/") == ""
    # stale on purpose: the context line of the .mm hunk no longer exists at v2.6.0
    patch = next((project / "patches" / name / "v2.6.0").glob("0001-*.patch"))
    text = patch.read_text()
    patch.write_text(text.replace("bool use_metal_mm(const Tensor& self", "bool use_metal_mm_gone(const Tensor& self"))
    heads = [git(t, "rev-parse", "HEAD") for t in (stock, patched)]
    rc, out = _run(capsys, "check", *common)
    assert rc == 1
    assert f"{MM}: hunk #1 `@@ -75," in out and "does not apply" in out
    assert [git(t, "status", "--porcelain") for t in (stock, patched)] == ["", ""]
    assert [git(t, "rev-parse", "HEAD") for t in (stock, patched)] == heads


def _commit_edits(repo: Path, parent: str, edits: dict, message: str) -> str:
    """A commit on ``parent`` in the bare repo ``repo`` that applies ``edits`` (path: text -> text) to its
    files (plumbing only: no checkout); its sha."""
    index = repo.parent / f"{repo.name}.index"
    index.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(index)}
    git(repo, "read-tree", parent, env=env)
    for path, edit in edits.items():
        text = git(repo, "show", f"{parent}:{path}")
        blob_src = repo.parent / "blob"
        blob_src.write_text(edit(text))
        blob = git(repo, "hash-object", "-w", str(blob_src)).strip()
        git(repo, "update-index", "--cacheinfo", f"100644,{blob},{path}", env=env)
    tree = git(repo, "write-tree", env=env).strip()
    return git(repo, "commit-tree", tree, "-p", parent, "-m", message).strip()


def _replaced(old: str, new: str):
    """An edit for :func:`_commit_edits`: the first ``old`` becomes ``new`` (which must be there)."""

    def edit(text: str) -> str:
        assert old in text
        return text.replace(old, new, 1)

    return edit


def _derived_upstream(store: Path, dest: Path, tag: str, edits: dict[str, tuple[str, str]]) -> None:
    """Add a commit on v2.6.0 tagged ``tag`` to a bare repo ``dest`` (plumbing only: no checkout)."""
    commit = _commit_edits(dest, "v2.6.0", {p: _replaced(*e) for p, e in edits.items()}, f"upstream moves ({tag})")
    git(dest, "tag", tag, commit)


@pytest.mark.slow
def test_debian_rebase_clean_and_conflict(debian_import, debian_project, project, tmp_path, monkeypatch, capsys):
    """rebase on the real tree: onto a moved upstream (3-way, clean) and onto one that rewrote the
    patched line (conflict: files named, command to continue printed, worktree left mid-am)."""
    name, store = debian_project, debian_import  # the run's import of Debian's archive (read only)
    local = tmp_path / "pytorch.git"
    git(tmp_path, "clone", "-q", "--bare", "--local", str(store), str(local))  # hard links: fast
    # a moved upstream: the .mm file changes far from the series' hunk, the doc file at its end
    _derived_upstream(
        store=store,
        dest=local,
        tag="v2.6.0-moved",
        edits={
            MM: ("Tensor linalg_solve_triangular_mps(", "Tensor /* moved upstream */ linalg_solve_triangular_mps("),
            DOC: (".. list-table::", ".. list-table:: \n"),
        },
    )
    # a rewritten upstream: the very line the series extends changes
    _derived_upstream(
        store=store,
        dest=local,
        tag="v2.6.0-rewritten",
        edits={
            MM: (
                'std::getenv("PYTORCH_MPS_PREFER_METAL") != nullptr;',
                'std::getenv("PYTORCH_MPS_PREFER_METAL") != nullptr; // rewritten upstream',
            )
        },
    )
    monkeypatch.setenv("TORCH_PATCH_HARNESS_CACHE", str(tmp_path / "cache"))
    common = ["--upstream", str(local), "--base", "v2.6.0", "--series", name]
    rc, out = _run(capsys, "rebase", *common, "--onto", "v2.6.0-moved")
    assert rc == 0, out
    series = load_series(name)
    moved = series.base("v2.6.0-moved")
    assert set(moved.files) == {DOC, MM} and len(moved.patches) == 2
    assert moved.commit == git(local, "rev-parse", "v2.6.0-moved^{commit}").strip()
    rc, out = _run(capsys, "check", "--upstream", str(local), "--series", name, "--base", "v2.6.0-moved")
    assert rc == 0, out
    rc, out = _run(capsys, "rebase", *common, "--onto", "v2.6.0-rewritten")
    assert rc == 1
    assert f"conflicted files: {MM}" in out and "--onto v2.6.0-rewritten" in out and "--continue" in out
    _, patched = worktrees(project / "work", "v2.6.0-rewritten")
    assert "<<<<<<<" in (patched / MM).read_text()
    assert [b.ref for b in load_series(name).bases] == ["v2.6.0", "v2.6.0-moved"]
    git(patched, "am", "--abort")


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ('prefer_metal = { mm = "metal" }', "prefer_metal = { mm = 1 }", "key 'prefer_metal' must be a table of op"),
        ('prefer_metal = { mm = "metal" }', 'prefer_metl = { mm = "metal" }', "'prefer_metl' is not a mps config"),
        ("[base.routes.mps]\nprefer_metal", "[base.routes.gpu]\nprefer_metal", "[base.routes.gpu]: unknown device"),
        ('all = { mm = "metal" }\n', 'all = { mm = "metal" }\ncolour = "blue"\n', "key 'colour' must be a table"),
        ("[evidence.mps.patched_routes]\nall = {", "[evidence.mps.patched_routes]\nall = 1 #", "patched_routes.all"),
        # misspelt paths would silently take the looser bound (a hostile review found it)
        ('prefer_metal = { mm = "metal" }', 'prefer_metal = { mm = "metla" }', "mm = 'metla' is not a kernel path"),
        ("[base.accumulators.metal]", "[base.accumulators.metla]", "'metla' is not a routed kernel path (metal)"),
        ('prefer_metal = { mm = "metal", addmm', 'prefer_metal = { mm = "gpu", addmm', "mm = 'gpu' is not a kernel"),
    ],
)
def test_a_malformed_per_base_route_is_one_line_naming_the_base_and_key(tmp_path, old, new, expected):
    """[base.routes.<device>] (docs/new-series.md): config = { op = path } for a known device and config."""
    from harness.errors import SeriesError

    folder = tmp_path / "mps-gemm-prefer-fast-math"
    shutil.copytree(Path(__file__).resolve().parent.parent / "patches" / folder.name, folder)
    manifest = folder / "series.toml"
    text = manifest.read_text()
    assert old in text
    manifest.write_text(text.replace(old, new, 1))
    with pytest.raises(SeriesError) as caught:
        load_series(folder)
    assert expected in str(caught.value) and "series.toml" in str(caught.value)
    assert "\n" not in str(caught.value)


# --------------------------------------------------------------------- nothing the user committed is hidden
def _commit_detached(patched: Path, message: str = "mine: work on a detached HEAD") -> str:
    """The user's commit on a detached HEAD of ``patched``; returns its SHA."""
    git(patched, "checkout", "-q", "--detach")
    (patched / "a.txt").write_text((patched / "a.txt").read_text().replace("line 9\n", "line 9 mine\n"))
    git(patched, "commit", "-q", "-am", message)
    return git(patched, "rev-parse", "HEAD").strip()


def _branches_with(tree: Path, sha: str) -> list[str]:
    return git(tree, "for-each-ref", "--contains", sha, "--format=%(refname:short)", "refs/heads/").split()


def test_refresh_adopts_the_commits_of_a_detached_head(tiny_upstream, project, isolated_cache, capsys):
    """`checkout` without a series leaves patched detached; the user commits there and refreshes: refresh
    used to make the series' branch at the base, switch to it (hiding the commit) and say there was nothing
    on top of the base. The detached HEAD's commits become the series, on the branch the message names."""
    folder = export_series(tiny_upstream, project)
    assert _run(capsys, "checkout", "--upstream", str(tiny_upstream), "--base", "v1")[0] == 0
    _, patched = worktrees(project / "work", "v1")
    assert git(patched, "symbolic-ref", "-q", "HEAD", check=False) == ""  # detached
    mine = _commit_detached(patched)
    rc, out = _run(capsys, "refresh", "--series", "demo", "--base", "v1")
    assert rc == 0, out
    branch = patched_branch("demo", "v1", patched)
    assert _branches_with(patched, mine) == [branch] and branch in out
    assert git(patched, "rev-parse", "HEAD").strip() == mine
    assert load_series("demo").base("v1").patches == ("0001-mine-work-on-a-detached-HEAD.patch",)
    assert "+line 9 mine" in (folder / "v1" / "0001-mine-work-on-a-detached-HEAD.patch").read_text()


@pytest.mark.parametrize("command", ["refresh", "apply --force", "checkout", "rebase"])
def test_commits_of_a_detached_head_survive(command, tiny_upstream, project, isolated_cache, capsys):
    """A detached HEAD with the user's commits on it, in the patched worktree a command moves: afterwards
    the commits are reachable from a named branch, and the command's message names that branch."""
    export_series(tiny_upstream, project)
    base = "v2" if command == "rebase" else "v1"
    if command == "rebase":  # the worktree rebase moves is the one of the new base
        checkout(str(tiny_upstream), "v2", project / "work", "demo")
    else:
        assert _run(capsys, "apply", "--series", "demo")[0] == 0
    _, patched = worktrees(project / "work", base)
    mine = _commit_detached(patched)
    args = {
        "refresh": ["refresh", "--series", "demo"],
        "apply --force": ["apply", "--series", "demo", "--force"],
        "checkout": ["checkout", "--series", "demo"],
        "rebase": ["rebase", "--series", "demo", "--onto", "v2"],
    }[command]
    rc, out = _run(capsys, *args)
    assert rc == 0, out
    kept = _branches_with(patched, mine)
    assert kept and any(name in out for name in kept), (kept, out)


def test_refresh_adopting_a_detached_head_keeps_the_branch_it_replaces(tiny_upstream, project, isolated_cache, capsys):
    """The detached HEAD branches off below the series' branch tip: it becomes the branch, and the commit only
    the old branch held is kept on a branch the message names."""
    export_series(tiny_upstream, project)
    assert _run(capsys, "apply", "--series", "demo")[0] == 0
    _, patched = worktrees(project / "work", "v1")
    old_tip = git(patched, "rev-parse", "HEAD").strip()
    git(patched, "checkout", "-q", "--detach", "HEAD~1")
    mine = _commit_detached(patched)
    rc, out = _run(capsys, "refresh", "--series", "demo")
    assert rc == 0, out
    branch = patched_branch("demo", "v1", patched)
    assert _branches_with(patched, mine) == [branch]
    (kept,) = _branches_with(patched, old_tip)
    assert kept.startswith("saved/demo/v1-") and kept in out
    assert len(load_series("demo").base("v1").patches) == 2  # the first patch and mine


def test_checkout_keeps_commits_made_in_stock(tiny_upstream, project, isolated_cache, capsys):
    """checkout puts a stock worktree that moved back on the base: a commit made there is kept first."""
    export_series(tiny_upstream, project)
    assert _run(capsys, "checkout", "--series", "demo")[0] == 0
    stock, _ = worktrees(project / "work", "v1")
    mine = _commit_detached(stock)
    rc, out = _run(capsys, "checkout", "--series", "demo")
    assert rc == 0, out
    assert git(stock, "rev-parse", "HEAD") == git(stock, "rev-parse", "v1^{commit}")
    (kept,) = _branches_with(stock, mine)
    assert kept.startswith("saved/stock/v1-") and kept in out


def test_keep_commits_refuses_when_git_cannot_make_the_branch(tiny_upstream, project, isolated_cache, capsys):
    """A branch that git refuses to make (an invalid name; a name other commits hold) stops the move with one
    line; commits that a branch holds need no keeping."""
    from harness.errors import UpstreamError
    from harness.upstream import keep_commits

    export_series(tiny_upstream, project)
    assert _run(capsys, "checkout", "--series", "demo")[0] == 0
    stock, _ = worktrees(project / "work", "v1")
    assert keep_commits(stock, "stock/v1") is None  # the base: a tag holds it
    mine = _commit_detached(stock)
    with pytest.raises(UpstreamError, match=r"cannot keep 1 commit\(s\) of .* on branch saved/bad\.\.name-"):
        keep_commits(stock, "bad..name")
    git(stock, "branch", f"saved/x-{mine[:12]}", "v1")  # planted: the name taken by other commits
    with pytest.raises(UpstreamError, match="already exists"):
        keep_commits(stock, "x")
    assert git(stock, "rev-parse", f"saved/x-{mine[:12]}") == git(stock, "rev-parse", "v1^{commit}")  # untouched
    assert keep_commits(stock, "y") == f"saved/y-{mine[:12]}"
    assert keep_commits(stock, "y") is None  # now a branch holds them
