"""What a planted K really costs on the device: CUDA-graph replay of each GEMM cell at K and at the
K that ``compare --plant-k`` gives the patched side (:func:`harness.bench.workloads.planted`).

A calibration run (``compare --plant-k 0.05``) expects every kernel-bound GEMM cell to come out
``slower``. That holds only where the grown K really costs more than the verdict band: tile
quantisation and cuBLAS's choice of kernel can make K' = 1.06·K cost ~0 % (or less) more time. This
script measures that cost independently of the harness's timer, so a GEMM cell that is not
``slower`` can be told apart from a miss of the method. Run once per env config (the variables are
read at start-up)::

    PYTHONPATH=. python3 benchmarks/planted_cost.py --plant 0.05 --out $OUT/planted_cost_default.json
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 PYTHONPATH=. python3 benchmarks/planted_cost.py --out ...

Output: JSON rows ``{key, k, k_planted, graph_s, graph_planted_s, cost}`` (seconds per call from
:func:`benchmarks.cuda_timing.graph_replay`; ``cost`` = planted / plain - 1) and a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_timing import graph_replay  # noqa: E402

from harness.bench.workloads import default_cells, make_inputs, op_callable, planted  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plant", type=float, default=0.05, help="fraction K grows by (as compare --plant-k)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args()
    rows = []
    for cell in default_cells():
        if cell.family != "gemm":
            continue
        times = []
        for c in (cell, planted(cell, args.plant)):
            fn = op_callable(c, make_inputs(c, "cuda", seed=0))
            first = graph_replay(fn, calls=10, replays=3, repeats=3)  # a rough time, to size the replay
            times.append(graph_replay(fn, calls=50, replays=20 if first < 2e-4 else 3, repeats=7))
        rows.append(
            {
                "key": cell.key,
                "k": cell.shape[-1],
                "k_planted": planted(cell, args.plant).shape[-1],
                "graph_s": times[0],
                "graph_planted_s": times[1],
                "cost": times[1] / times[0] - 1,
            }
        )
        print(
            f"{cell.key:34s} K {rows[-1]['k']:5d} -> {rows[-1]['k_planted']:5d}: {times[0] * 1e6:9.1f} µs -> "
            f"{times[1] * 1e6:9.1f} µs ({rows[-1]['cost']:+.1%})",
            flush=True,
        )
    env = {k: v for k, v in os.environ.items() if k.startswith(("TORCH_", "NVIDIA_"))}
    args.out.write_text(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "plant": args.plant,
                "env": env,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
