"""Relative error of a device result against a float64 CPU reference, its bound, and whether the bound can fail.

``rel_error = ‖out − ref‖_F / ‖ref‖_F`` where ``ref`` is :func:`harness.bench.workloads.reference`
computed in float64 on the CPU from the *same rounded inputs* the device saw, so input
rounding is not counted: what remains is the backend's accumulation and output rounding.

**Bound**: ``rel_error <= 2·u_out + 4·u_acc·sqrt(n)``. ``u_out`` is the unit roundoff of the output
dtype (rounding the result: float16 2⁻¹¹, bfloat16 2⁻⁸, float32 2⁻²⁴); ``n`` is the inner-product
length (:attr:`Cell.reduction`, from the op's registry record :attr:`harness.bench.ops.Op.reduction`);
``u_acc`` is the roundoff of the accumulator the kernel sums in (:data:`ACCUMULATORS`):

- ``float32``: 2⁻²⁴. cuBLAS, oneDNN/MKL and MPSGraph accumulate half-precision products in float32
  (the ``default`` kernel path).
- ``input``: the tensor's own dtype (float16 2⁻¹¹, bfloat16 2⁻⁸).
- ``unknown``: the build's base could not be told, so which of the two a routed kernel uses is not
  known; the bound is the looser (``input``) one and the record says ``unknown``, so the report
  names it (never silently the favourable one).

Which accumulator a *routed* kernel path uses is a fact of the base, not of this module: each
``[[base]]`` of a series names it with its citation in ``series.toml`` (``[base.accumulators.<path>]``;
:mod:`harness.evidence`). For the MPS series: v2.6.0's Metal GEMM ``naive_matmul`` sums ``T rc +=
v1[i] * v2[i]`` (``dot_product``, ``aten/src/ATen/native/mps/kernels/LinearAlgebra.metal`` lines
5-10, Debian's pytorch_2.6.0+dfsg, blob 85b82e3a; also the stored upstream copy at b83072ba), i.e.
``input``; main's ``matmul``/``addmm`` kernels (``do_metal_mm`` looks up ``matmul_<dtype>`` in
``LinearAlgebra.mm`` at 001077cb) sum in ``c10::metal::opmath_t<T>`` (``matmul_inner``, stored copy
at 0055b0d0), i.e. ``float32``. A float16 ``mm`` with K = 512 summed in float16 errs by about 3e-3
(numpy emulation, tests/test_conformance.py), three times the float32-accumulation bound of 9.8e-4.

**TF32** (a config with ``reduced_fp32``: ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` on cuda) reaches float32
GEMMs only: ``bgemm_internal_cublaslt`` sets ``CUBLAS_COMPUTE_32F_FAST_TF32`` inside ``if constexpr
(std::is_same_v<Dtype, float>)`` (``aten/src/ATen/cuda/CUDABlas.cpp`` at 0040fe0d), and the H200 ran
the same fp16 kernel under it as without it (docs/examples/h200-kernels). TF32 rounds each float32
*input* to a 10-bit mantissa (``u_in = 2⁻¹¹``) and still accumulates in float32, so the reference (made
from the float32 inputs) sees an input-rounding error that does not grow with ``n``: each product errs
by at most ``2·u_in`` relative, and for independent roundings the relative error of the sum stays of
that order. The float32 bound under TF32 is therefore ``2·u_out + 4·(2·u_in) + 4·u_acc·sqrt(n)`` with
float32 ``u_out`` and ``u_acc``: 3.9e-3 at any K of the matrix. Measured on the H200 (torch 2.11.0+cu130,
docs/examples/h200-aa-default-matrix): 2.89e-4 to 2.94e-4 for every float32 GEMM from K = 256 to
K = 4096, i.e. 13 times below it and independent of K, as the model says.

``PYTORCH_MPS_FAST_MATH`` changes no bound: MPSGraph never reads it, and it reaches only Metal
shaders compiled at run time (``OperationUtils.mm``, ``MetalShaderLibrary::compileLibrary``). The sqrt(n)
growth is the probabilistic rounding-error bound for inner products (Higham & Mary, "A New Approach to
Probabilistic Rounding Error Analysis", SIAM J. Sci. Comput. 41(5), 2019); the factors 2 and 4 are
headroom for the tail. Measured on CPU (torch 2.13, quick cells): float16 ≈ 2e-4 against bounds
≈ 1e-3, bfloat16 ≈ 2e-3 against ≈ 8e-3, float32 ≈ 3e-7 against ≈ 5e-6.

**Informative** (:func:`informative`): a bound is evidence only while it is well below the error of
plainly wrong outputs. For inputs of independent zero-mean entries (:func:`harness.bench.workloads.make_inputs`)
the relative errors of the wrong outputs a broken GEMM kernel gives are, in expectation:

- all zeros: 1; NaN: not finite (fails whatever the bound);
- a transposed operand, or the previous cell's output (a stale buffer): ≈ √2 (uncorrelated with
  the reference, of the same norm);
- the last 1/8 of the reduction dropped: ‖A₂B₂‖/‖AB‖ ≈ √(1/8) ≈ 0.354 (the dropped part carries 1/8
  of the variance of each output);
- one output row taken from another, out of R rows (R = M, B·M for bmm): ‖y_j − y_i‖/‖Y‖ ≈ √(2/R)
  (0.022 at R = 4096).

:func:`smallest_defect` is the smallest of these for the cell (GEMM; for SDPA, whose output rows are
attention averages without such a formula, the all-zero output alone). The check is informative when
``bound · INFORMATIVE_MARGIN <= smallest_defect`` (margin 2: the defect is caught even at half its
expected error). A check that is not informative, and whose error is within its bound, has status
``uninformative`` (never ``passed``): the report counts and names these cells on its first screen
with their bounds and errors. So bfloat16 K = 4096 under ``input`` accumulation (bound 1.008, which
an all-zero output passes) is uninformative, and so is float16 under ``input`` at K >= 256 (bound
≥ 0.032 > 0.022 / 2 for the 4096-row cells): a row of 4096 wrong is below what its bound can see.
tests/test_planted_defects.py plants each of those outputs in every GEMM cell of every device's
default matrix and prints how many cells catch each.

**Finding**: where the accumulator is not float32, the record also carries ``default_bound`` (the
float32-accumulation bound): an error over it is evidence that the routed kernel is less accurate
than the default path, and the report shows it as such rather than as a pass.

A result over the bound, or with NaN/Inf, or of the wrong shape, fails the cell's check. The error
itself is recorded either way: fast math is known to cost accuracy on MPS (pytorch issue 84936), so
the number is evidence for the report, not only a pass/fail.
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
#: roundoff of a float32 input rounded to TF32's 10-bit mantissa (see module: TF32)
REDUCED_ROUNDOFF = 2.0**-11
#: what a kernel accumulates in: float32, or the tensor's own dtype (``input``)
ACCUMULATORS = ("float32", "input")
#: a routed path whose accumulator is not known (the build's base could not be told)
UNKNOWN = "unknown"
#: the accumulator of the ``default`` path (every backend's library GEMM)
DEFAULT_ACCUMULATOR = "float32"
#: check outcomes: within an informative bound, over the bound (or not finite, or misshapen), or within
#: a bound too loose to have failed on a plainly wrong output
PASSED, FAILED, UNINFORMATIVE = "passed", "failed", "uninformative"
#: a bound is informative when this many times it is still at most the smallest planted defect's error
INFORMATIVE_MARGIN = 2.0
#: the fraction of the reduction a planted defect drops (its error is sqrt of it)
DROPPED_FRACTION = 1 / 8


def bound(dtype: str, reduction: int, reduced_fp32: bool = False, accumulator: str = DEFAULT_ACCUMULATOR) -> float:
    """The relative-error bound for ``dtype`` and inner-product length ``reduction`` (see module).

    ``reduced_fp32`` is the config's flag (:attr:`harness.configs.EnvConfig.reduced_fp32`);
    ``accumulator`` what the kernel sums in (:data:`ACCUMULATORS`, or :data:`UNKNOWN`: the looser).

    Raises:
        ValueError: an unknown accumulator (the message lists them).
    """
    if accumulator not in (*ACCUMULATORS, UNKNOWN):
        raise ValueError(f"unknown accumulator {accumulator!r}; choose one of {', '.join(ACCUMULATORS)}")
    u_out = UNIT_ROUNDOFF[dtype]
    u_acc = UNIT_ROUNDOFF["float32"]
    # TF32 rounds float32 inputs only (module: TF32): a term that does not grow with the reduction
    inputs = 4.0 * 2.0 * REDUCED_ROUNDOFF if reduced_fp32 and dtype == "float32" else 0.0
    if accumulator != "float32":
        u_acc = max(u_acc, UNIT_ROUNDOFF[dtype])
    return 2.0 * u_out + inputs + 4.0 * u_acc * math.sqrt(reduction)


def accumulator(cell, described) -> str:
    """What ``cell``'s op sums in under a worker spec or a config's JSON (both carry ``routes``: op -> kernel
    path, and ``accumulators``: path -> accumulator of the build's base): :data:`DEFAULT_ACCUMULATOR` on the
    ``default`` path; for a routed path the base's accumulator, else :data:`UNKNOWN` (the base was not told)."""
    path = described.get("routes", {}).get(cell.op, "default")
    return DEFAULT_ACCUMULATOR if path == "default" else described.get("accumulators", {}).get(path, UNKNOWN)


def output_rows(cell) -> int:
    """Rows of the cell's output (every size but the last multiplied: M, or B·M for bmm)."""
    return math.prod(cell.output_shape()[:-1])


def defects(cell) -> dict[str, float]:
    """The planted wrong outputs a bound is meant to fail on, each with its expected relative error for
    ``cell`` (see module): GEMM all zeros 1, a transposed operand and the previous cell's output √2, the
    last 1/8 of the reduction dropped √(1/8), one row of R taken from another √(2/R) (only when R >= 2);
    other families the all-zero output alone."""
    if cell.family != "gemm":
        return {"all zeros": 1.0}
    out = {
        "all zeros": 1.0,
        "a transposed operand": math.sqrt(2.0),
        "the previous cell's output": math.sqrt(2.0),
        "the last 1/8 of K dropped": math.sqrt(DROPPED_FRACTION),
    }
    rows = output_rows(cell)
    if rows >= 2:
        out[f"one row of {rows} taken from another"] = math.sqrt(2.0 / rows)
    return out


def smallest_defect(cell) -> float:
    """The smallest expected relative error among the planted wrong outputs for ``cell`` (:func:`defects`):
    GEMM ``min(1, sqrt(1/8), sqrt(2/R))`` with R output rows (the row term only when R >= 2); other
    families 1 (the all-zero output)."""
    return min(defects(cell).values())


def blind_to(limit: float, cell) -> list[str]:
    """The planted wrong outputs (:func:`defects`) a bound ``limit`` cannot be trusted to fail: those whose
    expected error is below ``limit · INFORMATIVE_MARGIN``."""
    return [name for name, err in defects(cell).items() if limit * INFORMATIVE_MARGIN > err]


def informative(limit: float, cell) -> bool:
    """Whether a bound ``limit`` on ``cell``'s relative error can fail on every planted wrong output:
    ``limit · INFORMATIVE_MARGIN <= smallest_defect(cell)``."""
    return limit * INFORMATIVE_MARGIN <= smallest_defect(cell)


def status_of(record: dict) -> str:
    """A check record's status (:data:`PASSED`, :data:`FAILED`, :data:`UNINFORMATIVE`); records written
    before the status existed read as passed/failed from their ``passed``."""
    return record.get("status") or (PASSED if record.get("passed") else FAILED)


@dataclass
class CheckResult:
    """Outcome of one accuracy check.

    Attributes:
        rel_error: ‖out − ref‖/‖ref‖ (dimensionless), None when the output is not finite or misshapen.
        bound: the bound it was held to.
        passed: True only for status ``passed``.
        reason: why it failed, or why it is uninformative.
        status: :data:`PASSED`, :data:`FAILED` or :data:`UNINFORMATIVE`.
        accumulator: the accumulator the bound assumed (:data:`ACCUMULATORS` or :data:`UNKNOWN`).
        default_bound: the float32-accumulation bound, when ``accumulator`` is not float32 (the finding's yardstick).
    """

    rel_error: float | None
    bound: float
    passed: bool
    reason: str = ""
    status: str = PASSED
    accumulator: str = DEFAULT_ACCUMULATOR
    default_bound: float | None = None

    def to_json(self) -> dict:
        return asdict(self)


def rel_error(out, ref) -> float:
    """‖out − ref‖_F / ‖ref‖_F computed in float64 on the CPU (inf when ref is all zero)."""
    import torch

    out64 = out.detach().cpu().to(torch.float64)  # two steps: MPS has no float64 (conformance rule 1)
    num = torch.linalg.vector_norm(out64 - ref).item()
    den = torch.linalg.vector_norm(ref).item()
    return num / den if den else math.inf


def judge(cell, err: float, limit: float, what: str = "relative error") -> tuple[str, str]:
    """(status, reason) of a finite error ``err`` against ``limit`` for ``cell`` (see :func:`informative`)."""
    if err > limit:
        return FAILED, f"{what} {err:.3g} exceeds the {cell.dtype} bound {limit:.3g}"
    if not informative(limit, cell):
        blind = blind_to(limit, cell)
        return UNINFORMATIVE, (
            f"bound {limit:.3g} is not below half the smallest planted defect's error "
            f"({smallest_defect(cell):.3g}): it cannot tell {', '.join(blind)} "
            f"(expected error {', '.join(f'{defects(cell)[b]:.3g}' for b in blind)}) from a right output"
        )
    return PASSED, ""


def check(cell, out, ref, reduced_fp32: bool = False, accumulator: str = DEFAULT_ACCUMULATOR) -> CheckResult:
    """Compare ``out`` (any device/dtype) with the float64 reference ``ref`` for ``cell``, under the
    bound of ``accumulator`` (see :func:`bound`); status per :func:`judge`.

    Raises:
        ValueError: an unknown accumulator.
    """
    import torch

    limit = bound(cell.dtype, cell.reduction, reduced_fp32, accumulator)
    default = bound(cell.dtype, cell.reduction, reduced_fp32) if accumulator != DEFAULT_ACCUMULATOR else None
    extra = {"accumulator": accumulator, "default_bound": default}
    if tuple(out.shape) != tuple(ref.shape):
        why = f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
        return CheckResult(None, limit, False, why, FAILED, **extra)
    out = out.detach().cpu().to(torch.float64)  # float8 has no isfinite kernel; MPS has no float64
    if not bool(torch.isfinite(out).all()):
        bad = int((~torch.isfinite(out)).sum())
        return CheckResult(None, limit, False, f"{bad} non-finite values (NaN/Inf) in the output", FAILED, **extra)
    err = rel_error(out, ref)
    status, reason = judge(cell, err, limit)
    return CheckResult(err, limit, status == PASSED, reason, status, **extra)
