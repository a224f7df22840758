"""The layout rules of docs/architecture.md, checked on the source (no imports run, no timing)."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import parsed

from harness import options, runner
from harness import plan as planning
from harness.build import platforms
from harness.configs import EnvConfig
from harness.errors import UsageError

HARNESS = Path(__file__).resolve().parent.parent / "harness"
MAX_LINES = 80


def _tree(path: Path) -> ast.Module:
    """``path`` parsed, once per text in a test process (:func:`conftest.parsed`)."""
    return parsed(path.read_text())


def _module(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """harness module -> the harness modules it imports (top level and inside functions alike)."""
    modules = {_module(p): p for p in HARNESS.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_harness():
    """series.py and upstream.py imported each other before (and build.py both, lazily)."""
    graph = import_graph()
    assert "harness.series" in graph["harness.commands.series"] and "harness.upstream" in graph["harness.series"]
    assert find_cycle(graph) is None


#: harness/build/ by job, in import order: each module imports only those before it (docs/architecture.md)
BUILD_ORDER = ("platforms", "convention", "plan", "preflight", "wheel", "verify")


def test_build_modules_import_only_those_above_them_and_no_room_imports_the_workflow():
    """build.py held five jobs before; the workflow (checkout -> apply -> build) lived in the rooms it calls."""
    graph = import_graph()
    assert graph["harness.build"] == set()  # the package's __init__ is its description, no re-exports
    for i, name in enumerate(BUILD_ORDER):
        within = {m for m in graph[f"harness.build.{name}"] if m.startswith("harness.build")}
        assert within <= {f"harness.build.{n}" for n in BUILD_ORDER[:i]}, f"harness.build.{name} imports {within}"
    rooms = ["harness.upstream", "harness.series", *(f"harness.build.{n}" for n in BUILD_ORDER)]
    for room in rooms:
        above = {m for m in graph[room] if m == "harness.workflow" or m.startswith("harness.commands")}
        assert not above, f"{room} imports {above}"
    assert {"harness.upstream", "harness.series", "harness.build.plan", "harness.build.wheel"} <= graph[
        "harness.workflow"
    ]
    assert (
        "harness.workflow" in graph["harness.commands.build"] and "harness.workflow" in graph["harness.commands.series"]
    )


MAX_MODULE_LINES = 900


def test_no_module_in_harness_is_over_900_lines():
    """build.py (1.8k lines) held five jobs, runner.py was a hub, series.py held the manifest and
    the git operations; each is now split by job."""
    sizes = {str(p.relative_to(HARNESS)): len(p.read_text().splitlines()) for p in HARNESS.rglob("*.py")}
    assert {"build/plan.py", "runner.py", "supervise.py", "manifest.py", "series.py"} <= set(sizes)
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_library_modules_take_no_argparse_namespace():
    """Argument parsing lives in harness/commands/ and cli.py only."""
    users = sorted(
        _module(p) for p in HARNESS.rglob("*.py") if "import argparse" in p.read_text() and "commands" not in p.parts
    )
    assert users == ["harness.bench.provenance", "harness.cli"]  # provenance: its own `python -m` entry in a worker


def long_functions() -> list[str]:
    """``module.function (N lines)`` of every function in harness/ longer than MAX_LINES, docstring not counted."""
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.walk(_tree(path)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines -= first.end_lineno - first.lineno + 1
            if lines > MAX_LINES:
                found.append(f"{_module(path)}.{node.name} ({lines} lines)")
    return found


def test_no_function_in_harness_is_over_80_lines():
    found = long_functions()
    assert found == []


# ------------------------------------------------------------------ imports inside functions
_TORCH = "torch: imported only inside a build's interpreter (the harness's own environment may have none)"
#: (module, function) -> why it imports inside that function; every other import in harness/ is at the top
#: of its module, where a reader sees what the module depends on. The entries must exist (none stale).
INNER_IMPORTS = {
    **{("harness.bench.accuracy", f): _TORCH for f in ("rel_error", "check")},
    **{("harness.bench.consistency", f): _TORCH for f in ("judge_pair", "compare_outputs", "main")},
    **{
        ("harness.bench.ops", f): _TORCH
        for f in ("_addmm", "_bmm", "_linear", "_sdpa_call.call", "_bmm_reference", "_sdpa_reference.reference")
    },
    **{("harness.bench.workloads", f): _TORCH for f in ("_float32_inputs", "make_inputs", "reference")},
    ("harness.bench.assumptions", "main"): _TORCH,
    ("harness.bench.plugins", "flop_problem"): _TORCH,
    ("harness.bench.conformance", "_make_mode"): _TORCH,
    ("harness.bench.kernels", "profiler_names"): _TORCH,
    ("harness.bench.provenance", "collect_env.run"): _TORCH,
    ("harness.bench.provenance", "probe"): _TORCH + "; the probe announces the import as a step first",
    ("harness.bench.worker", "_run"): _TORCH + "; the worker records that it is importing it first",
    ("harness.preview", "render_html"): "cmarkgfm: optional (the preview extra)",
    ("harness.progress", "task"): "rich: its progress bar only on a terminal",
    ("harness.runner", "execute"): "report imports matplotlib (plots): compare and bench start without it",
}


def inner_imports() -> dict[tuple[str, str], list[str]]:
    """(module, function) -> the modules imported inside that function (nested functions and methods by their
    dotted path: ``collect_env.run``, ``Recorder.spec``), for every module of harness/."""
    found: dict[tuple[str, str], list[str]] = {}

    def walk(node: ast.AST, module: str, chain: list[str], in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, module, [*chain, child.name], True)
            elif isinstance(child, ast.ClassDef):
                walk(child, module, [*chain, child.name], in_function)
            elif isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                names = [a.name for a in child.names] if isinstance(child, ast.Import) else [str(child.module)]
                found.setdefault((module, ".".join(chain)), []).extend(names)
            else:
                walk(child, module, chain, in_function)

    for path in sorted(HARNESS.rglob("*.py")):
        walk(_tree(path), _module(path), [], False)
    return found


def test_the_inner_import_finder_sees_nested_functions_and_methods(tmp_path):
    assert ("harness.bench.provenance", "collect_env.run") in inner_imports()  # a function inside a function
    assert ("harness.runner", "execute") in inner_imports()


def test_no_import_inside_a_function_unless_listed_with_its_reason():
    """Imports inside functions hid runner.py's dependencies (doctor imported its internals late)."""
    found = inner_imports()
    unlisted = {f"{m}.{f}: {', '.join(found[m, f])}" for m, f in found if (m, f) not in INNER_IMPORTS}
    assert not unlisted, "import at the top of the module, or list it in INNER_IMPORTS with why"
    stale = [f"{m}.{f}" for m, f in INNER_IMPORTS if (m, f) not in found]
    assert not stale, "no longer imports inside the function: remove it from INNER_IMPORTS"
    assert all(why.strip() for why in INNER_IMPORTS.values())


