"""Workflows: the single steps of the library strung together, each workflow a list of tasks.

A workflow is a tuple of tasks run in order on one state (:func:`execute`, the way nox's
``workflow.execute`` runs its tasks): each task reads what the earlier ones left in the state and adds
its own; a task that returns an exit status stops the workflow there. The steps themselves live in
their rooms and know nothing of each other: :mod:`harness.upstream` (checkout), :mod:`harness.series`
(check, apply, refresh, rebase), :mod:`harness.build` (plan, preflight, wheel, verify).

- The series commands' contexts: :func:`resolve_context` (which series, upstream and base a command
  works on), :func:`checkout_context`, :func:`check_context`, :func:`refresh_context`,
  :func:`existing_checkout`.
- ``build``: :data:`BUILD` -- the request's context, this Mac against the base (before any checkout),
  checkout -> submodule preflight -> apply (:func:`resolve_sources`), the plan (``--dry-run`` stops
  there), the series' markers declared, ``--dist`` claimed, then preflight -> build -> verify
  (:func:`build_and_verify`), each once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.build.plan import BuildPlan, SeriesRef, git_head, plan_build, plan_without_source
from harness.build.preflight import (
    check_host_macos,
    missing_submodules,
    preflight_build,
    preflight_source,
    refuse_host,
)
from harness.build.verify import VerifyResult, check_markers_declared, verify_built
from harness.build.wheel import BuildResult, build_wheel, holds_builds
from harness.errors import BuildError, SeriesError, UpstreamError, UsageError
from harness.manifest import Base, Series, check_pin, load_series
from harness.outdir import DIST_WRITES, claim
from harness.series import PatchCheck, apply_series, check_series, refresh_series
from harness.upstream import (
    DEFAULT_UPSTREAM,
    Checkout,
    Upstream,
    checkout,
    common_dir,
    open_upstream,
    patched_branch,
    resolve_commit,
    switch_branch,
    worktrees,
)

#: a task: takes the workflow's state, returns None to go on or an exit status to stop
Task = Callable[[Any], "int | None"]


def execute(tasks: Sequence[Task], state: Any) -> int:
    """Run ``tasks`` in order on ``state``; the first that returns an int stops the workflow with it as the
    exit status (0 when every task went on). A task's error propagates: it is shown once, by the CLI."""
    for task in tasks:
        status = task(state)
        if isinstance(status, int):
            return status
    return 0


# ------------------------------------------------------------------------------------------ contexts
@dataclass(frozen=True)
class Context:
    """What a command works on: the series (if any), the upstream source and the base ref."""

    series: Series | None
    upstream: str
    base: str
    entry: Base | None


def resolve_context(series: str | None, base: str | None, upstream: str | None, *, need_series: bool = True) -> Context:
    """The series named by ``series`` (a folder under patches/ or a path) loaded, its base entry chosen.

    ``upstream`` (None) defaults to the series' ``upstream``, else :data:`~harness.upstream.DEFAULT_UPSTREAM`;
    ``base`` (None) defaults to the series' only base.

    Raises:
        SeriesError: invalid series, unknown base, or no series when ``need_series``.
        UpstreamError: no ``base`` without a series.
    """
    loaded = load_series(series) if series else None
    if need_series and loaded is None:
        raise SeriesError("this command needs a patch series", "pass --series NAME (a folder under patches/) or PATH")
    entry = loaded.base(base) if loaded else None
    ref = entry.ref if entry else base
    if not ref:
        raise UpstreamError("no base ref given", "pass --base REF (a tag, branch or SHA), e.g. --base v2.6.0")
    return Context(loaded, upstream or (loaded.upstream if loaded else DEFAULT_UPSTREAM), ref, entry)


def checkout_context(ctx: Context, workdir: Path | str, ref: str | None = None) -> Checkout:
    """Worktrees of the series at ``ref`` (default: the context's base; ``rebase --onto``'s ref otherwise, named
    so when it is not upstream) via :func:`harness.upstream.checkout`; at the base, its commit is checked against
    the series' pin.

    Raises:
        SeriesError: the base commit differs from the pinned one. UpstreamError: from the checkout.
    """
    assert ctx.series is not None and ctx.entry is not None
    try:
        co = checkout(ctx.upstream, ref or ctx.base, workdir, ctx.series.name)
    except UpstreamError as exc:  # resolve_commit names --base: here the ref came from rebase --onto
        if ref is None or not exc.cause.startswith(f"base ref {ref!r} is not in the upstream"):
            raise
        raise UpstreamError(
            "--onto ref" + exc.cause.removeprefix("base ref"),
            "pass --onto as a tag, branch or SHA that exists upstream",
        ) from None
    if ref is None:
        check_pin(co.upstream.kind, co.commit, ctx.entry)
    return co


