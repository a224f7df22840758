"""MPS conformance mode: the MPS profile's real code on CPU tensors, under upstream's MPS rules.

Nobody here has a Mac, so the MPS path is exercised in CI by running the real worker, timer,
checks and consistency code with the ``mps`` :class:`~harness.bench.devices.DeviceProfile`, while
tensors live on the CPU and a ``torch.overrides.TorchFunctionMode`` enforces what upstream PyTorch
does on MPS. A tensor placed on ``mps`` (``device="mps"``, ``.to("mps")``) is tagged as a device
tensor; results of calls on device tensors are device tensors; ``.cpu()`` / ``.to("cpu")`` give an
untagged copy. Each rule cites the upstream file it emulates:

1. **No float64 on the device.** Making a float64 device tensor, or casting a device tensor to
   float64 in the same call that copies it to the CPU, raises the ``TypeError`` upstream raises:
   ``aten/src/ATen/mps/EmptyTensor.cpp`` @ ``026a4bff`` (``MPS_ERROR_DOUBLE_NOT_SUPPORTED``), and
   ``getMPSDataType(ScalarType::Double)`` in ``aten/src/ATen/native/mps/OperationUtils.mm``
   (stored commit ``bff2c90b``), which the cast in ``copy_cast_mps`` reaches.
2. **bfloat16 needs macOS 14.** A bfloat16 device tensor under an emulated macOS below 14.0
   raises ``TypeError("MPS BFloat16 is only supported on MacOS 14 or newer")``
   (``EmptyTensor.cpp`` @ ``026a4bff``).
3. **No ``torch.mps.Event`` timing.** ``Event.synchronize()`` followed by ``elapsed_time()`` hangs
   (``aten/src/ATen/mps/MPSEvent.mm`` @ ``0aafd810``, pytorch issue 162872): both raise
   :class:`ConformanceError` here instead of hanging.
4. **Bounded enqueue.** At most :data:`harness.bench.timer.MAX_BLOCK_CALLS` device calls between
   two ``torch.mps.synchronize()`` calls: the Metal GEMM kernels ``PYTORCH_MPS_PREFER_METAL``
   selects do not commit their command buffer (``do_metal_mm``,
   ``aten/src/ATen/native/mps/operations/LinearAlgebra.mm``), so an unbounded queue makes the next
   synchronize wait for all of it. More raises :class:`ConformanceError`.

5. **The MPS profiler's operation log.** With ``PYTORCH_MPS_LOG_PROFILE_INFO`` set when the emulation
   starts (upstream reads it once, in the ``MPSProfiler`` constructor, and parses it with ``strtol(.., 0)``)
   and its ``OPERATION_INFO`` bit (``1 << 0``, ``LogOptions`` in ``MPSProfiler.h``) on, every device call
   prints ``OperationInfo::toString`` to stderr (``fmt::print(stderr, ...)`` in ``beginProfileExecution``)
   when it begins: ``aten::<key> (id=<G|K><n>, run=<n>)``, ``G`` with a per-graph counter, ``K`` with a
   per-kernel one, ``run`` per graph or kernel (``beginProfileKernel``). The same in every version read
   (:mod:`harness.bench.kernels` lists them: ``458fd422``, v2.6.0, ``ee04104d``, ``2d8cc652``,
   ``05b8ccb7``). Which GEMM runs a Metal kernel under ``PYTORCH_MPS_PREFER_METAL`` (read by presence)
   is a fact of the base (:data:`METAL_GEMM`, ``base=``): on ``v2.6.0`` only ``mm`` (``use_metal_mm``,
   which only ``mm_out_mps_impl`` calls, ``LinearAlgebra.mm`` lines 76-85 and 221, Debian's
   pytorch_2.6.0+dfsg blob ``be94fca8``), logged as ``naive_matmul`` (``do_metal_mm``:
   ``beginProfileKernel(matmulPSO, "naive_matmul", {self, other})``, line 45); on ``main`` ``mm`` and
   ``addmm`` (``LinearAlgebra.mm`` @ ``001077cb``: ``beginProfileKernel(matmulPSO, "matmul", {self_,
   other_})`` in ``do_metal_mm``, ``"addmm"`` in ``do_metal_addmm``, which hands ``beta == 0, alpha ==
   1`` to ``do_metal_mm``: not emulated, the harness's addmm keeps the default scalars). On ``main`` with
   an emulated macOS >= 15, ``linear`` of real operands is a kernel line too, whatever the variables:
   ``_mps_linear_nograph`` runs Apple's ``MPSNDArrayMatrixMultiplication`` and logs it with
   ``beginProfileKernel(kernel, "mps_linear", {input, weight, bias})`` (``Linear.mm`` @ ``033fee85``;
   upstream also requires contiguous operands, which the harness's are). The kernel key is
   ``<name>:MPS:<dtype><sizes>`` per operand (``buildKernelString``); every other call is an MPSGraph
   execution keyed by its name. The graph key's tail (upstream: the graph cache key,
   ``"mm_out_mps_impl" + getTensorsStringKey(...)`` such as ``mm_out_mps_impl:f16[64,32]:f16[32,16]``)
   is not emulated exactly: the parser (:func:`harness.bench.kernels.parse_mps`) reads only the line's
   frame and the ``G``/``K`` mark. The emulation is of stock upstream: a series' own variable does not
   change its routing. With ``INCLUDE_GPU_TIME`` (``1 << 7``) or ``INCLUDE_KERNEL_TIME`` (``1 << 8``) a line
   is printed when its command buffer completes instead (``endProfileExecution``, from the handler
   ``addProfilerCompletedHandler`` adds), here when rule 6 commits it, and a call that encodes nothing
   (a view) prints none: every operation of the buffer prints the buffer's GPU span, ``gpu=`` (the sum of
   its operations' emulated device seconds: rule 6's for a Metal GEMM, the call's host time for an
   MPSGraph call), plus :data:`KRNL_S` of scheduling time unless ``INCLUDE_KERNEL_TIME`` prints that apart
   as ``cpu=``. ``PYTORCH_MPS_TRACE_SIGNPOSTS`` with ``WAIT_UNTIL_COMPLETED`` (``4``, ``ProfileOptions``)
   commits and waits after every profiled call (the handler's ``synchronize(COMMIT_AND_WAIT)``), so each
   has a buffer of its own. (``MPSProfiler.mm`` @ ``458fd422`` and ``05b8ccb7``, ``MPSProfiler.h`` @
   ``21887b14``; the bits and format strings are the same in every macOS wheel 2.6.0-2.14.1: docs/timing.md,
   "Device time".)

6. **Command buffers.** Which device work is committed to the GPU when: a Metal GEMM that
   ``PYTORCH_MPS_PREFER_METAL`` routes (rule 5's :data:`METAL_GEMM`) is encoded into the stream's command
   buffer without a commit (``do_metal_mm``, ``aten/src/ATen/native/mps/operations/LinearAlgebra.mm`` @
   ``001077cb``), so nothing of it reaches the device before a commit. ``torch.mps.synchronize()`` commits
   and waits (``torch._C._mps_deviceSynchronize`` -> ``MPSHooks::deviceSynchronize`` ->
   ``synchronize(SyncType::COMMIT_AND_WAIT)``, ``aten/src/ATen/mps/MPSHooks.mm`` @ ``fe0b902f``;
   ``commitAndWait`` in ``aten/src/ATen/mps/MPSStream.mm`` @ ``fba75098``), and so does a blocking copy to
   the host (``copy_and_sync``: ``COMMIT_AND_WAIT`` unless ``non_blocking``). Every other call but a view
   is an MPSGraph execution: ``runMPSGraph`` (``OperationUtils.mm`` @ ``bff2c90b``) asks for
   ``COMMIT_ADAPTIVE``, which commits only when the allocator's low watermark is <= 1 (``MPSStream.mm`` @
   ``fba75098``), and whether MPSGraph submits its
   work as it encodes (``enableCommitAndContinue`` on the execution descriptor) is Apple's private
   behaviour; the emulation takes it as submitted as issued (committing what was encoded before it),
   which the timer's deferral probe measures on a Mac instead of assuming. The emulated device runs
   committed work after the host issued it: a deferred Metal GEMM's work takes
   :data:`DEVICE_FACTOR` x the host time of its call (at least :data:`DEVICE_MIN_S`), run from its
   commit on, so the synchronize (or
   host read) waits for it; an MPSGraph call's work is done within the call (a CPU tensor). So the
   timer's probe (:meth:`harness.bench.timer.BlockTimer.probe_deferred`) finds Metal GEMMs under
   ``PYTORCH_MPS_PREFER_METAL`` deferred, their blocks lasting enqueue + device time (encode share
   1 / (1 + :data:`DEVICE_FACTOR`)), and usually leaves every other call unprobed (``deferred`` None: a
   block that is all enqueue is launch-bound under either rule); a busy host that delays the sizing
   block's synchronize gets such a call probed, and it reads False. (Reasoning, not a measurement: on a
   Mac a block of the doctor's GEMM cell, mm 2048³ float16, that is not launch-bound leaves at least
   1 ms of device work at its synchronize, ``PROBE_SIZED_MIN_S``, so the probe runs there.) ``uncommitted`` counts
   the calls encoded since the last commit, ``most_uncommitted`` the most a synchronize or host read
   found; ``trace`` records ``read`` for each host read. So the doctor's rows
   (:mod:`harness.bench.assumptions`) run their Metal-route path in CI: a block of Metal GEMMs that only
   the synchronize commits, and the host read that must wait for it.

7. **Half-precision GEMM arithmetic (an emulation shortcut, not an MPS behaviour).** The emulated device's
   arithmetic is the CPU's. A float16 or bfloat16 GEMM on the device (every name in :data:`_GEMM_NAMES`,
   all operands of that one dtype) is computed on float32 copies of its operands and rounded to its dtype
   once (:func:`_widened`): the model of torch's CPU kernels for these dtypes (float32 accumulation, one
   rounding at the end), which on a host without AVX512-FP16/BF16 instructions (this project's AVX2 CI
   host) run without half-precision vector code: there ``mm`` 512^3 float16 took 0.19 CPU s against 0.007 s
   widened, and the outputs of the quick cells' GEMMs differed from the CPU kernel's in 0.01-0.22 % of their
   elements (float32 summation order). SDPA and every other op keep the CPU's own half kernels.
   Conformance is about the harness's calls, syncs and dtypes, which this leaves as they were; the checks
   judge the output either way (a defect planted in it is caught the same). What it changes is rule 6's
   device time of a half Metal GEMM, :data:`DEVICE_FACTOR` x a now shorter host time: the quick cells'
   are at the :data:`DEVICE_MIN_S` floor, as float32 ones were, and the deferral probe's decision rests
   on that floor.

8. **No host timing with the profiler's log on.** Every :meth:`harness.bench.timer.BlockTimer.time_block`
   (the one place a block is host-timed) raises :class:`ConformanceError` in a process whose
   ``PYTORCH_MPS_LOG_PROFILE_INFO`` or ``PYTORCH_MPS_TRACE_SIGNPOSTS`` is set: the log builds and prints
   a line and adds a completion handler per call, and ``WAIT_UNTIL_COMPLETED`` serialises host and
   device, so such a block would time the log. Only probe processes (:mod:`harness.bench.kernels`) set
   them, and they time nothing on the host.

Rules 1-2 and 5-6 emulate upstream behaviour (the harness must cope with it: skip the dtype, convert in
two steps); rules 3-4 and 8 are constraints on the harness's own code. ``trace`` records every
synchronize and device call, for tests. Standard library + torch only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from harness.bench.devices import MPS_BFLOAT16_MACOS, profile
from harness.bench.timer import MAX_BLOCK_CALLS, BlockTimer

_TAG = "_harness_mps"
DOUBLE_ERROR = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
    "Please use float32 instead."
)
BFLOAT16_ERROR = "MPS BFloat16 is only supported on MacOS 14 or newer"
#: rule 6: the emulated device needs this many seconds per host second of a deferred (Metal GEMM) call:
#: its block is 4 x its host time (encode share 1/4: kernel-bound), and the deferral probe's wait is 3/4
#: of its block, far over :data:`harness.bench.timer.PROBE_WAIT_SHARE` and the scheduling delays of a
#: loaded CI host (at 0.5 and 1.0 the probe missed the Metal cells in about 1 of 5 loaded runs)
DEVICE_FACTOR = 3.0
#: rule 6: and at least this many seconds, whatever its host time: the probe's decision then rests on
#: waits of 20 ms or more, beyond the scheduling delays of a loaded CI host (a few ms per runnable
#: process competing for a core), which a tiny GEMM's 3 x tens of microseconds are not
DEVICE_MIN_S = 0.02
#: rule 5: the emulated scheduling ("KRNL", ``kernelEndTime - kernelStartTime``) seconds of each command
#: buffer: printed as ``cpu=`` with INCLUDE_KERNEL_TIME, else added to ``gpu=`` (``endProfileExecution``)
KRNL_S = 1e-4
#: rule 5: LogOptions bits (MPSProfiler.h): OPERATION_INFO, INCLUDE_GPU_TIME, INCLUDE_KERNEL_TIME
OPERATION_INFO, INCLUDE_GPU_TIME, INCLUDE_KERNEL_TIME = 1, 128, 256
#: rule 5: ProfileOptions::WAIT_UNTIL_COMPLETED (MPSProfiler.h), from PYTORCH_MPS_TRACE_SIGNPOSTS
WAIT_UNTIL_COMPLETED = 4


class ConformanceError(AssertionError):
    """The harness broke a documented MPS constraint (it would hang or fail on a real Mac)."""


def _is_device(x) -> bool:
    return getattr(x, _TAG, False) is True


def _flatten(obj) -> Iterator:
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _flatten(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _flatten(item)
    else:
        yield obj


def _is_mps(device) -> bool:
    return device is not None and str(device).split(":")[0] == "mps"


#: c10 ScalarType names, as ``BaseInfo::buildTensorString`` prints them
_SCALAR_TYPE = {"float32": "Float", "float16": "Half", "bfloat16": "BFloat16", "float64": "Double"}
#: base -> aten GEMM -> the Metal kernel name PYTORCH_MPS_PREFER_METAL runs it with, as the profiler logs it
#: (rule 5: v2.6.0 LinearAlgebra.mm blob be94fca8 do_metal_mm; main LinearAlgebra.mm @ 001077cb)
METAL_GEMM = {"v2.6.0": {"mm": "naive_matmul"}, "main": {"mm": "matmul", "addmm": "addmm"}}
#: torch function name -> the aten GEMM it reaches with 2-D operands
_GEMM_NAMES = {"__matmul__": "mm", "matmul": "mm", "mm": "mm", "addmm": "addmm", "bmm": "bmm", "linear": "linear"}


def _widened(torch, func, args: tuple, kwargs: dict):
    """Rule 7: ``func(*args, **kwargs)`` of a GEMM whose tensor operands are all float16 or all bfloat16,
    computed on float32 copies and rounded once to that dtype; any other call (other dtypes, mixed ones, an
    ``out=`` tensor) runs as it is. Returns what ``func`` returns."""
    dtypes = {t.dtype for t in _flatten((args, kwargs)) if isinstance(t, torch.Tensor)}
    if "out" in kwargs or len(dtypes) != 1 or (dtype := dtypes.pop()) not in (torch.float16, torch.bfloat16):
        return func(*args, **kwargs)

    def wide(x):
        return x.float() if isinstance(x, torch.Tensor) else x

    return func(*map(wide, args), **{k: wide(v) for k, v in kwargs.items()}).to(dtype)


class Emulation:
    """State of one conformance run: the emulated macOS, the sync trace, the call counter, the profiler log."""

    def __init__(
        self, torch, macos: tuple[int, int] = (14, 0), max_calls: int = MAX_BLOCK_CALLS, base: str = "main"
    ) -> None:
        if base not in METAL_GEMM:
            raise ValueError(f"no emulated routing for base {base!r}; choose one of {', '.join(METAL_GEMM)}")
        self.torch = torch
        self.base = base
        self.metal_gemm = METAL_GEMM[base]
        self.macos = tuple(macos)
        self.max_calls = max_calls
        self.trace: list[str] = []
        self.calls_since_sync = 0
        self.most_calls_between_syncs = 0
        # read once, as the profiler's constructor does (strtol(.., 0))
        self.log = int(os.environ.get("PYTORCH_MPS_LOG_PROFILE_INFO") or "0", 0)
        self.signposts = int(os.environ.get("PYTORCH_MPS_TRACE_SIGNPOSTS") or "0", 0)
        self.log_operations = bool(self.log & OPERATION_INFO)
        self.log_times = bool(self.log & (INCLUDE_GPU_TIME | INCLUDE_KERNEL_TIME))  # lines at completion
        self.wait_each = bool(self.signposts & WAIT_UNTIL_COMPLETED)
        self.buffer: list[tuple[str, float]] = []  # rule 5: (line, device s) of the ops in the command buffer
        self.printed_gpu_s: list[float] = []  # rule 5: the gpu= seconds of every completion line, for tests
        self.prefer_metal = "PYTORCH_MPS_PREFER_METAL" in os.environ
        self.handles: dict[tuple[str, str], list[int]] = {}  # (kind, key) -> [profile id, run count]
        self.counters = {"G": 0, "K": 0}  # m_graph_counter, m_kernel_counter
        self.uncommitted = 0  # rule 6: calls encoded since the last commit
        self.most_uncommitted = 0
        self.pending_s = 0.0  # rule 6: device seconds of the encoded, uncommitted work
        self.busy_until = 0.0  # rule 6: host clock (perf_counter) at which the committed work ends

    def profile(self, name: str, tensors: list, device_s: float | None = None) -> None:
        """Print the profiler's operation line of one device call ``name`` on ``tensors`` (rule 5), when the
        log is on: at once, or, with GPU or kernel time logged, when its command buffer completes (a call
        that encodes nothing, ``device_s`` None, then prints none); with WAIT_UNTIL_COMPLETED the call's
        buffer is committed and waited for at once."""
        if not self.log_operations or (self.log_times and device_s is None):
            return
        operands = [t for t in tensors if isinstance(t, self.torch.Tensor)]
        op = _GEMM_NAMES.get(name, name)
        floating = bool(operands) and all(t.dtype.is_floating_point for t in operands)
        kernel = self.metal_gemm.get(op) if self.prefer_metal and floating else None
        shown = operands[-2:] if kernel else operands  # a Metal GEMM names its two matrix operands
        if kernel is None and op == "linear" and self.base == "main" and self.macos >= (15, 0) and floating:
            kernel = "mps_linear"  # MPSNDArrayMatrixMultiplication, keyed with input, weight, bias
        tail = "".join(f":MPS:{_SCALAR_TYPE.get(str(t.dtype).split('.')[-1], t.dtype)}{list(t.shape)}" for t in shown)
        kind, key = ("K", kernel + tail) if kernel else ("G", op + tail)
        if (kind, key) not in self.handles:
            self.counters[kind] += 1
            self.handles[(kind, key)] = [self.counters[kind], 0]
        handle = self.handles[(kind, key)]
        handle[1] += 1
        line = f"aten::{key} (id={kind}{handle[0]}, run={handle[1]}"
        if not self.log_times:
            os.write(2, f"{line})\n".encode())
            return
        self.buffer.append((line, device_s))
        if self.wait_each:  # addProfilerCompletedHandler: synchronize(COMMIT_AND_WAIT)
            self.commit_and_wait()

    def complete(self) -> None:
        """Rule 5: the completion handlers of the committed buffer's operations, each printing the whole
        buffer's GPU span (``cb.GPUEndTime - cb.GPUStartTime``: the emulated device seconds of every
        operation in it), plus :data:`KRNL_S` unless INCLUDE_KERNEL_TIME prints that apart as ``cpu=``."""
        span, lines = sum(s for _, s in self.buffer), [line for line, _ in self.buffer]
        self.buffer = []
        apart = bool(self.log & INCLUDE_KERNEL_TIME)
        gpu = span if apart else span + KRNL_S
        for line in lines:
            self.printed_gpu_s.append(gpu)
            tail = f", gpu={gpu * 1e3:.3f} ms" + (f", cpu={KRNL_S * 1e3:.3f} ms" if apart else "")
            os.write(2, f"{line}{tail})\n".encode())

    def refuse_host_timing(self) -> None:
        """Rule 8: a host-timed block in a process whose profiler log or signposts are on (their cost per call
        is in every block, and WAIT_UNTIL_COMPLETED serialises host and device) raises."""
        if self.log or self.signposts:
            raise ConformanceError(
                f"a host-timed block with PYTORCH_MPS_LOG_PROFILE_INFO={self.log} / PYTORCH_MPS_TRACE_SIGNPOSTS="
                f"{self.signposts}: the profiler's log costs host time per call (MPSProfiler.mm), only a device "
                "probe process may have it on"
            )

    def synchronize(self) -> None:
        self.trace.append("sync")
        self.calls_since_sync = 0
        self.commit_and_wait()

    def commit(self) -> None:
        """Rule 6: the encoded work goes to the device, which runs it after what it already has."""
        self.busy_until = max(self.busy_until, time.perf_counter()) + self.pending_s
        self.pending_s = 0.0
        self.uncommitted = 0
        if self.buffer:
            self.complete()

    def commit_and_wait(self) -> None:
        """Rule 6: synchronize or a blocking host copy commits what was encoded and waits for it."""
        self.most_uncommitted = max(self.most_uncommitted, self.uncommitted)
        self.commit()
        left = self.busy_until - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def host_read(self) -> None:
        """Rule 6: a blocking device-to-host copy (``copy_and_sync``, COMMIT_AND_WAIT)."""
        self.trace.append("read")
        self.commit_and_wait()

    def encode(self, name: str, tensors: list, host_s: float = 0.0) -> float:
        """Rule 6: a Metal GEMM is encoded without a commit (its work, :data:`DEVICE_FACTOR` x ``host_s``
        device seconds and at least :data:`DEVICE_MIN_S`, waits for one); any other call commits (MPSGraph,
        taken as submitted as issued; its work, ``host_s``, is done within the call). Returns the call's
        emulated device seconds."""
        floating = all(t.dtype.is_floating_point for t in tensors if isinstance(t, self.torch.Tensor))
        metal = self.prefer_metal and floating and _GEMM_NAMES.get(name, name) in self.metal_gemm
        if metal:
            self.uncommitted += 1
            device_s = max(DEVICE_FACTOR * host_s, DEVICE_MIN_S)
            self.pending_s += device_s
            return device_s
        self.commit()
        return host_s

    def device_call(self, name: str) -> None:
        self.trace.append(name)
        self.calls_since_sync += 1
        self.most_calls_between_syncs = max(self.most_calls_between_syncs, self.calls_since_sync)
        if self.calls_since_sync > self.max_calls:
            raise ConformanceError(
                f"{self.calls_since_sync} device calls enqueued without torch.mps.synchronize() (limit "
                f"{self.max_calls}): Metal GEMM kernels do not commit (LinearAlgebra.mm do_metal_mm), the "
                "queue is unbounded"
            )

    def check_dtype(self, tensor) -> None:
        torch = self.torch
        if tensor.dtype == torch.float64:
            raise TypeError(DOUBLE_ERROR)
        if tensor.dtype == torch.bfloat16 and self.macos < MPS_BFLOAT16_MACOS:
            raise TypeError(BFLOAT16_ERROR)


def _to_target(torch, args, kwargs):
    """(device, dtype) that a ``Tensor.to`` call asks for (None where it does not say)."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    for a in args[1:]:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, (str, torch.device)):
            device = a
        elif isinstance(a, torch.Tensor):
            device, dtype = ("mps" if _is_device(a) else "cpu"), a.dtype
    return device, dtype


