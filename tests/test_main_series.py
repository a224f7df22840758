"""The ``main`` base of mps-gemm-prefer-fast-math, applied to upstream files reassembled from the patches.

What this verifies, and what it cannot (no network, and nothing from upstream is stored here but
the context lines the patches carry):

- The pre-image of every file the main patches touch is reassembled at test time from the hunks
  themselves: each hunk's context and removed lines at the line numbers its header names, and
  numbered filler lines elsewhere. ``git apply --check`` (and ``--3way``) of the series on that
  tree must succeed: the hunk headers, counts and context agree with each other, and the series
  applies in order. Whether the context matches the real upstream file is *not* verified here;
  the files were read at the commits recorded in ``[[base.read]]`` and ``nox -s check -- --base
  main`` verifies it against a real checkout.
- Index lines are real or absent: a file section has an ``index`` line exactly when its
  ``[[base.read]]`` records the whole file's ``blob``, and the line names that blob.
- The stale-context case. A newer upstream LinearAlgebra.mm rewrote the last context line of 0001
  (``is_macos_13_or_newer(MacOSVersion::MACOS_VER_14_4_PLUS)`` became
  ``is_macos_at_least(MacOSVersion::MACOS_14_4)``). On the reassembled tree with that one line
  changed: ``check --base main`` names the file and hunk; ``rebase --onto`` stops and names them
  too, because 0001 names no blob to merge from; with an index line naming a blob the repository
  has (what ``refresh`` writes after a real checkout), the same ``rebase`` succeeds by 3-way merge
  and writes a new ``[[base]]`` whose patch carries the new context.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import git

REPO_ROOT = Path(__file__).resolve().parents[1]
SERIES = "mps-gemm-prefer-fast-math"
SERIES_DIR = REPO_ROOT / "patches" / SERIES
LINALG = "aten/src/ATen/native/mps/operations/LinearAlgebra.mm"
OLD_CONTEXT = "is_macos_13_or_newer(MacOSVersion::MACOS_VER_14_4_PLUS)"
NEW_CONTEXT = "is_macos_at_least(MacOSVersion::MACOS_14_4)"
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def _main_base() -> dict:
    with open(SERIES_DIR / "series.toml", "rb") as f:
        (base,) = (b for b in tomllib.load(f)["base"] if b["ref"] == "main")
    return base


def _patches() -> list[Path]:
    base = _main_base()
    return [SERIES_DIR / base.get("dir", base["ref"]) / name for name in base["patches"]]


def _sections(text: str) -> list[tuple[str, str, list[str]]]:
    """(path, header, hunks) of each ``diff --git`` section of one patch file."""
    body = re.split(r"(?m)^-- \n", text)[0]
    sections = []
    for part in re.split(r"(?m)^(?=diff --git )", body)[1:]:
        path = re.match(r"diff --git a/(\S+) b/", part).group(1)
        pieces = re.split(r"(?m)^(?=@@ )", part)
        sections.append((path, pieces[0], pieces[1:]))
    return sections


def preimages() -> dict[str, list[str]]:
    """Each touched file's pre-image, reassembled from the hunks (filler lines where no hunk reaches)."""
    placed: dict[str, dict[int, str]] = {}
    for patch in _patches():
        for path, _, hunks in _sections(patch.read_text()):
            lines = placed.setdefault(path, {})
            for hunk in hunks:
                head, *rest = hunk.splitlines()
                start = int(HUNK.match(head).group(1))
                old = [line[1:] for line in rest if line[:1] in (" ", "-")]
                for offset, line in enumerate(old):
                    assert lines.get(start + offset, line) == line, f"{path}:{start + offset}: hunks disagree"
                    lines[start + offset] = line
    files = {}
    for path, lines in placed.items():
        last = max(lines) + 1  # one filler line after the last hunk: no hunk is at end-of-file
        files[path] = [lines.get(n, f"filler line {n}") for n in range(1, last + 1)]
    return files


def _write_tree(repo: Path, files: dict[str, list[str]]) -> None:
    for path, lines in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n")


