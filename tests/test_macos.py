"""harness.macos: what each base needs of a Mac, upstream's macOS wheel build per base, the Metal toolchain.

In-process and on Linux: the Mac is simulated (``harness.macos.host_macos`` monkeypatched), upstream's
scripts are the derived lines in tests/data/upstream-macos-wheel/ and the sandbox bases of
tests/small_upstream.py, the Metal compiler a fake ``xcrun`` on PATH.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import types
from pathlib import Path

import pytest
import small_upstream as su
from documents import run_of

from harness import details, macos, runner, supervise, workflow
from harness.bench import provenance
from harness.build import convention, preflight
from harness.build import plan as plan_mod
from harness.build import wheel as wheel_mod
from harness.cli import main
from harness.errors import BuildError, UsageError

UPSTREAM = Path(__file__).parent / "data" / "upstream-macos-wheel"


@pytest.fixture(scope="module")
def pytorch_like(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pytorch-like")
    return {flavour: su.make_pytorch_like(root, flavour) for flavour in ("v2.6.0", "main")}


# ------------------------------------------------------------------ per torch version


@pytest.mark.parametrize(
    "version, macos_need, established",
    [
        ("2.6.0", (13, 0), True),
        ("2.6.0a0+git1eba9b3", (13, 0), True),
        ("2.8.0", (13, 0), False),
        ("2.9.1", (14, 0), False),
        ("2.10.0", (14, 0), True),
        ("2.13.0", (14, 0), True),
        ("main", (14, 0), True),
    ],
)
def test_mps_runtime_need_per_torch_version(version, macos_need, established):
    need = macos.mps_runtime_need(version)
    assert (need.macos, need.established) == (macos_need, established)
    assert macos.MPS_OLDEST_MACOS == (13, 0)


# ------------------------------------------------------------------ upstream's wheel build, per base


def test_declarations_match_upstreams_scripts():
    """The derived upstream lines (tests/data/upstream-macos-wheel, commits in its README) read by the
    harness's own parser give exactly the declared flags and command of each base."""
    for name, recipe in macos.RECIPES.items():
        assert macos.recipe_drift(recipe, UPSTREAM / name) == [], name
    env, command = macos.read_recipe(UPSTREAM / "main", "main")
    assert env["MACOSX_DEPLOYMENT_TARGET"] == "14.0" and env["_PYTHON_HOST_PLATFORM"] == "macosx-14.0-arm64"
    assert command == "build"
    env, command = macos.read_recipe(UPSTREAM / "v2.6", "v2.6")
    assert "CMAKE_OSX_ARCHITECTURES" not in env  # only inside `if [[ -n "$CROSS_COMPILE_ARM64" ]]`
    assert (env["MACOSX_DEPLOYMENT_TARGET"], command) == ("10.15", "bdist_wheel")


def test_a_drifted_declaration_or_script_is_named(tmp_path):
    """Planted: a declaration that says USE_QNNPACK=ON, and a script that stopped turning MKLDNN off."""
    wrong = dataclasses.replace(macos.V2_6, env={**macos.V2_6.env, "USE_QNNPACK": "ON"})
    assert macos.recipe_drift(wrong, UPSTREAM / "v2.6") == ["USE_QNNPACK: declared ON, the base's scripts OFF"]
    tree = tmp_path / "main"
    shutil.copytree(UPSTREAM / "main", tree)
    setup = tree / ".ci/wheel/mac/build_env_setup.py"
    setup.write_text(
        setup.read_text().replace('"USE_MKLDNN": "OFF",\n', "").replace('"1",\n}', '"1",\n    "USE_NEW": "1",\n}')
    )
    assert macos.recipe_drift(macos.MAIN, tree) == [
        "USE_MKLDNN: declared OFF, the base's scripts unset",
        "USE_NEW: the base's scripts set 1, not declared",
    ]
    (tree / ".ci/wheel/mac/build_wheel.py").write_text('os.system("python setup.py bdist_wheel")\n')
    assert macos.recipe_drift(macos.MAIN, tree)[-1] == "command: declared build, the base's scripts bdist_wheel"


