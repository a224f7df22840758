"""Workloads: cells (an op of :mod:`harness.bench.ops` at one shape and dtype), their inputs and references.

A :class:`Cell` is one workload at one shape and dtype; everything op-specific (size layout, label,
FLOP count and its source, input and output shapes, reduction length, call, float64 reference, probe
shape) is the op's :class:`~harness.bench.ops.Op` record in :data:`harness.bench.ops.REGISTRY`. Layouts:

- ``mm``, ``addmm``, ``linear``: ``(M, N, K)``; ``a`` is ``[M, K]``, ``b`` is ``[K, N]``
  (``linear`` takes ``weight`` ``[N, K]`` and ``bias`` ``[N]``; ``addmm`` adds ``c`` ``[M, N]``).
- ``bmm``: ``(B, M, N, K)``; ``a`` is ``[B, M, K]``, ``b`` is ``[B, K, N]``.
- ``sdpa``, ``sdpa_causal``: ``(B, H, L, D)`` with ``Lq = Lk = L``; ``q, k, v`` are ``[B, H, L, D]``.

FLOP counts (the convention of GEMM literature, of ``torch/utils/flop_counter.py`` and of FlashAttention):
GEMM = 2·M·N·K (bmm times B; the bias / ``c`` additions, M·N each, are not counted);
SDPA = 4·B·H·Lq·Lk·D (two GEMMs: Q·Kᵀ and P·V), halved when causal. Softmax is not counted.
"GTokens/s" (B·H·L·D / s) counts tensor elements, not work; we do not report it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.bench import ops
from harness.bench.ops import Op

#: every op name, in registry order
OPS = tuple(ops.REGISTRY)
DTYPES = ("float16", "bfloat16", "float32")
#: bytes per element
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1}


@dataclass(frozen=True, order=True)
class Cell:
    """One workload at one shape and dtype (see the module docstring for shape layouts).

    Raises:
        ValueError: an unknown op or dtype, or sizes that are not the op's count of positive integers.
    """

    op: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        spec = ops.get(self.op)
        want = len(spec.dims)
        if len(self.shape) != want or any(int(s) <= 0 for s in self.shape):
            raise ValueError(f"{self.op} takes {want} positive sizes, got {self.shape}")
        if self.dtype not in ITEMSIZE:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {', '.join(ITEMSIZE)}")

    @property
    def spec(self) -> Op:
        """The op's registry record."""
        return ops.REGISTRY[self.op]

    @property
    def family(self) -> str:
        """``gemm`` or ``sdpa``."""
        return self.spec.family

    @property
    def label(self) -> str:
        """Shape label in the field's notation, e.g. ``M512 N512 K512`` or ``B1 H8 L512 D64``."""
        return self.spec.label(self.shape)

    @property
    def key(self) -> str:
        """Stable identifier used in results.json, e.g. ``mm/512x512x512/float16``."""
        return f"{self.op}/{'x'.join(map(str, self.shape))}/{self.dtype}"

    @classmethod
    def from_key(cls, key: str) -> Cell:
        """Parse ``op/AxBxC/dtype``.

        Raises:
            ValueError: not three ``/``-separated parts, a size that is not an integer, or a bad cell.
        """
        parts = key.split("/")
        if len(parts) != 3:
            raise ValueError(f"a cell key has 3 parts separated by '/', got {len(parts)}")
        op, shape, dtype = parts
        return cls(op, tuple(int(s) for s in shape.split("x")), dtype)

    @property
    def flop(self) -> float:
        """Floating-point operations per call (FLOP), per :attr:`Op.flop` (source: :attr:`Op.flop_source`)."""
        return self.spec.flop(*self.shape)

    @property
    def reduction(self) -> int:
        """Longest inner-product length (K for GEMM; max(D, Lk) for SDPA, whose P·V sums over Lk).
        Sets the accuracy bound in :mod:`harness.bench.accuracy`."""
        return self.spec.reduction(*self.shape)

    def input_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the input tensors in call order."""
        return self.spec.inputs(*self.shape)

    def output_shape(self) -> tuple[int, ...]:
        """Shape of the output tensor."""
        return self.spec.output(*self.shape)

    def nbytes(self) -> int:
        """Bytes of inputs + output on the device (the working set a run needs, excluding
        workspace; SDPA's math fallback can add B·H·L² elements, see :meth:`peak_bytes`)."""
        elems = sum(_prod(s) for s in self.input_shapes()) + _prod(self.output_shape())
        return elems * ITEMSIZE[self.dtype]

    def peak_bytes(self) -> int:
        """Upper estimate of device bytes for one call, used to skip cells that cannot fit:
        :meth:`nbytes` plus the op's workspace (:attr:`Op.workspace`; SDPA: a B·H·L·L fp32 score matrix)."""
        return self.nbytes() + self.spec.workspace(*self.shape)


def probe_cell(op: str, dtype: str) -> Cell:
    """``op`` at its tiny :attr:`Op.probe_shape` in ``dtype`` (the provenance dtype probe and ``doctor``).

    Raises:
        ValueError: an unknown op or dtype.
    """
    return Cell(op, ops.get(op).probe_shape, dtype)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def gemm(m: int, n: int, k: int, dtype: str, op: str = "mm") -> Cell:
    return Cell(op, (m, n, k), dtype)


#: pytorch PR 167424's cells (GEMM 512³, 1024³, 2048³; SDPA B1 H8 L512 D64 and B2 H16 L1024 D64, causal
#: and not) and the shape classes PyTorch MPS reviewers ask for: gemv-like M1 N1024 K1024, thin K
#: (M4096 N4096 K256), odd M333 N444 K555, large 4096³; plus addmm, bmm and linear at 1024-class sizes
FULL_SHAPES = (
    ("mm", (512, 512, 512)),
    ("mm", (1024, 1024, 1024)),
    ("mm", (2048, 2048, 2048)),
    ("mm", (1, 1024, 1024)),
    ("mm", (4096, 4096, 256)),
    ("mm", (333, 444, 555)),
    ("mm", (4096, 4096, 4096)),
    ("addmm", (1024, 1024, 1024)),
    ("addmm", (2048, 2048, 2048)),
    ("bmm", (8, 512, 512, 512)),
    ("bmm", (4, 1024, 1024, 1024)),
    ("linear", (2048, 2048, 2048)),
    ("linear", (1, 4096, 4096)),
    ("sdpa", (1, 8, 512, 64)),
    ("sdpa", (2, 16, 1024, 64)),
    ("sdpa_causal", (1, 8, 512, 64)),
    ("sdpa_causal", (2, 16, 1024, 64)),
)
#: a reduced set a 2-core CPU finishes in minutes
QUICK_SHAPES = (
    ("mm", (512, 512, 512)),
    ("mm", (1, 1024, 1024)),
    ("mm", (333, 444, 555)),
    ("addmm", (512, 512, 512)),
    ("bmm", (4, 256, 256, 256)),
    ("linear", (512, 512, 512)),
    ("sdpa", (1, 8, 512, 64)),
    ("sdpa_causal", (1, 8, 512, 64)),
)


@dataclass(frozen=True)
class Workload:
    """One workload module: the ops it brings and the cells a run measures when ``--cells`` is not given.
    The built-in GEMM/SDPA cells are :data:`BUILTIN`; a series' own ``workload.py`` is loaded into one by
    :func:`harness.bench.plugins.load` (the interface: docs/new-series.md "Your own workload").

    Fields:
        name: ``builtin``, or the module's file name (``workload.py``).
        ops: the :class:`~harness.bench.ops.Op` records it adds to :data:`harness.bench.ops.REGISTRY`
            (the built-in module: the registry's own).
        full: ``(op, shape)`` pairs measured in every dtype of a run; ``quick``: the ``--quick`` pairs.
        builtin_cells: also measure :data:`BUILTIN`'s cells (first, the module's after them).
        path: the module file (absolute), ``""`` for the built-in module.
    """

    name: str
    ops: tuple[Op, ...]
    full: tuple[tuple[str, tuple[int, ...]], ...]
    quick: tuple[tuple[str, tuple[int, ...]], ...]
    builtin_cells: bool = False
    path: str = ""

    def cells(self, dtypes: tuple[str, ...] = DTYPES, quick: bool = False) -> list[Cell]:
        """The default cells: each pair in each of ``dtypes`` (dtype-major), after :data:`BUILTIN`'s
        when :attr:`builtin_cells` (a cell both name is measured once).

        Raises:
            ValueError: a pair names an op that is not registered, or sizes it does not take.
        """
        own = [Cell(op, shape, dt) for dt in dtypes for op, shape in (self.quick if quick else self.full)]
        if not self.builtin_cells:
            return own
        first = BUILTIN.cells(dtypes, quick)
        return first + [c for c in own if c not in first]


#: the built-in module: GEMM and SDPA ops (:mod:`harness.bench.ops`) at :data:`FULL_SHAPES` / :data:`QUICK_SHAPES`
BUILTIN = Workload("builtin", tuple(ops.REGISTRY.values()), FULL_SHAPES, QUICK_SHAPES)


def default_cells(dtypes: tuple[str, ...] = DTYPES, quick: bool = False) -> list[Cell]:
    """The built-in module's cells (:data:`BUILTIN`): :data:`FULL_SHAPES`, or :data:`QUICK_SHAPES` with ``quick``."""
    return BUILTIN.cells(dtypes, quick)


def _not_recorded(*shape):
    raise ValueError("a recorded series op has only its label, family and FLOP: load its workload module to run it")


def register_recorded(record: Mapping) -> None:
    """Make the cells of a recorded run's series ops readable where their module is not loaded: for each op of
    ``record`` (results.json ``evidence.workload``: ``ops`` name -> ``family``, ``dims``, ``dim_words``,
    ``flop_source``; ``flop`` cell key -> FLOP per call) not in :data:`harness.bench.ops.REGISTRY`, register a
    stand-in with its label, family and recorded FLOP (its call and reference raise ``ValueError``)."""
    flops = record.get("flop", {}) if isinstance(record, Mapping) else {}
    for name, about in (record.get("ops", {}) if isinstance(record, Mapping) else {}).items():
        if name in ops.REGISTRY or not isinstance(about, Mapping):
            continue
        table = {}
        for key, flop in flops.items():
            op, _, rest = key.partition("/")
            if op == name:
                table[tuple(int(s) for s in rest.split("/")[0].split("x"))] = flop
        dims = tuple(about.get("dims", ()))
        ops.register(
            Op(
                name,
                str(about.get("family", name)),
                dims,
                tuple(about.get("dim_words", dims)),
                flop=lambda *shape, t=table: t[shape],
                flop_source=str(about.get("flop_source", "")),
                inputs=_not_recorded,
                output=_not_recorded,
                reduction=_not_recorded,
                call=_not_recorded,
                reference=_not_recorded,
                probe_shape=(1,) * len(dims),
                example_shape=(1,) * len(dims),
                origin=str(record.get("file", "")),
            )
        )


#: float32 CPU inputs kept per process for cells of the same shapes in another dtype, bytes at most
INPUT_CACHE_BYTES = 1 << 30
_input_cache: OrderedDict = OrderedDict()


def _float32_inputs(shapes: tuple, scale: float, seed: int) -> list:
    """The seeded standard-normal float32 CPU tensors × ``scale`` for ``shapes``, made once per process
    and kept (oldest dropped beyond :data:`INPUT_CACHE_BYTES`): a default matrix has each shape in
    three dtypes, and drawing the values took 2.6 s of a 14 s worker process on an H200's host
    (benchmarks/worker_time.py)."""
    import torch

    key = (shapes, scale, seed)
    if key in _input_cache:
        _input_cache.move_to_end(key)
        return _input_cache[key]
    gen = torch.Generator().manual_seed(seed)
    made = [torch.randn(s, generator=gen, dtype=torch.float32) * scale for s in shapes]
    _input_cache[key] = made
    while len(_input_cache) > 1 and sum(t.nbytes for v in _input_cache.values() for t in v) > INPUT_CACHE_BYTES:
        _input_cache.popitem(last=False)
    return made


def make_inputs(cell: Cell, device, seed: int = 0):
    """Random inputs for ``cell`` on ``device`` (standard normal, scaled by 1/sqrt(K) so outputs
    stay O(1) and fp16 never overflows). Returns a list of new tensors in call order, made on the
    CPU in float32 from a seeded generator so every build and process sees the same values (and
    every dtype of a shape the same values before rounding)."""
    import torch

    scale = cell.shape[-1] ** -0.25  # K (GEMM) or D (SDPA): both factors scaled, sums stay O(1)
    dtype = getattr(torch, cell.dtype)
    base = _float32_inputs(tuple(tuple(s) for s in cell.input_shapes()), scale, seed)
    return [t.to(device=device, dtype=dtype, copy=True) for t in base]


def op_callable(cell: Cell, inputs) -> Callable[[], object]:
    """A zero-argument callable running ``cell``'s op on ``inputs`` (returns the output)."""
    return cell.spec.call(*inputs)


def reference(cell: Cell, inputs):
    """The float64 CPU result of ``cell`` on the same (rounded) inputs: the ground truth for
    :mod:`harness.bench.accuracy` (:attr:`Op.reference`; SDPA is computed explicitly,
    softmax(QKᵀ/√D + mask)·V, not through the fused kernel, so it is independent of any backend)."""
    import torch

    x = [t.detach().cpu().to(torch.float64) for t in inputs]  # two steps: MPS has no float64
    return cell.spec.reference(*x)


def planted(cell: Cell, plant: float) -> Cell:
    """``cell`` with its reduction dimension K (the last size of a GEMM cell) grown by at least
    ``plant`` (a fraction), keeping K's alignment class: ``gcd(K', 16) == gcd(K, 16)`` (16 elements:
    at least the 16-byte row alignment tensor-core GEMMs need). Used by ``compare --plant-k`` and
    benchmarks/calibrate_ab.py to plant a known extra cost of ``K'/K - 1`` FLOP. Alignment matters
    more than FLOPs: on an H200, K = 2048 -> 2109 (unaligned rows) made cuBLAS 4-5x slower, not 3 %.

    Raises:
        ValueError: ``cell`` is not a GEMM, or ``plant`` is not positive.
    """
    if cell.family != "gemm" or "K" not in cell.spec.dims or not plant > 0:
        raise ValueError(f"only a GEMM's K can be planted with a positive fraction, got {cell.key} and {plant!r}")
    at = cell.spec.dims.index("K")  # the op's registry record names its sizes
    k = cell.shape[at]
    align = math.gcd(k, 16)
    new = math.ceil(k * (1 + plant) / align) * align
    while math.gcd(new, 16) != align:
        new += align
    return Cell(cell.op, cell.shape[:at] + (new,) + cell.shape[at + 1 :], cell.dtype)