def check_context(ctx: Context) -> tuple[str, list[PatchCheck]]:
    """``check``: the base commit and, per patch, whether it applies there (worktrees untouched).

    Raises:
        SeriesError: the base commit differs from the pinned one. UpstreamError: unreachable upstream.
    """
    assert ctx.series is not None and ctx.entry is not None
    upstream = open_upstream(ctx.upstream, ref=ctx.base)
    commit = resolve_commit(upstream.store, ctx.base, source=ctx.upstream)
    check_pin(upstream.kind, commit, ctx.entry)
    return commit, check_series(ctx.series, ctx.entry, upstream.store, commit)


def refresh_context(ctx: Context, workdir: Path | str) -> tuple[Path, int]:
    """``refresh`` offline (:func:`existing_checkout`): the patch folder and how many files changed. A
    detached HEAD with commits on the base becomes the series' branch: those commits are what it writes."""
    assert ctx.series is not None and ctx.entry is not None
    co = existing_checkout(ctx, workdir, adopt=True)
    check_pin(co.upstream.kind, co.commit, ctx.entry)
    return ctx.series.path / ctx.entry.dir, refresh_series(ctx.series, ctx.entry, co)


def existing_checkout(ctx: Context, workdir: Path | str, *, adopt: bool = False, switch: bool = True) -> Checkout:
    """The :class:`Checkout` of the patched worktree that is already there, without opening the
    upstream (no clone, no fetch: refresh works offline and never moves the base under the commits).

    The worktree is put on the series' branch (:func:`harness.upstream.switch_branch`): commits of a
    detached HEAD are kept on a branch that the message names, or, with ``adopt``, become that branch.
    ``switch=False`` (``pr``): HEAD is left where it is (the caller compares what is checked out).

    Raises:
        SeriesError: there is no patched worktree of the base in ``workdir``.
        UpstreamError: that folder is not a git worktree, or its store lacks the base ref.
    """
    assert ctx.series is not None
    stock, patched = worktrees(workdir, ctx.base)
    if not patched.is_dir():
        raise SeriesError(
            f"no patched worktree of {ctx.base} at {patched}: nothing to refresh from",
            f"run `python -m harness apply --series {ctx.series.name}` (same --workdir) first, "
            f"commit your change there, then refresh",
        )
    store = common_dir(patched)
    if store is None:
        raise UpstreamError(f"{patched} is not a git worktree", "move that folder away and run apply again")
    commit = resolve_commit(store, ctx.base, source=str(store))
    branch = patched_branch(ctx.series.name, ctx.base, patched)
    if switch:
        switch_branch(patched, branch, commit, adopt=adopt)
    kind = "archive" if store.parent.name == "imports" else "git"
    return Checkout(Upstream(ctx.upstream, store, kind, created=False), ctx.base, commit, stock, patched, branch, ())


# ------------------------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class Sources:
    """What a build builds: the two trees, the base commit and the series (None = not resolved)."""

    stock: Path | None
    patched: Path | None
    base_sha: str | None
    series: SeriesRef | None
    base: str | None = None

    def tree(self, kind: str, incremental: bool = False) -> Path | None:
        """The tree a build of ``kind`` compiles: ``stock`` for stock and ``--incremental`` builds (the series
        is applied in the built stock tree), else ``patched``."""
        return self.stock if kind == "stock" or incremental else self.patched


def series_ref(series: Series, entry: Base) -> SeriesRef:
    """:class:`harness.manifest.Series` + its ``Base`` entry -> :class:`~harness.build.plan.SeriesRef` (patches
    of that base, its markers, ``files``)."""
    return SeriesRef(series.name, tuple(series.patch_paths(entry)), series.evidence.markers, tuple(entry.files or ()))


