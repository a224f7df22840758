"""Every name README.md and docs/*.md give the code exists (docs named an op registry, runner imports,
commands and results fields the code no longer had).

Checked against whatever the code is now, never against a copy of it:

- modules: ``harness/…py`` (and ``tests/``, ``benchmarks/``, ``tools/`` paths, ``harness/<folder>/``) on
  disk; ``harness.x.y`` resolved to its longest module prefix on disk, the rest a top-level name of that
  module (and, for a class, a name of its body); ``harness/x.py`` ``NAME`` and a call ``x.name(...)`` of a
  top-level module likewise; a bare ``x.py`` in
  docs/architecture.md a file of the repository;
- commands: ``python -m harness <command>`` one of :data:`harness.cli.COMMANDS`, and every ``--option``
  on that command line one of that command's parser (:func:`harness.cli.build_parser`); ``nox -s
  <session>`` a session of noxfile.py, and the options after its ``--`` those of the command the session
  runs; an option named alone (```--x```) one that some parser of the harness, its benchmarks or tools
  declares, or one of :data:`OTHER_TOOLS`; an inline list of commands names all of them;
- results.json fields: a dotted path that starts at a top-level key (``run.order``,
  ``builds.<name>.build``) and each key of docs/results-schema.md's tree, a key of an example's
  results.json (docs/examples) or a string of the schema (harness/results.py, harness/document.py).

The planted-name tests write a wrong name of each kind into a doc's text and show it caught.
"""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

import pytest
from conftest import parsed

REPO = Path(__file__).resolve().parent.parent
DOCS = (*sorted((REPO / "docs").glob("*.md")), REPO / "README.md")
#: options of other tools the docs name alone (git, pip, nox, pytest, build): not the harness's
OTHER_TOOLS = {
    "--abort",  # git am / rebase
    "--amend",  # git commit
    "--continue",  # git am
    "--detach",  # git worktree add
    "--global",  # git config
    "--init",  # git submodule update
    "--recursive",  # git submodule update
    "--no-edit",  # git commit
    "--stat",  # git diff
    "--check",  # git apply / ruff format
    "--list",  # nox
    "--no-isolation",  # python -m build
    "--wheel",  # python -m build
    "--upgrade",  # pip install
    "--no-compile",  # pip install
    "--install",  # rustup / xcode-select
    "--collect-only",  # pytest
    "--version",  # python -m harness --version, git --version
    "--python",  # pip --python
    "--token",  # gh auth
    "--url",  # gh / git
    "--git",  # gh
}
#: the unknown option docs/troubleshooting.md shows the message of
EXAMPLE_OF_UNKNOWN = "--bogus"
#: the top-level keys of results.json a dotted field path starts from
RESULTS_TOP = ("run", "builds", "configs", "evidence", "series_tests", "consistency", "kernels", "processes")
#: the modules that define or write results.json's keys: the schema, the typed document, the sections the
#: runner records (evidence, series tests) and the runner itself (absent ones are skipped)
SCHEMA_MODULES = ("results.py", "document.py", "evidence.py", "seriestests.py", "runner.py")


# ------------------------------------------------------------------------------------- what exists
def _tree(path: Path) -> ast.Module:
    return parsed(path.read_text(encoding="utf-8"))


def _defined(body: list[ast.stmt]) -> set[str]:
    """Names a module or class body defines (def, class, assignment, import)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _defined(node.body)
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = REPO.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _name_problem(path: Path, names: list[str]) -> str | None:
    """``names[0]`` defined in module ``path`` (and ``names[1]`` in it when it is a class), else why not."""
    tree = _tree(path)
    if names[0] not in _defined(tree.body):
        folder = path.parent if path.name == "__init__.py" else None
        if folder is not None and _module_file([*folder.relative_to(REPO).parts, names[0]]):
            return None  # a submodule of a package
        return f"{path.relative_to(REPO)} defines no {names[0]}"
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == names[0]), None)
    if cls is not None and len(names) > 1 and names[1] not in _defined(cls.body):
        return f"{path.relative_to(REPO)}: class {names[0]} has no {names[1]}"
    return None


def dotted_problem(dotted: str) -> str | None:
    """``harness.x.y.Name.attr``: the longest module prefix on disk, then its names."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(parts[:cut])
        if path is not None:
            return _name_problem(path, parts[cut:]) if parts[cut:] else None
    return f"no module {dotted}"


@cache
def commands() -> dict[str, frozenset[str]]:
    """Each command of ``python -m harness`` -> the option strings of its real parser."""
    from harness import cli

    return {name: frozenset(cli.build_parser(name)._option_string_actions) for name in cli.COMMANDS}


@cache
def sessions() -> dict[str, str | None]:
    """Each nox session of noxfile.py -> the ``python -m harness`` command it runs (None: none)."""
    out = {}
    for node in _tree(REPO / "noxfile.py").body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            target = call.func if call else dec
            if not (isinstance(target, ast.Attribute) and target.attr == "session"):
                continue
            named = [k.value.value for k in (call.keywords if call else ()) if k.arg == "name"]
            out[named[0] if named else node.name] = _session_command(node)
    return out


