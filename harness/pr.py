"""``pr``: a branch the contributor can push upstream, and the ``PR.md`` that goes with it.

After ``apply`` (and ``compare`` for the evidence), ``python -m harness pr --series NAME --base REF``

- re-creates the series' commits of the ``patched`` worktree (``<base>..`` its branch
  ``patched/<series>/<base>-<hash8>``, :func:`harness.upstream.patched_branch`) on a new branch
  ``pr/<series>/<base>`` (``--branch`` to name it) whose author **and** committer
  are the contributor's own git identity (``git config user.name`` / ``user.email`` as seen from the
  patched worktree). The commit trees and messages are unchanged; only the identity and the
  committer date differ. The series' files keep the neutral identity they were exported with,
  so a contributor never pushes commits authored by the harness (a CLA check would fail on them);
- writes ``<workdir>/<base>/PR.md`` beside the worktrees, the pull request's body and nothing else: the
  series' title, its ``[pr] why`` (else the first patch's "Why:" paragraph), ``[pr] over_alternative``
  answering "Why not <alternative>?", the related links, the PR block of ``report.md`` of the newest
  results directory whose ``results.json`` names this series as the build of ``patched`` (headings
  nested under ``## Evidence``), and the command that reproduced it;
- prints what the contributor does next (never in the body): without evidence, the ``build`` commands of
  the missing wheels, then one ``compare`` command that makes the evidence from them: its ``--stock`` and
  ``--patched`` are the build folder (``--dist``) the builds write to, where ``compare`` picks this series'
  and base's wheels by their build manifests (:func:`harness.venvs.wheel_in`), so it runs as printed once
  the builds have finished (all accepted by their parsers, tests/test_pr.py); and how to push (plain
  ``git push``, or ghstack, which turns each commit of the branch into its own stacked PR; ghstack is not
  run here).

The branch is made only from commits that are the series' patch files one for one (change, message and
author: :func:`harness.series.compare_with_series`), the series whose hash the evidence names; other
commits are refused in one line that names them and says ``refresh`` (then a new ``compare``) fixes it.
``--evidence-for-other-series`` makes the branch anyway, and PR.md then says which series hash its
evidence is for and which the branch carries. Without evidence at the current series hash, PR.md's "not
measured" line names the newest results of the series at another hash, when there are some.

Nothing in the worktrees changes: the branch is made with ``git commit-tree`` and ``update-ref`` and no
HEAD moves. What is checked out in ``patched`` is what is compared: its series branch, or a detached HEAD
(whose commits, when they are not the series, are refused by name with ``refresh``, which adopts a detached
HEAD's commits). ``patched`` on any other branch (``pr/...`` checked out for ghstack, say) is refused in one
line: pr moves no HEAD, and never moves a branch that a worktree has checked out.

pr makes or moves only its own branches: ``--branch`` names a new branch or one under ``pr/``; an existing
branch outside ``pr/`` (``main``, ``saved/...``, the series branch) is refused in one line. Before it moves
an existing branch that holds commits other than pr's own re-creation of the series (a review fixup
committed on it, say), those commits are kept on a ``saved/...`` branch (:func:`harness.upstream.keep_commits`)
and pr's output names it.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import document as doc
from harness import options
from harness.errors import BuildInputError, ResultsError, SeriesError
from harness.fsutil import atomic_write_text
from harness.manifest import Series, shown
from harness.paths import slug
from harness.series import FALLBACK_COMMITTER, compare_with_series, describe
from harness.upstream import (
    DEFAULT_UPSTREAM,
    _earlier_name,
    git_run,
    is_archive,
    keep_commits,
    patched_branch,
    switch_branch,
)
from harness.venvs import wheel_in
from harness.workflow import Checkout, Context, existing_checkout

#: Identities that are the harness's own, never a contributor's.
_NEUTRAL_EMAILS = (FALLBACK_COMMITTER["GIT_COMMITTER_EMAIL"], "torch-patch-harness@users.noreply.github.com")


@dataclass(frozen=True)
class Identity:
    """A git identity: ``name <email>``."""

    name: str
    email: str

    def env(self) -> dict[str, str]:
        """Author and committer environment of ``git commit-tree``."""
        return {
            "GIT_AUTHOR_NAME": self.name,
            "GIT_AUTHOR_EMAIL": self.email,
            "GIT_COMMITTER_NAME": self.name,
            "GIT_COMMITTER_EMAIL": self.email,
        }


def contributor(worktree: Path) -> Identity:
    """The contributor's identity from git config as seen from ``worktree`` (local, global, system).

    Raises:
        SeriesError: ``user.name`` or ``user.email`` is unset, or is the harness's own identity.
    """
    values = {}
    for key in ("user.name", "user.email"):
        result = git_run(worktree, "config", "--get", key, check=False)
        values[key] = result.out.strip()
    missing = [key for key, value in values.items() if not value]
    if missing:
        raise SeriesError(
            f"git {' and '.join(missing)} not set: the pull-request commits must carry your identity",
            "run `git config --global user.name 'Your Name'` and "
            "`git config --global user.email you@example.org` (the address your CLA is signed with)",
        )
    if values["user.email"] in _NEUTRAL_EMAILS:
        raise SeriesError(
            f"git user.email is the harness's own address {values['user.email']!r}",
            "set your own with `git config --global user.email you@example.org`",
        )
    return Identity(values["user.name"], values["user.email"])


def _commits(worktree: Path, base_commit: str, head: str) -> list[str]:
    return git_run(worktree, "rev-list", "--reverse", f"{base_commit}..{head}").out.split()


#: the prefix of the branches pr owns: it moves an existing branch only under it
OWN_PREFIX = "pr/"


def check_branch(worktree: Path, branch: str) -> None:
    """Refuse a ``--branch`` that is no valid branch name, or that exists and is not pr's own (outside
    :data:`OWN_PREFIX`: ``main``, ``saved/...``, the series branch); a new name or one under ``pr/`` passes.

    Raises:
        SeriesError: either, in one line naming the branch.
    """
    if git_run(worktree, "check-ref-format", "--branch", branch, check=False).rc != 0:
        raise SeriesError(f"--branch {branch!r} is not a valid branch name", "pick another name")
    if branch.startswith(OWN_PREFIX):
        return
    if git_run(worktree, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False).rc == 0:
        raise SeriesError(
            f"--branch {branch}: that branch exists and is not pr's own (pr makes a new branch, or moves one "
            f"under {OWN_PREFIX}); moving it would drop what it holds",
            f"pick a new name, or one under {OWN_PREFIX} (the default is {OWN_PREFIX}<series>/<base>)",
        )


def _checked_out_in(worktree: Path, branch: str) -> str | None:
    """The worktree that has ``branch`` checked out, or None."""
    for block in git_run(worktree, "worktree", "list", "--porcelain").out.split("\n\n"):
        lines = block.splitlines()
        if f"branch refs/heads/{branch}" in lines:
            return lines[0].removeprefix("worktree ")
    return None


def _shape(worktree: Path, base_commit: str, rev: str) -> str:
    """Trees and messages of ``base_commit..rev``: what pr's re-creation keeps of each commit."""
    return git_run(worktree, "log", "--format=%T%n%B%x00", f"{base_commit}..{rev}").out


