"""Cross-config consistency: the same GEMM under two env configs of one build must agree.

Configs run in separate processes (torch reads its variables once per process), so the first-round
workers of the two configs save their GEMM outputs (``torch.save`` to ``raw/<proc>.outputs.pt``),
and this module, run afterwards in the same build's interpreter, compares them::

    <build python> -m harness.checks.consistency A.outputs.pt B.outputs.pt REDUCED_A REDUCED_B

It prints one JSON object: cell key -> ``{rel_diff, bound, passed}``, where
``rel_diff = ‖out_A − out_B‖_F / ‖out_B‖_F`` and ``bound`` is the sum of the two configs' accuracy
bounds (:func:`harness.checks.accuracy.bound`): two results that are each within their bound of
the float64 reference are within the sum of the bounds of each other (triangle inequality).

Pairs per device (:data:`PAIRS`): on MPS ``all`` vs ``vanilla`` (the patch's config must give
the MPSGraph results within float tolerance); on CPU ``no_vec`` vs ``default``; on CUDA
``tf32_override`` vs ``default``. Standard library + torch only.
"""

from __future__ import annotations

import json
import sys

from harness.bench.workloads import Cell
from harness.checks.accuracy import bound

#: device -> (config A, config B) whose GEMM outputs must agree
PAIRS = {"mps": ("all", "vanilla"), "cpu": ("no_vec", "default"), "cuda": ("tf32_override", "default")}
#: the MPS check the patch series needs (others are the same mechanism on other devices)
MPS_PAIR = PAIRS["mps"]


def compare_outputs(a: dict, b: dict, reduced_a: bool, reduced_b: bool) -> dict:
    """Compare two ``{cell key: tensor}`` maps on the keys they share."""
    import torch

    out = {}
    for key in sorted(set(a) & set(b)):
        cell = Cell.from_key(key)
        limit = bound(cell.dtype, cell.reduction, reduced_a) + bound(cell.dtype, cell.reduction, reduced_b)
        x, y = a[key].to(torch.float64), b[key].to(torch.float64)
        den = torch.linalg.vector_norm(y).item()
        diff = torch.linalg.vector_norm(x - y).item() / den if den else float("inf")
        out[key] = {"rel_diff": diff, "bound": limit, "passed": diff <= limit}
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    path_a, path_b, reduced_a, reduced_b = sys.argv[1:] if argv is None else argv
    a = torch.load(path_a, map_location="cpu", weights_only=True)
    b = torch.load(path_b, map_location="cpu", weights_only=True)
    json.dump(compare_outputs(a, b, reduced_a == "1", reduced_b == "1"), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
