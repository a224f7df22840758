"""Which kernel ran: one call of a cell observed through the backend's own trace, named and classified.

The manifest *declares* the kernel path a config sends an op to (:attr:`harness.configs.EnvConfig.routes`);
this module *observes* it. One call per (build, config, cell), in the first round, never inside a
timed region. Each device has one :class:`Trace` in :data:`TRACES` (a registry, like
:mod:`harness.bench.devices`; an unknown device is a ``KeyError``, never a default):

- **cuda**: the names of the device kernels ``torch.profiler.profile(activities=[ProfilerActivity.CUDA])``
  records around one call (``FunctionEvent.name`` of the events whose ``device_type`` is CUDA;
  ``torch.profiler.profile``, ``ProfilerActivity`` and ``profile.events()`` exist in torch 2.6 to
  current), each with its device duration in µs (``FunctionEvent.time_range.elapsed_us()``: for a device
  event its own interval on the device, what ``device_time_total`` returns for it in torch 2.6 to
  current, ``torch/autograd/profiler_util.py``; read directly because ``device_time_total`` is 0 for an
  event without ``use_device`` and ``cuda_time_total`` is deprecated). In **its own short process**:
  Kineto leaves CUPTI attached after a profile ends unless ``TEARDOWN_CUPTI=1`` and slows later
  kernels (pytorch issue 144455: 10-20 % after profiling, pytorch PR 146604), so a timed worker never
  profiles.
- **cpu**: the libraries' own verbose logs, switched on at run time by torch for the one call only
  (``torch.backends.mkl.verbose`` / ``torch.backends.mkldnn.verbose``, torch 2.6 to current) and read
  from the C library's stdout (fd 1, captured through a pipe around the call and restored).
  ``MKL_VERBOSE SGEMM(N,N,16,64,32,...)`` names the BLAS call, ``onednn_verbose,...,exec,cpu,matmul,
  brg_matmul:avx512_core_bf16,...`` the oneDNN implementation. Measured here (torch 2.13.0, oneMKL
  2024.0, oneDNN 3.12, AVX-512 BF16 CPU): float32 mm/addmm/linear print ``SGEMM``, bmm ``SGEMM_BATCH``;
  bfloat16 mm/addmm/bmm/linear print ``brg_matmul:avx512_core_bf16``; float16 prints nothing (no
  library call: ATen's own kernel), recorded as "no trace". In the first-round timed worker, at the
  untimed first call of each cell (the switches are off again before any timing).
- **mps**: the MPS profiler's operation log (``PYTORCH_MPS_LOG_PROFILE_INFO=1``, ``OPERATION_INFO``).
  Read in ``aten/src/ATen/mps/MPSProfiler.mm`` at five versions from before v2.6.0 to current:
  pytorch ``458fd422`` (``getenv``, ``AT_ERROR``, no ``MTLCaptureManager``: older than v2.6.0), Debian's
  pytorch_2.6.0+dfsg tree (v2.6.0, blob ``2dd27045``; ``MPSProfiler.h`` blob ``b72d572f``), ROCm/pytorch
  ``ee04104d`` (a merge of upstream's switch to ``c10::utils::get_env``), versi379/pytorch ``2d8cc652`` (per-stream
  ``beginProfileKernel`` with deprecated stream-less overloads) and pytorch ``05b8ccb7`` (current: the
  stream-less overloads gone); ``MPSProfiler.h`` also at ``21887b14``. In every one: the variable
  (``kEVLogProfileInfoStr``) is read once, in the profiler's constructor (a function-local ``static``),
  and parsed with ``strtol(.., 0)`` (values over ``LOG_COUNT`` = 1023 fail a ``TORCH_CHECK``), so it
  cannot be switched for one call; its bits are ``LogOptions`` (``OPERATION_INFO = 1 << 0``,
  ``COPY_INFO`` 1 << 1, ``CPU_FALLBACK_INFO`` 1 << 2, the ``*_STATS`` bits 3-6 print tables at exit,
  ``INCLUDE_GPU_TIME`` 1 << 7, ``INCLUDE_KERNEL_TIME`` 1 << 8, ``INCLUDE_BUFFER_ID`` 1 << 9; both headers).
  The log goes to stderr (``fmt::print(stderr, ...)`` in ``beginProfileExecution`` /
  ``endProfileExecution``), not to ``os_log``: os_signposts are ``PYTORCH_MPS_TRACE_SIGNPOSTS``'s. Without
  ``INCLUDE_GPU_TIME``/``INCLUDE_KERNEL_TIME`` a line is printed when an execution begins
  (``isProfileInfoLoggingEnabled``), with either when it completes, carrying ``gpu=``/``cpu=``. With it
  set, every graph and kernel launch builds a string, prints it and adds a completion handler
  (``addProfilerCompletedHandler``): host cost per call that would distort launch-bound timing. So mps
  is observed in **its own short process** per (build, config) in the first round, with the variable
  set there only. Format (``OperationInfo::toString``, identical in all five):
  ``aten::<key> (id=<G|K><n>, run=<n>[, gpu=<ms> ms][, cpu=<ms> ms])`` on stderr (fd 2); ``G`` when the
  info's type is ``GRAPH`` (an MPSGraph execution, key: the graph cache key,
  ``MPSGraphCache::profileCachedGraph``, e.g. ``mm_out_mps_impl:f16[64,32]:f16[32,16]``), ``K``
  otherwise: any handle given to ``beginProfileKernel`` with ``isGraph`` false, not only PyTorch's
  Metal kernels (key: ``OperationInfo::buildKernelString``: the name given to ``beginProfileKernel`` and
  ``:MPS:<ScalarType><sizes>`` per tensor; ``INCLUDE_BUFFER_ID`` would add ``(buf#<id>:<retain count>)``
  after each ``MPS``). So a ``K`` line is named ``Kernel:<key>`` and :data:`RULES` tells the paths apart
  by name: the Metal GEMMs PREFER_METAL selects (v2.6.0 ``naive_matmul``; main ``matmul`` / ``addmm``,
  ``aten/src/ATen/native/mps/operations/LinearAlgebra.mm``) are the ``metal`` route; main's linear on
  macOS >= 15 runs Apple's ``MPSNDArrayMatrixMultiplication`` as ``mps_linear`` (``Linear.mm`` @
  ``033fee85``), path MPSNDArray, the default route; any other kernel (SDPA's Metal kernels on main) is
  "other kernel", the default route. Copy lines (``BlitCopy…``/``MemCopy…``), ``CPU Fallback::…`` lines,
  the exit tables and any warning text do not match and are left out.

**Device time** (mps): the same log read for time, in a probe process of its own after each timed
process (:data:`MPS_DEVICE_ENV`: ``PYTORCH_MPS_LOG_PROFILE_INFO=385``, ``PYTORCH_MPS_TRACE_SIGNPOSTS=4``):
:func:`mps_group_time` sums the ``gpu=`` of a group of calls (:func:`parse_mps_gpu`). What each bit forces
on the stream and the versions read: docs/timing.md, "Device time". :attr:`Trace.device_env` marks a device
whose time is read that way; the runner and the doctor take it from there, not from the device's name.

The kernel that did the work (:func:`main_index`) is the one with the largest device time where durations
were recorded (a memset or copy only when it is the largest), else the first name that is not a memset,
copy or reduction. Classification is a per-device table of rules (:data:`RULES`: pattern, path, accuracy
route): names are read largest device time first where durations were recorded, in call order otherwise;
the first rule matching a name classifies it; names a rule marks ``None`` (memsets, split-K reductions) are kept
but do not classify. A name no rule matches is path ``unclassified``. The path is a kernel *family*
(a kernel name does not tell which library launched it: cuBLAS calls cuBLASLt's kernels), the route the
accuracy path (the route names of :attr:`harness.configs.EnvConfig.routes`) it implies.

Standard library + torch only (runs inside build interpreters).
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field

from harness.bench import words

#: an observation whose trace printed nothing for the call
NO_TRACE = "no trace"
#: the path of names no rule of the device matches
UNCLASSIFIED = "unclassified"
#: names kept per observation (the first ones; a GEMM launches one to three)
MAX_NAMES = 8
#: characters kept per name
MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class Rule:
    """``pattern`` (re.search on a name) -> ``path`` (None: an auxiliary kernel that does not classify)
    and the accuracy ``route`` that path implies."""

    pattern: str
    path: str | None
    route: str = "default"


#: device -> rules, first match wins
RULES: dict[str, tuple[Rule, ...]] = {
    "cuda": (
        Rule(r"(?i)memset|memcpy|splitKreduce|reduce_kernel", None),
        # before cutlass: the memory-efficient SDPA kernels are fmha_cutlassF_*
        Rule(r"(?i)flash|fmha|efficient_attention|attention|sdpa", "attention"),
        Rule(r"(?i)tf32", "tf32"),
        Rule(r"nvjet", "nvjet"),
        Rule(r"(?i)cutlass", "cutlass"),
        Rule(r"xmma", "xmma"),
        Rule(r"(?i)gemv", "gemv"),
        Rule(r"(?i)gemm", "gemm"),
    ),
    "cpu": (
        Rule(r"^mkl:", "mkl"),
        Rule(r"^onednn:", "onednn"),
    ),
    "mps": (
        # PyTorch's own Metal GEMM kernels, the `metal` route: v2.6.0 do_metal_mm's naive_matmul (LinearAlgebra.mm
        # blob be94fca8 line 45), main's matmul / addmm (LinearAlgebra.mm @ 001077cb do_metal_mm, do_metal_addmm)
        Rule(r"^Kernel:(naive_matmul|matmul|addmm)(:|$)", "metal", "metal"),
        # Apple's MPSNDArrayMatrixMultiplication without a graph, also an id=K line: main's linear on macOS >= 15
        # with contiguous real operands (Linear.mm @ 033fee85 _mps_linear_nograph, "mps_linear"), bmm past 2^32
        # elements (v2.6.0 LinearAlgebra.mm line 523, " tiled_bmm_mps")
        Rule(r"^Kernel:\s*(mps_linear|tiled_bmm_mps)(:|$)", "mpsndarray"),
        Rule(r"^Kernel:", "kernel"),  # any other non-graph kernel (SDPA's Metal kernels on main, ...)
        Rule(r"^MPSGraph:", "mpsgraph"),
    ),
}
#: how a path is written in the report
LABELS = {
    "mpsgraph": "MPSGraph",
    "metal": "Metal",
    "mpsndarray": "MPSNDArray",
    "kernel": "other kernel",
    "mkl": "MKL",
    "onednn": "oneDNN",
    "tf32": "TF32",
}


def label(path: str | None) -> str:
    """The path as the report writes it (``None``: no trace)."""
    return NO_TRACE if path is None else LABELS.get(path, path)


def _by_time(names: list[str], durations: list[float] | None) -> list[str]:
    """``names`` largest device time first (stable), or as they are when ``durations`` is None or not one
    per name."""
    if durations is None or len(durations) != len(names):
        return list(names)
    return [n for _, n in sorted(enumerate(names), key=lambda p: -durations[p[0]])]


def auxiliary(device: str, name: str) -> bool:
    """Whether ``name`` is a kernel a rule of ``device`` marks as not classifying (memset, copy, split-K
    reduction)."""
    rule = next((r for r in RULES[device] if re.search(r.pattern, name)), None)
    return rule is not None and rule.path is None


def main_index(device: str, names: list[str], durations: list[float] | None = None) -> int | None:
    """Index in ``names`` of the kernel that did the work: the largest of ``durations`` (µs, one per name;
    the first of equal ones), else the first name that is not :func:`auxiliary`, else the first name;
    None when there are no names.

    Raises:
        KeyError: an unknown device.
    """
    if not names:
        return None
    if durations is not None and len(durations) == len(names):
        return max(range(len(names)), key=lambda i: (durations[i], -i))
    return next((i for i, n in enumerate(names) if not auxiliary(device, n)), 0)


def classify(device: str, names: list[str], durations: list[float] | None = None) -> tuple[str | None, str | None]:
    """(path, route) of the kernel ``names`` of one call on ``device``: the first name a rule classifies
    decides, names read largest of ``durations`` (µs, one per name) first where given; (None, None) when
    there are no names, (``unclassified``, None) when no rule matches.

    Raises:
        KeyError: an unknown device.
    """
    rules = RULES[device]
    matched = False
    for name in _by_time(names, durations):
        rule = next((r for r in rules if re.search(r.pattern, name)), None)
        if rule is not None:
            matched = True
            if rule.path is not None:
                return rule.path, rule.route
    return (UNCLASSIFIED if names and not matched else None), None


# ------------------------------------------------------------------------------------ parsers
_MKL = re.compile(r"^MKL_VERBOSE\s+([A-Za-z][A-Za-z0-9_]*)\(([^)]*)\)")
_MPS = re.compile(r"^aten::(?P<key>.*) \(id=(?P<kind>[GK])\d+, run=\d+[^()]*\)\s*$")
#: an operation line's time suffix (``BaseInfo::toString``: ``, gpu={:.3f} ms`` and ``, cpu={:.3f} ms``, each
#: only when above 0; ``cpu=`` is the scheduling ("KRNL") time, printed apart only with INCLUDE_KERNEL_TIME)
_MPS_TIMES = re.compile(r", run=\d+(?:, gpu=(?P<gpu>\d+(?:\.\d+)?) ms)?(?:, cpu=(?P<krnl>\d+(?:\.\d+)?) ms)?\)\s*$")


def parse_cpu(lines: list[str]) -> list[str]:
    """Kernel names from MKL_VERBOSE and oneDNN verbose lines: ``mkl:SGEMM(N,N,16,64,32)`` (the call and
    its leading non-pointer arguments: transposes, M, N, K) and ``onednn:matmul:brg_matmul:avx512_core_bf16``
    (primitive kind and implementation of each ``exec`` line; ``onednn_verbose``/``dnnl_verbose``, with or
    without the ``v1,primitive`` fields of oneDNN >= 3.1). Header and info lines are left out."""
    names = []
    for line in lines:
        m = _MKL.match(line.strip())
        if m:
            lead = []
            for a in m.group(2).split(","):  # transposes and sizes come first; stop at the first pointer
                if not re.fullmatch(r"[A-Za-z]|\d+", a.strip()):
                    break
                lead.append(a.strip())
            names.append(f"mkl:{m.group(1)}({','.join(lead)})")
            continue
        fields = line.strip().split(",")
        if fields[0] in ("onednn_verbose", "dnnl_verbose") and "exec" in fields:
            at = fields.index("exec")
            if len(fields) > at + 3:
                names.append(f"onednn:{fields[at + 2]}:{fields[at + 3]}")
    return names


def parse_mps(lines: list[str]) -> list[str]:
    """Names from MPS profiler operation lines (module docstring): ``MPSGraph:<graph key>`` for ``id=G…``,
    ``Kernel:<kernel key>`` for ``id=K…`` (any execution that is not a graph: one of PyTorch's Metal
    kernels or an MPS kernel object such as MPSNDArrayMatrixMultiplication; :data:`RULES` tells them
    apart by name); copy, CPU-fallback and statistics lines are left out."""
    names = []
    for line in lines:
        m = _MPS.match(line.strip())
        if m:
            names.append(("MPSGraph:" if m.group("kind") == "G" else "Kernel:") + m.group("key"))
    return names


def parse_mps_gpu(lines: list[str]) -> list[float | None]:
    """The ``gpu=`` milliseconds of each MPS profiler operation line (module docstring; None for a line
    without ``gpu=``), in order; copy, CPU-fallback and statistics lines are left out. The value is the
    line's command buffer's ``GPUEndTime - GPUStartTime`` (``addProfilerCompletedHandler``), plus its
    scheduling time unless ``INCLUDE_KERNEL_TIME`` is set (``endProfileExecution``)."""
    out: list[float | None] = []
    for line in lines:
        if _MPS.match(line.strip()):
            m = _MPS_TIMES.search(line.strip())
            out.append(float(m.group("gpu")) if m and m.group("gpu") else None)
    return out


#: between a kernel's name and its device duration in a cuda capture line (:func:`profiler_names`)
DURATION_SEP = "\t"


def parse_cuda(lines: list[str]) -> list[str]:
    """The kernel names themselves (one per device event, a line ``name<TAB>µs`` or the bare name), blank
    ones left out."""
    return [line.rsplit(DURATION_SEP, 1)[0].strip() for line in lines if line.rsplit(DURATION_SEP, 1)[0].strip()]


def cuda_durations(lines: list[str]) -> list[float] | None:
    """The device duration (µs) of each name :func:`parse_cuda` gives, or None where any line carries none."""
    out = []
    for line in lines:
        name, sep, us = line.rpartition(DURATION_SEP)
        if not line.rsplit(DURATION_SEP, 1)[0].strip():
            continue
        try:
            value = float(us) if sep else math.nan
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value >= 0):
            return None
        out.append(value)
    return out


# ----------------------------------------------------------------------------------- capturing
def _flush_c() -> None:
    """Flush the C library's stdio buffers (the verbose logs are printf'd), where ctypes can reach libc."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):
        pass