def make_branch(
    worktree: Path, base_commit: str, head: str, branch: str, who: Identity
) -> tuple[list[str], str | None]:
    """Re-create ``base_commit..head`` on ``branch`` with ``who`` as author and committer.

    Trees, messages and author dates are kept, and the committer date is the author date, so a second run on
    the same series and identity makes the same commits (the branch does not move). An existing ``branch``
    whose commits are not the same trees and messages (a commit added on it by hand, say) has the commits only
    it holds kept first on a ``saved/...``
    branch (:func:`harness.upstream.keep_commits`). Returns (the new commit SHAs in order, that saved branch or
    None).

    Raises:
        SeriesError: no commits between the base and ``head`` (the series is not applied), or ``branch`` is
            checked out in a worktree (moving it would change that worktree): nothing moved.
        UpstreamError: git would not make the saved branch: nothing moved.
    """
    commits = _commits(worktree, base_commit, head)
    if not commits:
        raise SeriesError(
            f"{head} has no commits on top of its base in {worktree}",
            "run `python -m harness apply` with the same --series/--base/--workdir first",
        )
    parent = base_commit
    made = []
    with tempfile.TemporaryDirectory(prefix="harness-pr-") as tmp:
        message = Path(tmp) / "message"
        for sha in commits:
            raw = git_run(worktree, "cat-file", "commit", sha).out
            message.write_text(raw.split("\n\n", 1)[1], encoding="utf-8")
            date = git_run(worktree, "log", "-1", "--format=%aI", sha).out.strip()
            tree = git_run(worktree, "rev-parse", f"{sha}^{{tree}}").out.strip()
            parent = git_run(
                worktree,
                "commit-tree",
                tree,
                "-p",
                parent,
                "-F",
                str(message),
                env={**who.env(), "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
                error=SeriesError,
            ).out.strip()
            made.append(parent)
    old = git_run(worktree, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False).out.strip()
    kept = None
    if old and old != parent:
        where = _checked_out_in(worktree, branch)
        if where is not None:
            raise SeriesError(
                f"branch {branch} is checked out in {where}: pr would move it under that worktree",
                f"leave it (`git -C {shlex.quote(where)} checkout --detach`) or pass --branch with another name",
            )
        if _shape(worktree, base_commit, old) != _shape(worktree, base_commit, parent):
            kept = keep_commits(worktree, branch, rev=f"refs/heads/{branch}", moving=branch)
    git_run(worktree, "update-ref", f"refs/heads/{branch}", parent, error=SeriesError)
    return made, kept


def checked_out(co: Checkout, fix: str) -> str:
    """What ``pr`` compares and builds from in the patched worktree, without moving its HEAD: the series branch
    when it is checked out (an earlier name of it is renamed, :func:`harness.upstream.switch_branch`), ``HEAD``
    when detached. ``fix`` is the ``refresh`` command of this series and base.

    Raises:
        SeriesError: the worktree is on another branch (``pr/...`` checked out for ghstack, say).
    """
    current = git_run(co.patched, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).out.strip()
    if not current:
        return "HEAD"
    if current != co.branch and _earlier_name(current, co.branch):
        switch_branch(co.patched, co.branch, co.commit)  # a rename: HEAD stays on the same commit
    elif current != co.branch:
        here = shlex.quote(str(co.patched))
        raise SeriesError(
            f"{co.patched} is on branch {current}, not on the series branch {co.branch}: pr makes the pull request "
            "from the series and moves no HEAD",
            f"to put {current}'s commits in the series: `git -C {here} checkout --detach`, then `{fix}` (it adopts "
            f"a detached HEAD's commits) and measure it again (a new compare); else `git -C {here} checkout "
            f"{co.branch}`",
        )
    return co.branch


# ------------------------------------------------------------------------------------------ PR.md
#: the heading report.md opens its PR-body block with (harness.prbody.render_block)
PR_BLOCK_HEADING = "## For the pull request"
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})(\s.*)$")


