"""Peak dense throughput of known GPUs, for the report's "% of peak" column.

Vendor datasheet numbers, **dense** (NVIDIA quotes tensor-core peaks "with sparsity"; dense is
half of that). A peak is only shown where the device is in this table; anything else (CPUs,
Apple GPUs: Apple publishes one FP32 figure per GPU core count, which the provenance does not
record) gets no percentage rather than a guessed one.

Sources:

- NVIDIA H200 Tensor Core GPU datasheet (SXM, 2024): FP64 34, FP32 67, TF32 tensor 989*,
  BF16/FP16 tensor 1,979*, FP8 tensor 3,958* TFLOPS (* with sparsity).
- NVIDIA H100 Tensor Core GPU datasheet (SXM, 2023): the same compute figures as the H200.
- NVIDIA A100 Tensor Core GPU datasheet (SXM, 2021): FP64 9.7, FP32 19.5, TF32 tensor 156,
  BF16/FP16 tensor 312 TFLOPS (dense).

Measured for comparison on an H200 (docs/timing.md): bf16 GEMM 8192³ takes 1.63 ms per call with
random data, 673 TFLOP/s, 68 % of the dense peak (989.5 TFLOP/s).
"""

from __future__ import annotations

#: (substring of torch.cuda.get_device_name(), {dtype or "tf32": dense TFLOP/s}, source)
TABLE: tuple[tuple[str, dict[str, float], str], ...] = (
    (
        "H200",
        {
            "float16": 989.5,
            "bfloat16": 989.5,
            "tf32": 494.5,
            "float32": 67.0,
            "float64": 34.0,
            "float8_e4m3fn": 1979.0,
            "float8_e5m2": 1979.0,
        },
        "NVIDIA H200 datasheet, SXM, dense",
    ),
    (
        "H100 80GB HBM3",
        {
            "float16": 989.5,
            "bfloat16": 989.5,
            "tf32": 494.5,
            "float32": 67.0,
            "float64": 34.0,
            "float8_e4m3fn": 1979.0,
            "float8_e5m2": 1979.0,
        },
        "NVIDIA H100 datasheet, SXM, dense",
    ),
    (
        "A100",
        {"float16": 312.0, "bfloat16": 312.0, "tf32": 156.0, "float32": 19.5, "float64": 9.7},
        "NVIDIA A100 datasheet, SXM, dense",
    ),
)


def peak_tflops(device_name: str | None, dtype: str, reduced_fp32: bool = False) -> tuple[float, str] | None:
    """Dense peak TFLOP/s of ``device_name`` for GEMM/SDPA in ``dtype``, and its source.

    ``reduced_fp32``: the env config lets float32 GEMM use TF32 (e.g. cuda ``tf32_override``),
    so the TF32 tensor-core peak applies. Returns None where no peak is known."""
    if not device_name:
        return None
    for pattern, peaks, source in TABLE:
        if pattern in device_name:
            key = "tf32" if dtype == "float32" and reduced_fp32 else dtype
            return (peaks[key], source) if key in peaks else None
    return None
