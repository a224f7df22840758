"""Patch series operations: check / apply / refresh / rebase, on the worktrees of :mod:`harness.upstream`.

The manifest (``series.toml``: :class:`harness.manifest.Series`, its ``[[base]]`` entries, ``[evidence]``
and ``[pr]``) is loaded and edited by :mod:`harness.manifest`.

- :func:`check_series` -- does the series apply at the base? Applied patch by patch to a
  temporary index (``git apply --cached``; 3-way when plain fails), so worktrees are untouched; a
  failing patch is split into its hunks and each file + hunk that fails is named.
- :func:`apply_series` -- ``git am --3way`` into ``patched``: one commit per patch, author,
  date and message from the patch headers.
- :func:`refresh_series` -- write ``patched``'s commits back as the series with
  ``git format-patch --zero-commit --no-signature -N --abbrev=12`` under a neutral git config
  (no volatile ``From <sha>``, git version or numbering); a patch whose content and headers did
  not change keeps its bytes, so a no-op refresh leaves no diff.
- :func:`rebase_series` -- ``git am --3way`` the series onto another base; success writes a new
  ``[[base]]`` variant; a conflict leaves the worktree mid-``am`` and names the files and the
  command to continue.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import progress
from harness.errors import HarnessError, SeriesError
from harness.fsutil import atomic_write_text, inside
from harness.manifest import Base, Series, add_base, load_series, patches_hash, set_base_patches, shown
from harness.paths import slug
from harness.upstream import (
    Checkout,
    dirty_files,
    git_run,
    keep_commits,
)

#: format-patch options of refresh/rebase: stable bytes for the same commits (see module doc).
FORMAT_PATCH_ARGS = (
    "format-patch",
    "--zero-commit",
    "--no-signature",
    "-N",
    "--abbrev=12",
    "-M",
    "--no-cover-letter",
    "--no-thread",
    "--no-attach",
    "--encoding=UTF-8",
)
#: Environment that hides the user's global/system git config (format.signoff, format.headers ...).
NEUTRAL_GIT_CONFIG = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
#: Committer identity used only when git has none configured (the author always comes from the patch).
FALLBACK_COMMITTER = {"GIT_COMMITTER_NAME": "torch-patch-harness", "GIT_COMMITTER_EMAIL": "harness@localhost.invalid"}


# ------------------------------------------------------------------------------------------ check
@dataclass(frozen=True)
class PatchCheck:
    """Outcome of one patch in :func:`check_series`: ``status`` is ok, 3way, failed or not-checked."""

    patch: str
    status: str
    failures: tuple[str, ...] = ()


def _split_hunks(text: str) -> list[tuple[str, str, list[str]]]:
    """(file, file header, hunks) of each file section of a patch's diff."""
    sections = []
    for part in re.split(r"(?m)^(?=diff --git )", text)[1:]:
        part = re.split(r"(?m)^-- \n", part)[0]  # format-patch signature, if any
        match = re.match(r"diff --git a/(.*?) b/(.*)", part)
        name = match.group(2) if match else "?"
        pieces = re.split(r"(?m)^(?=@@ )", part)
        sections.append((name, pieces[0], pieces[1:]))
    return sections


_PATH_LINE = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.*)$", re.M)
#: git's own refusals of a path in a patch (not a context mismatch)
_GIT_PATH_REFUSAL = re.compile(r"^error: (invalid path .*|.*beyond a symbolic link.*|.*outside repository.*)$", re.M)


def paths_in_patch(text: str) -> list[str]:
    """Every file path a patch names (``---``/``+++`` headers, renames and copies), ``a/``/``b/`` stripped."""
    found = []
    for match in _PATH_LINE.finditer(text):
        line = match.group(0)
        name = match.group(1).split("\t")[0].strip()
        if name == "/dev/null" or not name:
            continue
        if line.startswith(("--- ", "+++ ")) and name[:2] in ("a/", "b/"):
            name = name[2:]
        if name not in found:
            found.append(name)
    return found


