"""End to end on a small generated upstream (tests/small_upstream.py): real CMake compiles, real wheels.

checkout (worktrees) -> apply series -> build_stock -> build_patched (full, then --incremental in the
stock tree) -> verify each wheel in a fresh venv -> skip identical rebuilds -> failure output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import small_upstream as su
from conftest import run_harness, share_build_venvs

from harness import workflow
from harness.build import plan as plan_mod
from harness.build import platforms
from harness.build import verify as verify_mod
from harness.build import wheel as wheel_mod
from harness.cli import main

pytestmark = pytest.mark.slow

if shutil.which("cmake") is None or shutil.which("c++") is None:  # pragma: no cover - CI installs both
    pytest.skip("needs cmake and a C++ compiler (apt-get install -y cmake g++)", allow_module_level=True)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory, build_venvs):
    """The small upstream, its series ``tiny-fast-path`` (patches/), a stock worktree of its base and
    this module's harness cache; ``sessions/`` is where :func:`sessions` checks out its own worktrees."""
    root = tmp_path_factory.mktemp("e2e")
    old = os.environ.get("TORCH_PATCH_HARNESS_CACHE")
    os.environ["TORCH_PATCH_HARNESS_CACHE"] = str(share_build_venvs(root / "cache", build_venvs))
    repo = su.make_upstream(root)
    series_dir = su.make_series(repo, root / "patches")
    patches = sorted((series_dir / "v1.4.0").glob("*.patch"))
    stock = su.worktree(repo, root / "work" / "v1.4.0" / "stock")
    series = plan_mod.SeriesRef(su.SERIES_NAME, tuple(patches), (su.MARKER,), (su.PATCHED_FILE,))
    yield {
        "root": root,
        "repo": repo,
        "series_dir": series_dir,
        "stock": stock,
        "series": series,
        "base_sha": plan_mod.git_head(stock),
        "sessions": root / "sessions",
    }
    if old is None:
        os.environ.pop("TORCH_PATCH_HARNESS_CACHE", None)
    else:
        os.environ["TORCH_PATCH_HARNESS_CACHE"] = old


@pytest.fixture(scope="module")
def sessions(upstream):
    """The build_stock / build_patched session path, once for the module: ``build --series`` checks out
    the series' upstream (worktrees in ``sessions/work``), applies the series, builds and verifies stock
    and patched (full), then patched ``--incremental`` in the stock tree. Per build: what the command
    left (exit status, stdout, stderr) and the (plan, result) of its :func:`harness.build.wheel.build_wheel`."""
    folder = upstream["sessions"]
    common = ["--series", str(upstream["series_dir"]), "--workdir", str(folder / "work")]
    common += ["--platform", "linux-cpu", "--jobs", "2"]
    made, real = [], wheel_mod.build_wheel

    def recording(plan, *args, **kwargs):
        result = real(plan, *args, **kwargs)
        made.append((plan, result))
        return result

    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(workflow, "build_wheel", recording)
        for name, extra in (
            ("stock", ["--kind", "stock", "--dist", str(folder / "dist")]),
            ("patched", ["--kind", "patched", "--dist", str(folder / "dist")]),
            ("incremental", ["--kind", "patched", "--incremental", "--dist", str(folder / "dist-inc")]),
        ):
            made.clear()
            runs[name] = run_harness("build", *extra, *common), (made[-1] if made else None)
    return runs


@pytest.fixture(scope="module")
def builds(upstream, sessions):
    """Plans and results: build_stock of the base (no series) here; build_patched (full) and build_patched
    --incremental (in the stock tree) are the session path's (:func:`sessions`), the same plans and builds."""
    u = upstream
    stock_plan = plan_mod.plan_build(
        u["stock"], "linux-cpu", kind="stock", jobs=2, dist_dir=u["root"] / "dist", base_sha=u["base_sha"]
    )
    built = {"stock": (stock_plan, wheel_mod.build_wheel(stock_plan))}
    for name in ("patched", "incremental"):
        ran, plan_and_result = sessions[name]
        assert ran.returncode == 0, ran.stderr
        built[name] = plan_and_result
    return built


