"""The ``main`` base of mps-gemm-prefer-fast-math against real upstream files.

The patches were written without a checkout, from upstream files read through the `search` tool.
Nothing from upstream is stored here but the context lines the patches carry, and CI has no network,
so each version of a patched file that was read is kept as derived data only
(``tests/data/mps-gemm-prefer-fast-math-main/<file>-<commit>.json``, made by
``tools/upstream_lines.py`` from the read text): its size, its git blob where it was read whole, and
a 12-hex SHA-256 per line of each window read. :func:`upstream_lines.rebuild` turns a record back
into a file for a set of candidate lines (the pre-image lines of the patches tried): a line is the
candidate with its hash, else a placeholder. ``git apply`` matches context and removed lines exactly,
so ``git apply --check`` on the rebuilt file answers as on the real one for every line read.

Versions (``[[base.read]]`` entries with ``applies``; ``repo`` says where each was read):

- LinearAlgebra.mm: pytorch/pytorch@001077cb (window around ``use_metal_mm``); the newest stored
  copy, cyyever/pytorch@0d188885 (a fork that tracks main: ``is_macos_14_4_or_newer`` is gone from
  under ``max_complex_inner_size`` and the fallbacks below it moved); Debian's v2.6.0 tree, which 0001
  must not apply to (``std::getenv``: the v2.6.0 base has its own series).
- docs/source/mps_environment_variables.md: pytorch/pytorch@39cc1c01 (whole, blob c2c2f6a7, which
  0002's index line names) and @dbccb5ae (whole, older: no ``PYTORCH_MPS_METAL_VERSION`` row, which
  0002's context has, so it must not apply); absent from v2.6.0 (its docs were ``.rst``).
- test/test_mps.py: pytorch/pytorch@883bde12 and @001544b6 (2023, tail from ``TestCommon`` to the end
  of the file) and Debian's v2.6.0 tree (tail from ``TestCommon``). 0003 is anchored on the module's
  tail (one blank line, ``if __name__ == "__main__":``, ``run_tests()``), the same in all of them.

A version that refuses a patch the manifest says must apply, or takes one it says must not, fails
:func:`test_main_series_applies_where_the_manifest_says`; the planted stale hunks (0003 anchored on
``class TestCommon`` ... ``# TODO: Actually instantiate`` as first written from a 2023 file, and 0001
with the ``is_macos_13_or_newer(MacOSVersion::MACOS_VER_14_4_PLUS)`` line as trailing context) show
the check catching each. The Debian records are recomputed from Debian's real tree in a slow test,
which also applies the real patches to the real files; another compiles and lints (flake8, ruff with
the tree's configuration) v2.6.0's test/test_mps.py with 0003 applied at its new anchor.

Index lines are real or absent, and ``check`` / ``rebase`` name the file and hunk of the stale 0001
on the rebuilt pytorch/pytorch@001077cb -> cyyever@0d188885 pair.
"""

from __future__ import annotations

import importlib.util
import json
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
DATA = REPO_ROOT / "tests" / "data" / f"{SERIES}-main"
LINALG = "aten/src/ATen/native/mps/operations/LinearAlgebra.mm"
TEST_MPS = "test/test_mps.py"
OLD_CONTEXT = "is_macos_13_or_newer(MacOSVersion::MACOS_VER_14_4_PLUS)"
DEBIAN = "debian/pytorch_2.6.0+dfsg-7"

_spec = importlib.util.spec_from_file_location("upstream_lines", REPO_ROOT / "tools" / "upstream_lines.py")
upstream_lines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(upstream_lines)

# The planted defects: the hunks as first written (patch text, not upstream's).
STALE_0003_LEAD = [
    "@@ -11700,6 +11700,{new} @@ class TestCommon(TestCase):",  # new: 6 context lines + the added ones
    '             cpu_tensor = ones("cpu")',
    "             self.assertEqual(mps_tensor.cpu(), cpu_tensor)",
    " ",
]
STALE_0003_TRAIL = [
    ' # TODO: Actually instantiate that test for the "mps" device to better reflect what it is doing.',
    " # This requires mps to be properly registered in the device generic test framework which is not the",
    " # case right now. We can probably use `allow_mps` introduced in https://github.com/pytorch/pytorch/pull/87342",
]
STALE_0001_HEADER = (
    "@@ -298,7 +298,10 @@ std::tuple<MPSGraphTensor*, MPSGraphTensor*, MPSGraphTensor*> do_mm(MPSGraph* gr"
)
STALE_0001_TRAIL = f"   static bool is_macos_14_4_or_newer = {OLD_CONTEXT};"


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


