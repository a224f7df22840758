"""harness.pr on the generated upstream (tests/small_upstream.py): checkout -> apply -> pr."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import git
from small_upstream import SERIES_NAME, make_series, make_upstream

from harness import cli
from harness.upstream import patched_branch, worktrees


@pytest.fixture
def identity(tmp_path, monkeypatch):
    """A private global git config (system config off); returns a function that sets user.name/email in it."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(name, raising=False)

    def set_identity(name: str, email: str) -> None:
        config.write_text(f"[user]\n\tname = {name}\n\temail = {email}\n")

    return set_identity


@pytest.fixture
def applied(tmp_path, project, isolated_cache, identity, capsys) -> Path:
    """tinyext + series tiny-fast-path, checked out and applied by the harness; returns the patched worktree."""
    repo = make_upstream(tmp_path / "up")
    make_series(repo, project / "patches")
    for command in ("checkout", "apply"):
        assert cli.main([command, "--series", SERIES_NAME, "--base", "v1.4.0"]) == 0, capsys.readouterr()
    capsys.readouterr()
    return worktrees(project / "work", "v1.4.0")[1]


def _pr(capsys, *extra: str) -> tuple[int, str, str]:
    rc = cli.main(["pr", "--series", SERIES_NAME, "--base", "v1.4.0", *extra])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_pr_branch_carries_the_configured_identity(applied, project, identity, capsys):
    identity("Ada Contributor", "ada@example.org")
    rc, out, err = _pr(capsys)
    assert rc == 0, err
    branch = f"pr/{SERIES_NAME}/v1.4.0"
    assert f"pr: branch {branch} (1 commit(s) by Ada Contributor <ada@example.org>)" in out
    authors = git(applied, "log", "--format=%an <%ae>|%cn <%ce>", f"v1.4.0..{branch}").splitlines()
    assert authors == ["Ada Contributor <ada@example.org>|Ada Contributor <ada@example.org>"]
    # same tree and message as the applied series commit; the series' own branch is untouched
    assert git(applied, "rev-parse", f"{branch}^{{tree}}") == git(applied, "rev-parse", "HEAD^{tree}")
    assert git(applied, "log", "-1", "--format=%B", branch) == git(applied, "log", "-1", "--format=%B", "HEAD")
    assert git(applied, "log", "-1", "--format=%an", "HEAD").strip() == "tiny"
    assert git(applied, "rev-parse", "--abbrev-ref", "HEAD").strip() == patched_branch(SERIES_NAME, "v1.4.0", applied)
    assert git(applied, "status", "--porcelain") == ""
    text = (applied.parent / "PR.md").read_text()
    title = "# tinyext: TINYEXT_PREFER_FAST_PATH prefers the fast path"
    assert text.startswith(f"{title}\n\nlets users opt in at run time.\n")
    assert "No evidence yet" in text and f"nox -s compare -- --series {SERIES_NAME} --base v1.4.0" in text
    assert f"git push <your-fork> {branch}" in text and "ghstack" in text


def test_pr_without_identity_is_one_line(applied, capsys):
    rc, out, err = _pr(capsys)
    assert rc == 2
    assert err.count("\n") == 1
    assert err.startswith("error: git user.name and user.email not set") and "git config --global" in err
    assert "pr/" not in git(applied, "branch", "--list", "pr/*")


def test_pr_refuses_the_harness_identity(applied, identity, capsys):
    identity("torch-patch-harness", "torch-patch-harness@users.noreply.github.com")
    rc, _, err = _pr(capsys)
    assert rc == 2 and "the harness's own address" in err and err.count("\n") == 1


def _results(root: Path, name: str, series: str, finished: str, report: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    data = {
        "run": {"command": ["python", "-m", "harness", "compare", "--out", str(folder)], "finished": finished},
        "builds": {
            "stock": {"build": {"series": None}},
            "patched": {"build": {"series": {"name": series, "hash": "0" * 64}}},
        },
    }
    (folder / "results.json").write_text(json.dumps(data))
    (folder / "report.md").write_text(report)
    return folder


def test_pr_md_quotes_the_newest_report_of_the_series(applied, project, identity, capsys):
    identity("Ada Contributor", "ada@example.org")
    root = project / "results"
    _results(root, "old", SERIES_NAME, "2026-01-01T00:00:00Z", "## old verdict\n")
    _results(root, "other", "another-series", "2026-12-31T00:00:00Z", "## not ours\n")
    block = "## Verdict: 1.25x faster (95% CI 1.20-1.31)\n\n"
    newest = _results(
        root,
        "new",
        SERIES_NAME,
        "2026-06-01T00:00:00Z",
        block + "<details><summary>all cells</summary>\nx\n</details>\n",
    )
    (root / "broken").mkdir()
    (root / "broken" / "results.json").write_text("{not json")
    rc, _, err = _pr(capsys)
    assert rc == 0, err
    text = (applied.parent / "PR.md").read_text()
    assert "## Verdict: 1.25x faster (95% CI 1.20-1.31)" in text
    assert "all cells" not in text and "old verdict" not in text and "not ours" not in text
    assert f"python -m harness compare --out {newest}" in text


def test_pr_before_apply_says_to_apply(tmp_path, project, isolated_cache, identity, capsys):
    identity("Ada Contributor", "ada@example.org")
    repo = make_upstream(tmp_path / "up")
    make_series(repo, project / "patches")
    rc, _, err = _pr(capsys)
    assert rc == 2 and "no patched worktree" in err and err.count("\n") == 1
    assert os.listdir(project / "patches") == [SERIES_NAME]
