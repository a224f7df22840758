"""What differs per device, as data: one :class:`DeviceProfile` each for ``cpu``, ``cuda``, ``mps``.

The timer, the worker and the checks are device-neutral; they take a profile and call its
``sync``, ``free_bytes`` and ``gpu_name``. Nothing else in :mod:`harness.bench` branches on the
device name. An unknown name is a ``ValueError``, never a default.

MPS facts used here (upstream PyTorch, read at the commits named):

- ``torch.mps.synchronize()`` waits for every kernel on the device (``torch/mps/__init__.py`` at
  ``00f993df``; present in 2.6 to current). It is the only MPS call the timer makes: the timer never
  uses ``torch.mps.Event`` (see :mod:`harness.bench.timer` for why).
- Free memory: ``torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory()``
  (same file; both exist from 2.3 on).
- GPU name and core count: ``torch.backends.mps.get_name()`` / ``get_core_count()``
  (``torch/backends/mps/__init__.py`` of torch 2.13.0, git ``cf30153c``); older torch lacks them,
  and the profile then reports None rather than the CPU's brand string.
- MPS has no float64 and bfloat16 needs macOS 14: ``aten/src/ATen/mps/EmptyTensor.cpp`` at
  ``026a4bff`` (``TORCH_CHECK_TYPE(dtype != ScalarType::Double, ...)``, ``... BFloat16 ||
  is_macos_13_or_newer(MACOS_VER_14_0_PLUS)``). The macOS the MPS backend needs depends on the torch
  version (13.0 for 2.6, 14.0 for 2.10 to main): :func:`harness.bench.mpsruntime.mps_runtime_need`, one table.

Standard library and torch only (runs inside build interpreters).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.bench.mpsruntime import MPS_OLDEST_MACOS

#: the oldest macOS (major, minor) the MPS backend of any supported base runs on (torch 2.6: 13.0; main
#: needs 14.0): per torch version see :func:`harness.bench.mpsruntime.mps_runtime_need`
MPS_MIN_MACOS = MPS_OLDEST_MACOS
#: macOS version MPS bfloat16 needs (EmptyTensor.cpp @026a4bff)
MPS_BFLOAT16_MACOS = (14, 0)


@dataclass(frozen=True)
class DeviceProfile:
    """How the device-neutral code talks to one device.

    Attributes:
        name: ``cpu`` | ``cuda`` | ``mps``: the device the evidence is labelled with.
        torch_device: the device string tensors are placed on (equal to ``name`` except under
            :mod:`harness.bench.conformance`, which runs the MPS profile's code on CPU tensors).
        sync: waits until every call enqueued on the device has finished (a no-op on the CPU,
            where calls are synchronous).
        free_bytes: bytes the device can still allocate, or None when unknown.
        gpu_name: the accelerator's name (None on cpu, or where torch cannot tell).
        clock: what a timed block measures, recorded with every measurement.
        reset: puts the device into one known state before a cell is timed (the worker calls it
            before each cell's warm-up); a no-op unless the device keeps state from earlier
            kernels that moves a later kernel's time (cuda: :func:`cuda_reset`).
        device_time: ``(fn, calls, replays) -> [seconds per call, ...]``: the device's own time of
            ``calls`` calls, ``replays`` times (:func:`harness.bench.timer.measure_device`); None where
            the device cannot give it, and ``device_note`` says why.
        device_clock: how ``device_time`` measures (recorded as ``measurement.device_method``).
        device_note: why there is no ``device_time`` (recorded as ``measurement.device_note``).
    """

    name: str
    torch_device: str
    sync: Callable[[], None]
    free_bytes: Callable[[], int | None]
    gpu_name: Callable[[], str | None]
    clock: str
    reset: Callable[[], None] = field(default=lambda: None)
    device_time: Callable[[Callable[[], object], int, int], list[float]] | None = None
    device_clock: str = ""
    device_note: str = ""


def _host_free_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _guarded(fn: Callable[[], object], cast=int) -> Callable[[], object]:
    def call():
        try:
            return cast(fn())
        except (AttributeError, RuntimeError, ValueError, TypeError):
            return None

    return call


#: why a cpu measurement has no separate device time
CPU_DEVICE_NOTE = "cpu: calls are synchronous, host time is device time"


def _cpu(torch) -> DeviceProfile:
    return DeviceProfile(
        "cpu", "cpu", lambda: None, _host_free_bytes, lambda: None, "perf_counter", device_note=CPU_DEVICE_NOTE
    )


#: how :func:`cuda_graph_time` measures
CUDA_GRAPH_CLOCK = "cuda-graph+events"
#: untimed calls on a side stream before capture (as ``torch.cuda.graphs.make_graphed_callables`` warms
#: up: library handles and workspaces are made outside the capture)
GRAPH_WARMUP_CALLS = 2


#: clock64 cycles of the spin (``torch.cuda._sleep``) enqueued before each timed replay's start event: ~100 µs at
#: an H100's 1.98 GHz boost clock, more than the host needs to enqueue the start event, the replay and the end
#: event (10-20 µs there). Doubled, up to :data:`SPIN_TRIES` times, where a replay shows it was not enough.
SPIN_CYCLES = 200_000
SPIN_TRIES = 4


def cuda_graph_time(torch) -> Callable[[Callable[[], object], int, int], list[float]]:
    """Device time on CUDA: ``calls`` calls of ``fn`` captured once in a CUDA graph
    (``torch.cuda.CUDAGraph``, ``torch.cuda.graph``), replayed once untimed and then ``replays`` times,
    each replay between two CUDA events (``torch.cuda.Event(enable_timing=True)``). Returns seconds per
    call, one value per replay.

    Why a graph: a replay launches the captured kernels back to back from the device's side, so no host
    launch gap enters the time (the CUDA programming guide, "CUDA Graphs"); for calls of more than one
    kernel it counts the gaps between them too (profiler kernel sums read 9-13 % lower there).

    Why a spin before the start event: recorded on an idle stream, the start event fires at once while the
    host still launches the graph (``cudaGraphLaunch``), so the launch's host latency entered every replay:
    15-20 µs per replay on an H100 (torch 2.11.0+cu130), i.e. 6-12 % of a 150-300 µs replay, and more in
    processes whose host was slow (docs/timing.md, "Device time"). Each replay is therefore enqueued
    behind a spin kernel (``torch.cuda._sleep(cycles)``, ``torch/cuda/__init__.py``, a clock64 busy-wait,
    in every torch from 0.4 to 2.11): ``e0``, spin, ``start``, replay, ``end``. The device reaches
    ``start`` at ``e0`` + the spin's duration, and ``e0`` fires no earlier than the host enqueued it; so
    when the spin (``e0`` to ``start``, device clock) outlasts the host's time from enqueuing ``e0`` to
    having enqueued ``end`` (``time.perf_counter``), the whole replay was queued before the device
    reached it. Where it did not, the replay is timed again with the spin doubled (at most
    :data:`SPIN_TRIES` times; then RuntimeError, recorded as the cell's ``device_note``).

    Raises whatever capture raises for an op that cannot be captured (a host synchronization inside
    the call, a CPU fallback): :func:`harness.bench.timer.measure_device` records it as the cell's
    ``device_note``."""

    streams: list = []  # one side stream for the process: a new stream per cell would set up its libraries again
    spin = [SPIN_CYCLES]  # grows for the process where a replay showed the launch was not hidden

    def timed_replay(graph, calls: int) -> float:
        for _ in range(SPIN_TRIES):
            e0, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            t0 = time.perf_counter()
            e0.record()
            torch.cuda._sleep(spin[0])
            start.record()
            graph.replay()
            end.record()
            enqueued = time.perf_counter() - t0
            end.synchronize()
            if e0.elapsed_time(start) * 1e-3 > enqueued:  # elapsed_time: milliseconds
                return start.elapsed_time(end) * 1e-3 / calls
            spin[0] *= 2
        raise RuntimeError(
            f"the graph's launch was not hidden behind a spin of {spin[0] // 2} cycles in {SPIN_TRIES} tries"
        )

    def time_calls(fn: Callable[[], object], calls: int, replays: int) -> list[float]:
        if not streams:
            streams.append(torch.cuda.Stream())
        side = streams[0]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP_CALLS):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=side):  # the warmed stream: its library workspaces exist
                for _ in range(calls):
                    fn()
            graph.replay()
            torch.cuda.synchronize()
            return [timed_replay(graph, calls) for _ in range(replays)]
        finally:
            del graph  # its private memory pool goes back to the caching allocator

    return time_calls


#: the GEMM :func:`cuda_reset` runs (M = N = K, float16: 96 MiB of operands) and how often
RESET_GEMM_SIZE = 4096
RESET_CALLS = 3


def cuda_reset(torch) -> Callable[[], None]:
    """A reset for :attr:`DeviceProfile.reset` on CUDA: ``RESET_CALLS`` float16 GEMMs of
    ``RESET_GEMM_SIZE``³ (0.2 ms each on an H200: tiles of large shared memory on every SM), then a
    synchronize. Its operands are allocated on the first call and kept for the process.

    Why: on an H200 (torch 2.11.0+cu130) SDPA causal 1×8×512×64 float32 took 55.7 µs with a
    between-process spread of 0.3-0.5 % when timed first in a fresh process, and sat at per-process
    levels of 54.6-57.5 µs (spread 1.3-1.9 %) when timed after the default matrix. The level was set by
    the kernels run before it: the cell right after it in the matrix moved it by up to 4 %, while fresh
    inputs, other placements in device memory (large and small allocator pools, random spacers) and
    ``torch.cuda.empty_cache()`` kept it (1.6-1.8 %), and an elementwise kernel on 256 MiB after that next
    cell did not reset it (1.9 %); three of these
    GEMMs before it brought it back to 55.7 µs and 0.70 % (0.24 % when the matrix's next cell ran before
    them; 0.30 % first in a process). ``benchmarks/sdpa_level.py``; the numbers, files and runs, and what
    is not measured (this reset as shipped, with its ``ones`` operands; other GPUs, ROCm), in
    docs/methodology.md ("What the kernels before a cell leave behind").

    The reset runs the build's own fp16 GEMM (ATen, cuBLAS or cuBLASLt under the env config): a patch
    that changes that GEMM changes the state every cell starts from, on its side only."""
    operands: list = []

    def reset() -> None:
        if not operands:  # all three or none: a failed allocation leaves nothing half made
            n = RESET_GEMM_SIZE
            made = [torch.ones(n, n, dtype=torch.float16, device="cuda") for _ in range(2)]
            made.append(torch.empty(n, n, dtype=torch.float16, device="cuda"))
            operands[:] = made
        a, b, out = operands
        for _ in range(RESET_CALLS):
            torch.mm(a, b, out=out)
        torch.cuda.synchronize()

    return reset


def _cuda(torch) -> DeviceProfile:
    return DeviceProfile(
        "cuda",
        "cuda",
        torch.cuda.synchronize,
        _guarded(lambda: torch.cuda.mem_get_info()[0]),
        _guarded(lambda: torch.cuda.get_device_name(0), str),
        "synchronize+perf_counter",
        cuda_reset(torch),
        cuda_graph_time(torch),
        CUDA_GRAPH_CLOCK,
    )


def mps_gpu_name(torch) -> str | None:
    """``<name>, <n> GPU cores`` from torch.backends.mps (torch 2.13+), else None."""
    backend = torch.backends.mps
    name = _guarded(backend.get_name, str)() if hasattr(backend, "get_name") else None
    cores = _guarded(backend.get_core_count)() if hasattr(backend, "get_core_count") else None
    if name and cores:
        return f"{name}, {cores} GPU cores"
    return name


#: why an mps timed process has no device time of its own: the profiler's log that gives it costs host time
#: per call, so it is read in a probe process (harness.bench.kernels.mps_group_time, harness.runner)
MPS_DEVICE_NOTE = "mps: device time is read in a probe process of its own (the MPS profiler's log)"


def _mps(torch) -> DeviceProfile:
    return DeviceProfile(
        "mps",
        "mps",
        torch.mps.synchronize,
        _guarded(lambda: torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory()),
        lambda: mps_gpu_name(torch),
        "synchronize+perf_counter",
        device_note=MPS_DEVICE_NOTE,
    )


PROFILES: dict[str, Callable] = {"cpu": _cpu, "cuda": _cuda, "mps": _mps}


def profile(name: str, torch) -> DeviceProfile:
    """The profile of device ``name``.

    Raises:
        ValueError: an unknown device name (the message lists the known ones).
    """
    if name not in PROFILES:
        raise ValueError(f"unknown device {name!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[name](torch)
