"""What each PyTorch base needs of a Mac, and how upstream builds its macOS arm64 wheel: one table.

Every fact here was read in upstream PyTorch (pytorch/pytorch) at the file and commit named beside
it, or in the file names PyPI serves; nothing here can be measured on this project's CI (no Mac).
The harness reads it in one place: :func:`mps_runtime_need` (doctor; the probe and the MPS device profile
read :mod:`harness.bench.mpsruntime` itself),
:func:`host_need` (``build`` and ``doctor`` refuse a Mac older than the base needs) and
:func:`recipe_for` (the environment and command of a macOS wheel build, :mod:`harness.build`).

macOS the MPS backend needs at run time, per torch version: :mod:`harness.bench.mpsruntime` (it runs
inside build interpreters too).

The arm64 wheels on PyPI (``torch-X-cp312-…-<tag>.whl``) are tagged ``macosx_11_0_arm64`` for
2.6.0 to 2.11.0 and ``macosx_14_0_arm64`` for 2.12.0 and 2.13.0; pip refuses a wheel whose tag is
newer than the running macOS.
"""

from __future__ import annotations

import platform as _platform
import re
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.bench.mpsruntime import MPS_OLDEST_MACOS as MPS_OLDEST_MACOS  # read here by harness.build
from harness.bench.mpsruntime import RuntimeNeed, mps_runtime_need, release_of


def _text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def parse_macos(text: str | None) -> tuple[int, int] | None:
    """``"13.6.1"`` -> ``(13, 6)``; ``"14"`` -> ``(14, 0)``; None for None or no version."""
    match = re.match(r"\s*(\d+)(?:\.(\d+))?", text or "")
    return (int(match[1]), int(match[2] or 0)) if match else None


# ------------------------------------------------------------------ upstream's macOS wheel build, per base


@dataclass(frozen=True)
class WheelRecipe:
    """How upstream builds the macOS arm64 wheel of a base, as read in the base's own scripts.

    Attributes:
        name: the base it was read for (``v2.6``, ``main``).
        releases: torch releases (major, minor) it applies to; ``script`` decides for the others.
        script: the base's file that sets the flags (relative path); its presence selects the recipe.
        citation: file(s) and commit read, one line.
        env: the build variables the scripts set (upstream's spelling: ``OFF``, ``1``).
        command: ``bdist_wheel`` (``python setup.py bdist_wheel -d <dist>``, one build_deps) or
            ``build`` (``python -m build --wheel --no-isolation --outdir <dist>``).
        requirement_files: the base's requirement files the scripts install (in order).
        pins: requirements the scripts install beyond those files, by Python ``major.minor`` (``*``: all).
        host_tools: what the scripts install on the host besides Python packages (one line each).
        wheel_tag: the tag of upstream's released wheel of this base.
        metal: the CMake cache entries of ``cmake/Metal.cmake`` and the ``-std`` each probes.
    """

    name: str
    releases: tuple[tuple[int, int], ...]
    script: str
    citation: str
    env: Mapping[str, str]
    command: str
    requirement_files: tuple[str, ...]
    pins: Mapping[str, tuple[str, ...]]
    host_tools: tuple[str, ...]
    wheel_tag: str
    metal: Mapping[str, str] = field(default_factory=dict)

    def pins_for(self, python: str) -> tuple[str, ...] | None:
        """The pins for Python ``python`` (``"3.12"``); None when the scripts name no pin for it."""
        if python not in self.pins:
            return None
        return (*self.pins.get("*", ()), *self.pins[python])


