"""The workload ops as a registry: one :class:`Op` record per op, everything the harness knows about it.

Every consumer reads :data:`REGISTRY` (through :func:`get`): the cells of :mod:`harness.bench.workloads`
(shapes, labels, FLOP, inputs, call, float64 reference), the dtype support probe of
:mod:`harness.bench.provenance` (:attr:`Op.probe_shape`), the accuracy bound of :mod:`harness.bench.accuracy`
(:attr:`Op.reduction`), the report's labels and families, and the cell-key hint of the runner.
Adding an op is one :class:`Op` entry below plus its row in tests/test_ops.py.

Runs inside a build's interpreter: standard library + torch only; torch is imported when an op is called.
An unknown op name raises ``ValueError`` naming the known ops (the parent turns it into a ``HarnessError``).

FLOP conventions (FLOP per call; multiply and add counted as two, bias/``c``/``input`` additions
and softmax not counted), the formulas of ``torch/utils/flop_counter.py`` (torch 2.13.0, ``cf30153c``:
``mm_flop``, ``addmm_flop``, ``bmm_flop``, ``sdpa_flop_count``), except causal SDPA, which that file
counts in full and we halve as FlashAttention does (``flops`` in ``benchmarks/benchmark_flash_attention.py``
of Dao-AILab/flash-attention; Dao 2023, "FlashAttention-2", §4.1: about half the score entries are computed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Shape = tuple[int, ...]

_GEMM_FLOP = "2·M·N·K (torch/utils/flop_counter.py mm_flop / addmm_flop, torch 2.13.0 cf30153c)"
_BMM_FLOP = "2·B·M·N·K (torch/utils/flop_counter.py bmm_flop, torch 2.13.0 cf30153c)"
_SDPA_FLOP = "4·B·H·L²·D: Q·Kᵀ and P·V (torch/utils/flop_counter.py sdpa_flop_count, torch 2.13.0 cf30153c)"
_CAUSAL_FLOP = "2·B·H·L²·D: half the full count " "(Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py)"


@dataclass(frozen=True)
class Op:
    """One workload op. Shape functions take the cell's sizes in :attr:`dims` order (positional ints).

    Fields:
        name: the op's name in cell keys (``mm`` in ``mm/512x512x512/float16``).
        family: ``gemm`` or ``sdpa``: the report's latency plot and the consistency check group by it.
        dims: one letter per size in the field's notation; the label is ``M512 N512 K512``.
        dim_words: what each size means, for error messages.
        flop: FLOP per call from the sizes; ``flop_source`` names its public source.
        inputs: input tensor shapes in call order; ``output``: the output shape.
        reduction: the longest inner-product length (elements), which sets the accuracy bound.
        call: ``call(*inputs)`` -> a zero-argument callable running the op on those tensors.
        reference: ``reference(*inputs)`` on float64 CPU tensors -> the float64 result, computed
            without the fused kernel the op dispatches to.
        probe_shape: a tiny shape (16-element dims) for the dtype support probe and ``doctor``.
        example_shape: a typical shape, shown in the remedy of a malformed cell key.
        workspace: extra device bytes one call may allocate beyond inputs and output (default 0).
        origin: the series workload module (a ``workload.py`` path) that declared the op; ``""`` for the
            built-in ops below (:mod:`harness.bench.plugins`).
    """

    name: str
    family: str
    dims: tuple[str, ...]
    dim_words: tuple[str, ...]
    flop: Callable[..., float]
    flop_source: str
    inputs: Callable[..., list[Shape]]
    output: Callable[..., Shape]
    reduction: Callable[..., int]
    call: Callable[..., Callable[[], object]]
    reference: Callable[..., object]
    probe_shape: Shape
    example_shape: Shape
    workspace: Callable[..., int] = field(default=lambda *shape: 0)
    origin: str = ""

    def label(self, shape: Shape) -> str:
        """``shape`` in the field's notation, e.g. ``M512 N512 K512`` or ``B1 H8 L512 D64``."""
        return " ".join(f"{d}{s}" for d, s in zip(self.dims, shape))

    def layout(self) -> str:
        """The key layout of the sizes, e.g. ``MxNxK``."""
        return "x".join(self.dims)


# calls: torch is bound in the closure once, so the timed lambda does no import or attribute chain
def _mm(a, b):
    return lambda: a @ b


def _addmm(c, a, b):
    import torch

    return lambda: torch.addmm(c, a, b)


def _bmm(a, b):
    import torch

    return lambda: torch.bmm(a, b)


def _linear(x, w, bias):
    import torch.nn.functional as F

    return lambda: F.linear(x, w, bias)


def _sdpa_call(causal: bool):
    def call(q, k, v):
        import torch.nn.functional as F

        return lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=causal)

    return call


def _bmm_reference(a, b):
    import torch

    return torch.bmm(a, b)


def _sdpa_reference(causal: bool):
    """softmax(QKᵀ/√D + mask)·V written out, so the reference does not depend on a fused backend."""

    def reference(q, k, v):
        import torch

        scores = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
        if causal:
            n = q.shape[-2]
            scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    return reference


_MNK = ("M", "N", "K")
_MNK_WORDS = ("rows of the output", "columns of the output", "inner dimension")


