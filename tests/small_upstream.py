"""Generate a small upstream git repository and a patch series for it (build tests and benchmarks).

The upstream, ``tinyext``, is a Python package with a C++ extension built through CMake
(several translation units, a wheel via ``pip wheel``), with a ``version.txt``. Its build
honours the same environment contract as PyTorch's, so the harness exercises the same paths:

- version: ``PYTORCH_BUILD_VERSION`` / ``PYTORCH_BUILD_NUMBER`` (as ``tools/generate_torch_version.py``),
  else ``version.txt`` — written to ``tinyext/version.py``;
- ``MAX_JOBS`` caps the compile jobs; ``CMAKE_BUILD_TYPE`` picks the build type;
- every ``CMAKE_*`` variable is passed to CMake as ``-D`` (so ``CMAKE_<LANG>_COMPILER_LAUNCHER`` works);
- the CMake build directory lives in-tree (``build/cmake-<type>``), so a rebuild is incremental.

The series ``tiny-fast-path`` adds the env var ``TINYEXT_PREFER_FAST_PATH`` in ONE translation
unit (``src/config.cpp``) — the marker string the patched library must contain.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SERIES_NAME = "tiny-fast-path"
MARKER = "TINYEXT_PREFER_FAST_PATH"
PATCHED_FILE = "src/config.cpp"
#: translation units of the extension (the full build compiles all of them)
UNITS = ("module.cpp", "add.cpp", "mul.cpp", "dot.cpp", "norm.cpp", "scale.cpp", "config.cpp")
VERSION = "1.4.0a0"

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "tinyext"
dynamic = ["version"]
requires-python = ">=3.9"
"""

_SETUP = r'''
"""tinyext: a small C++ extension built through CMake, with PyTorch's build environment contract."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def get_version():
    # same rule as PyTorch's tools/generate_torch_version.py
    version = (ROOT / "version.txt").read_text().strip()
    if os.getenv("PYTORCH_BUILD_VERSION"):
        assert os.getenv("PYTORCH_BUILD_NUMBER") is not None
        build_number = int(os.getenv("PYTORCH_BUILD_NUMBER", ""))
        version = os.getenv("PYTORCH_BUILD_VERSION", "")
        if build_number > 1:
            version += ".post" + str(build_number)
    return version


VERSION = get_version()
(ROOT / "tinyext" / "version.py").write_text(f"__version__ = {VERSION!r}\n")


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_type = os.environ.get("CMAKE_BUILD_TYPE", "Release")
        build_dir = ROOT / "build" / f"cmake-{build_type}"
        defines = {
            "CMAKE_BUILD_TYPE": build_type,
            "Python3_EXECUTABLE": sys.executable,
            "TINYEXT_SUFFIX": sysconfig.get_config_var("EXT_SUFFIX"),
        }
        # like PyTorch's tools/setup_helpers/cmake.py: pass CMAKE_* variables through
        defines.update({k: v for k, v in os.environ.items() if k.startswith("CMAKE_") and k != "CMAKE_GENERATOR"})
        if not (build_dir / "CMakeCache.txt").exists():
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            cmd = ["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator]
            cmd += [f"-D{k}={v}" for k, v in sorted(defines.items())]
            print("+", " ".join(cmd), flush=True)
            subprocess.check_call(cmd)
        jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
        cmd = ["cmake", "--build", str(build_dir), "--parallel", jobs]
        print("+", " ".join(cmd), flush=True)
        subprocess.check_call(cmd)
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / ("_tiny" + sysconfig.get_config_var("EXT_SUFFIX")), target)


setup(
    version=VERSION,
    packages=["tinyext"],
    ext_modules=[Extension("tinyext._tiny", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
'''

_CMAKE = """\
cmake_minimum_required(VERSION 3.18)
project(tinyext CXX)
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
add_library(_tiny MODULE {sources})
target_include_directories(_tiny PRIVATE src)
target_link_libraries(_tiny PRIVATE Python3::Module)
set_target_properties(_tiny PROPERTIES PREFIX "" SUFFIX "${{TINYEXT_SUFFIX}}" CXX_VISIBILITY_PRESET hidden)
"""

_HEADER = """\
#pragma once
double tiny_add(double a, double b);
double tiny_mul(double a, double b);
double tiny_dot(const double* a, const double* b, int n);
double tiny_norm(const double* a, int n);
double tiny_scale(double a, double s);
int tiny_prefer_fast_path();
"""

