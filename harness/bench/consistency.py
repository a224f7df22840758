"""Cross-config consistency: the same GEMM under two env configs of one build must agree.

Configs run in separate processes (torch reads its variables once per process), so the first-round
workers of the two configs save their GEMM outputs (``torch.save`` to ``raw/<proc>.outputs.pt``),
and this module, run afterwards in the same build's interpreter, compares them::

    <build python> -m harness.bench.consistency A.outputs.pt B.outputs.pt CONFIG_A CONFIG_B [--answer FILE]

(``CONFIG_*``: a config's JSON, :meth:`harness.configs.EnvConfig.to_json`, plus ``accumulators``:
kernel path -> accumulator in this build's base, :meth:`harness.evidence.Evidence.accumulators`; its
``reduced_fp32``, ``routes`` and ``accumulators`` set the bound; a routed path with no accumulator is
``unknown``). It answers one JSON object on the channel ``FILE`` (:mod:`harness.bench.channel`, after
announcing each of :data:`STEPS`; without ``--answer`` it prints it): cell key -> ``{rel_diff, bound, passed, status}``,
where ``rel_diff = ‖out_A − out_B‖_F / ‖out_B‖_F`` and ``bound`` is the sum of the two configs'
accuracy bounds (:func:`harness.bench.accuracy.bound`): two results that are each within their
bound of the float64 reference are within the sum of the bounds of each other (triangle
inequality). ``status`` is :func:`harness.bench.accuracy.judge`'s: a sum of bounds that a planted
wrong side (all zeros: rel_diff 1; a stale or transposed result: ≈ √2; the reduction's last 1/8
dropped: ≈ 0.354; one row of R wrong: ≈ √(2/R)) could pass is ``uninformative``, never ``passed``
(the all-zero side B gives an infinite rel_diff and fails anyway). Two output files with no cell in
common are an error (exit status 2, one line on stderr), never an empty "all agree": the workers
save every GEMM output they compute, whether or not they check it.

The pair is chosen by the run: a series names its own per device in ``series.toml``
(``[evidence.<device>] consistency``, :mod:`harness.evidence`); otherwise the device's generic pair
(:data:`harness.configs.CONSISTENCY_PAIRS`: cpu ``no_vec`` vs ``default``, cuda ``tf32_override`` vs
``default``). Standard library + torch only.
"""

from __future__ import annotations

import json
import sys

from harness.bench.accuracy import FAILED, PASSED, bound, judge
from harness.bench.accuracy import accumulator as config_accumulator
from harness.bench.channel import Channel
from harness.bench.workloads import Cell

#: the steps announced on the channel and the seconds each may take (:func:`harness.supervise.run_consistency`):
#: the saved outputs of the default cuda matrix are about 0.5 GB per config
STEPS = {"importing torch": 120.0, "loading the saved outputs": 300.0, "comparing the outputs": 300.0}


def config_bound(cell: Cell, config: dict) -> float:
    """The accuracy bound of ``cell`` under a config's JSON (its ``reduced_fp32``, ``routes``, ``accumulators``)."""
    return bound(cell.dtype, cell.reduction, bool(config.get("reduced_fp32")), config_accumulator(cell, config))


def judge_pair(cell: Cell, x, y, limit: float) -> dict:
    """``{rel_diff, bound, passed, status[, reason]}`` of two float64 outputs of ``cell`` (y the reference side)."""
    import torch

    if tuple(x.shape) != tuple(y.shape):
        why = f"output shapes differ: {tuple(x.shape)} and {tuple(y.shape)}"
        return {"rel_diff": None, "bound": limit, "passed": False, "status": FAILED, "reason": why}
    if not (bool(torch.isfinite(x).all()) and bool(torch.isfinite(y).all())):
        why = "non-finite values (NaN/Inf) in an output"
        return {"rel_diff": None, "bound": limit, "passed": False, "status": FAILED, "reason": why}
    den = torch.linalg.vector_norm(y).item()
    diff = torch.linalg.vector_norm(x - y).item() / den if den else float("inf")
    status, reason = judge(cell, diff, limit, "relative difference")
    return {"rel_diff": diff, "bound": limit, "passed": status == PASSED, "status": status, "reason": reason}


def compare_outputs(a: dict, b: dict, config_a: dict, config_b: dict) -> dict:
    """Compare two ``{cell key: tensor}`` maps on the keys they share.

    Raises:
        ValueError: the maps share no cell (nothing would be compared).
    """
    import torch

    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError(f"no GEMM output in common to compare ({len(a)} and {len(b)} saved)")
    out = {}
    for key in shared:
        cell = Cell.from_key(key)
        limit = config_bound(cell, config_a) + config_bound(cell, config_b)
        out[key] = judge_pair(cell, a[key].to(torch.float64), b[key].to(torch.float64), limit)
    return out


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    answer = None
    if "--answer" in args:
        at = args.index("--answer")
        answer = Channel(args[at + 1])
        del args[at : at + 2]
    steps = answer or Channel(None)
    path_a, path_b, config_a, config_b = args
    steps.step("importing torch")
    import torch

    steps.step("loading the saved outputs")
    a = torch.load(path_a, map_location="cpu", weights_only=True)
    b = torch.load(path_b, map_location="cpu", weights_only=True)
    steps.step("comparing the outputs")
    try:
        result = compare_outputs(a, b, json.loads(config_a), json.loads(config_b))
    except ValueError as exc:
        print(f"consistency: {exc}", file=sys.stderr)
        return 2
    if answer:
        answer.answer(result)
    else:
        json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