def why_text(series: Series, patch: Path) -> str:
    """The series' reason: ``[pr] why`` of series.toml, else the "Why:" paragraph of the first patch's
    commit message, else the title."""
    if series.pr.get("why"):
        return " ".join(series.pr["why"].split())
    header = patch.read_text(encoding="utf-8", errors="replace").split("\n---\n", 1)[0]
    match = re.search(r"(?ms)^Why: (.*?)(?:\n\n|\Z)", header)
    if match:
        return " ".join(match.group(1).split())
    return series.title


def alternative_text(series: Series) -> str | None:
    """``[pr] over_alternative`` as one paragraph led by the reviewer's question ("**Why not <alternative>?**"),
    or None when the series declares none."""
    over = series.pr.get("over_alternative")
    if not over:
        return None
    alternative = series.pr.get("alternative")
    question = f"**Why not {alternative}?**" if alternative else "**Over the alternative:**"
    return f"{question} {' '.join(over.split())}"


def newest_evidence(results_root: Path, series_name: str, series_hash: str | None = None) -> Path | None:
    """The newest finished run under ``results_root`` whose results.json names ``series_name`` as a build's
    series (and, with ``series_hash``, that hash: the series as it is now at this base, not an older state).

    Newest = latest ``run.finished``. Unfinished runs (no ``run.finished``: interrupted, resume them) and
    unreadable results.json files are skipped: a PR body never carries an incomplete run's numbers.

    Raises:
        ResultsError: ``results_root`` exists and is not a folder.
    """
    best: tuple[str, Path] | None = None
    if results_root.exists() and not results_root.is_dir():
        raise ResultsError(
            f"--results {results_root} is not a folder", "pass the folder that holds the results directories"
        )
    if not results_root.is_dir():
        return None
    for path in sorted(results_root.glob("*/results.json")):
        found = doc.peek(path)
        if found is None:
            continue
        hashes = [h for name, h in found.series if name == series_name]
        if not hashes or (series_hash and series_hash not in hashes):
            continue
        if found.finished and (best is None or found.finished > best[0]):
            best = (found.finished, path.parent)
    return best[1] if best else None