def _preimage(text: str) -> list[str]:
    """The context and removed lines of every hunk of a patch (the lines git apply must find)."""
    lines = []
    for _, _, hunks in _sections(text):
        for hunk in hunks:
            lines += [line[1:] for line in hunk.splitlines()[1:] if line[:1] in (" ", "-")]
    return lines


def _records() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(DATA.glob("*.json"))}


def _checked_reads() -> list[dict]:
    """The main base's ``[[base.read]]`` entries of patched files (those saying whether a patch applies)."""
    return [r for r in _main_base()["read"] if "applies" in r]


def _key(entry: dict) -> tuple[str, str, str]:
    return entry["path"], entry.get("repo", "pytorch/pytorch"), entry["commit"]


def _applies(record: dict, patch: str, workdir: Path) -> bool:
    """``git apply --check`` of ``patch`` on the file rebuilt from ``record`` (alone in ``workdir``)."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    text = upstream_lines.rebuild(record, _preimage(patch))
    if text is not None:
        (workdir / record["path"]).parent.mkdir(parents=True, exist_ok=True)
        (workdir / record["path"]).write_text(text)
    (workdir / "p.patch").write_text(patch)
    result = subprocess.run(["git", "apply", "--check", "p.patch"], cwd=workdir, capture_output=True, text=True)
    return result.returncode == 0


def _by_path(texts: list[str]) -> dict[str, str]:
    """The patch text that changes each path (one patch per file in this series)."""
    out = {}
    for text in texts:
        for path, _, _ in _sections(text):
            assert path not in out, f"{path} changed by two patches"
            out[path] = text
    return out


def mismatches(texts: list[str], workdir: Path) -> list[str]:
    """Each recorded version where the patch changing its file applies against the manifest's word."""
    patches = _by_path(texts)
    expected = {_key(r): r["applies"] for r in _checked_reads()}
    lines = []
    for name, record in _records().items():
        verdict = _applies(record, patches[record["path"]], workdir / name)
        where = f"{record['path']} @ {record['repo']} {record['commit'][:8]}"
        print(f"{where}: {'applies' if verdict else 'refused'}")
        if verdict != expected[_key(record)]:
            said = "must apply" if expected[_key(record)] else "must not apply"
            lines.append(f"{where}: {said}, {'applies' if verdict else 'refused'}")
    return lines


def _current() -> list[str]:
    return [p.read_text() for p in _patches()]


def stale_0003(text: str) -> str:
    """0003 with its hunk anchored as first written (the planted defect)."""
    head, rest = text.split("\n@@ ", 1)
    hunk, tail = rest.split("\n-- \n", 1)
    added = [line for line in hunk.splitlines()[1:] if line.startswith("+")]
    lead = [STALE_0003_LEAD[0].format(new=6 + len(added)), *STALE_0003_LEAD[1:]]
    return "\n".join([head, *lead, *added, *STALE_0003_TRAIL, "-- ", tail])


def stale_0001(text: str) -> str:
    """0001 with the trailing context line that the newest LinearAlgebra.mm no longer has (the planted defect)."""
    header = re.search(r"(?m)^@@ .*$", text).group(0)
    body = text.replace(header, STALE_0001_HEADER, 1)
    last = "   constexpr auto max_complex_inner_size = 2048;\n"
    assert body.count(last) == 1
    return body.replace(last, last + STALE_0001_TRAIL + "\n")


