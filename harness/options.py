"""The options of ``compare`` and ``bench``, each declared once (nox's ``_option_set`` is the model).

One :class:`Option` per option says its flag, kind, defaults, range, help, the ``results.json`` key it
is kept under (:class:`Kept`) and whether finished processes depend on it (the resume key). Everything
else follows from :data:`OPTIONS`:

- the argparse arguments (:func:`add_arguments`; :mod:`harness.commands.run`) and the request values
  of parsed arguments (:func:`request_values`);
- the range checks of plain values (:func:`checked`, :data:`BOUNDS`) and the plan's defaults
  (:func:`filled`); :class:`harness.plan.RunRequest`'s fields (:func:`request_fields`);
- ``run``'s keys, their JSON types and the resume key (:func:`kept_keys`, :func:`kept`; read by
  :data:`harness.results.RUN_KEYS` and :data:`harness.results.RESUME_KEYS`);
- a command line's options (:func:`to_argv`, :func:`with_value`: the resume command of a report, the
  compare command ``pr`` prints);
- the options table of docs/results-schema.md (:func:`schema_table`; tests/test_options.py compares).

A new option is one entry here (its plan value in :func:`harness.plan.plan` when the plan uses it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import configs as cfg
from harness import evidence as ev
from harness.bench.workloads import DTYPES, ITEMSIZE
from harness.numbers import Bound, number, option

#: --target-ci defaults: CI half-width a cell is measured to (kernel-bound / launch-bound cells); the
#: verdict policy's targets (harness.policy). Launch-bound cells (host latency; 37 % process-to-process
#: spread on an H200 for GEMM 512³, docs/methodology.md) get a lower target so they never hold the
#: whole run hostage.
TARGET_CI = 0.01
TARGET_CI_LAUNCH_BOUND = 0.05
#: --budget-s defaults: wall seconds of worker processes in all (planned rounds included); an
#: adaptive round that would overrun it is not started. 540 s keeps the default cuda matrix under
#: 10 minutes on an H200 with probes, consistency and report (docs/methodology.md); 360 s keeps the
#: README's --quick cpu command under 10 minutes on 2 cores with the venvs created.
BUDGET_S = {"full": 540.0, "quick": 360.0}
#: planned rounds (fresh processes per build and config) before adaptive ones: the floor at which
#: the exact test can give a verdict (harness.stats.min_processes)
ROUNDS = 4
#: planned rounds of a run without adaptive ones (``--target-ci 0``, and ``bench``, which has no CI to aim at)
ROUNDS_FIXED = 6
#: --timeout defaults: seconds one worker process may take
TIMEOUT = {"full": 900.0, "quick": 300.0}
#: --stall-timeout defaults: seconds a worker may go without finishing a cell
STALL_TIMEOUT = {"full": 180.0, "quick": 60.0}
#: the smallest --timeout / --stall-timeout, seconds: below it no worker can do what the option lets it.
#: ``timeout``: a worker starts the interpreter and imports torch before its first cell; that took 1.1-1.6 s
#: on a 2-core cpu VM (tests/test_runner.py's processes, ``worker_started - started``) and 1.6 s on an H200
#: host (docs/methodology.md), so under 1 s every process fails. ``stall_timeout``: counted from the start
#: record to each finished cell, so it must hold one cell's warm-up and timed blocks, 0.25 s at the longest
#: plan (harness.plan.TIMING, cpu full: warmup_s 0.05 + measure_s 0.2), with its inputs and check: 0.5 s.
MIN_SECONDS = {"timeout": 1.0, "stall_timeout": 0.5}
#: --threads defaults: 1 on cpu, where OpenMP threads that share cores with other processes add ms of
#: spin-wait noise; 0 (torch's own default) elsewhere
THREADS = {"cpu": 1, "gpu": 0}
#: dtypes of ``--quick`` on cpu when ``--dtypes`` is not given: float32, the one every CPU runs at
#: full speed. Half precision depends on the ISA: mm 512³ took 1.2 ms in bfloat16 and 107 ms in float16
#: on an x86 CPU with AVX512-BF16 (docs/examples/cpu-ab), and 220 ms in both against 3 ms in float32 on
#: an AVX2-only one (docs/methodology.md); such cells took most of the README command's 10 minutes.
QUICK_CPU_DTYPES = ("float32",)

# the kinds of option: how the command line gives it, how it becomes a request value and goes back
TEXT = "text"  # one string
PATH = "path"  # one path
NUMBER = "number"  # harness.numbers.number in the option's bound
SWITCH = "switch"  # present or not
LIST = "list"  # comma-separated items, the option repeatable: a tuple of the items (None: not given)
JOINED = "joined"  # the same, handed on as one comma-separated text (None: not given)
REPEAT = "repeat"  # repeatable, one item each: a tuple
NAMES = "names"  # one comma-separated text: a tuple of its non-empty names

BOTH = ("compare", "bench")
COMPARE = ("compare",)
BENCH = ("bench",)
_UNSET = object()


@dataclass(frozen=True)
class Kept:
    """Where ``results.json`` keeps a value: ``run.<key>``, a JSON value of ``types``, taken from the
    plan (:class:`harness.plan.Plan`) by ``value`` (None: a key the plan makes from several options).
    ``required``: every results.json has it, older ones too (absent, the document is damaged);
    ``resume``: finished processes depend on it (the resume key, :func:`harness.results.resume_plan`);
    ``unset``: how an unset value enters the resume key, so that plans written before the key existed
    still match: ``""`` as it is, ``"null"`` None when empty, ``"omit"`` left out when unset."""

    key: str
    types: tuple[type, ...]
    value: Callable[[object], object] | None = None
    required: bool = False
    resume: bool = False
    unset: str = ""


@dataclass(frozen=True)
class Option:
    """One option of ``compare``/``bench``.

    ``name`` is its :class:`harness.plan.RunRequest` field (and argparse ``dest``); ``kind`` one of the
    kinds above. ``default`` is the request's value when a caller leaves it out (None: the plan's
    default, from ``defaults`` by the plan's ``default_by`` context: ``kind`` full/quick, ``device``
    cpu/gpu, ``rounds`` adaptive/fixed); ``given`` the command line's value when the option is absent,
    where it differs. ``help`` is formatted with ``defaults`` and ``given``; ``bound`` is the range of a
    number. ``role``: a build input (``inputs[name]``). ``kept``: its own ``run`` key; ``feeds``: where
    else results.json records what it chose (for the docs table)."""

    name: str
    flag: str
    help: str
    kind: str = TEXT
    commands: tuple[str, ...] = BOTH
    default: object = None
    given: object = _UNSET
    defaults: Mapping[str, float] = field(default_factory=dict)
    default_by: str = "kind"
    bound: Bound | None = None
    required: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    role: bool = False
    kept: Kept | None = None
    feeds: tuple[str, ...] = ()

    @property
    def absent(self) -> object:
        """The argparse default: what the command line gives when the option is not there."""
        if self.given is not _UNSET:
            return self.given
        return {SWITCH: False, REPEAT: [], NAMES: "", NUMBER: self.default}.get(self.kind)

    def help_text(self) -> str:
        """``help`` with its defaults filled in."""
        return self.help.format(**self.defaults, given=self.absent)

    def arguments(self) -> dict:
        """The keyword arguments of ``parser.add_argument(self.flag, ...)``."""
        kw: dict = {"dest": self.name, "help": self.help_text()}
        if self.kind == SWITCH:
            return {**kw, "action": "store_true"}
        if self.kind in (LIST, JOINED, REPEAT):
            kw["action"] = "append"
        if self.kind == NUMBER:
            kw["type"] = option(self.flag, self.bound)
        if self.kind == PATH:
            kw["type"] = Path
        if self.absent is not None:
            kw["default"] = self.absent
        extra = {"required": self.required, "choices": self.choices, "metavar": self.metavar}
        return {**kw, **{k: v for k, v in extra.items() if v}}

    def value(self, given: object) -> object:
        """The request value of what the command line gave (argparse's value)."""
        if self.kind == LIST:
            return tuple(item.strip() for text in given for item in text.split(",")) if given else None
        if self.kind == JOINED:
            return ",".join(given) if given else None
        if self.kind == REPEAT:
            return tuple(given or ())
        if self.kind == NAMES:
            return tuple(n.strip() for n in (given or "").split(",") if n.strip())
        if self.kind == SWITCH:
            return bool(given)
        return given

    def argv(self, value: object) -> list[str]:
        """The command-line words that give ``value`` (none for an unset one)."""
        if value is None or value is False or (self.kind in (LIST, REPEAT, NAMES) and not value):
            return []
        if self.kind == SWITCH:
            return [self.flag]
        if self.kind == REPEAT:
            return [word for item in value for word in (self.flag, str(item))]
        if self.kind in (LIST, NAMES):
            return [self.flag, ",".join(value)]
        if self.kind == NUMBER and not isinstance(value, int):
            return [self.flag, f"{value:g}"]
        return [self.flag, str(value)]


def _list(attr: str) -> Callable[[object], list]:
    return lambda plan: list(getattr(plan, attr))


OPTIONS: tuple[Option, ...] = (
    # ------------------------------------------------------------------ the builds
    Option(
        "stock",
        "--stock",
        "stock build: wheel path, build folder (dist/: its stock wheel of the patched wheel's base, by the "
        "build manifests), requirement (torch==2.13.0) or python:/path",
        commands=COMPARE,
        required=True,
        role=True,
        feeds=("builds.stock.input",),
    ),
    Option(
        "patched",
        "--patched",
        "patched build: wheel path, build folder (dist/: its newest patched wheel of --series, by the build "
        "manifests), requirement or python:/path",
        commands=COMPARE,
        required=True,
        role=True,
        feeds=("builds.patched.input",),
    ),
    Option(
        "build",
        "--build",
        "the build: wheel path, requirement or python:/path",
        commands=BENCH,
        required=True,
        role=True,
        feeds=("builds.build.input",),
    ),
    # ------------------------------------------------------------------ what is measured
    Option(
        "device",
        "--device",
        "device to measure on",
        required=True,
        choices=cfg.DEVICES,
        kept=Kept("device", (str,), operator.attrgetter("device"), required=True, resume=True),
    ),
    Option(
        "configs",
        "--configs",
        "comma-separated env configs, or the option repeated (default: the device's profile list)",
        kind=JOINED,
        kept=Kept("configs", (list,), lambda plan: [c.name for c in plan.configs], required=True, resume=True),
    ),
    Option(
        "dtypes",
        "--dtypes",
        f"comma-separated dtypes, or the option repeated (default: {','.join(DTYPES)}; --quick on cpu: "
        f"{','.join(QUICK_CPU_DTYPES)}; also {', '.join(d for d in ITEMSIZE if d not in DTYPES)})",
        kind=LIST,
        feeds=("run.cells",),
    ),
    Option(
        "cells",
        "--cells",
        "comma-separated cell keys op/MxNxK/dtype, or the option repeated (default: the series' workload "
        "cells where series.toml names a workload, else the built-in set)",
        kind=LIST,
        feeds=("run.cells",),
    ),
    Option(
        "quick",
        "--quick",
        "reduced cell set and shorter timing (minutes on a 2-core CPU)",
        kind=SWITCH,
        default=False,
        kept=Kept("quick", (bool,), operator.attrgetter("quick")),
        feeds=("run.timing", "run.cells"),
    ),
    # ------------------------------------------------------------------ processes
    Option(
        "rounds",
        "--rounds",
        "planned fresh processes per (build, config) before adaptive rounds "
        "(default {adaptive}; {fixed} without adaptive rounds, --quick {adaptive}; >= 4 for a verdict)",
        kind=NUMBER,
        defaults={"adaptive": ROUNDS, "fixed": ROUNDS_FIXED},
        default_by="rounds",
        bound=Bound(1, 1000, integer=True, unit="rounds"),
        kept=Kept("rounds", (int,), operator.attrgetter("rounds"), required=True),
    ),
    Option(
        "timeout",
        "--timeout",
        "seconds one worker process may take (default {full:g}, --quick {quick:g})",
        kind=NUMBER,
        defaults=TIMEOUT,
        bound=Bound(MIN_SECONDS["timeout"], 86400, unit="seconds"),
        kept=Kept("timeout_s", (float, int), operator.attrgetter("timeout")),
    ),
    Option(
        "stall_timeout",
        "--stall-timeout",
        "seconds a worker may go without finishing a cell before it is stopped and the cell it "
        "stalled in is named (default {full:g}, --quick {quick:g})",
        kind=NUMBER,
        defaults=STALL_TIMEOUT,
        bound=Bound(MIN_SECONDS["stall_timeout"], 86400, unit="seconds"),
        kept=Kept("stall_timeout_s", (float, int), operator.attrgetter("stall")),
    ),
    Option(
        "duty",
        "--duty",
        "busy share of a GPU cell's timed period (default 1/3, measured on an H200; a device that clocks "
        "down while it rests times best at 1: doctor's duty row says which, in doctor.json recommend.duty)",
        kind=NUMBER,
        bound=Bound(0, 1, low_open=True),
        feeds=("run.timing.duty",),
    ),
    Option(
        "seed",
        "--seed",
        "seed of the inputs and of the per-round order",
        kind=NUMBER,
        default=0,
        # a seed that torch.manual_seed and numpy take alike
        bound=Bound(0, 2**32 - 1, integer=True),
        kept=Kept("seed", (int,), operator.attrgetter("seed"), required=True, resume=True),
    ),
    Option(
        "keep_env",
        "--keep-env",
        "comma-separated inherited variables to pass through to workers (workers inherit only "
        "PATH, HOME, the locale and a few more: harness.configs.INHERITED; kept ones are "
        "recorded in results.json)",
        kind=NAMES,
        default=(),
        metavar="NAMES",
        kept=Kept("keep_env", (list,), _list("keep_env"), resume=True),
    ),
    Option(
        "worker_env",
        "--env",
        "set this variable in every worker of every env config (repeatable; e.g. OMP_NUM_THREADS=4); "
        "recorded in results.json; a variable an env config of the device sets is refused",
        kind=REPEAT,
        default=(),
        metavar="KEY=VALUE",
        kept=Kept("extra_env", (dict,), lambda plan: dict(plan.extra_env), resume=True, unset="null"),
    ),
    Option(
        "threads",
        "--threads",
        "torch intra-op threads in workers (default: {cpu} on cpu, where OpenMP threads that share "
        "cores with other processes add ms of spin-wait noise; torch's own default elsewhere; 0 = torch's default)",
        kind=NUMBER,
        defaults=THREADS,
        default_by="device",
        bound=Bound(0, 4096, integer=True, unit="threads"),  # well beyond any host's cores
        kept=Kept("threads", (int,), operator.attrgetter("threads"), resume=True),
    ),
    # ------------------------------------------------------------------ the series' evidence
    Option(
        "series",
        "--series",
        "patch series whose series.toml [evidence] drives the run (configs, markers, "
        "routing, contrasts, tests; default: the series named by the wheels' manifests)",
        feeds=("evidence.series",),
    ),
    Option(
        "contrasts",
        "--contrast",
        "a contrast to judge, e.g. 'stock/tf32_override vs stock/default : mm/float32 : faster' "
        "(A, B: BUILD/CONFIG; OPS: op or op/dtype items, empty = all; CLAIM: "
        f"{'|'.join(ev.CLAIMS)}; repeatable; adds to the series' contrasts)",
        kind=REPEAT,
        default=(),
        metavar="'A vs B : OPS : CLAIM'",
        feeds=("evidence.contrasts",),
    ),
    Option(
        "tests_source",
        "--tests-source",
        "source tree whose test files the series' [[evidence.test]] name (the patched worktree, "
        "e.g. work/<base>/patched); run with each build's interpreter",
        kind=PATH,
        metavar="DIR",
        feeds=("series_tests.source",),
    ),
    # ------------------------------------------------------------------ the out folder
    Option("out", "--out", "results directory (resumed if it holds a run)", kind=PATH, required=True),
    Option("fresh", "--fresh", "discard earlier results in --out and start over", kind=SWITCH, default=False),
    Option(
        "retry_failed",
        "--retry-failed",
        "run again the finished processes that failed (crashed, killed, timed out); their "
        "earlier status files are kept as .retried-<UTC time>",
        kind=SWITCH,
        default=False,
    ),
    # ------------------------------------------------------------------ adaptive rounds (compare)
    Option(
        "target_ci",
        "--target-ci",
        "adaptive sampling: after the planned rounds, add rounds of fresh processes (measuring only "
        "the cells not yet there) until every cell's CI half-width is below FRACTION "
        "(default {given:g}; 0 turns adaptive rounds off)",
        kind=NUMBER,
        commands=COMPARE,
        given=TARGET_CI,  # a library caller without a target runs no adaptive rounds (bench has none)
        bound=Bound(0, 1, high_open=True),  # 0 turns adaptive rounds off
        metavar="FRACTION",
        feeds=("run.adaptive.target",),
    ),
    Option(
        "target_ci_launch_bound",
        "--target-ci-launch-bound",
        "the target for launch-bound cells, whose time is host latency (default {given:g})",
        kind=NUMBER,
        commands=COMPARE,
        given=TARGET_CI_LAUNCH_BOUND,
        bound=Bound(0, 1, low_open=True, high_open=True),
        metavar="FRACTION",
        feeds=("run.adaptive.launch_bound_target",),
    ),
    Option(
        "budget_s",
        "--budget-s",
        "wall seconds the worker processes may take in all, planned rounds included: an "
        "adaptive round that would overrun it is not started (default {full:g}, "
        "--quick {quick:g}); cells left wider are reported",
        kind=NUMBER,
        commands=COMPARE,
        defaults=BUDGET_S,
        bound=Bound(0, 7 * 86400, low_open=True, unit="seconds"),  # a week
        feeds=("run.adaptive.budget_s",),
    ),
    Option(
        "plant_k",
        "--plant-k",
        "calibration: the patched side runs every GEMM with K grown by at least FRACTION "
        "(e.g. 0.05), a known extra cost; kernel-bound GEMM cells must then come out slower "
        "(docs/methodology.md)",
        kind=NUMBER,
        commands=COMPARE,
        bound=Bound(0, 1, low_open=True, high_open=True),
        metavar="FRACTION",
        kept=Kept("plant_k", (float, int, type(None)), operator.attrgetter("plant_k"), resume=True, unset="omit"),
    ),
)
#: option name -> its :class:`Option`
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
#: the allowed values of the numeric options (harness.numbers.number on the command line and again in
#: harness.plan.plan()): NaN, infinities and values outside are refused with the range. The upper ends
#: are sanity bounds, not tuning: a day per worker, a week of budget, 1000 rounds.
BOUNDS: dict[str, Bound] = {o.name: o.bound for o in OPTIONS if o.bound is not None}


def of(command: str) -> tuple[Option, ...]:
    """The options of ``command`` (``compare`` or ``bench``), in the order of their help."""
    return tuple(o for o in OPTIONS if command in o.commands)


def add_arguments(parser, command: str) -> None:
    """Add the options of ``command`` to ``parser`` (an ``argparse.ArgumentParser``)."""
    for o in of(command):
        parser.add_argument(o.flag, **o.arguments())


def request_values(given: Mapping[str, object]) -> dict[str, object]:
    """The request values (option name -> value) of parsed arguments (``vars(namespace)``), build
    inputs left out; options the command lacks keep :class:`harness.plan.RunRequest`'s default."""
    return {o.name: o.value(given[o.name]) for o in OPTIONS if not o.role and o.name in given}


def request_fields() -> list[tuple]:
    """The fields of :class:`harness.plan.RunRequest`: ``inputs``, one per option that is not a build
    input (required ones without a default), ``command``."""
    hints = {TEXT: "str | None", PATH: "Path | None", NUMBER: "float | None", SWITCH: "bool"}
    hints |= {LIST: "tuple[str, ...] | None", JOINED: "str | None", REPEAT: "tuple[str, ...]", NAMES: "tuple[str, ...]"}
    out: list[tuple] = [("inputs", "Mapping[str, str]")]
    for o in OPTIONS:
        if not o.role:
            out.append((o.name, hints[o.kind]) if o.required else (o.name, hints[o.kind], field(default=o.default)))
    return out + [("command", "tuple[str, ...]", field(default=()))]


def flag(name: str) -> str:
    """The flag of an option (``stall_timeout`` -> ``--stall-timeout``)."""
    return BY_NAME[name].flag


def bounded(name: str, value: float | int | None) -> float | int | None:
    """:func:`harness.numbers.number` of a numeric option's value in its :data:`BOUNDS` (None stays None:
    the default)."""
    return None if value is None else number(value, flag(name), BY_NAME[name].bound)


def checked(request: object) -> dict[str, object]:
    """Every option's value of ``request`` (an object with an attribute per option), numbers in their
    range (:func:`bounded`), build inputs left out.

    Raises:
        UsageError: a number that is NaN, infinite or outside its range (the range is in the message).
    """
    return {
        o.name: bounded(o.name, getattr(request, o.name)) if o.bound else getattr(request, o.name)
        for o in OPTIONS
        if not o.role
    }


def filled(values: Mapping[str, object], context: Mapping[str, str]) -> dict[str, object]:
    """``values`` with each unset option that has plan defaults set to the one ``context`` picks
    (``context[option.default_by]``: ``{"kind": "quick", "device": "cpu", "rounds": "adaptive"}``)."""
    out = dict(values)
    for o in OPTIONS:
        if o.defaults and out.get(o.name) is None:
            out[o.name] = o.defaults[context[o.default_by]]
    return out


def kept_keys() -> tuple[Kept, ...]:
    """The ``run`` keys the options keep, in option order."""
    return tuple(o.kept for o in OPTIONS if o.kept is not None)


def kept(plan: object) -> dict[str, object]:
    """``run``'s option keys of ``plan`` (:class:`harness.plan.Plan`): key -> JSON value."""
    return {k.key: k.value(plan) for k in kept_keys() if k.value is not None}


def to_argv(values: Sequence[tuple[str, object]]) -> list[str]:
    """The command-line words of (option name, value) pairs, in their order (unset values give none)."""
    return [word for name, value in values for word in BY_NAME[name].argv(value)]


def with_value(argv: Sequence[str], name: str, value: object) -> list[str]:
    """``argv`` with option ``name`` set to ``value``: its earlier ``--flag value`` / ``--flag=value``
    words dropped, the new ones appended."""
    flag_, out, skip = BY_NAME[name].flag, [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag_:
            skip = BY_NAME[name].kind != SWITCH
        elif not arg.startswith(flag_ + "="):
            out.append(arg)
    return out + BY_NAME[name].argv(value)


#: what each kind of option takes, for the docs table
_TAKES = {
    TEXT: "text",
    PATH: "a path",
    SWITCH: "no value",
    LIST: "comma-separated, repeatable",
    JOINED: "comma-separated, repeatable",
    REPEAT: "one item, repeatable",
    NAMES: "comma-separated names",
}


def recorded(o: Option) -> tuple[str, ...]:
    """Where results.json records what ``o`` chose: its own ``run`` key first, then what it feeds."""
    return ((f"run.{o.kept.key}",) if o.kept else ()) + o.feeds


def resumed(o: Option, resume_keys: Collection[str]) -> bool:
    """Whether a resumed run must give ``o`` the same value: a build input (the resume key's ``inputs``),
    or an option whose ``run`` keys include one of ``resume_keys``."""
    if o.role:
        return "inputs" in resume_keys
    return any(where.split(".")[1] in resume_keys for where in recorded(o) if where.startswith("run."))


def _default(o: Option) -> str:
    if o.defaults:
        return "; ".join(f"{k}: {v:g}" for k, v in o.defaults.items())
    shown = o.absent
    if shown is None or shown is False or shown in ("", []):
        return "–"
    return f"{shown:g}" if isinstance(shown, float) else str(shown)


def schema_table(resume_keys: Collection[str]) -> str:
    """The options table of docs/results-schema.md: flag, commands, where results.json records the
    value, whether a resumed run must give the same (``resume_keys``: :data:`harness.results.RESUME_KEYS`),
    what it takes (a number's range) and its default (by the plan's context where it has several)."""
    lines = [
        "| option | commands | recorded in results.json | same to resume | takes | default |",
        "|---|---|---|---|---|---|",
    ]
    for o in OPTIONS:
        where = ", ".join(f"`{w}`" for w in recorded(o)) or "–"
        takes = o.bound.describe() if o.bound else " \\| ".join(o.choices) if o.choices else _TAKES[o.kind]
        same = "yes" if resumed(o, resume_keys) else ""
        lines.append(f"| `{o.flag}` | {', '.join(o.commands)} | {where} | {same} | {takes} | {_default(o)} |")
    return "\n".join(lines)
