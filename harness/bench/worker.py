"""Worker entry point: one fresh process runs every cell of one (build, config, round).

``<build python> -m harness.bench.worker SPEC.json OUT.jsonl`` (standard library + torch only).

SPEC (written by :mod:`harness.runner`)::

    {"device": "cpu", "cells": ["mm/512x512x512/float32", ...], "check": true,
     "reduced_fp32": false, "routes": {"mm": "metal"}, "accumulators": {"metal": "input"},
     "seed": 0, "threads": 1, "save_outputs": null,
     "dtype_support": {"float16": {"mm": null, ...}, ...},   # optional, from harness.bench.provenance
     "record_env": ["OMP_NUM_THREADS"],                      # optional: --env names to record
     "emulate": null,                                        # or {"macos": [13, 5], "base": "v2.6.0"}: conformance
     "timer_sanity": false,                                  # doctor: a timer_sanity record at the end
     "timing": {"warmup_s": 0.05, "measure_s": 0.5, "min_block_s": 0.001},
     "measure_s": {"mm/512x512x512/float32": 0.8},              # optional: per-cell measure_s (adaptive rounds)
     "plant_k": null,                                        # or 0.05: GEMMs run with K grown (compare --plant-k)
     "observe": null,                                        # "inline" | "only": harness.bench.kernels
     "device_probe": false,                                  # true: device records only (probe_device_cell)
     "workloads": ["/.../patches/S/workload.py"]}            # optional: series modules (harness.bench.plugins)

OUT gets one JSON object per line, flushed and fsynced as each is written, so a crash keeps every
finished cell: an ``importing`` record before ``import torch`` (so that a driver that stops a worker
before its start can say whether Python or torch was still starting), a ``start`` record (pid, torch
version, the raw torch-steering variables this process saw, plus the ``record_env`` ones), before each
stage of a cell a ``step`` record (``key``, ``step``: ``inputs`` | ``check`` | ``measure``) so that a
driver that stops a stalled worker can name the cell and the step it stalled in, one ``cell`` record
per cell (``status`` ``ok`` | ``skipped`` | ``failed``, ``reason``, ``measurement`` =
:class:`harness.bench.timer.Measurement`, ``check`` = :class:`harness.bench.accuracy.CheckResult`),
and an ``end`` record; a worker stopped by an exception outside a cell writes an ``error`` record
(``reason``) instead of the ``end`` record (:func:`main`). With ``observe: "inline"`` a cell record
also has ``kernels``: the kernels its untimed first call ran (:func:`harness.bench.kernels.observe`);
with ``observe: "only"`` (a probe process, for devices whose trace would slow timing) the worker times
nothing and writes one ``kernels`` record per cell (:func:`observe_cell`); with ``device_probe`` (a
process of the device's device-time probe variables, :attr:`harness.bench.kernels.Trace.device_env`) it
times nothing on the host and writes one ``device`` record per cell (:func:`probe_device_cell`). With
``save_outputs`` (a path),
every GEMM output is saved there for :mod:`harness.bench.consistency`, whether or not the cell is checked.

The same code runs on every device; what differs is :mod:`harness.bench.devices`. With
``emulate``, the MPS profile runs on CPU tensors under upstream's MPS rules
(:mod:`harness.bench.conformance`), for CI.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import sys
import time
from contextlib import ExitStack

from harness.bench import devices, kernels, plugins, words
from harness.bench.accuracy import FAILED, accumulator, check, status_of
from harness.bench.conformance import emulate
from harness.bench.files import open_nofollow
from harness.bench.provenance import dtype_support, unsupported_reason
from harness.bench.recorded import snapshot
from harness.bench.timer import DEVICE_REPLAY_S, DEVICE_REPLAYS, MAX_BLOCK_CALLS, BlockTimer, measure_device
from harness.bench.workloads import Cell, make_inputs, op_callable, planted, reference


def _emit(fh, record: dict) -> None:
    fh.write(json.dumps(record) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


#: blocks timed on each layout after the first (the cell is warm and sized by then)
LAYOUT_BLOCKS = 3
#: the largest spacer allocated before a further layout, bytes
MAX_SPACER_BYTES = 64 << 20


def layout_bytes(cell: Cell, timing: dict) -> int:
    """Device bytes :func:`measure_layouts` needs besides the cell's own: one copy of the inputs and
    the spacers, when it times more than one layout."""
    layouts = int(timing.get("layouts", 1))
    return cell.peak_bytes() + (layouts - 1) * MAX_SPACER_BYTES if layouts > 1 else 0


#: input placements the device-time unit cycles over (:func:`placed_callable`): a power of two, so that every
#: placement has the same share of a captured unit (a power of two of calls, at least
#: :data:`harness.bench.timer.DEVICE_PILOT_CALLS`)
DEVICE_PLACEMENTS = 8
#: most device bytes the further placements' copies of the inputs take together; a cell whose inputs are larger
#: cycles over fewer placements (a power of two; one: its own inputs)
DEVICE_PLACEMENT_BYTES = 64 << 20
#: the largest spacer allocated before each further placement's copy, bytes
DEVICE_SPACER_BYTES = 4 << 20


def device_placements(input_bytes: int) -> int:
    """How many placements :func:`placed_callable` cycles over for inputs of ``input_bytes`` bytes in all: the
    largest power of two <= :data:`DEVICE_PLACEMENTS` whose further copies fit :data:`DEVICE_PLACEMENT_BYTES`
    (1 for inputs over half of it)."""
    n = DEVICE_PLACEMENTS
    while n > 1 and (n - 1) * input_bytes > DEVICE_PLACEMENT_BYTES:
        n //= 2
    return n


def placed_callable(torch, cell: Cell, inputs: list, torch_device):
    """The cell's call for device time, cycling over several placements of its inputs in device memory.

    Returns ``(fn, placements, kept)``: ``fn()`` runs the cell's op on the next placement in turn (the given
    ``inputs`` first, then :func:`device_placements` - 1 copies, each allocated after a spacer of a random size,
    0-:data:`DEVICE_SPACER_BYTES` bytes); ``kept`` holds the copies and spacers (keep it until the device
    time is taken). A captured unit of ``calls`` calls (a power of two, at least ``placements``) then runs
    every placement ``calls / placements`` times, so a process's device time is the mean over its placements.

    Why: device time of a launch-bound cell can sit at a per-process level that its replays repeat within
    0.1 %: on an H200, mm 1×1024×1024 float32 (cuBLAS gemv) read 8.2-11.7 µs per call from process to
    process (docs/timing.md, "Measured: device time beside host time"), as host time of kernel-bound cells moves
    with the inputs' placement (:func:`measure_layouts`); on an H100 the same cell's time moved 2.8 % over 8
    placements in one process (docs/timing.md, "Measured: device time over 8 placements of the inputs").
    Memory: at most :data:`DEVICE_PLACEMENT_BYTES` of copies and ``placements - 1`` spacers besides the cell's
    own."""
    size = sum(t.numel() * t.element_size() for t in inputs)
    placements = device_placements(size)
    fns, kept, draw = [op_callable(cell, inputs)], [], random.SystemRandom()
    for _ in range(placements - 1):
        kept.append(torch.empty(draw.randrange(DEVICE_SPACER_BYTES), dtype=torch.uint8, device=torch_device))
        copy = [t.clone() for t in inputs]
        kept.append(copy)
        fns.append(op_callable(cell, copy))
    turn = itertools.cycle(fns)
    return (lambda: next(turn)()), placements, kept


def measure_layouts(torch, timer: BlockTimer, cell: Cell, inputs: list, torch_device, timing: dict):
    """Time ``cell`` on ``inputs``, then, unless it is host-bound
    (:attr:`harness.bench.timer.Measurement.host_bound`), on ``timing["layouts"] - 1`` further copies
    of them, each placed elsewhere in device memory: a spacer of a random size (0-64 MiB, kept until
    the cell is done) is allocated before each copy. Returns the
    :class:`harness.bench.timer.Measurement` with one layout per placement (its time: the geometric
    mean of the layouts' medians).

    Why: where the inputs lie (which physical pages, cache slices and DRAM channels back them) moves a
    kernel-bound GEMM's time between processes, and a process can sample placements for a fraction
    of its start-up cost (the layout effect of T. Mytkowicz et al., ASPLOS 2009; C. Curtsinger and
    E. D. Berger, STABILIZER, ASPLOS 2013). On an H200 after 0.1 s of untimed load, the spread
    between processes of GEMM 4096³ fp16 was 0.78 % for one layout and 0.57 % for the mean of three,
    mm 4096×4096×256 TF32 0.35 % → 0.23 % (benchmarks/layout_variance.py, docs/methodology.md).
    Further layouts are timed with the first's block size and duty cycle (``timing["duty"]``).

    Memory: besides the inputs, at most one more copy of them and ``layouts - 1`` spacers
    (:func:`layout_bytes`, counted in the cell's memory check)."""
    timing = dict(timing)
    layouts = int(timing.pop("layouts", 1))
    m = timer.measure(op_callable(cell, inputs), **timing)
    if layouts < 2 or m.host_bound:
        return m
    spacers, draw = [], random.SystemRandom()
    for _ in range(layouts - 1):
        spacers.append(torch.empty(draw.randrange(MAX_SPACER_BYTES), dtype=torch.uint8, device=torch_device))
        inputs = [t.clone() for t in inputs]
        further = timer.measure(
            op_callable(cell, inputs),
            warmup_calls=3,
            warmup_s=0.0,
            measure_s=0.0,
            min_samples=LAYOUT_BLOCKS,
            number=m.number,
            duty=timing.get("duty", 1.0),
        )
        m.add_layout(further)
    return m


def run_cell(
    torch,
    timer: BlockTimer,
    device: devices.DeviceProfile,
    cell: Cell,
    spec: dict,
    unsupported: dict,
    outputs: dict | None = None,
    step=lambda key, name: None,
) -> dict:
    """Measure (and optionally check) one cell; never raises for the cell's own failures.

    With ``outputs`` (a dict), the cell's output, when it is a GEMM, is kept there on the CPU by
    key. ``step(key, name)`` is called before each stage (``inputs``, ``check``, ``measure``).
    """
    record = {"type": "cell", "key": cell.key, "status": "ok", "reason": ""}
    why = unsupported_reason(unsupported, cell.dtype, cell.op)
    if why:
        return {
            **record,
            "status": "skipped",
            "reason": f"{cell.op} in {cell.dtype} unsupported on {spec['device']}: {why}",
        }
    if spec.get("plant_k") and cell.family == "gemm":  # a calibration run: this side does a known extra cost
        cell = planted(cell, spec["plant_k"])
        record["planted_shape"] = list(cell.shape)
    free = device.free_bytes()
    need = cell.peak_bytes() + (cell.peak_bytes() * 2 if spec.get("check") else 0)
    need += layout_bytes(cell, spec.get("timing", {}))
    if free is not None and need > 0.8 * free:
        return {
            **record,
            "status": "skipped",
            "reason": f"needs about {need / 2**30:.2f} GiB, {free / 2**30:.2f} GiB free on {spec['device']}",
        }
    flop_wrong = None
    try:
        step(record["key"], "inputs")
        inputs = make_inputs(cell, device.torch_device, seed=spec.get("seed", 0))
        fn = op_callable(cell, inputs)
        keep = outputs is not None and cell.family == "gemm"
        observe = spec.get("observe") == "inline"
        if spec.get("check") or keep or observe:
            step(record["key"], "check")
            if observe:  # the untimed first call, under the device's trace (harness.bench.kernels)
                out, record["kernels"] = kernels.observe(device.name, torch, fn, device.sync)
            else:
                out = fn()
            if keep:
                outputs[record["key"]] = out.detach().cpu()
            if spec.get("check"):
                reduced = spec.get("reduced_fp32", False)
                result = check(cell, out, reference(cell, inputs), reduced, accumulator(cell, spec))
                record["check"] = result.to_json()
                flop_wrong = plugins.flop_problem(cell)  # a series op's FLOP, cross-checked
            del out
        step(record["key"], "measure")
        try:  # the same device state before every cell, whatever ran before it (devices.cuda_reset)
            device.reset()
        except Exception as exc:  # not the cell's own failure: said as the reset's
            return {**record, "status": "failed", "reason": f"device reset before the cell failed: {words(exc)}"}
        timing = {**spec.get("timing", {})}
        if record["key"] in spec.get("measure_s", {}):
            timing["measure_s"] = spec["measure_s"][record["key"]]
        m = measure_layouts(torch, timer, cell, inputs, device.torch_device, timing)
        placed, placements, kept = (
            placed_callable(torch, cell, inputs, device.torch_device) if device.device_time else (fn, 1, [])
        )
        # beside the host-timed blocks (never raises for the call's failure); the copies go once it is taken
        measure_device(device, placed, m, placements=placements)
        del placed, kept
    except Exception as exc:  # the op's own failure is the cell's result, recorded with its words
        return {**record, "status": "failed", "reason": words(exc)}
    bad = [s for s in m.samples if not (math.isfinite(s) and s > 0)]
    if bad:
        return {**record, "status": "failed", "reason": f"{len(bad)} timing samples are not finite positive seconds"}
    record["measurement"] = m.to_json()
    if record.get("check") and status_of(record["check"]) == FAILED:
        record["status"] = "failed"
        record["reason"] = "check failed: " + record["check"]["reason"]
    elif flop_wrong:
        record["status"], record["reason"] = "failed", flop_wrong
    return record


def observe_cell(torch, device: devices.DeviceProfile, cell: Cell, spec: dict, unsupported: dict) -> dict:
    """A probe process's ``kernels`` record of one cell (``observe: "only"``): inputs, one untraced
    call (one-time set-up: library handles, graph compilation), then one call under the device's trace
    (:func:`harness.bench.kernels.observe`). Nothing is timed. Never raises for the cell's own failures:
    an unsupported dtype, too little memory or the op's exception is the record's ``error``."""
    record = {"type": "kernels", "key": cell.key}
    why = unsupported_reason(unsupported, cell.dtype, cell.op)
    free = device.free_bytes()
    if not why and free is not None and cell.peak_bytes() > 0.8 * free:
        why = f"needs about {cell.peak_bytes() / 2**30:.2f} GiB, {free / 2**30:.2f} GiB free"
    if why:
        return {**record, **kernels.observation(device.name, [], f"not observed: {why}")}
    try:
        fn = op_callable(cell, make_inputs(cell, device.torch_device, seed=spec.get("seed", 0)))
        fn()
        device.sync()
        _, seen = kernels.observe(device.name, torch, fn, device.sync)
    except Exception as exc:  # the op's own failure, in its words
        seen = kernels.observation(device.name, [], words(exc))
    return {**record, **seen}


def probe_device_cell(torch, device: devices.DeviceProfile, cell: Cell, spec: dict, unsupported: dict) -> dict:
    """A device probe process's ``device`` record of one cell (``device_probe: true``): ``device`` (device
    seconds per call, one per group of :data:`harness.bench.timer.DEVICE_REPLAYS`), ``device_method``,
    ``device_calls`` (calls per group) and ``device_note`` (why ``device`` is empty), from
    :func:`harness.bench.kernels.device_times` under the device's trace (mps: the profiler's ``gpu=``,
    :func:`harness.bench.kernels.mps_group_time`); groups last about
    :data:`harness.bench.timer.DEVICE_REPLAY_S` each, at most :data:`harness.bench.timer.MAX_BLOCK_CALLS`
    calls. Nothing is host-timed. Never raises for the cell's own failures: an unsupported dtype, too
    little memory, the op's exception or a trace that gave no device time is the record's ``device_note``."""
    trace = kernels.TRACES[device.name]
    record = {"type": "device", "key": cell.key, "device": [], "device_method": "", "device_calls": 0}
    why = unsupported_reason(unsupported, cell.dtype, cell.op)
    free = device.free_bytes()
    if not why and free is not None and cell.peak_bytes() > 0.8 * free:
        why = f"needs about {cell.peak_bytes() / 2**30:.2f} GiB, {free / 2**30:.2f} GiB free"
    if why:
        return {**record, "device_note": f"no device time ({trace.device_method}): not probed: {why}"}
    try:
        fn = op_callable(cell, make_inputs(cell, device.torch_device, seed=spec.get("seed", 0)))
        found, calls = kernels.device_times(
            trace, torch, fn, device.sync, DEVICE_REPLAYS, DEVICE_REPLAY_S, MAX_BLOCK_CALLS
        )
    except kernels.NoDeviceTime as exc:  # the trace gave none: its reason
        return {**record, "device_note": f"no device time ({trace.device_method}): {exc}"}
    except Exception as exc:  # the op's own failure, in its words
        return {**record, "device_note": f"no device time ({trace.device_method}): {words(exc)}"}
    if not all(math.isfinite(v) and v > 0 for v in found):
        note = f"no device time ({trace.device_method}): {len(found)} values, not all finite positive seconds"
        return {**record, "device_note": note}
    return {**record, "device": found, "device_method": trace.device_method, "device_calls": calls, "device_note": ""}


def main(argv: list[str] | None = None) -> int:
    """Run the worker (module docstring). An exception outside a cell's own measurement (importing torch,
    the device, saving outputs) is recorded first as an ``error`` record (``reason``: ``Type: message``),
    the worker's own words for its failure, then raised (Python prints it and exits with status 1).

    Raises:
        Exception: whatever stopped the worker, after its ``error`` record."""
    argv = sys.argv[1:] if argv is None else argv
    spec_path, out_path = argv
    try:
        return _run(spec_path, out_path)
    except Exception as exc:
        try:
            with open_nofollow(out_path, append=True) as out:
                _emit(out, {"type": "error", "reason": words(exc)})
        except OSError:
            pass  # nowhere to write: the driver quotes stderr instead
        raise


def _run(spec_path: str, out_path: str) -> int:
    with open(spec_path) as fh:
        spec = json.load(fh)
    with open_nofollow(out_path, append=True) as out:  # never through a link (bench.files.open_nofollow)
        _emit(out, {"type": "importing", "module": "torch", "t": time.time()})
    import torch

    torch.manual_seed(spec.get("seed", 0))
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    with open_nofollow(out_path, append=True) as out, ExitStack() as stack:
        _emit(
            out,
            {
                "type": "start",
                "pid": os.getpid(),
                "torch_version": torch.__version__,
                "env": snapshot(names=spec.get("record_env", ())),
                "threads": torch.get_num_threads(),
                "started": time.time(),
            },
        )
        if spec.get("emulate"):
            em = spec["emulate"]
            device, _ = stack.enter_context(
                emulate(torch, tuple(em.get("macos", (14, 0))), base=em.get("base", "main"))
            )
        else:
            device = devices.profile(spec["device"], torch)
        timer = BlockTimer(device)
        # the build's provenance probe already measured it; probe only when run on its own
        unsupported = spec.get("dtype_support") or dtype_support(torch, device.torch_device)
        for path in spec.get("workloads", ()):  # a series' own ops: registered, probed here
            workload = plugins.load(path)
            plugins.register(workload)
            own = dtype_support(torch, device.torch_device, [o.name for o in workload.ops])
            unsupported = {d: {**unsupported.get(d, {}), **own.get(d, {})} for d in {*unsupported, *own}}
        outputs = {} if spec.get("save_outputs") else None
        if spec.get("observe") == "only":  # a probe process: kernels records, no timing
            for key in spec["cells"]:
                _emit(out, observe_cell(torch, device, Cell.from_key(key), spec, unsupported))
            _emit(out, {"type": "end", "finished": time.time()})
            return 0
        if spec.get("device_probe"):  # a device probe process: device records, no host timing
            for key in spec["cells"]:
                _emit(out, probe_device_cell(torch, device, Cell.from_key(key), spec, unsupported))
            _emit(out, {"type": "end", "finished": time.time()})
            return 0
        for key in spec["cells"]:
            _emit(
                out,
                run_cell(
                    torch,
                    timer,
                    device,
                    Cell.from_key(key),
                    spec,
                    unsupported,
                    outputs,
                    lambda k, name: _emit(out, {"type": "step", "key": k, "step": name, "t": time.time()}),
                ),
            )
        if spec.get("timer_sanity") and spec["cells"]:  # doctor: one block of the first cell
            cell = Cell.from_key(spec["cells"][0])
            if not unsupported_reason(unsupported, cell.dtype, cell.op):
                fn = op_callable(cell, make_inputs(cell, device.torch_device))
                _emit(out, {"type": "timer_sanity", "key": cell.key, **timer.sanity(fn, 8)})
        if outputs is not None:  # for harness.bench.consistency; renamed into place when complete
            with open_nofollow(spec["save_outputs"] + ".tmp", binary=True) as fh:
                torch.save(outputs, fh)
            os.replace(spec["save_outputs"] + ".tmp", spec["save_outputs"])
        _emit(out, {"type": "end", "finished": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
