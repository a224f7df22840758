"""What the series commands say on an archive upstream and on a bad ref: the pin of an imported archive, the
option a bad ``rebase --onto`` names, ``pr`` on an archive base (how to reach a git upstream) and PR.md of a
run made with ``--series`` on builds that carry no series."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from conftest import export_series, git

from harness import cli
from harness.upstream import worktrees


def _run(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.fixture
def archive(tiny_upstream, tmp_path) -> Path:
    """tiny_upstream's v1 as a source archive (version.txt 1.0.0a0: imported as tag v1.0.0)."""
    path = tmp_path / "tiny-1.0.0.tar.gz"
    git(tiny_upstream, "archive", "--format=tar.gz", "--prefix=tiny-1.0.0/", "-o", str(path), "v1")
    return path


def _import_commit(capsys, archive: Path) -> str:
    rc, out, err = _run(capsys, "checkout", "--upstream", str(archive), "--base", "v1.0.0")
    assert rc == 0, err
    stock, _ = worktrees("work", "v1.0.0")
    return git(stock, "rev-parse", "HEAD").strip()


def test_a_pin_that_is_the_archives_import_commit_says_nothing(tiny_upstream, archive, project, capsys):
    commit = _import_commit(capsys, archive)
    export_series(tiny_upstream, project, base="v1.0.0", extra=f'commit = "{commit}"\n')
    for command in ("check", "apply", "refresh"):
        rc, _, err = _run(capsys, command, "--series", "demo", "--upstream", str(archive))
        assert rc == 0, err
        assert "pinned commit" not in err, (command, err)


def test_a_pin_that_is_not_the_import_commit_is_named_as_not_checked(tiny_upstream, archive, project, capsys):
    commit = _import_commit(capsys, archive)
    pin = git(tiny_upstream, "rev-parse", "v1").strip()  # the git upstream's commit of the same tree
    export_series(tiny_upstream, project, base="v1.0.0", extra=f'commit = "{pin}"\n')
    rc, _, err = _run(capsys, "check", "--series", "demo", "--upstream", str(archive))
    assert rc == 0
    assert (
        f"series: pinned commit of v1.0.0 ({pin[:12]}) not checked: the archive upstream's v1.0.0 is its own "
        f"import commit ({commit[:12]}), never a git upstream's"
    ) in err


def test_a_bad_onto_names_onto(tiny_upstream, project, capsys):
    export_series(tiny_upstream, project)
    rc, out, err = _run(capsys, "rebase", "--series", "demo", "--onto", "v9")
    assert rc == 2
    [line] = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: --onto ref 'v9' is not in the upstream ")
    assert line.endswith("-- pass --onto as a tag, branch or SHA that exists upstream")
    rc, _, err = _run(capsys, "check", "--series", "demo", "--base", "v1", "--upstream", str(tiny_upstream))
    assert rc == 0, err


@pytest.fixture
def identity(tmp_path, monkeypatch):
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Ada Contributor\n\temail = ada@example.org\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(name, raising=False)


def _aa_run(root: Path, series: str) -> Path:
    """results.json of a finished A/A compare made with ``--series``: python: builds (no build manifest)."""
    folder = root / "aa"
    folder.mkdir(parents=True)
    data = {
        "run": {"command": ["python", "-m", "harness", "compare", "--series", series], "finished": "2026-12-01T00:00Z"},
        "builds": {"stock": {"build": {"kind": "python"}}, "patched": {"build": {"kind": "python"}}},
        "evidence": {"series": series, "markers": []},
    }
    (folder / "results.json").write_text(json.dumps(data))
    (folder / "report.md").write_text("## A/A verdicts\n")
    return folder


def test_pr_on_an_archive_base_says_how_to_reach_a_git_upstream(tiny_upstream, archive, project, identity, capsys):
    _import_commit(capsys, archive)
    export_series(tiny_upstream, project, base="v1.0.0")
    assert _run(capsys, "apply", "--series", "demo", "--upstream", str(archive))[0] == 0
    rc, out, err = _run(capsys, "pr", "--series", "demo", "--upstream", str(archive))
    assert rc == 0, err
    assert "push <your-fork>" not in out
    assert "an imported archive: its one import commit shares no history with a git upstream" in out
    [line] = [ln for ln in out.splitlines() if ln.startswith("  nox -s rebase -- ")]
    args = shlex.split(line.removeprefix("  nox -s rebase -- "))
    parsed = cli.build_parser("rebase").parse_args(args)
    assert (parsed.base, parsed.onto, parsed.upstream) == ("v1.0.0", "main", str(tiny_upstream))
    assert "git am -3 patches/demo/v1.0.0/*.patch" in out


def test_pr_md_names_a_run_made_with_series_on_builds_without_it(tiny_upstream, project, identity, capsys):
    """An A/A compare with --series records the series in evidence.series only: it names the series."""
    export_series(tiny_upstream, project)
    assert _run(capsys, "apply", "--series", "demo")[0] == 0
    _aa_run(project / "results", "demo")
    rc, _, err = _run(capsys, "pr", "--series", "demo")
    assert rc == 0, err
    text = (project / "work" / "v1" / "PR.md").read_text()
    assert "no results under" not in text  # the A/A run names the series: said what it is, not quoted
    assert "`results/aa`, were made with `--series demo` on builds that carry no series" in text
    assert "A/A verdicts" not in text


def test_init_on_an_archive_needs_upstream_and_pins_the_import_commit(archive, project, capsys):
    commit = _import_commit(capsys, archive)
    _, patched = worktrees("work", "v1.0.0")
    (patched / "a.txt").write_text((patched / "a.txt").read_text().replace("line 5\n", "line 5 mine\n"))
    git(patched, "commit", "-q", "-am", "a: mine")
    rc, _, err = _run(capsys, "init", "--series", "mine", "--base", "v1.0.0")
    assert rc == 2 and "(an imported archive has no URL) -- pass --upstream" in err, err
    assert list((project / "patches").iterdir()) == []
    rc, _, err = _run(capsys, "init", "--series", "mine", "--base", "v1.0.0", "--upstream", str(archive))
    assert rc == 0, err
    text = (project / "patches" / "mine" / "series.toml").read_text()
    assert f'upstream = "{archive}"' in text and f'commit = "{commit}"' in text
    rc, _, err = _run(capsys, "check", "--series", "mine")  # the pin is the import commit: nothing to say
    assert rc == 0 and "pinned commit" not in err, err