_UNITS_SRC = {
    "add.cpp": '#include "tiny.h"\ndouble tiny_add(double a, double b) { return a + b; }\n',
    "mul.cpp": '#include "tiny.h"\ndouble tiny_mul(double a, double b) { return a * b; }\n',
    "dot.cpp": '#include "tiny.h"\ndouble tiny_dot(const double* a, const double* b, int n) {\n'
    "  double s = 0; for (int i = 0; i < n; ++i) s += a[i] * b[i]; return s;\n}\n",
    "norm.cpp": '#include <cmath>\n#include "tiny.h"\n'
    "double tiny_norm(const double* a, int n) { return std::sqrt(tiny_dot(a, a, n)); }\n",
    "scale.cpp": '#include "tiny.h"\ndouble tiny_scale(double a, double s) { return tiny_mul(a, s); }\n',
    "config.cpp": '#include "tiny.h"\n// Build-time and run-time switches.\n'
    "int tiny_prefer_fast_path() { return 0; }\n",
    "module.cpp": """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "tiny.h"

static PyObject* py_add(PyObject*, PyObject* args) {
  double a, b;
  if (!PyArg_ParseTuple(args, "dd", &a, &b)) return nullptr;
  return PyFloat_FromDouble(tiny_add(a, b));
}
static PyObject* py_norm2(PyObject*, PyObject* args) {
  double v[2];
  if (!PyArg_ParseTuple(args, "dd", &v[0], &v[1])) return nullptr;
  return PyFloat_FromDouble(tiny_norm(v, 2));
}
static PyObject* py_prefer_fast_path(PyObject*, PyObject*) { return PyBool_FromLong(tiny_prefer_fast_path()); }

static PyMethodDef methods[] = {
  {"add", py_add, METH_VARARGS, "a + b"},
  {"norm2", py_norm2, METH_VARARGS, "sqrt(a*a + b*b)"},
  {"prefer_fast_path", py_prefer_fast_path, METH_NOARGS, "the fast-path switch"},
  {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tiny", nullptr, -1, methods};
PyMODINIT_FUNC PyInit__tiny(void) { return PyModule_Create(&module); }
""",
}

_PATCHED_CONFIG = """\
#include <cstdlib>
#include <cstring>
#include "tiny.h"
// Build-time and run-time switches.
int tiny_prefer_fast_path() {
  const char* value = std::getenv("TINYEXT_PREFER_FAST_PATH");
  return value != nullptr && std::strcmp(value, "1") == 0;
}
"""

_INIT = "from tinyext._tiny import add, norm2, prefer_fast_path\nfrom tinyext.version import __version__\n"


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "tiny",
        "GIT_AUTHOR_EMAIL": "tiny@example.invalid",
        "GIT_COMMITTER_NAME": "tiny",
        "GIT_COMMITTER_EMAIL": "tiny@example.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
        "PATH": __import__("os").environ["PATH"],
        "HOME": str(repo),
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


#: where ``make_upstream(..., submodule=True)`` puts its submodule, and the one nested in that submodule
SUBMODULE = "third_party/tinylib"
NESTED = "vendor/nested"


def _submodule_sources(root: Path) -> Path:
    """Two repositories beside the upstream, as PyTorch's ``third_party/`` has them: ``tinylib`` (one
    commit) holding ``tinylib-nested`` as its own submodule at :data:`NESTED` (recursion). Their URLs are
    ``file://`` URLs, which git treats as remotes (a plain path it clones itself). Returns tinylib."""
    nested = Path(root) / "tinylib-nested"
    nested.mkdir(parents=True)
    (nested / "nested.h").write_text("#define TINY_NESTED 1\n")
    _git(nested, "init", "-q", "-b", "main")
    _git(nested, "add", "-A")
    _git(nested, "commit", "-q", "-m", "nested 0.1")
    lib = Path(root) / "tinylib"
    lib.mkdir()
    (lib / "tinylib.h").write_text("#define TINYLIB 1\n")
    _git(lib, "init", "-q", "-b", "main")
    _git(lib, "-c", "protocol.file.allow=always", "submodule", "-q", "add", nested.as_uri(), NESTED)
    _git(lib, "add", "-A")
    _git(lib, "commit", "-q", "-m", "tinylib 0.1 with its nested submodule")
    return lib