@pytest.fixture
def reassembled(tmp_path) -> Path:
    """A git repository whose branch ``main`` holds the reassembled pre-images (tag ``main-read``)."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    _write_tree(repo, preimages())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "main as read (reassembled from the patches' context)")
    git(repo, "tag", "main-read")
    return repo


def test_index_lines_are_real_or_absent():
    reads = {r["path"]: r for r in _main_base()["read"]}
    seen = 0
    for patch in _patches():
        for path, header, _ in _sections(patch.read_text()):
            index = re.search(r"(?m)^index ([0-9a-f]+)\.\.([0-9a-f]+)", header)
            blob = reads[path].get("blob")
            if blob is None:
                assert index is None, f"{patch.name}: {path} has an index line but no blob was read"
            else:
                assert index is not None and blob.startswith(index.group(1)) and len(index.group(1)) >= 12
                seen += 1
    assert seen == 1  # docs/source/mps_environment_variables.md, read whole


def test_main_patches_apply_to_the_reassembled_files(reassembled):
    files = preimages()
    assert sorted(files) == sorted(_main_base()["files"])
    assert files[LINALG][303] == f"  static bool is_macos_14_4_or_newer = {OLD_CONTEXT};"  # line 304, as read
    for patch in _patches():
        for mode in ([], ["--3way"]):
            result = subprocess.run(
                ["git", "apply", "--check", *mode, str(patch)], cwd=reassembled, capture_output=True, text=True
            )
            assert result.returncode == 0, f"{patch.name} {mode}: {result.stderr}"
    # applied in order, the series leaves exactly its files changed and the variable in all three
    for patch in _patches():
        git(reassembled, "apply", str(patch))
    changed = git(reassembled, "diff", "--name-only").split()
    assert sorted(changed) == sorted(_main_base()["files"])
    for path in changed:
        assert "PYTORCH_MPS_GEMM_PREFER_FAST_MATH" in (reassembled / path).read_text()


@pytest.fixture
def project_copy(tmp_path, monkeypatch) -> Path:
    """A project with a copy of the series whose main base is unpinned (the reassembled repo has other SHAs)."""
    project = tmp_path / "project"
    shutil.copytree(SERIES_DIR, project / "patches" / SERIES)
    manifest = project / "patches" / SERIES / "series.toml"
    text = manifest.read_text()
    pin = f'ref = "main"\ncommit = "{_main_base()["commit"]}"\n'
    assert text.count(pin) == 1
    manifest.write_text(text.replace(pin, 'ref = "main"\n'))
    monkeypatch.chdir(project)
    return project


def _harness(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # this checkout's harness, whatever is installed
    return subprocess.run(
        [sys.executable, "-m", "harness", *args, "--series", SERIES, "--workdir", str(project / "work")],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )


def _stale(repo: Path) -> str:
    """Commit the newer upstream's last-context-line change on ``main``; return the new SHA."""
    path = repo / LINALG
    path.write_text(path.read_text().replace(OLD_CONTEXT, NEW_CONTEXT))
    git(repo, "commit", "-q", "-am", "upstream: is_macos_at_least")
    return git(repo, "rev-parse", "HEAD").strip()


def test_stale_context_check_then_rebase_names_file_and_hunk(reassembled, project_copy, isolated_cache):
    up = ["--upstream", str(reassembled)]
    ok = _harness(project_copy, "check", "--base", "main", *up)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    fresh = _stale(reassembled)
    failed = _harness(project_copy, "check", "--base", "main", *up)
    assert failed.returncode == 1
    hunk = f"{LINALG}: hunk #1 `@@ -298,7 +298,10 @@ std::tuple<MPSGraphTensor*, MPSGraphTensor*, MPS` does not apply"
    assert f"check:   {hunk}" in failed.stdout, failed.stdout
    rebased = _harness(project_copy, "rebase", "--base", "main", "--onto", fresh, *up)
    assert rebased.returncode == 1, rebased.stderr
    assert "conflict: 0001-MPS-Add-PYTORCH_MPS_GEMM_PREFER_FAST_MATH-to-keep-GE.patch does not apply" in rebased.stdout
    assert f"conflict:   {hunk}" in rebased.stdout
    assert "--continue" in rebased.stdout
    with open(project_copy / "patches" / SERIES / "series.toml", "rb") as f:
        assert [b["ref"] for b in tomllib.load(f)["base"]] == ["v2.6.0", "main"]  # no variant written


