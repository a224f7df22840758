"""Why host time of a launch-bound cell sits at one of two levels per fresh process (cuda).

On an H100 (torch 2.11.0+cu130) a process is fast or slow on all its launch-bound cells together
(sdpa B1 H8 L512 D64 fp16: 18.5-20.2 µs per call in half the processes, 28.3-31.3 µs in the rest),
while CUDA-graph replay of the same calls moves 0.6-1.6 % between processes (docs/timing.md). Rest
between blocks, CPU placement, ASLR and PYTHONHASHSEED were ruled out there. This script splits the
host path of a call into parts and times each part in the same fresh process, so that the level shows
where it lives:

- ``python_ns``: a pure-Python loop (a function call and an attribute read; no torch): the interpreter
  and the CPU it runs on;
- ``cpu_op_ns``: ``torch.add`` on a 1-element CPU tensor: torch's dispatcher, no CUDA;
- ``launch_ns``: ``x.add_(1)`` on a 1-element CUDA tensor: dispatcher + one kernel launch (the device
  work is ~2 µs, the host sets the block);
- ``empty_ns``: ``torch.empty`` on the device (caching allocator, no launch);
- the cells' host time per call (blocks of back-to-back calls, then synchronize) and their CUDA-graph
  replay time (``graph_*``: 100 calls, 7 replays, by the harness's own ``harness.bench.devices.cuda_graph_time``);
- per process: the CPU it ran on and that CPU's NUMA node, its clock (``/proc/cpuinfo``), the first
  device allocation's address (the caching allocator's first segment), transparent huge pages, and
  the CUDA driver's version.

The parent starts ``--processes`` fresh children one after another (each with a deadline), collects
one JSON line from each, and writes ``host_levels.json`` and ``host_levels.md``: per measure its
median, its spread between processes (sd of log values), its correlation with the sdpa cell's host
level, and the two levels (largest gap in the sorted per-process values). Run on the GPU machine::

    PYTHONPATH=. python3 benchmarks/host_levels.py --processes 12 --out $OUT/host_levels
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: seconds one child may take (import torch, CUDA context, 4 cells): its deadline
CHILD_DEADLINE_S = 180


def _loop_ns(fn, n: int, repeats: int = 7) -> float:
    """Median ns per call of ``fn`` over ``repeats`` loops of ``n`` calls (host clock only)."""
    out = []
    for _ in range(repeats):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        out.append((time.perf_counter_ns() - t) / n)
    return statistics.median(out)


def _cpu_facts() -> dict:
    try:  # field 39 of /proc/self/stat: the CPU the process last ran on
        cpu = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        cpu = -1
    node = None
    for entry in Path(f"/sys/devices/system/cpu/cpu{cpu}").glob("node*"):
        node = int(entry.name[4:])
    mhz = None
    try:
        block = Path("/proc/cpuinfo").read_text().split("\n\n")[cpu]
        mhz = float(next(line.split(":")[1] for line in block.splitlines() if line.startswith("cpu MHz")))
    except (OSError, IndexError, StopIteration, ValueError):
        pass
    thp = None
    try:
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        pass
    return {"cpu": cpu, "node": node, "mhz": mhz, "thp": thp}


def child() -> int:
    facts = {"pid": os.getpid(), "start": _cpu_facts()}

    class Box:
        value = 1

    box = Box()

    def tiny():
        return box.value + 1

    facts["python_ns"] = _loop_ns(tiny, 20000)
    import torch
    import torch.nn.functional as F

    facts["torch"] = torch.__version__
    facts["python_after_import_ns"] = _loop_ns(tiny, 20000)
    one = torch.ones(1)
    facts["cpu_op_ns"] = _loop_ns(lambda: torch.add(one, 1), 5000)
    dev = "cuda"
    first = torch.empty(1, device=dev)
    facts["first_segment"] = hex(first.data_ptr())
    facts["driver"] = torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None
    x = torch.ones(1, device=dev)
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()

    def launch_block_ns() -> float:
        t = time.perf_counter_ns()
        for _ in range(200):
            x.add_(1)
        torch.cuda.synchronize()
        return (time.perf_counter_ns() - t) / 200

    facts["launch_ns"] = statistics.median(launch_block_ns() for _ in range(7))
    facts["empty_ns"] = _loop_ns(lambda: torch.empty(256, device=dev), 5000)
    torch.manual_seed(0)
    a = torch.randn(512, 512, device=dev, dtype=torch.float16)
    q = torch.randn(1, 8, 512, 64, device=dev, dtype=torch.float16)
    xs = torch.randn(1, 4096, device=dev, dtype=torch.float16)
    w = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    from harness.bench.devices import cuda_graph_time

    graph_time = cuda_graph_time(torch)
    cells = {
        "mm512": lambda: torch.mm(a, a),
        "sdpa512": lambda: F.scaled_dot_product_attention(q, q, q),
        "linear1x4096": lambda: F.linear(xs, w),
    }
    for name, fn in cells.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        host = []
        for _ in range(7):
            t = time.perf_counter_ns()
            for _ in range(300):
                fn()
            torch.cuda.synchronize()
            host.append((time.perf_counter_ns() - t) / 300)
        dev_t = graph_time(fn, 100, 7)  # the harness's own device time (harness.bench.devices)
        facts[f"host_{name}_ns"] = statistics.median(host)
        facts[f"graph_{name}_ns"] = statistics.median(dev_t) * 1e9
    facts["python_end_ns"] = _loop_ns(tiny, 20000)
    facts["end"] = _cpu_facts()
    print(json.dumps(facts))
    return 0


def pure_child() -> int:
    """``--pure``: no torch. The pure-Python loop in this process's main thread, in a new thread, after 256 MiB
    of new memory was touched, and in a forked child (its pages shared with this process until written):
    where the level lives (the thread's stack, the heap's pages, or the process as a whole)."""
    import threading

    class Box:
        value = 1

    box = Box()

    def tiny():
        return box.value + 1

    facts = {"pid": os.getpid(), "main_ns": _loop_ns(tiny, 20000)}
    found = {}
    worker = threading.Thread(target=lambda: found.update(ns=_loop_ns(tiny, 20000)))
    worker.start()
    worker.join()
    facts["thread_ns"] = found["ns"]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: measure, report through the pipe, leave at once
        os.write(write, str(_loop_ns(tiny, 20000)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        facts["fork_ns"] = float(fh.read())
    os.waitpid(pid, 0)
    ballast = bytearray(256 << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    fresh_objects = [Box() for _ in range(100000)]
    box = fresh_objects[-1]
    facts["after_alloc_ns"] = _loop_ns(tiny, 20000)
    facts["main_again_ns"] = _loop_ns(tiny, 20000)
    try:
        facts["cpu"] = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        facts["cpu"] = -1
    print(json.dumps(facts))
    return 0


def _sd_log(values: list[float]) -> float:
    logs = [math.log(v) for v in values]
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


def _levels(values: list[float]) -> str:
    """The two levels at the largest relative gap of the sorted values: 'lo-hi (n) | lo-hi (n)'."""
    v = sorted(values)
    if len(v) < 2:
        return ""
    i = max(range(1, len(v)), key=lambda k: v[k] / v[k - 1])
    lo, hi = v[:i], v[i:]
    return f"{lo[0]:.0f}-{lo[-1]:.0f} ({len(lo)}) | {hi[0]:.0f}-{hi[-1]:.0f} ({len(hi)}); gap x{v[i] / v[i - 1]:.2f}"


def _corr(x: list[float], y: list[float]) -> float:
    if len(x) < 3 or statistics.pstdev(x) == 0 or statistics.pstdev(y) == 0:
        return float("nan")
    return statistics.correlation(x, y)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=12)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pure", action="store_true", help="no torch: where the pure-Python level lives")
    args = ap.parse_args()
    if args.child:
        return pure_child() if args.pure else child()
    if not 2 <= args.processes <= 100:
        sys.exit("--processes must be 2-100")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(args.processes):
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--child", "--out", str(args.out), *(["--pure"] if args.pure else [])],
                capture_output=True,
                text=True,
                timeout=CHILD_DEADLINE_S,
            )
        except subprocess.TimeoutExpired:
            print(f"process {i}: past its {CHILD_DEADLINE_S} s deadline", file=sys.stderr)
            continue
        if done.returncode:
            print(f"process {i}: exit {done.returncode}: {done.stderr.strip()[-400:]}", file=sys.stderr)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    (args.out / "host_levels.json").write_text(json.dumps(rows, indent=1) + "\n")
    if args.pure:
        lines = ["| measure | median ns | sd (log) | corr. with main | levels |", "|---|---|---|---|---|"]
        ref = [r["main_ns"] for r in rows]
        for k in ("main_ns", "thread_ns", "fork_ns", "after_alloc_ns", "main_again_ns"):
            v = [r[k] for r in rows]
            med, sd, corr = statistics.median(v), _sd_log(v), _corr(v, ref)
            lines.append(f"| {k} | {med:.1f} | {sd:.1%} | {corr:+.2f} | {_levels(v)} |")
        (args.out / "host_levels_pure.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return 0
    measures = [k for k in rows[0] if k.endswith("_ns")] if rows else []
    ref = [r["host_sdpa512_ns"] for r in rows]
    lines = [
        f"# Host levels per fresh process ({len(rows)} processes, torch {rows[0]['torch'] if rows else '?'})",
        "",
        "| measure | median ns | sd between processes (log) | corr. with host sdpa | levels (ns, processes) |",
        "|---|---|---|---|---|",
    ]
    for k in measures:
        v = [r[k] for r in rows]
        lines.append(f"| {k} | {statistics.median(v):.0f} | {_sd_log(v):.1%} | {_corr(v, ref):+.2f} | {_levels(v)} |")
    lines += ["", "| process | cpu start/end | node | MHz | first segment | sdpa host ns |", "|---" * 6 + "|"]
    for r in rows:
        lines.append(
            f"| {r['pid']} | {r['start']['cpu']}/{r['end']['cpu']} | {r['start']['node']} | {r['start']['mhz']} | "
            f"{r['first_segment']} | {r['host_sdpa512_ns']:.0f} |"
        )
    (args.out / "host_levels.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