def check_patch_paths(root: Path, patch: Path) -> None:
    """Refuse a patch that names a path outside ``root`` (a worktree), before git reads or writes it.

    Raises:
        SeriesError: the patch and the path (see :func:`harness.fsutil.inside`).
    """
    text = patch.read_text(encoding="utf-8", errors="surrogateescape")
    for name in paths_in_patch(text):
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise SeriesError(
                f"{patch.name} names the path {name!r}, which leaves the source tree",
                "fix the patch: it may touch only files inside the upstream tree",
            )
        inside(root, name, f"{patch.name}: patched file")
        for parent in list(Path(name).parents)[:-1]:  # git's own rule, said before a 3-way merge hides it
            if (root / parent).is_symlink():
                raise SeriesError(
                    f"{patch.name}: affected file {name!r} is beyond a symbolic link ({parent})",
                    "fix the patch: it may touch only files inside the upstream tree, not through links",
                )


def _git_path_refusals(result) -> list[str]:
    """git's own reasons (invalid path, beyond a symbolic link) in a failed ``git apply``."""
    return [f"git refuses the path: {m.group(1)}" for m in _GIT_PATH_REFUSAL.finditer(result.err or "")]


def _failing_hunks(store: Path, env: dict[str, str], patch: Path, tmp: Path) -> list[str]:
    failures = []
    for name, header, hunks in _split_hunks(patch.read_text(encoding="utf-8", errors="surrogateescape")):
        if not hunks:
            probe = tmp / "probe.patch"
            probe.write_text(header, encoding="utf-8", errors="surrogateescape")
            result = git_run(store, "apply", "--cached", "--check", str(probe), env=env, check=False)
            if result.rc != 0:
                failures.append(f"{name}: {result.last_line().removeprefix('error: ')}")
            continue
        for number, hunk in enumerate(hunks, start=1):
            probe = tmp / "probe.patch"
            probe.write_text(header + hunk, encoding="utf-8", errors="surrogateescape")
            result = git_run(store, "apply", "--cached", "--check", "--recount", str(probe), env=env, check=False)
            if result.rc != 0:
                head = hunk.splitlines()[0]
                ranges, _, context = head.partition(" @@")
                shown = f"{ranges} @@" + (f" {context.strip()[:48]}" if context.strip() else "")
                failures.append(f"{name}: hunk #{number} `{shown}` does not apply")
    return failures


def check_series(series: Series, entry: Base, store: Path, commit: str) -> list[PatchCheck]:
    """Apply the series at ``commit`` to a temporary index (worktrees untouched) and report per patch.

    A patch that fails plain ``git apply`` but applies with ``--3way`` is status ``3way``; one that
    fails both is ``failed`` with one line per failing file + hunk; patches after a failure are
    ``not-checked``. When the base lists ``files``, a mismatch with the touched paths adds a failure.
    """
    results: list[PatchCheck] = []
    with tempfile.TemporaryDirectory(prefix="harness-check-") as tmp_name:
        tmp = Path(tmp_name)
        env = {"GIT_INDEX_FILE": str(tmp / "index"), **FALLBACK_COMMITTER}
        git_run(store, "read-tree", commit, env=env, error=SeriesError)
        failed = False
        for name, path in zip(entry.patches, series.patch_paths(entry)):
            if failed:
                results.append(PatchCheck(name, "not-checked"))
                continue
            if git_run(store, "apply", "--cached", str(path), env=env, check=False).rc == 0:
                results.append(PatchCheck(name, "ok"))
                continue
            saved = (tmp / "index").read_bytes()
            if git_run(store, "apply", "--cached", "--3way", str(path), env=env, check=False).rc == 0:
                results.append(PatchCheck(name, "3way"))
                continue
            (tmp / "index").write_bytes(saved)
            whole = git_run(store, "apply", "--cached", "--check", str(path), env=env, check=False)
            try:
                check_patch_paths(tmp / "tree", path)
                refusals = _git_path_refusals(whole)
            except HarnessError as exc:
                refusals = [exc.cause]
            failures = (
                refusals
                or _failing_hunks(store, env, path, tmp)
                or [git_run(store, "apply", "--cached", "--check", str(path), env=env, check=False).last_line()]
            )
            results.append(PatchCheck(name, "failed", tuple(failures)))
            failed = True
        if not failed and entry.files is not None:
            tree = git_run(store, "write-tree", env=env).out.strip()
            touched = git_run(store, "diff", "--name-only", "--no-renames", commit, tree).out.split()
            if sorted(touched) != sorted(entry.files):
                extra = sorted(set(touched) - set(entry.files))
                absent = sorted(set(entry.files) - set(touched))
                results.append(
                    PatchCheck(
                        "files",
                        "failed",
                        (
                            f"{shown(series.manifest)}: [[base]] #{entry.index} key 'files' does not match the series' "
                            f"diff (touched but not listed: {extra or 'none'}; listed but not touched: "
                            f"{absent or 'none'})",
                        ),
                    )
                )
    return results