def _sdpa(name: str, causal: bool) -> Op:
    """SDPA with ``Lq = Lk = L``; ``q, k, v`` are ``[B, H, L, D]``. Its workspace is a materialised
    B·H·L·L float32 score matrix (the math fallback), counted so cells that cannot fit are skipped."""
    per_score = 2.0 if causal else 4.0  # FLOP per (score entry x head-dim element): see the module docstring
    return Op(
        name,
        "sdpa",
        ("B", "H", "L", "D"),
        ("batch", "heads", "sequence length", "head dim"),
        flop=lambda b, h, n, d: per_score * b * h * n * n * d,
        flop_source=_CAUSAL_FLOP if causal else _SDPA_FLOP,
        inputs=lambda b, h, n, d: [(b, h, n, d)] * 3,
        output=lambda b, h, n, d: (b, h, n, d),
        reduction=lambda b, h, n, d: max(n, d),  # Q·Kᵀ sums over D, P·V over Lk
        call=_sdpa_call(causal),
        reference=_sdpa_reference(causal),
        probe_shape=(1, 2, 16, 16),
        example_shape=(1, 8, 512, 64),
        workspace=lambda b, h, n, d: b * h * n * n * 4,
    )


#: every workload op, by name, in the order reports and probes list them
REGISTRY: dict[str, Op] = {
    op.name: op
    for op in (
        Op(
            "mm",
            "gemm",
            _MNK,
            _MNK_WORDS,
            flop=lambda m, n, k: 2.0 * m * n * k,
            flop_source=_GEMM_FLOP,
            inputs=lambda m, n, k: [(m, k), (k, n)],
            output=lambda m, n, k: (m, n),
            reduction=lambda m, n, k: k,
            call=_mm,
            reference=lambda a, b: a @ b,
            probe_shape=(16, 16, 16),
            example_shape=(512, 512, 512),
        ),
        Op(
            "addmm",
            "gemm",
            _MNK,
            _MNK_WORDS,
            flop=lambda m, n, k: 2.0 * m * n * k,
            flop_source=_GEMM_FLOP,
            inputs=lambda m, n, k: [(m, n), (m, k), (k, n)],
            output=lambda m, n, k: (m, n),
            reduction=lambda m, n, k: k,
            call=_addmm,
            reference=lambda c, a, b: c + a @ b,
            probe_shape=(16, 16, 16),
            example_shape=(1024, 1024, 1024),
        ),
        Op(
            "bmm",
            "gemm",
            ("B",) + _MNK,
            ("batch",) + _MNK_WORDS,
            flop=lambda b, m, n, k: 2.0 * b * m * n * k,
            flop_source=_BMM_FLOP,
            inputs=lambda b, m, n, k: [(b, m, k), (b, k, n)],
            output=lambda b, m, n, k: (b, m, n),
            reduction=lambda b, m, n, k: k,
            call=_bmm,
            reference=_bmm_reference,
            probe_shape=(2, 16, 16, 16),
            example_shape=(8, 512, 512, 512),
        ),
        # linear: x [M, K], weight [N, K], bias [N] (torch.nn.functional.linear's layout)
        Op(
            "linear",
            "gemm",
            _MNK,
            _MNK_WORDS,
            flop=lambda m, n, k: 2.0 * m * n * k,
            flop_source=_GEMM_FLOP,
            inputs=lambda m, n, k: [(m, k), (n, k), (n,)],
            output=lambda m, n, k: (m, n),
            reduction=lambda m, n, k: k,
            call=_linear,
            reference=lambda x, w, bias: x @ w.T + bias,
            probe_shape=(16, 16, 16),
            example_shape=(2048, 2048, 2048),
        ),
        _sdpa("sdpa", causal=False),
        _sdpa("sdpa_causal", causal=True),
    )
}


#: the built-in ops' names: a series workload module may not redefine them (:func:`register`)
BUILTIN = frozenset(REGISTRY)


def register(op: Op) -> None:
    """Add a series workload module's ``op`` to :data:`REGISTRY` (replacing an earlier one of its name).

    Raises:
        ValueError: ``op`` has the name of a built-in op.
    """
    if op.name in BUILTIN:
        raise ValueError(f"op {op.name!r} is a built-in op; give the series' op its own name")
    REGISTRY[op.name] = op


def get(name: str) -> Op:
    """The :class:`Op` called ``name``.

    Raises:
        ValueError: an unknown op (the message lists the known ones).
    """
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown op {name!r}; choose one of {', '.join(REGISTRY)}") from None


def key_hint(name: str) -> str:
    """How to write a cell key for op ``name`` (every op's layout when ``name`` is not an op)."""
    op = REGISTRY.get(name)
    if op is None:
        layouts = ", ".join(f"{o.name}/{o.layout()}" for o in REGISTRY.values())
        return f"write cells as op/MxNxK/dtype, e.g. mm/512x512x512/float16 (op/layout: {layouts})"
    example = "x".join(map(str, op.example_shape))
    return (
        f"write {op.name} cells as {op.name}/{op.layout()}/dtype ({', '.join(op.dim_words)}), "
        f"e.g. {op.name}/{example}/float16"
    )