def test_every_checked_version_is_recorded_and_derived():
    reads = _checked_reads()
    records = _records()
    assert sorted(_key(r) for r in reads) == sorted(_key(r) for r in records.values())
    assert len(records) == 9
    by_key = {_key(r): r for r in records.values()}
    for read in reads:
        record = by_key[_key(read)]
        assert read.get("blob") == record.get("blob"), read  # blob recorded exactly where read whole
        assert re.fullmatch(r"[0-9a-f]{40}", read["commit"])
    # every patched file has at least one version each patch must apply to
    assert {r["path"] for r in reads if r["applies"]} == set(_main_base()["files"])
    # what the tool derives from the read docs text: the blob recorded when 0002 was written
    docs = records["docs-39cc1c01"]
    assert docs["blob"] == "c2c2f6a77f5eea3eae88a75dfbab9699b2ecee53" and docs["chars"] == 2360


def test_main_series_applies_where_the_manifest_says(tmp_path, capsys):
    assert mismatches(_current(), tmp_path) == []
    table = capsys.readouterr().out
    assert table.count("applies") == 6 and table.count("refused") == 3, table


def test_planted_stale_0003_is_refused_by_v2_6_0(tmp_path):
    texts = _current()
    texts[2] = stale_0003(texts[2])
    # the stale hunk still finds its 2023 context (the files it was written from), not v2.6.0's
    assert mismatches(texts, tmp_path) == [f"{TEST_MPS} @ {DEBIAN} 1eba9b3a: must apply, refused"]


def test_planted_stale_0001_is_refused_by_the_newest_linear_algebra(tmp_path):
    texts = _current()
    texts[0] = stale_0001(texts[0])
    assert mismatches(texts, tmp_path) == [f"{LINALG} @ cyyever/pytorch 0d188885: must apply, refused"]


def test_rebuild_keeps_unmatched_lines_distinct():
    record = _records()["linalg-0d188885"]
    text = upstream_lines.rebuild(record, _preimage(_current()[0]))
    lines = text.splitlines()
    assert lines[0] == upstream_lines.UNREAD and lines[-1] == upstream_lines.UNREAD
    matched = [line for line in lines if not line.startswith("<<< ")]
    assert matched == [
        "}",
        "",
        "bool use_metal_mm(const Tensor& self, const Tensor& other, const Tensor& output) {",
        '  static bool always_use_metal = c10::utils::has_env("PYTORCH_MPS_PREFER_METAL");',
        "  constexpr auto max_stride_size = 32768;",
        "  constexpr auto max_complex_inner_size = 2048;",
    ]
    # a line that is no candidate keeps its own placeholder: two different lines never compare equal
    assert len({line for line in lines if line.startswith("<<< upstream line ")}) >= 25


def test_index_lines_are_real_or_absent():
    blobs = {}
    for read in _main_base()["read"]:
        if "blob" in read:
            blobs.setdefault(read["path"], []).append(read["blob"])
    seen = 0
    for patch in _patches():
        for path, header, _ in _sections(patch.read_text()):
            index = re.search(r"(?m)^index ([0-9a-f]+)\.\.([0-9a-f]+)", header)
            if path not in blobs:
                assert index is None, f"{patch.name}: {path} has an index line but no blob was read"
            else:
                assert index is not None and len(index.group(1)) >= 12
                assert any(blob.startswith(index.group(1)) for blob in blobs[path])
                seen += 1
    assert seen == 1  # docs/source/mps_environment_variables.md, read whole