def test_wheels_carry_their_labels(builds, upstream):
    sha8 = upstream["base_sha"][:8]
    stock_plan, stock = builds["stock"]
    patched_plan, patched = builds["patched"]
    assert stock_plan.version == f"1.4.0+stock.{plan_mod._hex_segment(upstream['base_sha'])}"
    assert sha8 in stock_plan.version
    assert stock.wheel.name.startswith(f"tinyext-{stock_plan.version}-")
    assert patched_plan.version == f"1.4.0+tiny.fast.path.{upstream['series'].hash[:8]}"
    assert patched.wheel.name.startswith(f"tinyext-{patched_plan.version}-")
    assert plan_mod.shared_configuration(stock_plan, patched_plan).keys() == {"PYTORCH_BUILD_VERSION"}


def test_incremental_recompiles_only_the_touched_unit(builds, upstream):
    _, stock = builds["stock"]
    _, patched = builds["patched"]
    _, incremental = builds["incremental"]
    assert stock.compiled_units == len(su.UNITS) == patched.compiled_units
    assert incremental.compiled_units == 1
    assert "src/config.cpp.o" in incremental.log.read_text()
    # the stock tree it ran in is back at the base afterwards (series reverted)
    stock_tree = upstream["sessions"] / "work" / "v1.4.0" / "stock"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=stock_tree, capture_output=True, text=True)
    assert status.stdout == ""


def test_verification_of_each_wheel(builds):
    for kind, must_contain in (("stock", False), ("patched", True), ("incremental", True)):
        plan, result = builds[kind]
        verified = verify_mod.verify_wheel(
            result.wheel,
            plan.version,
            platform="linux-cpu",
            markers=(su.MARKER,),
            must_contain=must_contain,
            series_files=(su.PATCHED_FILE,),
        )
        assert verified.version == plan.version and verified.markers_checked


def test_patched_wheel_reads_the_new_variable(builds, tmp_path):
    _, result = builds["incremental"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", str(result.wheel)],
        check=True,
    )
    code = "import tinyext; print(tinyext.prefer_fast_path(), tinyext.add(2.0, 3.5), tinyext.norm2(3.0, 4.0))"
    for value, expected in (("1", "True 5.5 5.0"), ("0", "False 5.5 5.0")):
        out = subprocess.run(
            [str(venv / "bin" / "python"), "-c", code],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, su.MARKER: value},
            check=True,
        ).stdout.strip()
        assert out == expected


def test_manifest_beside_wheel_and_identical_rebuild_skipped(builds, upstream, capsys):
    import json

    plan, first = builds["stock"]
    data = json.loads(first.manifest.read_text())
    assert first.manifest == first.wheel.with_name(first.wheel.name + ".build.json")
    assert data["base_sha"] == upstream["base_sha"] and data["series"] is None
    assert data["environment"]["PYTORCH_BUILD_VERSION"] == plan.version
    assert data["compiler"].startswith(("c++", "g++", "clang", "Apple clang")) and data["cmake"].startswith(
        "cmake version"
    )
    assert data["duration_s"] > 0 and data["start"] <= data["end"] and Path(data["log"]).is_file()
    assert data["compiled_units"] == len(su.UNITS)
    patched_data = json.loads(builds["patched"][1].manifest.read_text())
    assert patched_data["series"] == {"name": su.SERIES_NAME, "hash": upstream["series"].hash}
    again = wheel_mod.build_wheel(plan)
    assert again.skipped and again.wheel == first.wheel and again.compiled_units == 0
    assert "inputs identical" in capsys.readouterr().err


def _tampered(wheel: Path, out: Path, replace: dict[str, bytes]) -> Path:
    target = out / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, replace.get(item.filename, src.read(item.filename)))
    return target


def test_wrong_label_or_marker_fails_verification_with_one_line(builds, tmp_path):
    stock_plan, stock = builds["stock"]
    patched_plan, patched = builds["patched"]
    # wheel file name right, __version__ inside wrong
    bad = _tampered(stock.wheel, tmp_path, {"tinyext/version.py": b"__version__ = '1.4.0+stock.deadbeef'\n"})
    with pytest.raises(verify_mod.VerifyError) as info:
        verify_mod.verify_wheel(bad, stock_plan.version, platform="linux-cpu")
    assert "__version__ is '1.4.0+stock.deadbeef'" in info.value.line() and "\n" not in info.value.line()
    # wrong label expected
    with pytest.raises(verify_mod.VerifyError) as info:
        verify_mod.verify_wheel(patched.wheel, stock_plan.version, platform="linux-cpu")
    assert f"has version {patched_plan.version}" in info.value.line()
    # marker: the stock wheel lacks it, the patched wheel has it
    with pytest.raises(verify_mod.VerifyError) as info:
        verify_mod.verify_wheel(
            stock.wheel, stock_plan.version, platform="linux-cpu", markers=(su.MARKER,), must_contain=True
        )
    assert f"no compiled library contains the marker '{su.MARKER}'" in info.value.line()
    with pytest.raises(verify_mod.VerifyError) as info:
        verify_mod.verify_wheel(
            patched.wheel, patched_plan.version, platform="linux-cpu", markers=(su.MARKER,), must_contain=False
        )
    assert "contains the patched marker" in info.value.line()
    # a platform that does not compile the patched file skips the marker check, saying so
    skipped = verify_mod.verify_wheel(
        stock.wheel,
        stock_plan.version,
        platform="linux-cpu",
        markers=(su.MARKER,),
        must_contain=True,
        series_files=("src/mps/Gemm.mm",),
    )
    assert not skipped.markers_checked and "does not compile" in skipped.notes[0]