def pr_block(report: str) -> str:
    """The PR-body block of a report.md's text, to nest under PR.md's ``## Evidence``.

    The block is the section under :data:`PR_BLOCK_HEADING` up to the next ``##`` heading or the first
    ``<details>`` (a report without that heading: everything before the first ``<details>``, its H1 title
    dropped). The block's own heading is dropped and every other heading is made level 3 or deeper, so no
    H1 or H2 sits under ``## Evidence``; fenced code is left as it is.
    """
    lines = report.splitlines()
    if PR_BLOCK_HEADING in lines:
        lines = lines[lines.index(PR_BLOCK_HEADING) + 1 :]
        stop = ("## ", "<details>")
    else:
        if lines and lines[0].startswith("# "):
            lines = lines[1:]
        stop = ("<details>",)
    out: list[str] = []
    fenced = False
    for line in lines:
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith(stop):
            break
        heading = None if fenced else _HEADING.match(line)
        out.append(f"{'#' * max(3, len(heading.group(1)) + 1)}{heading.group(2)}" if heading else line)
    return _without_resume("\n".join(out)).strip()


#: the report's instruction to the contributor under its undetermined line: a fenced ``compare`` command
#: (with the sentence that introduces it); a reviewer has nothing to run there (it stays in report.md)
_RESUME_FENCE = re.compile(
    r"[ \t]*Resume the run[^\n]*:\s*\n+```[^\n]*\n(?:nox -s compare|python -m harness compare)[^`]*```\n?"
)


def _without_resume(block: str) -> str:
    return _RESUME_FENCE.sub("", block)


def evidence_block(directory: Path) -> tuple[str, str]:
    """(the PR block of report.md, :func:`pr_block`; the command recorded in results.json) of a results directory.

    Raises:
        ResultsError: the directory has no report.md (render it with ``report``).
    """
    report = directory / "report.md"
    if not report.is_file():
        raise ResultsError(
            f"{directory} has results.json but no report.md", f"render it with `python -m harness report {directory}`"
        )
    text = pr_block(report.read_text(encoding="utf-8"))
    found = doc.peek(directory / "results.json")
    command = found.command if found else ()
    return text, shlex.join(command) if isinstance(command, tuple) else command


def _series_hash_of(directory: Path, series_name: str) -> str | None:
    """The series hash a results directory's results.json names for ``series_name`` (None: none named)."""
    found = doc.peek(directory / "results.json")
    return next((h for name, h in (found.series if found else ()) if name == series_name and h), None)


