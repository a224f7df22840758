"""Calibrate the harness's cuda timer against triton's do_bench and CUDA-graph replay (H200).

For each cell (pytorch PR 167424's GEMM and SDPA cells plus large ones) the same callable is timed by:

- ``harness``: :class:`harness.bench.timer.BlockTimer` (synchronize + host clock around blocks of
  back-to-back calls, the one method the harness uses on every device; also its launch-bound label);
- ``events``: CUDA events around the same blocks (the harness's former cuda method), for contrast;
- ``do_bench``: ``triton.testing.do_bench(fn, return_mode="median")`` (events around each call,
  L2 flushed before each);
- ``graph``: a CUDA graph of 50 captured calls, replayed; events around 20 replays (no launch
  gaps at all: the reference for kernel-bound device time);
- ``seed``: pytorch PR 167424's method (host clock, sync after each call, mean of 8) for contrast.

Acceptance: harness within 5 % of graph replay for cells whose kernels run >= 50 µs;
cells below that are labelled launch-bound. Run on the device::

    PYTHONPATH=. python3 benchmarks/cuda_timing.py --out $OUT/cuda_timing
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from harness.bench.devices import profile
from harness.bench.timer import BlockTimer
from harness.bench.workloads import Cell, make_inputs, op_callable

CELLS = [
    Cell("mm", (512, 512, 512), "float16"),
    Cell("mm", (1024, 1024, 1024), "float16"),
    Cell("mm", (2048, 2048, 2048), "float16"),
    Cell("mm", (4096, 4096, 4096), "float16"),
    Cell("mm", (8192, 8192, 8192), "bfloat16"),
    Cell("mm", (1, 1024, 1024), "float16"),
    Cell("linear", (2048, 2048, 2048), "float16"),
    Cell("bmm", (4, 1024, 1024, 1024), "float16"),
    Cell("mm", (4096, 4096, 4096), "float32"),
    Cell("sdpa", (1, 8, 512, 64), "float16"),
    Cell("sdpa", (2, 16, 1024, 64), "float16"),
    Cell("sdpa", (4, 32, 4096, 128), "bfloat16"),
]
KERNEL_BOUND_S = 50e-6


def graph_replay(fn, calls: int = 50, replays: int = 20, repeats: int = 7) -> float:
    """Median seconds per call of a CUDA graph holding ``calls`` captured calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e-3 / (calls * replays))
    return statistics.median(per_call)


def event_blocks(fn, number: int, repeats: int = 15) -> float:
    """Median seconds per call of blocks of ``number`` calls timed with CUDA events."""
    per_call = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e-3 / number)
    return statistics.median(per_call)


def seed_method(fn, warmup: int = 3, iterations: int = 8) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t0)
    return statistics.mean(samples)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True, help="writes <out>.json and <out>.md")
    args = parser.parse_args()
    import triton.testing

    timer = BlockTimer(profile("cuda", torch))
    rows = []
    for cell in CELLS:
        fn = op_callable(cell, make_inputs(cell, "cuda"))
        m = timer.measure(fn, warmup_s=0.2, measure_s=1.0, min_block_s=1e-2)
        row = {
            "cell": cell.key,
            "label": f"{cell.op} {cell.label} {cell.dtype}",
            "flop": cell.flop,
            "harness_s": m.median,
            "harness_enqueue_s": statistics.median(m.enqueue),
            "number": m.number,
            "launch_bound": m.launch_bound,
            "samples": len(m.samples),
            "do_bench_s": triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e-3,
            "graph_s": graph_replay(fn, replays=20 if m.median < 2e-4 else 3),
            "events_s": event_blocks(fn, m.number),
            "seed_s": seed_method(fn),
            "overhead_s": m.overhead_s,
        }
        row["harness_vs_graph"] = row["harness_s"] / row["graph_s"] - 1
        row["harness_vs_events"] = row["harness_s"] / row["events_s"] - 1
        row["kernel_bound"] = row["graph_s"] >= KERNEL_BOUND_S
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    meta = {
        "torch": torch.__version__,
        "git": torch.version.git_version,
        "gpu": torch.cuda.get_device_name(0),
        "triton": triton.__version__,
    }
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        f"GPU {meta['gpu']}, torch {meta['torch']} ({meta['git'][:12]}), triton {meta['triton']}",
        "",
        "| cell | graph replay µs | harness µs | harness vs graph | harness vs events | harness label | do_bench µs | "
        "seed method µs | harness TFLOP/s | graph TFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        label = "launch-bound" if r["launch_bound"] else "device-bound"
        lines.append(
            f"| {r['label']} | {r['graph_s'] * 1e6:.1f} | {r['harness_s'] * 1e6:.1f} | "
            f"{r['harness_vs_graph']:+.1%} | {r['harness_vs_events']:+.1%} | {label} | "
            f"{r['do_bench_s'] * 1e6:.1f} | {r['seed_s'] * 1e6:.1f} | "
            f"{r['flop'] / r['harness_s'] / 1e12:.1f} | {r['flop'] / r['graph_s'] / 1e12:.1f} |"
        )
    ok = all(abs(r["harness_vs_graph"]) <= 0.05 for r in rows if r["kernel_bound"])
    labelled = all(r["launch_bound"] for r in rows if not r["kernel_bound"])
    lines += [
        "",
        f"kernel-bound cells (graph >= 50 µs) within 5 % of graph replay: {ok}; "
        f"cells below 50 µs labelled launch-bound: {labelled}",
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
