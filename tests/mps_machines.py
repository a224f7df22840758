"""Synthetic runs of the MPS default matrix on several Macs, for merge's scale (tests/test_merge.py and
benchmarks/merge_scale.py): the series' four configs x every default cell, 6 rounds, built from the cpu
contrasts example's shape, each machine with its own chip, GPU cores and macOS in its provenance."""

from __future__ import annotations

import json
import random
from pathlib import Path

from harness.bench.workloads import DTYPES, default_cells
from harness.manifest import load_series

CONTRASTS = Path(__file__).resolve().parent.parent / "docs" / "examples" / "cpu-contrasts" / "results.json"


def mps_run(slow_metal: bool, bfloat16: bool) -> dict:
    """One machine's results.json (a dict): 1 ms per call ± 0.4 % (seeded by build, config, cell and round);
    under PREFER_METAL GEMM takes 1.5x the time where ``slow_metal`` (M1/M2-like); no bfloat16 cells unless
    ``bfloat16``."""
    ev = load_series("mps-gemm-prefer-fast-math").evidence
    configs = {c.name: dict(c.env) for c in ev.profiles("mps") if c.name in ev.default_configs("mps")}
    cells = [c.key for c in default_cells(DTYPES) if bfloat16 or c.dtype != "bfloat16"]
    data = json.loads(CONTRASTS.read_text())
    data["run"].update(device="mps", configs=list(configs), cells=cells, rounds=6)
    data["configs"] = {n: {"name": n, "env": e, "about": "", "reduced_fp32": False} for n, e in configs.items()}
    template = next(iter(data["processes"][0]["cells"].values()))
    slow = {("stock", "fast_math+prefer_metal"), ("stock", "all"), ("patched", "fast_math+prefer_metal")}
    procs = []
    for rnd in range(6):
        for build in ("stock", "patched"):
            for config in configs:
                proc = {**data["processes"][0], "build": build, "config": config, "round": rnd, "cells": {}}
                for key in cells:
                    factor = (
                        1.5 if slow_metal and key.split("/")[0] in ("mm", "addmm") and (build, config) in slow else 1
                    )
                    t = 1e-3 * factor * (1 + random.Random(f"{build}{config}{key}{rnd}").uniform(-0.004, 0.004))
                    proc["cells"][key] = {
                        **template,
                        "measurement": {**template["measurement"], "median": t, "samples": [t]},
                    }
                procs.append(proc)
    data.update(processes=procs, evidence=ev.to_json())
    data["run"]["order"] = [[p["round"], p["build"], p["config"]] for p in procs]
    data.pop("consistency")
    return data


def write_machines(folder: Path, n: int) -> list[Path]:
    """``n`` machines' runs as ``folder/results-m<i>/results.json`` (i from 1): the first 4 slow under Metal
    (``mps_run``'s slow_metal), the 10th without bfloat16; machine i is an "Apple M<i>" with 9 + i GPU
    cores on macOS 15.1. Returns the run folders."""
    runs = []
    for i in range(n):
        data = mps_run(slow_metal=i < 4, bfloat16=i != 9)
        for build in data["builds"].values():
            prov = build["provenance"]
            prov.update(device="mps", gpu_name=f"Apple M{i + 1}, {10 + i} GPU cores", cpu_name=f"Apple M{i + 1}")
            prov["mac"], prov["collect_env"] = {"model": f"Mac{i}", "macos_build": "24B83"}, None
            prov["os"]["macos_product_version"] = "15.1"
        run = folder / f"results-m{i + 1}"
        run.mkdir(parents=True, exist_ok=True)
        (run / "results.json").write_text(json.dumps(data))
        runs.append(run)
    return runs