def pr_markdown(
    series: Series,
    base: str,
    evidence: Path | None,
    results_root: Path,
    *,
    earlier: Path | None = None,
    branch_hash: str | None = None,
) -> str:
    """The text of PR.md, the pull request's body: title, why, what it adds over the alternative
    (``[pr]`` of series.toml), related links, the report's PR block and the command that reproduces it.
    Nothing for the contributor (how to push, how to make the evidence): :func:`next_steps` prints that.

    ``earlier``: without evidence, the newest results naming the series at another series hash (an
    earlier state of the series, or another base), named in the "not measured" line, never quoted.
    ``branch_hash``: the branch's commits are not the series' patches (``pr --evidence-for-other-series``):
    a note says which series hash the evidence is for and which the branch carries."""
    entry = series.base(base)
    now = series.hash_of(entry)
    why = why_text(series, series.patch_paths(entry)[0])
    lines = [f"# {series.title}", "", why, ""]
    over = alternative_text(series)
    if over:
        lines += [over, ""]
    if series.related:
        lines += ["Related: " + ", ".join(series.related), ""]
    lines += ["## Evidence", ""]
    if branch_hash is not None:
        what = "the evidence below was measured for" if evidence is not None else "nothing was measured for"
        lines += [
            f"> **Note:** {what} the series `{series.name}` at series hash `{now[:8]}`; "
            f"this branch's commits are series hash `{branch_hash[:8]}`, which was not measured.",
            "",
        ]
    if evidence is None and earlier is not None and _series_hash_of(earlier, series.name) is None:
        lines += [
            f"Not measured yet at series hash `{now[:8]}`: the newest results naming the series `{series.name}`, "
            f"`{earlier}`, were made with `--series {series.name}` on builds that carry no series (interpreters "
            "or wheels without a build manifest of the series: an A/A run, say), not quoted here.",
            "",
        ]
    elif evidence is None and earlier is not None:
        other = _series_hash_of(earlier, series.name)
        lines += [
            f"Not measured yet at series hash `{now[:8]}`: the newest results naming the series `{series.name}`, "
            f"`{earlier}`, are for series hash `{(other or '?')[:8]}` (an earlier state of the series, or another "
            "base), not quoted here.",
            "",
        ]
    elif evidence is None:
        lines += [f"Not measured yet (no results under `{results_root}/` name the series `{series.name}`).", ""]
    else:
        block, command = evidence_block(evidence)
        lines += [block, "", "Reproduce:", "", "```", command or "(no command recorded)", "```", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------- the contributor's next steps
def built_wheels(dist: Path, series: Series, base: str, base_commit: str) -> dict[str, Path]:
    """This base's wheels in ``dist``, found as ``compare`` finds a build folder's (:func:`harness.venvs.wheel_in`):
    the newest stock wheel of ``base_commit`` and the newest patched wheel of this series at the base's current
    series hash: ``{"stock": wheel, "patched": wheel}``, either absent when ``dist`` has none."""
    want = {"stock": {}, "patched": {"series": series.name, "series_hashes": {series.hash_of(series.base(base))}}}
    found: dict[str, Path] = {}
    for role, extra in want.items():
        try:
            found[role] = wheel_in(Path(dist), role, base_sha=base_commit, **extra)
        except BuildInputError:
            continue
    return found


def series_device(series: Series) -> str:
    """The device whose evidence the series declares (the first ``[evidence.<device>]``), else ``cpu``."""
    return next(iter(series.evidence.device), "cpu")


def build_folder(dist: Path) -> str:
    """``dist`` as a ``--stock``/``--patched`` build folder (ends with ``/``, so that ``compare`` reads it as a
    path, never as a requirement named ``dist``; :func:`harness.venvs.parse_input`)."""
    return str(dist).rstrip("/") + "/"


def compare_args(series: Series, stock: str, patched: str, out: Path, tests_source: Path | None) -> list[str]:
    """The arguments of ``compare`` (after ``nox -s compare --``) that make the series' evidence from its two
    builds (wheel paths or the build folder, :func:`build_folder`) into ``out``; ``--tests-source`` when the
    series declares ``[[evidence.test]]``."""
    tests = tests_source if series.evidence.tests else None
    given = [("series", series.name), ("stock", stock), ("patched", patched), ("device", series_device(series))]
    return options.to_argv([*given, ("out", out), ("tests_source", tests)])


def next_steps(
    series: Series,
    base: str,
    co_commit: str,
    patched: Path,
    workdir: Path,
    dist: Path,
    results_root: Path,
    branch: str,
    commits: int,
    evidence: Path | None,
    *,
    archive: bool = False,
) -> list[str]:
    """What the contributor does next, for stdout (never PR.md): without evidence, the commands that make it
    (the missing wheels' builds into ``dist``, then one ``compare`` whose ``--stock``/``--patched`` are that
    build folder, :func:`build_folder`; the wheels' own paths instead when the folder's newest patched wheel
    of the series is of another base); then how to push, or, on a base imported from an ``archive`` (one import
    commit that shares no history with any git upstream, so its branch cannot become a pull request there), how
    to carry the series to a git upstream first (``rebase --onto`` a ref of it, or ``git am`` the patch files)."""
    lines: list[str] = []
    common = ["--series", series.name, "--base", base, "--workdir", str(workdir)]
    again = [*common, "--results", str(results_root), "--dist", str(dist)]
    common += ["--dist", str(dist)]
    if evidence is None:
        wheels = built_wheels(dist, series, base, co_commit)
        missing = [kind for kind in ("stock", "patched") if kind not in wheels]
        stock = patched_in = build_folder(dist)  # compare picks this base's wheels there (harness.venvs.wheel_in)
        hashes = {series.hash_of(b) for b in series.bases}  # what compare --series takes (plan.series_hashes)
        if (
            not missing
            and wheel_in(Path(dist), "patched", series=series.name, series_hashes=hashes) != wheels["patched"]
        ):
            stock, patched_in = str(wheels["stock"]), str(wheels["patched"])  # a newer patched wheel of another base
        out = results_root / f"{series.name}-{slug(base)}"
        args = compare_args(series, stock, patched_in, out, patched)
        if missing:
            lines.append(f"pr: no evidence yet and no {' or '.join(missing)} wheel of this base in {dist}; build:")
            lines += [f"  nox -s build_{kind} -- {shlex.join(common)}" for kind in missing]
            lines.append(
                f"pr: once built, make the evidence (compare takes this series' and base's wheels from "
                f"{build_folder(dist)} by their build manifests), then `nox -s pr -- {shlex.join(again)}` "
                "puts it in PR.md:"
            )
        else:
            lines.append(f"pr: no evidence yet; make it, then `nox -s pr -- {shlex.join(again)}` puts it in PR.md:")
        lines.append(f"  nox -s compare -- {shlex.join(args)}")
    if archive:
        url = series.upstream if not is_archive(series.upstream) else DEFAULT_UPSTREAM
        patches = shown(series.path / series.base(base).dir)
        onto = ["rebase", "--series", series.name, "--base", base, "--onto", "main", "--upstream", url]
        return lines + [
            f"pr: branch {branch}: {commits} commit(s) on {base} (`{co_commit[:12]}`), an imported archive: its one "
            "import commit shares no history with a git upstream, so this branch cannot become a pull request "
            "there. Carry the series to a ref of the git upstream first (main, or the ref the PR goes to):",
            f"  nox -s {onto[0]} -- {shlex.join([*onto[1:], '--workdir', str(workdir)])}",
            f"pr: then `nox -s pr -- --series {series.name} --base main` there; or apply the patch files in your "
            f"own clone of it: `git am -3 {shlex.quote(patches)}/*.patch`",
        ]
    series_branch = patched_branch(series.name, base, patched)
    lines.append(f"pr: branch {branch}: {commits} commit(s) on {base} (`{co_commit[:12]}`); push it:")
    lines.append(f"  git -C {shlex.quote(str(patched))} push <your-fork> {branch}")
    lines.append(
        f"pr: or with ghstack (one pull request per commit, stacked): `git checkout {branch}` in {patched}, "
        f"then `ghstack`; go back (`git checkout {series_branch}`) before the next pr, which re-makes {branch} "
        "from the series (commit review fixups on the series branch, then refresh)"
    )
    return lines


# ---------------------------------------------------------------------------------------- the PR
@dataclass(frozen=True)
class PullRequest:
    """What :func:`prepare` made: the branch, its commits, whose they are, ``PR.md``, its evidence, and the
    contributor's next steps (lines for stdout, :func:`next_steps`)."""

    branch: str
    commits: int
    who: Identity
    worktree: Path
    markdown: Path
    evidence: Path | None
    steps: tuple[str, ...]


def keep_edited(target: Path, text: str) -> Path | None:
    """Write ``text`` to ``target`` (PR.md); an existing PR.md with other text (the contributor may have
    edited it) is first kept as ``PR.md.~N~`` (the next free N, as ``cp --backup=numbered``): nothing the
    user wrote is lost. Returns the kept copy, or None when nothing needed keeping."""
    kept = None
    if target.is_file() and target.read_text(encoding="utf-8") != text:
        n = 1
        while target.with_name(f"{target.name}.~{n}~").exists():
            n += 1
        kept = target.with_name(f"{target.name}.~{n}~")
        os.replace(target, kept)
    atomic_write_text(target, text)
    return kept


def prepare(
    ctx: Context,
    workdir: Path | str,
    branch: str | None,
    results_root: Path,
    dist: Path = Path("dist"),
    *,
    other_series: bool = False,
) -> PullRequest:
    """``pr``: branch ``branch`` (default ``pr/<series>/<base>``) with the contributor's identity, and
    ``PR.md`` beside the worktrees from the newest results under ``results_root`` naming the series at its
    current series hash; ``dist`` is where the wheels are looked for when there is no evidence yet
    (:func:`built_wheels`).

    The branch is made only from commits that are the series' patches (:func:`harness.series.compare_with_series`),
    the series its evidence measured; ``other_series`` (``--evidence-for-other-series``) makes it from other
    commits too, and PR.md says that the evidence is for another series hash.

    Raises:
        SeriesError: no patched worktree, no contributor identity, an invalid branch name, or (without
            ``other_series``) commits that differ from the series (each named, with ``refresh`` to fix it).
    """
    assert ctx.series is not None and ctx.entry is not None
    co = existing_checkout(ctx, workdir, switch=False)
    who = contributor(co.patched)
    branch = branch or f"{OWN_PREFIX}{ctx.series.name}/{slug(ctx.base)}"
    check_branch(co.patched, branch)
    refresh = ["refresh", "--series", ctx.series.name, "--base", ctx.base, "--workdir", str(workdir)]
    fix = shlex.join(["python", "-m", "harness", *refresh])
    head = checked_out(co, fix)
    now = ctx.series.hash_of(ctx.entry)
    evidence = newest_evidence(results_root, ctx.series.name, now)
    state = compare_with_series(co.patched, co.commit, ctx.series, ctx.entry, head=head)
    if state.differs and state.commits and not other_series:
        named = f"series hash {now[:8]}" + (f", measured in {evidence}" if evidence is not None else "")
        what = co.branch if head != "HEAD" else "the detached HEAD"
        adopts = "" if head != "HEAD" else " (it adopts a detached HEAD's commits)"
        raise SeriesError(
            f"{what} in {co.patched} differs from the series {ctx.series.name} ({named}): {describe(state.differs)}",
            f"make these commits the series with `{fix}`{adopts}, then measure it again (a new compare); or go "
            "back to the series with `apply --force`; or pass --evidence-for-other-series to make the branch anyway",
        )
    made, saved = make_branch(co.patched, co.commit, head, branch, who)
    earlier = newest_evidence(results_root, ctx.series.name) if evidence is None else None
    target = co.patched.parent / "PR.md"
    text = pr_markdown(
        ctx.series,
        ctx.base,
        evidence,
        results_root,
        earlier=earlier,
        branch_hash=state.hash if state.differs else None,
    )
    kept = keep_edited(target, text)
    steps = next_steps(
        ctx.series,
        ctx.base,
        co.commit,
        co.patched,
        Path(workdir),
        Path(dist),
        results_root,
        branch,
        len(made),
        evidence,
        archive=co.upstream.kind == "archive",
    )
    if earlier is not None:  # why the newest results naming the series are not the evidence
        other = _series_hash_of(earlier, ctx.series.name)
        why = (
            "were made on builds that carry no series (an A/A run, say)"
            if other is None
            else f"are for series hash {other[:8]}, not this one"
        )
        steps = [f"pr: {earlier} names the series but {why}: not quoted (PR.md's Evidence says so)", *steps]
    if kept is not None:
        steps = [f"pr: the earlier PR.md differed from this one (your edits?): kept as {kept}", *steps]
    if saved is not None:
        here = shlex.quote(str(co.patched))
        steps = [
            f"pr: {branch} held commit(s) that are not in this pull request (made on it by hand?): kept on {saved}; "
            f"to put them in the series: `git -C {here} checkout --detach {saved}`, then `{fix}`",
            *steps,
        ]
    return PullRequest(branch, len(made), who, co.patched, target, evidence, tuple(steps))
