"""Each ``compare``/``bench`` option is declared once (harness/options.py ``OPTIONS``).

From the declaration alone this derives what each place should hold (the parser of each command,
``RunRequest``'s fields, ``run``'s keys and types, the resume key, docs/results-schema.md's options
table and its list of ``run`` keys) and compares it with what the code and the docs hold. An option
added in only one place (planted below: in the declaration without the docs, in a parser by hand, in
``run_json`` by hand, in the docs, in the resume key) is a named mismatch.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from harness import cli, options
from harness import plan as planning
from harness import results as res
from harness.errors import UsageError
from harness.numbers import Bound
from harness.options import NUMBER, Kept, Option

DOCS = Path(__file__).resolve().parent.parent / "docs" / "results-schema.md"
TABLE = re.compile(r"<!-- options table: [^\n]*-->\n(.*?)\n<!-- end of options table -->", re.S)
OLDER = re.compile(r"the `run` keys of options that results of older harness versions lack\s*\(([^)]*)\)")


@dataclass(frozen=True)
class Held:
    """What the code and the docs hold, each place on its own."""

    parsers: dict  # command -> [(flag, dest, default, required, bound, help)]
    request_fields: tuple[str, ...]
    run: dict  # a plan's run_json()
    run_keys: dict  # results.RUN_KEYS
    resume_keys: tuple[str, ...]  # results.RESUME_KEYS
    resume_plan: dict  # results.resume_plan of a document of that plan
    docs: str


def _parser_view(parser) -> list[tuple]:
    return [
        (a.option_strings[0], a.dest, a.default, a.required, getattr(a.type, "bound", None), a.help)
        for a in parser._actions
        if a.dest != "help"
    ]


def _declared_view(opts: tuple[Option, ...], command: str) -> list[tuple]:
    """What the parser of ``command`` should hold: the range is appended to a number's help (harness.cli)."""
    rows = []
    for o in opts:
        if command in o.commands:
            suffix = f"; {o.bound.describe()}" if o.kind == NUMBER else ""
            rows.append((o.flag, o.name, o.absent, o.required, o.bound, o.help_text() + suffix))
    return rows


def held(tmp_path: Path) -> Held:
    python = f"python:{sys.executable}"
    request = planning.RunRequest(
        inputs={"stock": python, "patched": python},
        device="cpu",
        out=tmp_path / "out",
        cells=("mm/8x8x8/float32",),
        plant_k=0.05,
        worker_env=("OMP_NUM_THREADS=2",),
    )
    run = planning.plan(request).run_json()
    probe = {"torch_version": "2.13.0", "git_version": "abc"}
    builds = {b: {"input": {"kind": "python", "value": b}, "provenance": probe} for b in run["builds"]}
    return Held(
        parsers={c: _parser_view(cli.build_parser(c)) for c in ("compare", "bench")},
        request_fields=tuple(f.name for f in dataclasses.fields(planning.RunRequest)),
        run=run,
        run_keys=dict(res.RUN_KEYS),
        resume_keys=tuple(res.RESUME_KEYS),
        resume_plan=res.resume_plan(res.new_document(run, builds, {})),
        docs=DOCS.read_text(),
    )


def _run_block(docs: str) -> str:
    """The ``run`` part of the schema's text block (from ``run`` to ``builds.<name>``)."""
    return docs[docs.index("\nrun\n") : docs.index("\nbuilds.<name>")]


def mismatches(opts: tuple[Option, ...], have: Held) -> list[str]:
    """Every place whose option content differs from what ``opts`` declares."""
    found = []
    for command, rows in have.parsers.items():
        want = _declared_view(opts, command)
        for row in [r for r in rows if r not in want]:
            found.append(f"{command} parser: {row[0]} is not as declared")
        for row in [r for r in want if r not in rows]:
            found.append(f"{command} parser: lacks the declared {row[0]}")
    fields = ("inputs", *(o.name for o in opts if not o.role), "command")
    if have.request_fields != fields:
        found.append(f"RunRequest fields {sorted(set(have.request_fields) ^ set(fields))} differ from the declaration")
    kept = {o.kept.key: o.kept for o in opts if o.kept}
    plan_keys = {k.key: k for k in res.PLAN_KEYS}
    for key in have.run:
        if key not in kept and key not in plan_keys and key != "finished":
            found.append(f"run.{key} is written by run_json but declared by no option")
    for key, k in kept.items():
        if key not in have.run:
            found.append(f"run.{key} is declared but not written by run_json")
        elif not isinstance(have.run[key], k.types):
            found.append(f"run.{key} is written as {type(have.run[key]).__name__}, declared {k.types}")
    want_keys = {k.key: (k.types, k.required) for k in (*plan_keys.values(), *kept.values())}
    if have.run_keys != want_keys:
        found.append(f"results.RUN_KEYS differs from the declaration at {sorted(set(have.run_keys) ^ set(want_keys))}")
    resume = [k.key for k in (*plan_keys.values(), *kept.values()) if k.resume] + ["inputs", "torch"]
    if list(have.resume_keys) != resume:
        found.append(
            f"results.RESUME_KEYS differs from the declaration at {sorted(set(have.resume_keys) ^ set(resume))}"
        )
    if set(have.resume_plan) != set(resume):
        found.append(f"resume_plan's keys differ from the declaration at {sorted(set(have.resume_plan) ^ set(resume))}")
    found += _docs_mismatches(opts, have.docs, kept, plan_keys, resume)
    return found