def make_upstream(root: Path, *, submodule: bool = False) -> Path:
    """Write the ``tinyext`` repository under ``root/tinyext`` with one commit tagged ``v1.4.0``; return it.

    With ``submodule`` that commit also holds :data:`SUBMODULE`, a git submodule (local path URL) that has
    a submodule of its own (:func:`_submodule_sources`): the recursive case of PyTorch's ``third_party/``.
    """
    repo = Path(root) / "tinyext"
    (repo / "src").mkdir(parents=True)
    (repo / "tinyext").mkdir()
    (repo / "pyproject.toml").write_text(_PYPROJECT)
    (repo / "setup.py").write_text(_SETUP)
    (repo / "version.txt").write_text(VERSION + "\n")
    (repo / "CMakeLists.txt").write_text(_CMAKE.format(sources=" ".join(f"src/{u}" for u in UNITS)))
    (repo / "src" / "tiny.h").write_text(_HEADER)
    for name, text in _UNITS_SRC.items():
        (repo / "src" / name).write_text(text)
    (repo / "tinyext" / "__init__.py").write_text(_INIT)
    (repo / ".gitignore").write_text("build/\n*.egg-info/\ntinyext/version.py\ntinyext/*.so\n")
    _git(repo, "init", "-q", "-b", "main")
    if submodule:
        lib = _submodule_sources(root)
        _git(repo, "-c", "protocol.file.allow=always", "submodule", "-q", "add", lib.as_uri(), SUBMODULE)
        _git(repo, "-c", "protocol.file.allow=always", "submodule", "-q", "update", "--init", "--recursive")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "tinyext 1.4.0a0")
    _git(repo, "tag", "v1.4.0")
    return repo


def make_series(repo: Path, patches_root: Path) -> Path:
    """Write ``patches_root/tiny-fast-path/`` (series.toml + one format-patch for base v1.4.0); return it.

    The patch is authored on a throw-away branch of ``repo`` and exported with ``git format-patch``.
    """
    series_dir = Path(patches_root) / SERIES_NAME
    base_dir = series_dir / "v1.4.0"
    base_dir.mkdir(parents=True)
    _git(repo, "checkout", "-q", "-b", "fast-path", "v1.4.0")
    (repo / PATCHED_FILE).write_text(_PATCHED_CONFIG)
    _git(
        repo, "commit", "-q", "-am", f"config: {MARKER}=1 prefers the fast path\n\nWhy: lets users opt in at run time."
    )
    out = _git(repo, "format-patch", "-1", "-o", str(base_dir), "HEAD")
    patch = Path(out.strip().splitlines()[-1])
    _git(repo, "checkout", "-q", "main")
    _git(repo, "branch", "-q", "-D", "fast-path")
    commit = _git(repo, "rev-parse", "v1.4.0^{commit}").strip()
    (series_dir / "series.toml").write_text(
        f'name = "{SERIES_NAME}"\n'
        f'title = "tinyext: {MARKER} prefers the fast path"\n'
        f'upstream = "{repo.as_posix()}"\n'
        f'env = ["{MARKER}"]\n\n'
        f'[[base]]\nref = "v1.4.0"\ncommit = "{commit}"\ndir = "v1.4.0"\n'
        f'patches = ["{patch.name}"]\nfiles = ["{PATCHED_FILE}"]\n'
    )
    return series_dir


def worktree(repo: Path, path: Path, ref: str = "v1.4.0") -> Path:
    """A detached ``git worktree`` of ``repo`` at ``ref`` (what harness.upstream makes for ``stock``)."""
    _git(repo, "worktree", "add", "-q", "--detach", str(path), ref)
    return Path(path)


def apply_series(tree: Path, patches: list[Path]) -> None:
    """``git am`` the series onto a worktree (what harness.series does for ``patched``)."""
    _git(tree, "am", "-q", *[str(p) for p in patches])


# ------------------------------------------------------------------ PyTorch-shaped sandbox bases
#
# Only the files that decide a macOS build plan, shaped like upstream's (no code to compile):
# ``v2.6.0``: CMakeLists.txt with ``cmake_minimum_required(VERSION 3.18 FATAL_ERROR)`` and no
# CMAKE_POLICY_VERSION_MINIMUM anywhere, ``.ci/wheel/build_wheel.sh`` exporting
# ``MACOSX_DEPLOYMENT_TARGET=10.15`` (as the Debian v2.6.0 source and upstream's script at that time);
# ``main``: the macOS wheel build in ``.ci/wheel/mac/`` whose ``build_env_setup.py`` keeps its build
# flags in a dict with ``"MACOSX_DEPLOYMENT_TARGET": "14.0"`` (pytorch/pytorch 29832279), and CMake files
# that set CMAKE_POLICY_VERSION_MINIMUM around old submodules (PR 150203).