# ------------------------------------------------------------------ the in-interpreter package
#: the package that runs inside a build's interpreter, whose environment holds torch and nothing else
IN_INTERPRETER = HARNESS / "bench"


def foreign_imports(path: Path) -> list[str]:
    """What ``path`` imports (at the top or inside functions) beyond the standard library, torch and
    ``harness.bench`` itself."""
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside the package
                continue
            targets = [str(node.module)]
        else:
            continue
        for target in targets:
            top = target.split(".")[0]
            if top in sys.stdlib_module_names or top == "torch" or target.startswith("harness.bench"):
                continue
            if target == "harness" and isinstance(node, ast.ImportFrom):  # from harness import X
                targets_ = [f"harness.{a.name}" for a in node.names]
                found += [t for t in targets_ if not t.startswith("harness.bench")]
                continue
            found.append(target)
    return found


def test_the_in_interpreter_package_imports_only_the_standard_library_torch_and_itself():
    """The claim "standard library and torch only" was stated in docstrings; harness.macos, harness.configs and
    harness.fsutil (which imports harness.errors) had crept into the worker's imports."""
    modules = sorted(IN_INTERPRETER.rglob("*.py"))
    assert {p.stem for p in modules} >= {"worker", "provenance", "consistency", "accuracy", "assumptions", "channel"}
    found = {_module(p): bad for p in modules if (bad := foreign_imports(p))}
    assert found == {}
    top = ast.parse((HARNESS / "__init__.py").read_text())  # imported first by every child: imports nothing
    assert not [n for n in ast.walk(top) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_foreign_imports_sees_host_modules(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text(
        "import json\nimport torch.nn\nfrom harness.bench import ops\nfrom harness import configs, bench\n"
        "def f():\n    import numpy\n    from harness.fsutil import open_write\n"
    )
    assert foreign_imports(planted) == ["harness.configs", "numpy", "harness.fsutil"]


def test_the_child_entry_points_load_only_the_in_interpreter_package():
    """What ``python -m harness.bench.worker`` (and the probe, the checks, the assumptions) really load of
    harness: the package and ``harness`` itself, nothing of the host's side."""
    names = [_module(p) for p in sorted(IN_INTERPRETER.rglob("*.py"))]
    code = "import sys\n" + "".join(f"import {n}\n" for n in names)
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] == 'harness'))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=HARNESS.parent, check=True
    ).stdout
    loaded = ast.literal_eval(out)
    assert [m for m in loaded if m != "harness" and not m.startswith("harness.bench")] == []


# ------------------------------------------------------------------ plan -> schedule -> record, in-process


def _plan(tmp_path: Path, **kw) -> planning.Plan:
    request = planning.RunRequest(
        inputs={"stock": f"python:{sys.executable}", "patched": f"python:{sys.executable}"},
        device="cpu",
        out=tmp_path / "out",
        cells=("mm/8x8x8/float32", "mm/16x16x16/float32"),
        **kw,
    )
    return planning.plan(request)


