"""``pr``: a branch the contributor can push upstream, and the ``PR.md`` that goes with it.

After ``apply`` (and ``compare`` for the evidence), ``python -m harness pr --series NAME --base REF``

- re-creates the series' commits of the ``patched`` worktree (``<base>..`` its branch
  ``patched/<series>/<base>-<hash8>``, :func:`harness.upstream.patched_branch`) on a new branch
  ``pr/<series>/<base>`` (``--branch`` to name it) whose author **and** committer
  are the contributor's own git identity (``git config user.name`` / ``user.email`` as seen from the
  patched worktree). The commit trees and messages are unchanged; only the identity and the
  committer date differ. The series' files keep the neutral identity they were exported with,
  so a contributor never pushes commits authored by the harness (a CLA check would fail on them);
- writes ``<workdir>/<base>/PR.md`` beside the worktrees: the series' title, the "Why:" paragraph
  of the first patch, the evidence (``report.md`` of the newest results directory whose
  ``results.json`` names this series as the build of ``patched``, up to its first ``<details>``),
  the command that reproduced it, and how to push (plain ``git push``, or ghstack, which turns
  each commit of the branch into its own stacked PR; ghstack is not run here).

Nothing in the worktrees changes: the branch is made with ``git commit-tree`` and ``update-ref``,
so ``patched`` stays on its series branch and ``apply``/``refresh`` keep working.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ResultsError, SeriesError
from harness.fsutil import atomic_write_text
from harness.paths import slug
from harness.series import FALLBACK_COMMITTER, Context, Series, existing_checkout
from harness.upstream import git_run

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


def make_branch(worktree: Path, base_commit: str, head: str, branch: str, who: Identity) -> list[str]:
    """Re-create ``base_commit..head`` on ``branch`` with ``who`` as author and committer.

    Trees, messages and author dates are kept. Returns the new commit SHAs in order.

    Raises:
        SeriesError: no commits between the base and ``head`` (the series is not applied).
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
                env={**who.env(), "GIT_AUTHOR_DATE": date},
                error=SeriesError,
            ).out.strip()
            made.append(parent)
    git_run(worktree, "update-ref", f"refs/heads/{branch}", parent, error=SeriesError)
    return made


# ------------------------------------------------------------------------------------------ PR.md
def why_text(series: Series, patch: Path) -> str:
    """The "Why:" paragraph of a patch's commit message (the series' reason), or its subject."""
    header = patch.read_text(encoding="utf-8", errors="replace").split("\n---\n", 1)[0]
    match = re.search(r"(?ms)^Why: (.*?)(?:\n\n|\Z)", header)
    if match:
        return " ".join(match.group(1).split())
    return series.title


def newest_evidence(results_root: Path, series_name: str) -> Path | None:
    """The newest directory under ``results_root`` whose results.json names ``series_name`` as a build's series.

    Newest = latest ``run.finished`` (else ``run.started``). Unreadable results.json files are skipped.
    """
    best: tuple[str, Path] | None = None
    if not results_root.is_dir():
        return None
    for path in sorted(results_root.glob("*/results.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        builds = data.get("builds") or {}
        names = {
            ((b.get("build") or {}).get("series") or {}).get("name") for b in builds.values() if isinstance(b, dict)
        }
        if series_name not in names:
            continue
        run = data.get("run") or {}
        stamp = str(run.get("finished") or run.get("started") or "")
        if best is None or stamp > best[0]:
            best = (stamp, path.parent)
    return best[1] if best else None


def evidence_block(directory: Path) -> tuple[str, str]:
    """(report.md up to its first ``<details>``, the command recorded in results.json) of a results directory.

    Raises:
        ResultsError: the directory has no report.md (render it with ``report``).
    """
    report = directory / "report.md"
    if not report.is_file():
        raise ResultsError(
            f"{directory} has results.json but no report.md", f"render it with `python -m harness report {directory}`"
        )
    text = report.read_text(encoding="utf-8").split("<details>", 1)[0].rstrip()
    data = json.loads((directory / "results.json").read_text(encoding="utf-8"))
    command = (data.get("run") or {}).get("command") or []
    return text, shlex.join(command) if isinstance(command, list) else str(command)


def pr_markdown(
    series: Series, base: str, base_commit: str, branch: str, commits: int, evidence: Path | None, results_root: Path
) -> str:
    """The text of PR.md."""
    why = why_text(series, series.patch_paths(series.base(base))[0])
    lines = [f"# {series.title}", "", why, ""]
    if series.related:
        lines += ["Related: " + ", ".join(series.related), ""]
    lines += ["## Evidence", ""]
    if evidence is None:
        lines += [
            f"No evidence yet: no results directory under `{results_root}/` names the series `{series.name}`.",
            "Make it with (stock and patched wheels of this base, see docs/quickstart-macos.md):",
            "",
            "```",
            f"nox -s compare -- --series {series.name} --base {base} --stock dist/<stock wheel> "
            f"--patched dist/<patched wheel> --device mps --out results/{series.name}-{slug(base)}",
            "```",
            "",
        ]
    else:
        block, command = evidence_block(evidence)
        lines += [
            block,
            "",
            f"Reproduce (results in `{evidence}`):",
            "",
            "```",
            command or "(no command recorded)",
            "```",
            "",
        ]
    lines += [
        "## Pushing",
        "",
        f"Branch `{branch}`: {commits} commit(s) on {base} (`{base_commit[:12]}`), " "authored by your git identity.",
        "",
        "```",
        f"git push <your-fork> {branch}",
        "```",
        "",
        "With ghstack (one pull request per commit, stacked): `git checkout " + branch + "` in the patched "
        "worktree, then `ghstack`.",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- the PR
@dataclass(frozen=True)
class PullRequest:
    """What :func:`prepare` made: the branch, its commits, whose they are, ``PR.md`` and its evidence."""

    branch: str
    commits: int
    who: Identity
    worktree: Path
    markdown: Path
    evidence: Path | None


def prepare(ctx: Context, workdir: Path | str, branch: str | None, results_root: Path) -> PullRequest:
    """``pr``: branch ``branch`` (default ``pr/<series>/<base>``) with the contributor's identity, and
    ``PR.md`` beside the worktrees from the newest results under ``results_root`` naming the series.

    Raises:
        SeriesError: no patched worktree, no contributor identity, or an invalid branch name.
    """
    assert ctx.series is not None and ctx.entry is not None
    co = existing_checkout(ctx, workdir)
    who = contributor(co.patched)
    branch = branch or f"pr/{ctx.series.name}/{slug(ctx.base)}"
    if git_run(co.patched, "check-ref-format", "--branch", branch, check=False).rc != 0:
        raise SeriesError(f"--branch {branch!r} is not a valid branch name", "pick another name")
    made = make_branch(co.patched, co.commit, co.branch, branch, who)
    evidence = newest_evidence(results_root, ctx.series.name)
    target = co.patched.parent / "PR.md"
    atomic_write_text(target, pr_markdown(ctx.series, ctx.base, co.commit, branch, len(made), evidence, results_root))
    return PullRequest(branch, len(made), who, co.patched, target, evidence)
