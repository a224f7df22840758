"""Relative error of a device result against a float64 CPU reference, and its per-dtype bound.

``rel_error = ‖out − ref‖_F / ‖ref‖_F`` where ``ref`` is :func:`harness.bench.workloads.reference`
computed in float64 on the CPU from the *same rounded inputs* the device saw, so input
rounding is not counted: what remains is the backend's accumulation and output rounding.

Bound: ``rel_error <= 2·u_out + 4·u_acc·sqrt(n)``. ``u_out`` is the unit roundoff of the output
dtype (rounding the result: float16 2⁻¹¹, bfloat16 2⁻⁸, float32 2⁻²⁴); ``n`` is the inner-product
length (:attr:`Cell.reduction`, from the op's registry record
:attr:`harness.bench.ops.Op.reduction`); ``u_acc`` is the roundoff of the accumulator, which follows the
kernel path the config routes the op to (:attr:`harness.configs.EnvConfig.routes`, :data:`PATHS`):

- ``default``: float32 (2⁻²⁴), because cuBLAS, oneDNN/MKL and MPSGraph accumulate half-precision
  products in float32; 2⁻¹¹ under a reduced-precision config (TF32 on cuda), where float32 outputs
  are also held to ``u_out = 2⁻¹¹``.
- ``metal``: PyTorch's own Metal GEMM kernels, which ``PYTORCH_MPS_PREFER_METAL`` selects. They
  accumulate in the tensor's own dtype: v2.6.0 ``naive_matmul`` sums ``T rc += v1[i] * v2[i]``
  (``dot_product`` in ``aten/src/ATen/native/mps/kernels/LinearAlgebra.metal``, Debian's
  pytorch_2.6.0+dfsg source), so ``u_acc`` is the dtype's own roundoff (float16 2⁻¹¹, bfloat16
  2⁻⁸). A float16 ``mm`` with K = 512 summed that way errs by about 3e-3 (numpy emulation,
  tests/test_accuracy.py), three times the default bound of 9.8e-4.

``PYTORCH_MPS_FAST_MATH`` changes no bound: MPSGraph never reads it, and it reaches only Metal
shaders compiled at run time (``OperationUtils.mm``, ``MetalShaderLibrary::compileLibrary``). The sqrt(n) growth
is the probabilistic rounding-error bound for inner products (Higham & Mary, "A New Approach to
Probabilistic Rounding Error Analysis", SIAM J. Sci. Comput. 41(5), 2019); the factors 2 and 4 are
headroom for the tail. Measured on CPU (torch 2.13, quick cells): float16 ≈ 2e-4 against bounds
≈ 1e-3, bfloat16 ≈ 2e-3 against ≈ 8e-3, float32 ≈ 3e-7 against ≈ 5e-6.

A result over the bound, or with NaN/Inf, fails the cell's check. The error itself is recorded
either way: fast math is known to cost accuracy on MPS (pytorch issue 84936), so the number is
evidence for the report, not only a pass/fail.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

UNIT_ROUNDOFF = {
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float32": 2.0**-24,
    "float64": 2.0**-53,
    "float8_e4m3fn": 2.0**-4,
    "float8_e5m2": 2.0**-3,
}
#: roundoff of a 10-bit-mantissa computation (TF32, half-precision accumulation)
REDUCED_ROUNDOFF = 2.0**-11
#: kernel path -> what it accumulates in: "float32", or "input" (the tensor's own dtype)
PATHS = {"default": "float32", "metal": "input"}


def bound(dtype: str, reduction: int, reduced_fp32: bool = False, path: str = "default") -> float:
    """The relative-error bound for ``dtype`` and inner-product length ``reduction`` (see module).

    ``reduced_fp32`` is the config's flag (:attr:`harness.configs.EnvConfig.reduced_fp32`);
    ``path`` the kernel path the config routes the op to (:attr:`harness.configs.EnvConfig.routes`).

    Raises:
        ValueError: an unknown path (the message lists :data:`PATHS`).
    """
    if path not in PATHS:
        raise ValueError(f"unknown kernel path {path!r}; choose one of {', '.join(PATHS)}")
    u_out = UNIT_ROUNDOFF[dtype]
    u_acc = UNIT_ROUNDOFF["float32"]
    if reduced_fp32:
        u_acc = REDUCED_ROUNDOFF
        u_out = max(u_out, REDUCED_ROUNDOFF) if dtype == "float32" else u_out
    if PATHS[path] == "input":
        u_acc = max(u_acc, UNIT_ROUNDOFF[dtype])
    return 2.0 * u_out + 4.0 * u_acc * math.sqrt(reduction)


@dataclass
class CheckResult:
    """Outcome of one accuracy check: ``rel_error`` (dimensionless), its ``bound``, ``passed``,
    and ``reason`` when it failed (non-finite output, over the bound)."""

    rel_error: float | None
    bound: float
    passed: bool
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def rel_error(out, ref) -> float:
    """‖out − ref‖_F / ‖ref‖_F computed in float64 on the CPU (inf when ref is all zero)."""
    import torch

    out64 = out.detach().cpu().to(torch.float64)  # two steps: MPS has no float64 (conformance rule 1)
    num = torch.linalg.vector_norm(out64 - ref).item()
    den = torch.linalg.vector_norm(ref).item()
    return num / den if den else math.inf


def check(cell, out, ref, reduced_fp32: bool = False, path: str = "default") -> CheckResult:
    """Compare ``out`` (any device/dtype) with the float64 reference ``ref`` for ``cell``, under
    the bound of ``path`` (see :func:`bound`)."""
    import torch

    limit = bound(cell.dtype, cell.reduction, reduced_fp32, path)
    if tuple(out.shape) != tuple(ref.shape):
        return CheckResult(None, limit, False, f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    out = out.detach().cpu().to(torch.float64)  # float8 has no isfinite kernel; MPS has no float64
    if not bool(torch.isfinite(out).all()):
        bad = int((~torch.isfinite(out)).sum())
        return CheckResult(None, limit, False, f"{bad} non-finite values (NaN/Inf) in the output")
    err = rel_error(out, ref)
    if err > limit:
        return CheckResult(err, limit, False, f"relative error {err:.3g} exceeds the {cell.dtype} bound {limit:.3g}")
    return CheckResult(err, limit, True)
