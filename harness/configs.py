"""Env-config profiles per device: named sets of environment variables, one fresh process each.

torch reads these variables once per process (at first use of the backend), so
every config runs in its own worker process whose environment holds exactly the
config's variables: a worker inherits only the variables of an explicit allow-list
(:data:`INHERITED`, ``LC_*``, and ``--keep-env`` names); everything else is cleared, and every
torch-, CUDA-, MPS- or OpenMP-related variable that reaches it is recorded (:func:`worker_environment`,
:func:`harness.bench.recorded.snapshot`).

Sources for the variables:
- MPS: ``PYTORCH_MPS_FAST_MATH`` and ``PYTORCH_MPS_PREFER_METAL`` are read in
  ``aten/src/ATen/native/mps/operations/LinearAlgebra.mm`` and the MPS graph code
  (upstream reads PREFER_METAL by *presence*: ``std::getenv(...) != nullptr``, so
  ``PYTORCH_MPS_PREFER_METAL=0`` also turns it on).
- CUDA: ``TORCH_BLAS_PREFER_CUBLASLT`` (aten/src/ATen/Context.cpp, prefer cuBLASLt for GEMM)
  and ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE`` (aten/src/ATen/Context.cpp, TF32 for fp32 GEMM).
- CPU: ``ATEN_CPU_CAPABILITY`` (aten/src/ATen/native/DispatchStub.cpp; ``default`` disables
  the vectorised ATen kernels; BLAS/oneDNN GEMM kernels do not consult it).

Nothing here is about one patch series: a series adds its own variables, the configs that set
them, their routing and consistency pair in its ``series.toml`` ``[evidence]`` (:mod:`harness.evidence`).

Whether the build under test really reads a variable is checked per build, not
assumed: :mod:`harness.bench.provenance` looks for the name in the build's shared libraries.

The workers' side (what of their environment they record) is :mod:`harness.bench.recorded`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

#: The variables a worker inherits from the parent (plus ``LC_*`` and ``--keep-env`` names); every
#: other one is cleared: the process's own (PATH, HOME, USER, LOGNAME, SHELL), the locale, the
#: temporary folder, the dynamic loader's search path a torch build may need (LD_LIBRARY_PATH,
#: DYLD_LIBRARY_PATH), Windows' SYSTEMROOT, and the GPU a user chose (CUDA_VISIBLE_DEVICES;
#: recorded). A variable that steers a backend (e.g. ``NVIDIA_TF32_OVERRIDE``,
#: ``PYTORCH_CUDA_ALLOC_CONF``) reaches a worker only through ``--keep-env`` or ``--env``.
INHERITED = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "TEMP",
    "TMP",
    "LD_LIBRARY_PATH",
    "DYLD_LIBRARY_PATH",
    "SYSTEMROOT",
    "CUDA_VISIBLE_DEVICES",
)
INHERITED_PREFIXES = ("LC_",)
#: variables no worker may be given by ``--env``, a series' ``[evidence.<device>.env.<config>]`` or a
#: ``[[evidence.test]]``'s ``env``: the harness sets them for its own processes (a worker's
#: PYTHONPATH points at the harness source; a series test's is removed so that the build's torch is imported)
#: variables only the harness's probe processes set (harness.bench.kernels.MPS_DEVICE_ENV): the MPS profiler's
#: log costs host time per call and WAIT_UNTIL_COMPLETED serialises host and device (docs/timing.md, "Device time")
PROBE_ONLY_ENV = ("PYTORCH_MPS_LOG_PROFILE_INFO", "PYTORCH_MPS_TRACE_SIGNPOSTS")
#: variables the harness sets for the series' tests (harness.seriestests.run_one: their bytecode under its cache)
BYTECODE_ENV = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
RESERVED_ENV = ("PYTHONPATH", *PROBE_ONLY_ENV, *BYTECODE_ENV)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name_problem(key: str) -> str | None:
    """Why ``key`` cannot be a variable set in a worker, or None when it can: the one rule for ``--env``
    keys and the manifest's env keys (``[evidence.<device>.env.<config>]``, ``[[evidence.test]]`` env).
    A name is letters, digits and ``_``, not starting with a digit (so no ``=``, NUL or empty name,
    which ``os.environ`` refuses with a ValueError or drops), and not one of :data:`RESERVED_ENV`."""
    if not _ENV_NAME.fullmatch(key):
        return f"{key!r} is not an environment variable name (letters, digits and _, not starting with a digit)"
    if key in PROBE_ONLY_ENV:
        return f"the harness sets {key} in its probe processes only: it would slow every timed call"
    if key in BYTECODE_ENV:
        return f"the harness sets {key} for the series' tests (their bytecode is kept under its cache)"
    if key in RESERVED_ENV:
        return f"the harness sets {key} for its workers"
    return None


DEVICES = ("mps", "cuda", "cpu")

#: kernel paths a config may route an op to (:attr:`EnvConfig.routes`): ``default`` (the backend's library
#: GEMM) and ``metal`` (PyTorch's own Metal GEMM kernels, which ``PYTORCH_MPS_PREFER_METAL`` selects). The
#: observed-kernel rules (:data:`harness.bench.kernels.RULES`) map traces onto these names; a series'
#: ``[base.accumulators.<path>]`` names one of them but ``default``.
ROUTES = ("default", "metal")


@dataclass(frozen=True)
class EnvConfig:
    """A named env config: the exact variables a worker process gets.

    Attributes:
        name: profile name, e.g. ``fast_math+prefer_metal``.
        env: variable -> raw string value, exactly as set in the worker.
        about: one line on what the config is for.
        reduced_fp32: the config lets float32 GEMM run with a 10-bit mantissa (TF32 on cuda),
            which loosens the float32 accuracy bound (harness.bench.accuracy).
        routes: op -> kernel path the config may send it to, where that path changes the accuracy
            bound (what the path accumulates in is a fact of each base: series.toml
            ``[base.accumulators]``); ops not listed take the default path.
            When stock and patched builds route an op differently under one config, the entry
            names the looser path, so one bound holds for both builds. On a build whose base is told
            and declares ``[base.routes.<device>]``, that base's routes replace these (exact per build:
            :meth:`harness.evidence.Evidence.routes_of`, ``harness.supervise.build_routes``).
    """

    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    about: str = ""
    reduced_fp32: bool = False
    routes: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "env": dict(self.env),
            "about": self.about,
            "reduced_fp32": self.reduced_fp32,
            "routes": dict(self.routes),
        }


_FAST = {"PYTORCH_MPS_FAST_MATH": "1"}
_METAL = {"PYTORCH_MPS_PREFER_METAL": "1"}

PROFILES: dict[str, tuple[EnvConfig, ...]] = {
    "mps": (
        EnvConfig("vanilla", {}, "MPSGraph everywhere, full-precision math"),
        # PYTORCH_MPS_FAST_MATH is read only when Metal shaders are compiled at run time
        # (MetalShaderLibrary::compileLibrary, aten/src/ATen/native/mps/OperationUtils.mm, v2.6.0
        # lines 820-838), never by MPSGraph: it does not loosen any bound here.
        EnvConfig("fast_math", {**_FAST}, "MPSGraph; fast math reaches only run-time-compiled Metal shaders"),
        EnvConfig("prefer_metal", {**_METAL}, "GEMM that use_metal_mm routes goes to PyTorch's Metal kernels"),
        EnvConfig("fast_math+prefer_metal", {**_FAST, **_METAL}, "both: GEMM on Metal under fast math"),
    ),
    "cuda": (
        EnvConfig("default", {}, "cuBLAS heuristics, TF32 off for fp32 GEMM (torch default)"),
        EnvConfig("cublaslt", {"TORCH_BLAS_PREFER_CUBLASLT": "1"}, "prefer cuBLASLt for GEMM"),
        EnvConfig("tf32_override", {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}, "TF32 tensor cores for fp32 GEMM", True),
    ),
    "cpu": (
        EnvConfig("default", {}, "ATen picks the best vector ISA the CPU has"),
        EnvConfig("no_vec", {"ATEN_CPU_CAPABILITY": "default"}, "ATen vectorised kernels off"),
    ),
}

#: device -> (config A, config B) whose GEMM outputs of one build must agree, when the series names no
#: pair of its own (harness.bench.consistency); mps has none without a series.
CONSISTENCY_PAIRS = {"cpu": ("no_vec", "default"), "cuda": ("tf32_override", "default")}

#: Configs a plain `compare` runs per device when --configs is not given.
DEFAULT_CONFIGS = {device: tuple(c.name for c in profiles) for device, profiles in PROFILES.items()}


def select(
    device: str,
    names: str | None,
    profiles: tuple[EnvConfig, ...] | None = None,
    default: tuple[str, ...] | None = None,
) -> list[EnvConfig]:
    """Resolve ``--configs a,b`` (or the default list when ``names`` is None) among ``profiles``
    (default: :data:`PROFILES` of the device; a series adds its own: :meth:`harness.evidence.Evidence.profiles`).

    Raises:
        ValueError: an unknown device or config name; the message lists the valid ones.
    """
    if device not in PROFILES:
        raise ValueError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    by_name = {c.name: c for c in (profiles or PROFILES[device])}
    default = default or DEFAULT_CONFIGS[device]
    wanted = default if names is None else [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in by_name]
    if unknown or not wanted:
        raise ValueError(
            f"unknown env config {', '.join(map(repr, unknown)) or '(empty)'} for device {device}; "
            f"choose from {', '.join(by_name)}"
        )
    return [by_name[n] for n in wanted]


def variables(device: str, profiles: tuple[EnvConfig, ...] | None = None) -> list[str]:
    """Every variable any profile of ``device`` (or of ``profiles``) sets (sorted), for the read-by-build check."""
    return sorted({k for c in (profiles or PROFILES[device]) for k in c.env})


def worker_environment(
    config: EnvConfig, parent: Mapping[str, str] | None = None, keep: tuple[str, ...] = ()
) -> dict[str, str]:
    """The environment for a worker running ``config``: the parent's variables of the allow-list
    (:data:`INHERITED`, :data:`INHERITED_PREFIXES`) and those named in ``keep`` (``--keep-env``, e.g. a
    site's required ``TORCH_SYMM_MEM_DISABLE_MULTICAST``), plus exactly the config's variables."""
    parent = os.environ if parent is None else parent
    env = {k: v for k, v in parent.items() if k in keep or k in INHERITED or k.startswith(INHERITED_PREFIXES)}
    env.update(config.env)
    return env
