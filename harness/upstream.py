"""Upstream sources as git: mirrors, archive imports, and the ``stock`` / ``patched`` worktrees.

An upstream (``--upstream``) is one of

- a git URL (default: PyTorch's GitHub repository) -- cloned once into a bare mirror
  ``<cache>/mirrors/<name>-<sha256[:16] of the canonical source>.git``, fetched incrementally afterwards,
  with a progress bar;
- a local repository or mirror path -- the same, cloned locally (hard links, no network);
- a source archive (``.tar.gz``, ``.tar.xz``, ``.zip``, ...) -- imported once into
  ``<cache>/imports/<name>-<sha256[:12]>.git`` as ONE deterministic commit (fixed identity and
  date, so the same archive always gives the same SHA) tagged ``v<version>``, the version read from
  ``version.txt`` and normalised with ``packaging.version.Version(...).base_version``
  (PyTorch 2.6.0 ships ``2.6.0a0`` -> tag ``v2.6.0``).

The mirror's fetch refspec is ``+refs/heads/*:refs/heads/*`` plus tags, without ``--prune``
(so the harness's own ``patched/...`` branches in the same object store survive a fetch) and
without GitHub's ``refs/pull/*`` (a ``--mirror`` clone of PyTorch would fetch every PR head).

``checkout`` creates ``<workdir>/<slug(base)>/stock`` (detached at the base commit) and
``<workdir>/<slug(base)>/patched`` (on branch ``patched/<series>/<slug(base)>-<hash8 of its path>``,
see :func:`patched_branch`), both ``git worktree``s of the one object store, then initialises
submodules recursively where the tree has a ``.gitmodules``. Each submodule repository (at every depth)
is mirrored into the cache like an upstream and fetched once; every worktree clones its submodules from
those mirrors (:func:`submodule_mirrors`), so a second worktree, another base or a rebase needs no
network for them. A source without its submodules is reported, not refused: :func:`missing_submodules`
gives the fact to the build step.

A clone is made in a temporary folder beside the mirror and renamed into place when complete; a
clone killed midway (Ctrl-C, a laptop that sleeps, a kill) leaves that folder, which the next run
removes before cloning again. A fetch killed midway needs nothing: git writes the pack first and
updates the refs last.

All git calls go through GitPython (:func:`git_run`), with argument lists only.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import stat
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import git
from packaging.version import InvalidVersion, Version

from harness import progress
from harness.errors import UpstreamError
from harness.fsutil import OutsideFolder, exclusive_lock, inside, sha256_file
from harness.paths import cache_dir, slug

#: ``--upstream`` when neither the command line nor the series manifest names one.
DEFAULT_UPSTREAM = "https://github.com/pytorch/pytorch.git"
#: Archive file name endings that :func:`open_upstream` imports instead of cloning.
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar", ".zip")
#: Fixed identity and date of an archive import commit (the SHA depends only on the archive).
IMPORT_IDENTITY = {
    "GIT_AUTHOR_NAME": "torch-patch-harness import",
    "GIT_AUTHOR_EMAIL": "import@torch-patch-harness.invalid",
    "GIT_AUTHOR_DATE": "946684800 +0000",  # 2000-01-01T00:00:00Z
    "GIT_COMMITTER_NAME": "torch-patch-harness import",
    "GIT_COMMITTER_EMAIL": "import@torch-patch-harness.invalid",
    "GIT_COMMITTER_DATE": "946684800 +0000",
}
#: Submodule folders PyTorch's own ``setup.py`` (``get_submodule_folders``, v2.6.0) checks when
#: the source has no ``.gitmodules`` -- the fact that tells a stripped tarball from a full one.
PYTORCH_DEFAULT_SUBMODULES = (
    "third_party/gloo",
    "third_party/cpuinfo",
    "third_party/onnx",
    "third_party/fbgemm",
    "third_party/cutlass",
)
#: git must never stop to ask for a password in a non-interactive harness run.
_NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}
#: seconds one git command of :func:`git_run` may take (then GitPython's ``kill_after_timeout`` kills it and its
#: children, and the error quotes "did not complete in N secs"): checking out PyTorch's ~20,000 files or
#: fetching its submodules over a slow link takes minutes, not half an hour
GIT_S = 1800.0


# --------------------------------------------------------------------------------------- git calls
@dataclass(frozen=True)
class GitResult:
    """Outcome of one git command: exit status, stdout, stderr (text)."""

    rc: int
    out: str
    err: str

    def last_line(self) -> str:
        """The last non-empty line of stderr (or stdout): git's own reason for a failure."""
        lines = [ln.strip() for ln in (self.err or self.out).splitlines() if ln.strip()]
        return lines[-1] if lines else f"git exited with status {self.rc}"


