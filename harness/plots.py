"""PNG plots for the report, drawn from the report's analysis (no measuring, no statistics here).

- :func:`contrast_pngs`: one forest plot per contrast (``contrast-<n>.png``, n from 1 in the contrasts'
  order): each cell's speedup (B time / A time, > 1: A faster) with its exact 95 % CI as whiskers, the
  cell's ±band shaded on its row (±2 %, ±5 % for launch-bound cells), the verdict as marker shape and
  colour and written at the row's end with its CI; the claim and its outcome in the title. All cells of
  a contrast share one log x-axis centred on 1× (symmetric, so 0.9× and 1.11× are equally far), sized
  to that contrast's CIs: an equivalence contrast keeps its ±2 % band readable beside a 7× one. The
  numbers are the contrasts' own (:mod:`harness.contrasts`, read, never recomputed).
- :func:`latency_png`: median latency against FLOP per call for one workload family, one panel per
  dtype; colour = (build, env config), marker = op; whiskers = IQR of the process medians. Only the dtypes
  where a line has more than one size (:func:`sizes_vary`), no PNG when none: a point per line shows no trend.

Nothing is clipped, on a canvas of fixed size laid out once (constrained layout; no tight bounding box, which
draws every figure twice): a title is wrapped to the width it has (:func:`wrap`) and a legend takes as many
columns as fit the figure's width, its labels wrapped where one alone is wider (:func:`_legend`). Deterministic:
matplotlib's Agg backend, fixed DPI, and PNG metadata without the matplotlib version, so the same results.json
gives byte-identical PNGs with the same matplotlib. Each PNG carries the digest of the data it shows
(:func:`data_digest`).
"""

from __future__ import annotations

import hashlib
import io
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib import rcParams
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, LogFormatterSciNotation, LogLocator, NullFormatter

from harness.fsutil import atomic_write_bytes

VERDICT_COLOURS = {"faster": "#1a7f37", "slower": "#cf222e", "equivalent": "#57606a", "undetermined": "#bf8700"}
VERDICT_MARKERS = {"faster": ">", "slower": "<", "equivalent": "o", "undetermined": "D"}
MARKERS = "osD^vP*X"
#: speedup ticks of the forest plots' log axis: (widest axis half-width in decades, ticks), narrow to wide
#: (:func:`_ticks`); about six labels whatever the width, so they never overlap
TICK_SETS = (
    (math.log10(1.16), (0.9, 0.95, 1.0, 1.05, 1.1)),
    (math.log10(1.6), (0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)),
    (math.log10(3.5), (0.33, 0.5, 0.67, 1.0, 1.5, 2.0, 3.0)),
    (math.log10(12.0), (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)),
    (math.inf, (0.01, 0.1, 1.0, 10.0, 100.0)),
)
DPI = 100
#: the margin, in inches, kept free of text at each edge of the canvas (constrained layout's own pad is 3/72 in)
EDGE = 0.1
#: inches a line of a 7-point legend takes (the text and ``labelspacing``)
LEGEND_ROW = 0.15
#: inches of one latency panel (width, height)
LATENCY_PANEL = (4.2, 3.8)
#: inches of a latency panel beside its axes (tick labels, y label) and above and below them (title, x label,
#: three legend rows): a panel's title is wrapped to its width less the first, its y label to its height less
#: the second
LATENCY_MARGINS = (0.8, 1.6)
#: the narrowest forest axis: ±12 % around 1, so the ±5 % band never fills it
MIN_HALF_DECADES = math.log10(1.12)


@dataclass(frozen=True)
class ForestRow:
    """One cell of a forest plot: ``ratio``/``low``/``high`` the A/B *time* ratio and its 95 % CI (NaN when
    not computable; the plot shows their inverse, the speedup B time / A time), ``band`` the verdict band
    of the cell (fraction: 0.02, or 0.05 for a launch-bound cell)."""

    label: str
    ratio: float
    low: float
    high: float
    verdict: str
    band: float


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