def capture_fd(fd: int, call: Callable[[], object]) -> tuple[object, list[str]]:
    """(``call()``'s result, the lines written to file descriptor ``fd`` while it ran). The descriptor is
    pointed at a pipe read by a thread (nothing is written to disk) and restored afterwards, also when
    ``call`` raises."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    _flush_c()
    read_end, write_end = os.pipe()
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(read_end, 65536), b"")))
    reader.start()
    saved = os.dup(fd)
    try:
        os.dup2(write_end, fd)
        try:
            result = call()
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            _flush_c()
            os.dup2(saved, fd)
    finally:
        os.close(saved)
        os.close(write_end)
        reader.join()
        os.close(read_end)
    return result, b"".join(chunks).decode(errors="replace").splitlines()


def _cpu_capture(torch, call: Callable[[], object], sync: Callable[[], None]) -> tuple[object, list[str]]:
    def traced():
        with ExitStack() as stack:
            for backend in (torch.backends.mkl, torch.backends.mkldnn):
                if backend.is_available():  # the verbose switch asserts on a build without the library
                    stack.enter_context(backend.verbose(backend.VERBOSE_ON))
            out = call()
            sync()
            return out

    return capture_fd(1, traced)


def profiler_names(torch, call: Callable[[], object], sync: Callable[[], None], kind: str = "CUDA"):
    """(``call()``'s result, one line ``<name><TAB><µs>`` per ``kind`` event torch.profiler recorded around
    it: its name and duration, ``time_range.elapsed_us()``, module docstring). ``kind`` is a
    ``ProfilerActivity`` and ``DeviceType`` name (CUDA; CPU in tests on a CPU-only build)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[getattr(ProfilerActivity, kind)]) as prof:
        out = call()
        sync()
    return out, [
        f"{e.name}{DURATION_SEP}{e.time_range.elapsed_us():.3f}"
        for e in prof.events()
        if str(e.device_type).rsplit(".", 1)[-1] == kind
    ]


