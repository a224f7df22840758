"""How a kernel-bound cell's time depends on what the GPU did just before: idle, or sustained load.

On an H200 some cells' time between processes follows the schedule, not the build (linear 2048³
TF32: 53-54 µs in processes whose cells were separated by idle gaps, 56 µs in back-to-back
processes; docs/methodology.md, "What moves a kernel-bound cell between processes"). A GPU under a
power limit lowers its clock after seconds of heavy load and raises it after idle, so a cell's time
depends on the load history before it. This script measures that history effect and its time
constant: for each cell and each history (``idle``: ``--idle-s`` seconds without work; ``heavy``:
``--heavy-s`` seconds of back-to-back GEMM 4096³ fp16 calls), it times the cell continuously for
``--seconds`` seconds in blocks of about 10 ms (synchronize + host clock, as
:class:`harness.bench.timer.BlockTimer` does) and prints the median time per call in windows of
``--window-s`` seconds, relative to the last window (the level under sustained load).

When the ``nvidia-ml-py`` module is importable, the SM clock (MHz) and power draw (W) are sampled
between blocks through ``torch.cuda.clock_rate`` / ``torch.cuda.power_draw`` (torch/cuda/__init__.py),
at most every 50 ms.

    PYTHONPATH=. python3 benchmarks/power_state.py --processes 2 --out $OUT/power.json

Each of ``--processes`` fresh processes measures every (cell, history); the JSON keeps every block.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CELLS = (
    "linear/2048x2048x2048/float32",
    "sdpa_causal/1x8x512x64/float32",
    "mm/2048x2048x2048/float16",
)
HEAVY = "mm/4096x4096x4096/float16"


def _nvml(torch):
    """A function returning (SM MHz, W), or None when NVML cannot be read."""
    try:
        torch.cuda.clock_rate()
        torch.cuda.power_draw()
    except Exception:
        return None
    return lambda: (torch.cuda.clock_rate(), torch.cuda.power_draw() / 1000.0)


def _run_for(torch, fn, number: int, seconds: float, nvml=None, duty: float = 1.0) -> list[tuple]:
    """Blocks of ``number`` calls for ``seconds``: [(t since start s, s per call, MHz|None, W|None)].
    With ``duty`` < 1, the GPU idles after each block for ``block * (1 / duty - 1)`` seconds."""
    out, start, last_nvml, sample = [], time.perf_counter(), -1.0, (None, None)
    while True:
        if duty < 1 and out:
            time.sleep(out[-1][1] * number * (1 / duty - 1))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        if nvml and t1 - last_nvml > 0.05:
            sample, last_nvml = nvml(), t1
        out.append((t0 - start, (t1 - t0) / number, *sample))
        if t1 - start >= seconds:
            return out


def _number(torch, fn, block_s: float = 0.01) -> int:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    return max(1, int(block_s / ((time.perf_counter() - t0) / 10)))


def child(cells: list[str], seconds: float, idle_s: float, heavy_s: float, duties: list[float]) -> dict:
    """One process: {cell: {"<history> duty <d>": [(t, s per call, MHz, W), ...]}}."""
    import torch

    from harness.bench.workloads import Cell, make_inputs, op_callable

    nvml = _nvml(torch)
    heavy_cell = Cell.from_key(HEAVY)
    heavy = op_callable(heavy_cell, make_inputs(heavy_cell, "cuda"))
    heavy_n = _number(torch, heavy)
    out = {}
    for key in cells:
        cell = Cell.from_key(key)
        fn = op_callable(cell, make_inputs(cell, "cuda"))
        number = _number(torch, fn)
        out[key] = {}
        for duty in duties:
            for history in ("idle", "heavy"):
                if history == "idle":
                    torch.cuda.synchronize()
                    time.sleep(idle_s)
                else:
                    _run_for(torch, heavy, heavy_n, heavy_s)
                out[key][f"{history} duty {duty:g}"] = _run_for(torch, fn, number, seconds, nvml, duty)
    return out


def windows(blocks: list[tuple], window_s: float) -> list[tuple[float, float, float | None]]:
    """(window start s, median s per call, median MHz or None) per window of ``window_s``."""
    rows, i = [], 0
    while i < len(blocks):
        start = int(blocks[i][0] / window_s) * window_s
        group = [b for b in blocks[i:] if start <= b[0] < start + window_s]
        i += len(group)
        mhz = [b[2] for b in group if b[2] is not None]
        rows.append((start, statistics.median(b[1] for b in group), statistics.median(mhz) if mhz else None))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--cells", nargs="*", default=list(CELLS))
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per (cell, history)")
    parser.add_argument("--idle-s", type=float, default=2.0)
    parser.add_argument("--heavy-s", type=float, default=3.0)
    parser.add_argument("--window-s", type=float, default=0.25)
    parser.add_argument("--duty", type=float, nargs="*", default=[1.0], help="busy share of the timed period")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.cells, args.seconds, args.idle_s, args.heavy_s, args.duty)))
        return 0
    per_process = []
    for _ in range(args.processes):
        cmd = [sys.executable, __file__, "--child", "--seconds", str(args.seconds)]
        cmd += ["--idle-s", str(args.idle_s), "--heavy-s", str(args.heavy_s), "--cells", *args.cells]
        cmd += ["--duty", *map(str, args.duty)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        per_process.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for p, result in enumerate(per_process):
        for key, by_history in result.items():
            for history, blocks in by_history.items():
                rows = windows(blocks, args.window_s)
                last = rows[-1][1]
                cells = " ".join(f"{r[1] / last - 1:+.1%}" for r in rows)
                mhz = " ".join(f"{r[2]:.0f}" for r in rows if r[2] is not None)
                tail = f" | MHz {mhz}" if mhz else ""
                print(f"p{p} {key:34} {history:14} last {last * 1e6:8.2f} us | {cells}{tail}")
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "per_process": per_process}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