def data_digest(*parts: object) -> str:
    """``data sha256 <hex>`` of what one plot is drawn from (its rows or points, title and labels: their
    ``repr``), stored as the PNG's ``Description`` text: :func:`harness.report.plot_digests` tells whether a
    committed PNG still shows its results.json without drawing it again (drawing takes about 1 s a plot)."""
    return "data sha256 " + hashlib.sha256(repr(parts).encode()).hexdigest()


def _figure(width: float, height: float) -> tuple[Figure, RendererBase]:
    """A constrained-layout figure of ``width`` x ``height`` inches on an Agg canvas, and the renderer that
    measures its texts (:func:`wrap`, :func:`_legend`) as the PNG draws them."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    return fig, FigureCanvasAgg(fig).get_renderer()


def _text_width(text: str, fontsize: float, renderer: RendererBase) -> float:
    """Width in inches of the widest line of ``text`` drawn at ``fontsize`` points."""
    prop = FontProperties(size=fontsize)
    return max(renderer.get_text_width_height_descent(line, prop, ismath=False)[0] for line in text.split("\n")) / DPI


def wrap(text: str, inches: float, fontsize: float, renderer: RendererBase) -> str:
    """``text`` broken into lines (:func:`textwrap.wrap`, at spaces, a word longer than a line cut) none wider than
    ``inches`` at ``fontsize`` points; unchanged when it fits."""
    whole = _text_width(text, fontsize, renderer)
    if whole <= inches:
        return text
    # the first guess from the text's mean character width, narrowed until every line fits
    chars = max(1, int(len(text) * inches / whole))
    lines = textwrap.wrap(text, chars)
    while chars > 1 and _text_width("\n".join(lines), fontsize, renderer) > inches:
        chars -= 1
        lines = textwrap.wrap(text, chars)
    return "\n".join(lines)


def _legend(fig: Figure, renderer: RendererBase, handles: Sequence[Line2D], most: int, fontsize: float = 7) -> int:
    """A legend below the axes (``outside lower center``) with the most columns, up to ``most``, whose row fits the
    figure's width less :data:`EDGE` each side; a label too wide for one column alone is wrapped. Returns its height
    in lines of text (those of its longest column).
    Widths as :class:`matplotlib.legend.Legend` lays them out: columns of consecutive entries, each as wide as its
    widest (handle, pad, label), ``columnspacing`` between them, ``borderpad`` around."""
    em = fontsize / 72
    room = fig.get_figwidth() - 2 * EDGE - 2 * rcParams["legend.borderpad"] * em
    handle = (rcParams["legend.handlelength"] + rcParams["legend.handletextpad"]) * em
    labels = [wrap(h.get_label(), room - handle, fontsize, renderer) for h in handles]
    widths = [handle + _text_width(label, fontsize, renderer) for label in labels]
    for ncols in range(min(most, len(widths)), 0, -1):
        rows, extra = divmod(len(widths), ncols)
        starts = [c * rows + min(c, extra) for c in range(ncols + 1)]  # np.array_split's columns
        row = (
            sum(max(widths[a:b]) for a, b in zip(starts, starts[1:]))
            + (ncols - 1) * rcParams["legend.columnspacing"] * em
        )
        if row <= room:
            break
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=fontsize, frameon=False)
    return max(sum(label.count("\n") + 1 for label in labels[a:b]) for a, b in zip(starts, starts[1:]))


def _save(fig: Figure, path: Path, digest: str) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None, "Description": digest})
    atomic_write_bytes(path, buf.getvalue())
    return path


# ------------------------------------------------------------------------------------------ forest plots
def _finite(row: ForestRow) -> bool:
    return math.isfinite(row.ratio) and row.ratio > 0


def _has_ci(row: ForestRow) -> bool:
    return math.isfinite(row.low) and math.isfinite(row.high) and row.low > 0


def half_width(rows: Sequence[ForestRow]) -> float:
    """Half the width, in decades, of a log speedup axis centred on 1 that holds every row's CI and band
    (at least :data:`MIN_HALF_DECADES`, plus 8 % headroom): give the same value to every plot of a run."""
    reach = [MIN_HALF_DECADES]
    for row in rows:
        reach.append(abs(math.log10(1 - row.band)))
        if _finite(row):
            reach.append(abs(math.log10(row.ratio)))
        if _has_ci(row):
            reach += [abs(math.log10(row.low)), abs(math.log10(row.high))]
    return max(reach) * 1.08


def _ticks(half: float) -> list[float]:
    """The ticks of :data:`TICK_SETS` for an axis of ``10**±half`` (those inside it)."""
    lo, hi = 10**-half, 10**half
    ticks = next(ticks for widest, ticks in TICK_SETS if half <= widest)
    return [t for t in ticks if lo <= t <= hi]


def _forest(ax: Axes, rows: Sequence[ForestRow], half: float) -> None:
    """Draw ``rows`` top to bottom on ``ax``: per-row band, CI whiskers, verdict marker and words."""
    ys = list(range(len(rows)))[::-1]
    ax.set_xscale("log")
    ax.set_xlim(10**-half, 10**half)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    for y, row in zip(ys, rows):
        ax.fill_betweenx([y - 0.5, y + 0.5], 1 / (1 + row.band), 1 / (1 - row.band), color="#d0d7de", lw=0)
    ax.axvline(1.0, color="#57606a", lw=0.8)
    for y, row in zip(ys, rows):
        colour = VERDICT_COLOURS.get(row.verdict, "#57606a")
        if not _finite(row):
            ax.plot(1.0, y, marker="x", color=colour, ms=5)
            words = "no data"
        else:
            x = 1 / row.ratio
            if _has_ci(row):
                ax.plot([1 / row.high, 1 / row.low], [y, y], color=colour, lw=1.2, solid_capstyle="butt")
            ax.plot(x, y, marker=VERDICT_MARKERS.get(row.verdict, "o"), color=colour, ms=5, ls="none")
            ci = f"[{1 / row.high:.3f}, {1 / row.low:.3f}]" if _has_ci(row) else "(no CI)"
            words = f"{x:.3f}× {ci} {row.verdict}"
        ax.annotate(
            words, (1.0, y), xycoords=("axes fraction", "data"), xytext=(4, 0), textcoords="offset points",
            va="center", fontsize=7, color=colour,
        )  # fmt: skip
    ax.set_yticks(ys, [row.label for row in rows], fontsize=7)
    ticks = _ticks(half)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", lw=0.3)


def _verdict_legend(fig: Figure, renderer: RendererBase, bands: Sequence[float]) -> None:
    handles = [
        Line2D([], [], color=c, marker=VERDICT_MARKERS[v], ls="none", label=v) for v, c in VERDICT_COLOURS.items()
    ]
    shown = "/".join(f"±{b:.0%}" for b in sorted(set(bands))) or "±2%"
    handles.append(Line2D([], [], color="#d0d7de", lw=6, label=f"verdict band ({shown})"))
    _legend(fig, renderer, handles, most=5)


def forest_figure(rows: Sequence[ForestRow], title: str, xlabel: str, half: float | None = None) -> Figure:
    """One forest plot: ``rows`` top to bottom (see :func:`_forest`), ``half`` the axis half-width in decades
    (:func:`half_width`; default this plot's own). The title is the figure's, left-aligned and wrapped to its width
    (an axes title starts after the row labels, and the layout cannot make room for one wider than what is left)."""
    half = half_width(rows) if half is None else half
    fig, renderer = _figure(7.0, 0.26 * max(len(rows), 1) + 1.5)
    ax = fig.subplots()
    _forest(ax, rows, half)
    ax.set_xlabel(xlabel, fontsize=8)
    text = wrap(title, fig.get_figwidth() - 2 * EDGE, 9, renderer)
    fig.suptitle(text, x=EDGE / fig.get_figwidth(), ha="left", fontsize=9)
    _verdict_legend(fig, renderer, [row.band for row in rows])
    return fig


def forest_png(path: Path, rows: Sequence[ForestRow], title: str, xlabel: str, half: float | None = None) -> Path:
    """Write :func:`forest_figure`'s plot of these arguments to ``path``. Returns ``path``."""
    return _save(forest_figure(rows, title, xlabel, half), path, forest_digest(rows, title, xlabel, half))


def forest_digest(rows: Sequence[ForestRow], title: str, xlabel: str, half: float | None = None) -> str:
    """:func:`data_digest` of a forest plot (:func:`forest_png`'s arguments)."""
    return data_digest(list(rows), title, xlabel, half_width(rows) if half is None else half)


def contrast_png_name(index: int) -> str:
    """File name of the ``index``-th contrast's forest plot (1-based, in the run's contrast order)."""
    return f"contrast-{index}.png"


def forest_rows(result) -> list[ForestRow]:
    """A :class:`harness.contrasts.ContrastResult`'s rows as forest rows (its comparisons as computed)."""
    return [
        ForestRow(
            f"{r.cell.op} {r.cell.label} {r.cell.dtype}" + (" (launch-bound)" if r.launch_bound else ""),
            r.cmp.ratio,
            r.cmp.ci_low,
            r.cmp.ci_high,
            r.cmp.verdict,
            r.cmp.threshold,
        )
        for r in result.rows
    ]


def plotted(results: Sequence) -> list[tuple[int, object]]:
    """(index for :func:`contrast_png_name`, result) of the contrasts that get a plot: those with cells."""
    return [(i, result) for i, result in enumerate(results, start=1) if result.rows]


def contrast_title(result) -> str:
    """``label: A vs B; claim …: outcome`` of a contrast result, for its plot."""
    c = result.contrast
    head = f"{c.name}: " if c.name else ""
    claim = {"faster": f"claim {c.a.label} faster", "unchanged": "claim unchanged", "equivalent": "claim equivalent"}
    tail = f"; {claim[c.claim]}: {result.outcome}" if c.claim in claim else ""
    return f"{head}{c.a.label} (A) vs {c.b.label} (B){tail}"


FOREST_XLABEL = "speedup = B time / A time (> 1: A faster), 95% CI"


def contrast_digests(results: Sequence) -> dict[str, str]:
    """File name -> :func:`data_digest` of each plot :func:`contrast_pngs` writes for ``results``."""
    return {
        contrast_png_name(i): forest_digest(forest_rows(result), contrast_title(result), FOREST_XLABEL)
        for i, result in plotted(results)
    }


def contrast_pngs(directory: Path, results: Sequence, stale: Callable[[Path], bool] = lambda path: True) -> list[Path]:
    """Write one forest plot per contrast with cells (:func:`plotted`) into ``directory``; remove
    ``contrast-*.png`` left from an earlier render with more contrasts, those ``stale(path)`` accepts (the
    report passes :func:`harness.outdir.is_ours`: a file of the user's of such a name stays). Returns the paths."""
    written = [
        forest_png(Path(directory) / contrast_png_name(i), forest_rows(result), contrast_title(result), FOREST_XLABEL)
        for i, result in plotted(results)
    ]
    for old in sorted(Path(directory).glob("contrast-*.png")):
        if old not in written and stale(old):
            old.unlink()
    return written


# ------------------------------------------------------------------------------------------ latency
def sizes_vary(points: Sequence[LatencyPoint]) -> bool:
    """Whether some line of a latency plot (series, op, dtype) has more than one size (FLOP per call)."""
    sizes: dict[tuple[str, str, str], set[float]] = {}
    for p in points:
        sizes.setdefault((p.series, p.op, p.dtype), set()).add(p.flop)
    return any(len(s) > 1 for s in sizes.values())


def latency_png(path: Path, points: Sequence[LatencyPoint], family: str, unit_note: str) -> Path | None:
    """Write the latency-vs-size plot of one workload family (log-log, one panel per dtype that has a line
    with more than one size, :func:`sizes_vary`), or, when no dtype has one, write nothing, remove an older
    PNG of that name and return None.

    Args:
        points: the family's points; ``series`` names (build, config).
        unit_note: what the latency is (e.g. "device time per call" or "host time per call").
    Returns:
        ``path``, or None.
    """
    fig = latency_figure(points, family, unit_note)
    if fig is None:
        Path(path).unlink(missing_ok=True)
        return None
    return _save(fig, path, latency_digest(points, family, unit_note))


def latency_figure(points: Sequence[LatencyPoint], family: str, unit_note: str) -> Figure | None:
    """The plot :func:`latency_png` writes, or None where it writes none: a :data:`LATENCY_PANEL` per dtype, taller
    by a legend's lines beyond 3 (the legend takes fewer columns as its labels grow, :func:`_legend`)."""
    dtypes = _latency_dtypes(points)
    if not dtypes:
        return None
    points = [p for p in points if p.dtype in dtypes]
    series = list(dict.fromkeys(p.series for p in points))
    ops = list(dict.fromkeys(p.op for p in points))
    colours = [f"C{i}" for i in range(len(series))]
    width, height = LATENCY_PANEL
    fig, renderer = _figure(width * len(dtypes), height)
    axes = fig.subplots(1, len(dtypes), squeeze=False)[0]
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
        _latency_axes(ax, [p for p in points if p.dtype == dtype], f"{family} {dtype}", unit_note, renderer)
    lines = _latency_legend(fig, renderer, series, ops, colours)
    fig.set_figheight(height + LEGEND_ROW * max(0, lines - 3))
    return fig


def _latency_dtypes(points: Sequence[LatencyPoint]) -> list[str]:
    return sorted({p.dtype for p in points if sizes_vary([q for q in points if q.dtype == p.dtype])})


def latency_digest(points: Sequence[LatencyPoint], family: str, unit_note: str) -> str | None:
    """:func:`data_digest` of the plot :func:`latency_png` draws from these arguments; None where it draws none."""
    dtypes = _latency_dtypes(points)
    return data_digest([p for p in points if p.dtype in dtypes], family, unit_note) if dtypes else None


def _latency_axes(ax: Axes, panel: Sequence[LatencyPoint], title: str, unit_note: str, renderer: RendererBase) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    lo_x, hi_x = min(p.flop for p in panel), max(p.flop for p in panel)
    lo_y, hi_y = min(p.q1 for p in panel) * 1e6, max(p.q3 for p in panel) * 1e6
    ax.set_xlim(lo_x / 3, hi_x * 3)
    ax.set_ylim(lo_y / 2, hi_y * 2)
    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_major_formatter(LogFormatterSciNotation(base=10))
    ax.xaxis.set_minor_formatter(NullFormatter())
    # 1-2-5 ticks with labels, so a range inside one decade still shows its scale
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    width, height = (panel - margin for panel, margin in zip(LATENCY_PANEL, LATENCY_MARGINS))
    ax.set_title(wrap(title, width, 9, renderer), fontsize=9)
    ax.set_xlabel("FLOP per call", fontsize=8)
    ax.set_ylabel(wrap(f"median µs ({unit_note})", height, 8, renderer), fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(which="both", lw=0.3)


def _latency_legend(
    fig: Figure, renderer: RendererBase, series: Sequence[str], ops: Sequence[str], colours: Sequence[str]
) -> int:
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
    # at most 3 columns: the entries ("patched / fast_math+prefer_metal") are long; fewer where they don't fit
    return _legend(fig, renderer, handles, most=3)
