"""Unit tests of harness.build: platform environments, labels, base conventions, preflight, failures.

Fast: no compiler runs here (tests/test_build_e2e.py builds real wheels).
"""

from __future__ import annotations

import collections
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import small_upstream as su
from conftest import git
from packaging.version import Version

from harness import workflow
from harness.build import convention, platforms, preflight
from harness.build import plan as plan_mod
from harness.build import verify as verify_mod
from harness.build import wheel as wheel_mod
from harness.cli import main
from harness.errors import BuildError, UsageError

STOCK_SHA = "924a857c1fef0a5b3d26666b2336fe6b098ca7fb"


def _tree(root: Path, *, version="2.6.0a0", reads_version=True, wheel_script=None, gitmodules=None) -> Path:
    """A source tree with PyTorch's build-convention files (no code)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "version.txt").write_text(version + "\n")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools", "wheel", "cmake", "typing-extensions>=4.10.0"]\n'
        'build-backend = "setuptools.build_meta:__legacy__"\n'
    )
    (root / "requirements.txt").write_text('# dev\nnumpy\ncmake\n\nsympy==1.13.1 ; python_version >= "3.9"\n')
    (root / "setup.py").write_text("import os\nv = os.getenv('PYTORCH_BUILD_VERSION')\n" if reads_version else "pass\n")
    if wheel_script is not None:
        (root / ".ci" / "wheel").mkdir(parents=True)
        (root / ".ci" / "wheel" / "build_wheel.sh").write_text(wheel_script)
    if gitmodules is not None:
        (root / ".gitmodules").write_text(gitmodules)
    return root


# ------------------------------------------------------------------ platform environments


def test_platform_env_macos_arm64_pinned():
    env = platforms.platform_env("macos-arm64", jobs=8, macos_deployment_target="11.0", launcher="ccache")
    assert env == {
        "BUILD_TEST": "0",
        "CMAKE_BUILD_TYPE": "Release",
        "MAX_JOBS": "8",
        "USE_ROCM": "0",
        "USE_MPS": "1",
        "USE_CUDA": "0",
        "ARCHFLAGS": "-arch arm64",
        "MACOSX_DEPLOYMENT_TARGET": "11.0",
        "CMAKE_C_COMPILER_LAUNCHER": "ccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
        "CMAKE_OBJC_COMPILER_LAUNCHER": "ccache",
        "CMAKE_OBJCXX_COMPILER_LAUNCHER": "ccache",
    }


def test_macos_arm64_sets_osx_architectures_only_when_cross_compiling(monkeypatch):
    """Upstream sets CMAKE_OSX_ARCHITECTURES=arm64 only on a non-arm64 host (.ci/pytorch/macos-build.sh);
    on a native arm64 Mac it would make v2.6.0's CMakeLists.txt build a host protoc as for a cross-compile."""
    native = platforms.platform_env("macos-arm64", jobs=1)
    assert "CMAKE_OSX_ARCHITECTURES" not in native and native["ARCHFLAGS"] == "-arch arm64"
    cross = platforms.platform_env("macos-arm64", jobs=1, cross_compile=True)
    assert cross["CMAKE_OSX_ARCHITECTURES"] == "arm64" and cross["ARCHFLAGS"] == "-arch arm64"
    assert "ARCHFLAGS" not in platforms.platform_env("linux-cpu", jobs=1, cross_compile=True)
    hosts = (("darwin", "arm64", False), ("darwin", "x86_64", True), ("linux", "x86_64", False))
    for system, machine, expected in hosts:
        monkeypatch.setattr(sys, "platform", system)
        monkeypatch.setattr(platforms._platform, "machine", lambda m=machine: m)
        assert platforms.macos_cross_compiling() is expected


def test_platform_env_linux_cpu_pinned():
    env = platforms.platform_env("linux-cpu", jobs=2, build_type="RelWithDebInfo")
    assert env == {
        "BUILD_TEST": "0",
        "CMAKE_BUILD_TYPE": "RelWithDebInfo",
        "MAX_JOBS": "2",
        "USE_ROCM": "0",
        "USE_CUDA": "0",
        "USE_MPS": "0",
    }


def test_platform_env_linux_cuda_pinned():
    env = platforms.platform_env("linux-cuda", jobs=16, cuda_arch_list="9.0", launcher="sccache")
    assert env == {
        "BUILD_TEST": "0",
        "CMAKE_BUILD_TYPE": "Release",
        "MAX_JOBS": "16",
        "USE_ROCM": "0",
        "USE_CUDA": "1",
        "USE_MPS": "0",
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "CMAKE_C_COMPILER_LAUNCHER": "sccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "sccache",
        "CMAKE_CUDA_COMPILER_LAUNCHER": "sccache",
    }
    assert platforms.platform_env("linux-cuda", jobs=1)["TORCH_CUDA_ARCH_LIST"] == "8.0;8.6;8.9;9.0"


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"platform": "windows", "jobs": 1}, "platform"),
        ({"platform": "linux-cpu", "jobs": 0}, "--jobs"),
        ({"platform": "linux-cpu", "jobs": 1, "build_type": "Fast"}, "build type"),
    ],
)
def test_platform_env_rejects_bad_input(kwargs, word):
    with pytest.raises(UsageError) as info:
        platforms.platform_env(**kwargs)
    assert word in info.value.cause and "\n" not in info.value.line()


def test_env_overrides_parse_and_reject():
    assert platforms.parse_env_overrides(["A=1", "B=x=y", "A=2", "EMPTY="]) == {"A": "2", "B": "x=y", "EMPTY": ""}
    for bad in ("NOVALUE", "=1", "1A=2", "A B=1"):
        with pytest.raises(UsageError) as info:
            platforms.parse_env_overrides([bad])
        assert repr(bad) in info.value.cause


