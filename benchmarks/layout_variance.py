"""Where a kernel-bound cell's spread between processes comes from: memory layout or process state?

On an H200 some kernel-bound cells (SDPA causal L512 fp32, 56 µs) differ by 1-3 % between fresh
processes while their blocks inside one process agree within 0.1 % (docs/methodology.md). If the
difference is the placement of the inputs in memory (which physical pages, L2 slices and DRAM
channels back them; the layout effect of T. Mytkowicz et al., "Producing wrong data without doing
anything obviously wrong!", ASPLOS 2009, and C. Curtsinger and E. D. Berger, "STABILIZER:
statistically sound performance evaluation", ASPLOS 2013), then re-allocating the inputs several
times inside one process samples it for a fraction of a process's start-up cost.

Each of ``--processes`` fresh processes measures every cell at ``--layouts`` layouts as the harness
does (:func:`harness.bench.worker.measure_layouts`: a spacer of a random size, 0-64 MiB, kept alive,
then a copy of the inputs), at the harness's duty cycle unless ``--duty`` says otherwise (1: blocks
back to back; results of earlier versions used ``--settle-s`` seconds of untimed load). A host-bound cell gets one
layout and is left out of the table. Per cell the script
prints (standard deviations of log time, i.e. relative spread):

- ``first``: of the first layout's medians across processes (what one layout per process sees);
- ``mean``: of each process's mean over its layouts, across processes;
- ``layout``: pooled, of the layouts inside a process around their process's mean;
- ``ratio``: ``mean / first``; about ``1/sqrt(layouts)`` when layout explains the spread,
  about 1 when the process's own state does.

    PYTHONPATH=. python3 benchmarks/layout_variance.py --device cuda --processes 10 --layouts 6 --out $OUT/layout.json

``--time device`` asks the same of device time (:func:`harness.bench.timer.measure_device`'s unit, its
pilot and its replays, after 0.1 s of untimed calls) for every cell, launch-bound ones included: each
layout is a spacer and a copy of the inputs, captured in a graph of its own. ``--recapture`` keeps the
inputs and only captures the graph again per layout (its private pool: where the outputs lie), which
tells the inputs' placement from the outputs'.

    PYTHONPATH=. python3 benchmarks/layout_variance.py --time device --cells mm/1x1024x1024/float32 --layouts 8
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

CELLS = (
    "sdpa_causal/1x8x512x64/float32",
    "sdpa/1x8x512x64/float16",
    "mm/2048x2048x2048/float16",
    "mm/1024x1024x1024/float32",
    "mm/4096x4096x4096/float16",
    "linear/2048x2048x2048/float32",
)


def child(device: str, cells: list[str], layouts: int, duty: float | None) -> dict:
    """One process: cell key -> list of per-layout steady medians (seconds per call), timed as the
    harness times a GPU cell (:func:`harness.bench.worker.measure_layouts`, ``TIMING["full"]["gpu"]``
    with ``layouts`` and, when given, ``duty``)."""
    import torch

    from harness.bench import devices
    from harness.bench.timer import BlockTimer, layout_medians
    from harness.bench.worker import measure_layouts
    from harness.bench.workloads import Cell, make_inputs
    from harness.plan import TIMING

    prof = devices.profile(device, torch)
    timer = BlockTimer(prof)
    timing = {**TIMING["full"]["cpu" if device == "cpu" else "gpu"], "layouts": layouts}
    if duty is not None:
        timing["duty"] = duty
    out = {}
    for key in cells:
        cell = Cell.from_key(key)
        m = measure_layouts(torch, timer, cell, make_inputs(cell, prof.torch_device), prof.torch_device, timing)
        out[key] = layout_medians(m.samples, m.layouts)
    return out


def device_child(device: str, cells: list[str], layouts: int, recapture: bool) -> dict:
    """One process: cell key -> list of per-layout device seconds per call (median of the replays)."""
    import random

    import torch

    from harness.bench import devices
    from harness.bench.timer import DEVICE_PILOT_CALLS, DEVICE_REPLAYS, device_unit
    from harness.bench.worker import MAX_SPACER_BYTES
    from harness.bench.workloads import Cell, make_inputs, op_callable

    prof = devices.profile(device, torch)
    draw, out = random.SystemRandom(), {}
    for key in cells:
        cell = Cell.from_key(key)
        inputs = make_inputs(cell, prof.torch_device)
        fn = op_callable(cell, inputs)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.1:
            fn()
        prof.sync()
        calls = device_unit(prof.device_time(fn, DEVICE_PILOT_CALLS, 1)[0])
        spacers, per_layout = [], []
        for i in range(layouts):
            if i and not recapture:
                spacers.append(
                    torch.empty(draw.randrange(MAX_SPACER_BYTES), dtype=torch.uint8, device=prof.torch_device)
                )
                inputs = [t.clone() for t in inputs]
                fn = op_callable(cell, inputs)
            per_layout.append(statistics.median(prof.device_time(fn, calls, DEVICE_REPLAYS)))
        out[key] = per_layout
        del spacers
    return out


def sd(x: list[float]) -> float:
    return statistics.stdev(x) if len(x) > 1 else float("nan")


def summarise(per_process: list[dict]) -> list[dict]:
    rows = []
    for key in per_process[0]:
        if any(len(p[key]) < 2 for p in per_process):
            continue
        logs = [[math.log(v) for v in p[key]] for p in per_process]
        means = [statistics.fmean(x) for x in logs]
        within = [v - statistics.fmean(x) for x in logs for v in x]
        dof = sum(len(x) - 1 for x in logs)
        row = {
            "key": key,
            "first": sd([x[0] for x in logs]),
            "mean": sd(means),
            "layout": math.sqrt(sum(v * v for v in within) / dof),
        }
        row["ratio"] = row["mean"] / row["first"]
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--layouts", type=int, default=6)
    parser.add_argument("--duty", type=float, help="busy share of the timed period (default: the harness's)")
    parser.add_argument("--cells", nargs="*", default=list(CELLS))
    parser.add_argument("--time", choices=("host", "device"), default="host")
    parser.add_argument("--recapture", action="store_true", help="device: the same inputs, a new graph per layout")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time == "device" and args.device != "cuda":
        parser.error(f"--time device needs --device cuda (CUDA-graph replay); {args.device} has no device time here")
    if args.child is not None:
        if args.time == "device":
            print(json.dumps(device_child(args.device, args.cells, args.layouts, args.recapture)))
        else:
            print(json.dumps(child(args.device, args.cells, args.layouts, args.duty)))
        return 0
    per_process, seconds = [], []
    for i in range(args.processes):
        cmd = [sys.executable, __file__, "--device", args.device, "--layouts", str(args.layouts), "--child", str(i)]
        cmd += ["--duty", str(args.duty)] if args.duty is not None else []
        cmd += ["--time", args.time] + (["--recapture"] if args.recapture else [])
        t0 = time.monotonic()
        done = subprocess.run([*cmd, "--cells", *args.cells], capture_output=True, text=True, check=True)
        seconds.append(time.monotonic() - t0)
        per_process.append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = summarise(per_process)
    print(f"{'cell':36} {'first':>7} {'mean':>7} {'layout':>7} {'ratio':>6}   ({args.layouts} layouts, {args.time})")
    for r in rows:
        print(f"{r['key']:36} {r['first']:7.2%} {r['mean']:7.2%} {r['layout']:7.2%} {r['ratio']:6.2f}")
    for key in args.cells:  # each process's layouts, microseconds
        print(key)
        for p in per_process:
            print("  " + " ".join(f"{v * 1e6:7.3f}" for v in p[key]))
    print(f"process seconds: median {statistics.median(seconds):.1f}")
    if args.out:
        from harness.fsutil import atomic_write_json

        data = {"time": args.time, "recapture": args.recapture, "rows": rows, "per_process": per_process}
        atomic_write_json(args.out, {**data, "seconds": seconds})
    return 0


if __name__ == "__main__":
    sys.exit(main())