#: v2.6: ``.ci/wheel/build_wheel.sh``. The Debian v2.6.0 tree has no ``.ci/``; read at pytorch/pytorch
#: 0303c4c3 (a stored 2.6-era version of the script; the v2.6.0 tag's own blob was not available here):
#: exports TH_BINARY_BUILD=1, INSTALL_TEST=0,
#: MACOSX_DEPLOYMENT_TARGET=10.15, USE_DISTRIBUTED=1 ("need libuv, which is build as part of tensorpipe"),
#: USE_MKLDNN=OFF, USE_QNNPACK=OFF, BUILD_TEST=OFF; ``retry brew install libomp``; per Python pins (3.12:
#: SETUPTOOLS_PINNED_VERSION=">=68.0.0", PYYAML ">=6.0.1", NUMPY "=2.0.2"), ``pip install -r requirements.txt``,
#: then ``python setup.py bdist_wheel -d "$whl_tmp_dir"`` (one build_deps), renamed to ``mac_version=
#: 'macosx_11_0_arm64'``. The harness caps setuptools below 76 (released 2025-03, after 2.6.0:
#: setuptools 76-78 and >= 82 break some bases), which the script's ">=68" allowed at release.
V2_6 = WheelRecipe(
    name="v2.6",
    releases=((2, 6),),
    script=".ci/wheel/build_wheel.sh",
    citation="pytorch/pytorch .ci/wheel/build_wheel.sh at 0303c4c3 (the Debian v2.6.0 tree has no .ci/)",
    env={
        "TH_BINARY_BUILD": "1",
        "INSTALL_TEST": "0",
        "USE_DISTRIBUTED": "1",
        "USE_MKLDNN": "OFF",
        "USE_QNNPACK": "OFF",
        "BUILD_TEST": "OFF",
    },
    command="bdist_wheel",
    requirement_files=("requirements.txt",),
    pins={
        "*": ("requests", "ninja", "typing_extensions", "setuptools<76"),
        "3.9": ("numpy==2.0.2", "pyyaml>=5.3", "setuptools>=62.3.0"),
        "3.10": ("numpy==2.0.2", "pyyaml>=5.3", "setuptools>=62.3.0"),
        "3.11": ("numpy==2.0.2", "pyyaml>=5.3", "setuptools>=62.3.0"),
        "3.12": ("numpy==2.0.2", "pyyaml>=6.0.1", "setuptools>=68.0.0"),
        "3.13": ("numpy==2.1.0", "pyyaml>=6.0.1", "setuptools>=68.0.0"),
    },
    host_tools=("libomp: `brew install libomp` (the script's `retry brew install libomp`)",),
    wheel_tag="macosx_11_0_arm64",
    metal={"CAN_COMPILE_METAL": "metal3.1"},
)

#: main: ``.ci/wheel/mac/build.sh`` sources the exports of ``build_env_setup.py`` (pytorch/pytorch 90e1bc14:
#: ``MACOS_BUILD_ENV``), runs ``build_install_deps.py`` (90e1bc14 / 0c19667c: ``pip install -qU -r
#: requirements-build.txt``, ``-r requirements.txt``, ``numpy==numpy_pin()`` from ``.ci/wheel/_common.py``
#: ``NUMPY_PINS`` at 0c19667c, ``brew install libomp`` unless /opt/llvm-openmp exists), then
#: ``build_wheel.py`` (97ddf012: ``_PYTHON_HOST_PLATFORM=macosx-14.0-arm64``, ``ARCHFLAGS=-arch arm64``,
#: ``pip install build``, ``python -m build --wheel --no-isolation --outdir``).
MAIN = WheelRecipe(
    name="main",
    releases=(),
    script=".ci/wheel/mac/build_env_setup.py",
    citation="pytorch/pytorch .ci/wheel/mac/build_env_setup.py at 90e1bc14, build_install_deps.py at 0c19667c, "
    "build_wheel.py at 97ddf012, .ci/wheel/_common.py at 0c19667c",
    env={
        "TH_BINARY_BUILD": "1",
        "INSTALL_TEST": "0",
        "USE_DISTRIBUTED": "1",
        "USE_MKLDNN": "OFF",
        "USE_QNNPACK": "OFF",
        "BUILD_TEST": "OFF",
        "USE_PYTORCH_METAL_EXPORT": "1",
        "USE_COREML_DELEGATE": "1",
        "_PYTHON_HOST_PLATFORM": "macosx-14.0-arm64",
    },
    command="build",
    requirement_files=("requirements-build.txt", "requirements.txt"),
    pins={
        "*": ("build",),
        "3.10": ("numpy==2.0.2",),
        "3.11": ("numpy==2.0.2",),
        "3.12": ("numpy==2.0.2",),
        "3.13": ("numpy==2.1.2",),
        "3.14": ("numpy==2.3.4",),
    },
    host_tools=("libomp: `brew install libomp` unless /opt/llvm-openmp exists (build_install_deps.py)",),
    wheel_tag="macosx_14_0_arm64",
    metal={"CAN_COMPILE_METAL": "metal3.1", "CAN_COMPILE_METAL_40": "metal4.0"},
)