# ------------------------------------------------------------------------------------------ apply
def _am_in_progress(worktree: Path) -> bool:
    gitdir = Path(git_run(worktree, "rev-parse", "--path-format=absolute", "--git-dir").out.strip())
    return (gitdir / "rebase-apply").is_dir()


def _committer_env(worktree: Path) -> dict[str, str]:
    has = git_run(worktree, "config", "user.email", check=False).rc == 0
    return {} if has else dict(FALLBACK_COMMITTER)


def _commits(worktree: Path, base_commit: str) -> list[str]:
    return git_run(worktree, "rev-list", "--reverse", f"{base_commit}..HEAD").out.split()


def _patch_id(worktree: Path, patch_file: Path) -> str:
    out = git_run(worktree, "patch-id", "--stable", stdin=patch_file).out.split()
    return out[0] if out else ""


@dataclass(frozen=True)
class AmOutcome:
    """Result of ``git am``: ``ok``; else the patch that stopped, conflicted files and the next command."""

    ok: bool
    stopped_at: str = ""
    conflicts: tuple[str, ...] = ()
    reason: str = ""
    #: when no file got conflict markers (no 3-way possible): "file: hunk #n `@@ ... @@` does not apply"
    hunks: tuple[str, ...] = ()


def _am(worktree: Path, patches: list[Path], *, resume: bool = False) -> AmOutcome:
    env = _committer_env(worktree)
    # --keep-non-patch: strip only "[PATCH n/m]", keep upstream title tags such as "[MPS]"
    args = ["am", "--continue"] if resume else ["am", "--3way", "--keep-cr", "--keep-non-patch", *map(str, patches)]
    result = git_run(worktree, *args, env=env, check=False)
    if result.rc == 0:
        return AmOutcome(True)
    gitdir = Path(git_run(worktree, "rev-parse", "--path-format=absolute", "--git-dir").out.strip())
    current = ""
    stopped: Path | None = None
    apply_dir = gitdir / "rebase-apply"
    if (apply_dir / "next").is_file():
        number = int((apply_dir / "next").read_text().strip())
        stopped = patches[number - 1] if 0 < number <= len(patches) else None
        current = stopped.name if stopped else f"patch #{number}"
    refusals = _git_path_refusals(result)
    if refusals:  # not a conflict: nothing for the user to resolve, so the worktree is put back
        git_run(worktree, "am", "--abort", check=False)
        raise SeriesError(
            f"{current or 'a patch'}: {refusals[0].removeprefix('git refuses the path: ')}",
            "fix the patch: it may touch only files inside the upstream tree, not through links",
        )
    conflicts = tuple(git_run(worktree, "diff", "--name-only", "--diff-filter=U").out.split())
    hunks = tuple(_hunks_failing_at_head(worktree, stopped)) if stopped and not conflicts else ()
    return AmOutcome(False, current, conflicts, result.last_line(), hunks)


def _hunks_failing_at_head(worktree: Path, patch: Path) -> list[str]:
    """The file + hunk of ``patch`` that do not apply to ``worktree``'s HEAD (a temporary index; nothing moves)."""
    with tempfile.TemporaryDirectory(prefix="harness-hunks-") as tmp_name:
        tmp = Path(tmp_name)
        env = {"GIT_INDEX_FILE": str(tmp / "index")}
        git_run(worktree, "read-tree", "HEAD", env=env, error=SeriesError)
        return _failing_hunks(worktree, env, patch, tmp)