def _retarget(torch, args, kwargs):
    """Replace every mps device argument by cpu; return (asked for mps, args, kwargs)."""
    asked = False

    def swap(x):
        nonlocal asked
        if isinstance(x, (str, torch.device)) and _is_mps(x):
            asked = True
            return torch.device("cpu")
        return x

    args = tuple(swap(a) for a in args)
    kwargs = {k: swap(v) for k, v in kwargs.items()}
    return asked, args, kwargs


def _make_mode(emu: Emulation):
    torch = emu.torch
    from torch.overrides import TorchFunctionMode

    Tensor = torch.Tensor
    to_host = {Tensor.cpu, Tensor.numpy, Tensor.tolist, Tensor.item}

    class MPSRules(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            started = time.perf_counter()  # rule 6: the host time of a call sets its emulated device time
            kwargs = dict(kwargs or {})
            from_device = any(_is_device(a) for a in _flatten((args, kwargs)))
            if func is Tensor.to:
                device, dtype = _to_target(torch, args, kwargs)
                if from_device and device is not None and not _is_mps(device):
                    if dtype == torch.float64:  # copy_cast_mps -> getMPSDataType(Double) throws
                        raise TypeError(DOUBLE_ERROR)
                    emu.host_read()
                    return func(*args, **kwargs).clone()  # a host copy, untagged
            if func in to_host:
                if from_device:
                    emu.host_read()
                out = func(*args, **kwargs)
                return out.clone() if isinstance(out, Tensor) else out
            asked, args, kwargs = _retarget(torch, args, kwargs)
            name = getattr(func, "__name__", str(func))
            if from_device and name in _GEMM_NAMES:
                out = _widened(torch, func, args, kwargs)  # rule 7
            else:
                out = func(*args, **kwargs)
            if not (asked or from_device):
                return out
            tensors = [t for t in _flatten(out) if isinstance(t, Tensor)]
            for t in tensors:
                emu.check_dtype(t)
            if tensors:
                operands = list(_flatten((args, kwargs)))
                emu.device_call(name)
                device_s = None
                if not all(t._is_view() for t in tensors):  # a view encodes nothing
                    device_s = emu.encode(name, operands, time.perf_counter() - started)
                emu.profile(name, operands, device_s)
            for t in tensors:
                setattr(t, _TAG, True)
            return out

    return MPSRules()


class _Event:
    """Stands in for ``torch.mps.Event``: recording is allowed, timing with it is not (rule 3)."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.enable_timing = enable_timing

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        raise ConformanceError(
            "torch.mps.Event.synchronize() before elapsed_time() hangs on MPS "
            "(MPSEvent.mm @0aafd810: the completion flag is consumed; pytorch issue 162872)"
        )

    def elapsed_time(self, end_event) -> float:
        raise ConformanceError(
            "torch.mps.Event.elapsed_time() waits on a completion flag that "
            "synchronize() may have consumed (MPSEvent.mm @0aafd810): never time with MPS events"
        )


@contextmanager
def emulate(torch, macos: tuple[int, int] = (14, 0), max_calls: int = MAX_BLOCK_CALLS, base: str = "main"):
    """Run the MPS profile on CPU tensors under the rules above; yields (profile, emulation). ``base``: whose
    GEMM routing rule 5 logs (:data:`METAL_GEMM`).

    Raises:
        ValueError: a base with no emulated routing.

    ``torch.mps.synchronize``, ``torch.mps.Event`` and ``torch.mps.event.Event`` are replaced for
    the duration and restored afterwards; the profile is :mod:`harness.bench.devices`' own ``mps``
    profile, so its code runs too.
    """
    emu = Emulation(torch, macos, max_calls, base)
    saved = {
        (torch.mps, "synchronize"): torch.mps.synchronize,
        (torch.mps, "Event"): torch.mps.Event,
        (torch.mps.event, "Event"): torch.mps.event.Event,
    }
    saved[(BlockTimer, "time_block")] = BlockTimer.time_block
    host_timed = BlockTimer.time_block

    def time_block(timer, fn, number):  # rule 8: every host-timed block passes here
        emu.refuse_host_timing()
        return host_timed(timer, fn, number)

    torch.mps.synchronize = emu.synchronize
    torch.mps.Event = torch.mps.event.Event = _Event
    BlockTimer.time_block = time_block
    try:
        # the real mps profile (harness.bench.devices), whose torch.mps.synchronize is now the
        # emulation's; its memory and name queries find no MPS in a CPU build and answer None
        prof = profile("mps", torch)
        with _make_mode(emu):
            yield prof, emu
    finally:
        for (owner, name), value in saved.items():
            setattr(owner, name, value)