_PT_PYPROJECT = """\
[build-system]
requires = ["setuptools", "wheel", "ninja", "pyyaml", "cmake", "typing-extensions>=4.10.0"]
build-backend = "setuptools.build_meta:__legacy__"
"""
_PT_SETUP = """\
import os

# as tools/generate_torch_version.py: the version comes from PYTORCH_BUILD_VERSION when set
version = os.getenv("PYTORCH_BUILD_VERSION") or open("version.txt").read().strip()
"""
_PT_CMAKE_260 = """\
cmake_minimum_required(VERSION 3.18 FATAL_ERROR)
project(Torch CXX C)
include(cmake/Dependencies.cmake)
"""
_PT_DEPS_260 = """\
# ---[ protobuf (its own CMakeLists.txt declares a policy version below 3.5)
add_subdirectory(third_party/protobuf/cmake)
"""
_PT_DEPS_MAIN = """\
# ---[ protobuf
# -- [ CMake-4 compat mode
set(CMAKE_POLICY_VERSION_MINIMUM 3.5)
add_subdirectory(third_party/protobuf/cmake)
unset(CMAKE_POLICY_VERSION_MINIMUM)
"""
#: upstream's macOS wheel scripts as the harness's drift test reads them (tests/data/upstream-macos-wheel:
#: the lines derived from each base's own script), inside a runnable script where upstream has one
_WHEEL_DATA = Path(__file__).resolve().parent / "data" / "upstream-macos-wheel"
_PT_WHEEL_SH_260 = "#!/usr/bin/env bash\n" + (_WHEEL_DATA / "v2.6" / ".ci" / "wheel" / "build_wheel.sh").read_text()
_PT_MAC_ENV_SETUP = (
    '''\
#!/usr/bin/env python3
"""macOS arm64 build environment: writes the build flags for build.sh to source."""

import argparse
from pathlib import Path

'''
    + (_WHEEL_DATA / "main" / ".ci" / "wheel" / "mac" / "build_env_setup.py").read_text()
    + """

def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env-out", type=Path)
    out = parser.parse_args().env_out
    if out is not None:
        out.write_text("".join(f"export {k}={v}\\n" for k, v in MACOS_BUILD_ENV.items()))


if __name__ == "__main__":
    main()
"""
)
_PT_MAC_BUILD_WHEEL = '''\
#!/usr/bin/env python3
"""Build the macOS arm64 wheel: the flags come from the environment (build_env_setup.py)."""
import os
import subprocess
import sys

MACOS_PLATFORM = "macosx-14.0-arm64"

env = dict(os.environ)
env.setdefault("_PYTHON_HOST_PLATFORM", MACOS_PLATFORM)
env.setdefault("ARCHFLAGS", "-arch arm64")
subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", "dist"], check=True, env=env)
'''
#: cmake/Metal.cmake's probe lines (v2.6.0: Metal 3.1 only; main also Metal 4.0, pytorch/pytorch 001f694a)
_PT_METAL_260 = "execute_process(COMMAND xcrun metal -std=metal3.1 bfloat_inc.metal)\nset(CAN_COMPILE_METAL YES)\n"
_PT_METAL_MAIN = _PT_METAL_260 + (
    "execute_process(COMMAND xcrun metal -std=metal4.0 -c lambda_test.metal -o /dev/null)\n"
    "set(CAN_COMPILE_METAL_40 YES)\n"
)