def _mps_capture(torch, call: Callable[[], object], sync: Callable[[], None]) -> tuple[object, list[str]]:
    def traced():
        out = call()
        sync()
        return out

    return capture_fd(2, traced)


# --------------------------------------------------------------------------------- device time
#: the mps device-time probe's variables (``LogOptions`` / ``ProfileOptions`` in ``MPSProfiler.h``, the same in
#: every wheel 2.6.0-2.14.1 and at pytorch ``21887b14``): ``OPERATION_INFO`` (1) | ``INCLUDE_GPU_TIME`` (128)
#: | ``INCLUDE_KERNEL_TIME`` (256) = 385: one line per operation at its completion, ``gpu=`` the command
#: buffer's GPU span alone (without 256 the scheduling time is added to it); ``WAIT_UNTIL_COMPLETED`` (4):
#: ``addProfilerCompletedHandler`` then synchronizes with ``COMMIT_AND_WAIT`` after every profiled operation,
#: so each one has a command buffer of its own and its ``gpu=`` is its own GPU time, not a batch's
MPS_DEVICE_ENV = {"PYTORCH_MPS_LOG_PROFILE_INFO": "385", "PYTORCH_MPS_TRACE_SIGNPOSTS": "4"}
#: the bits the probe needs of each variable (what MPS_DEVICE_ENV sets)
_MPS_NEEDS = {"PYTORCH_MPS_LOG_PROFILE_INFO": 1 | 128 | 256, "PYTORCH_MPS_TRACE_SIGNPOSTS": 4}
#: how the mps probe measures (``measurement.device_method``)
MPS_GPU_METHOD = "mps-profiler-gpu-time"
#: seconds a group waits after its synchronize before its lines are read: the lines are printed by each
#: command buffer's completion handler on Metal's own thread, which may still run when the wait returns
SETTLE_S = 0.02


