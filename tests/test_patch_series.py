"""The mps-gemm-prefer-fast-math patch series, checked against Debian's real PyTorch 2.6.0 source.

What is checked:

- ``series.toml`` is consistent with the patch files (both bases): every listed patch exists and
  the paths its ``diff --git`` headers name are exactly ``files``.
- v2.6.0 (slow: fetches ``pytorch_2.6.0+dfsg`` with ``apt-get source``): ``python -m harness apply``
  ``git am``s the series onto the archive's import; ``git diff --stat`` lists exactly ``files``; the
  variable appears in exactly the files ``docs/mps-gemm-prefer-fast-math.md`` names, and is read
  with ``c10::utils::check_env`` inside ``use_metal_mm``; upstream's formatting holds for the
  changed lines: ``clang-format`` (the version the tree's lint pins) with the tree's
  ``.clang-format``, ``python -m py_compile``, ``flake8`` with the tree's ``.flake8`` and ``ruff``
  with the tree's ``pyproject.toml``. Each lint check has a negative control that must fail.
- The patched ``use_metal_mm`` static, compiled with the tree's ``check_env`` (g++), chooses Metal
  exactly when ``PYTORCH_MPS_PREFER_METAL`` is present and the new variable is not ``1``, reads the
  new variable only when ``PYTORCH_MPS_PREFER_METAL`` is present, and warns once per process on an
  invalid value.

The source comes from the session's ``debian_tarball`` fixture (tests/debian_source.py) and the series
is applied by the harness itself (``python -m harness apply``), the path a contributor takes.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import git
import pytest
from conftest import seed_import

from harness.paths import CACHE_ENV

REPO_ROOT = Path(__file__).resolve().parents[1]
SERIES = "mps-gemm-prefer-fast-math"
SERIES_DIR = REPO_ROOT / "patches" / SERIES
DOCS = REPO_ROOT / "docs" / "mps-gemm-prefer-fast-math.md"
VARIABLE = "PYTORCH_MPS_GEMM_PREFER_FAST_MATH"

CXX_SUFFIXES = {".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".m", ".mm", ".metal"}
LINT_LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<code>[A-Z]+[0-9]*) (?P<msg>.*)$")


# --------------------------------------------------------------------------- manifest (fast)


def _manifest() -> dict:
    with open(SERIES_DIR / "series.toml", "rb") as f:
        return tomllib.load(f)


def _base(ref: str) -> dict:
    (base,) = (b for b in _manifest()["base"] if b["ref"] == ref)
    return base


def _patch_paths(base: dict) -> list[Path]:
    return [SERIES_DIR / base.get("dir", base["ref"]) / name for name in base["patches"]]


def _paths_in_patch(text: str) -> set[str]:
    """Paths named by ``diff --git a/X b/X`` headers of one format-patch file."""
    return {m.group(2) for m in re.finditer(r"^diff --git a/(\S+) b/(\S+)$", text, re.MULTILINE)}


def test_manifest_names_the_series_and_its_variable():
    manifest = _manifest()
    assert manifest["name"] == SERIES == SERIES_DIR.name
    assert manifest["env"] == [VARIABLE]
    assert [b["ref"] for b in manifest["base"]] == ["v2.6.0", "main"]
    main = _base("main")
    assert re.fullmatch(r"[0-9a-f]{40}", main["commit"])
    reads = {r["path"]: r["commit"] for r in main["read"]}
    # every file the main series patches was read at a recorded commit
    assert set(main["files"]) <= set(reads)
    assert all(re.fullmatch(r"[0-9a-f]{40}", c) for c in reads.values())


@pytest.mark.parametrize("ref", ["v2.6.0", "main"])
def test_patches_touch_exactly_the_declared_files(ref):
    base = _base(ref)
    touched: set[str] = set()
    for patch in _patch_paths(base):
        text = patch.read_text()
        assert text.startswith("From "), f"{patch.name} is not git format-patch output"
        assert re.search(r"^Subject: \[PATCH \d+/\d+\]", text, re.MULTILINE), patch.name
        # each patch explains why before its diffstat
        header = text.split("\n---\n", 1)[0]
        assert "Why:" in header, f"{patch.name}: the commit message must say why"
        touched |= _paths_in_patch(text)
    assert touched == set(base["files"])
    assert any(VARIABLE in p.read_text() for p in _patch_paths(base))


def test_docs_name_every_patched_file_and_the_command_for_main():
    docs = DOCS.read_text()
    for ref in ("v2.6.0", "main"):
        for path in _base(ref)["files"]:
            assert Path(path).name in docs, f"{path} ({ref}) is not described in {DOCS.name}"
    assert "nox -s check -- --base main" in docs
    # the 8-combination tables: one row per combination of F, P, G, per base
    rows = re.findall(r"^\| (–|1) \| (–|1) \| (–|1) \|", docs, re.MULTILINE)
    assert len(rows) == 16 and len(set(rows)) == 8


# --------------------------------------------------------------------------- Debian source (slow)


@pytest.fixture(scope="module")
def patched_tree(debian_tarball, debian_import, tmp_path_factory) -> tuple[git.Repo, str]:
    """The v2.6.0 series applied by the harness itself (``python -m harness apply``, i.e.
    ``git am --3way`` into the ``patched`` worktree) on Debian's real 2.6.0 tree, in a cache of this
    module's own; returns (patched worktree repo, base sha)."""
    workdir = tmp_path_factory.mktemp("work")
    cache = tmp_path_factory.mktemp("cache")
    seed_import(cache, debian_import)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "apply",
            "--upstream",
            str(debian_tarball),
            "--base",
            "v2.6.0",
            "--series",
            SERIES,
            "--workdir",
            str(workdir),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, CACHE_ENV: str(cache)},
    )
    assert proc.returncode == 0, proc.stderr
    repo = git.Repo(workdir / "v2.6.0" / "patched")
    base = git.Repo(workdir / "v2.6.0" / "stock").head.commit.hexsha
    return repo, base