def test_stale_context_rebase_merges_three_way_when_the_blob_is_known(reassembled, project_copy, isolated_cache):
    # what refresh writes after `apply` on a real checkout: an index line naming the base's blob
    blob = git(reassembled, "rev-parse", f"main-read:{LINALG}").strip()
    folder = project_copy / "patches" / SERIES / "main"
    first = sorted(folder.iterdir())[0]
    text = first.read_text()
    header = f"diff --git a/{LINALG} b/{LINALG}\n"
    first.write_text(text.replace(header, f"{header}index {blob[:12]}..{'0' * 12} 100644\n", 1))
    fresh = _stale(reassembled)
    rebased = _harness(project_copy, "rebase", "--base", "main", "--onto", fresh, "--upstream", str(reassembled))
    assert rebased.returncode == 0, rebased.stdout + rebased.stderr
    assert f"rebase: {SERIES} carried from main onto {fresh}" in rebased.stdout
    with open(project_copy / "patches" / SERIES / "series.toml", "rb") as f:
        bases = {b["ref"]: b for b in tomllib.load(f)["base"]}
    new = bases[fresh]
    assert new["notes"] == "rebased from main with 3-way merge" and new["commit"] == fresh
    patch = (project_copy / "patches" / SERIES / new.get("dir", fresh) / new["patches"][0]).read_text()
    assert f" {NEW_CONTEXT};" in patch and OLD_CONTEXT not in patch


def _added(patch: Path) -> list[str]:
    return [line[1:] for line in patch.read_text().splitlines() if line.startswith("+") and not line.startswith("+++")]


def test_main_test_class_is_the_one_linted_on_real_v2_6_0_source():
    """The test class main's 0003 adds is, line for line, the one v2.6.0's 0003 adds, which
    tests/test_patch_series.py compiles and lints (flake8, ruff) inside Debian's real 2.6.0 tree."""
    main_added = _added(_patches()[2])
    v26 = SERIES_DIR / "v2.6.0" / "0003-MPS-Test-GEMMs-under-PREFER_METAL-GEMM_PREFER_FAST_M.patch"
    v26_added = _added(v26)
    assert [line for line in main_added if line.strip()] == [line for line in v26_added if line.strip()]
    assert len([line for line in main_added if line.strip()]) == 40
    # main's file has one blank line before the insertion point, v2.6.0's two: both end with two
    assert main_added[:2] == ["", "class TestGemmPreferFastMath(TestCaseMPS):"] and v26_added[0].startswith("class ")
    assert all(len(line) <= 120 for line in main_added)


def _tree_file(archive: Path, name: str) -> bytes:
    import tarfile

    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isfile() and member.name.split("/", 1)[-1] == name:
                return tar.extractfile(member).read()
    raise AssertionError(f"{name} not in {archive}")


@pytest.mark.slow
def test_main_cxx_change_is_clang_format_clean(reassembled, debian_tarball, tmp_path):
    """clang-format (the version upstream's lint pins, see test_patch_series.py) with the real
    ``.clang-format`` of PyTorch 2.6.0 (main's was not read) leaves 0001's changed lines as they are."""
    import git as gitpython
    from test_patch_series import _changed_lines, _clang_format_diff

    (reassembled / ".clang-format").write_bytes(_tree_file(debian_tarball, ".clang-format"))
    git(reassembled, "add", ".clang-format")
    git(reassembled, "commit", "-q", "-m", "clang-format config of 2.6.0")
    base = git(reassembled, "rev-parse", "HEAD").strip()
    git(reassembled, "apply", "--index", str(_patches()[0]))
    git(reassembled, "commit", "-q", "-m", "0001")
    repo = gitpython.Repo(reassembled)
    ranges = _changed_lines(repo, base, LINALG)
    assert ranges == [(301, 304)]
    text = (reassembled / LINALG).read_text()
    assert _clang_format_diff(reassembled, LINALG, text, ranges) == []
    bad = text.replace('("PYTORCH_MPS_PREFER_METAL") &&', '("PYTORCH_MPS_PREFER_METAL")&&', 1)
    assert bad != text and _clang_format_diff(reassembled, LINALG, bad, ranges) != []
