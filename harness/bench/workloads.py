"""Workloads: the GEMM family and SDPA, their FLOP counts, inputs and float64 references.

A :class:`Cell` is one workload at one shape and dtype. Shapes:

- ``mm``, ``addmm``, ``linear``: ``(M, N, K)``; ``a`` is ``[M, K]``, ``b`` is ``[K, N]``
  (``linear`` takes ``weight`` ``[N, K]`` and ``bias`` ``[N]``; ``addmm`` adds ``c`` ``[M, N]``).
- ``bmm``: ``(B, M, N, K)``; ``a`` is ``[B, M, K]``, ``b`` is ``[B, K, N]``.
- ``sdpa``, ``sdpa_causal``: ``(B, H, L, D)`` with ``Lq = Lk = L``; ``q, k, v`` are ``[B, H, L, D]``.

FLOP counts (the convention of GEMM literature and of FlashAttention, Dao et al. 2022, §4):
GEMM = 2·M·N·K (bmm times B; the bias / ``c`` additions, M·N each, are not counted);
SDPA = 4·B·H·Lq·Lk·D (two GEMMs: Q·Kᵀ and P·V), halved when causal. Softmax is not counted.
The seed PR's "GTokens/s" (B·H·L·D / s) counts tensor elements, not work; we do not report it.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Callable

OPS = ("mm", "addmm", "bmm", "linear", "sdpa", "sdpa_causal")
GEMM_OPS = ("mm", "addmm", "bmm", "linear")
DTYPES = ("float16", "bfloat16", "float32")
#: bytes per element
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1}


@dataclass(frozen=True, order=True)
class Cell:
    """One workload at one shape and dtype (see the module docstring for shape layouts)."""

    op: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}; choose one of {', '.join(OPS)}")
        want = 4 if self.op in ("bmm", "sdpa", "sdpa_causal") else 3
        if len(self.shape) != want or any(int(s) <= 0 for s in self.shape):
            raise ValueError(f"{self.op} takes {want} positive sizes, got {self.shape}")
        if self.dtype not in ITEMSIZE:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {', '.join(ITEMSIZE)}")

    @property
    def family(self) -> str:
        """``gemm`` or ``sdpa``."""
        return "sdpa" if self.op.startswith("sdpa") else "gemm"

    @property
    def label(self) -> str:
        """Shape label in the field's notation, e.g. ``M512 N512 K512`` or ``B1 H8 L512 D64``."""
        if self.family == "sdpa":
            return "B{} H{} L{} D{}".format(*self.shape)
        if self.op == "bmm":
            return "B{} M{} N{} K{}".format(*self.shape)
        return "M{} N{} K{}".format(*self.shape)

    @property
    def key(self) -> str:
        """Stable identifier used in results.json, e.g. ``mm/512x512x512/float16``."""
        return f"{self.op}/{'x'.join(map(str, self.shape))}/{self.dtype}"

    @classmethod
    def from_key(cls, key: str) -> "Cell":
        parts = key.split("/")
        if len(parts) != 3:
            raise ValueError(f"a cell key has 3 parts separated by '/', got {len(parts)}")
        op, shape, dtype = parts
        return cls(op, tuple(int(s) for s in shape.split("x")), dtype)

    @property
    def flop(self) -> float:
        """Floating-point operations per call (FLOP), per the module docstring."""
        if self.family == "sdpa":
            b, h, n, d = self.shape
            full = 4.0 * b * h * n * n * d
            return full / 2 if self.op == "sdpa_causal" else full
        if self.op == "bmm":
            b, m, n, k = self.shape
            return 2.0 * b * m * n * k
        m, n, k = self.shape
        return 2.0 * m * n * k

    @property
    def reduction(self) -> int:
        """Longest inner-product length (K for GEMM; max(D, Lk) for SDPA, whose P·V sums over Lk).
        Sets the accuracy bound in :mod:`harness.checks.accuracy`."""
        return max(self.shape[-1], self.shape[-2]) if self.family == "sdpa" else self.shape[-1]

    def input_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the input tensors in call order."""
        if self.family == "sdpa":
            return [self.shape] * 3
        if self.op == "bmm":
            b, m, n, k = self.shape
            return [(b, m, k), (b, k, n)]
        m, n, k = self.shape
        if self.op == "mm":
            return [(m, k), (k, n)]
        if self.op == "addmm":
            return [(m, n), (m, k), (k, n)]
        return [(m, k), (n, k), (n,)]  # linear: x, weight, bias

    def output_shape(self) -> tuple[int, ...]:
        if self.family == "sdpa":
            return self.shape
        if self.op == "bmm":
            b, m, n, _ = self.shape
            return (b, m, n)
        m, n, _ = self.shape
        return (m, n)

    def nbytes(self) -> int:
        """Bytes of inputs + output on the device (the working set a run needs, excluding
        workspace; SDPA's math fallback can add B·H·L² elements, see :meth:`peak_bytes`)."""
        elems = sum(_prod(s) for s in self.input_shapes()) + _prod(self.output_shape())
        return elems * ITEMSIZE[self.dtype]

    def peak_bytes(self) -> int:
        """Upper estimate of device bytes for one call, used to skip cells that cannot fit:
        :meth:`nbytes` plus, for SDPA, a materialised B·H·L·L score matrix in fp32."""
        extra = 0
        if self.family == "sdpa":
            b, h, n, _ = self.shape
            extra = b * h * n * n * 4
        return self.nbytes() + extra


#: a tiny shape per op (16-element dims): the provenance dtype probe and ``doctor`` run these
PROBE_SHAPES = {"mm": (16, 16, 16), "addmm": (16, 16, 16), "linear": (16, 16, 16), "bmm": (2, 16, 16, 16),
                "sdpa": (1, 2, 16, 16), "sdpa_causal": (1, 2, 16, 16)}


def probe_cell(op: str, dtype: str) -> "Cell":
    """``op`` at its :data:`PROBE_SHAPES` shape in ``dtype``."""
    return Cell(op, PROBE_SHAPES[op], dtype)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def gemm(m: int, n: int, k: int, dtype: str, op: str = "mm") -> Cell:
    return Cell(op, (m, n, k), dtype)


def default_cells(dtypes: tuple[str, ...] = DTYPES, quick: bool = False) -> list[Cell]:
    """The default cell set.

    Full: the seed PR's cells (GEMM 512³, 1024³, 2048³; SDPA B1 H8 L512 D64 and B2 H16 L1024 D64,
    causal and not) and the shape classes PyTorch MPS reviewers ask for: gemv-like M1 N1024 K1024,
    thin K (M4096 N4096 K256), odd M333 N444 K555, large 4096³; plus addmm, bmm and linear at
    1024-class sizes. Quick: a reduced set a 2-core CPU finishes in minutes.
    """
    if quick:
        shapes = [
            ("mm", (512, 512, 512)), ("mm", (1, 1024, 1024)), ("mm", (333, 444, 555)),
            ("addmm", (512, 512, 512)), ("bmm", (4, 256, 256, 256)), ("linear", (512, 512, 512)),
            ("sdpa", (1, 8, 512, 64)), ("sdpa_causal", (1, 8, 512, 64)),
        ]
    else:
        shapes = [
            ("mm", (512, 512, 512)), ("mm", (1024, 1024, 1024)), ("mm", (2048, 2048, 2048)),
            ("mm", (1, 1024, 1024)), ("mm", (4096, 4096, 256)), ("mm", (333, 444, 555)),
            ("mm", (4096, 4096, 4096)),
            ("addmm", (1024, 1024, 1024)), ("addmm", (2048, 2048, 2048)),
            ("bmm", (8, 512, 512, 512)), ("bmm", (4, 1024, 1024, 1024)),
            ("linear", (2048, 2048, 2048)), ("linear", (1, 4096, 4096)),
            ("sdpa", (1, 8, 512, 64)), ("sdpa", (2, 16, 1024, 64)),
            ("sdpa_causal", (1, 8, 512, 64)), ("sdpa_causal", (2, 16, 1024, 64)),
        ]
    return [Cell(op, shape, dt) for dt in dtypes for op, shape in shapes]


def make_inputs(cell: Cell, device, seed: int = 0):
    """Random inputs for ``cell`` on ``device`` (standard normal, scaled by 1/sqrt(K) so outputs
    stay O(1) and fp16 never overflows). Returns a list of tensors in call order, made on the CPU
    in float32 from a seeded generator so every build and process sees the same values."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    scale = cell.shape[-1] ** -0.25  # K (GEMM) or D (SDPA): both factors scaled, sums stay O(1)
    dtype = getattr(torch, cell.dtype)
    return [
        (torch.randn(s, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)
        for s in cell.input_shapes()
    ]


def op_callable(cell: Cell, inputs) -> Callable[[], object]:
    """A zero-argument callable running ``cell``'s op on ``inputs`` (returns the output)."""
    import torch
    import torch.nn.functional as F

    if cell.op == "mm":
        a, b = inputs
        return lambda: a @ b
    if cell.op == "addmm":
        c, a, b = inputs
        return lambda: torch.addmm(c, a, b)
    if cell.op == "bmm":
        a, b = inputs
        return lambda: torch.bmm(a, b)
    if cell.op == "linear":
        x, w, bias = inputs
        return lambda: F.linear(x, w, bias)
    q, k, v = inputs
    causal = cell.op == "sdpa_causal"
    return lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=causal)