def git_run(
    cwd: Path | str,
    *args: str,
    env: dict[str, str] | None = None,
    check: bool = True,
    stdin: Path | None = None,
    error: type[UpstreamError] | None = None,
) -> GitResult:
    """Run ``git <args>`` in ``cwd`` through GitPython; argument list only, never a shell.

    Args:
        cwd: working directory (a worktree, or a bare repository).
        args: git's arguments.
        env: extra environment variables (merged over ``os.environ``).
        check: raise on a non-zero exit status.
        stdin: a file fed to git's standard input.
        error: the :class:`~harness.errors.HarnessError` subclass raised (default UpstreamError).

    Raises:
        UpstreamError (or ``error``): ``check`` and git failed; the line names the command.
    """
    bad = next((a for a in (str(cwd), *args) if "\0" in a), None)
    if bad is not None:  # exec would refuse it with a ValueError
        raise (error or UpstreamError)(
            f"`git {args[0] if args else ''}` argument {bad!r} contains a NUL byte",
            "remove it from the manifest or the command line",
        )
    full_env = {**os.environ, **_NO_PROMPT, **(env or {})}
    handle = open(stdin, "rb") if stdin else None
    try:
        rc, out, err = git.Git(str(cwd)).execute(
            ["git", *args],
            istream=handle,
            with_extended_output=True,
            with_exceptions=False,
            env=full_env,
            strip_newline_in_stdout=False,
            kill_after_timeout=GIT_S,
        )
    finally:
        if handle:
            handle.close()
    result = GitResult(rc, out or "", err or "")
    if check and rc != 0:
        raise (error or UpstreamError)(
            f"`git {' '.join(args[:3])}` failed in {cwd}: {result.last_line()}",
            "see git's message; fix the repository state and run the command again",
        )
    return result


class _GitProgress(git.RemoteProgress):
    """Feeds git's clone/fetch progress lines into a :func:`harness.progress.task` bar."""

    _STAGES = {
        git.RemoteProgress.COUNTING: "counting objects",
        git.RemoteProgress.COMPRESSING: "compressing",
        git.RemoteProgress.RECEIVING: "receiving objects",
        git.RemoteProgress.RESOLVING: "resolving deltas",
        git.RemoteProgress.WRITING: "writing",
        git.RemoteProgress.CHECKING_OUT: "checking out",
    }

    def __init__(self, handle, what: str) -> None:
        super().__init__()
        self._handle, self._what = handle, what

    def update(self, op_code, cur_count, max_count=None, message="") -> None:  # noqa: D401 - GitPython API
        stage = self._STAGES.get(op_code & self.OP_MASK, "working")
        self._handle.update(
            completed=float(cur_count or 0),
            total=float(max_count) if max_count else None,
            description=f"{self._what}: {stage}",
        )


# ----------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class Upstream:
    """The git object store behind the worktrees.

    Attributes:
        source: ``--upstream`` as given (URL, path or archive).
        store: the bare repository in the cache.
        kind: ``"git"`` (URL or local repository, mirrored) or ``"archive"`` (imported).
        created: True when this call cloned or imported it (False: the cache was warm).
        tag: for an archive, the tag of its import commit (``v2.6.0``); None for git.
    """

    source: str
    store: Path
    kind: str
    created: bool
    tag: str | None = None


def is_archive(source: str) -> bool:
    """True when ``source`` names an existing file with an archive ending (:data:`ARCHIVE_SUFFIXES`)."""
    return source.lower().endswith(ARCHIVE_SUFFIXES) and Path(source).is_file()