RECIPES: dict[str, WheelRecipe] = {r.name: r for r in (V2_6, MAIN)}


def recipe_for(release: str, source_dir: Path | None = None) -> WheelRecipe | None:
    """The recipe of a base: by its release (``version.txt``: ``2.6.0a0`` -> v2.6; ``main`` -> main),
    else by the recipe script the base holds; None for a base neither declares (the harness then
    builds with its own flags, and says so)."""
    if release == "main":
        return MAIN
    wanted = release_of(release)
    for recipe in RECIPES.values():
        if wanted in recipe.releases:
            return recipe
    if source_dir is not None:
        for recipe in RECIPES.values():
            if (Path(source_dir) / recipe.script).is_file():
                return recipe
    return None


# ------------------------------------------------------------------ the base's own scripts, read back

#: ``export KEY=VALUE`` (shell) or ``"KEY": "VALUE",`` (a Python dict entry) or ``env.setdefault("KEY", "VALUE")``
_ASSIGN = re.compile(
    r"""^\s*(?:export\s+([A-Z_][A-Z0-9_]*)=["']?([^"'\s#]*)["']?"""
    r"""|["']([A-Z_][A-Z0-9_]*)["']\s*:\s*["']([^"']*)["']\s*,?"""
    r"""|env\.setdefault\(\s*["']([A-Z_][A-Z0-9_]*)["']\s*,\s*["']([^"']*)["']\s*\))"""
)
#: constants a build_wheel.py passes through env.setdefault (``MACOS_PLATFORM = "macosx-14.0-arm64"``)
_CONST = re.compile(r"""^([A-Z_][A-Z0-9_]*)\s*=\s*["']([^"']*)["']\s*$""")
_SETDEFAULT_NAME = re.compile(r"""env\.setdefault\(\s*["']([A-Z_][A-Z0-9_]*)["']\s*,\s*([A-Z_][A-Z0-9_]*)\s*\)""")


def script_env(text: str) -> dict[str, str]:
    """The build variables a wheel script sets unconditionally: top-level ``export K=V`` lines of a
    shell script (not those inside ``if``/``case``), entries of a Python dict literal, and
    ``env.setdefault("K", V)`` calls (V a literal or a module constant)."""
    out: dict[str, str] = {}
    consts = {m[1]: m[2] for m in (_CONST.match(line) for line in text.splitlines()) if m}
    depth = 0
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        if re.match(r"^(if|case)\b", stripped):
            depth += 1
        elif re.match(r"^(fi|esac)\b", stripped):
            depth = max(0, depth - 1)
        if depth:
            continue
        named = _SETDEFAULT_NAME.search(line)
        if named and named[2] in consts:
            out[named[1]] = consts[named[2]]
            continue
        match = _ASSIGN.match(line)
        if match:
            key, value = next((match[i], match[i + 1]) for i in (1, 3, 5) if match[i])
            out[key] = value
    return out


def script_command(text: str) -> str | None:
    """``bdist_wheel`` or ``build``: which wheel command a script runs (None: neither)."""
    if re.search(r"setup\.py\s+bdist_wheel", text):
        return "bdist_wheel"
    if re.search(r"""["']-m["']\s*,\s*["']build["']|-m\s+build\b""", text):
        return "build"
    return None


#: the files (relative to the base) whose flags make up each recipe, in the order they apply
RECIPE_FILES = {
    "v2.6": (".ci/wheel/build_wheel.sh",),
    "main": (".ci/wheel/mac/build_env_setup.py", ".ci/wheel/mac/build_wheel.py"),
}


def read_recipe(source_dir: Path, name: str) -> tuple[dict[str, str], str | None] | None:
    """The flags and the wheel command the base's own scripts of recipe ``name`` set, or None when the
    base lacks them (the Debian v2.6.0 tree has no ``.ci/``)."""
    env: dict[str, str] = {}
    command = None
    found = False
    for rel in RECIPE_FILES[name]:
        path = Path(source_dir) / rel
        if not path.is_file():
            continue
        found = True
        text = path.read_text(errors="replace")
        env.update(script_env(text))
        command = command or script_command(text)
    return (env, command) if found else None