def test_plan_fills_defaults_and_owns_the_run_record(tmp_path):
    plan = _plan(tmp_path, quick=True, worker_env=("OMP_NUM_THREADS=2",))
    assert (plan.kind, plan.rounds, plan.timeout, plan.threads) == ("compare", 4, 300.0, 1)
    assert _plan(tmp_path).rounds == 6 and _plan(tmp_path, target_ci=0.01).rounds == options.ROUNDS
    assert plan.stall == options.STALL_TIMEOUT["quick"] and plan.budget == options.BUDGET_S["quick"]
    assert plan.extra_env == {"OMP_NUM_THREADS": "2"} and plan.target is None
    run = plan.run_json()
    assert run["cells"] == ["mm/8x8x8/float32", "mm/16x16x16/float32"] and run["configs"] == ["default", "no_vec"]
    assert sorted(run["order"]) == [
        (r, b_, c) for r in range(4) for b_ in ("patched", "stock") for c in ("default", "no_vec")
    ]
    assert run["order"][:4] == planning.round_order(0, 0, ["stock", "patched"], plan.configs)


@pytest.mark.parametrize(
    "kw, fragment",
    [
        ({"rounds": 0}, "--rounds 0: out of range"),
        ({"stall_timeout": -1.0}, "--stall-timeout -1.0: out of range"),
        ({"stall_timeout": float("nan")}, "--stall-timeout nan: not a finite number"),
        ({"target_ci": 1.5}, "--target-ci 1.5: out of range"),
        ({"plant_k": 2.0}, "--plant-k 2.0: out of range"),
        ({"threads": 10**20}, "--threads 100000000000000000000: out of range"),
        ({"keep_env": ("HOME",)}, "--keep-env HOME: every worker inherits it anyway"),
        ({"worker_env": ("PYTHONPATH=x",)}, "--env PYTHONPATH: the harness sets PYTHONPATH"),
    ],
)
def test_plan_refuses_bad_values_in_one_line(tmp_path, kw, fragment):
    with pytest.raises(runner.UsageError) as info:
        _plan(tmp_path, **kw)
    assert fragment in info.value.cause and "\n" not in info.value.line()


def test_resume_plan_comes_from_the_results_document(tmp_path):
    from harness import results as res

    plan = _plan(tmp_path)
    probe = {"torch_version": "2.13.0", "git_version": "abc"}
    builds = {b_: {"input": {"kind": "python", "value": b_}, "provenance": probe} for b_ in ("stock", "patched")}
    data = res.new_document(plan.run_json(), builds, {"default": {}})
    key = res.resume_plan(data)
    assert set(key) == set(res.RESUME_KEYS) - {"plant_k"} and key["extra_env"] is None  # unset: as before it existed
    assert key["torch"] == {"stock": ["2.13.0", "abc"], "patched": ["2.13.0", "abc"]}
    assert key["cells"] == plan.run_json()["cells"] and data["processes"] == []


def test_adaptive_rounds_stop_when_converged_and_at_the_budget():
    ran: list[tuple[int, str, str, tuple]] = []
    todo = [{"default": ["a", "b"]}, {"default": ["b"]}, {}]
    added = runner.adaptive_rounds(
        0,
        ["stock", "patched"],
        [EnvConfig("default")],
        4,
        lambda r, b_, c, keys: ran.append((r, b_, c, tuple(keys))),
        lambda: todo.pop(0),
        lambda extra, need: 0.0,
        time.monotonic() + 60.0,
    )
    assert added == 2 and [(r, keys) for r, _, _, keys in ran] == [(4, ("a", "b"))] * 2 + [(5, ("b",))] * 2
    assert sorted(b_ for r, b_, _, _ in ran if r == 4) == ["patched", "stock"]
    over = runner.adaptive_rounds(
        0,
        ["stock"],
        [EnvConfig("default")],
        4,
        lambda *a: ran.append(a),
        lambda: {"default": ["a"]},
        lambda extra, need: 1e9,
        time.monotonic() + 60.0,
    )
    assert over == 0  # a round whose estimate overruns the budget is not started


def test_schedule_runs_planned_rounds_in_order_and_records_no_adaptive_without_target(tmp_path):
    plan = _plan(tmp_path, rounds=2)
    data = {"run": plan.run_json(), "processes": []}
    recorder = runner.Recorder(plan, data, tmp_path)
    seen = []
    recorder.process = lambda r, b_, c, keys, measure: seen.append((r, b_, c, len(keys), measure))
    runner.schedule(plan, recorder)
    assert [s[:3] for s in seen] == [tuple(e) for e in data["run"]["order"]]
    assert all(s[3:] == (2, None) for s in seen)  # every cell, at the plan's own timing
    assert "adaptive" not in data["run"]


def test_platform_registry_rejects_an_unknown_name_in_one_line():
    with pytest.raises(UsageError) as info:
        platforms.platform_spec("windows-x64")
    assert info.value.line() == (
        "error: unknown platform 'windows-x64' -- choose one of: " "macos-arm64, linux-cpu, linux-cuda"
    )