def test_cli_malformed_env_is_one_line(capsys):
    rc = main(["build", "--kind", "stock", "--dry-run", "--platform", "linux-cpu", "--build-env", "MAX_JOBS"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("error: malformed --build-env 'MAX_JOBS'")


# ------------------------------------------------------------------ labels and the base's files


def test_local_version_labels_are_pep440_and_distinct(tmp_path):
    patch = tmp_path / "0001-x.patch"
    patch.write_bytes(b"diff --git a/x b/x\n")
    series = plan_mod.SeriesRef("mps-gemm-prefer-fast-math", (patch,))
    import hashlib

    assert series.hash == hashlib.sha256(b"diff --git a/x b/x\n").hexdigest()
    stock = plan_mod.local_version("2.6.0", "stock", base_sha=STOCK_SHA)
    patched = plan_mod.local_version("2.6.0", "patched", series=series)
    assert stock == "2.6.0+stock.924a857c"
    assert patched == f"2.6.0+mps.gemm.prefer.fast.math.{series.hash[:8]}"
    assert Version(stock).local == "stock.924a857c" and Version(stock) != Version(patched)
    assert Version(stock).public == Version(patched).public == "2.6.0"
    # an all-digit sha prefix with a leading zero would lose the zero: it gets git's g prefix
    assert plan_mod.local_version("2.6.0", "stock", base_sha="0123456789") == "2.6.0+stock.g01234567"
    with pytest.raises(BuildError):
        plan_mod.local_version("2.6.0", "stock", base_sha=None)
    with pytest.raises(BuildError):
        plan_mod.local_version("2.6.0", "patched", series=plan_mod.SeriesRef("bad name!", (patch,)))


def test_base_release_and_version_env(tmp_path):
    src = _tree(tmp_path / "src")
    assert convention.base_release(src) == "2.6.0"
    assert convention.version_env(src, "2.6.0+stock.924a857c") == {
        "PYTORCH_BUILD_VERSION": "2.6.0+stock.924a857c",
        "PYTORCH_BUILD_NUMBER": "0",
    }
    other = _tree(tmp_path / "other", reads_version=False)
    with pytest.raises(BuildError) as info:
        convention.version_env(other, "1.0+x")
    assert "PYTORCH_BUILD_VERSION" in info.value.cause


@pytest.mark.parametrize(
    "script, expected, where",
    [
        (None, "11.0", "sets no deployment target"),
        ("export MACOSX_DEPLOYMENT_TARGET=10.15\n", "11.0", ".ci/wheel/build_wheel.sh:1"),
        (
            "# MACOSX_DEPLOYMENT_TARGET=14.0\nexport MACOSX_DEPLOYMENT_TARGET=13.3\n",
            "13.3",
            ".ci/wheel/build_wheel.sh:2",
        ),
    ],
)
def test_macos_deployment_target_read_from_base(tmp_path, script, expected, where):
    src = _tree(tmp_path / "src", wheel_script=script)
    target, note = convention.macos_deployment_target(src)
    assert target == expected and where in note


@pytest.fixture(scope="module")
def pytorch_like(tmp_path_factory) -> dict[str, Path]:
    """Sandbox bases shaped like PyTorch v2.6.0 and main (tests/small_upstream.py), git repositories."""
    root = tmp_path_factory.mktemp("pytorch-like")
    return {flavour: su.make_pytorch_like(root, flavour) for flavour in ("v2.6.0", "main")}


def test_macos_deployment_target_read_from_ci_wheel_mac(pytorch_like):
    """main keeps it in a dict of .ci/wheel/mac/build_env_setup.py; v2.6.0 in .ci/wheel/build_wheel.sh."""
    assert convention.macos_deployment_target(pytorch_like["main"]) == (
        "14.0",
        "base sets 14.0 (.ci/wheel/mac/build_env_setup.py:11)",
    )
    assert convention.macos_deployment_target(pytorch_like["v2.6.0"]) == (
        "11.0",
        "base sets 10.15 (.ci/wheel/build_wheel.sh:5); raised to the arm64 floor 11.0",
    )


def test_cmake_policy_minimum_decided_by_the_base_files(pytorch_like, tmp_path):
    """CMake 4: v2.6.0 (no CMAKE_POLICY_VERSION_MINIMUM in its CMake files) gets 3.5; main sets it itself."""
    env, note = convention.cmake_policy_env(pytorch_like["v2.6.0"])
    assert env == {"CMAKE_POLICY_VERSION_MINIMUM": "3.5"} and "pytorch/pytorch issue 150149" in note
    assert convention.cmake_policy_env(pytorch_like["main"]) == (
        {},
        "the base sets it itself (cmake/Dependencies.cmake): CMake 4 is handled",
    )
    assert convention.cmake_policy_env(_tree(tmp_path / "nocmake")) == ({}, "not a CMake base")
    plan = plan_mod.plan_build(pytorch_like["v2.6.0"], "linux-cpu", launcher=None, dist_dir=tmp_path / "d")
    assert plan.env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    off = plan_mod.plan_build(
        pytorch_like["v2.6.0"],
        "linux-cpu",
        launcher=None,
        dist_dir=tmp_path / "d",
        env_overrides=["CMAKE_POLICY_VERSION_MINIMUM=3.10"],
    )
    assert off.env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.10"  # --env wins


def test_cli_dry_run_macos_arm64_of_v260_and_main(pytorch_like, tmp_path, capsys, monkeypatch):
    """Acceptance: `build --dry-run --platform macos-arm64` shows the CMake policy setting and ARCHFLAGS,
    not CMAKE_OSX_ARCHITECTURES, for v2.6.0; and for main the deployment target of .ci/wheel/mac/."""
    monkeypatch.setattr(plan_mod, "macos_cross_compiling", lambda: False)  # an arm64 Mac, whatever runs the test
    out = {}
    for flavour, tree in pytorch_like.items():
        rc = main(
            [
                "build",
                "--kind",
                "stock",
                "--dry-run",
                "--platform",
                "macos-arm64",
                "--jobs",
                "8",
                "--source",
                str(tree),
                "--dist",
                str(tmp_path / "dist"),
            ]
        )
        assert rc == 0
        out[flavour] = capsys.readouterr().out.splitlines()
    v260, head = out["v2.6.0"], out["main"]
    assert "CMAKE_POLICY_VERSION_MINIMUM=3.5" in v260 and "ARCHFLAGS='-arch arm64'" in v260
    assert "MACOSX_DEPLOYMENT_TARGET=11.0" in v260
    assert not any(line.startswith("CMAKE_OSX_ARCHITECTURES") for line in v260 + head)
    assert "MACOSX_DEPLOYMENT_TARGET=14.0" in head
    assert "# MACOSX_DEPLOYMENT_TARGET: base sets 14.0 (.ci/wheel/mac/build_env_setup.py:11)" in head
    assert not any(line.startswith("CMAKE_POLICY_VERSION_MINIMUM=") for line in head)


def test_build_requirements_and_command_follow_base(tmp_path):
    src = _tree(tmp_path / "src")
    assert convention.build_requirements(src) == (
        "setuptools",
        "wheel",
        "cmake",
        "typing-extensions>=4.10.0",
        "numpy",
        'sympy==1.13.1 ; python_version >= "3.9"',
    )
    dist = tmp_path / "dist"
    assert convention.build_command(src, "py", dist) == (
        "py",
        "-m",
        "pip",
        "wheel",
        str(src),
        "--no-build-isolation",
        "--no-deps",
        "-v",
        "-w",
        str(dist),
    )
    (src / "pyproject.toml").unlink()
    assert convention.build_command(src, "py", dist) == ("py", "setup.py", "bdist_wheel", "-d", str(dist))
    (src / "setup.py").unlink()
    with pytest.raises(BuildError):
        convention.build_command(src, "py", dist)


def test_compiles_on():
    mm = "aten/src/ATen/native/mps/operations/LinearAlgebra.mm"
    assert platforms.compiles_on(mm, "macos-arm64") and not platforms.compiles_on(mm, "linux-cpu")
    assert platforms.compiles_on("aten/src/ATen/native/cuda/Blas.cpp", "linux-cuda")
    assert not platforms.compiles_on("aten/src/ATen/native/cuda/Blas.cpp", "linux-cpu")
    assert all(platforms.compiles_on("src/config.cpp", p) for p in platforms.PLATFORMS)


# ------------------------------------------------------------------ plans


def test_stock_and_patched_share_one_configuration(tmp_path):
    src = _tree(tmp_path / "src")
    patch = tmp_path / "0001.patch"
    patch.write_text("x")
    series = plan_mod.SeriesRef("s", (patch,))
    common = dict(
        jobs=4,
        env_overrides=["USE_DISTRIBUTED=0"],
        build_type="Release",
        dist_dir=tmp_path / "d",
        base_sha=STOCK_SHA,
        launcher="ccache",
    )
    for platform in platforms.PLATFORMS:
        stock = plan_mod.plan_build(src, platform, kind="stock", **common)
        patched = plan_mod.plan_build(src, platform, kind="patched", series=series, **common)
        assert plan_mod.shared_configuration(stock, patched) == {
            "PYTORCH_BUILD_VERSION": ("2.6.0+stock.924a857c", f"2.6.0+s.{series.hash[:8]}")
        }
        assert stock.command == patched.command and stock.requirements == patched.requirements
        assert stock.env["USE_DISTRIBUTED"] == "0" and stock.env["MAX_JOBS"] == "4"


def test_env_override_wins_and_incremental_needs_patched(tmp_path):
    src = _tree(tmp_path / "src")
    plan = plan_mod.plan_build(
        src,
        "linux-cuda",
        env_overrides={"TORCH_CUDA_ARCH_LIST": "8.0", "MAX_JOBS": "3"},
        base_sha=STOCK_SHA,
        launcher=None,
    )
    assert plan.env["TORCH_CUDA_ARCH_LIST"] == "8.0" and plan.jobs == 3
    assert not any(k.endswith("_COMPILER_LAUNCHER") for k in plan.env)
    with pytest.raises(UsageError):
        plan_mod.plan_build(src, "linux-cpu", kind="stock", incremental=True, base_sha=STOCK_SHA)


def test_describe_prints_env_and_exact_command(tmp_path):
    src = _tree(tmp_path / "src")
    plan = plan_mod.plan_build(
        src, "macos-arm64", jobs=6, base_sha=STOCK_SHA, launcher=None, dist_dir=tmp_path / "dist"
    )
    text = plan.describe().splitlines()
    assert "MACOSX_DEPLOYMENT_TARGET=11.0" in text and "USE_MPS=1" in text and "MAX_JOBS=6" in text
    assert "PYTORCH_BUILD_VERSION=2.6.0+stock.924a857c" in text
    venv_python = str(plan_mod.build_venv_path(plan.requirements) / "bin" / "python")
    # a 2.6 base on macOS: upstream's .ci/wheel/build_wheel.sh command (one build_deps), not `pip wheel`
    assert text[-1] == f"{venv_python} setup.py bdist_wheel -d {tmp_path / 'dist'}"


@pytest.mark.parametrize(
    "platform, present, absent",
    [
        (
            "macos-arm64",
            ["USE_MPS=1", "ARCHFLAGS='-arch arm64'", "MACOSX_DEPLOYMENT_TARGET=11.0"],
            ["TORCH_CUDA_ARCH_LIST", "CMAKE_OSX_ARCHITECTURES"],
        ),
        ("linux-cpu", ["USE_CUDA=0", "USE_MPS=0"], ["MACOSX_DEPLOYMENT_TARGET", "TORCH_CUDA_ARCH_LIST"]),
        ("linux-cuda", ["USE_CUDA=1", "TORCH_CUDA_ARCH_LIST='8.0;8.6;8.9;9.0'"], ["MACOSX_DEPLOYMENT_TARGET"]),
    ],
)
def test_cli_dry_run_without_source(capsys, platform, present, absent):
    rc = main(["build", "--kind", "patched", "--dry-run", "--platform", platform, "--jobs", "4"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    for item in present + ["MAX_JOBS=4", "PYTORCH_BUILD_NUMBER=0"]:
        assert item in lines
    assert not any(line.startswith(tuple(absent)) for line in lines)
    assert "PYTORCH_BUILD_VERSION='<version.txt release>+<series>.<series hash8>'" in lines  # as BuildPlan.describe
    assert "pip wheel '<source>' --no-build-isolation --no-deps -v" in lines[-1]


def test_cli_dry_run_with_series_before_checkout(capsys, tmp_path):
    """A known series gives the real label; no worktree yet, nothing is cloned."""
    series = tmp_path / "patches" / "mps-gemm-prefer-fast-math"
    (series / "v2.6.0").mkdir(parents=True)
    patch = series / "v2.6.0" / "0001-x.patch"
    patch.write_text("From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\n---\n")
    (series / "series.toml").write_text(
        'name = "mps-gemm-prefer-fast-math"\ntitle = "t"\nupstream = "https://github.com/pytorch/pytorch.git"\n'
        'env = ["PYTORCH_MPS_GEMM_PREFER_FAST_MATH"]\n\n[[base]]\nref = "v2.6.0"\npatches = ["0001-x.patch"]\n'
    )
    rc = main(
        [
            "build",
            "--kind",
            "patched",
            "--dry-run",
            "--platform",
            "macos-arm64",
            "--series",
            str(series),
            "--workdir",
            str(tmp_path / "work"),
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    digest = plan_mod.SeriesRef("x", (patch,)).hash[:8]
    assert rc == 0 and f"PYTORCH_BUILD_VERSION='<version.txt release>+mps.gemm.prefer.fast.math.{digest}'" in lines
    assert f"# series: mps-gemm-prefer-fast-math {digest} (1 patches)" in lines
    assert not (tmp_path / "work").exists()


# ------------------------------------------------------------------ preflight


def test_preflight_source_is_one_line_naming_submodules_and_remedy(tmp_path):
    src = _tree(
        tmp_path / "src",
        gitmodules='[submodule "a"]\n\tpath = third_party/a\n[submodule "b"]\n\tpath = third_party/b\n',
    )
    (src / "third_party" / "a").mkdir(parents=True)
    (src / "third_party" / "a" / "CMakeLists.txt").write_text("")
    (src / "third_party" / "b").mkdir()  # present but empty, as after a clone without --recursive
    assert preflight.missing_submodules(src) == ["third_party/b"]
    with pytest.raises(BuildError) as info:
        preflight.preflight_source(src)
    line = info.value.line()
    assert "\n" not in line and "lacks its git submodules (third_party/b)" in line
    assert "git clone --recursive --branch v2.6.0" in line and "pytorch-v2.6.0.tar.gz" in line
    (src / "third_party" / "b" / "x.h").write_text("")
    preflight.preflight_source(src)  # complete: no error


def test_preflight_tools_missing_compiler_cmake_and_disk(tmp_path, monkeypatch):
    src = _tree(tmp_path / "src")
    plan = plan_mod.plan_build(src, "linux-cpu", base_sha=STOCK_SHA, launcher=None, dist_dir=tmp_path / "dist")
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(BuildError) as info:
        preflight.preflight_tools(plan, str(empty))
    assert "no C++ compiler" in info.value.cause and "apt-get install -y build-essential" in info.value.remedy
    (empty / "c++").symlink_to(shutil.which("c++") or "/bin/true")
    with pytest.raises(BuildError) as info:
        preflight.preflight_tools(plan, str(empty))
    assert info.value.cause.startswith("cmake not found")
    (empty / "cmake").symlink_to("/bin/true")
    Usage = collections.namedtuple("Usage", "total used free")
    monkeypatch.setattr(
        shutil, "disk_usage", lambda p: Usage(100 * platforms.GIB, 99 * platforms.GIB, plan.min_free_bytes - 1)
    )
    with pytest.raises(BuildError) as info:
        preflight.preflight_tools(plan, str(empty))
    assert "needs about" in info.value.cause
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(100 * platforms.GIB, 0, plan.min_free_bytes))
    preflight.preflight_tools(plan, str(empty))  # enough: no error


def test_a_build_runs_each_preflight_check_once(tmp_path, monkeypatch):
    """The submodule check ran three times per build, the compiler and disk checks twice and the
    macOS one four times; the workflow runs each once (the build itself stands in: no compile here)."""
    src = _tree(tmp_path / "src")
    git(src, "init", "-q")
    git(src, "add", ".")
    git(src, "commit", "-q", "-m", "base")
    calls = collections.Counter()
    for name in ("check_compiler", "check_cmake", "check_disk", "check_host_macos", "missing_submodules"):
        real = getattr(preflight, name)
        monkeypatch.setattr(preflight, name, lambda *a, _r=real, _n=name, **k: (calls.update([_n]), _r(*a, **k))[1])
    fake = _fake_bin(tmp_path, {"c++": "true", "cmake": 'echo "cmake version 3.31.6"'})
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")  # git from the system, the tools from fake
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv(convention.FREE_GIB_ENV, "0")

    def build(plan, force=False):  # what build_wheel checks once its venv exists: the venv's CMake
        wheel_mod._build_environment(plan, tmp_path / "venv")
        return wheel_mod.BuildResult(tmp_path / "x.whl", tmp_path / "x.whl.build.json", tmp_path / "log", True, 0, 0)

    monkeypatch.setattr(workflow, "build_wheel", build)
    request = workflow.BuildRequest("stock", "linux-cpu", source=src, dist=tmp_path / "dist", verify=False)
    state = workflow.build(request)
    assert state.result is not None and state.plan.version.startswith("2.6.0+stock.")
    # cmake: the base's requirements install it, so the build venv's is checked (once), not the host's
    assert calls == {
        "check_compiler": 1,
        "check_cmake": 1,
        "check_disk": 1,
        "check_host_macos": 1,
        "missing_submodules": 1,
    }


def test_disk_estimate_pytorch_table_and_other(tmp_path):
    torch_like = _tree(tmp_path / "pt")
    (torch_like / "aten").mkdir()
    (torch_like / "torch").mkdir()
    assert convention.disk_estimate(torch_like, "linux-cuda") == 50 * platforms.GIB
    small = _tree(tmp_path / "small")
    assert convention.disk_estimate(small, "linux-cpu") == convention.OTHER_DISK_MIN
    (small / "big.bin").write_bytes(b"\0" * (64 << 20))
    assert convention.disk_estimate(small, "linux-cpu") > 20 * (64 << 20)


# ------------------------------------------------------------------ logs


def test_count_compiled_units_ninja_and_make():
    log = "\n".join(
        [
            "[1/3] Building CXX object CMakeFiles/_tiny.dir/src/a.cpp.o",
            "[2/3] Building CXX object CMakeFiles/_tiny.dir/src/b.cpp.o",
            "[ 50%] Building OBJCXX object caffe2/CMakeFiles/torch_cpu.dir/x.mm.o",
            "[3/3] Linking CXX shared module _tiny.so",
            "[1/3] Building CXX object CMakeFiles/_tiny.dir/src/a.cpp.o",  # repeated: counted once
        ]
    )
    assert wheel_mod.count_compiled_units(log) == 3


def test_build_failed_carries_cause_tail_and_log(tmp_path):
    log = tmp_path / "x.log"
    lines = [f"line {i}" for i in range(100)]
    lines[60] = "src/add.cpp:1:1: error: 'garbage' does not name a type"
    log.write_text("\n".join(lines) + "\n")
    exc = wheel_mod.BuildFailed("stock build failed (exit 1)", log)
    assert exc.cause == "stock build failed (exit 1): src/add.cpp:1:1: error: 'garbage' does not name a type"
    assert exc.remedy == f"full log: {log}" and exc.exit_code == 1
    assert exc.tail == lines[60:] and len(exc.tail) == 40


@pytest.fixture(scope="module")
def debian_tree(debian_tarball, tmp_path_factory) -> Path:
    """The build-convention files of Debian's real PyTorch 2.6.0 source (submodules stripped)."""
    root = tmp_path_factory.mktemp("pt260")
    members = [
        "version.txt",
        "setup.py",
        "pyproject.toml",
        "requirements.txt",
        "CMakeLists.txt",
        "cmake/*.cmake",
        "tools/generate_torch_version.py",
        "third_party/README.md",
        "aten/src/ATen/mps/MPSDevice.mm",
        "aten/src/ATen/mps/EmptyTensor.cpp",
    ]
    subprocess.run(
        ["tar", "-xf", str(debian_tarball), "-C", str(root), "--wildcards", *[f"pytorch-v2.6.0/{m}" for m in members]],
        check=True,
    )
    return root / "pytorch-v2.6.0"


@pytest.mark.slow
def test_debian_pytorch_260_plan_and_preflight(debian_tree):
    """The base's own files decide: version variable, requirements, command, deployment target; the
    stripped source stops in preflight with one line."""
    src = debian_tree
    with pytest.raises(BuildError) as info:
        preflight.preflight_source(src)
    line = info.value.line()
    assert "\n" not in line and "lacks its git submodules" in line and "third_party/" in line
    assert "pytorch-v2.6.0.tar.gz" in line and "git clone --recursive" in line
    plan = plan_mod.plan_build(src, "macos-arm64", base_sha=STOCK_SHA, jobs=8, launcher=None)
    assert plan.env["MACOSX_DEPLOYMENT_TARGET"] == "11.0" and plan.version == "2.6.0+stock.924a857c"
    # CMake 4: the real v2.6.0 sets no policy minimum in its CMake files, so the harness does
    assert plan.env["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    assert plan.env["ARCHFLAGS"] == "-arch arm64"
    assert "CMAKE_OSX_ARCHITECTURES" not in plan.env or platforms.macos_cross_compiling()
    assert plan.env["PYTORCH_BUILD_VERSION"] == "2.6.0+stock.924a857c"
    # upstream's v2.6 macOS wheel build (harness.macos.V2_6): requirements.txt, then the script's pins for this
    # Python, then `setup.py bdist_wheel` (one build_deps; `pip wheel` of v2.6 runs it twice)
    assert plan.requirements[:4] == ("astunparse", "expecttest>=0.2.1", "hypothesis", "numpy")
    assert "setuptools<76" in plan.requirements and "cmake" in plan.requirements
    assert plan.command[1:3] == ("setup.py", "bdist_wheel") and plan.recipe == "v2.6"
    assert plan.env["USE_DISTRIBUTED"] == "1" and plan.env["USE_QNNPACK"] == "OFF"


@pytest.mark.slow
def test_cli_build_patched_of_debian_archive_stops_before_compiling(debian_archive, tmp_path, capsys):
    """Acceptance: `build_patched -- --upstream <Debian 2.6.0 archive> --base v2.6.0 --series ...` -> one line."""
    name = "demo"
    series = tmp_path / "patches" / name
    (series / "v2.6.0").mkdir(parents=True)
    (series / "v2.6.0" / "0001-demo.patch").write_text(
        "From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] demo\n\n---\n"
    )
    (series / "series.toml").write_text(
        f'name = "{name}"\ntitle = "demo"\nupstream = "https://github.com/pytorch/pytorch.git"\nenv = ["DEMO_VAR"]\n\n'
        '[[base]]\nref = "v2.6.0"\npatches = ["0001-demo.patch"]\n'
    )
    work = tmp_path / "work"
    rc = main(
        [
            "build",
            "--kind",
            "patched",
            "--upstream",
            str(debian_archive),
            "--base",
            "v2.6.0",
            "--series",
            str(series),
            "--workdir",
            str(work),
            "--dist",
            str(tmp_path / "dist"),
        ]
    )
    err = capsys.readouterr().err.splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and err[-1] == errors[0]
    assert "lacks its git submodules" in errors[0] and "pytorch-v2.6.0.tar.gz" in errors[0]
    assert not (tmp_path / "dist").exists()  # stopped before any build step: no log, no wheel


def _fake_torch_wheel(out: Path, version: str, mps_built: bool) -> Path:
    """A pure-Python wheel named torch whose ``backends.mps.is_built()`` returns ``mps_built``."""
    import base64
    import hashlib
    import zipfile

    name = f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": f"__version__ = {version!r}\nfrom torch import backends\n",
        "torch/backends/__init__.py": "from torch.backends import mps\n",
        "torch/backends/mps/__init__.py": f"def is_built():\n    return {mps_built}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": "torch\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    wheel = out / name
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


@pytest.mark.slow
def test_verify_requires_mps_on_macos(tmp_path):
    version = "2.6.0+stock.924a857c"
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    without = _fake_torch_wheel(tmp_path / "off", version, mps_built=False)
    with pytest.raises(verify_mod.VerifyError) as info:
        verify_mod.verify_wheel(without, version, platform="macos-arm64")
    assert "torch.backends.mps.is_built() is False" in info.value.line() and "\n" not in info.value.line()
    assert verify_mod.verify_wheel(without, version, platform="linux-cpu").mps_built is False  # not required off macOS
    with_mps = _fake_torch_wheel(tmp_path / "on", version, mps_built=True)
    result = verify_mod.verify_wheel(with_mps, version, platform="macos-arm64")
    assert result.mps_built is True and result.version == version


def test_build_steps_reads_ninja_and_make_counters():
    from harness.build.wheel import build_steps

    ninja = "-- Configuring done\n[1/7] Building CXX object a.o\n[2/7] Building CXX object b.o\nwarning: x [3/9]\n"
    assert build_steps(ninja) == (2, 7)  # the last counter at a line start
    assert build_steps("[ 45%] Building CXX object c.o\n[100%] Linking CXX shared library\n") == (100, 100)
    assert build_steps("running bdist_wheel\n") is None


# ------------------------------------------------------------------ toolchain checks (doctor) and Metal


def _fake_bin(tmp_path: Path, scripts: dict[str, str]) -> Path:
    """A PATH directory of small shell scripts standing in for the tools (the machine's own are not used)."""
    path = tmp_path / "fakebin"
    path.mkdir(exist_ok=True)
    for name, body in scripts.items():
        (path / name).write_text("#!/bin/sh\n" + body + "\n")
        (path / name).chmod(0o755)
    return path


_XCRUN_OK = 'echo "Apple metal version 32023.404 (metalfe-32023.404)"'
#: what Xcode 26's xcrun prints when the Metal toolchain component is not installed
_XCRUN_NO_TOOLCHAIN = (
    "echo \"error: error: cannot execute tool 'metal' due to missing Metal Toolchain; "
    'use: xcodebuild -downloadComponent MetalToolchain" >&2; exit 1'
)


@pytest.fixture
def roomy_disk(monkeypatch):
    Usage = collections.namedtuple("Usage", "total used free")
    monkeypatch.setattr(
        shutil, "disk_usage", lambda p: Usage(500 * platforms.GIB, 100 * platforms.GIB, 400 * platforms.GIB)
    )


def test_toolchain_checks_all_present(tmp_path, monkeypatch, pytorch_like, roomy_disk):
    fake = _fake_bin(tmp_path, {"c++": "true", "cmake": 'echo "cmake version 4.1.2"', "xcrun": _XCRUN_OK})
    monkeypatch.setenv("PATH", str(fake))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv(convention.FREE_GIB_ENV, raising=False)
    checks = preflight.toolchain_checks("macos-arm64", None)
    assert [(item, ok) for item, ok, _ in checks] == [
        ("compiler", True),
        ("cmake", True),
        ("metal", True),
        ("disk", True),
    ]
    details = dict((item, detail) for item, _, detail in checks)
    assert details["compiler"] == str(fake / "c++")
    assert details["cmake"] == f"{fake / 'cmake'}: 4.1.2"
    # the fake xcrun compiles every probe: cmake/Metal.cmake would set both entries YES
    assert details["metal"] == "Apple metal version 32023.404 (metalfe-32023.404); Metal 3.1 YES, Metal 4.0 YES"
    assert details["disk"].startswith("400.0 GiB free at ")
    assert "needs about 20.0 GiB (the PyTorch estimate" in details["disk"]
    # against a base: its cmake_minimum_required, and what CMake 4 means for it; its requirements list cmake
    assert preflight.toolchain_checks("linux-cpu", pytorch_like["v2.6.0"])[1] == (
        "cmake",
        True,
        f"{fake / 'cmake'}: 4.1.2 (the base requires 3.18); the build uses the build venv's own "
        "(the base's build requirements list cmake); CMake 4: the build sets CMAKE_POLICY_VERSION_MINIMUM=3.5",
    )
    (fake / "cmake").unlink()  # not on PATH: the build venv brings it
    assert preflight.toolchain_checks("linux-cpu", pytorch_like["main"])[1] == (
        "cmake",
        True,
        "not on PATH (the base requires 3.27); the build uses the build venv's own "
        "(the base's build requirements list cmake); CMake 4: the base handles it",
    )
    assert [c[0] for c in preflight.toolchain_checks("linux-cpu", None)] == ["compiler", "cmake", "disk"]  # no metal


def test_toolchain_checks_missing_tools_never_raise(tmp_path, monkeypatch, roomy_disk):
    empty = _fake_bin(tmp_path, {})
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv(convention.FREE_GIB_ENV, "lots")  # malformed: reported, not raised
    checks = {item: (ok, detail) for item, ok, detail in preflight.toolchain_checks("macos-arm64", None)}
    assert checks["compiler"] == (
        False,
        "error: no C++ compiler found (c++, g++, clang++ not on PATH) -- install the "
        "Xcode command line tools: `xcode-select --install`",
    )
    assert checks["cmake"] == (
        False,
        "error: cmake not found on PATH or in the build environment -- "
        "`python -m pip install cmake`, or `brew install cmake`",
    )
    assert checks["metal"][0] is False and "xcode-select --install" in checks["metal"][1]
    assert "xcodebuild -downloadComponent MetalToolchain" in checks["metal"][1]
    # no source: the variable still counts (doctor checks the disk for the build to come), so its
    # malformed value is reported in the row, not ignored
    assert checks["disk"] == (
        False,
        "error: $TORCH_PATCH_HARNESS_BUILD_FREE_GIB lots: not a number -- "
        "give $TORCH_PATCH_HARNESS_BUILD_FREE_GIB a number of GiB in [0, 1e+09]",
    )
    tight = collections.namedtuple("Usage", "total used free")(1, 1, 100 << 20)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: tight)
    src = _tree(tmp_path / "src")
    disk = dict((i, (ok, d)) for i, ok, d in preflight.toolchain_checks("linux-cpu", src))["disk"]
    assert disk == (
        False,
        "error: $TORCH_PATCH_HARNESS_BUILD_FREE_GIB lots: not a number -- "
        "give $TORCH_PATCH_HARNESS_BUILD_FREE_GIB a number of GiB in [0, 1e+09]",
    )
    monkeypatch.delenv(convention.FREE_GIB_ENV)
    disk = dict((i, (ok, d)) for i, ok, d in preflight.toolchain_checks("linux-cpu", src))["disk"]
    assert disk[0] is False and "only 0.1 GiB free" in disk[1] and "needs about 0.5 GiB" in disk[1]
    for line in (d for _, _, d in preflight.toolchain_checks("macos-arm64", src)):
        assert "\n" not in line


def test_metal_check_names_the_xcode26_download(tmp_path, monkeypatch):
    fake = _fake_bin(tmp_path, {"xcrun": _XCRUN_NO_TOOLCHAIN})
    check = preflight.check_metal(str(fake))
    assert check.ok is False and check.error is None  # it never stops a build
    assert "missing Metal Toolchain" in check.detail
    assert "`xcodebuild -downloadComponent MetalToolchain`" in check.detail


def test_cmake_older_than_the_base_requires_stops_preflight(tmp_path, monkeypatch, pytorch_like):
    fake = _fake_bin(tmp_path, {"c++": "true", "cmake": 'echo "cmake version 3.16.3"'})
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv(convention.FREE_GIB_ENV, "0")
    assert (
        convention.cmake_required(pytorch_like["v2.6.0"]) == "3.18"
        and convention.cmake_required(pytorch_like["main"]) == "3.27"
    )
    plan = plan_mod.plan_build(pytorch_like["v2.6.0"], "macos-arm64", launcher=None, dist_dir=tmp_path / "d")
    with pytest.raises(BuildError) as info:
        preflight.preflight_tools(plan, str(fake))
    assert (
        info.value.cause == f"cmake 3.16.3 ({fake / 'cmake'}) is older than the 3.18 this base requires "
        "(cmake_minimum_required in its CMakeLists.txt)"
    )
    assert info.value.remedy == "`python -m pip install 'cmake>=3.18'`, or `brew upgrade cmake`"
    (fake / "cmake").write_text('#!/bin/sh\necho "cmake version 4.0.3"\n')
    preflight.preflight_tools(plan, str(fake))  # new enough: no error
    detail = preflight.check_cmake("macos-arm64", str(fake), pytorch_like["v2.6.0"]).detail
    assert detail.endswith("4.0.3 (the base requires 3.18); CMake 4: the build sets CMAKE_POLICY_VERSION_MINIMUM=3.5")
    assert preflight.check_cmake("macos-arm64", str(fake), pytorch_like["main"]).detail.endswith(
        "CMake 4: the base handles it"
    )


@pytest.mark.slow
def test_manifest_records_metal_and_can_compile_metal(tmp_path, monkeypatch, isolated_cache):
    """A macos-arm64 build records `xcrun metal --version` and CMake's CAN_COMPILE_METAL in its manifest
    (a stand-in build command copies a prepared wheel: nothing is compiled)."""
    import json
    import sys

    src = _tree(tmp_path / "src")
    (src / "build").mkdir()
    (src / "build" / "CMakeCache.txt").write_text(
        "//Host can compile metal shaders\nCAN_COMPILE_METAL:BOOL=NO\nCAN_COMPILE_METAL_FOUND:INTERNAL=YES\n"
    )
    fake = _fake_bin(tmp_path, {"c++": "true", "cmake": 'echo "cmake version 3.31.6"', "xcrun": _XCRUN_NO_TOOLCHAIN})
    monkeypatch.setenv("PATH", str(fake) + ":" + "/usr/bin:/bin")
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv(convention.FREE_GIB_ENV, "0")
    plan = plan_mod.plan_build(src, "macos-arm64", base_sha=STOCK_SHA, launcher=None, dist_dir=tmp_path / "dist")
    (tmp_path / "ready").mkdir()
    wheel = _fake_torch_wheel(tmp_path / "ready", plan.version, mps_built=True)
    copy = "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])"
    plan = dataclasses.replace(
        plan, requirements=(), command=(sys.executable, "-c", copy, str(wheel), str(plan.dist_dir))
    )
    result = wheel_mod.build_wheel(plan)
    data = json.loads(result.manifest.read_text())
    assert data["can_compile_metal"] == "NO"
    assert data["metal"].startswith("`xcrun metal --version` fails (error: error: cannot execute tool 'metal'")
    assert data["inputs"]["toolchain"]["metal"] == data["metal"]
    assert wheel_mod.cmake_cache_value(src, "CAN_COMPILE_METAL_FOUND") == "YES"
    assert wheel_mod.cmake_cache_value(tmp_path, "CAN_COMPILE_METAL") is None


# ------------------------------------------------------------------ platform registry


@pytest.mark.parametrize(
    "call",
    [
        lambda: platforms.platform_spec("windows-x64"),
        lambda: platforms.platform_env("windows-x64", jobs=2),
        lambda: platforms.compiles_on("aten/src/ATen/native/mps/x.mm", "windows-x64"),
        lambda: preflight.toolchain_checks("windows-x64", None),
    ],
)
def test_unknown_platform_is_one_line_error_naming_the_known_ones(call):
    with pytest.raises(UsageError) as info:
        call()
    assert info.value.cause == "unknown platform 'windows-x64'"
    assert info.value.remedy == "choose one of: macos-arm64, linux-cpu, linux-cuda"


def test_every_registered_platform_gives_a_complete_environment(tmp_path):
    """Each registry entry alone decides its variables, disk estimate and remedies (no default branch)."""
    pytorch = tmp_path / "src"
    (pytorch / "aten").mkdir(parents=True)
    (pytorch / "torch").mkdir()
    for name, spec in platforms.REGISTRY.items():
        env = platforms.platform_env(name, jobs=2, launcher="ccache")
        assert {k: env[k] for k in spec.env} == dict(spec.env)
        assert env["USE_CUDA"] in ("0", "1") and env["USE_ROCM"] in ("0", "1")
        assert {f"CMAKE_{lang}_COMPILER_LAUNCHER" for lang in ("C", "CXX", *spec.languages)} <= set(env)
        assert convention.disk_estimate(pytorch, name) == spec.disk_estimate
        assert set(spec.install) == {"compiler", "cmake", "cmake-upgrade"}
    assert convention.disk_estimate(pytorch, "linux-cuda") == 50 * platforms.GIB


def test_build_env_was_renamed_and_the_old_spelling_says_so(capsys):
    """`build --env` and `compare --env` meant different things under one name."""
    rc = main(["build", "--kind", "stock", "--dry-run", "--platform", "linux-cpu", "--env", "MAX_JOBS=2"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("error: build --env was renamed --build-env") and "--build-env MAX_JOBS=2" in err
    assert main(["build", "--kind", "stock", "--dry-run", "--platform", "linux-cpu", "--build-env", "MAX_JOBS=2"]) == 0
    assert "MAX_JOBS=2" in capsys.readouterr().out.splitlines()


@pytest.mark.slow
def test_debian_pytorch_260_macos_facts(debian_tree):
    """The v2.6 rows of harness.macos against the real v2.6.0 source: MPS needs macOS 13.0 at run time
    (MPSDevice.mm probes a 13.0 MPSGraph API; EmptyTensor.cpp says so), cmake/Metal.cmake probes Metal 3.1
    only, and the tree has no .ci/ (so the v2.6 recipe is chosen by its release, its scripts cited upstream)."""
    from harness import macos

    device = (debian_tree / "aten/src/ATen/mps/MPSDevice.mm").read_text()
    assert "instancesRespondToSelector:@selector(cumulativeSumWithTensor:axis:name:)] == NO" in device
    assert "method introduced in 13.0" in device
    assert (
        '"The MPS backend is supported on MacOS 13.0+."'
        in (debian_tree / "aten/src/ATen/mps/EmptyTensor.cpp").read_text()
    )
    need = macos.mps_runtime_need(convention.base_release(debian_tree))
    assert need.macos == (13, 0) and need.established and "cumulativeSumWithTensor" in need.source
    assert preflight.metal_probes_of(debian_tree) == ("CAN_COMPILE_METAL",)
    assert "-std=metal3.1" in (debian_tree / "cmake/Metal.cmake").read_text()
    assert macos.read_recipe(debian_tree, "v2.6") is None and macos.recipe_for("2.6.0", debian_tree) is macos.V2_6
    host = preflight.check_host_macos("macos-arm64", debian_tree, "v2.6.0", host="13.6")
    assert host.ok and "v2.6.0 needs 13.0: macosx_11_0_arm64 wheels, MPS from macOS 13.0" in host.detail
    old = preflight.check_host_macos("macos-arm64", debian_tree, "v2.6.0", host="12.7.6")
    assert not old.ok and old.detail.startswith("error: v2.6.0's MPS backend needs macOS 13.0 at run time")
