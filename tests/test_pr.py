"""harness.pr on the generated upstream (tests/small_upstream.py): checkout -> apply -> pr; PR.md of the real
MPS series; every command pr prints goes through the real parser (harness.cli)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from conftest import git
from small_upstream import MARKER, SERIES_NAME, make_series, make_upstream

from harness import cli
from harness import plan as planning
from harness.commands import run as run_command
from harness.errors import SeriesError, UsageError
from harness.manifest import load_series
from harness.pr import pr_block, pr_markdown
from harness.upstream import patched_branch, worktrees

REPO = Path(__file__).resolve().parents[1]


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
    assert "Not measured yet" in text
    # the body is the pull request's: how to push and how to make evidence go to stdout
    assert "git push" not in text and "ghstack" not in text and "nox -s" not in text and "Pushing" not in text
    assert f"push <your-fork> {branch}" in out and "ghstack" in out
    # no wheels in dist/ yet: the two builds, each accepted by build's parser (the nox session adds --kind),
    # then one compare on the folder they write to, accepted by compare's parser
    builds = _printed(out, "nox -s build_")
    assert [b[0] for b in builds] == ["nox -s build_stock", "nox -s build_patched"]
    dists = []
    for session, args in builds:
        parsed = cli.build_parser("build").parse_args(["--kind", session.removeprefix("nox -s build_"), *args])
        assert (parsed.series, parsed.base, parsed.dist) == (SERIES_NAME, "v1.4.0", Path("dist"))
        dists.append((parsed.kind, parsed.dist))
    ((session, args),) = _printed(out, "nox -s compare")
    compare = cli.build_parser("compare").parse_args(args)
    assert out.index("nox -s build_patched") < out.index("nox -s compare")
    assert (compare.stock, compare.patched) == ("dist/", "dist/")
    assert (compare.series, compare.device, compare.out) == (
        SERIES_NAME,
        "cpu",
        Path("results") / f"{SERIES_NAME}-v1.4.0",
    )
    # the builds finish: a wheel and its manifest where each build command writes; the compare as printed
    # takes exactly those (its plan, as `compare` makes it: nothing runs)
    series = load_series(project / "patches" / SERIES_NAME)
    base_sha = git(applied, "rev-parse", "v1.4.0^{commit}").strip()
    want = {"name": SERIES_NAME, "hash": series.hash_of(series.base("v1.4.0"))}
    made = {
        kind: _wheel(
            dist,
            f"tinyext-1.4.0+{kind}-py3-none-any.whl",
            kind,
            base_sha,
            want if kind == "patched" else None,
            "2026-01-02T00:00:00",
        )
        for kind, dist in dists
    }
    planned = planning.plan(run_command.request(compare, {"stock": compare.stock, "patched": compare.patched}))
    assert {role: build.value for role, build in planned.builds.items()} == {
        k: str(w.resolve()) for k, w in made.items()
    }
    # pr again: nothing to build, the same compare command
    rc, again, err = _pr(capsys)
    assert rc == 0, err
    assert "nox -s build_" not in again and _printed(again, "nox -s compare") == [(session, args)]


def _printed(out: str, prefix: str) -> list[tuple[str, list[str]]]:
    """The commands ``out`` prints that start with ``prefix``: (``nox -s SESSION``, the arguments after ``--``)."""
    found = []
    for line in out.splitlines():
        if line.strip().startswith(prefix):
            words = shlex.split(line)
            cut = words.index("--")
            found.append((" ".join(words[:cut]), words[cut + 1 :]))
    return found


def _wheel(dist: Path, name: str, kind: str, base_sha: str, series: dict | None, end: str) -> Path:
    """A wheel file and its build manifest (harness.build's ``<wheel>.build.json`` keys that pr reads)."""
    dist.mkdir(parents=True, exist_ok=True)
    wheel = dist / name
    wheel.write_bytes(b"PK")
    inputs = {"kind": kind, "base_sha": base_sha, "series": series}
    (dist / f"{name}.build.json").write_text(json.dumps({"schema": 1, "inputs": inputs, "end": end}))
    return wheel


def test_pr_without_evidence_prints_a_compare_command_the_parser_accepts(applied, project, identity, capsys):
    identity("Ada Contributor", "ada@example.org")
    series = load_series(project / "patches" / SERIES_NAME)
    want = {"name": SERIES_NAME, "hash": series.hash_of(series.base("v1.4.0"))}
    base_sha = git(applied, "rev-parse", "v1.4.0^{commit}").strip()
    dist = project / "dist"
    stock = _wheel(dist, "tinyext-1.4.0+stock-py3-none-any.whl", "stock", base_sha, None, "2026-01-02T00:00:00")
    patched = _wheel(dist, "tinyext-1.4.0+tiny-py3-none-any.whl", "patched", base_sha, want, "2026-01-02T00:00:00")
    # planted: an older patched wheel, one of a stale series hash, and a stock wheel of another base
    _wheel(dist, "old-py3-none-any.whl", "patched", base_sha, want, "2026-01-01T00:00:00")
    _wheel(dist, "stale-py3-none-any.whl", "patched", base_sha, {**want, "hash": "0" * 64}, "2026-12-31T00:00:00")
    _wheel(dist, "other-py3-none-any.whl", "stock", "1" * 40, None, "2026-12-31T00:00:00")
    rc, out, err = _pr(capsys)
    assert rc == 0, err
    ((session, args),) = _printed(out, "nox -s compare")
    assert session == "nox -s compare" and "nox -s build_" not in out
    parsed = cli.build_parser("compare").parse_args(args)  # raises UsageError on an option compare rejects
    assert (parsed.stock, parsed.patched) == ("dist/", "dist/")
    assert (parsed.series, parsed.device, parsed.out) == (SERIES_NAME, "cpu", Path("results") / f"{SERIES_NAME}-v1.4.0")
    planned = planning.plan(run_command.request(parsed, {"stock": parsed.stock, "patched": parsed.patched}))
    assert (planned.builds["stock"].value, planned.builds["patched"].value) == (str(stock), str(patched))
    # the old bug: `--base` is not a compare option, and the parser says so
    with pytest.raises(UsageError, match="unrecognized arguments: --base"):
        cli.build_parser("compare").parse_args([*args, "--base", "v1.4.0"])
    # planted: a newer patched wheel of the series at another base commit: the folder would give that one, so
    # pr names this base's wheels by their paths
    _wheel(dist, "newer-py3-none-any.whl", "patched", "2" * 40, want, "2026-06-01T00:00:00")
    rc, out, err = _pr(capsys)
    assert rc == 0, err
    ((_, args),) = _printed(out, "nox -s compare")
    parsed = cli.build_parser("compare").parse_args(args)
    assert (parsed.stock, parsed.patched) == (str(Path("dist") / stock.name), str(Path("dist") / patched.name))


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


def _current_hash(project: Path) -> str:
    series = load_series(project / "patches" / SERIES_NAME)
    return series.hash_of(series.base("v1.4.0"))


def _results(
    root: Path, name: str, series: str, finished: str | None, report: str, series_hash: str = "0" * 64
) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    data = {
        "run": {
            "command": ["python", "-m", "harness", "compare", "--out", str(folder)],
            "started": "2026-12-31T00:00:00Z",
            "finished": finished,
        },
        "builds": {
            "stock": {"build": {"series": None}},
            "patched": {"build": {"series": {"name": series, "hash": series_hash}}},
        },
    }
    (folder / "results.json").write_text(json.dumps(data))
    (folder / "report.md").write_text(report)
    return folder


def test_pr_md_quotes_the_newest_report_of_the_series(applied, project, identity, capsys):
    identity("Ada Contributor", "ada@example.org")
    root, now = project / "results", _current_hash(project)
    _results(root, "old", SERIES_NAME, "2026-01-01T00:00:00Z", "## old verdict\n", now)
    _results(root, "other", "another-series", "2026-12-31T00:00:00Z", "## not ours\n", now)
    # an interrupted run (newer, but not finished) and a run of an older state of the series: never the evidence
    _results(root, "unfinished", SERIES_NAME, None, "## incomplete numbers\n", now)
    _results(root, "stale", SERIES_NAME, "2026-11-01T00:00:00Z", "## stale series\n")
    block = "## Verdict: 1.25x faster (95% CI 1.20-1.31)\n\n"
    newest = _results(
        root,
        "new",
        SERIES_NAME,
        "2026-06-01T00:00:00Z",
        block + "<details><summary>all cells</summary>\nx\n</details>\n",
        now,
    )
    (root / "broken").mkdir()
    (root / "broken" / "results.json").write_text("{not json")
    rc, _, err = _pr(capsys)
    assert rc == 0, err
    text = (applied.parent / "PR.md").read_text()
    # nested under "## Evidence": the report's heading one level down
    assert "\n### Verdict: 1.25x faster (95% CI 1.20-1.31)\n" in text and "\n## Verdict" not in text
    assert "all cells" not in text and "old verdict" not in text and "not ours" not in text
    assert "incomplete numbers" not in text and "stale series" not in text
    assert f"python -m harness compare --out {newest}" in text
    # the contributor's edits to PR.md are kept when pr writes it again
    (applied.parent / "PR.md").write_text(text + "\nmy hand-written note\n")
    rc, out, err = _pr(capsys)
    assert rc == 0, err
    kept = applied.parent / "PR.md.~1~"
    assert kept.read_text().endswith("my hand-written note\n") and "kept as " in out and "PR.md.~1~" in out
    assert (applied.parent / "PR.md").read_text() == text
    # --results naming a file is one line, not "not measured yet"
    (project / "afile").write_text("x")
    rc, _, err = _pr(capsys, "--results", str(project / "afile"))
    assert rc == 2 and "is not a folder" in err and len(err.strip().splitlines()) == 1


def test_pr_block_nests_the_reports_block_under_evidence():
    report = (
        "# A/B: stock vs patched on `cpu`\n\n## For the pull request\n\nMeasured on cpu.\n\n"
        "# planted H1\n\n```\n# a comment in code stays\n```\n\n| cell | verdict |\n|---|---|\n| mm | faster |\n\n"
        "## Stock vs patched per config\n\nnot in the block\n"
    )
    assert pr_block(report) == (
        "Measured on cpu.\n\n### planted H1\n\n```\n# a comment in code stays\n```\n\n"
        "| cell | verdict |\n|---|---|\n| mm | faster |"
    )
    # a real report: its block carries no H1/H2 and stops before the details
    real = pr_block((REPO / "docs" / "examples" / "cpu-contrasts" / "report.md").read_text())
    assert real.startswith("Measured on `cpu`") and "<details>" not in real
    assert not [line for line in real.splitlines() if line.startswith(("# ", "## "))]
    # the report's resume command is for the contributor (it stays in report.md), never in the PR body
    resumable = (REPO / "docs" / "examples" / "cpu-contrasts" / "report.md").read_text()
    assert "nox -s compare --" in resumable.split("<details>")[0]
    assert "nox -s compare" not in pr_block(resumable) and "Resume the run" not in pr_block(resumable)


def test_pr_md_of_the_mps_series_answers_why_not_unset_prefer_metal(tmp_path):
    series = load_series(REPO / "patches" / "mps-gemm-prefer-fast-math")
    for base in ("v2.6.0", "main"):
        text = pr_markdown(series, base, None, tmp_path / "results")
        head = text.splitlines()[:15]
        assert head[0] == f"# {series.title}"
        (answer,) = (line for line in head if line.startswith("**Why not unset `PYTORCH_MPS_PREFER_METAL`?** "))
        assert "routes exactly like leaving PREFER_METAL unset" in answer
        assert "PR #167424 measured at 1.77 TFLOP/s" in text.split("\n## Evidence", 1)[0]
        assert "git push" not in text and "nox -s" not in text


def test_unknown_pr_key_is_one_line(tmp_path):
    repo = make_upstream(tmp_path / "up")
    folder = make_series(repo, tmp_path / "patches")
    manifest = folder / "series.toml"
    manifest.write_text(manifest.read_text().replace("[[base]]", '[pr]\nwhy = "x"\nreason = "y"\n\n[[base]]', 1))
    with pytest.raises(SeriesError, match=r"\[pr\]: unknown key 'reason'"):
        load_series(folder)
    manifest.write_text(manifest.read_text().replace('reason = "y"', 'over_alternative = "nothing"'))
    assert load_series(folder).pr == {"why": "x", "over_alternative": "nothing"}


def test_pr_before_apply_says_to_apply(tmp_path, project, isolated_cache, identity, capsys):
    identity("Ada Contributor", "ada@example.org")
    repo = make_upstream(tmp_path / "up")
    make_series(repo, project / "patches")
    rc, _, err = _pr(capsys)
    assert rc == 2 and "no patched worktree" in err and err.count("\n") == 1
    assert os.listdir(project / "patches") == [SERIES_NAME]


# ------------------------------------------------------------------ the branch carries what the evidence measured
def _edit_commit(tree: Path, message: str | None = None, old: str = '"1"', new: str = '"yes"') -> str:
    """Amend the series' commit in ``tree`` by hand: its code (``old`` -> ``new``) or only its message."""
    if message is None:
        config = tree / "src" / "config.cpp"
        config.write_text(config.read_text().replace(old, new))
        git(tree, "commit", "-q", "-a", "--amend", "--no-edit")
    else:
        git(tree, "commit", "-q", "--amend", "-m", message)
    return git(tree, "rev-parse", "HEAD").strip()


def test_pr_refuses_commits_that_are_not_the_series_its_evidence_measured(applied, project, identity, capsys):
    """The old bug: after a hand edit of the series' commit, pr exited 0 with a branch of the edited code and
    a PR.md quoting the evidence of the unedited series; an extra commit or a changed message went in silently."""
    identity("Ada Contributor", "ada@example.org")
    root, now = project / "results", _current_hash(project)
    _results(root, "measured", SERIES_NAME, "2026-06-01T00:00:00Z", "## Verdict: measured\n", now)
    edited = _edit_commit(applied)
    rc, out, err = _pr(capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{edited[:12]} config: {MARKER}=1 prefers the fast path (its change differs" in err
    assert f"refresh --series {SERIES_NAME} --base v1.4.0" in err and "compare" in err
    assert "--evidence-for-other-series" in err
    assert git(applied, "branch", "--list", "pr/*") == "" and not (applied.parent / "PR.md").exists()
    # asked for explicitly: the branch is made, and PR.md says whose evidence it quotes
    rc, out, err = _pr(capsys, "--evidence-for-other-series")
    assert rc == 0, err
    branch = f"pr/{SERIES_NAME}/v1.4.0"
    assert git(applied, "rev-parse", f"{branch}^{{tree}}") == git(applied, "rev-parse", f"{edited}^{{tree}}")
    text = (applied.parent / "PR.md").read_text()
    assert "### Verdict: measured" in text
    (note,) = (line for line in text.splitlines() if "evidence below was measured for" in line)
    assert f"series hash `{now[:8]}`" in note
    # refresh makes the edit the series: the hash PR.md named is the new series hash; pr goes on without the
    # option, and PR.md names the results of the earlier hash instead of saying none exist
    assert cli.main(["refresh", "--series", SERIES_NAME, "--base", "v1.4.0"]) == 0
    refreshed = _current_hash(project)
    assert refreshed != now and f"this branch's commits are series hash `{refreshed[:8]}`" in note
    rc, out, err = _pr(capsys)
    assert rc == 0, err
    text = (applied.parent / "PR.md").read_text()
    assert "Verdict: measured" not in text
    (line,) = (line for line in text.splitlines() if line.startswith("Not measured yet"))
    assert f"series hash `{refreshed[:8]}`" in line and f"`{Path('results') / 'measured'}`" in line and now[:8] in line
    # planted: an extra commit, then a changed message only: each refused, each named
    (applied / "src" / "config.cpp").write_text((applied / "src" / "config.cpp").read_text() + "// WIP\n")
    git(applied, "commit", "-q", "-am", "WIP debug print")
    rc, _, err = _pr(capsys)
    assert rc == 2 and "WIP debug print (not in the series)" in err and err.count("\n") == 1
    git(applied, "reset", "-q", "--hard", "HEAD~1")
    _edit_commit(applied, message="config: another message")
    rc, _, err = _pr(capsys)
    assert rc == 2 and "config: another message (its message or author differs" in err


def test_apply_force_resets_a_branch_whose_messages_differ(applied, project, capsys):
    """The old bug: apply compared only the changes (patch-ids): a commit with another message was
    "already applied", and --force reset nothing."""
    original = git(applied, "log", "-1", "--format=%B", "HEAD")
    edited = _edit_commit(applied, message="config: another message")
    rc = cli.main(["apply", "--series", SERIES_NAME, "--base", "v1.4.0"])
    captured = capsys.readouterr()
    assert rc == 2 and "differ from the series" in captured.err
    rc = cli.main(["apply", "--series", SERIES_NAME, "--base", "v1.4.0", "--force"])
    captured = capsys.readouterr()
    assert rc == 0 and "already applied" not in captured.out, captured
    assert git(applied, "log", "-1", "--format=%B", "HEAD") == original
    # the edited commit is kept on the branch the message names
    (kept,) = git(applied, "for-each-ref", "--contains", edited, "--format=%(refname:short)", "refs/heads/").split()
    assert kept in captured.err


# ------------------------------------------------------------------ pr moves no HEAD and loses no commit
def _commit(tree: Path, message: str) -> str:
    """A commit of the user's in ``tree`` (a line appended to src/config.cpp); returns its SHA."""
    config = tree / "src" / "config.cpp"
    config.write_text(config.read_text() + f"// {message}\n")
    git(tree, "commit", "-q", "-am", message)
    return git(tree, "rev-parse", "HEAD").strip()


def _branches_with(tree: Path, sha: str) -> list[str]:
    return git(tree, "for-each-ref", "--contains", sha, "--format=%(refname:short)", "refs/heads/").split()


def test_pr_compares_a_detached_head_and_leaves_it_where_it_is(applied, project, identity, capsys):
    """The old bug: pr put a detached HEAD back on the series' branch before comparing, so a commit made
    there went into no PR (exit 0, "1 commit(s)"), HEAD moved, the commit only on a saved/ branch."""
    identity("Ada Contributor", "ada@example.org")
    series_branch = patched_branch(SERIES_NAME, "v1.4.0", applied)
    # detached at the series' tip: the series, so the branch is made; HEAD stays detached where it was
    git(applied, "checkout", "-q", "--detach")
    tip = git(applied, "rev-parse", "HEAD").strip()
    rc, out, err = _pr(capsys)
    assert rc == 0 and "1 commit(s)" in out, err
    assert git(applied, "symbolic-ref", "-q", "HEAD", check=False) == ""
    assert git(applied, "rev-parse", "HEAD").strip() == tip
    # a commit on the detached HEAD: refused in one line naming it, with the fixing commands; nothing moved
    pr_before = git(applied, "rev-parse", f"pr/{SERIES_NAME}/v1.4.0").strip()
    mine = _commit(applied, "extra")
    rc, out, err = _pr(capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{mine[:12]} extra (not in the series)" in err and "detached HEAD" in err
    assert f"refresh --series {SERIES_NAME} --base v1.4.0" in err and "compare" in err
    assert git(applied, "symbolic-ref", "-q", "HEAD", check=False) == ""
    assert git(applied, "rev-parse", "HEAD").strip() == mine
    assert git(applied, "rev-parse", f"pr/{SERIES_NAME}/v1.4.0").strip() == pr_before
    assert git(applied, "branch", "--list", "saved/*") == ""
    assert git(applied, "rev-parse", series_branch).strip() == tip
    # refresh adopts the detached HEAD's commits; pr then carries them
    assert cli.main(["refresh", "--series", SERIES_NAME, "--base", "v1.4.0"]) == 0
    capsys.readouterr()
    rc, out, err = _pr(capsys)
    assert rc == 0 and "2 commit(s)" in out, err


def test_pr_keeps_a_commit_only_its_branch_holds(applied, project, identity, capsys):
    """The old bug: a review fixup committed on pr/<series>/<base> (checked out as pr's ghstack hint says) was
    dropped by the next pr without a word (the branch rewritten, the fixup on no branch)."""
    identity("Ada Contributor", "ada@example.org")
    branch, series_branch = f"pr/{SERIES_NAME}/v1.4.0", patched_branch(SERIES_NAME, "v1.4.0", applied)
    rc, out, err = _pr(capsys)
    assert rc == 0 and f"`git checkout {branch}` in " in out, err
    assert f"go back (`git checkout {series_branch}`) before the next pr" in out  # the ghstack hint says so
    git(applied, "checkout", "-q", branch)
    fixup = _commit(applied, "review fixup")
    # checked out here: pr refuses in one line, naming the branch and the way to get the fixup in the series
    rc, out, err = _pr(capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert branch in err and "checkout --detach" in err and "refresh" in err
    assert git(applied, "rev-parse", "HEAD").strip() == fixup
    assert git(applied, "symbolic-ref", "--short", "HEAD").strip() == branch
    # back on the series' branch: pr moves the branch, the fixup kept on a saved/ branch that pr names
    git(applied, "checkout", "-q", series_branch)
    rc, out, err = _pr(capsys)
    assert rc == 0, err
    (kept,) = (name for name in _branches_with(applied, fixup) if name != branch)
    assert kept.startswith("saved/") and kept in err and kept in out and "not in this pull request" in out
    assert git(applied, "log", "-1", "--format=%s", branch).strip() != "review fixup"
    # pr again: the branch holds only pr's own commits: nothing kept, no new saved/ branch
    rc, out, err = _pr(capsys)
    assert rc == 0 and "saved/" not in out + err, (out, err)
    assert git(applied, "branch", "--list", "saved/*").split() == [kept]
    # the branch checked out in another worktree (stock) with a commit there: pr refuses to move it under it
    stock = worktrees(project / "work", "v1.4.0")[0]
    git(stock, "checkout", "-q", branch)
    there = _commit(stock, "stock fixup")
    rc, out, err = _pr(capsys)
    assert rc == 2 and err.count("\n") == 1 and f"branch {branch} is checked out in {stock}" in err, err
    assert git(stock, "rev-parse", "HEAD").strip() == there and git(stock, "status", "--porcelain") == ""


@pytest.mark.parametrize("other", ["main", "saved", "series"])
def test_pr_refuses_a_branch_it_does_not_own(other, applied, project, identity, capsys):
    """The old bug: `pr --branch main` moved main of the cache's mirror; `--branch saved/...` overwrote a
    branch holding a unique commit. pr makes only a new branch or one under pr/."""
    identity("Ada Contributor", "ada@example.org")
    if other == "saved":
        git(applied, "checkout", "-q", "--detach")
        _commit(applied, "mine")
        git(applied, "branch", "saved/mine")
        git(applied, "checkout", "-q", patched_branch(SERIES_NAME, "v1.4.0", applied))
        other = "saved/mine"
    elif other == "series":
        other = patched_branch(SERIES_NAME, "v1.4.0", applied)
    else:
        git(applied, "branch", "-f", "main", "v1.4.0")
    before = git(applied, "rev-parse", other).strip()
    rc, out, err = _pr(capsys, "--branch", other)
    assert rc == 2 and err.count("\n") == 1 and f"--branch {other}" in err and "pr/" in err, err
    assert git(applied, "rev-parse", other).strip() == before
    # a new name is made
    rc, out, err = _pr(capsys, "--branch", "my-pr")
    assert rc == 0 and "branch my-pr" in out, err
