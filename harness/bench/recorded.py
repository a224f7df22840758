"""What of a worker's environment is recorded with its results: every torch-, CUDA-, MPS-, ROCm-, BLAS- or
OpenMP-related variable it sees, raw. Read inside the build's interpreter (:mod:`harness.bench.worker`);
which variables a worker gets is :mod:`harness.configs`' rule (``worker_environment``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: Prefixes of torch-, CUDA-, MPS-, ROCm-, BLAS- and OpenMP-related variables: every one that reaches
#: a worker is recorded with its results (:func:`snapshot`).
RECORDED_PREFIXES = (
    "PYTORCH_",
    "TORCH_",
    "ATEN_",
    "CUDA_",
    "CUBLAS",
    "CUDNN_",
    "NVIDIA_",
    "NCCL_",
    "MPS_",
    "METAL_",
    "MTL_",
    "HIP_",
    "ROCM_",
    "HSA_",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "DNNL_",
    "ONEDNN_",
    "LD_LIBRARY_PATH",
    "DYLD_LIBRARY_PATH",
)


def snapshot(environ: Mapping[str, str] | None = None, names: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    """The raw values of every torch-, CUDA-, MPS- or OpenMP-related variable a process sees
    (:data:`RECORDED_PREFIXES`), plus those of ``names`` (the run's ``--env`` variables) that are set
    (recorded with its results)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith(RECORDED_PREFIXES) or k in names}