def conflict_lines(out: AmOutcome, worktree: Path, continue_cmd: list[str]) -> list[str]:
    """What to tell the user when ``git am`` stopped on a conflict: the files, the hunks without a
    3-way merge, and the commands to continue or give up."""
    files = ", ".join(out.conflicts) if out.conflicts else f"none marked ({out.reason})"
    lines = [f"conflict: {out.stopped_at or 'a patch'} does not apply in {worktree}; conflicted files: {files}"]
    lines += [f"conflict:   {line} (no 3-way merge: the patch names no blob this repository has)" for line in out.hunks]
    return lines + [
        f"resolve them, then `git -C {shlex.quote(str(worktree))} add <files>` and run:",
        "  " + shlex.join(continue_cmd),
        f"(or give up: `git -C {shlex.quote(str(worktree))} am --abort`)",
    ]


def apply_series(series: Series, entry: Base, co: Checkout, *, force: bool = False) -> AmOutcome | None:
    """``git am --3way`` the base's patches into ``co.patched``; one commit per patch.

    Returns None when the series is already applied (the branch's commits are the patches, messages and
    authors included: :func:`compare_with_series`), else the :class:`AmOutcome` (not ok: a conflict left
    mid-``am`` for the user).

    Raises:
        SeriesError: ``patched`` has uncommitted changes, an ``am`` in progress, or other commits
            on top of the base (pass ``force`` to start over from the base; commits that no other branch
            reaches are first kept on a branch of their own, :func:`harness.upstream.keep_commits`).
    """
    wt = co.patched
    if _am_in_progress(wt):
        raise SeriesError(
            f"a `git am` is in progress in {wt}",
            f"finish it (`git -C {wt} am --continue`) or drop it (`git -C {wt} am --abort`)",
        )
    dirty = dirty_files(wt)
    if dirty:
        raise SeriesError(
            f"patched worktree {wt} has uncommitted changes: {', '.join(dirty[:5])}",
            f"commit them and run refresh, or discard them (`git -C {wt} checkout -- .`)",
        )
    state = compare_with_series(wt, co.commit, series, entry)
    if state.commits:
        if not state.differs:
            return None
        if not force:
            raise SeriesError(
                f"patched worktree {wt} has {len(state.commits)} commit(s) on {co.base} that differ from "
                f"the series: {describe(state.differs)}",
                "save them with `refresh`, or pass --force to start over from the base",
            )
        head = git_run(wt, "rev-parse", "HEAD").out.strip()
        keep_commits(wt, (co.branch or "patched").removeprefix("patched/"), moving=co.branch)
        progress.note(f"apply: --force: resetting {co.branch} to {co.base} (old head {head[:12]})")
        git_run(wt, "reset", "--quiet", "--hard", co.commit)
    for patch in series.patch_paths(entry):
        check_patch_paths(wt, patch)
    return _am(wt, series.patch_paths(entry))


# ------------------------------------------------------------------------------- branch vs. series
@dataclass(frozen=True)
class BranchState:
    """A worktree's commits on its base against the base's patches (:func:`compare_with_series`).

    Attributes:
        commits: the SHAs of ``base..head``, oldest first.
        differs: one line per commit or patch that differs: ``<sha12> <subject> (why)``, or
            ``<patch> (no commit carries it)``; empty when the commits are the series.
        hash: the series hash the patch folder would have after ``refresh`` from these commits
            (:func:`harness.manifest.patches_hash`; the series' own hash when nothing differs).
    """

    commits: tuple[str, ...]
    differs: tuple[str, ...]
    hash: str


def describe(differs: tuple[str, ...], most: int = 3) -> str:
    """The first ``most`` lines of :attr:`BranchState.differs` joined for a one-line message."""
    more = f"; and {len(differs) - most} more" if len(differs) > most else ""
    return "; ".join(differs[:most]) + more


def format_patches(worktree: Path, base_commit: str, head: str, out: Path) -> list[Path]:
    """``git format-patch`` (:data:`FORMAT_PATCH_ARGS`, neutral git config) of ``base_commit..head`` of
    ``worktree`` into the folder ``out``; the patch files in order. Raises SeriesError when git fails."""
    git_run(
        worktree,
        *FORMAT_PATCH_ARGS,
        "-o",
        str(out),
        f"{base_commit}..{head}",
        env=NEUTRAL_GIT_CONFIG,
        error=SeriesError,
    )
    return sorted(out.iterdir())