def recipe_drift(recipe: WheelRecipe, source_dir: Path) -> list[str]:
    """Where the base's own scripts disagree with the declaration: ``KEY: declared X, the base's scripts Y``
    for each declared variable (``MACOSX_DEPLOYMENT_TARGET`` is read from the base apart:
    :func:`harness.build.convention.macos_deployment_target`), and the command. [] when they agree or the base
    lacks the scripts."""
    read = read_recipe(source_dir, recipe.name)
    if read is None:
        return []
    env, command = read
    drift = [
        f"{key}: declared {value}, the base's scripts {env.get(key, 'unset')}"
        for key, value in recipe.env.items()
        if env.get(key) != value
    ]
    drift += [
        f"{key}: the base's scripts set {value}, not declared"
        for key, value in env.items()
        if key not in recipe.env
        and key not in ("MACOSX_DEPLOYMENT_TARGET", "ARCHFLAGS", "CMAKE_OSX_ARCHITECTURES")
        and key not in _SCRIPT_ONLY
    ]
    if command is not None and command != recipe.command:
        drift.append(f"command: declared {recipe.command}, the base's scripts {command}")
    return drift


#: variables the scripts set that are about their own CI machine, not the wheel (paths, versions)
_SCRIPT_ONLY = frozenset({"PYTORCH_BUILD_VERSION", "PYTORCH_BUILD_NUMBER", "CMAKE_PREFIX_PATH", "OMP_PREFIX"})


# ------------------------------------------------------------------ flags against a released wheel's


_ON = {"1", "ON", "TRUE", "YES", "Y"}
_OFF = {"0", "OFF", "FALSE", "NO", "N", ""}


def _norm(value: str) -> str:
    upper = str(value).strip().upper()
    return "ON" if upper in _ON else "OFF" if upper in _OFF else str(value).strip()


def config_flags(config_show: str) -> dict[str, str]:
    """The ``Build settings:`` of ``torch.__config__.show()`` as ``{KEY: VALUE}`` (``USE_MPS=ON`` …);
    {} when the text has none."""
    match = re.search(r"Build settings:\s*(.*)", config_show or "")
    if not match:
        return {}
    out = {}
    for item in match[1].split(","):
        key, sep, value = item.strip().partition("=")
        if sep and re.match(r"^[A-Z_][A-Z0-9_]*$", key):
            out[key] = value.strip()
    return out


def flags_differ(env: Mapping[str, str], config_show: str) -> list[str]:
    """The ``USE_*`` flags a build's environment (its manifest's ``environment``) sets differently from
    a wheel's ``torch.__config__.show()`` (the released PyPI wheel's is the reference), as
    ``KEY: this build X, the released wheel Y``; only keys both name; ON/1/TRUE and OFF/0/FALSE compare
    equal."""
    released = config_flags(config_show)
    return [
        f"{key}: this build {env[key]}, the released wheel {released[key]}"
        for key in sorted(env)
        if key.startswith("USE_") and key in released and _norm(env[key]) != _norm(released[key])
    ]


def declared_differ(env: Mapping[str, str], recipe: WheelRecipe | None) -> list[str]:
    """The variables of a build's environment that differ from what upstream's wheel build of the base
    sets (the recipe), as ``KEY=X (upstream's wheel: Y)``; [] without a recipe."""
    if recipe is None:
        return []
    return [
        f"{key}={env.get(key, 'unset')} (upstream's wheel: {value})"
        for key, value in recipe.env.items()
        if _norm(env.get(key, "")) != _norm(value)
    ]


# ------------------------------------------------------------------ a released wheel's build settings