def make_pytorch_like(root: Path, flavour: str) -> Path:
    """A git repository ``root/pytorch-<flavour>`` (one commit) holding the build-plan files of PyTorch
    ``v2.6.0`` or ``main`` (see above); return it."""
    if flavour not in ("v2.6.0", "main"):
        raise ValueError(f"unknown flavour {flavour!r}")
    repo = Path(root) / f"pytorch-{flavour}"
    (repo / "cmake").mkdir(parents=True)
    (repo / "version.txt").write_text("2.6.0a0\n" if flavour == "v2.6.0" else "2.10.0a0\n")
    (repo / "pyproject.toml").write_text(_PT_PYPROJECT)
    (repo / "setup.py").write_text(_PT_SETUP)
    (repo / "requirements.txt").write_text("numpy\ncmake\n")
    if flavour == "v2.6.0":
        (repo / "CMakeLists.txt").write_text(_PT_CMAKE_260)
        (repo / "cmake" / "Dependencies.cmake").write_text(_PT_DEPS_260)
        (repo / ".ci" / "wheel").mkdir(parents=True)
        (repo / ".ci" / "wheel" / "build_wheel.sh").write_text(_PT_WHEEL_SH_260)
        (repo / "cmake" / "Metal.cmake").write_text(_PT_METAL_260)
    else:
        (repo / "CMakeLists.txt").write_text(_PT_CMAKE_260.replace("3.18", "3.27"))
        (repo / "cmake" / "Dependencies.cmake").write_text(_PT_DEPS_MAIN)
        (repo / ".ci" / "wheel" / "mac").mkdir(parents=True)
        (repo / ".ci" / "wheel" / "mac" / "build_env_setup.py").write_text(_PT_MAC_ENV_SETUP)
        (repo / ".ci" / "wheel" / "mac" / "build_wheel.py").write_text(_PT_MAC_BUILD_WHEEL)
        (repo / "cmake" / "Metal.cmake").write_text(_PT_METAL_MAIN)
        (repo / "requirements-build.txt").write_text("setuptools>=77.0.0,<80.0\ncmake>=3.27\nninja\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", f"pytorch-like {flavour}")
    return repo


# ------------------------------------------------------------------ a second series with its own [evidence]
EVIDENCE_SERIES = "tiny-fast-path-evidence"
#: the upstream test the second series adds: it fails on a build whose library ignores the variable
_FAST_PATH_TEST = """\
import os

import tinyext


def test_prefer_fast_path_follows_the_variable():
    assert tinyext.prefer_fast_path() is (os.environ.get("TINYEXT_PREFER_FAST_PATH") == "1")
"""
_EVIDENCE = """
[evidence]
markers = ["{marker}"]

[evidence.cpu]
configs = ["default", "no_vec"]

[[evidence.contrast]]
name = "no regression in GEMM"
a = "patched/default"
b = "stock/default"
ops = ["mm"]
claim = "unchanged"

[[evidence.contrast]]
a = "stock/default"
b = "stock/no_vec"
ops = ["sdpa"]

[[evidence.test]]
name = "the fast path follows the variable"
file = "test/test_fast_path.py"
env = {{ {marker} = "1" }}
expect = {{ stock = "fail", patched = "pass" }}
fails_with = 'AssertionError: assert False is ('
"""


def make_evidence_series(repo: Path, patches_root: Path) -> Path:
    """Write ``patches_root/tiny-fast-path-evidence/``: the variable of :func:`make_series` plus an upstream
    test (``test/test_fast_path.py``) in one format-patch for v1.4.0, and ``[evidence]`` declaring its
    contrasts and that test (fail on stock, pass on patched); return the series folder."""
    series_dir = Path(patches_root) / EVIDENCE_SERIES
    base_dir = series_dir / "v1.4.0"
    base_dir.mkdir(parents=True)
    _git(repo, "checkout", "-q", "-b", "fast-path-evidence", "v1.4.0")
    (repo / PATCHED_FILE).write_text(_PATCHED_CONFIG)
    (repo / "test").mkdir(exist_ok=True)
    (repo / "test" / "test_fast_path.py").write_text(_FAST_PATH_TEST)
    _git(repo, "add", "-A")
    _git(
        repo, "commit", "-q", "-m", f"config: {MARKER}=1 prefers the fast path, with a test\n\nWhy: opt in at run time."
    )
    out = _git(repo, "format-patch", "-1", "-o", str(base_dir), "HEAD")
    patch = Path(out.strip().splitlines()[-1])
    _git(repo, "checkout", "-q", "main")
    _git(repo, "branch", "-q", "-D", "fast-path-evidence")
    (series_dir / "series.toml").write_text(
        f'name = "{EVIDENCE_SERIES}"\ntitle = "tinyext: {MARKER} with a test"\nupstream = "{repo.as_posix()}"\n'
        f'env = ["{MARKER}"]\n\n[[base]]\nref = "v1.4.0"\ndir = "v1.4.0"\npatches = ["{patch.name}"]\n'
        f'files = ["{PATCHED_FILE}", "test/test_fast_path.py"]\n' + _EVIDENCE.format(marker=MARKER)
    )
    return series_dir