def _rebuilt_repo(repo: Path, names: list[str], candidates: list[str]) -> list[str]:
    """A git repository with one commit per record in ``names`` (its LinearAlgebra.mm rebuilt), beside the
    docs and test files rebuilt from pytorch/pytorch@39cc1c01 and @001544b6; the commits' SHAs."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    candidates = candidates + [line for text in _current()[1:] for line in _preimage(text)]
    shas = []
    for name in names:
        for record in (_records()[name], _records()["docs-39cc1c01"], _records()["test_mps-001544b6"]):
            target = repo / record["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(upstream_lines.rebuild(record, candidates))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"{record['repo']}@{record['commit'][:8]}")
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    return shas


@pytest.fixture
def project_copy(tmp_path, monkeypatch) -> Path:
    """A project with a copy of the series whose main base is unpinned and whose 0001 is the stale one."""
    project = tmp_path / "project"
    shutil.copytree(SERIES_DIR, project / "patches" / SERIES)
    manifest = project / "patches" / SERIES / "series.toml"
    text = manifest.read_text()
    pin = f'ref = "main"\ncommit = "{_main_base()["commit"]}"\n'
    assert text.count(pin) == 1
    manifest.write_text(text.replace(pin, 'ref = "main"\n'))
    first = project / "patches" / SERIES / "main" / _patches()[0].name
    first.write_text(stale_0001(first.read_text()))
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


def _linalg_pair(tmp_path) -> tuple[Path, str, str]:
    candidates = _preimage(_current()[0]) + _preimage(stale_0001(_current()[0]))
    repo = tmp_path / "upstream"
    old, new = _rebuilt_repo(repo, ["linalg-001077cb", "linalg-0d188885"], candidates)
    git(repo, "reset", "-q", "--hard", old)  # main: the older version; the newest is a dangling commit
    git(repo, "tag", "newest", new)
    return repo, old, new


def test_stale_context_check_then_rebase_names_file_and_hunk(tmp_path, project_copy, isolated_cache):
    repo, _, fresh = _linalg_pair(tmp_path)
    up = ["--upstream", str(repo)]
    ok = _harness(project_copy, "check", "--base", "main", *up)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    git(repo, "reset", "-q", "--hard", fresh)
    failed = _harness(project_copy, "check", "--base", "main", *up)
    assert failed.returncode == 1
    hunk = f"{LINALG}: hunk #1 `{STALE_0001_HEADER[:69]}` does not apply"
    assert f"check:   {hunk}" in failed.stdout, failed.stdout
    rebased = _harness(project_copy, "rebase", "--base", "main", "--onto", fresh, *up)
    assert rebased.returncode == 1, rebased.stderr
    assert "conflict: 0001-MPS-Add-PYTORCH_MPS_GEMM_PREFER_FAST_MATH-to-keep-GE.patch does not apply" in rebased.stdout
    assert f"conflict:   {hunk}" in rebased.stdout
    assert "--continue" in rebased.stdout
    with open(project_copy / "patches" / SERIES / "series.toml", "rb") as f:
        assert [b["ref"] for b in tomllib.load(f)["base"]] == ["v2.6.0", "main"]  # no variant written


def test_stale_context_rebase_merges_three_way_when_the_blob_is_known(tmp_path, project_copy, isolated_cache):
    repo, old, fresh = _linalg_pair(tmp_path)
    # what refresh writes after `apply` on a real checkout: an index line naming the base's blob
    blob = git(repo, "rev-parse", f"{old}:{LINALG}").strip()
    first = project_copy / "patches" / SERIES / "main" / _patches()[0].name
    header = f"diff --git a/{LINALG} b/{LINALG}\n"
    first.write_text(first.read_text().replace(header, f"{header}index {blob[:12]}..{'0' * 12} 100644\n", 1))
    rebased = _harness(project_copy, "rebase", "--base", "main", "--onto", fresh, "--upstream", str(repo))
    assert rebased.returncode == 0, rebased.stdout + rebased.stderr
    assert f"rebase: {SERIES} carried from main onto {fresh}" in rebased.stdout
    with open(project_copy / "patches" / SERIES / "series.toml", "rb") as f:
        bases = {b["ref"]: b for b in tomllib.load(f)["base"]}
    new = bases[fresh]
    assert new["notes"] == "rebased from main with 3-way merge" and new["commit"] == fresh
    patch = (project_copy / "patches" / SERIES / new.get("dir", fresh) / new["patches"][0]).read_text()
    # the merged patch takes the newest file's context: the MACOS_VER_14_4_PLUS line is gone from it
    assert OLD_CONTEXT not in patch and 'c10::utils::check_env("PYTORCH_MPS_GEMM_PREFER_FAST_MATH")' in patch


def _added(patch: Path) -> list[str]:
    return [line[1:] for line in patch.read_text().splitlines() if line.startswith("+") and not line.startswith("+++")]


def test_main_test_class_is_the_one_linted_on_real_v2_6_0_source():
    """The test class main's 0003 adds is, line for line, the one v2.6.0's 0003 adds, which
    tests/test_patch_series.py compiles and lints (flake8, ruff) inside Debian's real 2.6.0 tree."""
    main_added = _added(_patches()[2])
    v26 = SERIES_DIR / "v2.6.0" / "0003-MPS-Test-GEMMs-under-PREFER_METAL-GEMM_PREFER_FAST_M.patch"
    v26_added = _added(v26)
    assert [line for line in main_added if line.strip()] == [line for line in v26_added if line.strip()]
    assert len([line for line in main_added if line.strip()]) == 47
    # main's file has one blank line before the insertion point, v2.6.0's two: both end with two
    assert main_added[:2] == ["", "class TestGemmPreferFastMath(TestCaseMPS):"] and v26_added[0].startswith("class ")
    assert all(len(line) <= 120 for line in main_added)


