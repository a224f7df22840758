"""Every number README.md and docs/*.md state about a default comes from the code.

The quickstart said `doctor` runs "five" MPS configs (it runs four), "6 rounds" and "600 s" (the
defaults were 4 rounds and 540 s), and gave a CI time the README contradicted. :data:`RULES` finds
each such statement (a pattern whose one group is the number) and compares it with the code's value:
argparse defaults of ``harness/commands/*.py`` (through :func:`harness.cli.build_parser`), the
constants of ``harness/options.py`` and ``harness/configs.PROFILES``; a CI time must equal README's
measured one. Every rule must find at least one statement, so a reworded doc cannot silently escape
its rule: reword the rule with it. The planted-number tests copy the docs, write a wrong number
into one statement and show it caught.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: number words the docs use for counts
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}


def _default(command: str, option: str) -> float:
    """The argparse default of ``option`` of ``python -m harness <command>``."""
    from harness.cli import build_parser

    parser = build_parser(command)
    action = next(a for a in parser._actions if option in a.option_strings)
    assert action.default is not None, f"{command} {option} has no argparse default"
    return float(action.default)


def _code_values() -> dict[str, float]:
    """What the code says, by the keys :data:`RULES` use."""
    from harness import configs, options, upstream

    return {
        "rounds": options.ROUNDS,
        "rounds_fixed": options.ROUNDS_FIXED,
        "budget_s": options.BUDGET_S["full"],
        "budget_s_quick": options.BUDGET_S["quick"],
        "target_ci": _default("compare", "--target-ci"),
        "target_ci_pct": 100 * _default("compare", "--target-ci"),
        "target_ci_launch_bound_pct": 100 * _default("compare", "--target-ci-launch-bound"),
        "stall_timeout_s": options.STALL_TIMEOUT["full"],
        "stall_timeout_quick_s": options.STALL_TIMEOUT["quick"],
        "doctor_step_timeout_s": _default("doctor", "--step-timeout"),
        "doctor_mps_configs": len(configs.PROFILES["mps"]),
        "doctor_cuda_configs": len(configs.PROFILES["cuda"]),
        "git_s": upstream.GIT_S,
    }


@dataclass(frozen=True)
class Rule:
    """A statement about a default: ``pattern``'s group 1 is the number, ``key`` names the code's value
    (:func:`_code_values`, or ``ci_s``: README's measured CI time)."""

    what: str
    key: str
    pattern: str


S = r"\s+"  # a space or a line break: statements wrap
#: the statements, the more specific first: a number one rule read is not read again by a later one
RULES = (
    Rule("rounds without adaptive ones", "rounds_fixed", rf"turns{S}this{S}off{S}and{S}plans{S}(\d+){S}rounds"),
    Rule("rounds without adaptive ones", "rounds_fixed", rf"\((\d+){S}planned{S}with{S}`--target-ci{S}0`\)"),
    Rule("planned rounds", "rounds", rf"\bplans{S}(\d+)\b"),
    Rule("planned rounds", "rounds", rf"planned{S}rounds{S}\((\d+)\)"),
    Rule("planned rounds", "rounds", rf"\(default{S}(\d+),{S}then{S}adaptive{S}rounds"),
    Rule("planned rounds", "rounds", rf"\bdefault:?{S}(\d+){S}(?:planned{S})?rounds"),
    Rule("planned rounds", "rounds", rf"\b[Aa]fter{S}the{S}(\d+){S}planned{S}rounds"),
    Rule("planned rounds with --quick", "rounds", rf"`--quick`{S}\((\d+){S}rounds"),
    Rule("--budget-s default", "budget_s", rf"`--budget-s`{S}\((\d+){S}s\)"),
    Rule("--budget-s default", "budget_s", rf"`--budget-s`[^.;`]{{0,80}}?\bdefault{S}(\d+){S}s\b"),
    Rule("--budget-s default", "budget_s", rf"on{S}by{S}default[^)]{{0,80}}?`--budget-s{S}(\d+)`"),
    Rule("--budget-s default", "budget_s", rf"within{S}`--budget-s`{S}(\d+){S}s\b"),
    Rule("--budget-s default with --quick", "budget_s_quick", rf"default{S}\d+{S}s,{S}(\d+){S}s{S}with{S}`--quick`"),
    Rule("--target-ci default (%)", "target_ci_pct", rf"`--target-ci`{S}\(default{S}±(\d+(?:\.\d+)?){S}%"),
    Rule("--target-ci default (%)", "target_ci_pct", rf"wider{S}than{S}`--target-ci`{S}\(±(\d+(?:\.\d+)?){S}%\)"),
    Rule("--target-ci default (%)", "target_ci_pct", rf"confidence{S}interval{S}is{S}wider{S}than{S}±(\d+){S}%"),
    Rule("--target-ci default", "target_ci", rf"on{S}by{S}default[^)]{{0,40}}?`--target-ci{S}(0\.\d+)`"),
    Rule(
        "--target-ci-launch-bound default (%)",
        "target_ci_launch_bound_pct",
        rf"±(\d+){S}%{S}for{S}launch-bound{S}cells,{S}`--target-ci-launch-bound`",
    ),
    Rule(
        "--target-ci-launch-bound default (%)",
        "target_ci_launch_bound_pct",
        rf"wider{S}than{S}±\d+{S}%{S}\(±(\d+){S}%{S}for{S}launch-bound",
    ),
    Rule(
        "--target-ci-launch-bound default (%)", "target_ci_launch_bound_pct", rf"their{S}own{S}target{S}\(±(\d+){S}%\)"
    ),
    Rule("--stall-timeout default", "stall_timeout_s", rf"`--stall-timeout`{S}\((\d+){S}s\)"),
    Rule("--stall-timeout default", "stall_timeout_s", rf"`--stall-timeout`{S}seconds{S}\(default{S}(\d+)"),
    Rule(
        "--stall-timeout default with --quick",
        "stall_timeout_quick_s",
        rf"`--stall-timeout`{S}seconds{S}\(default{S}\d+,{S}(\d+){S}with",
    ),
    Rule("doctor --step-timeout default", "doctor_step_timeout_s", rf"finishes{S}no{S}cell{S}for{S}(\d+){S}s\b"),
    Rule(
        "MPS env configs doctor runs", "doctor_mps_configs", rf"under{S}each{S}of{S}the{S}(\w+){S}MPS{S}env{S}configs"
    ),
    Rule("MPS env configs doctor runs", "doctor_mps_configs", rf"`PROFILES\[\"mps\"\]`{S}\|{S}the{S}(\w+){S}upstream"),
    Rule(
        "cuda env configs doctor runs", "doctor_cuda_configs", rf"`doctor`[^.]{{0,60}}?\ball{S}(\w+){S}cuda{S}configs"
    ),
    Rule("deadline of a git command", "git_s", rf"stopped{S}after{S}(\d+){S}s{S}\(`harness\.upstream\.GIT_S`\)"),
    Rule(
        "CI time (README's measured `bash .ci/run`)",
        "ci_s",
        rf"\bCI\b[^|]{{0,40}}?\b(?:takes|took){S}(\d+(?:\.\d+)?{S}min(?:utes)?(?:{S}\d+{S}s(?:econds)?)?)",
    ),
)
#: README's own measurement, the reference of every other CI time
README_CI = rf"`bash{S}\.ci/run`{S}took{S}(\d+){S}minutes{S}(\d+){S}seconds"


def _number(text: str) -> float:
    """``4``, ``0.01``, ``four``, ``6.6 min``, ``5 minutes 37 seconds`` -> a number (times in seconds)."""
    text = " ".join(text.split())
    if text.lower() in WORDS:
        return WORDS[text.lower()]
    minutes = re.fullmatch(r"(\d+(?:\.\d+)?) min(?:utes)?(?: (\d+) s(?:econds)?)?", text)
    if minutes:
        return round(float(minutes[1]) * 60 + float(minutes[2] or 0), 1)
    return float(text)


@dataclass(frozen=True)
class Claim:
    """One statement found: where, what, the number it states and the code's."""

    where: str
    what: str
    stated: float
    code: float


def docs(root: Path) -> list[Path]:
    """README.md and docs/*.md under ``root``."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def readme_ci_seconds(root: Path) -> float:
    """README's measured time of ``bash .ci/run``, in seconds."""
    match = re.search(README_CI, (root / "README.md").read_text())
    assert match, "README.md no longer says how long `bash .ci/run` took: update README_CI with it"
    return float(match[1]) * 60 + float(match[2])


def claims(root: Path) -> list[Claim]:
    """Every statement of :data:`RULES` in the docs under ``root``, with the code's value beside it."""
    code = {**_code_values(), "ci_s": readme_ci_seconds(root)}
    found = []
    for path in docs(root):
        text = path.read_text()
        taken: list[tuple[int, int]] = []
        for rule in RULES:
            for match in re.finditer(rule.pattern, text):
                start, end = match.span(1)
                if any(a < end and start < b for a, b in taken):
                    continue
                taken.append((start, end))
                line = text.count("\n", 0, start) + 1
                found.append(
                    Claim(f"{path.relative_to(root)}:{line}", rule.what, _number(match[1]), float(code[rule.key]))
                )
    return found


def wrong(found: list[Claim]) -> list[str]:
    """One line per statement whose number is not the code's."""
    return [
        f"{c.where}: {c.what} is {c.stated:g} in the doc but {c.code:g} in the code"
        for c in found
        if abs(c.stated - c.code) > 1e-9
    ]


def test_every_default_the_docs_state_is_the_codes():
    found = claims(REPO)
    assert wrong(found) == []
    # each rule reads at least one statement: a reworded doc must take its rule along
    for rule in RULES:
        assert any(
            re.search(rule.pattern, p.read_text()) for p in docs(REPO)
        ), f"no doc states {rule.what} as {rule.pattern!r} any more: update the rule with the doc"
    where = {c.where.split(":")[0] for c in found}
    assert {"README.md", "docs/quickstart-macos.md", "docs/methodology.md", "docs/timing.md"} <= where
    assert sum(c.where.startswith("docs/quickstart-macos.md") for c in found) >= 8


def _planted(tmp_path: Path, doc: str, right: str, bad: str) -> list[str]:
    """Copy README.md and docs/*.md into ``tmp_path``, write ``bad`` for ``right`` in ``doc``, return
    what :func:`wrong` says of the copy."""
    for path in docs(REPO):
        target = tmp_path / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    text = (tmp_path / doc).read_text()
    pattern = S.join(map(re.escape, right.split()))
    assert len(re.findall(pattern, text)) == 1, f"{right!r} is not once in {doc}"
    (tmp_path / doc).write_text(re.sub(pattern, bad, text))
    return wrong(claims(tmp_path))


@pytest.mark.parametrize(
    ("doc", "right", "bad", "expected"),
    [
        # the four wrong claims the quickstart once made, written back into it
        (
            "docs/quickstart-macos.md",
            "each of the four MPS env configs",
            "each of the five MPS env configs",
            "MPS env configs doctor runs is 5 in the doc but 4 in the code",
        ),
        (
            "docs/quickstart-macos.md",
            "(default: 4 planned rounds",
            "(default: 6 rounds",
            "planned rounds is 6 in the doc but 4 in the code",
        ),
        (
            "docs/quickstart-macos.md",
            "`--budget-s` (540 s) runs out",
            "`--budget-s` (600 s) runs out",
            "--budget-s default is 600 in the doc but 540 in the code",
        ),
        (
            "docs/quickstart-macos.md",
            "CI, `bash .ci/run`, took 5 minutes 30 seconds",
            "CI takes 6.6 min",
            "CI time (README's measured `bash .ci/run`) is 396 in the doc but 330 in the code",
        ),
        # README's measurement moves: the quickstart's copy of it no longer agrees
        (
            "README.md",
            "`bash .ci/run` took 5 minutes 30 seconds",
            "`bash .ci/run` took 4 minutes 50 seconds",
            "docs/quickstart-macos.md:",
        ),
        # and a few more, in other files
        (
            "README.md",
            "default 540 s, 360 s with `--quick`",
            "default 540 s, 300 s with `--quick`",
            "--budget-s default with --quick is 300 in the doc but 360 in the code",
        ),
        (
            "docs/timing.md",
            "(default 180, 60 with",
            "(default 120, 60 with",
            "--stall-timeout default is 120 in the doc but 180 in the code",
        ),
        (
            "docs/methodology.md",
            "`compare` plans 4 rounds (the floor",
            "`compare` plans 5 rounds (the floor",
            "planned rounds is 5 in the doc but 4 in the code",
        ),
        (
            "docs/quickstart-macos.md",
            "finishes no cell for 30 s",
            "finishes no cell for 60 s",
            "doctor --step-timeout default is 60 in the doc but 30 in the code",
        ),
    ],
)
def test_a_planted_wrong_number_is_caught(tmp_path, doc, right, bad, expected):
    lines = _planted(tmp_path, doc, right, bad)
    assert len(lines) == 1, lines
    assert expected in lines[0]
    if not expected.startswith("docs/"):
        assert lines[0].startswith(f"{doc}:")
