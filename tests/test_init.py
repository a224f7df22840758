"""``init``: a new series (patches + commented series.toml) from the commits on the patched worktree."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from conftest import git
from small_upstream import MARKER, make_upstream

from harness import cli, newseries
from harness.manifest import load_series
from harness.upstream import worktrees

_CONFIG = """\
#include <cstdlib>
#include <cstring>
#include "tiny.h"
// Build-time and run-time switches.
int tiny_prefer_fast_path() {
  const char* value = std::getenv("TINYEXT_PREFER_FAST_PATH");
  return value != nullptr && std::strcmp(value, "1") == 0;
}
"""
#: the new test reads the variable, and one of its own, which is no marker (the library never reads it)
_TEST = (
    "import os\nimport tinyext\n\n\ndef test_x():\n"
    '    assert os.environ.get("TINYEXT_TEST_ONLY") or tinyext.prefer_fast_path() is True\n'
)
#: a docs row naming the new variable, and a PyTorch-style name no added code reads
_DOCS = f"| variable | meaning |\n|---|---|\n| `{MARKER}` | 1: the fast path (unlike PYTORCH_DOCS_ONLY_NAME) |\n"
#: an added line that reads a variable the base already reads (setup.py: PYTORCH_BUILD_VERSION): not a marker
_SETUP_LINE = '\nassert os.getenv("PYTORCH_BUILD_VERSION") is None or VERSION\n'


def _run(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture
def committed(tmp_path, project, capsys) -> Path:
    """tinyext (and a tag v1.5.0 that changes another file) checked out at v1.4.0 with one commit on the detached
    patched worktree: the variable in src/config.cpp, a docs row, a new test file and a setup.py line reading a
    variable the base already has."""
    upstream = make_upstream(tmp_path / "up")
    (upstream / "src" / "add.cpp").write_text(
        '#include "tiny.h"\n// Adds.\ndouble tiny_add(double a, double b) { return a + b; }\n'
    )
    git(upstream, "commit", "-q", "-am", "v1.5.0: another file moves")
    git(upstream, "tag", "v1.5.0")
    rc, _, err = _run(capsys, "checkout", "--upstream", str(upstream), "--base", "v1.4.0")
    assert rc == 0, err
    _, patched = worktrees("work", "v1.4.0")
    (patched / "src" / "config.cpp").write_text(_CONFIG)
    (patched / "docs").mkdir()
    (patched / "docs" / "env.md").write_text(_DOCS)
    (patched / "test").mkdir()
    (patched / "test" / "test_fast_path.py").write_text(_TEST)
    with (patched / "setup.py").open("a") as f:
        f.write(_SETUP_LINE)
    git(patched, "add", "-A")
    git(patched, "commit", "-q", "-m", f"config: {MARKER}=1 prefers the fast path", "-m", "Why: opt in.")
    return patched


def test_init_writes_a_series_that_loads_and_checks(committed, project, capsys):
    rc, out, err = _run(capsys, "init", "--series", "my-fast", "--base", "v1.4.0")
    assert rc == 0, err
    assert "check: 0001-config-TINYEXT_PREFER_FAST_PATH-1-prefers-the-fast-p.patch: applies" in out
    assert f"check: my-fast at v1.4.0 ({git(committed, 'rev-parse', 'v1.4.0').strip()[:12]}): ok" in out
    series = load_series("my-fast")
    entry = series.base("v1.4.0")
    assert series.title == f"config: {MARKER}=1 prefers the fast path"
    assert entry.commit == git(committed, "rev-parse", "v1.4.0").strip()
    assert entry.files == ("docs/env.md", "setup.py", "src/config.cpp", "test/test_fast_path.py")
    assert series.evidence.markers == (MARKER,)  # not PYTORCH_BUILD_VERSION (base has it), not the docs-only name
    text = (project / "patches" / "my-fast" / "series.toml").read_text()
    assert "# not markers: PYTORCH_BUILD_VERSION" in text
    assert "quoted by no added code: PYTORCH_DOCS_ONLY_NAME" in text
    assert series.evidence.device["cpu"]["configs"] == ["default", "tinyext_prefer_fast_path"]
    assert [c.env for c in series.evidence.profiles("cpu") if c.name == "tinyext_prefer_fast_path"] == [{MARKER: "1"}]
    sides = [
        (c.name, f"{c.a.build}/{c.a.config}", f"{c.b.build}/{c.b.config}", c.claim) for c in series.evidence.contrasts
    ]
    assert sides == [
        (
            "the change under its config (tinyext_prefer_fast_path)",
            "patched/tinyext_prefer_fast_path",
            "stock/tinyext_prefer_fast_path",
            "faster",
        ),
        ("no regression with it off", "patched/default", "stock/default", "unchanged"),
    ]
    [test] = series.evidence.tests
    assert (test.file, test.env, test.expect) == (
        "test/test_fast_path.py",
        {MARKER: "1"},
        {"stock": "fail", "patched": "pass"},
    )
    # every line that sets a key says what it is
    keys = [ln for ln in text.splitlines() if ln and not ln.startswith(("#", " ", "]", "[")) and "=" in ln]
    assert len(keys) > 20 and [ln for ln in keys if "  # " not in ln] == []
    # the patch is the commit's format-patch, and the worktree carries the series: check passes, apply is a no-op
    assert _run(capsys, "check", "--series", "my-fast")[0] == 0
    rc, out, _ = _run(capsys, "apply", "--series", "my-fast")
    assert (rc, "is already applied" in out) == (0, True)
    assert git(committed, "status", "--porcelain") == ""


def test_rebase_of_an_init_series_keeps_the_bases_together(committed, project, capsys):
    """rebase writes its [[base]] after the last one, above [evidence] and the comment that opens it."""
    assert _run(capsys, "init", "--series", "my-fast", "--base", "v1.4.0")[0] == 0
    rc, out, err = _run(capsys, "rebase", "--series", "my-fast", "--onto", "v1.5.0")
    assert rc == 0, err
    assert out.splitlines()[-1].startswith("check: my-fast at v1.5.0 (") and out.endswith("): ok\n")
    text = (project / "patches" / "my-fast" / "series.toml").read_text()
    headers = [ln.split("  #")[0] for ln in text.splitlines() if ln.startswith("[")]
    assert headers[:3] == ["[[base]]", "[[base]]", "[evidence]"], headers
    assert text.index('ref = "v1.5.0"') < text.index("# What `compare` measures") < text.index("[evidence]\n")
    series = load_series("my-fast")
    assert [b.ref for b in series.bases] == ["v1.4.0", "v1.5.0"] and series.evidence.markers == (MARKER,)


def test_init_proposes_markers_from_lookups_and_docs():
    added = {
        "aten/src/ATen/native/mps/operations/LinearAlgebra.mm": [
            '  static const bool on = c10::utils::check_env("PYTORCH_MPS_GEMM_PREFER_FAST_MATH") == true;',
            '  auto v = c10::utils::get_env("PYTORCH_OTHER");',
        ],
        "torch/x.py": ['if os.environ.get("TORCH_PY_FLAG"):', '    FLAG = "TORCH_QUOTED"'],
        "docs/source/mps_environment_variables.md": [
            "| PYTORCH_MPS_GEMM_PREFER_FAST_MATH | x |",
            "TORCH_QUOTED, TORCH_ONLY_DOCS",
        ],
    }
    markers, docs_only = newseries.proposed_markers(added)
    assert markers == ["PYTORCH_MPS_GEMM_PREFER_FAST_MATH", "PYTORCH_OTHER", "TORCH_PY_FLAG", "TORCH_QUOTED"]
    assert docs_only == ["TORCH_ONLY_DOCS"]
    assert newseries.device_of(list(added)) == "mps"
    assert newseries.device_of(["aten/src/ATen/native/cuda/Blas.cpp"]) == "cuda"
    assert newseries.device_of(["src/config.cpp"]) == "cpu"
    assert newseries.new_tests(["test/test_mps.py", "test/data.json", "torch/x.py", "pkg/test_y.py"]) == [
        "test/test_mps.py",
        "pkg/test_y.py",
    ]


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_init_never_writes_into_an_existing_folder(committed, project, capsys):
    folder = project / "patches" / "my-fast"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    rc, _, err = _run(capsys, "init", "--series", "my-fast", "--base", "v1.4.0")
    assert rc == 2
    assert err.strip() == (
        "error: patches/my-fast already exists: init never writes into an existing series -- change that series "
        "with `refresh`, or pick another --series name"
    )
    assert _tree(folder) == {"notes.txt": b"mine\n"}
    assert sorted(p.name for p in (project / "patches").iterdir()) == ["my-fast"]  # no staging folder left


@pytest.mark.parametrize(
    "setup, expected",
    [
        (lambda p: git(p, "reset", "-q", "--hard", "HEAD~1"), "has no commits on top of v1.4.0"),
        (lambda p: (p / "src" / "add.cpp").write_text("// edit\n"), "has uncommitted changes: src/add.cpp"),
        (lambda p: None, "is not a series name"),
        (lambda p: None, "no patched worktree of v9"),
    ],
    ids=["no-commits", "dirty", "bad-name", "no-worktree"],
)
def test_init_refusals_are_one_line_and_write_nothing(committed, project, capsys, setup, expected):
    setup(committed)
    name = "my fast" if expected == "is not a series name" else "my-fast"
    base = "v9" if "v9" in expected else "v1.4.0"
    rc, out, err = _run(capsys, "init", "--series", name, "--base", base)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert sorted((project / "patches").iterdir()) == []


def test_init_refuses_a_series_that_does_not_check(committed, project, capsys, monkeypatch):
    """Planted: the files key of the skeleton misses a file -> check fails -> nothing is written."""
    real = newseries.skeleton
    monkeypatch.setattr(newseries, "skeleton", lambda *a: real(*a).replace('    "setup.py",\n', ""))
    rc, _, err = _run(capsys, "init", "--series", "my-fast", "--base", "v1.4.0")
    assert rc == 2 and "do not apply as patches at v1.4.0: files:" in err, err
    assert sorted((project / "patches").iterdir()) == []


def test_skeleton_parses_without_markers_or_tests():
    facts = newseries.DiffFacts(["a.txt"], [], [], [], [])
    text = newseries.skeleton("x", "t", "u", "v1", "0" * 40, "v1", ["0001-a.patch"], facts)
    data = tomllib.loads(text)
    assert data["evidence"]["cpu"]["configs"] == ["default"]
    assert [c["a"] for c in data["evidence"]["contrast"]] == ["patched/default"]
    assert "# markers = []" in text and "test" not in data["evidence"]
    assert data["evidence"]["contrast"][0]["name"] == "no regression"


def test_a_marker_named_like_a_generic_config_gets_its_full_name():
    """TORCH_NO_VEC would be config no_vec, the generic cpu config: it keeps its whole name."""
    facts = newseries.DiffFacts(["src/x.cpp"], ["TORCH_NO_VEC", "PYTORCH_FAST"], [], [], [])
    data = tomllib.loads(newseries.skeleton("x", "t", "u", "v1", "0" * 40, "v1", ["0001-a.patch"], facts))
    assert data["evidence"]["cpu"]["configs"] == ["default", "torch_no_vec", "fast"]
    assert data["evidence"]["contrast"][-1]["name"] == "no regression with them off"
    assert data["evidence"]["cpu"]["env"] == {"torch_no_vec": {"TORCH_NO_VEC": "1"}, "fast": {"PYTORCH_FAST": "1"}}


def test_init_from_a_branch_of_yours_leaves_it_and_carries_the_series(committed, project, capsys):
    git(committed, "checkout", "-q", "-b", "mine")
    head = git(committed, "rev-parse", "HEAD").strip()
    rc, out, err = _run(capsys, "init", "--series", "my-fast", "--base", "v1.4.0")
    assert rc == 0, err
    branch = git(committed, "symbolic-ref", "--short", "HEAD").strip()
    assert branch.startswith("patched/my-fast/v1.4.0-") and f"init: {branch} carries the series" in out
    assert git(committed, "rev-parse", "mine").strip() == head == git(committed, "rev-parse", "HEAD").strip()
    assert "is already applied" in _run(capsys, "apply", "--series", "my-fast")[1]
