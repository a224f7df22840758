"""Planted defects against the accuracy and consistency checks: every check must be able to fail.

For every GEMM cell of each device's default matrix (cpu, cuda, and mps under the conformance mode:
the cells bfloat16 needs macOS 14 for go through :func:`harness.bench.provenance.dtype_support` under
:func:`harness.bench.conformance.emulate`), every env config of the device (the MPS series' own
among them) and every base's accumulator for the config's route (v2.6.0, main, and a build whose base
could not be told), outputs are planted wrong the way a broken kernel is wrong (:data:`MUTATIONS`).
Each must fail the accuracy check wherever the cell's bound is informative
(:func:`harness.bench.accuracy.informative`); a planted wrong side must fail the consistency check
of the device's pair likewise. The correct output must never fail. The catch table is printed in the
test summary (tests/conftest.py ``pytest_terminal_summary``).

Cost: the bound depends on dtype and K only, so each cell is computed at its real K with at most 16
rows and 64 columns (the same inputs' scale, K^-1/4, as :func:`harness.bench.workloads.make_inputs`).
The one mutation whose error depends on the row count (one row of R taken from another: ≈ √(2/R)) is
checked at the real R, on the small block's rows tiled to R (‖Y‖² = R·E‖y_i‖², rows being i.i.d.).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from harness import report
from harness.bench import accuracy as acc
from harness.bench.conformance import emulate
from harness.bench.consistency import config_bound, judge_pair
from harness.bench.provenance import dtype_support, unsupported_reason
from harness.bench.worker import accumulator as worker_accumulator
from harness.bench.workloads import Cell, default_cells, make_inputs, op_callable, reference
from harness.evidence import for_run
from harness.manifest import load_series

MUTATIONS = (
    "all zeros",
    "transposed operand",
    "one row from another",
    "last 1/8 of K dropped",
    "previous cell's output",
    "NaN",
)
DEVICES = ("cpu", "cuda", "mps")
#: rows and columns of the computed block (the real K is kept); columns of the rows tiled to the real R
ROWS, COLS, TILED_COLS = 16, 32, 16
ROOT = Path(__file__).resolve().parent.parent


def evidence():
    return for_run(load_series("mps-gemm-prefer-fast-math"), [])


def proxy(cell: Cell) -> Cell:
    """``cell`` at its real K with at most ROWS rows (one batch) and COLS columns."""
    if cell.op == "bmm":
        _, m, n, k = cell.shape
        return Cell("bmm", (1, min(m, ROWS), min(n, COLS), k), cell.dtype)
    m, n, k = cell.shape
    return Cell(cell.op, (min(m, ROWS), min(n, COLS), k), cell.dtype)


def gemm_cells(device: str) -> list[Cell]:
    cells = [c for c in default_cells() if c.family == "gemm"]
    if device != "mps":
        return cells
    with emulate(torch) as (prof, _):
        support = dtype_support(torch, prof.torch_device)
    return [c for c in cells if not unsupported_reason(support, c.dtype, c.op)]


def previous(cells: list[Cell], i: int) -> Cell:
    """The stale output a broken kernel leaves: the nearest earlier GEMM cell (cyclically) with the same
    output shape, else the nearest earlier one. The same op and shape in another dtype is skipped: its
    inputs are this cell's values rounded otherwise (make_inputs), so its product is this one's."""
    earlier = [cells[(i - d) % len(cells)] for d in range(1, len(cells))]
    earlier = [c for c in earlier if (c.op, c.shape) != (cells[i].op, cells[i].shape)]
    same = [c for c in earlier if c.output_shape() == cells[i].output_shape()]
    return (same or earlier)[0]


def _second_operand(inputs: list) -> int:
    return max(i for i, t in enumerate(inputs) if t.dim() >= 2)


def _transposed(t):
    """``t`` read with the other layout: ``t.view(..., cols, rows).mT`` (``tᵀ`` for a square ``t``)."""
    return t.reshape(*t.shape[:-2], t.shape[-1], t.shape[-2]).transpose(-1, -2)


def _dropped(t, k: int):
    """``t`` without the last K/8 of every dimension of length K (the reduction: unique in a proxy)."""
    keep = k - k // 8
    for dim, size in enumerate(t.shape):
        if size == k:
            t = t.narrow(dim, 0, keep)
    return t


def _tiled(t, rows: int):
    flat = t.reshape(-1, t.shape[-1])[:, :TILED_COLS]
    return flat.repeat(math.ceil(rows / flat.shape[0]), 1)[:rows]


def planted(cell: Cell, device) -> tuple:
    """(correct output, float64 reference, {mutation: (output, reference) or None when not applicable})
    for ``cell``, computed at :func:`proxy` size on ``device``."""
    small = proxy(cell)
    inputs = make_inputs(small, device)
    out = op_callable(small, inputs)()
    ref = reference(small, inputs)
    k = cell.reduction
    second = _second_operand(inputs)
    swapped = [_transposed(t) if i == second else t for i, t in enumerate(inputs)]
    shortened = [_dropped(t, k) for t in inputs]
    nan = out.clone()
    nan.view(-1)[0] = float("nan")
    rows = acc.output_rows(cell)
    one_row = None
    if rows >= 2:
        wrong = _tiled(out, rows).clone()
        wrong[0] = wrong[1]
        one_row = (wrong, _tiled(ref, rows))
    return (
        out,
        ref,
        {
            "all zeros": (torch.zeros_like(out), ref),
            "transposed operand": (small.spec.call(*swapped)(), ref),
            "one row from another": one_row,
            "last 1/8 of K dropped": (small.spec.call(*shortened)(), ref),
            "NaN": (nan, ref),
        },
    )


def stale(cell: Cell, before: Cell, outputs: dict, ref):
    """(output, reference) of the previous cell's output planted in ``cell``: its proxy output when the
    real output shapes agree, else tensors of the real shapes (expanded, no memory) that the shape
    check refuses."""
    if before.output_shape() == cell.output_shape():
        return outputs[before.key].to(getattr(torch, cell.dtype)), ref
    return torch.zeros(()).expand(before.output_shape()), torch.zeros((), dtype=torch.float64).expand(
        cell.output_shape()
    )


def settings(device: str, ev) -> list[tuple[str, str, dict]]:
    """(config, base label, the config's JSON with that base's ``routes`` of a stock build and its
    ``accumulators``) for every config of the device and every base the config's route depends on
    (``unknown``: a build whose base is not told, held to the series-wide routes)."""
    out = []
    for config in ev.profiles(device):
        bases = [b["ref"] for b in ev.bases] + [None] if config.routes else ["any"]
        for ref in bases:
            accumulators = ev.accumulators(ref if ref != "any" else None)
            told = ev.routes_of(device, ref if ref != "any" else None, False)
            routes = told[config.name] if told else dict(config.routes)
            out.append(
                (config.name, ref or "unknown", {**config.to_json(), "routes": routes, "accumulators": accumulators})
            )
    return out


def accumulator_of(cell: Cell, config: dict) -> str:
    """The accumulator the worker holds ``cell`` to under ``config`` (its own code, not a copy of it)."""
    return worker_accumulator(cell, config)


#: cell key -> :func:`planted` on the host (shared by the cpu and cuda matrices, which are the same cells)
_HOST: dict = {}


def run_device(device: str, ev) -> dict:
    """Every (cell, config, base) check of ``device`` against every planted mutation; returns the tallies."""
    cells = gemm_cells(device)
    configs = settings(device, ev)
    by_name = {name: config for name, _, config in configs}
    pair = ev.consistency_pair(device)
    tally = {m: {"caught": 0, "informative": 0, "uninformative": 0, "n/a": 0, "missed": []} for m in MUTATIONS}
    tally["consistency"] = {m: {"caught": 0, "informative": 0, "uninformative": 0, "missed": []} for m in MUTATIONS}
    computed, false_failures = {}, []
    if device == "mps":  # the outputs are made, and the correct ones checked, under the MPS rules
        with emulate(torch) as (prof, _):
            for c in cells:
                out, ref, plants = planted(c, prof.torch_device)
                for reduced, accumulator in {(s["reduced_fp32"], accumulator_of(c, s)) for _, _, s in configs}:
                    if acc.check(c, out, ref, reduced, accumulator).status == acc.FAILED:
                        false_failures.append(f"mps {c.key} {accumulator}: the correct output fails")
                host = {m: None if p is None else (p[0].cpu(), p[1]) for m, p in plants.items()}
                computed[c.key] = (out.cpu(), ref, host)
                torch.mps.synchronize()  # the worker's rule too: bounded device calls between syncs
    else:  # cpu and cuda cells are computed alike here: once
        for c in cells:
            computed[c.key] = _HOST[c.key] = _HOST.get(c.key) or planted(c, "cpu")
    outputs = {key: value[0] for key, value in computed.items()}
    for i, cell in enumerate(cells):
        out, ref, plants = computed[cell.key]
        plants = {**plants, "previous cell's output": stale(cell, previous(cells, i), outputs, ref)}
        judged = {}  # (mutation, reduced_fp32, accumulator) -> CheckResult: configs that share a bound share it
        for config_name, base, config in configs:
            reduced, accumulator = config["reduced_fp32"], accumulator_of(cell, config)
            if (None, reduced, accumulator) not in judged:
                judged[None, reduced, accumulator] = acc.check(cell, out, ref, reduced, accumulator)
            good = judged[None, reduced, accumulator]
            if good.status == acc.FAILED:
                false_failures.append(f"{device} {config_name} {base} {cell.key}: {good.reason}")
            for mutation in MUTATIONS:
                row = tally[mutation]
                if plants[mutation] is None:
                    row["n/a"] += 1
                    continue
                if (mutation, reduced, accumulator) not in judged:
                    judged[mutation, reduced, accumulator] = acc.check(cell, *plants[mutation], reduced, accumulator)
                result = judged[mutation, reduced, accumulator]
                told = acc.informative(result.bound, cell)
                row["informative" if told else "uninformative"] += 1
                row["caught"] += result.status == acc.FAILED
                if told and result.status != acc.FAILED:
                    row["missed"].append(f"{device} {config_name} {base} {cell.key}: {result.rel_error}")
        if pair is None or not all(name in by_name for name in pair):
            continue
        paired = {}  # (mutation, order, bound) -> verdict: bases that give one bound share it
        for base in sorted({b for _, b, _ in configs}):
            sides = [next((c for n, b, c in configs if n == name and b in (base, "any")), None) for name in pair]
            if None in sides:
                continue
            limit = config_bound(cell, sides[0]) + config_bound(cell, sides[1])
            x, y = out.cpu().to(torch.float64), out.cpu().to(torch.float64)
            if judge_pair(cell, x, y, limit)["status"] == acc.FAILED:
                false_failures.append(f"{device} consistency {base} {cell.key}")
            for mutation in MUTATIONS:
                if plants[mutation] is None:
                    continue
                wrong, side_ref = plants[mutation]
                right = out if wrong.shape == out.shape else _tiled(out, wrong.shape[0])
                if wrong.shape != side_ref.shape:  # the stale output of another shape
                    right = torch.zeros(()).expand(side_ref.shape)
                row = tally["consistency"][mutation]
                for order, (a, b) in enumerate(((wrong, right), (right, wrong))):  # the wrong side as A, as B
                    if (mutation, order, limit) not in paired:
                        if a.shape == b.shape:  # (a stale output of another shape is refused by its shape)
                            a, b = a.cpu().to(torch.float64), b.cpu().to(torch.float64)
                        paired[mutation, order, limit] = judge_pair(cell, a, b, limit)
                    verdict = paired[mutation, order, limit]
                    told = acc.informative(limit, cell)
                    row["informative" if told else "uninformative"] += 1
                    row["caught"] += verdict["status"] == acc.FAILED
                    if told and verdict["status"] != acc.FAILED:
                        row["missed"].append(f"{device} {base} {cell.key}: {verdict['rel_diff']}")
    tally["false failures"] = false_failures
    tally["cells"] = len(cells)
    tally["checks"] = len(cells) * len(configs)
    return tally


def catch_table(tallies: dict) -> list[str]:
    """Per device and mutation: checks that fail on it (caught), whose bound is informative, whose bound is
    not (reported "check uninformative", never passed), informative ones that missed it (must be 0), and
    checks where it does not apply."""
    head = f"  {'mutation':<24} {'caught':>7} {'informative':>12} {'uninformative':>14} {'missed':>7} {'n/a':>5}"
    lines = [
        "caught: the check fails on the planted output; informative: 2 x bound <= the cell's smallest planted",
        "defect's error (docs/env-configs.md), else the check is reported 'check uninformative'; missed: an",
        "informative check that passed a planted defect (must be 0); n/a: one-row outputs (M = 1) have no row",
        "to take from another. A stale output of another shape is caught by the shape check.",
    ]
    for device, tally in tallies.items():
        lines.append(
            f"{device}: {tally['cells']} GEMM cells x (config, base) = {tally['checks']} accuracy checks per mutation"
        )
        lines.append(head)
        for mutation in MUTATIONS:
            row = tally[mutation]
            counts = f"{row['caught']:>7} {row['informative']:>12} {row['uninformative']:>14} {len(row['missed']):>7}"
            lines.append(f"  {mutation:<24} {counts} {row['n/a']:>5}")
        pair = " vs ".join(tally.get("pair") or ("none",))
        lines.append(f"  consistency ({pair}; the wrong side as A and as B, per base):")
        for mutation in MUTATIONS:
            row = tally["consistency"][mutation]
            counts = f"{row['caught']:>7} {row['informative']:>12} {row['uninformative']:>14} {len(row['missed']):>7}"
            lines.append(f"  {mutation:<24} {counts}")
    return lines


def test_every_informative_check_catches_every_planted_defect(record_property):
    ev = evidence()
    tallies = {}
    for device in DEVICES:
        tallies[device] = run_device(device, ev)
        tallies[device]["pair"] = ev.consistency_pair(device)
    table = catch_table(tallies)
    record_property("catch_table", "\n".join(table))
    print("\n".join(table))
    missed = [
        m
        for t in tallies.values()
        for rows in (t, t["consistency"])
        for mutation in MUTATIONS
        for m in rows[mutation]["missed"]
    ]
    assert not missed, missed[:10]
    assert not [f for t in tallies.values() for f in t["false failures"]]
    for device, tally in tallies.items():
        for mutation in ("all zeros", "transposed operand", "NaN"):  # caught by most cells, not only where required
            assert tally[mutation]["caught"] >= tally[mutation]["informative"] > 0, (device, mutation)
        # the checks are not all uninformative: the default path's bounds are informative for every cell
        assert tally["all zeros"]["informative"] >= tally["cells"], device
        if tally["pair"]:
            assert tally["consistency"]["all zeros"]["informative"] > 0, device


def test_all_zero_bfloat16_mm_k4096_is_never_ok_under_any_route_of_any_base():
    """Acceptance: a planted all-zero bfloat16 mm K=4096 output under every route of every base fails its
    check or is reported "check uninformative"; never ok."""
    ev = evidence()
    cell = Cell("mm", (4096, 4096, 4096), "bfloat16")
    small = proxy(cell)
    ref = reference(small, make_inputs(small, "cpu"))
    zeros = torch.zeros(ref.shape, dtype=torch.bfloat16)
    seen = {}
    for device in DEVICES:
        for config_name, base, config in settings(device, ev):
            result = acc.check(cell, zeros, ref, config["reduced_fp32"], accumulator_of(cell, config))
            assert result.status in (acc.FAILED, acc.UNINFORMATIVE) and not result.passed
            seen[(device, config_name, base)] = (result.status, result.accumulator)
    # v2.6.0's Metal GEMM sums bfloat16 in bfloat16: bound 1.008 > the all-zero error 1, so uninformative
    assert seen[("mps", "prefer_metal", "v2.6.0")] == (acc.UNINFORMATIVE, "input")
    assert seen[("mps", "all", "unknown")] == (acc.UNINFORMATIVE, "unknown")
    # main's sums in float: the zero output fails there, as on the default path everywhere
    assert seen[("mps", "prefer_metal", "main")] == (acc.FAILED, "float32")
    assert seen[("mps", "vanilla", "any")][0] == acc.FAILED
    assert {s for (d, _, _), (s, _) in seen.items() if d != "mps"} == {acc.FAILED}
    # and the report says so on its first screen, with the bound, never as passed
    data = json.loads((ROOT / "docs" / "examples" / "cpu-ab" / "results.json").read_text())
    first = next(p for p in data["processes"] if p["round"] == 0)
    key = next(k for k, r in first["cells"].items() if r.get("check"))
    loose = acc.check(cell, zeros, ref, False, "input")
    first["cells"][key]["check"] = loose.to_json()
    text = report.render(data)
    block = text.split("<details>")[0]
    # the bound with the digits that show the all-zero error (1.00) within it; no contrast of cpu-ab claims
    # anything, so the note about the config's own check is in the details (tests/test_first_screen.py plants
    # a claim resting on it, which brings it to the first screen)
    notes = text.split("## Notes on the checks")[1].split("## ")[0]
    assert "**Check uninformative:** 1 accuracy check(s)" in notes and "bound 1.01, error 1.00e+00" in notes
    assert "Check uninformative" not in block
    assert "check uninformative**" in text.split("## Correctness")[1]