def _changed_lines(repo: git.Repo, base: str, path: str) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of ``path`` in HEAD that differ from ``base``."""
    diff = repo.git.diff("-U0", base, "HEAD", "--", path)
    ranges = []
    for m in re.finditer(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", diff, re.MULTILINE):
        start, count = int(m.group(1)), int(m.group(2) or 1)
        if count:
            ranges.append((start, start + count - 1))
    return ranges


@pytest.mark.slow
def test_series_applies_and_touches_exactly_the_declared_files(patched_tree):
    repo, base = patched_tree
    assert len(list(repo.iter_commits(f"{base}..HEAD"))) == len(_base("v2.6.0")["patches"])
    # upstream's title tag survives git am ("[PATCH 1/3]" is stripped, "[MPS]" kept)
    assert all(c.summary.startswith("[MPS] ") for c in repo.iter_commits(f"{base}..HEAD"))
    stat = repo.git.diff("--stat=1000", base, "HEAD").splitlines()
    stat_files = {line.split("|")[0].strip() for line in stat if "|" in line}
    assert stat_files == set(_base("v2.6.0")["files"])
    assert stat[-1].strip().startswith(f"{len(stat_files)} files changed")


@pytest.mark.slow
def test_variable_appears_exactly_where_the_docs_say(patched_tree):
    repo, base = patched_tree
    found = set(repo.git.grep("-l", VARIABLE, "HEAD", "--").replace("HEAD:", "").splitlines())
    assert found == {
        "aten/src/ATen/native/mps/operations/LinearAlgebra.mm",
        "docs/source/mps_environment_variables.rst",
        "test/test_mps.py",
    }
    docs = DOCS.read_text()
    assert all(path in docs for path in ("LinearAlgebra.mm", "mps_environment_variables.rst", "test/test_mps.py"))
    # the stock tree does not know the variable
    with pytest.raises(git.GitCommandError):
        repo.git.grep("-l", VARIABLE, base, "--")
    source = (Path(repo.working_tree_dir) / "aten/src/ATen/native/mps/operations/LinearAlgebra.mm").read_text()
    body = source.split("bool use_metal_mm(", 1)[1].split("\n}\n", 1)[0]
    # read once per process (function-local static) with check_env's 0/1 semantics, and only when
    # PREFER_METAL (which keeps its presence semantics) is set: && short-circuits the read
    assert (
        '  static bool always_use_metal = std::getenv("PYTORCH_MPS_PREFER_METAL") != nullptr &&\n'
        f'      c10::utils::check_env("{VARIABLE}") != true;\n'
    ) in body
    # the correctness fallback (macOS < 14.4, strides/sizes > 32768) still selects Metal
    assert "!is_macos_14_4_or_newer" in body
    assert "#include <c10/util/env.h>" in source


# --------------------------------------------------------------------------- formatting (slow)


def _tool(name: str) -> str:
    """A console script of this interpreter's environment (the ``test`` extra installs them)."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"{name} not found: install the test extra (pip install -e '.[test]')"
    return found