def _given_source(kind: str, source: Path, series: str | None, base: str | None, dry_run: bool) -> Sources:
    """``--source``: that directory is both trees (``series`` only names the label and markers)."""
    src = Path(source)
    if not src.is_dir():
        raise BuildError(
            f"--source {src}: no such directory",
            "pass the root of a source tree (it holds version.txt and setup.py or pyproject.toml), "
            "or drop --source to build the worktrees of --base",
        )
    ref = None
    if series:
        loaded = load_series(series)
        ref = series_ref(loaded, loaded.base(base))
    if not dry_run:
        if kind == "patched" and ref is None:
            raise UsageError("--kind patched needs --series", "pass --series NAME")
        preflight_source(src)
    return Sources(src, src, git_head(src), ref, base)


def resolve_sources(
    kind: str,
    *,
    source: Path | None = None,
    series: str | None = None,
    base: str | None = None,
    upstream: str | None = None,
    workdir: Path | str = "work",
    dry_run: bool = False,
    incremental: bool = False,
    context: Context | None = None,
) -> Sources:
    """The trees a build of ``kind`` uses: checked out, checked for submodules, the series applied.

    ``source``: that directory is both trees (``series`` only names the label and markers).
    ``dry_run``: existing worktrees are read, nothing is cloned, imported or applied.
    Otherwise: checkout (worktrees at the base), the submodule preflight of the tree to build (one line,
    before the series is applied or anything installed), then ``apply`` of the series into ``patched``
    (a patched, non-incremental build). ``context``: the already resolved series and base.

    Raises:
        SeriesError, UpstreamError: from series/upstream (bad series, unknown base, unreachable upstream).
        BuildError: the source lacks its submodules; the series does not apply.
        UsageError: a patched build of ``--source`` without a series.
    """
    if source is not None:
        return _given_source(kind, source, series, base, dry_run)
    if dry_run and not (series or base):
        return Sources(None, None, None, None)
    ctx = context or resolve_context(series, base, upstream, need_series=kind == "patched")
    ref = series_ref(ctx.series, ctx.entry) if ctx.series is not None and ctx.entry is not None else None
    if dry_run:
        stock, patched = worktrees(workdir, ctx.base)
        if not stock.is_dir():
            return Sources(None, None, None, ref, ctx.base)
        return Sources(stock, patched, git_head(stock), ref, ctx.base)
    co = checkout(ctx.upstream, ctx.base, workdir, ctx.series.name if ctx.series else None)
    sources = Sources(co.stock, co.patched, co.commit, ref, ctx.base)
    preflight_source(co.stock if kind == "stock" or incremental else co.patched)
    if kind == "patched" and not incremental:
        assert ctx.series is not None and ctx.entry is not None
        outcome = apply_series(ctx.series, ctx.entry, co)
        if outcome is not None and not outcome.ok:
            raise BuildError(
                f"series {ctx.series.name} does not apply in {co.patched} ({outcome.stopped_at}: {outcome.reason})",
                f"resolve it with `python -m harness apply --series {ctx.series.name}`",
            )
    return sources


# --------------------------------------------------------------------------------------------- build
def build_and_verify(
    plan: BuildPlan, *, force: bool = False, verify: bool = True
) -> tuple[BuildResult, VerifyResult | None]:
    """Preflight (compiler, CMake, free disk: :func:`~harness.build.preflight.preflight_build`, before the
    build venv), :func:`~harness.build.wheel.build_wheel`, then (``verify``)
    :func:`~harness.build.verify.verify_built` against the plan's series markers.

    Raises:
        BuildError: preflight refused (one line). BuildFailed: the build failed (its log tail in ``tail``).
        VerifyError: the wheel is wrong (it was moved aside).
    """
    preflight_build(plan)
    result = build_wheel(plan, force=force)
    return result, (verify_built(plan, result.wheel) if verify else None)


@dataclass(frozen=True)
class BuildRequest:
    """What ``build`` is asked, as plain values (:mod:`harness.commands.build` fills it from its options)."""

    kind: str
    platform: str
    source: Path | None = None
    series: str | None = None
    base: str | None = None
    upstream: str | None = None
    workdir: Path | str = "work"
    dist: Path = Path("dist")
    jobs: int | None = None
    build_type: str = "Release"
    overrides: Mapping[str, str] = field(default_factory=dict)
    incremental: bool = False
    force: bool = False
    verify: bool = True
    dry_run: bool = False