def compare_with_series(
    worktree: Path, base_commit: str, series: Series, entry: Base, head: str = "HEAD"
) -> BranchState:
    """Are the commits ``base_commit..head`` of ``worktree`` the base's patches, one for one?

    A commit matches its patch when ``refresh`` would keep the patch's bytes (:func:`_same_patch`: the same
    change by ``git patch-id --stable`` and the same author, date, subject and message by ``git mailinfo``).
    So a commit whose code, message or author was edited, an extra commit and a missing one all differ.
    Two git calls, plus up to four per patch whose bytes differ from its commit's ``git format-patch``.
    """
    log = git_run(worktree, "log", "--reverse", "--format=%H %s", f"{base_commit}..{head}").out.splitlines()
    commits = tuple(line.split(" ", 1)[0] for line in log)
    subjects = [line.partition(" ")[2] for line in log]
    patches = series.patch_paths(entry)
    differs: list[str] = []
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="harness-compare-") as tmp_name:
        tmp = Path(tmp_name)
        generated: list[Path] = []
        if commits:
            generated = format_patches(worktree, base_commit, head, tmp / "out")
        for position, new in enumerate(generated):
            old = patches[position] if position < len(patches) else None
            shown_commit = f"{commits[position][:12]} {subjects[position]}"
            if old is None:
                differs.append(f"{shown_commit} (not in the series)")
            elif old.read_bytes() == new.read_bytes():
                written.append(old)
                continue
            elif _patch_id(worktree, old) != _patch_id(worktree, new):
                differs.append(f"{shown_commit} (its change differs from {old.name})")
            elif _mailinfo(worktree, old, tmp) != _mailinfo(worktree, new, tmp):
                differs.append(f"{shown_commit} (its message or author differs from {old.name})")
            else:
                written.append(old)
                continue
            written.append(new)
        differs += [f"{p.name} (no commit carries it)" for p in patches[len(generated) :]]
        digest = patches_hash(written) if differs else series.hash_of(entry)
    return BranchState(commits, tuple(differs), digest)


# ---------------------------------------------------------------------------------------- refresh
def _mailinfo(worktree: Path, patch: Path, tmp: Path) -> tuple[str, str]:
    msg, body = tmp / "msg", tmp / "body"
    info = git_run(
        worktree, "mailinfo", "--encoding=UTF-8", str(msg), str(body), stdin=patch, env=NEUTRAL_GIT_CONFIG, check=False
    )
    return info.out, msg.read_text(encoding="utf-8", errors="replace") if msg.exists() else ""


def _same_patch(worktree: Path, old: Path, new: Path, tmp: Path) -> bool:
    """True when two patch files carry the same change (patch-id) and the same author/date/subject/message."""
    if old.read_bytes() == new.read_bytes():
        return True
    if _patch_id(worktree, old) != _patch_id(worktree, new):
        return False
    return _mailinfo(worktree, old, tmp) == _mailinfo(worktree, new, tmp)


def write_patches(worktree: Path, base_commit: str, folder: Path, old_names: list[str]) -> tuple[list[str], int]:
    """Format ``base_commit..HEAD`` of ``worktree`` into ``folder``; unchanged patches keep their bytes, and a
    patch rewritten under the file name it had keeps the spelling of its entry in ``old_names``.

    Returns:
        (new patch file names in order, number of files written or removed).

    Raises:
        SeriesError: no commits on top of the base.
    """
    commits = _commits(worktree, base_commit)
    if not commits:
        raise SeriesError(f"{worktree} has no commits on top of its base", "commit your change there first")
    folder.mkdir(parents=True, exist_ok=True)
    changed = 0
    with tempfile.TemporaryDirectory(prefix="harness-refresh-") as tmp_name:
        tmp = Path(tmp_name)
        generated = format_patches(worktree, base_commit, "HEAD", tmp / "out")
        names = []
        for position, new in enumerate(generated):
            old_name = old_names[position] if position < len(old_names) else None
            old = inside(folder, old_name, "patch") if old_name else None
            if old is not None and old.is_file() and _same_patch(worktree, old, new, tmp):
                names.append(old_name)
                continue
            target = inside(folder, new.name, "patch")
            atomic_write_text(target, new.read_text(encoding="utf-8", errors="surrogateescape"))
            names.append(old_name if old == target else new.name)  # the user's spelling ("./x.patch") of one file
            changed += 1
    kept = {inside(folder, name, "patch") for name in names}  # resolved: "./0001-x.patch" is "0001-x.patch"
    for stale in dict.fromkeys(inside(folder, name, "patch") for name in old_names):
        if stale not in kept and stale.is_file():
            stale.unlink()
            changed += 1
    return names, changed