class NoDeviceTime(Exception):
    """The probe's trace gave no device time it can stand behind; the message says why."""


def _bits(name: str) -> int:
    try:
        return int(os.environ.get(name) or "0", 0)  # strtol(.., 0), as the profiler parses it
    except ValueError:
        return 0


def mps_group_time(torch, fn: Callable[[], object], calls: int, sync: Callable[[], None]) -> float:
    """Device seconds per call of ``calls`` calls of ``fn`` on mps, from the profiler's operation log
    (:data:`MPS_DEVICE_ENV` set in this process before torch used the device): the calls, the synchronize,
    :data:`SETTLE_S`, with fd 2 captured (:func:`capture_fd`); the sum of the lines' ``gpu=`` / ``calls``.

    Raises:
        NoDeviceTime: the process lacks a bit of :data:`MPS_DEVICE_ENV` (without ``WAIT_UNTIL_COMPLETED``
            the operations of one command buffer each report the whole buffer's span, and summing them
            over-counts); the operation lines are not a whole multiple of ``calls`` (a line lost or
            another operation's); a line carries no ``gpu=``.
    """
    lacking = [f"{k} bit {v & ~_bits(k)}" for k, v in _MPS_NEEDS.items() if v & ~_bits(k)]
    if lacking:
        raise NoDeviceTime(f"the probe process lacks {', '.join(lacking)} (needs {MPS_DEVICE_ENV})")

    def group():
        for _ in range(calls):
            fn()
        sync()
        time.sleep(SETTLE_S)

    _, lines = capture_fd(2, group)
    gpu = parse_mps_gpu(lines)
    if not gpu or len(gpu) % calls:
        raise NoDeviceTime(f"{len(gpu)} operation lines for {calls} calls, not a whole multiple of them")
    if None in gpu:
        raise NoDeviceTime(f"{gpu.count(None)} of {len(gpu)} operation lines carry no gpu= time")
    return sum(gpu) * 1e-3 / calls