@dataclass
class BuildState:
    """What the tasks of :data:`BUILD` hand on, filled in task by task."""

    request: BuildRequest
    context: Context | None = None
    sources: Sources | None = None
    plan: BuildPlan | None = None
    description: str | None = None
    result: BuildResult | None = None
    verified: VerifyResult | None = None


def _context(state: BuildState) -> None:
    """The series and base the request names (no checkout); a dry run without either has none."""
    r = state.request
    if r.kind == "stock" and r.incremental:
        raise UsageError("--incremental applies to patched builds only", "drop --incremental for --kind stock")
    if r.source is None and (r.series or r.base or not r.dry_run):
        state.context = resolve_context(r.series, r.base, r.upstream, need_series=r.kind == "patched")


def _host(state: BuildState) -> None:
    """Before any checkout: refuse a Mac older than the base needs, judged from ``--source``, else the
    base's stock worktree when it is there, else upstream's declared recipe of the base."""
    r = state.request
    if r.dry_run:
        return
    tree, base = r.source, r.base
    if tree is None and state.context is not None:
        base = state.context.base
        stock, _ = worktrees(r.workdir, base)
        tree = stock if stock.is_dir() else None
    refuse_host(r.platform, tree, base)


def _sources(state: BuildState) -> None:
    """Checkout -> submodule preflight -> apply (:func:`resolve_sources`)."""
    r = state.request
    state.sources = resolve_sources(
        r.kind,
        source=r.source,
        series=r.series,
        base=r.base,
        upstream=r.upstream,
        workdir=r.workdir,
        dry_run=r.dry_run,
        incremental=r.incremental,
        context=state.context,
    )


def _plan(state: BuildState) -> None:
    """The build plan of the tree to build; before a checkout (a dry run) the plan with placeholders."""
    r, sources = state.request, state.sources
    assert sources is not None
    tree = sources.tree(r.kind, r.incremental)
    if tree is None:
        state.plan = plan_without_source(
            r.platform,
            r.kind,
            jobs=r.jobs,
            build_type=r.build_type,
            workdir=r.workdir,
            dist_dir=r.dist,
            overrides=r.overrides,
            series=sources.series,
            series_name=r.series,
            base=sources.base,
        )
        return
    state.plan = plan_build(
        tree,
        r.platform,
        kind=r.kind,
        series=sources.series,
        jobs=r.jobs,
        env_overrides=r.overrides,
        build_type=r.build_type,
        dist_dir=r.dist,
        base_sha=sources.base_sha,
        incremental=r.incremental,
    )


def _dry_run(state: BuildState) -> int | None:
    """``--dry-run`` stops here: the plan, and what the preflight would refuse of the tree."""
    r, plan = state.request, state.plan
    if not r.dry_run:
        return None
    assert plan is not None and state.sources is not None
    lines = [plan.describe()]
    tree = state.sources.tree(r.kind, r.incremental)
    if tree is not None:
        missing = missing_submodules(tree)
        if missing:
            lines.append(f"# preflight would refuse: {tree} lacks submodules {', '.join(missing)}")
        host = check_host_macos(r.platform, tree, state.sources.base)
        if host is not None and host.error is not None:
            lines.append(f"# preflight would refuse: {host.error.line()}")
    state.description = "\n".join(lines)
    return 0


def _markers(state: BuildState) -> None:
    """Before a build of hours: a series of compiled code declares the markers to verify it with."""
    if state.request.verify and state.sources is not None:
        check_markers_declared(state.sources.series)


def _claim(state: BuildState) -> None:
    """``--dist`` claimed as an output folder (:func:`harness.outdir.claim`): after the input is known good,
    before the first write."""
    claim(state.request.dist, "--dist", DIST_WRITES, holds_builds)


def _build(state: BuildState) -> None:
    """Preflight -> build -> verify (:func:`build_and_verify`)."""
    assert state.plan is not None
    r = state.request
    state.result, state.verified = build_and_verify(state.plan, force=r.force, verify=r.verify)


#: the ``build`` workflow
BUILD: tuple[Task, ...] = (_context, _host, _sources, _plan, _dry_run, _markers, _claim, _build)


def build(request: BuildRequest) -> BuildState:
    """Run :data:`BUILD` for ``request``; the state holds the plan (and ``description`` for a dry run), the
    build's result and its verification.

    Raises:
        HarnessError: the first step that refuses (one line); BuildFailed: the build ran and failed.
    """
    state = BuildState(request)
    execute(BUILD, state)
    return state