def test_plan_follows_upstreams_wheel_build_per_base(pytorch_like, tmp_path, monkeypatch):
    """v2.6: `setup.py bdist_wheel` (one build_deps) with its pins; main: `python -m build` with
    requirements-build.txt; both with upstream's flags, recorded in the plan's notes."""
    monkeypatch.setattr(plan_mod, "macos_cross_compiling", lambda: False)
    v26 = plan_mod.plan_build(pytorch_like["v2.6.0"], "macos-arm64", launcher=None, dist_dir=tmp_path / "d")
    head = plan_mod.plan_build(pytorch_like["main"], "macos-arm64", launcher=None, dist_dir=tmp_path / "d")
    assert v26.command[1:] == ("setup.py", "bdist_wheel", "-d", str(tmp_path / "d")) and v26.recipe == "v2.6"
    assert head.command[1:] == ("-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "d"))
    for plan, recipe in ((v26, macos.V2_6), (head, macos.MAIN)):
        assert {k: plan.env[k] for k in recipe.env} == dict(recipe.env)
        assert recipe.pins_for(convention.python_minor())[-1] in plan.requirements
    assert head.requirements[:2] == ("setuptools>=77.0.0,<80.0", "cmake>=3.27")
    assert "setuptools<76" in v26.requirements
    assert not any("disagree" in n or "differ" in n for n in v26.notes + head.notes)
    released = [n for n in v26.notes + head.notes if n.startswith("flags against the released wheel's")]
    assert released == [
        "flags against the released wheel's build settings (torch-2.6.0-cp311-none-macosx_11_0_arm64.whl): "
        "USE_COREML_DELEGATE: this build unset (CMake default OFF), torch 2.6.0's wheel ON; "
        "USE_PYTORCH_METAL_EXPORT: this build unset (CMake default OFF), torch 2.6.0's wheel ON",
        "flags against the released wheel's build settings (torch-2.13.0-cp311-cp311-macosx_14_0_arm64.whl, "
        "nearest release): they agree",
    ]
    linux = plan_mod.plan_build(pytorch_like["main"], "linux-cpu", launcher=None, dist_dir=tmp_path / "d")
    assert linux.recipe is None and "TH_BINARY_BUILD" not in linux.env  # a macOS recipe only


def test_cli_dry_run_macos_arm64_shows_upstreams_env_and_command(pytorch_like, tmp_path, capsys, monkeypatch):
    """Acceptance: `build --dry-run --platform macos-arm64` for v2.6.0 and main prints the environment
    and command of each base's upstream wheel build."""
    monkeypatch.setattr(plan_mod, "macos_cross_compiling", lambda: False)
    out = {}
    for flavour, tree in pytorch_like.items():
        args = ["build", "--kind", "stock", "--dry-run", "--platform", "macos-arm64", "--jobs", "8"]
        assert main([*args, "--source", str(tree), "--dist", str(tmp_path / "dist")]) == 0
        out[flavour] = capsys.readouterr().out.splitlines()
    v26, head = out["v2.6.0"], out["main"]
    for line in ("USE_DISTRIBUTED=1", "USE_MKLDNN=OFF", "USE_QNNPACK=OFF", "TH_BINARY_BUILD=1", "BUILD_TEST=OFF"):
        assert line in v26 and line in head
    assert v26[-1].endswith(f"setup.py bdist_wheel -d {tmp_path / 'dist'}")
    assert head[-1].endswith(f"-m build --wheel --no-isolation --outdir {tmp_path / 'dist'}")
    assert "_PYTHON_HOST_PLATFORM=macosx-14.0-arm64" in head and "MACOSX_DEPLOYMENT_TARGET=14.0" in head
    assert any(line.startswith("# upstream wheel build: v2.6, bdist_wheel (pytorch/pytorch") for line in v26)
    assert any(line.startswith("# host tool: libomp: `brew install libomp`") for line in head)
    # no worktree yet: the declaration of the named base
    assert main([*args, "--base", "main", "--workdir", str(tmp_path / "none")]) == 0
    bare = capsys.readouterr().out.splitlines()
    assert "MACOSX_DEPLOYMENT_TARGET=14.0" in bare and bare[-1].split()[-5:-1] == [
        "build",
        "--wheel",
        "--no-isolation",
        "--outdir",
    ]


def test_a_flag_changed_from_the_released_wheel_is_named(pytorch_like, tmp_path, monkeypatch):
    """Planted: --build-env USE_MKLDNN=ON. The plan and the report say it differs from the released wheel."""
    monkeypatch.setattr(plan_mod, "macos_cross_compiling", lambda: False)
    plan = plan_mod.plan_build(
        pytorch_like["main"], "macos-arm64", launcher=None, dist_dir=tmp_path / "d", env_overrides=["USE_MKLDNN=ON"]
    )
    differ = macos.declared_differ(plan.env, macos.MAIN)
    assert differ == ["USE_MKLDNN=ON (upstream's wheel: OFF)"]
    assert "flags differ from the released wheel's: USE_MKLDNN=ON (upstream's wheel: OFF)" in plan.notes
    builds = {"stock": {"build": {"release_differs": []}}, "patched": {"build": {"release_differs": differ}}}
    assert macos.release_flag_lines(builds)[0] == (
        "> **Build flags differ from the released wheel's** (upstream's macOS wheel build, the PyPI wheel's "
        "build settings): patched: USE_MKLDNN=ON (upstream's wheel: OFF)"
    )
    assert macos.release_flag_lines({"stock": {"build": {"release_differs": []}}, "x": {}}) == []


#: the shape of ``torch.__config__.show()`` (torch 2.6 macOS arm64 wheel): one "Build settings" line
CONFIG_SHOW = (
    "PyTorch built with:\n  - GCC 4.2\n  - C++ Version: 201703\n  - clang 15.0.0\n  - LAPACK is enabled\n"
    "  - Build settings: BLAS_INFO=accelerate, BUILD_TYPE=Release, CXX_COMPILER=/usr/bin/clang++, "
    "TORCH_VERSION=2.6.0, USE_CUDA=OFF, USE_MKLDNN=OFF, USE_MPI=OFF, USE_MPS=ON, USE_NCCL=OFF, "
    "USE_OPENMP=ON, USE_ROCM=OFF, \n"
)


def test_flags_compared_with_a_wheels_config_string():
    """Planted: a build with USE_MKLDNN=ON and USE_OPENMP=0 against a config saying OFF and ON."""
    flags = macos.config_flags(CONFIG_SHOW)
    assert flags["USE_MPS"] == "ON" and flags["BUILD_TYPE"] == "Release" and "CXX_COMPILER" in flags
    env = {"USE_MKLDNN": "ON", "USE_MPS": "1", "USE_OPENMP": "0", "USE_CUDA": "0", "USE_DISTRIBUTED": "1"}
    assert macos.flags_differ(env, CONFIG_SHOW) == [
        "USE_MKLDNN: this build ON, the released wheel OFF",
        "USE_OPENMP: this build 0, the released wheel ON",
    ]
    assert macos.flags_differ({"USE_MPS": "1", "USE_CUDA": "0"}, CONFIG_SHOW) == []
    assert macos.config_flags("no settings here") == {}


RELEASED = Path(__file__).parent / "data" / "released-macos-wheels"


@pytest.mark.parametrize(
    "version, fixture",
    [("2.6.0", "torch-2.6.0-macosx_11_0_arm64.txt"), ("2.13.0", "torch-2.13.0-macosx_14_0_arm64.txt")],
)
def test_released_wheel_table_is_the_fixtures_settings(version, fixture):
    """The table the harness compares with is what the wheel's own build settings say (the fixture,
    read from the PyPI wheel), file name and sha256 included; a table edited apart fails here."""
    text = (RELEASED / fixture).read_text()
    wheel = macos.RELEASED_WHEELS[version]
    assert f"derived from {wheel.wheel} (PyPI), sha256 {wheel.sha256}" in text
    settings = macos.option_settings(macos.build_settings(text))
    assert settings["TORCH_VERSION"] == version
    assert {k: v for k, v in settings.items() if k.startswith("USE_")} == dict(wheel.settings)


def test_v2_6_recipe_against_the_released_2_6_0_wheel(pytorch_like, tmp_path, monkeypatch):
    """The v2.6.0 recipe (the env `build` uses) against torch 2.6.0's wheel: the wheel was built with
    Metal export and the CoreML delegate (-DUSE_PYTORCH_METAL_EXPORT -DUSE_COREML_DELEGATE in its CXX_FLAGS),
    which v2.6's build_wheel.sh does not set; main agrees with 2.13.0's wheel (the nearest release)."""
    monkeypatch.setattr(plan_mod, "macos_cross_compiling", lambda: False)
    v26 = plan_mod.plan_build(pytorch_like["v2.6.0"], "macos-arm64", launcher=None, dist_dir=tmp_path / "d")
    head = plan_mod.plan_build(pytorch_like["main"], "macos-arm64", launcher=None, dist_dir=tmp_path / "d")
    assert macos.recipe_release_differs(v26.env, macos.V2_6) == [
        "USE_COREML_DELEGATE: this build unset (CMake default OFF), torch 2.6.0's wheel ON",
        "USE_PYTORCH_METAL_EXPORT: this build unset (CMake default OFF), torch 2.6.0's wheel ON",
    ]
    assert macos.recipe_release_differs(head.env, macos.MAIN) == []
    assert wheel_mod.macos_record(v26, None)["release_differs"] == macos.recipe_release_differs(v26.env, macos.V2_6)
    assert macos.release_reference(None) is None


def test_a_planted_flag_is_caught_against_the_released_wheel(pytorch_like, tmp_path, monkeypatch):
    """Planted: main built with --build-env USE_MPS=0 USE_XNNPACK=ON: both named against 2.13.0's wheel
    (MPS ON, XNNPACK OFF), in the plan, the manifest and the report's line."""
    monkeypatch.setattr(plan_mod, "macos_cross_compiling", lambda: False)
    plan = plan_mod.plan_build(
        pytorch_like["main"],
        "macos-arm64",
        launcher=None,
        dist_dir=tmp_path / "d",
        env_overrides=["USE_MPS=0", "USE_XNNPACK=ON"],
    )
    differ = [
        "USE_MPS: this build 0, torch 2.13.0's wheel (nearest release) ON",
        "USE_XNNPACK: this build ON, torch 2.13.0's wheel (nearest release) OFF",
    ]
    assert macos.released_differ(plan.env, macos.RELEASED_WHEELS["2.13.0"], nearest=True) == differ
    assert any(n.endswith("nearest release): " + "; ".join(differ)) for n in plan.notes)
    record = wheel_mod.macos_record(plan, None)
    assert record["release_differs"] == differ
    line = macos.release_flag_lines({"patched": {"build": record}})[0]
    assert line.endswith("patched: " + ", ".join(differ))


MACROS_H = """// Useful build settings that are recorded in the compiled binary
// torch.__config__.show()
#define CAFFE2_BUILD_STRINGS { \\
  {"TORCH_VERSION", "2.13.0"}, \\
  {"CXX_FLAGS", R"PYT( -DNDEBUG -DUSE_PYTORCH_QNNPACK -DUSE_PYTORCH_METAL_EXPORT -O2 -DUSE_MPS)PYT"}, \\
  {"BUILD_TYPE", "Release"}, \\
  {"USE_CUDA", "OFF"}, \\
  {"CUDA_VERSION", ""}, \\
  {"USE_MKLDNN", "OFF"}, \\
}
"""


def test_build_settings_of_macros_h_config_and_a_wheel(tmp_path):
    """macros.h (raw-string values, empty values dropped as show() drops them), show()'s line, and a
    wheel archive: its macros.h, or without one ATen/Config.h and libtorch_cpu's three literals."""
    import zipfile

    settings = macros_settings = macos.build_settings(MACROS_H)
    assert settings == {
        "TORCH_VERSION": "2.13.0",
        "CXX_FLAGS": " -DNDEBUG -DUSE_PYTORCH_QNNPACK -DUSE_PYTORCH_METAL_EXPORT -O2 -DUSE_MPS",
        "BUILD_TYPE": "Release",
        "USE_CUDA": "OFF",
        "USE_MKLDNN": "OFF",
    }
    derived = macos.option_settings(settings)
    assert (derived["USE_MPS"], derived["USE_PYTORCH_METAL_EXPORT"], derived["USE_PYTORCH_METAL"]) == (
        "ON",
        "ON",
        "OFF",
    )
    assert derived["USE_XNNPACK"] == "OFF" and derived["USE_CUDA"] == "OFF"
    assert macos.build_settings(CONFIG_SHOW)["USE_MPS"] == "ON" and macos.build_settings("nothing") == {}
    with zipfile.ZipFile(tmp_path / "new.whl", "w") as z:
        z.writestr("torch/include/caffe2/core/macros.h", MACROS_H)
    assert macos.wheel_build_settings(tmp_path / "new.whl") == macros_settings
    lib = b"\0junk\0TORCH_VERSION\0002.6.0\0CXX_COMPILER\0/usr/bin/c++\0 -DUSE_XNNPACK -DUSE_MPS\0BUILD_TYPE\0"
    with zipfile.ZipFile(tmp_path / "old.whl", "w") as z:
        z.writestr("torch/include/ATen/Config.h", "#define AT_MKLDNN_ENABLED() 0\n#define AT_PARALLEL_OPENMP 1\n")
        z.writestr("torch/lib/libtorch_cpu.dylib", lib)
    old = macos.wheel_build_settings(tmp_path / "old.whl")
    assert old == {
        "USE_MKLDNN": "OFF",
        "USE_OPENMP": "ON",
        "TORCH_VERSION": "2.6.0",
        "CXX_COMPILER": "/usr/bin/c++",
        "CXX_FLAGS": " -DUSE_XNNPACK -DUSE_MPS",
    }
    assert macos.option_settings(old)["USE_XNNPACK"] == "ON"


# ------------------------------------------------------------------ the host


def test_a_macos_13_host_is_refused_before_any_build_of_main(pytorch_like, tmp_path, monkeypatch, capsys):
    """Acceptance: a simulated macOS 13.6 Mac: `build` of main stops in one line naming the macOS main
    needs, before a checkout, a build venv or a compile; v2.6.0 goes on."""
    monkeypatch.setattr(macos, "host_macos", lambda: "13.6")
    monkeypatch.setattr(plan_mod, "macos_cross_compiling", lambda: False)

    def no_build(*_a, **_k):
        raise AssertionError("a build step ran")

    for module, step in ((wheel_mod, "ensure_build_venv"), (workflow, "build_wheel"), (workflow, "resolve_sources")):
        monkeypatch.setattr(module, step, no_build)
    args = ["build", "--kind", "stock", "--platform", "macos-arm64", "--dist", str(tmp_path / "dist")]
    assert main([*args, "--source", str(pytorch_like["main"]), "--base", "main"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "error: main builds macosx_14_0_arm64 wheels (MACOSX_DEPLOYMENT_TARGET=14.0 in "
        ".ci/wheel/mac/build_env_setup.py:11); this Mac runs macOS 13.6 -- update this Mac to macOS 14.0"
    )
    assert "build --base v2.6.0 (its MPS runs from macOS 13.0)" in err[0]
    assert not (tmp_path / "dist").exists()
    with pytest.raises(BuildError, match="main builds macosx_14_0_arm64 wheels"):  # no worktree yet: the table
        preflight.refuse_host("macos-arm64", None, "main")
    preflight.refuse_host("macos-arm64", pytorch_like["v2.6.0"], "v2.6.0")  # 13.6 runs v2.6.0: no error
    monkeypatch.setattr(macos, "host_macos", lambda: "14.0")
    preflight.refuse_host("macos-arm64", pytorch_like["main"], "main")
    monkeypatch.setattr(macos, "host_macos", lambda: None)  # not a Mac: only --dry-run describes a macOS build
    assert preflight.check_host_macos("macos-arm64", pytorch_like["main"]) is None


def test_doctor_row_says_the_macos_main_needs(monkeypatch, tmp_path):
    """doctor's toolchain rows on a simulated macOS 13.6 Mac: one row, failed, with the macOS main needs."""
    monkeypatch.setattr(macos, "host_macos", lambda: "13.6")
    monkeypatch.setenv("PATH", str(tmp_path))
    rows = {item: (ok, detail) for item, ok, detail in preflight.toolchain_checks("macos-arm64", None)}
    ok, detail = rows["macOS"]
    assert not ok and "main builds macosx_14_0_arm64 wheels" in detail and "this Mac runs macOS 13.6" in detail
    monkeypatch.setattr(macos, "host_macos", lambda: "15.2")
    ok, detail = {i: (o, d) for i, o, d in preflight.toolchain_checks("macos-arm64", None)}["macOS"]
    assert ok and detail == "macOS 15.2; main needs 14.0: macosx_14_0_arm64 wheels, MPS from macOS 14.0"
    assert "macOS" not in {i for i, _, _ in preflight.toolchain_checks("linux-cpu", None)}


# ------------------------------------------------------------------ Metal 3 / 4


def _fake_xcrun(tmp_path: Path, metal4: bool) -> Path:
    bin_dir = tmp_path / ("bin4" if metal4 else "bin3")
    bin_dir.mkdir()
    log = bin_dir / "args.log"
    fail4 = "" if metal4 else 'case "$*" in *-std=metal4.0*) echo "unknown standard" >&2; exit 1;; esac\n'
    (bin_dir / "xcrun").write_text(f'#!/bin/sh\necho "$@" >> {log}\n{fail4}exit 0\n')
    (bin_dir / "xcrun").chmod(0o755)
    return bin_dir


def test_metal_capability_probes_as_cmake_does(tmp_path, pytorch_like):
    """`xcrun metal -std=metal3.1` then `-std=metal4.0` on cmake/Metal.cmake's probe shaders (argument
    lists); an Xcode without Metal 4 gives CAN_COMPILE_METAL_40 NO; the base decides which it probes."""
    old = _fake_xcrun(tmp_path, metal4=False)
    cap = preflight.metal_capability(str(old))
    assert (cap["CAN_COMPILE_METAL"], cap["CAN_COMPILE_METAL_40"]) == ("YES", "NO")
    calls = (old / "args.log").read_text().splitlines()
    assert calls[0].startswith("metal -std=metal3.1 -c ") and calls[1].startswith("metal -std=metal4.0 -c ")
    assert calls[0].endswith("-o /dev/null")
    assert macos.metal_text(cap) == "Metal 3.1 YES, Metal 4.0 NO"
    assert preflight.metal_capability(str(_fake_xcrun(tmp_path, metal4=True)))["CAN_COMPILE_METAL_40"] == "YES"
    assert preflight.metal_capability(str(tmp_path / "nowhere"))["CAN_COMPILE_METAL"] == "NO"
    assert preflight.metal_probes_of(pytorch_like["v2.6.0"]) == ("CAN_COMPILE_METAL",)
    assert preflight.metal_probes_of(pytorch_like["main"]) == ("CAN_COMPILE_METAL", "CAN_COMPILE_METAL_40")
    src = tmp_path / "src"
    (src / "build").mkdir(parents=True)
    (src / "build" / "CMakeCache.txt").write_text("CAN_COMPILE_METAL:BOOL=YES\nCAN_COMPILE_METAL_40:BOOL=NO\n")
    built = wheel_mod.built_metal_capability(src, cap)  # what CMake decided wins over the probe
    assert built == {
        "CAN_COMPILE_METAL": "YES",
        "CAN_COMPILE_METAL_40": "NO",
        "how": "CMakeCache.txt (cmake/Metal.cmake)",
    }


def _manifest(dist: Path, name: str, kind: str, capability: dict, base_sha: str = "a" * 40) -> None:
    data = {"inputs": {"kind": kind, "base_sha": base_sha, "platform": "macos-arm64"}, "metal_capability": capability}
    (dist / f"{name}.whl.build.json").write_text(json.dumps(data))


def test_a_pair_with_different_metal_capability_is_refused(tmp_path, monkeypatch):
    """Planted: stock built where Metal 4.0 did not compile, patched where it does. The patched build is
    refused before it starts, and `compare` refuses the pair before any measurement."""
    three = {"CAN_COMPILE_METAL": "YES", "CAN_COMPILE_METAL_40": "NO"}
    four = {"CAN_COMPILE_METAL": "YES", "CAN_COMPILE_METAL_40": "YES"}
    line = macos.metal_mismatch({"metal_capability": three}, {"metal_capability": four})
    assert line.startswith("the stock and patched builds differ in Metal capability (CAN_COMPILE_METAL_40: stock NO")
    assert macos.metal_mismatch({"metal_capability": four}, {"metal_capability": four}) is None
    assert macos.metal_mismatch({"metal_capability": three}, None) is None
    dist = tmp_path / "dist"
    dist.mkdir()
    _manifest(dist, "stock", "stock", three)
    _manifest(dist, "other", "stock", four, base_sha="b" * 40)  # another base: not its pair
    plan = types.SimpleNamespace(base_sha="a" * 40, platform="macos-arm64")
    with pytest.raises(BuildError, match="CAN_COMPILE_METAL_40: stock NO, patched YES"):
        wheel_mod.refuse_metal_pair(dist, plan, four)
    wheel_mod.refuse_metal_pair(dist, plan, three)

    manifests = {"stock": {"metal_capability": three}, "patched": {"metal_capability": four}}
    monkeypatch.setattr(runner, "ensure_interpreter", lambda build: (Path(f"/py/{build.name}"), True))
    monkeypatch.setattr(supervise, "probe_build", lambda *a, **k: {"dtype_support": {}})
    monkeypatch.setattr(runner, "build_manifest", lambda build: manifests[build.name])
    evidence = types.SimpleNamespace(profiles=lambda device: (), markers=(), bases=())
    run_plan = types.SimpleNamespace(
        builds={n: types.SimpleNamespace(name=n, to_json=lambda n=n: n) for n in ("stock", "patched")},
        device="cpu",
        evidence=evidence,
        keep_env=(),
        extra_env={},
    )
    with pytest.raises(UsageError, match="differ in Metal capability"):
        runner.probe_builds(run_plan)


def test_report_and_probe_say_the_macos_and_metal_of_each_build():
    """The report's build-manifest table has a Metal row; the probe's "not available" line names the
    macOS of that torch version (2.6: 13.0, read; 2.9: 14.0, assumed)."""
    cap = {"CAN_COMPILE_METAL": "YES", "CAN_COMPILE_METAL_40": "NO"}
    common = {"base_sha": "a" * 40, "compiler": "Apple clang 16", "cmake": "cmake 3.31", "version": "2.6.0"}
    data = {
        "run": {"builds": ["stock", "patched"]},
        "builds": {
            "stock": {"build": {**common, "metal_capability": cap}},
            "patched": {"build": {**common, "metal_capability": {**cap, "CAN_COMPILE_METAL_40": "YES"}}},
        },
    }
    rows = details.build_rows(run_of(data))
    assert "| Metal toolchain | Metal 3.1 YES, Metal 4.0 NO | Metal 3.1 YES, Metal 4.0 YES |" in rows
    assert provenance.mps_need_text("2.6.0").startswith("13.0 (aten/src/ATen/mps/MPSDevice.mm of v2.6.0")
    assert provenance.mps_need_text("2.9.0") == "14.0 (assumed from 2.10 (2.9's MPSDevice.mm was not read))"
