"""The measurements behind ``doctor``'s assumption rows, taken inside a build's interpreter.

``<build python> -m harness.bench.assumptions SPEC.json --answer FILE`` (standard library + torch only)
runs in one fresh process per env config (the config's variables set: on MPS ``PYTORCH_MPS_PREFER_METAL``
picks the Metal GEMM route, read once per process), announces each measurement on its answer channel
(:mod:`harness.bench.channel`: a deadline names the step it ran out in) and answers one JSON object.
:mod:`harness.doctor` judges the numbers; nothing is judged here.

SPEC::

    {"device": "mps", "cell": "mm/1024x1024x1024/float16", "small_cell": "mm/1x1024x1024/float16",
     "rows": ["fresh", "fresh_again", "sync", "duty", "slowest", "accuracy"],
     "min_block_s": 0.005, "blocks": 5, "slowest": {"candidates": [...], "probes": {...}, "direct_s": 2.0,
     "budget_s": 10.0}, "accuracy": ["mm/256x256x256/float16", ...], "accumulator": "float32",
     "threads": 1, "emulate": null}

Measurements (seconds per call unless said):

- ``fresh``: the cell's median in this fresh process, measured first (before any other kernel ran).
- ``fresh_again``: the cell again in the same process, warmed (:data:`FRESH_WARMUP_S` of calls), its fastest
  of 10 blocks (``fresh_again_s``; other processes on a busy host only add time), and the fastest of 10
  more in this process's CPU seconds per call (``fresh_again_cpu_s``, :func:`cpu_per_call`: on the cpu
  device the kernel's work without the busy host's share): a process that was cold at first is back at
  its level; one whose kernel differs stays where it was.
- ``sync``: blocks of the cell timed two ways, alternating: ``sync_s`` ends the block with the device's
  synchronize alone (what the timer does); ``read_s`` reads the last output's last element to the host
  before that synchronize (a blocking copy: on MPS ``copy_and_sync`` commits and waits,
  ``aten/src/ATen/mps/MPSStream.mm`` @ ``fba75098``), which cannot finish before the work does.
  ``enqueue_s``: host time per call spent enqueuing in the ``sync_s`` blocks (the host-encode time).
  ``deferred``: the timer's deferral probe on the cell (:meth:`harness.bench.timer.BlockTimer.probe_deferred`,
  the same function every timed cell runs): True when the route's work waits for the synchronize, False
  when it is submitted as issued, None when the probe left it out (a sized block that was launch-bound).
  ``small``: the spec's ``small_cell`` (the smallest default GEMM cell of the device: host encode per call
  is fixed while device time grows with FLOP, so it carries the largest encode share) timed by the
  timer: ``{"cell", "block_s", "enqueue_s", "deferred"}``, medians, seconds per call.
- ``duty``: the cell timed back to back (``duty_1``) and at a duty of 1/3 (``duty_third``,
  :meth:`harness.bench.timer.BlockTimer.measure`).
- ``slowest``: one call of each candidate cell (the largest of the default matrix per op family and dtype),
  first call (shader compile, kernel selection) and second call, where a probe call of a small cell scaled
  by FLOP predicts at most ``direct_s``, at least :data:`RELEVANT` of the largest prediction (it may be the
  slowest) and the row's ``budget_s`` allows; else the scaled prediction (``extrapolated``).
- ``accuracy``: relative error and bound (:func:`harness.bench.accuracy.check`) of each cell given.
- ``device``: the cell's device seconds per call from the device's own trace
  (:func:`harness.bench.kernels.device_times`; mps: the profiler's ``gpu=``, in a process whose variables
  :attr:`harness.bench.kernels.Trace.device_env` set, and which times nothing on the host):
  ``{"device_s"`` (median of the groups), ``"calls"``, ``"method"}`` or ``{"error"}``.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from contextlib import ExitStack

from harness.bench import devices, kernels, words
from harness.bench.accuracy import check
from harness.bench.channel import Channel
from harness.bench.conformance import emulate
from harness.bench.timer import DEVICE_REPLAY_S, DEVICE_REPLAYS, MAX_BLOCK_CALLS, BlockTimer
from harness.bench.workloads import Cell, make_inputs, op_callable, reference

IMPORT_STEP = "importing torch"
#: row -> the step it announces (the deadline's message names it)
STEPS = {
    "fresh": "timing the cell first in a fresh process",
    "fresh_again": "timing the cell again, warmed, in the same process",
    "sync": "timing synchronize against a host read",
    "duty": "timing duty 1 against duty 1/3",
    "slowest": "timing one call of the slowest cells",
    "accuracy": "checking GEMM and SDPA accuracy",
    "device": "reading the cell's device time from the device's trace",
}


#: seconds of calls before the ``fresh_again`` repeat: a cold start (clock, caches, page faults) is over
FRESH_WARMUP_S = 0.2
#: the stall row runs a candidate directly only when its predicted call is at least this share of the largest
RELEVANT = 0.25


def with_read(fn, read, number: int):
    """``fn`` that, every ``number``-th call, also reads its output to the host with ``read``."""
    count = [0]

    def call():
        count[0] += 1
        out = fn()
        if count[0] % number == 0:
            read(out)
        return out

    return call


def read_last(out) -> float:
    """The last element of ``out`` on the host (a blocking device-to-host copy)."""
    return float(out.reshape(-1)[-1].item())


def sync_and_encode(timer, fn, read, number: int, blocks: int) -> dict:
    """``blocks`` pairs of blocks of ``number`` calls, alternating the synchronize-only block and the block
    that reads the last output first (module docstring). Returns ``{"sync_s", "read_s", "enqueue_s",
    "number"}``, seconds per call: the fastest block of each kind (a busy host only ever slows a block) and
    the median enqueue time."""
    plain, read_, enqueue = [], [], []
    reading = with_read(fn, read, number)
    for _ in range(blocks):
        block, enq = timer.time_block(fn, number)
        plain.append(block / number)
        enqueue.append(enq / number)
        read_.append(timer.time_block(reading, number)[0] / number)
    return {"sync_s": min(plain), "read_s": min(read_), "enqueue_s": statistics.median(enqueue), "number": number}


def small_share(timer, device, key: str, min_block_s: float, spec: dict) -> dict:
    """The cell ``key`` timed as a run times it (:meth:`harness.bench.timer.BlockTimer.measure`, deferral
    probe included): ``{"cell", "block_s", "enqueue_s", "deferred"}``, medians in seconds per call."""
    cell = Cell.from_key(key)
    fn = op_callable(cell, make_inputs(cell, device.torch_device))
    m = timer.measure(
        fn, warmup_s=0.0, warmup_calls=3, measure_s=0.0, min_block_s=min_block_s, min_samples=int(spec.get("blocks", 5))
    )
    return {"cell": key, "block_s": m.median, "enqueue_s": statistics.median(m.enqueue), "deferred": m.deferred}


def duty_pair(timer, fn, min_block_s: float, measure_s: float) -> dict:
    """The cell's fastest block back to back and at a duty of 1/3 (seconds per call), each measured twice,
    interleaved: a device that clocks down while it rests is slower in every block after a rest, a busy
    host only in some."""
    common = {"warmup_s": 0.0, "warmup_calls": 3, "min_block_s": min_block_s, "min_samples": 4}
    best = {1.0: float("inf"), 1 / 3: float("inf")}
    for duty in (1.0, 1 / 3, 1.0, 1 / 3):  # interleaved: a drift of the host's load reaches both alike
        best[duty] = min(best[duty], *timer.measure(fn, measure_s=measure_s / 2, duty=duty, **common).samples)
    return {"duty_1": best[1.0], "duty_third": best[1 / 3]}


def cpu_per_call(fn, sync, number: int, blocks: int, clock=time.process_time) -> float:
    """The fastest of ``blocks`` blocks of ``number`` calls (each block synchronized) in this process's CPU
    seconds per call: on the cpu device the kernel's own work, which other processes on a busy host do not
    add to (they take wall time, not this process's CPU time)."""
    best = math.inf
    for _ in range(blocks):
        start = clock()
        for _ in range(number):
            fn()
        sync()
        best = min(best, (clock() - start) / number)
    return best


def one_call(fn, sync, clock=time.perf_counter) -> float:
    """Seconds of one synchronized call."""
    sync()
    t0 = clock()
    fn()
    sync()
    return clock() - t0


def slowest(torch, device, spec: dict, clock=time.perf_counter) -> list[dict]:
    """One record per candidate: ``{"key", "first_s", "call_s", "extrapolated"}`` (see module docstring)."""
    predicted, out = [], []
    for key in spec["candidates"]:
        cell, probe = Cell.from_key(key), Cell.from_key(spec["probes"][key])
        try:
            fn = op_callable(probe, make_inputs(probe, device.torch_device))
            fn()
            t = one_call(fn, device.sync, clock)
        except Exception as exc:  # an unsupported dtype: not a candidate on this device
            out.append({"key": key, "error": words(exc, 200)})
            continue
        predicted.append((t * cell.flop / probe.flop, key))
    started, top = clock(), max((g for g, _ in predicted), default=0.0)
    for guess, key in sorted(predicted, reverse=True):
        # run only those that may be the slowest (a probe call mispredicts by less than RELEVANT), within budget
        may_be = guess >= RELEVANT * top
        if may_be and guess <= spec["direct_s"] and clock() - started + 2 * guess <= spec["budget_s"]:
            cell = Cell.from_key(key)
            fn = op_callable(cell, make_inputs(cell, device.torch_device))
            first = one_call(fn, device.sync, clock)
            out.append(
                {"key": key, "first_s": first, "call_s": one_call(fn, device.sync, clock), "extrapolated": False}
            )
        else:
            out.append({"key": key, "first_s": guess, "call_s": guess, "extrapolated": True})
    return out


def accuracy(device, keys: list[str], accumulator: str) -> dict:
    """Cell key -> ``{"rel_error", "bound", "default_bound"}`` of one call (:mod:`harness.bench.accuracy`)."""
    out = {}
    for key in keys:
        cell = Cell.from_key(key)
        acc = accumulator if cell.family == "gemm" else "float32"
        try:
            inputs = make_inputs(cell, device.torch_device)
            result = check(cell, op_callable(cell, inputs)(), reference(cell, inputs), False, acc).to_json()
        except Exception as exc:  # an unsupported dtype (MPS bfloat16 below macOS 14): the cell's record says so
            out[key] = {"error": words(exc, 200)}
            continue
        out[key] = {k: result.get(k) for k in ("rel_error", "bound", "default_bound")}
    return out


def device_time(torch, device, fn) -> dict:
    """The ``device`` row (module docstring): ``{"device_s", "calls", "method"}``, or ``{"error"}`` where the
    trace gave no device time or the call failed."""
    trace = kernels.TRACES[device.name]
    try:
        found, calls = kernels.device_times(
            trace, torch, fn, device.sync, DEVICE_REPLAYS, DEVICE_REPLAY_S, MAX_BLOCK_CALLS
        )
    except Exception as exc:  # no device time (kernels.NoDeviceTime) or the op's own failure: said
        return {"error": words(exc, 200)}
    return {"device_s": statistics.median(found), "calls": calls, "method": trace.device_method}


def measure(torch, device, spec: dict, channel: Channel) -> dict:
    """Every row ``spec["rows"]`` names, in order (module docstring); the answer dict."""
    timer = BlockTimer(device)
    cell = Cell.from_key(spec["cell"])
    fn = op_callable(cell, make_inputs(cell, device.torch_device))
    min_block = float(spec.get("min_block_s", 2e-3))
    answer: dict = {"device": device.name, "cell": cell.key}
    for row in spec["rows"]:
        channel.step(STEPS[row])
        if row == "fresh":
            answer["fresh_s"] = timer.measure(
                fn, warmup_s=0.0, warmup_calls=3, measure_s=0.0, min_block_s=min_block, min_samples=3
            ).median
        elif row == "fresh_again":
            again = timer.measure(
                fn, warmup_s=FRESH_WARMUP_S, warmup_calls=10_000, measure_s=0.0, min_block_s=min_block, min_samples=10
            )
            answer["fresh_again_s"] = min(again.samples)  # what this process's kernel does, less a busy host's share
            answer["fresh_again_cpu_s"] = cpu_per_call(fn, device.sync, again.number, 10)
        elif row == "sync":
            sized = timer.measure(fn, warmup_s=0.0, warmup_calls=3, measure_s=0.0, min_block_s=min_block)
            # blocks of min_block_s by the median call (a slow first block must not leave one call per block);
            # at most MAX_BLOCK_CALLS - 4: the host read adds two device calls to a bounded block
            number = max(sized.number, min(MAX_BLOCK_CALLS - 4, math.ceil(min_block / max(sized.median, 1e-9))))
            answer["sync"] = sync_and_encode(timer, fn, read_last, number, int(spec.get("blocks", 5)))
            answer["sync"]["deferred"] = sized.deferred
            if spec.get("small_cell"):
                answer["sync"]["small"] = small_share(timer, device, spec["small_cell"], min_block, spec)
        elif row == "duty":
            answer["duty"] = duty_pair(timer, fn, min_block, float(spec.get("measure_s", 0.05)))
        elif row == "slowest":
            answer["slowest"] = slowest(torch, device, spec["slowest"])
        elif row == "accuracy":
            answer["accuracy"] = accuracy(device, spec["accuracy"], spec.get("accumulator", "float32"))
        elif row == "device":
            answer["device"] = device_time(torch, device, fn)
    return answer


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[1] != "--answer":
        print("usage: python -m harness.bench.assumptions SPEC.json --answer FILE", file=sys.stderr)
        return 2
    with open(argv[0]) as fh:
        spec = json.load(fh)
    channel = Channel(argv[2])
    channel.step(IMPORT_STEP)
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(0)
    with ExitStack() as stack:
        if spec.get("emulate"):  # CI: the MPS profile on CPU tensors under upstream's rules
            em = spec["emulate"]
            device, _ = stack.enter_context(
                emulate(torch, tuple(em.get("macos", (14, 0))), base=em.get("base", "main"))
            )
        else:
            device = devices.profile(spec["device"], torch)
        channel.answer(measure(torch, device, spec, channel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