def device_times(
    trace: Trace, torch, fn: Callable[[], object], sync: Callable[[], None], replays: int, group_s: float, most: int
) -> tuple[list[float], int]:
    """(device seconds per call of ``replays`` groups, calls per group) of ``fn`` under ``trace``'s device-time
    probe (:attr:`Trace.device_time`): three untimed calls, a host estimate of one call (three more, each
    synchronized; the log is on, so it is only a size: nothing host-timed here is evidence), then groups of
    ``ceil(group_s / estimate)`` calls (1 to ``most``).

    Raises:
        NoDeviceTime: the trace has no probe, or a group gave no device time (its reason).
    """
    if trace.device_time is None:
        raise NoDeviceTime(f"{trace.device}: no device-time probe")
    for _ in range(3):
        fn()
    sync()
    started = time.perf_counter()
    for _ in range(3):
        fn()
        sync()
    estimate = (time.perf_counter() - started) / 3
    calls = max(1, min(most, -int(-group_s // max(estimate, 1e-9))))
    return [trace.device_time(torch, fn, calls, sync) for _ in range(replays)], calls


@dataclass(frozen=True)
class Trace:
    """How one device's kernels are observed.

    Attributes:
        device: ``cpu`` | ``cuda`` | ``mps``.
        source: what is read, as the report names it.
        own_process: observed in a short process of its own per (build, config) in the first round
            (the trace would slow a timed process), else inline in the first-round worker.
        env: variables that process gets on top of its config's.
        capture: ``(torch, call, sync) -> (call's result, raw lines)``.
        parse: raw lines -> kernel names.
        device_env: variables of the device-time probe process (``dev-<round>-<build>-<config>``,
            :meth:`harness.runner.Recorder.device_probe`) on top of its config's; empty: no such process
            (the device's time, if any, is taken in the timed process: :func:`harness.bench.timer.measure_device`).
        device_time: ``(torch, fn, calls, sync) -> device seconds per call`` of one group of calls in that
            process (raises :class:`NoDeviceTime`); None without one.
        device_method: how ``device_time`` measures (``measurement.device_method``).
        durations: raw lines -> each name's device duration (µs), None where the trace records none.
    """

    device: str
    source: str
    own_process: bool
    capture: Callable
    parse: Callable[[list[str]], list[str]]
    env: Mapping[str, str] = field(default_factory=dict)
    device_env: Mapping[str, str] = field(default_factory=dict)
    device_time: Callable | None = None
    device_method: str = ""
    durations: Callable[[list[str]], list[float] | None] | None = None


TRACES: dict[str, Trace] = {
    "cpu": Trace("cpu", "MKL_VERBOSE / oneDNN verbose", False, _cpu_capture, parse_cpu),
    "cuda": Trace("cuda", "torch.profiler CUDA kernels", True, profiler_names, parse_cuda, durations=cuda_durations),
    "mps": Trace(
        "mps",
        "MPS profiler log (PYTORCH_MPS_LOG_PROFILE_INFO=1)",
        True,
        _mps_capture,
        parse_mps,
        {"PYTORCH_MPS_LOG_PROFILE_INFO": "1"},
        MPS_DEVICE_ENV,
        mps_group_time,
        MPS_GPU_METHOD,
    ),
}


def observation(device: str, names: list[str], error: str | None = None, durations: list[float] | None = None) -> dict:
    """The JSON record of one observed call: ``names`` (in call order, at most :data:`MAX_NAMES`: the
    longest-running ones where there are more, each cut to :data:`MAX_NAME_CHARS`), ``device_us`` (each
    kept name's device duration in µs, where ``durations`` gives one per name), ``path`` and ``route``
    (:func:`classify`; None: no trace), ``trace`` (:attr:`Trace.source`), and ``error`` where the call or
    its trace failed."""
    timed = durations is not None and len(durations) == len(names)
    keep = list(range(len(names)))
    if len(keep) > MAX_NAMES:
        keep = sorted(sorted(keep, key=lambda i: -durations[i])[:MAX_NAMES]) if timed else keep[:MAX_NAMES]
    kept = [names[i][:MAX_NAME_CHARS] for i in keep]
    us = [round(float(durations[i]), 3) for i in keep] if timed else None
    path, route = classify(device, kept, us)
    record = {"names": kept, **({"device_us": us} if timed else {}), "path": path, "route": route}
    record["trace"] = TRACES[device].source
    if error:
        record["error"] = error
    return record


def observe(device: str, torch, call: Callable[[], object], sync: Callable[[], None]) -> tuple[object, dict]:
    """Run ``call`` once under ``device``'s trace: (its result, :func:`observation`). A trace that cannot
    be taken is recorded as the observation's ``error``; the call's own exception propagates."""
    trace = TRACES[device]
    try:
        out, lines = trace.capture(torch, call, sync)
    except (AssertionError, RuntimeError, OSError) as exc:  # the trace itself, not the op: run it plainly
        return call(), observation(device, [], f"trace unavailable: {words(exc, 200)}")
    return out, observation(device, trace.parse(lines), durations=trace.durations(lines) if trace.durations else None)