#: What ``torch.__config__.show()`` prints after ``Build settings:`` is compiled in from the
#: ``CAFFE2_BUILD_STRINGS`` list of the generated ``caffe2/core/macros.h`` (``caffe2/core/macros.h.in``
#: at pytorch/pytorch 536c3919: ``{"TORCH_VERSION", ...}, {"CXX_FLAGS", "${CMAKE_CXX_FLAGS}"}, {"USE_CUDA",
#: "${USE_CUDA}"}`` …): ``torch/__config__.py`` (231dc429) ``show()`` returns ``torch._C._show_config()``, that
#: is ``at::show_config()`` (``aten/src/ATen/Version.cpp`` at 44f1f672), which prints
#: ``caffe2::GetBuildOptions()`` (``caffe2/core/common.cc``: the map ``CAFFE2_BUILD_STRINGS``), skipping empty
#: values. The 2.13.0 macOS wheel ships that header (``torch/include/caffe2/core/macros.h``); the 2.6.0 one
#: does not, so its settings come from ``ATen/Config.h`` and the ``CXX_FLAGS`` string of ``libtorch_cpu.dylib``
#: (:func:`wheel_build_settings`).
_BUILD_STRING = re.compile(r'\{\s*"([A-Z_][A-Z0-9_]*)"\s*,\s*(?:R"PYT\((.*?)\)PYT"|"((?:[^"\\]|\\.)*)")\s*\}', re.S)
_KEY_VALUE = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.*)$")

#: ``ATen/Config.h`` macros and the build option each one reports (``AT_MKLDNN_ENABLED() 0`` -> USE_MKLDNN=OFF)
ATEN_CONFIG_OPTIONS = {
    "AT_MKLDNN_ENABLED": "USE_MKLDNN",
    "AT_MKL_ENABLED": "USE_MKL",
    "AT_NNPACK_ENABLED": "USE_NNPACK",
    "AT_PARALLEL_OPENMP": "USE_OPENMP",
}

#: build options whose ``-D<KEY>`` CMakeLists.txt appends to ``CMAKE_CXX_FLAGS`` exactly when the option is on
#: (v2.6.0 CMakeLists.txt lines 902-968; ``USE_MPS`` also at pytorch/pytorch 00117da6), so a wheel's
#: ``CXX_FLAGS`` decides them; the value is the option's CMake default where ``option(... OFF)`` makes it
#: plain (None: the default depends on the host, so an unset variable is not compared).
CXX_FLAG_OPTIONS: dict[str, str | None] = {
    "USE_FBGEMM": None,
    "USE_PYTORCH_QNNPACK": None,
    "USE_XNNPACK": None,
    "USE_PYTORCH_METAL": "OFF",
    "USE_PYTORCH_METAL_EXPORT": "OFF",
    "USE_COREML_DELEGATE": "OFF",
    "USE_MPS": None,
}


def build_settings(text: str) -> dict[str, str]:
    """The build settings in ``text`` as ``{KEY: VALUE}``: the ``CAFFE2_BUILD_STRINGS`` entries of a
    ``caffe2/core/macros.h``, the ``Build settings:`` line of ``torch.__config__.show()`` (:func:`config_flags`),
    or ``KEY=VALUE`` lines (``#`` comments skipped; the fixture form). Empty values are dropped, as
    ``show()`` drops them; {} when the text holds none."""
    text = text or ""
    if "#define CAFFE2_BUILD_STRINGS" in text:
        body = text[text.index("#define CAFFE2_BUILD_STRINGS") :]
        pairs = {m[1]: (m[2] if m[2] is not None else m[3]) for m in _BUILD_STRING.finditer(body)}
        return {k: v for k, v in pairs.items() if v.strip()}
    if re.search(r"^[ -]*Build settings:", text, re.M):
        return {k: v for k, v in config_flags(text).items() if v}
    pairs = (_KEY_VALUE.match(line.strip()) for line in text.splitlines() if not line.lstrip().startswith("#"))
    return {m[1]: m[2] for m in pairs if m and m[2].strip()}


def aten_config_settings(config_h: str) -> dict[str, str]:
    """The options ``ATen/Config.h`` reports (:data:`ATEN_CONFIG_OPTIONS`), ``ON``/``OFF``."""
    out = {}
    for macro, option in ATEN_CONFIG_OPTIONS.items():
        m = re.search(rf"^#define\s+{macro}(?:\(\))?\s+([01])\s*$", config_h or "", re.M)
        if m:
            out[option] = "ON" if m[1] == "1" else "OFF"
    return out