def _clang_format_diff(tree: Path, path: str, text: str, ranges: list[tuple[int, int]]) -> list[str]:
    """Unified diff between ``text`` and clang-format's output restricted to ``ranges`` ([] if clean)."""
    lines = [f"--lines={a}:{b}" for a, b in ranges]
    result = subprocess.run(
        [_tool("clang-format"), "--style=file", f"--assume-filename={path}", *lines],
        input=text,
        capture_output=True,
        text=True,
        cwd=tree,
        check=True,
    )
    return list(difflib.unified_diff(text.splitlines(), result.stdout.splitlines(), path, "clang-format", lineterm=""))


@pytest.mark.slow
def test_clang_format_version_is_the_one_upstream_lint_pins(patched_tree):
    repo, _ = patched_tree
    config = (Path(repo.working_tree_dir) / "tools/linter/adapters/s3_init_config.json").read_text()
    pinned = set(re.findall(r"/(\d+\.\d+\.\d+)/clang-format\"", config))
    assert len(pinned) == 1, f"cannot read one clang-format version from s3_init_config.json: {pinned}"
    out = subprocess.run([_tool("clang-format"), "--version"], capture_output=True, text=True, check=True).stdout
    assert re.search(r"version (\d+\.\d+\.\d+)", out).group(1) == pinned.pop()


@pytest.mark.slow
def test_changed_cxx_lines_are_clang_format_clean(patched_tree):
    repo, base = patched_tree
    tree = Path(repo.working_tree_dir)
    cxx = [p for p in _base("v2.6.0")["files"] if Path(p).suffix in CXX_SUFFIXES]
    assert cxx == ["aten/src/ATen/native/mps/operations/LinearAlgebra.mm"]
    for path in cxx:
        ranges = _changed_lines(repo, base, path)
        assert ranges, f"{path}: no changed lines found"
        text = (tree / path).read_text()
        assert _clang_format_diff(tree, path, text, ranges) == []
        # negative control: the same check flags a mis-formatted changed line
        bad = text.replace('("PYTORCH_MPS_PREFER_METAL") != nullptr &&', '("PYTORCH_MPS_PREFER_METAL") != nullptr&&', 1)
        assert bad != text and _clang_format_diff(tree, path, bad, ranges) != []


def _lint(tree: Path, path: str) -> list[tuple[int, str]]:
    """(line, code) of every flake8 and ruff finding in ``path``, each with the tree's configuration."""
    findings = []
    commands = [
        [sys.executable, "-m", "flake8", "--config", ".flake8", path],
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--config",
            "pyproject.toml",
            "--output-format",
            "concise",
            path,
        ],
    ]
    for command in commands:
        result = subprocess.run(command, capture_output=True, text=True, cwd=tree)
        assert result.returncode in (0, 1), f"{command[2]} failed: {result.stderr}"
        for line in result.stdout.splitlines():
            m = LINT_LINE.match(line)
            if m:
                findings.append((int(m.group("line")), f"{command[2]} {m.group('code')} {m.group('msg')}"))
    return findings


def _in_ranges(line: int, ranges: list[tuple[int, int]]) -> bool:
    return any(a <= line <= b for a, b in ranges)


@pytest.mark.slow
def test_changed_test_lines_compile_and_pass_the_trees_linters(patched_tree):
    repo, base = patched_tree
    tree = Path(repo.working_tree_dir)
    path = "test/test_mps.py"
    compiled = subprocess.run([sys.executable, "-m", "py_compile", path], capture_output=True, text=True, cwd=tree)
    assert compiled.returncode == 0, compiled.stderr
    ranges = _changed_lines(repo, base, path)
    assert ranges
    assert [f for f in _lint(tree, path) if _in_ranges(f[0], ranges)] == []
    # negative control: a violation on a changed line is reported by both linters
    probe = "test/_probe_test_mps.py"
    text = (tree / path).read_text()
    bad = text.replace("        graph = self._run_gemms()\n", "        graph = self._run_gemms() ;\n", 1)
    assert bad != text
    (tree / probe).write_text(bad)
    try:
        flagged = {msg.split()[0] for line, msg in _lint(tree, probe) if _in_ranges(line, ranges)}
    finally:
        (tree / probe).unlink()
    assert flagged == {"flake8", "ruff"}


