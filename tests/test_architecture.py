"""The layout rules of docs/architecture.md, checked on the source (no imports run, no timing)."""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import pytest

from harness import build as b
from harness import options, runner
from harness import plan as planning
from harness.configs import EnvConfig

HARNESS = Path(__file__).resolve().parent.parent / "harness"
MAX_LINES = 80


def _module(path: Path) -> str:
    parts = path.relative_to(HARNESS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """harness module -> the harness modules it imports (top level and inside functions alike)."""
    modules = {_module(p): p for p in HARNESS.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
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
    """issue 16: series.py and upstream.py imported each other (and build.py both, lazily)."""
    graph = import_graph()
    assert "harness.series" in graph["harness.commands.series"] and "harness.upstream" in graph["harness.series"]
    assert find_cycle(graph) is None


def test_library_modules_take_no_argparse_namespace():
    """Argument parsing lives in harness/commands/ and cli.py only."""
    users = sorted(
        _module(p) for p in HARNESS.rglob("*.py") if "import argparse" in p.read_text() and "commands" not in p.parts
    )
    assert users == ["harness.cli", "harness.provenance"]  # provenance: its own `python -m` entry in a worker


def long_functions() -> list[str]:
    """``module.function (N lines)`` of every function in harness/ longer than MAX_LINES, docstring not counted."""
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
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
    seen = []
    runner.schedule(plan, data, lambda r, b_, c, keys, measure: seen.append((r, b_, c, len(keys), measure)))
    assert [s[:3] for s in seen] == [tuple(e) for e in data["run"]["order"]]
    assert all(s[3:] == (2, None) for s in seen)  # every cell, at the plan's own timing
    assert "adaptive" not in data["run"]


def test_platform_registry_rejects_an_unknown_name_in_one_line():
    with pytest.raises(b.UsageError) as info:
        b.platform_spec("windows-x64")
    assert info.value.line() == (
        "error: unknown platform 'windows-x64' -- choose one of: " "macos-arm64, linux-cpu, linux-cuda"
    )