def option_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with the options its ``CXX_FLAGS`` decides (:data:`CXX_FLAG_OPTIONS`: ``-DUSE_MPS``
    present -> ``USE_MPS=ON``, absent -> ``OFF``) added where the settings do not name them; unchanged
    without ``CXX_FLAGS``."""
    flags = settings.get("CXX_FLAGS")
    if flags is None:
        return dict(settings)
    defined = set(flags.split())
    derived = {key: "ON" if f"-D{key}" in defined else "OFF" for key in CXX_FLAG_OPTIONS}
    return derived | dict(settings)


def wheel_build_settings(wheel: Path) -> dict[str, str]:
    """The build settings of a torch wheel file, read as text from the archive (nothing installed):
    ``torch/include/caffe2/core/macros.h`` when the wheel ships it (2.13.0 does), else the ``ATen/Config.h``
    options plus ``TORCH_VERSION``, ``CXX_COMPILER`` and ``CXX_FLAGS`` from ``torch/lib/libtorch_cpu.*``
    (the three literals follow one another there, each unique; the short values after them are merged by
    the linker and are not read). {} when the wheel has neither.

    Raises:
        OSError, zipfile.BadZipFile: the file cannot be read as a wheel.
    """
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        if "torch/include/caffe2/core/macros.h" in names:
            return build_settings(z.read("torch/include/caffe2/core/macros.h").decode(errors="replace"))
        out = {}
        if "torch/include/ATen/Config.h" in names:
            out |= aten_config_settings(z.read("torch/include/ATen/Config.h").decode(errors="replace"))
        lib = next((n for n in sorted(names) if re.match(r"torch/lib/libtorch_cpu\.(dylib|so)$", n)), None)
        if lib is not None:
            data = z.read(lib)
            at = data.find(b"\0TORCH_VERSION\0")
            if at >= 0:
                fields = data[at + 1 : at + 1 + 65536].split(b"\0")
                if len(fields) > 4 and fields[2] == b"CXX_COMPILER":
                    out |= {"TORCH_VERSION": fields[1].decode(), "CXX_COMPILER": fields[3].decode()}
                    out["CXX_FLAGS"] = fields[4].decode()
        return out


@dataclass(frozen=True)
class ReleasedWheel:
    """The build settings of one released macOS arm64 wheel on PyPI (the reference for a recipe's flags).

    Attributes:
        version: the torch release (``2.6.0``).
        wheel: the wheel's file name on PyPI.
        sha256: the wheel file's sha256.
        settings: the options its build settings decide (:func:`option_settings` of
            :func:`wheel_build_settings`, ``USE_*`` keys only), ``ON``/``OFF``.
    """

    version: str
    wheel: str
    sha256: str
    settings: Mapping[str, str]


#: the released wheels read (``pip download --no-deps --only-binary=:all: --platform macosx_11_0_arm64
#: --python-version 3.11 torch==2.6.0``, and ``macosx_14_0_arm64`` for 2.13.0); the full settings of each are
#: in tests/data/released-macos-wheels/, and a test holds this table to them
RELEASED_WHEELS: dict[str, ReleasedWheel] = {
    w.version: w
    for w in (
        ReleasedWheel(
            "2.6.0",
            "torch-2.6.0-cp311-none-macosx_11_0_arm64.whl",
            "94fc63b3b4bedd327af588696559f68c264440e2503cc9e6954019473d74ae21",
            {
                "USE_COREML_DELEGATE": "ON",
                "USE_FBGEMM": "OFF",
                "USE_MKL": "OFF",
                "USE_MKLDNN": "OFF",
                "USE_MPS": "ON",
                "USE_NNPACK": "ON",
                "USE_OPENMP": "ON",
                "USE_PYTORCH_METAL": "OFF",
                "USE_PYTORCH_METAL_EXPORT": "ON",
                "USE_PYTORCH_QNNPACK": "ON",
                "USE_XNNPACK": "ON",
            },
        ),
        ReleasedWheel(
            "2.13.0",
            "torch-2.13.0-cp311-cp311-macosx_14_0_arm64.whl",
            "e76f9bcecc52b8ff711239a2f7547d5353df95878ab232f0773c1d95928b92f8",
            {
                "USE_COREML_DELEGATE": "ON",
                "USE_CUDA": "OFF",
                "USE_CUDNN": "OFF",
                "USE_CUSPARSELT": "OFF",
                "USE_EIGEN_FOR_BLAS": "ON",
                "USE_FBGEMM": "OFF",
                "USE_GFLAGS": "OFF",
                "USE_GLOG": "OFF",
                "USE_GLOO": "ON",
                "USE_MKL": "OFF",
                "USE_MKLDNN": "OFF",
                "USE_MPI": "OFF",
                "USE_MPS": "ON",
                "USE_NCCL": "OFF",
                "USE_NNPACK": "ON",
                "USE_OPENMP": "ON",
                "USE_PYTORCH_METAL": "OFF",
                "USE_PYTORCH_METAL_EXPORT": "ON",
                "USE_PYTORCH_QNNPACK": "ON",
                "USE_ROCM": "OFF",
                "USE_ROCM_KERNEL_ASSERT": "OFF",
                "USE_XCCL": "OFF",
                "USE_XNNPACK": "OFF",
                "USE_XPU": "OFF",
            },
        ),
    )
}

#: the released wheel each recipe is compared with: its own release, or for main the newest release
#: (``nearest``: main is ahead of it, so a difference may be main's change rather than the harness's)
RELEASE_REFERENCE = {"v2.6": ("2.6.0", False), "main": ("2.13.0", True)}


def release_reference(recipe: WheelRecipe | None) -> tuple[ReleasedWheel, bool] | None:
    """The released wheel whose settings a build of ``recipe``'s base is compared with, and whether it is
    only the nearest release (main); None without a recipe or a stored wheel for it."""
    if recipe is None or recipe.name not in RELEASE_REFERENCE:
        return None
    version, nearest = RELEASE_REFERENCE[recipe.name]
    return RELEASED_WHEELS[version], nearest


def released_differ(env: Mapping[str, str], released: ReleasedWheel, *, nearest: bool = False) -> list[str]:
    """The build options of a build's environment (its ``BuildPlan.env``) that differ from a released
    wheel's build settings, one string each, sorted by key, e.g. ``USE_COREML_DELEGATE: this build unset
    (CMake default OFF), torch 2.6.0's wheel ON``. Compared: each ``USE_*`` variable the environment sets
    that the wheel's settings name (ON/1/TRUE and OFF/0/FALSE equal), and each option of
    :data:`CXX_FLAG_OPTIONS` with a plain CMake default that the environment leaves unset. [] when they agree."""
    ref = f"torch {released.version}'s wheel" + (" (nearest release)" if nearest else "")
    out = []
    for key in sorted(set(released.settings) | {k for k in env if k.startswith("USE_")}):
        theirs = released.settings.get(key)
        if theirs is None or not key.startswith("USE_"):
            continue
        if key in env:
            if _norm(env[key]) != _norm(theirs):
                out.append(f"{key}: this build {env[key]}, {ref} {theirs}")
        elif CXX_FLAG_OPTIONS.get(key) is not None and _norm(CXX_FLAG_OPTIONS[key]) != _norm(theirs):
            out.append(f"{key}: this build unset (CMake default {CXX_FLAG_OPTIONS[key]}), {ref} {theirs}")
    return out


def recipe_release_differs(env: Mapping[str, str], recipe: WheelRecipe | None) -> list[str]:
    """A build's flags against upstream's released wheel of its base: :func:`declared_differ` (the
    recipe, as read in upstream's scripts) then :func:`released_differ` (the released wheel's own
    settings, :func:`release_reference`); the build manifest's ``release_differs``."""
    out = declared_differ(env, recipe)
    reference = release_reference(recipe)
    if reference is not None:
        out += released_differ(env, reference[0], nearest=reference[1])
    return out


# ------------------------------------------------------------------ Metal toolchain of a stock/patched pair


#: ``cmake/Metal.cmake``'s cache entries and the Metal language version each probes (``-std=metal3.1``,
#: ``-std=metal4.0``; :data:`harness.build.preflight.METAL_PROBES` holds the probes)
METAL_STD = {"CAN_COMPILE_METAL": "3.1", "CAN_COMPILE_METAL_40": "4.0"}


def metal_text(capability: Mapping[str, str] | None) -> str:
    """``Metal 3.1 YES, Metal 4.0 NO`` of a manifest's ``metal_capability`` (``–`` without one)."""
    if not capability:
        return "–"
    return ", ".join(f"Metal {std} {capability[name]}" for name, std in METAL_STD.items() if name in capability)


def release_flag_lines(builds: Mapping[str, Mapping]) -> list[str]:
    """The report's line when a harness-built wheel's flags differ from upstream's released wheel of its
    base (its manifest's ``release_differs``, :func:`recipe_release_differs`: upstream's wheel scripts and
    the released wheel's build settings); [] when none does."""
    differ = [
        f"{name}: {', '.join(manifest['release_differs'])}"
        for name, build in builds.items()
        if isinstance(manifest := build.get("build"), Mapping) and manifest.get("release_differs")
    ]
    if not differ:
        return []
    return [
        "> **Build flags differ from the released wheel's** (upstream's macOS wheel build, the PyPI wheel's "
        f"build settings): {'; '.join(differ)}",
        "",
    ]


def metal_mismatch(stock: Mapping | None, patched: Mapping | None) -> str | None:
    """One line when the stock and patched build manifests record different Metal capabilities (one of
    them built Metal-4 kernels the other lacks, so the A/B would compare toolchains); None otherwise."""
    a, b = ((m or {}).get("metal_capability") for m in (stock, patched))
    if not a or not b:
        return None
    differ = sorted(n for n in a if n.startswith("CAN_COMPILE_METAL") and n in b and a[n] != b[n])
    if not differ:
        return None
    return (
        f"the stock and patched builds differ in Metal capability ({', '.join(differ)}: stock "
        f"{', '.join(str(a.get(n)) for n in differ)}, patched {', '.join(str(b.get(n)) for n in differ)}); "
        "the A/B would measure the shader toolchain, not the series"
    )


#: what to do about an A/B pair whose Metal capability differs
METAL_PAIR_REMEDY = "rebuild both wheels with the same Xcode (`xcrun metal --version`), `--force`"


# ------------------------------------------------------------------ the host


def host_macos() -> str | None:
    """This Mac's macOS product version (``"14.5"``), None off a Mac (``platform.mac_ver()``)."""
    if sys.platform != "darwin":
        return None
    return _platform.mac_ver()[0] or None


@dataclass(frozen=True)
class HostNeed:
    """What a base needs of the Mac that builds and runs it.

    Attributes:
        base: the base's name for messages (``main``, ``v2.6.0``).
        macos: the macOS the host needs, (major, minor): the newer of the two below.
        wheel_tag: the tag of the wheel the build makes (``macosx_14_0_arm64``).
        target: ``MACOSX_DEPLOYMENT_TARGET`` of the build and where it is set (one line).
        runtime: the MPS run-time need (:class:`RuntimeNeed`).
    """

    base: str
    macos: tuple[int, int]
    wheel_tag: str
    target: tuple[str, str]
    runtime: RuntimeNeed

    def refusal(self, host: str) -> str | None:
        """One line when a Mac running ``host`` cannot run this base's wheel with MPS; None when it can."""
        have = parse_macos(host)
        if have is None or have >= self.macos:
            return None
        value, where = self.target
        target_macos = parse_macos(value) or (0, 0)
        if target_macos >= self.runtime.macos:
            why = f"{self.base} builds {self.wheel_tag} wheels (MACOSX_DEPLOYMENT_TARGET={value} in {where})"
        else:
            why = (
                f"{self.base}'s MPS backend needs macOS {_text(self.runtime.macos)} at run time "
                f"({self.runtime.source})"
            )
        return f"{why}; this Mac runs macOS {host}"


def host_need(base: str, release: str, target: tuple[str, str]) -> HostNeed:
    """The :class:`HostNeed` of a base of ``release`` whose build uses deployment ``target`` (value, where)."""
    runtime = mps_runtime_need(release)
    built = parse_macos(target[0]) or (11, 0)
    return HostNeed(base, max(built, runtime.macos), f"macosx_{built[0]}_{built[1]}_arm64", target, runtime)