# --------------------------------------------------------------------------- semantics (slow)

PREDICATE_PROGRAM = """\
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

namespace c10::utils {
// Stand-ins for get_env (env.cpp, minus the mutex) and TORCH_WARN (prints like a warning).
std::optional<std::string> get_env(const char* name) noexcept {
  const char* value = std::getenv(name);
  return value ? std::optional<std::string>(value) : std::nullopt;
}
bool has_env(const char* name) noexcept {
  return get_env(name).has_value();
}
template <typename... Args>
void torch_warn(const Args&... args) {
  std::cerr << "Warning: ";
  (std::cerr << ... << args);
  std::cerr << std::endl;
}
#define TORCH_WARN(...) torch_warn(__VA_ARGS__)
// check_env, verbatim from the tree's c10/util/env.cpp:
@CHECK_ENV@
} // namespace c10::utils

// The static initialisers of use_metal_mm, verbatim from the patched LinearAlgebra.mm:
bool always_use_metal_for_gemm() {
@STATICS@
  return always_use_metal;
}

int main() {
  std::printf("%d %d\\n", always_use_metal_for_gemm(), always_use_metal_for_gemm());
}
"""


@pytest.mark.slow
def test_patched_predicate_follows_the_documented_semantics(patched_tree, tmp_path):
    """Compile the patched ``use_metal_mm`` statics with the tree's ``check_env`` and run every case."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("needs a C++17 compiler (g++) to compile the patched predicate")
    repo, _ = patched_tree
    tree = Path(repo.working_tree_dir)
    env_cpp = (tree / "c10/util/env.cpp").read_text()
    check_env = "std::optional<bool> check_env(" + env_cpp.split("std::optional<bool> check_env(", 1)[1]
    check_env = check_env.split("\n}\n", 1)[0] + "\n}\n"
    body = (tree / "aten/src/ATen/native/mps/operations/LinearAlgebra.mm").read_text()
    body = body.split("bool use_metal_mm(", 1)[1].split("\n}\n", 1)[0]
    # the one static statement that reads both variables (it spans two lines)
    statics = re.findall(r"(?m)^  static bool always_use_metal = [^;]*;$", body)
    assert len(statics) == 1 and VARIABLE in statics[0], statics
    source = tmp_path / "predicate.cpp"
    source.write_text(PREDICATE_PROGRAM.replace("@CHECK_ENV@", check_env).replace("@STATICS@", "\n".join(statics)))
    binary = tmp_path / "predicate"
    subprocess.run([compiler, "-std=c++17", "-Wall", "-Wextra", "-Werror", str(source), "-o", str(binary)], check=True)

    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_MPS_PREFER_METAL", VARIABLE)}
    for prefer_metal in (None, "1", "0", ""):
        for gemm in (None, "1", "0", "yes", ""):
            env = dict(base_env)
            if prefer_metal is not None:
                env["PYTORCH_MPS_PREFER_METAL"] = prefer_metal
            if gemm is not None:
                env[VARIABLE] = gemm
            run = subprocess.run([str(binary)], env=env, capture_output=True, text=True, check=True)
            case = f"PREFER_METAL={prefer_metal!r} {VARIABLE}={gemm!r}"
            # PREFER_METAL counts by presence (even "0" or ""); only the value "1" of the new variable masks it
            expected = int(prefer_metal is not None and gemm != "1")
            assert run.stdout.split() == [str(expected)] * 2, case
            # read only where it matters (PREFER_METAL set), once per process: at most one warning
            # although the predicate ran twice, and none at all without PREFER_METAL
            invalid = gemm not in (None, "0", "1") and prefer_metal is not None
            warning = f"Ignoring invalid value for boolean flag {VARIABLE}"
            assert run.stderr.count(warning) == int(invalid), f"{case}: {run.stderr!r}"