def test_0003_asserts_the_path_from_the_profiler_and_the_harness_accuracy_bound():
    """0003's test (both bases) holds results to harness/bench/accuracy.py's float32 bound for its K, not bit for
    bit (MPSGraph may pick another GEMM kernel per process, pytorch issue 182815); it tells the Metal GEMMs from
    the profiler log lines harness/bench/kernels.py classifies as the `metal` route, and an MPSGraph line is not
    one; its first assertion is the warning's, the failure series.toml's fails_with declares for stock."""
    import ast

    from harness.bench import kernels
    from harness.bench.accuracy import bound

    for patch in (_patches()[2], SERIES_DIR / "v2.6.0" / _patches()[2].name):
        added = "\n".join(_added(patch))
        assert "atol=0" not in added and "bit-identical" not in added
        k = int(re.search(r"torch\.randn\(64, (\d+), device", added).group(1))
        rtol = float(re.search(r"^    RTOL = (\S+)$", added, re.MULTILINE).group(1))
        assert k == 96 and bound("float32", k) <= rtol <= 1.05 * bound("float32", k)
        prefixes = ast.literal_eval(re.search(r"^    METAL_GEMMS = (\(.*\))$", added, re.MULTILINE).group(1))
        assert sorted(p.removeprefix("aten::").rstrip(":") for p in prefixes) == ["addmm", "matmul", "naive_matmul"]

        def metal(line: str, prefixes: tuple[str, ...] = prefixes) -> bool:  # the test's own expression
            return line.startswith(prefixes) and "(id=K" in line

        assert 'line.startswith(self.METAL_GEMMS) and "(id=K" in line' in added
        for prefix in prefixes:
            line = f"{prefix}MPS:Float[64, 96]:MPS:Float[96, 80] (id=K3, run=1)"
            assert metal(line) and kernels.classify("mps", kernels.parse_mps([line])) == ("metal", "metal")
        graph = "aten::mm_out_mps_impl:f32[64,96]:f32[96,80] (id=G1, run=1)"
        assert not metal(graph) and kernels.classify("mps", kernels.parse_mps([graph]))[0] == "mpsgraph"
        body = added.split("def test_gemm_prefer_fast_math(self):", 1)[1]
        first = next(line.strip() for line in body.splitlines() if "self.assert" in line)
        assert first == "self.assertIn(warning, invalid[1])"
        fails_with = tomllib.loads((SERIES_DIR / "series.toml").read_text())["evidence"]["test"][0]["fails_with"]
        assert fails_with.startswith("AssertionError: 'Ignoring invalid value for boolean flag")


def _tree_file(archive: Path, name: str) -> bytes:
    import tarfile

    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isfile() and member.name.split("/", 1)[-1] == name:
                return tar.extractfile(member).read()
    raise AssertionError(f"{name} not in {archive}")