def refresh_series(series: Series, entry: Base, co: Checkout) -> int:
    """Write ``patched``'s commits back as the base's patches; update series.toml's list if names changed.

    Returns the number of patch files written or removed (0: no-op refresh, no diff).

    Raises:
        SeriesError: ``am`` in progress, uncommitted changes, or no commits on ``patched``.
    """
    wt = co.patched
    if _am_in_progress(wt):
        raise SeriesError(f"a `git am` is in progress in {wt}", f"finish it first (`git -C {wt} am --continue`)")
    dirty = dirty_files(wt)
    if dirty:
        raise SeriesError(
            f"patched worktree {wt} has uncommitted changes: {', '.join(dirty[:5])}",
            "commit them (refresh writes commits, not the working tree)",
        )
    folder = inside(series.path, entry.dir, f"{shown(series.manifest)}: [[base]] #{entry.index} key 'dir'")
    names, changed = write_patches(wt, co.commit, folder, list(entry.patches))
    if names != list(entry.patches):
        set_base_patches(series, entry, names)
    return changed


# ----------------------------------------------------------------------------------------- rebase
def _write_variant(series: Series, old: Base, co: Checkout) -> Base:
    directory = slug(co.base)
    folder = inside(series.path, directory, "rebase --onto folder")
    if folder.exists() and any(folder.iterdir()):
        raise SeriesError(f"{shown(folder)} already exists and is not empty", "move it away, then run again")
    names, _ = write_patches(co.patched, co.commit, folder, [])
    files = None
    if old.files is not None:
        files = git_run(co.patched, "diff", "--name-only", "--no-renames", co.commit, "HEAD").out.split()
    commit = co.commit if co.upstream.kind == "git" else None
    add_base(
        series, co.base, directory, names, commit=commit, files=files, notes=f"rebased from {old.ref} with 3-way merge"
    )
    return load_series(series.path).base(co.base)


def rebase_series(series: Series, old: Base, co: Checkout, *, resume: bool = False) -> AmOutcome:
    """Apply ``old``'s patches onto the base of ``co`` with ``git am --3way``; on success add a base variant.

    With ``resume`` the ``am`` stopped by a conflict is continued (after the user resolved it).

    Raises:
        SeriesError: the series already has that base, or ``patched`` is not at its base.
    """
    if any(b.ref == co.base for b in series.bases):
        raise SeriesError(
            f"{shown(series.manifest)}: already has a [[base]] with ref {co.base!r}",
            "use check/apply for it, or remove that [[base]] first",
        )
    wt = co.patched
    if resume:
        if _am_in_progress(wt):
            dirty_unmerged = git_run(wt, "diff", "--name-only", "--diff-filter=U").out.split()
            if dirty_unmerged:
                return AmOutcome(False, "", tuple(dirty_unmerged), "unresolved files")
            outcome = _am(wt, series.patch_paths(old), resume=True)
            if not outcome.ok:
                return outcome
    else:
        dirty = dirty_files(wt)
        if _am_in_progress(wt) or _commits(wt, co.commit) or dirty:
            what = f"uncommitted changes: {', '.join(dirty[:5])}" if dirty else "a stopped `git am` or commits"
            raise SeriesError(
                f"patched worktree {wt} is not clean at {co.base} ({what})",
                "pass --continue to finish a stopped rebase, or remove that worktree and run again",
            )
        outcome = _am(wt, series.patch_paths(old))
        if not outcome.ok:
            return outcome
    entry = _write_variant(series, old, co)
    progress.note(
        f"rebase: wrote [[base]] {entry.ref} with {len(entry.patches)} patch(es) in "
        f"{shown(series.path / entry.dir)}"
    )
    return AmOutcome(True)
