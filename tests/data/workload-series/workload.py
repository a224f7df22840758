"""A series' own workload module for tests/test_workload_modules.py: two right ops (``cumsum``, which
torch.utils.flop_counter does not count, and ``gram``, which it does) and two planted defects
(``cumsum_wrongref``: a reference off by a factor 2; ``gram_wrongflop``: a FLOP formula missing the factor 2
of multiply-add). The interface: docs/new-series.md, "Your own workload"."""

from harness.bench.ops import Op


def _cumsum(x):
    import torch

    return lambda: torch.cumsum(x, dim=-1)


def _cumsum_reference(x):
    """Running sums written out as a matrix product with a lower-triangular matrix of ones (float64)."""
    import torch

    n = x.shape[-1]
    return x @ torch.ones(n, n, dtype=x.dtype).triu()


def _gram(x):
    return lambda: x @ x.T


def _scan(name, reference, flop):
    return Op(
        name,
        "scan",
        ("R", "N"),
        ("rows", "scan length"),
        flop=flop,
        flop_source="N-1 additions per row of N",
        inputs=lambda r, n: [(r, n)],
        output=lambda r, n: (r, n),
        reduction=lambda r, n: n,
        call=_cumsum,
        reference=reference,
        probe_shape=(2, 16),
        example_shape=(64, 1024),
    )


def _gram_op(name, flop):
    return Op(
        name,
        "gram",
        ("M", "K"),
        ("rows", "inner dimension"),
        flop=flop,
        flop_source="2·M·M·K (torch/utils/flop_counter.py mm_flop)",
        inputs=lambda m, k: [(m, k)],
        output=lambda m, k: (m, m),
        reduction=lambda m, k: k,
        call=_gram,
        reference=lambda x: x @ x.T,
        probe_shape=(16, 16),
        example_shape=(256, 256),
    )


OPS = [
    _scan("cumsum", _cumsum_reference, lambda r, n: r * (n - 1)),
    _gram_op("gram", lambda m, k: 2 * m * m * k),
    _scan("cumsum_wrongref", lambda x: 2 * _cumsum_reference(x), lambda r, n: r * (n - 1)),
    _gram_op("gram_wrongflop", lambda m, k: m * m * k),
]
CELLS = [("cumsum", (64, 1024)), ("gram", (128, 256)), ("cumsum_wrongref", (64, 1024)), ("gram_wrongflop", (128, 256))]