def reference(cell: Cell, inputs):
    """The float64 CPU result of ``cell`` on the same (rounded) inputs: the ground truth for
    :mod:`harness.checks.accuracy`. SDPA is computed explicitly (softmax(QKᵀ/√D + mask)·V),
    not through the fused kernel, so the reference is independent of any backend choice."""
    import torch

    x = [t.detach().cpu().to(torch.float64) for t in inputs]  # two steps: MPS has no float64
    if cell.op == "mm":
        return x[0] @ x[1]
    if cell.op == "addmm":
        return x[0] + x[1] @ x[2]
    if cell.op == "bmm":
        return torch.bmm(x[0], x[1])
    if cell.op == "linear":
        return x[0] @ x[1].T + x[2]
    q, k, v = x
    scores = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
    if cell.op == "sdpa_causal":
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def planted(cell: Cell, plant: float) -> Cell:
    """``cell`` with its reduction dimension K (the last size of a GEMM cell) grown by at least
    ``plant`` (a fraction), keeping K's alignment class: ``gcd(K', 16) == gcd(K, 16)`` (16 elements:
    at least the 16-byte row alignment tensor-core GEMMs need). Used by ``compare --plant-k`` and
    benchmarks/calibrate_ab.py to plant a known extra cost of ``K'/K - 1`` FLOP. Alignment matters
    more than FLOPs: on an H200, K = 2048 -> 2109 (unaligned rows) made cuBLAS 4-5x slower, not 3 %.

    Raises:
        ValueError: ``cell`` is not a GEMM, or ``plant`` is not positive.
    """
    if cell.family != "gemm" or not plant > 0:
        raise ValueError(f"only a GEMM's K can be planted with a positive fraction, got {cell.key} and {plant!r}")
    *rest, k = cell.shape
    align = math.gcd(k, 16)
    new = math.ceil(k * (1 + plant) / align) * align
    while math.gcd(new, 16) != align:
        new += align
    return Cell(cell.op, (*rest, new), cell.dtype)
