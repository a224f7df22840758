"""``init``: a new patch series from the commits on the patched worktree (patches + a commented series.toml).

After ``checkout --base REF`` the user commits the change in ``<workdir>/<REF>/patched``; :func:`init_series`
writes those commits as the series' patches (:func:`harness.series.write_patches`, the bytes ``refresh``
writes) and a ``series.toml`` skeleton (:func:`skeleton`) with every line commented: ``name``, ``title`` (the
first commit's subject), ``upstream``, one ``[[base]]`` (ref, pinned commit, patches, files), and ``[evidence]``:

- ``markers``: the environment variables the diff adds (:func:`proposed_markers`): string literals read by an
  environment lookup in an added line of code (``c10::utils::get_env``/``check_env``, ``getenv``, ``std::getenv``,
  ``os.getenv``, ``os.environ``; new test files aside: the library is where a marker must be), and
  ``PYTORCH_*``/``TORCH_*`` names of added docs that added code quotes; a name that the base already holds
  (``git grep`` at the base commit) is not one the patch adds, so it is left out;
- per marker, one env config ``[evidence.<device>.env.<marker lowercased>]`` with the marker set to ``1``; the
  device from the files (:func:`device_of`: ``.mm``/``/mps/`` -> mps, ``.cu``/``/cuda/`` -> cuda, else cpu);
- the contrasts "the change under its config" (``patched/<config>`` vs ``stock/<config>``) and "no regression
  with it off" (``patched/<default>`` vs ``stock/<default>``, ``unchanged``);
- each new test file (added, under ``test/`` or named ``test_*.py``) as ``[[evidence.test]]`` expected to fail
  on stock and pass on patched.

The folder is written whole in a temporary sibling, loaded and checked (:func:`harness.manifest.load_series`,
:func:`harness.series.check_series`), then renamed into place: a refusal leaves nothing behind, and an
existing folder is never written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.configs import PROFILES
from harness.errors import SeriesError
from harness.manifest import MANIFEST, PATCHES_DIR, load_series, shown
from harness.paths import slug
from harness.series import PatchCheck, check_series, write_patches
from harness.upstream import common_dir, dirty_files, git_run, patched_branch, resolve_commit, switch_branch, worktrees

#: a series name: the folder name and, with ``-`` as ``.``, the patched wheel's local version label (PEP 440
#: local versions: ASCII letters and digits, segments separated by ``.``)
SERIES_NAME = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*")
#: an environment lookup in an added line of code and the variable it reads (C++ and Python spellings)
_LOOKUP = re.compile(
    r"""(?:c10::utils::get_env|c10::utils::check_env|\bget_env|\bcheck_env|\bgetenv|os\.environ\.get|"""
    r"""os\.environ\[|os\.environ\.setdefault)\s*\(?\s*["']([A-Za-z_][A-Za-z0-9_]*)["']"""
)
#: a PyTorch environment variable named in an added line of documentation
_DOCS_NAME = re.compile(r"\b((?:PYTORCH|TORCH)_[A-Z0-9_]+)\b")
_DOCS_SUFFIXES = (".md", ".rst", ".txt")
#: the name of the no-regression contrast by how many markers there are (none, one, several)
OFF = ("no regression", "no regression with it off", "no regression with them off")
#: the config each device's evidence starts from (the first of :data:`harness.configs.PROFILES`, no variable)
DEFAULTS = {device: profiles[0].name for device, profiles in PROFILES.items()}


@dataclass(frozen=True)
class NewSeries:
    """What :func:`init_series` wrote: the folder, the manifest's text, and ``check``'s outcome per patch."""

    folder: Path
    text: str
    base_commit: str
    branch: str
    checks: tuple[PatchCheck, ...]


def added_lines(diff: str) -> dict[str, list[str]]:
    """Per file, the lines a unified diff (``git diff -U0``) adds, without their ``+``."""
    out: dict[str, list[str]] = {}
    current = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0]
            current = None if name == "/dev/null" else name.removeprefix("b/")
            continue
        if current is not None and line.startswith("+"):
            out.setdefault(current, []).append(line[1:])
    return out


def proposed_markers(added: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """(markers, docs-only names): the environment variables the added lines of code read (:data:`_LOOKUP`, or a
    ``PYTORCH_*``/``TORCH_*`` name (:data:`_DOCS_NAME`) that the added docs name and an added line of code
    quotes), in order of first appearance; and the names the added docs give that no added code quotes (a
    marker must be in the patched build's libraries, so these are only proposed in a comment)."""
    code = [line for name, lines in added.items() if not name.endswith(_DOCS_SUFFIXES) for line in lines]
    docs = [line for name, lines in added.items() if name.endswith(_DOCS_SUFFIXES) for line in lines]
    read = [n for line in code for n in _LOOKUP.findall(line)]
    named = list(dict.fromkeys(n for line in docs for n in _DOCS_NAME.findall(line)))
    quoted = [n for n in named if any(f'"{n}"' in line or f"'{n}'" in line for line in code)]
    markers = list(dict.fromkeys(read + quoted))
    return markers, [n for n in named if n not in markers]


def device_of(files: list[str]) -> str:
    """The device the change is for, from its files: mps (``.mm``, ``/mps/``), cuda (``.cu``, ``.cuh``,
    ``/cuda/``), else cpu."""
    if any(f.endswith(".mm") or "/mps/" in f for f in files):
        return "mps"
    if any(f.endswith((".cu", ".cuh")) or "/cuda/" in f for f in files):
        return "cuda"
    return "cpu"


def new_tests(added_files: list[str]) -> list[str]:
    """The added files that are Python tests: under ``test/``/``tests/`` or named ``test_*.py``/``*_test.py``."""
    return [
        f
        for f in added_files
        if f.endswith(".py")
        and (f.startswith(("test/", "tests/")) or Path(f).name.startswith("test_") or f.endswith("_test.py"))
    ]


def config_name(marker: str) -> str:
    """The env config of one marker: its name lowercased, without a ``PYTORCH_``/``TORCH_`` prefix."""
    return re.sub(r"^(?:PYTORCH|TORCH)_", "", marker).lower()


def _q(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string (the same escapes)


@dataclass(frozen=True)
class DiffFacts:
    """What ``init`` reads in the diff of the commits: the files changed, the markers proposed, the names read
    that the base already has, the names only the added docs give, and the test files added."""

    files: list[str]
    markers: list[str]
    already: list[str]
    docs_only: list[str]
    tests: list[str]


def skeleton(
    name: str, title: str, upstream: str, base: str, commit: str, directory: str, patches: list[str], facts: DiffFacts
) -> str:
    """The text of a new series.toml, every line commented (see the module doc): the top-level keys and the
    ``[[base]]`` of ``patches`` (:func:`_base_lines`), then ``[evidence]`` from ``facts`` (:func:`_evidence_lines`;
    ``already`` and ``docs_only`` are listed in comments, not as markers)."""
    return "\n".join(
        _base_lines(name, title, upstream, base, commit, directory, patches, facts) + _evidence_lines(facts)
    )


def _base_lines(
    name: str, title: str, upstream: str, base: str, commit: str, directory: str, patches: list[str], facts: DiffFacts
) -> list[str]:
    made = f"`python -m harness init` from {len(patches)} commit(s) on {base}"
    return [
        f"# Written by {made}; edit every line to say what the",
        "# series is (docs/new-series.md lists every key). `check` validates the file on every command.",
        f"name = {_q(name)}  # the folder's name; the patched wheel's version label is <name>.<series hash8>",
        f"title = {_q(title)}  # one line: what the series does (the PR title; here the first commit's subject)",
        f"upstream = {_q(upstream)}  # the default --upstream of every command",
        '# related = ["https://github.com/pytorch/pytorch/issues/..."]  # upstream issues and pull requests',
        "",
        "# The pull request's text (`pr` writes PR.md from it); without `why`, the first patch's 'Why:' paragraph.",
        "# [pr]",
        '# why = "the problem the series solves"',
        '# alternative = "the nearest thing a user can already do"',
        '# over_alternative = "what the series adds over it"',
        "",
        "[[base]]",
        f"ref = {_q(base)}  # the upstream ref the patches apply to (--base)",
        f"commit = {_q(commit)}  # {base} pinned: check/apply/refresh stop when the ref moves",
        f"dir = {_q(directory)}  # the folder of this base's patch files",
        "patches = [  # git format-patch of your commits, in `git am` order (`refresh` rewrites them)",
        *(f"    {_q(p)}," for p in patches),
        "]",
        "files = [  # exactly the files the series changes: `check` fails when the diff differs",
        *(f"    {_q(f)}," for f in facts.files),
        "]",
        f'notes = "Made by {made}."  # how it was made',
        "",
        "# What `compare` measures for the series (docs/new-series.md, step 8).",
        "[evidence]",
    ]


def _evidence_lines(facts: DiffFacts) -> list[str]:
    markers, device = facts.markers, device_of(facts.files)
    generic = [c.name for c in PROFILES[device]]  # a series' config may not take a generic one's name
    default = DEFAULTS[device]
    configs = [config_name(m) if config_name(m) not in generic else m.lower() for m in markers]
    if markers:
        out = [
            f"markers = [{', '.join(map(_q, markers))}]  # the variables the patch adds (`build` checks the "
            "patched libraries hold them, stock's do not)"
        ]
    else:
        out = ["# markers = []  # no environment variable found in the added lines: name the ones the patch adds"]
    if facts.already:
        out.append(f"# not markers: {', '.join(facts.already)} (read by the diff, but the base already has them)")
    if facts.docs_only:
        out.append(
            f"# named in the added docs, quoted by no added code: {', '.join(facts.docs_only)} (a marker if read)"
        )
    if facts.tests:
        out.append('# test_requirements = ["pytest"]  # what the test files import, installed into each build\'s venv')
    out.append(
        '# workload = "workload.py"  # your own cells beside the patches (docs/new-series.md, "Your own workload"); '
        "without it compare measures the built-in GEMM/SDPA cells"
    )
    out += [
        "",
        f"[evidence.{device}]  # the device the change is for (from its files: {device})",
        f"configs = [{', '.join(map(_q, [default, *configs]))}]  # the configs compare runs: "
        f"{default} (generic, nothing set) and one per marker",
    ]
    for marker, config in zip(markers, configs):
        out += [
            "",
            f"[evidence.{device}.env.{config}]  # a config of the series: exactly these variables are set",
            f'{marker} = "1"  # the value that turns the change on (check it in the code)',
        ]
    for marker, config in zip(markers, configs):
        out += [
            "",
            "[[evidence.contrast]]",
            f'name = "the change under its config ({config})"  # how the report names the contrast',
            f'a = "patched/{config}"  # the patched build with {marker} set',
            f'b = "stock/{config}"  # stock under the same variables (stock does not read it)',
            'claim = "faster"  # faster (A faster than B), unchanged, equivalent or none: what the change claims',
            '# ops = ["mm"]  # the ops the change reaches (default: every op measured, the workload\'s too)',
        ]
    out += [
        "",
        "[[evidence.contrast]]",
        f"name = {_q(OFF[min(len(markers), 2)])}  # how the report names it",
        f'a = "patched/{default}"  # the patched build with no variable set',
        f'b = "stock/{default}"  # stock with no variable set',
        'claim = "unchanged"  # the patch costs nothing where it is not used',
    ]
    env = ", ".join(f'{m} = "1"' for m in markers)
    for test in facts.tests:
        out += [
            "",
            "[[evidence.test]]",
            f"name = {_q(f'the new test {Path(test).name}')}  # how the report names the test",
            f"file = {_q(test)}  # a test file the series adds",
            *([f"env = {{ {env} }}  # the variables it runs under (drop those the test sets itself)"] if env else []),
            'expect = { stock = "fail", patched = "pass" }  # it fails without the change, passes with it',
            '# fails_with = "AssertionError: ..."  # the first line of the failure on stock (docs/new-series.md)',
        ]
    return out + [""]


def _upstream_of(store: Path, given: str | None) -> str:
    """``--upstream``, else the URL the mirror ``store`` was cloned from; an imported archive's store (under
    ``imports/``, :func:`harness.upstream.import_archive`) records none.

    Raises:
        SeriesError: no ``--upstream`` for an imported archive (or a store without ``origin``).
    """
    if given:
        return given
    archive = store.parent.name == "imports"
    url = "" if archive else git_run(store, "config", "--get", "remote.origin.url", check=False).out.strip()
    if not url:
        raise SeriesError(
            f"cannot tell the upstream of {store} (an imported archive has no URL)",
            "pass --upstream with the URL, repository or archive the worktrees came from",
        )
    return url


def series_folder(spec: str) -> Path:
    """The folder ``init`` writes: ``patches/<spec>`` for a bare name, else the path given.

    Raises:
        SeriesError: the folder name is not a series name (:data:`SERIES_NAME`), or the folder exists.
    """
    folder = PATCHES_DIR / spec if len(Path(spec).parts) == 1 else Path(spec)
    if not SERIES_NAME.fullmatch(folder.name):
        raise SeriesError(
            f"--series {spec!r}: {folder.name!r} is not a series name (letters and digits, '-' between them)",
            "pick a name like my-fix: it becomes the patched wheel's version label",
        )
    if folder.exists() or folder.is_symlink():
        raise SeriesError(
            f"{shown(folder)} already exists: init never writes into an existing series",
            "change that series with `refresh`, or pick another --series name",
        )
    return folder


def init_series(spec: str, base: str, workdir: Path | str, upstream: str | None = None) -> NewSeries:
    """Write a new series from the commits on ``<workdir>/<base>/patched`` (module doc); the worktree then is
    on the series' branch (a detached HEAD is adopted, as ``refresh`` does).

    Raises:
        SeriesError: the folder exists or its name is no series name; no patched worktree of ``base``; an
            ``am`` in progress, uncommitted changes, or no commits on the base; the upstream cannot be told;
            the skeleton does not load or the series does not apply at the base (nothing is written then).
    """
    folder = series_folder(spec)
    _, patched = worktrees(workdir, base)
    store = common_dir(patched) if patched.is_dir() else None
    if store is None:
        raise SeriesError(
            f"no patched worktree of {base} at {patched}",
            f"run `python -m harness checkout --base {base}` (same --workdir), commit your change there, then init",
        )
    commit, subjects = _commits_on(patched, store, base)
    source = _upstream_of(store, upstream)
    facts = diff_facts(patched, store, commit)
    directory = slug(base)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        staged = tmp / folder.name
        patches, _ = write_patches(patched, commit, staged / directory, [])
        text = skeleton(folder.name, subjects[0], source, base, commit, directory, patches, facts)
        (staged / MANIFEST).write_text(text, encoding="utf-8")
        series = load_series(staged)
        checks = tuple(check_series(series, series.bases[0], store, commit))
        bad = [c for c in checks if c.status == "failed"]
        if bad:
            raise SeriesError(
                f"the commits on {patched} do not apply as patches at {base}: {bad[0].patch}: "
                f"{'; '.join(bad[0].failures)}",
                "report this with the commits: init wrote nothing",
            )
        if folder.exists():
            raise SeriesError(f"{shown(folder)} appeared while init ran", "pick another --series name")
        os.replace(staged, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return NewSeries(folder, text, commit, _carry(patched, patched_branch(folder.name, base, patched), commit), checks)


def _commits_on(patched: Path, store: Path, base: str) -> tuple[str, list[str]]:
    """The base commit and the subjects of the commits ``base..HEAD`` of ``patched``, oldest first.

    Raises:
        SeriesError: an ``am`` or rebase in progress, uncommitted changes, no commits, HEAD not on the base.
    """
    gitdir = Path(git_run(patched, "rev-parse", "--path-format=absolute", "--git-dir").out.strip())
    if (gitdir / "rebase-apply").is_dir() or (gitdir / "rebase-merge").is_dir():
        raise SeriesError(f"a `git am` or rebase is in progress in {patched}", "finish it or abort it first")
    dirty = dirty_files(patched)
    if dirty:
        raise SeriesError(
            f"patched worktree {patched} has uncommitted changes: {', '.join(dirty[:5])}",
            "commit them (init writes commits, not the working tree)",
        )
    commit = resolve_commit(store, base, source=str(store))
    subjects = git_run(patched, "log", "--reverse", "--format=%s", f"{commit}..HEAD").out.splitlines()
    if not subjects:
        raise SeriesError(
            f"{patched} has no commits on top of {base} ({commit[:12]})",
            "commit your change there first (one commit per logical step), then init",
        )
    if git_run(patched, "merge-base", "--is-ancestor", commit, "HEAD", check=False).rc != 0:
        raise SeriesError(
            f"the HEAD of {patched} is not on top of {base} ({commit[:12]})",
            f"rebase your commits onto {base} (`git -C {patched} rebase {commit[:12]}`), then init",
        )
    return commit, subjects


def diff_facts(patched: Path, store: Path, commit: str) -> DiffFacts:
    """The :class:`DiffFacts` of ``commit..HEAD`` in ``patched``; a proposed marker that the base already
    holds (``git grep -w`` at ``commit`` in ``store``) goes to ``already``."""
    files = git_run(patched, "diff", "--name-only", "--no-renames", commit, "HEAD").out.split()
    added_files = git_run(patched, "diff", "--name-only", "--no-renames", "--diff-filter=A", commit, "HEAD").out.split()
    tests = new_tests(added_files)
    added = {  # a test reads the variable too, but the library is where a marker must be
        name: lines
        for name, lines in added_lines(git_run(patched, "diff", "-U0", "--no-renames", commit, "HEAD").out).items()
        if name not in tests
    }
    names, docs_only = proposed_markers(added)
    known = [n for n in names if git_run(store, "grep", "-q", "-w", "-F", n, commit, "--", check=False).rc == 0]
    return DiffFacts(files, [n for n in names if n not in known], known, docs_only, tests)


def _carry(patched: Path, branch: str, commit: str) -> str:
    """Put ``patched`` on the series' ``branch`` (a detached HEAD becomes it; a branch of yours stays where it
    is and ``branch`` is made at its head) and return the branch the worktree is on."""
    current = git_run(patched, "symbolic-ref", "--quiet", "--short", "HEAD", check=False).out.strip()
    if not current:
        switch_branch(patched, branch, commit, adopt=True)
        return branch
    if git_run(patched, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False).rc != 0:
        git_run(patched, "checkout", "--quiet", "-b", branch)
        return branch
    return current  # apply puts the worktree on the series' branch later