def test_cli_build_failure_prints_cause_tail_and_log(upstream, tmp_path, capsys):
    broken = su.worktree(upstream["repo"], tmp_path / "broken")
    (broken / "src" / "add.cpp").write_text('#include "tiny.h"\nthis is not C++;\n')
    rc = main(
        [
            "build",
            "--kind",
            "stock",
            "--source",
            str(broken),
            "--platform",
            "linux-cpu",
            "--jobs",
            "2",
            "--dist",
            str(tmp_path / "dist"),
        ]
    )
    err = capsys.readouterr().err.splitlines()
    assert rc == 1
    last = err[-1]
    assert last.startswith("error: stock build failed (exit 1): ") and "error" in last.split(": ", 2)[2].lower()
    log = Path(last.rsplit("full log: ", 1)[1])
    assert log.is_file()
    tail = log.read_text().splitlines()[-40:]
    assert err[-41:-1] == tail


def test_cli_build_source_reuses_identical_build(builds, upstream, capsys):
    plan, result = builds["stock"]
    rc = main(
        [
            "build",
            "--kind",
            "stock",
            "--source",
            str(upstream["stock"]),
            "--platform",
            "linux-cpu",
            "--jobs",
            "2",
            "--dist",
            str(result.wheel.parent),
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0 and captured.out.strip() == str(result.wheel)
    assert "skipped" in captured.err and f"verified {result.wheel.name}" in captured.err


def test_cli_sessions_checkout_apply_build_verify(sessions, upstream):
    """The build_stock / build_patched session path: checkout (worktrees of the series' upstream) ->
    apply -> build -> verify, then --incremental in the stock tree; units compiled 7, 7, 1."""
    import json

    wheels = {}
    for name, (ran, _) in sessions.items():
        assert ran.returncode == 0, ran.stderr
        wheels[name] = Path(ran.stdout.strip())
        assert f"verified {wheels[name].name}: imports, version" in ran.stderr and "markers checked" in ran.stderr
    units = {
        k: json.loads(w.with_name(w.name + ".build.json").read_text())["compiled_units"] for k, w in wheels.items()
    }
    assert units == {"stock": len(su.UNITS), "patched": len(su.UNITS), "incremental": 1}
    assert wheels["patched"].name == wheels["incremental"].name  # same label: same series, same base
    assert "+stock." in wheels["stock"].name
    patched_tree = upstream["sessions"] / "work" / "v1.4.0" / "patched"
    assert su.MARKER in (patched_tree / su.PATCHED_FILE).read_text()  # apply put the series on the branch


def test_env_contract_reaches_cmake(builds, upstream):
    """MAX_JOBS and CMAKE_<LANG>_COMPILER_LAUNCHER (when a compiler cache is installed) reach the build."""
    plan, result = builds["stock"]
    log = result.log.read_text()
    assert "--parallel 2" in log  # MAX_JOBS=2 -> cmake --build --parallel 2
    cache = (upstream["stock"] / "build" / "cmake-Release" / "CMakeCache.txt").read_text()
    launcher = platforms.find_launcher()
    if launcher:
        assert plan.env["CMAKE_CXX_COMPILER_LAUNCHER"] == launcher
        assert f"CMAKE_CXX_COMPILER_LAUNCHER:UNINITIALIZED={launcher}" in cache
    else:
        assert "CMAKE_CXX_COMPILER_LAUNCHER" not in plan.env and "COMPILER_LAUNCHER" not in cache
    assert "CMAKE_BUILD_TYPE:STRING=Release" in cache