def store_name(source: str) -> str:
    """The mirror folder name of a canonical upstream (a resolved path or a URL): a readable prefix
    plus the sha256 of the whole text, so two upstreams never share a mirror (``/x/a_b/up`` and
    ``/x/a/b_up`` used to map to the same sanitised name)."""
    text = re.sub(r"^[a-z+]+://", "", source.strip()).rstrip("/")
    text = text[:-4] if text.endswith(".git") else text
    digest = hashlib.sha256(source.strip().encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{slug(text.replace('/', '_').replace(':', '_'))[-48:].lstrip('._') or 'upstream'}-{digest}"


def open_upstream(source: str, *, ref: str | None = None) -> Upstream:
    """Give the bare repository for ``source``: clone/import on first use, fetch when needed.

    A git upstream is fetched (incrementally) only when ``ref`` is not already in the mirror or
    is a branch (branches move; tags and full SHAs do not). A failed fetch with ``ref`` present
    is a warning, not an error, so a warm cache works offline.

    Raises:
        UpstreamError: a local path that does not exist, the URL or path cannot be cloned, the archive
            cannot be read or has no version.
    """
    if is_archive(source):
        return import_archive(Path(source))
    path = Path(source).expanduser()
    if not path.exists() and not looks_like_url(source):
        raise UpstreamError(
            f"upstream {source}: no such file or directory",
            "pass --upstream with an existing local repository, mirror or source archive, "
            "or a git URL (https://host/repo.git, git@host:repo.git)",
        )
    if path.exists():
        if path.is_file():
            raise UpstreamError(
                f"--upstream {source} is a file but not an archive ({', '.join(ARCHIVE_SUFFIXES)})",
                "pass a git URL, a local repository, or a .tar.gz/.tar.xz/.zip source archive",
            )
        probe = git_run(path, "rev-parse", "--git-dir", check=False)
        if probe.rc != 0:
            raise UpstreamError(
                f"--upstream {source} is a directory but not a git repository",
                "pass a git repository or mirror, or a source archive of it",
            )
        source = str(path.resolve())
    return _mirror(source, ref)


def looks_like_url(source: str) -> bool:
    """True for what git reads as a remote: ``scheme://...`` or scp-like ``[user@]host:path`` (no ``/``
    before the first ``:``); everything else is a local path."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", source) is not None or re.match(r"^[^/:]{2,}:", source) is not None


def _clear_interrupted_clone(mirrors: Path, store: Path, url: str) -> None:
    """Remove what a clone killed midway left (its temporary ``.<store>.*`` folder, or a store without
    ``HEAD``). Called under the store's lock, so no live clone of this store owns them."""
    junk = sorted(mirrors.glob(f".{store.name}.*")) if mirrors.is_dir() else []
    if store.exists() and not (store / "HEAD").is_file():
        junk.append(store)
    for path in junk:
        shutil.rmtree(path, ignore_errors=True)
    if junk:
        progress.note(f"upstream: removed {len(junk)} partial clone(s) of {url} left by an interrupted run")


def _interrupted(exc: git.GitCommandError) -> bool:
    """git ended by Ctrl-C: a terminal's SIGINT reaches git and Python alike, and git may exit
    first (status -2 or 130), before Python raises KeyboardInterrupt."""
    return str(exc.status).strip() in ("-2", "130", str(-signal.SIGINT))


def _mirror(url: str, ref: str | None) -> Upstream:
    mirrors = cache_dir() / "mirrors"
    store = mirrors / f"{store_name(url)}.git"
    try:
        git.Git.check_unsafe_protocols(url)
    except git.exc.UnsafeProtocolError:
        scheme = url.split("::")[0] if "::" in url else url.split(":")[0]
        raise UpstreamError(
            f"upstream {url[:80]!r} uses the {scheme}:: transport, which runs a command, not a clone",
            "pass a https://, ssh://, git@host: URL, a local repository or a source archive",
        ) from None
    with exclusive_lock(cache_dir() / "locks" / store.name, f"mirror {url}"):
        _clear_interrupted_clone(mirrors, store, url)
        if (store / "HEAD").is_file():
            if ref is None or _needs_fetch(store, ref):
                _fetch(store, url, required=ref is not None and resolve_commit(store, ref, check=False) is None)
            return Upstream(url, store, "git", created=False)
        mirrors.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{store.name}.", dir=mirrors))
        progress.note(f"upstream: cloning {url} into {store} (once; later runs fetch incrementally)")
        started = time.monotonic()
        feed = None
        try:
            with progress.task(f"clone {url}") as bar:
                feed = _GitProgress(bar, "clone")
                git.Repo.clone_from(url, tmp, bare=True, progress=feed, env={**_NO_PROMPT})
        except Exception as exc:  # a Ctrl-C leaves the folder to the next run (_clear_interrupted_clone)
            shutil.rmtree(tmp, ignore_errors=True)
            if not isinstance(exc, git.GitCommandError):
                raise
            if _interrupted(exc):
                raise KeyboardInterrupt from None
            reason = _reason(exc, feed)
            raise UpstreamError(
                f"cannot clone upstream {url}: {reason}",
                "check the URL and the network, or pass --upstream PATH "
                "(a local clone or mirror, or a source archive)",
            ) from None
        git_run(tmp, "config", "--replace-all", "remote.origin.fetch", "+refs/heads/*:refs/heads/*")
        git_run(tmp, "config", "--add", "remote.origin.fetch", "+refs/tags/*:refs/tags/*")
        os.replace(tmp, store)
        progress.note(f"upstream: cloned in {time.monotonic() - started:.1f} s")
        return Upstream(url, store, "git", created=True)


def _needs_fetch(store: Path, ref: str) -> bool:
    if resolve_commit(store, ref, check=False) is None:
        return True
    is_sha = re.fullmatch(r"[0-9a-f]{40}", ref) is not None
    is_tag = git_run(store, "show-ref", "--verify", "--quiet", f"refs/tags/{ref}", check=False).rc == 0
    return not (is_sha or is_tag)


def _fetch(store: Path, url: str, *, required: bool) -> None:
    progress.note(f"upstream: fetching {url} (incremental)")
    feed = None
    started = time.monotonic()
    try:
        with progress.task(f"fetch {url}") as bar:
            feed = _GitProgress(bar, "fetch")
            repo = git.Repo(store)
            with repo.git.custom_environment(**_NO_PROMPT):
                repo.remote("origin").fetch(progress=feed, kill_after_timeout=GIT_S)
    except (git.GitCommandError, ValueError) as exc:
        if isinstance(exc, git.GitCommandError) and _interrupted(exc):
            raise KeyboardInterrupt from None
        reason = _reason(exc, feed)
        if time.monotonic() - started >= GIT_S:  # GitPython killed it at the deadline
            reason = f"`git fetch` took longer than {GIT_S:g} s (stopped)"
        if required:
            raise UpstreamError(
                f"cannot fetch upstream {url}: {reason}",
                "check the URL and the network, or pass --upstream PATH "
                "(a local clone or mirror, or a source archive)",
            ) from None
        progress.note(f"upstream: warning: fetch from {url} failed ({reason}); using the cached mirror")


def _reason(exc: Exception, feed: _GitProgress | None) -> str:
    """git's own last error line of a failed clone/fetch (the progress parser keeps stderr's error lines)."""
    lines = list(getattr(feed, "error_lines", []) or []) + list(getattr(feed, "other_lines", []) or [])
    lines += str(getattr(exc, "stderr", "") or "").splitlines()
    for line in lines:
        text = line.strip().strip("'\" ")
        if text.startswith(("fatal:", "error:")):
            return text
    return f"git exited with status {getattr(exc, 'status', '?')}"


# -------------------------------------------------------------------------------------- archives
def _archive_stem(path: Path) -> str:
    name = path.name
    for suffix in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _extract(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into ``dest`` (tar with the 'data' safety filter; zip keeping modes and links)."""
    if archive.name.lower().endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                try:
                    target = inside(dest, info.filename, "archive entry")
                except OutsideFolder:
                    raise UpstreamError(
                        f"archive {archive} has an entry outside its folder: {info.filename}",
                        "use an unmodified release archive",
                    ) from None
                mode = info.external_attr >> 16
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                elif stat.S_ISLNK(mode):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(zf.read(info).decode(), target)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(info))
                    if mode & 0o111:
                        target.chmod(0o755)
        return
    with tarfile.open(archive) as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without PEP 706
            tf.extractall(dest)


def _archive_version(root: Path, archive: Path) -> str:
    version_file = root / "version.txt"
    text = version_file.read_text().strip() if version_file.is_file() else ""
    if not text:
        match = re.search(r"(\d+\.\d+(?:\.\d+)?)", archive.name)
        text = match.group(1) if match else ""
    try:
        return Version(text).base_version
    except InvalidVersion:
        raise UpstreamError(
            f"archive {archive} has no usable version (version.txt: {text!r})",
            "use a PyTorch release archive (it carries version.txt)",
        ) from None


def import_archive(archive: Path) -> Upstream:
    """Import a source archive as one deterministic commit tagged ``v<version>`` (cached by sha256).

    The single top-level folder of a release archive (``pytorch-v2.6.0/``) is stripped. All files are
    added (``git add -A -f``: the archive's own .gitignore does not drop files); empty folders vanish.

    Raises:
        UpstreamError: unreadable archive, or no version in ``version.txt`` nor in the file name.
    """
    archive = Path(archive).resolve()
    digest = sha256_file(archive)
    imports = cache_dir() / "imports"
    store = imports / f"{slug(_archive_stem(archive))}-{digest[:12]}.git"
    with exclusive_lock(cache_dir() / "locks" / store.name, f"import {archive}"):
        if (store / "HEAD").is_file():
            tags = git_run(store, "tag", "--list").out.split()
            return Upstream(str(archive), store, "archive", created=False, tag=tags[0] if tags else None)
        imports.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        progress.note(f"upstream: importing {archive.name} into {store} (once)")
        with tempfile.TemporaryDirectory(prefix=".import-", dir=imports) as tmp_name:
            tmp = Path(tmp_name)
            tree = tmp / "tree"
            tree.mkdir()
            try:
                with progress.task(f"unpack {archive.name}"):
                    _extract(archive, tree)
            except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
                raise UpstreamError(
                    f"cannot unpack archive {archive}: {exc}", "download it again, or pass a git URL or repository"
                ) from None
            entries = list(tree.iterdir())
            root = entries[0] if len(entries) == 1 and entries[0].is_dir() else tree
            tag = f"v{_archive_version(root, archive)}"
            repo = tmp / "repo.git"
            git_run(tmp, "init", "--quiet", "--bare", str(repo))
            env = {**IMPORT_IDENTITY, "GIT_INDEX_FILE": str(tmp / "index")}
            plain = ("-c", "core.autocrlf=false", "-c", "core.fileMode=true", "-c", "core.symlinks=true")
            # every blob over core.bigFileThreshold goes into one pack as it is added ("bulk checkin", git
            # >= 1.7.9; no deltas): Debian's pytorch 2.6.0 source leaves 1,080 loose objects (its trees, and
            # blobs git keeps loose: empty files, symlinks, files a filter converts) where it left 9,914, over
            # git's gc.auto threshold (6,700) in every clone that hardlinks them, each then starting a
            # background `git gc --auto` (a repack of all of PyTorch) after its first commit, am or fetch.
            # The setting is this command's only, never the store's; the trees and commit are the same
            pack = ("-c", "core.bigFileThreshold=1")
            with progress.task(f"import {archive.name} into git"):
                git_run(tmp, *plain, *pack, f"--git-dir={repo}", f"--work-tree={root}", "add", "-A", "-f", env=env)
            tree_sha = git_run(repo, "write-tree", env=env).out.strip()
            message = f"Import {archive.name}\n\nsha256 {digest}\n"
            commit = git_run(repo, "commit-tree", tree_sha, "-m", message, env=env).out.strip()
            git_run(repo, "update-ref", f"refs/tags/{tag}", commit)
            os.replace(repo, store)
        progress.note(
            f"upstream: imported {archive.name} as {tag} = {commit[:12]} " f"in {time.monotonic() - started:.1f} s"
        )
        return Upstream(str(archive), store, "archive", created=True, tag=tag)


# ------------------------------------------------------------------------------------------- refs
def resolve_commit(store: Path, ref: str, *, check: bool = True, source: str | None = None) -> str | None:
    """The 40-hex commit SHA of ``ref`` (tag, branch or SHA) in ``store``.

    Raises:
        UpstreamError: ``check`` and the ref is not there; the line lists a few tags.
    """
    result = git_run(store, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
    if result.rc == 0:
        return result.out.strip()
    if not check:
        return None
    tags = git_run(store, "tag", "--list", "--sort=-creatordate", check=False).out.split()[:5]
    known = f" (tags there: {', '.join(tags)})" if tags else ""
    raise UpstreamError(
        f"base ref {ref!r} is not in the upstream {source or store}{known}",
        "pass --base as a tag, branch or SHA that exists upstream",
    )


# -------------------------------------------------------------------------------------- worktrees
def worktrees(workdir: Path | str, base: str) -> tuple[Path, Path]:
    """The ``(stock, patched)`` worktree paths of a base ref: ``<workdir>/<slug(base)>/{stock,patched}``.

    Pure path arithmetic (nothing is created); :func:`checkout` creates them.
    """
    root = Path(workdir) / slug(base)
    return root / "stock", root / "patched"


def patched_branch(series: str, base: str, worktree: Path | str) -> str:
    """Branch of the ``patched`` worktree of a series: ``patched/<series>/<slug(base)>-<where>``, where
    ``<where>`` is the first 8 hex digits of the sha256 of the worktree's absolute path.

    Every clone of a project has its own ``work/`` folder but all share the cache's mirror, and so its
    branches; git checks a branch out in one worktree at a time. Named after the worktree, the branches
    of two clones that apply the same series at the same base never collide.
    """
    where = hashlib.sha256(str(Path(worktree).resolve()).encode()).hexdigest()[:8]
    return f"patched/{series}/{slug(base)}-{where}"


def _earlier_name(current: str, branch: str) -> bool:
    """Is ``current`` a name the patched worktree of ``branch`` had before: ``patched/<series>/<base>``
    (before branches were named after the worktree) or the same with another folder's hash?"""
    match = re.fullmatch(r"(patched/.+)-[0-9a-f]{8}", branch)
    if match is None or current == branch:
        return False
    return current == match[1] or re.fullmatch(re.escape(match[1]) + r"-[0-9a-f]{8}", current) is not None


def _branch_free(store: Path, branch: str) -> None:
    """Raise when ``branch`` is checked out in another live worktree (git allows one at a time)."""
    listing = git_run(store, "worktree", "list", "--porcelain").out
    for block in listing.split("\n\n"):
        if f"branch refs/heads/{branch}" in block.splitlines():
            where = block.splitlines()[0].removeprefix("worktree ")
            raise UpstreamError(
                f"branch {branch} is already checked out in {where}",
                f"use that --workdir, or free it: `git -C {where} checkout --detach`",
            )


def dirty_files(worktree: Path) -> list[str]:
    """Tracked files with uncommitted changes in ``worktree`` (``git status --porcelain``, untracked ignored)."""
    out = git_run(worktree, "status", "--porcelain", "--untracked-files=no").out
    return [line[3:] for line in out.splitlines() if line.strip()]


def common_dir(worktree: Path) -> Path | None:
    """The object store (``git rev-parse --git-common-dir``, absolute) of a worktree; None when not a worktree."""
    result = git_run(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
    return Path(result.out.strip()).resolve() if result.rc == 0 else None


def _ensure_own(worktree: Path, store: Path) -> None:
    common = common_dir(worktree)
    if common != store.resolve():
        raise UpstreamError(
            f"{worktree} exists but is not a worktree of {store}", "pass another --workdir, or move that folder away"
        )


#: where a submodule commit that no branch or tag of its repository reaches is kept in that repository's
#: mirror (fetched by its id, as ``git submodule update`` does), so that it survives ``git gc``
PINNED_SUBMODULE_REFS = "refs/harness/submodule-commits/"


def declared_submodules(repo: Path, commit: str) -> list[tuple[str, str, str]]:
    """``(path, url, commit)`` of each submodule that ``commit`` of ``repo`` (bare or not) declares: listed
    in its ``.gitmodules`` (path and url) and recorded in its tree as a gitlink (mode 160000). URLs are
    as written (a relative one, ``../x.git``, is relative to the superproject's own URL). ``[]`` without
    a ``.gitmodules``."""
    listing = git_run(
        repo, "config", "--blob", f"{commit}:.gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$", check=False
    )
    if listing.rc != 0:
        return []
    fields: dict[str, dict[str, str]] = {}
    for line in listing.out.splitlines():
        key, _, value = line.partition(" ")
        name, _, what = key.removeprefix("submodule.").rpartition(".")
        fields.setdefault(name, {})[what] = value.strip()
    declared = {f["path"]: f["url"] for f in fields.values() if f.get("path") and f.get("url")}
    if not declared:
        return []
    found = []
    for entry in git_run(repo, "ls-tree", "-z", commit, "--", *declared).out.split("\0"):
        meta, _, path = entry.partition("\t")
        mode_type_sha = meta.split()
        if len(mode_type_sha) == 3 and mode_type_sha[0] == "160000" and path in declared:
            found.append((path, declared[path], mode_type_sha[2]))
    return found


def absolute_url(url: str, parent: str | None) -> str | None:
    """``url`` of a ``.gitmodules`` entry made absolute the way git does: ``./x`` and ``../x`` are relative to
    the superproject's URL ``parent`` (each ``../`` drops one path component); None when relative without one."""
    if not url.startswith(("./", "../")):
        return url
    if not parent:
        return None
    base = parent.rstrip("/")
    while True:
        if url.startswith("./"):
            url = url[2:]
        elif url.startswith("../"):
            url = url[3:]
            cut = max(base.rfind("/"), base.rfind(":"))
            base = base[:cut] if cut > 0 else base
        else:
            return f"{base}/{url}"


def _submodule_mirror(url: str, commit: str, where: str) -> Path:
    """The mirror of submodule ``url`` holding ``commit`` (:func:`_mirror`: cloned once, fetched only when
    the commit is not there yet). A commit that no branch or tag reaches is fetched by its id and kept
    under :data:`PINNED_SUBMODULE_REFS`.

    Raises:
        UpstreamError: the repository cannot be cloned or fetched, or does not have the commit.
    """
    store = _mirror(url, commit).store
    if resolve_commit(store, commit, check=False) is None:
        got = git_run(store, "fetch", "--quiet", url, f"+{commit}:{PINNED_SUBMODULE_REFS}{commit}", check=False)
        if resolve_commit(store, commit, check=False) is None:
            raise UpstreamError(
                f"submodule {where}: commit {commit[:12]} is not in {url} ({got.last_line()})",
                "check the network; the upstream may have removed that commit (try another --base)",
            )
        git_run(store, "config", "uploadpack.allowReachableSHA1InWant", "true")
    return store


def submodule_mirrors(store: Path, commit: str) -> dict[str, Path]:
    """URL -> mirror, for every submodule of ``commit`` of ``store`` at every depth (each submodule's own
    ``.gitmodules`` at the commit its superproject records). Each URL is mirrored once into the cache,
    like an upstream (:func:`_mirror`), and fetched again only when a recorded commit is not there yet:
    every worktree of every base then clones its submodules from these mirrors, without the network.
    Relative URLs are resolved against the superproject's ``remote.origin.url`` (:func:`absolute_url`); one
    without a remote (an archive import), and a local path (``git clone`` reads a path that exists itself
    and applies no ``insteadOf`` to one), are left to git.

    Raises:
        UpstreamError: a submodule repository cannot be cloned or fetched, or lacks its recorded commit.
    """
    origin = git_run(store, "config", "--get", "remote.origin.url", check=False).out.strip() or None
    mirrors: dict[str, Path] = {}
    seen: set[tuple[str, str]] = set()
    todo = [(store, commit, origin, "")]
    while todo:
        repo, at, parent, prefix = todo.pop()
        for path, url, sub_commit in declared_submodules(repo, at):
            full = absolute_url(url, parent)
            if full is None or not looks_like_url(full) or (full, sub_commit) in seen:
                continue  # git clones a local path itself (no network), and never rewrites one
            seen.add((full, sub_commit))
            mirrors[full] = _submodule_mirror(full, sub_commit, prefix + path)
            todo.append((mirrors[full], sub_commit, full, f"{prefix}{path}/"))
    return mirrors


def _submodules(worktree: Path, store: Path) -> None:
    """``git submodule update --init --recursive`` in ``worktree`` from the cache's submodule mirrors
    (:func:`submodule_mirrors`): every submodule URL is rewritten to its mirror for this one command
    (``-c url.<mirror>.insteadOf=<url>``, which git passes on to the nested clones), so the submodules
    are fetched once per cache, not once per worktree. The submodules' own ``origin`` stays the
    upstream URL. ``protocol.file.allow=always`` lets git clone the mirrors, local paths it made itself."""
    if not (worktree / ".gitmodules").is_file():
        return
    head = git_run(worktree, "rev-parse", "HEAD").out.strip()
    mirrors = submodule_mirrors(store, head)
    rewrites = ["-c", "protocol.file.allow=always"]
    for url, mirror in sorted(mirrors.items()):
        rewrites += ["-c", f"url.{mirror}.insteadOf={url}"]
    progress.note(
        f"upstream: initialising submodules recursively in {worktree} from {len(mirrors)} mirror(s) in the cache"
    )
    with progress.task(f"submodules {worktree.name}"):
        result = git_run(worktree, *rewrites, "submodule", "update", "--init", "--recursive", check=False)
    if result.rc != 0:
        raise UpstreamError(
            f"submodule update in {worktree} failed: {result.last_line()}",
            f"fix the network or the mirror, then run `git -C {worktree} submodule update --init "
            f"--recursive` or run checkout again",
        )


def missing_submodules(worktree: Path | str) -> list[str]:
    """Submodule folders (relative paths) that are missing or empty in ``worktree``.

    Paths come from ``.gitmodules``; a tree without one that has PyTorch's layout (``setup.py`` and
    ``third_party/``) is checked against :data:`PYTORCH_DEFAULT_SUBMODULES`, the list PyTorch's own
    ``setup.py`` uses in that case. Anything else has no submodules: ``[]``.
    """
    worktree = Path(worktree)
    gitmodules = worktree / ".gitmodules"
    if gitmodules.is_file():
        out = git_run(
            worktree, "config", "--file", str(gitmodules), "--get-regexp", r"^submodule\..*\.path$", check=False
        ).out
        paths = [line.split(None, 1)[1].strip() for line in out.splitlines() if " " in line]
    elif (worktree / "setup.py").is_file() and (worktree / "third_party").is_dir():
        paths = list(PYTORCH_DEFAULT_SUBMODULES)
    else:
        paths = []

    def empty(path: Path) -> bool:
        return not path.is_dir() or not any(path.iterdir())

    return [p for p in paths if empty(worktree / p)]


def submodule_report(worktree: Path) -> str | None:
    """One line about missing submodules of ``worktree`` (None when all are present)."""
    missing = missing_submodules(worktree)
    if not missing:
        return None
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    return (
        f"upstream: this source has no submodules ({shown} missing or empty; e.g. a stripped source "
        f"archive): checkout is fine, but a wheel build needs them -- use a git upstream, or "
        f"`git submodule update --init --recursive` in a full clone"
    )


@dataclass(frozen=True)
class Checkout:
    """Result of :func:`checkout`: where things are and what the source lacks."""

    upstream: Upstream
    base: str
    commit: str
    stock: Path
    patched: Path
    branch: str | None
    missing_submodules: tuple[str, ...]


def checkout(source: str, base: str, workdir: Path | str, series: str | None = None) -> Checkout:
    """Create (or verify) the ``stock`` and ``patched`` worktrees of ``base``.

    ``stock`` is detached at the base commit; ``patched`` is on :func:`patched_branch` (created at
    the base when absent; kept with its commits when present) when ``series`` is given, else
    detached at the base (apply/refresh put it on the series' branch). Existing worktrees are reused; a
    ``stock`` that moved is put back on the base when clean.

    Raises:
        UpstreamError: unreachable upstream, unknown base ref, a folder in the way, a dirty ``stock``.
    """
    upstream = open_upstream(source, ref=base)
    store = upstream.store
    commit = resolve_commit(store, base, source=source)
    stock, patched = worktrees(workdir, base)
    _clear_partial_worktrees(store, inside(Path(workdir), stock.parent.name, "--base folder"))
    git_run(store, "worktree", "prune")
    branch = patched_branch(series, base, patched) if series else None
    created = []
    if stock.exists():
        _ensure_own(stock, store)
        _ensure_complete(stock)
        head = git_run(stock, "rev-parse", "HEAD").out.strip()
        if head != commit:
            dirty = dirty_files(stock)
            if dirty:
                raise UpstreamError(
                    f"stock worktree {stock} is not at {base} and has uncommitted changes: " f"{', '.join(dirty[:5])}",
                    f"commit or discard them (`git -C {stock} status`)",
                )
            keep_commits(stock, f"stock/{slug(base)}")
            git_run(stock, "checkout", "--quiet", "--detach", commit)
    else:
        _add_worktree(store, stock, ("--detach",), commit)
        created.append(stock)
    if patched.exists():
        _ensure_own(patched, store)
        _ensure_complete(patched)
        if branch:
            switch_branch(patched, branch, commit)
    else:
        if branch is None:
            _add_worktree(store, patched, ("--detach",), commit)
        elif git_run(store, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False).rc == 0:
            _branch_free(store, branch)
            _add_worktree(store, patched, (), branch)
        else:
            _add_worktree(store, patched, ("-b", branch), commit)
        created.append(patched)
    for tree in created:
        _submodules(tree, store)
    dirty = dirty_files(stock)
    if dirty:
        raise UpstreamError(
            f"stock worktree {stock} is not clean after checkout: {', '.join(dirty[:5])}",
            f"discard the changes (`git -C {stock} checkout -- .`), or remove it "
            f"(`git -C {store} worktree remove --force {stock}`) and run checkout again",
        )
    missing = tuple(missing_submodules(stock))
    return Checkout(upstream, base, commit, stock, patched, branch, missing)


_PARTIAL = ".partial-"


def _add_worktree(store: Path, final: Path, options: tuple[str, ...], commitish: str) -> None:
    """``git worktree add <options> <tmp> <commitish>`` under a temporary name beside ``final``, then
    ``git worktree move`` into place: a run killed midway (SIGKILL during a 30k-file checkout) leaves
    only the temporary folder, which the next run removes (:func:`_clear_partial_worktrees`), never a
    half-filled ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = (final.parent / f".{final.name}{_PARTIAL}{os.getpid()}").resolve()
    git_run(store, "worktree", "add", "--quiet", *options, str(tmp), commitish)
    git_run(store, "worktree", "move", str(tmp), str(final.resolve()))


def _clear_partial_worktrees(store: Path, root: Path) -> None:
    """Remove the temporary worktrees that a killed :func:`_add_worktree` left in ``root``."""
    for tmp in sorted(root.glob(f".*{_PARTIAL}*")) if root.is_dir() else []:
        target = inside(root, tmp.name, "partial worktree")
        git_run(store, "worktree", "remove", "--force", "--force", str(target), check=False)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        progress.note(f"upstream: removed {target.name}, a worktree left half-created by an interrupted run")


def _ensure_complete(worktree: Path) -> None:
    """Raise when ``worktree`` has no index: its checkout was killed before git finished writing it
    (a worktree made before atomic creation, or by hand)."""
    index = git_run(worktree, "rev-parse", "--path-format=absolute", "--git-path", "index").out.strip()
    if not Path(index).is_file():
        raise UpstreamError(
            f"worktree {worktree} is incomplete (no index: its checkout was interrupted)",
            f"remove it (`git worktree remove --force {worktree}`, or delete the folder and run "
            f"`git worktree prune`), then run the command again",
        )


def switch_branch(worktree: Path, branch: str, commit: str, *, adopt: bool = False) -> None:
    """Put ``worktree`` on ``branch`` (created at ``commit`` when absent); no-op when already there.

    A worktree on an earlier name of its patched branch (:func:`_earlier_name`) keeps its commits: that
    branch is renamed to ``branch``. A detached HEAD's commits are kept first (:func:`keep_commits`); with
    ``adopt`` (``refresh``), a detached HEAD on top of ``commit`` becomes ``branch`` instead (the commits
    only the branch held are kept).

    Raises:
        UpstreamError: the worktree has uncommitted changes and is on another branch.
    """
    current = git_run(worktree, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).out.strip()
    if current == branch:
        return
    if _earlier_name(current, branch):
        git_run(worktree, "branch", "--move", "--force", current, branch)
        progress.note(f"upstream: branch {current} of {worktree} renamed to {branch} (named after its worktree)")
        return
    dirty = dirty_files(worktree)
    if dirty:
        raise UpstreamError(
            f"worktree {worktree} is on {current or 'a detached HEAD'}, not {branch}, "
            f"and has uncommitted changes: {', '.join(dirty[:5])}",
            f"commit or discard them (`git -C {worktree} status`)",
        )
    exists = git_run(worktree, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False).rc == 0
    on_top = git_run(worktree, "rev-list", "--count", f"{commit}..HEAD").out.strip() if adopt and not current else "0"
    if on_top != "0" and git_run(worktree, "merge-base", "--is-ancestor", commit, "HEAD", check=False).rc == 0:
        if exists:
            keep_commits(worktree, branch.removeprefix("patched/"), rev=f"refs/heads/{branch}", moving=branch)
        git_run(worktree, "checkout", "--quiet", "-B", branch)
        progress.note(f"upstream: detached HEAD of {worktree} ({on_top} commit(s) on the base) is now branch {branch}")
        return
    if not current:
        keep_commits(worktree, branch.removeprefix("patched/"))
    git_run(worktree, "checkout", "--quiet", *((branch,) if exists else ("-b", branch, commit)))


def keep_commits(worktree: Path, label: str, *, rev: str = "HEAD", moving: str | None = None) -> str | None:
    """Before a command moves ``worktree``'s HEAD (or resets ``moving``, the branch ``rev`` is on): when ``rev``
    has commits that no branch (but ``moving``) nor tag holds (``git rev-list --count <rev> --not --branches
    --tags --remotes``), a new branch ``saved/<label>-<sha12 of rev>`` keeps them and a line on stderr names
    it. Returns its name, or None when nothing needed keeping.

    Raises:
        UpstreamError: git would not make that branch (the name is taken by other commits, say): nothing moved.
    """
    not_moving = [f"--exclude={moving}"] if moving else []
    args = ("rev-list", "--count", rev, "--not", *not_moving, "--branches", "--tags", "--remotes")
    count = git_run(worktree, *args).out.strip()
    if count in ("", "0"):
        return None
    sha = git_run(worktree, "rev-parse", "--verify", f"{rev}^{{commit}}").out.strip()
    name = f"saved/{label}-{sha[:12]}"
    made = git_run(worktree, "branch", "--quiet", name, sha, check=False)
    if made.rc != 0:
        raise UpstreamError(
            f"cannot keep {count} commit(s) of {worktree} ({sha[:12]}) on branch {name}: {made.last_line()}",
            f"keep them yourself (`git -C {worktree} branch <name> {sha}`), then run again",
        )
    progress.note(
        f"upstream: kept {count} commit(s) of {worktree} ({sha[:12]}), which no other branch holds, on branch "
        f"{name} (`git -C {worktree} checkout {name}` gets them back)"
    )
    return name