def _session_command(func: ast.FunctionDef) -> str | None:
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        words = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if isinstance(node.func, ast.Name) and node.func.id == "_harness" and words:
            return words[0]
        if "harness" in words and words.index("harness") + 1 < len(words):
            return words[words.index("harness") + 1]
    return None


@cache
def declared_options() -> frozenset[str]:
    """Every option string of the harness's commands, and every ``add_argument("--x")`` in harness/,
    benchmarks/ and tools/ (the provenance probe, the worker, the benchmark scripts)."""
    found = set().union(*commands().values())
    for folder in ("harness", "benchmarks", "tools"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(_tree(path)):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                    found |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value)[:2] == "--"}
    return frozenset(found)


@cache
def results_keys() -> frozenset[str]:
    """Every key of the examples' results.json files and every string of the schema's modules."""
    keys: set[str] = set()

    def walk(x) -> None:
        if isinstance(x, dict):
            keys.update(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for path in (REPO / "docs" / "examples").rglob("results.json"):
        walk(json.loads(path.read_text(encoding="utf-8")))
    for name in SCHEMA_MODULES:
        path = REPO / "harness" / name
        if path.is_file():
            keys |= {n.value for n in ast.walk(_tree(path)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return frozenset(keys)


# ------------------------------------------------------------------------------------- the checks
_PATH = re.compile(
    r"(?<![\w/.-])((?:harness|tests|benchmarks)/(?:[\w-]+/)*[\w-]+)"  # a path into the tree
    r"(\.py\b|/)(?:`? `?([A-Z_][A-Z0-9_]+)\b)?"  # .py or a folder, then the NAME it binds
)
_DOTTED = re.compile(r"(?<![\w/.-])harness(?:\.[A-Za-z_]\w*)+")
_BARE = re.compile(r"`([\w/]+\.py)`")
_CALL = re.compile(r"(?<![\w.])([a-z_]+)\.([A-Za-z_]\w*)\(")


def module_problems(text: str, architecture: bool = False) -> list[str]:
    """Modules, files and module names the text gives that do not exist."""
    out = []
    for match in _PATH.finditer(text):
        path, end, name = match.group(1), match.group(2), match.group(3)
        if end == "/":
            if not (REPO / path).is_dir():
                out.append(f"no folder {path}/")
            continue
        if not (REPO / f"{path}.py").is_file():
            out.append(f"no file {path}.py")
        elif name and path.startswith("harness/"):
            out.append(_name_problem(REPO / f"{path}.py", [name]) or "")
    for match in _DOTTED.finditer(text):
        out.append(dotted_problem(match.group(0)) or "")
    for match in _CALL.finditer(text):  # `runner.execute(RunRequest(...))`: a call of a top-level module
        path = _module_file(["harness", match.group(1)])
        out.append(_name_problem(path, [match.group(2)]) or "" if path else "")
    if architecture:
        everywhere = {p.relative_to(REPO / "harness").as_posix() for p in (REPO / "harness").rglob("*.py")}
        everywhere |= {p.name for p in (REPO / "harness").rglob("*.py")} | {"noxfile.py", "conftest.py"}
        ours = [m for m in _BARE.findall(text) if "/" not in m or (REPO / "harness" / m.split("/")[0]).is_dir()]
        out += [f"no file {m}" for m in ours if m not in everywhere and not (REPO / m).is_file()]
    return [p for p in out if p]


_HARNESS_LINE = re.compile(r"python -m harness ((?:\\\n|[^\n`|;&#])*)")
_NOX_LINE = re.compile(r"\bnox -s ((?:\\\n|[^\n`|;&#])*)")
_OPTION = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def command_problems(text: str) -> list[str]:
    """Commands, their options and nox sessions the text gives that do not exist."""
    out = []
    for match in _HARNESS_LINE.finditer(text):
        words = match.group(1).split()
        if not words or not re.fullmatch(r"[a-z_]+", words[0]):
            continue  # `python -m harness <command>`, `python -m harness --help`
        command = words[0]
        if command not in commands():
            out.append(f"python -m harness {command}: no such command")
            continue
        known = commands()[command] | {EXAMPLE_OF_UNKNOWN}
        out += [f"python -m harness {command}: no option {o}" for o in _options(words) if o not in known]
    for match in _NOX_LINE.finditer(text):
        words = match.group(1).split()
        if not words or words[0].startswith("<"):
            continue  # `nox -s <session>`
        session = words[0]
        if session not in sessions():
            out.append(f"nox -s {session}: no such session")
            continue
        command = sessions()[session]
        if command and "--" in words:
            after = words[words.index("--") + 1 :]
            known = commands().get(command, frozenset()) | {EXAMPLE_OF_UNKNOWN}
            out += [f"nox -s {session} -- ({command}): no option {o}" for o in _options(after) if o not in known]
    for span in re.findall(r"`(--[a-z][\w-]*)[^`]*`", text):
        if span not in declared_options() | OTHER_TOOLS | {EXAMPLE_OF_UNKNOWN}:
            out.append(f"{span}: no parser of the harness declares it")
    for span in re.findall(r"`([a-z_]+(?:\s+[a-z_]+){3,})`", text):
        words = span.split()
        if all(w in commands() for w in words) and set(words) != set(commands()):
            missing = ", ".join(c for c in commands() if c not in words)
            out.append(f"the command list `{span}` lacks {missing}")
    return out


def _options(words: list[str]) -> list[str]:
    """The ``--option`` words of a command line (``--out=DIR`` gives ``--out``)."""
    names = [w.split("=", 1)[0] for w in words]
    return [n for n in names if _OPTION.fullmatch(n)]


_FIELD = re.compile(r"`((?:" + "|".join(RESULTS_TOP) + r")(?:\.(?:[\w]+|<[^>`]+>)(?:\[\])?)+)`")
_TREE_KEY = re.compile(r"^(\s*)([a-z_][\w.<>\[\]]*(?:, [a-z_]\w*)*)(?=\s{2,}|$)", re.M)


def field_problems(text: str, schema_tree: bool = False) -> list[str]:
    """results.json fields the text gives (and, ``schema_tree``, the keys of its ```text`` tree) that
    neither an example's results.json nor the schema has."""
    named = [m.group(1) for m in _FIELD.finditer(text) if not m.group(1).endswith(".py")]
    if schema_tree:
        for block in re.findall(r"```text\n(.*?)```", text, re.S):
            named += [k for m in _TREE_KEY.finditer(block) for k in m.group(2).split(", ")]
    out = []
    for path in named:
        for key in re.split(r"\.", path):
            key = key.removesuffix("[]")
            if key and not key.startswith("<") and key not in results_keys():
                out.append(f"results.json field {path}: no key {key!r} in docs/examples or the schema")
    return out


def problems(doc: Path, text: str | None = None) -> list[str]:
    text = doc.read_text(encoding="utf-8") if text is None else text
    found = module_problems(text, doc.name == "architecture.md") + command_problems(text)
    found += field_problems(text, doc.name == "results-schema.md")
    return [f"{doc.relative_to(REPO)}: {p}" for p in dict.fromkeys(found)]


# ------------------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_name_a_doc_gives_exists(doc):
    assert problems(doc) == []


def test_the_checks_find_what_they_check():
    """Each kind of name is found in the docs at least once, so a reworded doc cannot escape its check."""
    text = "\n".join(d.read_text(encoding="utf-8") for d in DOCS)
    assert _PATH.search(text) and _DOTTED.search(text) and _FIELD.search(text)
    assert len(_HARNESS_LINE.findall(text)) > 10 and len(_NOX_LINE.findall(text)) > 10
    schema = (REPO / "docs" / "results-schema.md").read_text(encoding="utf-8")
    assert "kernels" in [m.group(2) for m in _TREE_KEY.finditer(schema)]


@pytest.mark.parametrize(
    "doc, old, new, caught",
    [
        ("architecture.md", "`harness/results.py`", "`harness/resultz.py`", "no file harness/resultz.py"),
        ("architecture.md", "**`stats.py`**", "**`statz.py`**", "no file statz.py"),
        (
            "results-schema.md",
            "harness.bench.recorded.RECORDED_PREFIXES",
            "harness.bench.recorded.RECORDED",
            "no RECORDED",
        ),
        (
            "architecture.md",
            "`harness/build/platforms.py` `REGISTRY`",
            "`harness/build/platforms.py` `PLATFORM_TABLE`",
            "defines no PLATFORM_TABLE",
        ),
        ("architecture.md", "`runner.execute(", "`runner.execute_run(", "defines no execute_run"),
        ("machines.md", "python -m harness compare", "python -m harness comparre", "no such command"),
        ("quickstart-macos.md", "nox -s compare", "nox -s compare_all", "nox -s compare_all: no such session"),
        ("troubleshooting.md", "`--configs`", "`--config-list`", "--config-list: no parser"),
        ("results-schema.md", "`run.extra_env`", "`run.extra_envs`", "no key 'extra_envs'"),
        ("results-schema.md", "  order             [[", "  orders            [[", "no key 'orders'"),
        ("troubleshooting.md", "refresh rebase pr build", "refresh rebase build", "lacks pr"),
    ],
)
def test_a_planted_wrong_name_is_caught(doc, old, new, caught):
    path = (REPO / doc) if doc == "README.md" else (REPO / "docs" / doc)
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{doc} no longer says {old!r}: plant the wrong name elsewhere"
    assert not any(caught in p for p in problems(path))
    assert any(caught in p for p in problems(path, text.replace(old, new, 1))), problems(path, text.replace(old, new))


def test_a_planted_wrong_option_on_a_command_line_is_caught():
    text = "```\npython -m harness compare --stock a \\\n  --patched b --target-cii 0.02\n```\n"
    text += "`nox -s compare -- --series demo --no-such-flag`\n"
    found = problems(REPO / "README.md", text)
    assert any("python -m harness compare: no option --target-cii" in p for p in found), found
    assert any("nox -s compare -- (compare): no option --no-such-flag" in p for p in found), found
    assert not any("--stock" in p or "--patched" in p or "--series" in p for p in found), found
