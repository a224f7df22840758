"""PNG plots for the report, drawn from the report's analysis (no measuring, no statistics here).

- :func:`speedup_png`: speedup (stock time / patched time) per cell with its 95 % CI as whiskers,
  one panel per env config, the ±threshold band shaded, colour by verdict.
- :func:`latency_png`: median latency against FLOP per call for one workload family, one panel
  per dtype; colour = (build, env config), marker = op; whiskers = IQR of the process medians.

Deterministic: matplotlib's Agg backend, fixed size and DPI, and PNG metadata without the
matplotlib version, so the same results.json gives byte-identical PNGs with the same matplotlib.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation, LogLocator, NullFormatter

from harness.fsutil import atomic_write_bytes

VERDICT_COLOURS = {"faster": "#1a7f37", "slower": "#cf222e", "equivalent": "#57606a", "undetermined": "#bf8700"}
MARKERS = "osD^vP*X"


@dataclass(frozen=True)
class SpeedupPoint:
    """One cell of one config: ``ratio``/``low``/``high`` are patched/stock *time* ratios (NaN if
    not computable); the plot shows their inverse, the speedup."""

    label: str
    ratio: float
    low: float
    high: float
    verdict: str


@dataclass(frozen=True)
class LatencyPoint:
    """One (build, config, cell): ``flop`` per call, ``median``/``q1``/``q3`` of the process
    medians in seconds."""

    series: str
    op: str
    dtype: str
    flop: float
    median: float
    q1: float
    q3: float


def _save(fig: Figure, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    atomic_write_bytes(path, buf.getvalue())
    return path


def speedup_png(path: Path, panels: Mapping[str, Sequence[SpeedupPoint]], threshold: float, title: str) -> Path:
    """Write the speedup plot (one panel per config, cells top to bottom in table order).

    Args:
        path: the PNG to write (atomically).
        panels: config name -> points.
        threshold: the verdict band (fraction), drawn as 1/(1±threshold) around 1.
    Returns:
        ``path``.
    """
    n_rows = max((len(p) for p in panels.values()), default=1)
    fig = Figure(figsize=(6.2 * max(len(panels), 1), 0.32 * n_rows + 1.6), layout="constrained")
    axes = fig.subplots(1, max(len(panels), 1), squeeze=False, sharey=True)[0]
    for ax, (config, points) in zip(axes, panels.items()):
        ys = list(range(len(points)))[::-1]
        ax.axvspan(1 / (1 + threshold), 1 / (1 - threshold), color="#d0d7de", alpha=0.5, lw=0)
        ax.axvline(1.0, color="#57606a", lw=0.8)
        for y, pt in zip(ys, points):
            if not (math.isfinite(pt.ratio) and pt.ratio > 0):
                continue
            colour = VERDICT_COLOURS.get(pt.verdict, "#57606a")
            x = 1 / pt.ratio
            if math.isfinite(pt.low) and math.isfinite(pt.high) and pt.low > 0:
                ax.errorbar(x, y, xerr=[[x - 1 / pt.high], [1 / pt.low - x]], fmt="o", color=colour, ms=4, capsize=2)
            else:
                ax.plot(x, y, marker="x", color=colour, ms=5)
        ax.set_yticks(ys, [pt.label for pt in points], fontsize=7)
        ax.set_title(config, fontsize=9)
        ax.set_xlabel("speedup: stock time / patched time (95% CI)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", lw=0.3)
    handles = [axes[0].plot([], [], "o", color=c, label=v)[0] for v, c in VERDICT_COLOURS.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def latency_png(path: Path, points: Sequence[LatencyPoint], family: str, unit_note: str) -> Path:
    """Write the latency-vs-size plot of one workload family (log-log, one panel per dtype).

    Args:
        points: the family's points; ``series`` names (build, config).
        unit_note: what the latency is (e.g. "device time per call" or "host time per call").
    Returns:
        ``path``.
    """
    dtypes = sorted({p.dtype for p in points})
    series = list(dict.fromkeys(p.series for p in points))
    ops = list(dict.fromkeys(p.op for p in points))
    colours = [f"C{i}" for i in range(len(series))]
    fig = Figure(figsize=(4.2 * max(len(dtypes), 1), 3.8), layout="constrained")
    axes = fig.subplots(1, max(len(dtypes), 1), squeeze=False)[0]
    for ax, dtype in zip(axes, dtypes):
        for i, name in enumerate(series):
            for j, op in enumerate(ops):
                mine = sorted(
                    (p for p in points if p.dtype == dtype and p.series == name and p.op == op), key=lambda p: p.flop
                )
                if not mine:
                    continue
                # a small offset per series keeps markers of one cell apart; colour = series, marker = op
                xs = [p.flop * (1.05 ** (i - (len(series) - 1) / 2)) for p in mine]
                ys = [p.median * 1e6 for p in mine]
                err = [[(p.median - p.q1) * 1e6 for p in mine], [(p.q3 - p.median) * 1e6 for p in mine]]
                ax.errorbar(
                    xs,
                    ys,
                    yerr=err,
                    fmt=MARKERS[j % len(MARKERS)],
                    color=colours[i],
                    ms=4,
                    capsize=2,
                    lw=0.8,
                    mfc="none" if j % 2 else colours[i],
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        panel = [p for p in points if p.dtype == dtype]
        lo_x, hi_x = min(p.flop for p in panel), max(p.flop for p in panel)
        lo_y, hi_y = min(p.q1 for p in panel) * 1e6, max(p.q3 for p in panel) * 1e6
        ax.set_xlim(lo_x / 3, hi_x * 3)  # at least a decade wide, so a single size still reads
        ax.set_ylim(lo_y / 2, hi_y * 2)
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_major_formatter(LogFormatterSciNotation(base=10))
        ax.xaxis.set_minor_formatter(NullFormatter())
        # 1-2-5 ticks with labels, so a range inside one decade still shows its scale
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{family} {dtype}", fontsize=9)
        ax.set_xlabel("FLOP per call", fontsize=8)
        ax.set_ylabel(f"median µs ({unit_note})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(which="both", lw=0.3)
    handles = [Line2D([], [], color=colours[i], lw=2, label=name) for i, name in enumerate(series)]
    handles += [
        Line2D(
            [],
            [],
            color="#57606a",
            ls="none",
            marker=MARKERS[j % len(MARKERS)],
            mfc="none" if j % 2 else "#57606a",
            label=op,
        )
        for j, op in enumerate(ops)
    ]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), fontsize=7, frameon=False)
    return _save(fig, path)