def _debian_file(store: Path, path: str) -> str | None:
    shown = subprocess.run(["git", f"--git-dir={store}", "show", f"v2.6.0:{path}"], capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


@pytest.mark.slow
def test_debian_records_are_derived_from_the_real_tree(debian_import, tmp_path):
    """The v2.6.0 records are what tools/upstream_lines.py derives from Debian's real files, and the real
    patches applied to the real files give the verdicts the records give."""
    patches = _by_path(_current())
    stale = _by_path([stale_0003(_current()[2])])
    expected = {_key(r): r["applies"] for r in _checked_reads()}
    debian = {name: r for name, r in _records().items() if r["repo"] == DEBIAN}
    assert sorted(debian) == ["docs-v2.6.0", "linalg-v2.6.0", "test_mps-v2.6.0"]
    for name, record in debian.items():
        text = _debian_file(debian_import, record["path"])
        if record.get("absent"):
            assert text is None
        else:
            (window,) = record["windows"]
            lines = text[window["start"] :].split("\n")[: len(window["lines"])]
            spec = {**record, "name": name, "start": window["start"], "to_end": window["to_end"]}
            assert upstream_lines.derive(spec, "\n".join(lines) + "\n")["windows"] == record["windows"]
            assert record["chars"] == len(text)
            (tmp_path / name / record["path"]).parent.mkdir(parents=True)
            (tmp_path / name / record["path"]).write_text(text)
        for texts, want in ((patches, expected[_key(record)]), (stale, False)):
            if record["path"] not in texts:
                continue
            (tmp_path / "p.patch").write_text(texts[record["path"]])
            (tmp_path / name).mkdir(exist_ok=True)
            real = subprocess.run(["git", "apply", "--check", str(tmp_path / "p.patch")], cwd=tmp_path / name)
            assert (real.returncode == 0) == want, (name, want)


@pytest.mark.slow
def test_main_cxx_change_is_clang_format_clean(tmp_path, debian_tarball):
    """clang-format (the version upstream's lint pins, see test_patch_series.py) with the real
    ``.clang-format`` of PyTorch 2.6.0 (main's was not read) leaves 0001's changed lines as they are,
    on the newest LinearAlgebra.mm window (rebuilt)."""
    import git as gitpython
    from test_patch_series import _changed_lines, _clang_format_diff

    repo = tmp_path / "upstream"
    _rebuilt_repo(repo, ["linalg-0d188885"], _preimage(_current()[0]))
    # placeholders as C++ comments, so that clang-format parses the rebuilt window as code
    source = repo / LINALG
    source.write_text(re.sub(r"(?m)^<<< (.*) >>>$", r"// \1", source.read_text()))
    (repo / ".clang-format").write_bytes(_tree_file(debian_tarball, ".clang-format"))
    git(repo, "add", ".clang-format", LINALG)
    git(repo, "commit", "-q", "-m", "clang-format config of 2.6.0")
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "apply", "--index", str(_patches()[0]))
    git(repo, "commit", "-q", "-m", "0001")
    ranges = _changed_lines(gitpython.Repo(repo), base, LINALG)
    assert ranges == [(17, 20)]
    text = (repo / LINALG).read_text()
    assert _clang_format_diff(repo, LINALG, text, ranges) == []
    bad = text.replace('("PYTORCH_MPS_PREFER_METAL") &&', '("PYTORCH_MPS_PREFER_METAL")&&', 1)
    assert bad != text and _clang_format_diff(repo, LINALG, bad, ranges) != []


@pytest.mark.slow
def test_main_0003_on_real_v2_6_0_compiles_and_passes_the_trees_linters(debian_import, tmp_path):
    """0003 anchored on the module tail puts the class after v2.6.0's instantiate calls: the result
    compiles, and flake8 and ruff with the tree's own configuration flag none of its lines."""
    from test_patch_series import _lint

    for path in (TEST_MPS, ".flake8", "pyproject.toml"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(_debian_file(debian_import, path))
    git(tmp_path, "apply", str(_patches()[2]))
    compiled = subprocess.run([sys.executable, "-m", "py_compile", TEST_MPS], capture_output=True, cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr
    lines = (tmp_path / TEST_MPS).read_text().splitlines()
    first = lines.index("class TestGemmPreferFastMath(TestCaseMPS):") + 1
    assert lines[first - 4 : first - 1] == ["instantiate_parametrized_tests(TestMPS)", "", ""]
    assert lines[-4:] == ["", "", 'if __name__ == "__main__":', "    run_tests()"]
    assert [f for f in _lint(tmp_path, TEST_MPS) if f[0] >= first - 2] == []
    # negative control: a violation on a line of the new class is reported by both linters
    probe = "test/_probe_test_mps.py"
    text = (tmp_path / TEST_MPS).read_text()
    bad = text.replace("        graph = self._run_gemms()\n", "        graph = self._run_gemms() ;\n", 1)
    assert bad != text
    (tmp_path / probe).write_text(bad)
    assert {msg.split()[0] for line, msg in _lint(tmp_path, probe) if line >= first} == {"flake8", "ruff"}
