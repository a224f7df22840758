"""This series' workload module (harness.bench.plugins; docs/new-series.md, "Your own workload").

The cells of the microbenchmark that pytorch PR 167424 shipped (its ``mps_microbench`` script: GEMM 512³,
1024³, 2048³ and SDPA B1 H8 L512 D64, B2 H16 L1024 D64, in each dtype of the run), on the built-in ops:
the series brings no op of its own, and the built-in cells (the shape classes reviewers ask for) are
measured too, before these.
"""

OPS = []
CELLS = [
    ("mm", (512, 512, 512)),
    ("mm", (1024, 1024, 1024)),
    ("mm", (2048, 2048, 2048)),
    ("sdpa", (1, 8, 512, 64)),
    ("sdpa", (2, 16, 1024, 64)),
]
#: --quick: the seed's smallest GEMM and SDPA cells
QUICK_CELLS = [("mm", (512, 512, 512)), ("sdpa", (1, 8, 512, 64))]
BUILTIN_CELLS = True