def _docs_mismatches(opts, docs: str, kept: dict, plan_keys: dict, resume: list[str]) -> list[str]:
    found = []
    table = TABLE.search(docs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(options, "OPTIONS", opts)
        want = options.schema_table(resume)
    if table is None or table.group(1) != want:
        have_rows = set(table.group(1).splitlines()) if table else set()
        found += [f"docs options table: {row}" for row in sorted(set(want.splitlines()) ^ have_rows)]
    block = _run_block(docs)
    found += [f"docs run block lacks {key}" for key in (*plan_keys, *kept) if not re.search(rf"\b{key}\b", block)]
    older = OLDER.search(docs)
    listed = set(re.findall(r"`(\w+)`", older.group(1))) if older else set()
    optional = {key for key, k in kept.items() if not k.required}
    if listed != optional:
        found.append(f"docs' optional run keys of options differ at {sorted(listed ^ optional)}")
    return found


def test_every_place_holds_what_the_declaration_says(tmp_path):
    assert mismatches(options.OPTIONS, held(tmp_path)) == []


PLANTED = Option(
    "warmup_s",
    "--warmup-s",
    "seconds of warm-up calls per cell (default {full:g})",
    kind=NUMBER,
    defaults={"full": 0.05},
    bound=Bound(0, 10, low_open=True, unit="seconds"),
    kept=Kept("warmup_s", (float,), lambda plan: 0.05),
)


def _planted(tmp_path: Path, where: str) -> tuple[tuple[Option, ...], Held]:
    """An option added in one place only: the declaration, or one place that should derive from it."""
    have = held(tmp_path)
    if where == "declaration":  # only there: every other place (held before it was added) lacks it
        return (*options.OPTIONS, PLANTED), have
    if where == "parser":  # an add_argument written by hand in harness/commands/run.py
        row = ("--warmup-s", "warmup_s", None, False, PLANTED.bound, PLANTED.help_text())
        return options.OPTIONS, replace(have, parsers={**have.parsers, "compare": [*have.parsers["compare"], row]})
    if where == "run_json":
        return options.OPTIONS, replace(have, run={**have.run, "warmup_s": 0.05})
    if where == "resume key":
        return options.OPTIONS, replace(have, resume_keys=(*have.resume_keys, "warmup_s"))
    row = "| `--warmup-s` | compare, bench | `run.warmup_s` |  | a number of seconds in (0, 10] | full: 0.05 |"
    return options.OPTIONS, replace(
        have, docs=have.docs.replace("\n<!-- end of options table -->", f"\n{row}\n<!-- end of options table -->")
    )


@pytest.mark.parametrize(
    "where, fragment",
    [
        ("declaration", "docs options table: | `--warmup-s`"),
        ("parser", "compare parser: --warmup-s is not as declared"),
        ("run_json", "run.warmup_s is written by run_json but declared by no option"),
        ("resume key", "results.RESUME_KEYS differs from the declaration at ['warmup_s']"),
        ("docs", "docs options table: | `--warmup-s`"),
    ],
)
def test_an_option_added_in_one_place_only_is_a_named_mismatch(tmp_path, where, fragment):
    opts, have = _planted(tmp_path, where)
    found = mismatches(opts, have)
    assert any(fragment in line for line in found), found


def test_a_planted_option_reaches_every_derived_place(tmp_path, monkeypatch):
    """Declared once, the new option is in the parser, the request values, the run keys and the argv."""
    monkeypatch.setattr(options, "OPTIONS", (*options.OPTIONS, PLANTED))
    monkeypatch.setitem(options.BY_NAME, "warmup_s", PLANTED)
    parser = cli.build_parser("bench")
    args = parser.parse_args(["--build", "b", "--device", "cpu", "--out", "o", "--warmup-s", "0.5"])
    assert options.request_values(vars(args))["warmup_s"] == 0.5
    assert (
        "--warmup-s" in parser.format_help()
        and "warm-up calls per cell (default 0.05); a number of seconds in (0, 10]"
        in " ".join(parser.format_help().split())
    )
    assert options.kept_keys()[-1] == PLANTED.kept and options.bounded("warmup_s", "0.5") == 0.5
    with pytest.raises(UsageError, match="--warmup-s 11: out of range"):
        options.bounded("warmup_s", 11)
    assert options.to_argv([("warmup_s", 0.5), ("rounds", 8), ("quick", True)]) == [
        "--warmup-s",
        "0.5",
        "--rounds",
        "8",
        "--quick",
    ]


def test_the_resume_command_replaces_an_option_however_it_was_written():
    argv = ["python", "-m", "harness", "compare", "--rounds=4", "--target-ci", "0.02", "--env", "A=1", "--env", "B=2"]
    assert options.with_value(argv, "rounds", 9)[-2:] == ["--rounds", "9"] and "--rounds=4" not in options.with_value(
        argv, "rounds", 9
    )
    assert options.with_value(argv, "target_ci", 0.005)[4:] == [
        "--rounds=4",
        "--env",
        "A=1",
        "--env",
        "B=2",
        "--target-ci",
        "0.005",
    ]
    assert options.with_value(argv, "budget_s", 1200)[-2:] == ["--budget-s", "1200"]
    assert options.with_value(argv, "worker_env", ("C=3",))[4:] == ["--rounds=4", "--target-ci", "0.02", "--env", "C=3"]


def test_results_of_every_example_still_load_with_the_option_keys_checked():
    for path in sorted((DOCS.parent / "examples").glob("*/results.json")):
        data = res.load(path.parent)
        assert res.run_problem(data) is None, path
    broken = res.load(next((DOCS.parent / "examples").glob("*/results.json")).parent)
    broken["run"]["threads"] = "4"
    assert res.run_problem(broken) == "run.threads is string '4', not int"
