"""What sets a kernel-bound cell's per-process level: the cells before it, or the process itself?

On the H200, SDPA causal 1x8x512x64 fp32 (~56 µs a call) sits at one of a few levels per worker
process (54.6 / 55.7 / 57.0 µs, a between-process spread of about 1.5 %), while its three input
layouts inside a process agree within 0.3 % and, alone in a fresh process, it spread 0.4 %
(docs/methodology.md, "What moves a kernel-bound cell between processes", items 5 and 6). Each of
``--processes`` fresh processes here runs the default cuda matrix through the harness's own
:func:`harness.bench.worker.run_cell` (checks on, the harness's timing), and times the probe cell
(each time on the harness's 3 layouts) at these points of the same process (:data:`POINTS`):

- ``first``: before any other cell (a fresh process, as "alone");
- ``matrix``: in its own place in the matrix (what a compare run records; since the worker resets the
  device before each cell, ``devices.cuda_reset``, this point includes that reset: the committed
  files ``docs/calibration/h200-sdpa-level*-2026-12-04.json`` were made before it, without);
- ``last``: again after the matrix, on fresh inputs;
- ``emptied``: after ``torch.cuda.empty_cache()``, behind 1-63 small-pool spacer blocks (the probe's
  inputs and output are <= 1 MiB: the caching allocator's small pool, which the harness's large
  spacers do not move);
- ``small6`` / ``large6``: 6 layouts as the harness places them (small-pool clones) / in large-pool
  blocks behind random 0-64 MiB spacers;
- ``gemm``: after 3 x mm 4096³ fp16 (tiles on every SM); ``l1024_gemm``: after the matrix's next cell
  and then those GEMMs; ``elementwise``: after that cell and 3 x an elementwise add on 256 MiB.

With ``--device cpu`` it is a smoke test (the quick fp32 matrix, small stand-ins for the GEMM and the
next cell). Results: docs/methodology.md, "What the kernels before a cell leave behind".

Per point the script prints the standard deviation of log time between processes and the
correlation of each point with ``first`` across processes: a level the process carries from its
start shows up at every point (correlation near 1); a level the matrix leaves behind only after it.

    PYTHONPATH=. python3 benchmarks/sdpa_level.py --processes 12 --out $OUT/sdpa-level.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness.bench import devices
from harness.bench.provenance import dtype_support
from harness.bench.timer import BlockTimer, layout_medians
from harness.bench.worker import measure_layouts, run_cell
from harness.bench.workloads import Cell, default_cells, make_inputs, op_callable
from harness.plan import TIMING

PROBE = "sdpa_causal/1x8x512x64/float32"
#: seconds one child process may take (a default cuda matrix takes ~20 s on an H200), and one nvidia-smi read
CHILD_S = 300
NVIDIA_SMI_S = 10
POINTS = ("first", "matrix", "last", "emptied", "small6", "large6", "gemm", "l1024_gemm", "elementwise")
#: bytes above which the CUDA caching allocator serves a block from its large pool
#: (kSmallSize, c10/cuda/CUDACachingAllocator.cpp); the probe's inputs are exactly 1 MiB each
SMALL_POOL_MAX = 1 << 20
#: a GEMM that runs on every SM with large shared-memory tiles, and the matrix's cell after the probe
BIG = {"cuda": "mm/4096x4096x4096/float16", "cpu": "mm/256x256x256/float32"}
L1024 = {"cuda": "sdpa_causal/2x16x1024x64/float32", "cpu": "sdpa_causal/1x8x256x64/float32"}


def _probe(torch, timer, prof, timing, seed, small_spacers=0):
    cell = Cell.from_key(PROBE)
    held = [torch.empty(1 << 19, dtype=torch.uint8, device=prof.torch_device) for _ in range(small_spacers)]
    inputs = [t.clone() for t in make_inputs(cell, prof.torch_device, seed=seed)]
    m = measure_layouts(torch, timer, cell, inputs, prof.torch_device, timing)
    del held
    return layout_medians(m.samples, m.layouts)


def _placed(torch, timer, prof, timing, layouts, large):
    """The probe after the matrix on ``layouts`` placements: ``large``: each input copied into a
    large-pool block (padded past 1 MiB, behind a random 0-64 MiB spacer, so each layout lies
    elsewhere in device memory); else as the harness places further layouts (small-pool clones)."""

    cell = Cell.from_key(PROBE)
    base = make_inputs(cell, prof.torch_device, seed=0)
    draw, held, medians = random.SystemRandom(), [], []
    for _ in range(layouts):
        if large:
            held.append(torch.empty(draw.randrange(64 << 20), dtype=torch.uint8, device=prof.torch_device))
            inputs = []
            for t in base:
                buf = torch.empty(t.numel() + SMALL_POOL_MAX // t.element_size(), dtype=t.dtype, device=t.device)
                inputs.append(buf[: t.numel()].view(t.shape).copy_(t))
                held.append(buf)
        else:
            inputs = [t.clone() for t in base]
        m = timer.measure(op_callable(cell, inputs), **{k: v for k, v in timing.items() if k != "layouts"})
        medians.append(layout_medians(m.samples, m.layouts)[0])
    return medians


def _clock() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,temperature.gpu,power.draw", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_S,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):  # no reading beside this point (recorded as "")
        return ""


def child(index: int, device: str = "cuda") -> dict:
    """One process: point -> per-layout medians of the probe cell, seconds per call."""
    import torch

    torch.manual_seed(0)
    prof = devices.profile(device, torch)
    timer = BlockTimer(prof)
    timing = dict(TIMING["full"]["cpu" if device == "cpu" else "gpu"])
    spec = {"device": device, "check": True, "seed": 0, "timing": timing}
    unsupported = dtype_support(torch, prof.torch_device)
    out = {"first": _probe(torch, timer, prof, timing, 0)}
    for cell in default_cells(("float32",), quick=True) if device == "cpu" else default_cells():
        record = run_cell(torch, timer, prof, cell, spec, unsupported)
        if cell.key == PROBE and record["status"] == "ok":
            meas = record["measurement"]
            out["matrix"] = layout_medians(meas["samples"], meas.get("layouts", []))
    out["last"] = _probe(torch, timer, prof, timing, 0)
    prof.sync()
    if device == "cuda":
        torch.cuda.empty_cache()
    out["emptied"] = _probe(torch, timer, prof, timing, 0, small_spacers=random.SystemRandom().randrange(1, 64))
    out["clock"] = [_clock()]
    out["small6"] = _placed(torch, timer, prof, timing, 6, large=False)
    out["clock"].append(_clock())
    out["large6"] = _placed(torch, timer, prof, timing, 6, large=True)
    out["clock"].append(_clock())
    big = op_callable(
        Cell.from_key(BIG[device]),
        make_inputs(Cell.from_key(BIG[device]), prof.torch_device),
    )
    l1024 = op_callable(
        Cell.from_key(L1024[device]),
        make_inputs(Cell.from_key(L1024[device]), prof.torch_device),
    )
    x = torch.ones(1 << (26 if device == "cuda" else 16), device=prof.torch_device)

    def after(*fns):
        for fn in fns:
            for _ in range(3):
                fn()
        prof.sync()
        return _probe(torch, timer, prof, timing, 0)

    out["gemm"] = after(big)
    out["l1024_gemm"] = after(l1024, big)
    out["elementwise"] = after(l1024, lambda: x.add_(1.0))
    q = torch.randn(1, 8, 512, 64, device=prof.torch_device)
    out["backend"] = int(torch._fused_sdp_choice(q, q, q, None, 0.0, True))
    return out


def _corr(x: list[float], y: list[float]) -> float:
    try:
        return statistics.correlation(x, y)
    except statistics.StatisticsError:
        return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=12)
    parser.add_argument(
        "--device", default="cuda", help="cuda (the measurement) or cpu (a smoke test: the quick fp32 matrix)"
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 2 <= args.processes <= 1000:
        parser.error(f"--processes {args.processes}: give 2 to 1000 (a spread between processes needs two)")
    if args.child is not None:
        print(json.dumps(child(args.child, args.device)))
        return 0
    per_process, seconds = [], []
    for i in range(args.processes):
        t0 = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--device", args.device, "--child", str(i)],
                capture_output=True,
                text=True,
                check=True,
                timeout=CHILD_S,
            )
        except subprocess.TimeoutExpired:
            sys.exit(f"error: child process {i} did not finish within {CHILD_S} s (CHILD_S)")
        except subprocess.CalledProcessError as exc:
            tail = (exc.stderr.strip().splitlines() or [""])[-1]
            sys.exit(f"error: child process {i} exited with status {exc.returncode}: {tail}")
        seconds.append(time.monotonic() - t0)
        per_process.append(json.loads(done.stdout.strip().splitlines()[-1]))
    logs = {p: [statistics.fmean(math.log(v) for v in r[p]) for r in per_process] for p in POINTS}
    print(f"{'point':8} {'median µs':>10} {'sd between':>11} {'corr w/ first':>14}")
    for p in POINTS:
        med = statistics.median(math.exp(v) for v in logs[p]) * 1e6
        print(f"{p:8} {med:10.2f} {statistics.stdev(logs[p]):11.2%} {_corr(logs['first'], logs[p]):14.2f}")
    print("per process (µs, mean of layouts):")
    for r in per_process:
        print(" ", "  ".join(f"{p}={math.exp(statistics.fmean(math.log(v) for v in r[p])) * 1e6:6.2f}" for p in POINTS))
    for p in POINTS:
        within = [v - statistics.fmean(x) for x in ([math.log(v) for v in r[p]] for r in per_process) for v in x]
        dof = sum(len(r[p]) - 1 for r in per_process)
        if dof:
            print(f"{p}: layouts inside a process sd {math.sqrt(sum(w * w for w in within) / dof):.2%}")
    print("clocks (after emptied / small6 / large6):", [r.get("clock") for r in per_process[:4]])
    print(
        f"backend: {sorted({r['backend'] for r in per_process})}; "
        f"process seconds: median {statistics.median(seconds):.1f}"
    )
    if args.out:
        args.out.write_text(json.dumps({"per_process": per_process, "seconds": seconds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
