"""harness.plots: one forest plot per contrast from the contrasts' own results, latency-vs-size only where a
line has more than one size, nothing clipped (every artist inside the saved canvas)."""

from __future__ import annotations

import io
import math
from dataclasses import replace

import numpy as np
from matplotlib.figure import Figure
from matplotlib.image import imread
from test_evidence import _noise, synthetic

from harness import contrasts as con
from harness import plots, report
from harness.evidence import Contrast, Side


def _blank_edges(png: bytes) -> bool:
    """Whether the outermost pixel rows and columns of a PNG are all background (white): an artist cut by
    the canvas edge (a clipped legend or label) leaves its pixels there."""
    image = imread(io.BytesIO(png))[..., :3]
    edges = np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]])
    return bool((edges > 0.99).all())


def test_blank_edges_catches_a_planted_clipped_legend():
    fig = Figure(figsize=(3, 2))
    ax = fig.subplots()
    ax.plot([1, 2], [1, 2], label="a legend entry far wider than this three-inch figure " * 2)
    fig.legend(loc="lower center", ncols=1)
    clipped = io.BytesIO()
    fig.savefig(clipped, format="png", dpi=50)  # as the plots are saved: no tight bounding box
    assert not _blank_edges(clipped.getvalue())
    kept = io.BytesIO()  # the canvas grown to hold the legend
    fig.savefig(kept, format="png", dpi=50, bbox_inches="tight", pad_inches=0.15)
    assert _blank_edges(kept.getvalue())


def _run():
    """A cpu run: `fast` 20 % faster on mm than `base`, both builds the same; two sizes of mm, one of sdpa."""

    def time_of(build, config, key, rnd):
        scale = 2.0 if "1024" in key else 1.0
        return 1e-3 * scale * (0.8 if config == "fast" and key.startswith("mm") else 1.0) * _noise(build, key, rnd)

    cells = ["mm/512x512x512/float32", "mm/1024x1024x1024/float32", "sdpa/1x8x512x64/float32"]
    return synthetic("cpu", {"base": {}, "fast": {"X": "1"}}, cells, 6, time_of)


def test_one_forest_plot_per_contrast_from_the_contrasts_results(tmp_path):
    data = _run()
    faster = con.evaluate(data, Contrast(Side("stock", "fast"), Side("stock", "base"), ("mm",), (), "faster"))
    same = con.evaluate(data, Contrast(Side("patched", "base"), Side("stock", "base"), (), (), "unchanged"))
    absent = con.evaluate(data, Contrast(Side("stock", "nope"), Side("stock", "base")))
    (tmp_path / "contrast-4.png").write_bytes(b"left from an earlier render")
    written = plots.contrast_pngs(tmp_path, [faster, absent, same])
    # numbered in contrast order; a contrast without cells gets none; the stale one is gone
    assert [p.name for p in written] == ["contrast-1.png", "contrast-3.png"]
    assert sorted(p.name for p in tmp_path.glob("contrast-*.png")) == ["contrast-1.png", "contrast-3.png"]
    for path in written:
        assert path.read_bytes().startswith(b"\x89PNG") and _blank_edges(path.read_bytes())
    # the rows are the contrast's comparisons, as computed (speedup = 1 / time ratio, the cell's band)
    rows = plots.forest_rows(faster)
    assert [r.label for r in rows] == ["mm M512 N512 K512 float32", "mm M1024 N1024 K1024 float32"]
    assert [(r.ratio, r.low, r.high, r.verdict, r.band) for r in rows] == [
        (r.cmp.ratio, r.cmp.ci_low, r.cmp.ci_high, r.cmp.verdict, r.cmp.threshold) for r in faster.rows
    ]
    assert all(1.2 < 1 / r.ratio < 1.3 and r.verdict == "faster" for r in rows)
    assert plots.contrast_title(faster).endswith("claim stock/fast faster: shown")
    # the axis holds every CI and the ±band, centred on 1
    half = plots.half_width(rows)
    assert 10**half > max(1 / r.low for r in rows) and 10**-half < 1 / 1.05
    # same inputs, same bytes
    (tmp_path / "again").mkdir()
    again = plots.contrast_pngs(tmp_path / "again", [faster, absent, same])
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in written]


def test_ticks_follow_the_axis_width_and_stay_few():
    assert plots._ticks(math.log10(1.13)) == [0.9, 0.95, 1.0, 1.05, 1.1]
    assert plots._ticks(math.log10(2.9)) == [0.5, 0.67, 1.0, 1.5, 2.0]
    assert plots._ticks(math.log10(7.0)) == [0.2, 0.5, 1.0, 2.0, 5.0]
    for half in np.linspace(plots.half_width([]), 3.0, 300):  # the narrowest axis half_width gives, and wider
        ticks = plots._ticks(half)
        assert 1.0 in ticks and 3 <= len(ticks) <= 7 and all(10**-half <= t <= 10**half for t in ticks)


def test_latency_plot_only_where_a_line_has_more_than_one_size(tmp_path):
    data = _run()
    analysis = report.analyse(data)
    gemm, sdpa = (report.latency_points(analysis, f) for f in ("gemm", "sdpa"))
    assert plots.sizes_vary(gemm) and not plots.sizes_vary(sdpa)
    (tmp_path / "latency-sdpa.png").write_bytes(b"a one-point plot from an earlier render")
    assert plots.latency_png(tmp_path / "latency-sdpa.png", sdpa, "sdpa", "host clock") is None
    assert not (tmp_path / "latency-sdpa.png").exists()
    path = plots.latency_png(tmp_path / "latency-gemm.png", gemm, "gemm", "host clock")
    assert path is not None and _blank_edges(path.read_bytes())
    # a dtype whose lines have one size each gets no panel: the same PNG as without it
    single = [replace(p, dtype="bfloat16") for p in gemm if p.flop == gemm[0].flop]
    assert single and not plots.sizes_vary(single)
    with_single = plots.latency_png(tmp_path / "with-single.png", [*gemm, *single], "gemm", "host clock")
    assert with_single.read_bytes() == path.read_bytes()
    # the report links exactly the plots written: gemm's latency, one forest plot per contrast
    text = report.render(data, analysis)
    assert "(latency-gemm.png)" in text and "(latency-sdpa.png)" not in text
    assert "](contrast-1.png)" in text and "](contrast-2.png)" in text and "](contrast-3.png)" not in text


def _inside(fig: Figure, artist) -> bool:
    """Whether ``artist``, as the Agg renderer of ``fig``'s last draw placed it, lies within the canvas."""
    box, canvas = artist.get_window_extent(fig.canvas.get_renderer()), fig.bbox
    return canvas.x0 <= box.x0 and box.x1 <= canvas.x1 and canvas.y0 <= box.y0 and box.y1 <= canvas.y1


def _all_inside(fig: Figure) -> bool:
    """Whether everything ``fig``'s last draw drew lies within the canvas: its tight bounding box (what
    ``bbox_inches="tight"`` would grow the canvas to) is inside it."""
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    return 0 <= box.x0 and box.x1 <= fig.get_figwidth() and 0 <= box.y0 and box.y1 <= fig.get_figheight()


def test_a_title_longer_than_the_figure_is_wrapped_inside_the_canvas():
    """A contrast of two long config names has a title wider than the 7-inch figure: it is wrapped to the figure's
    width, every text inside the canvas; on one line it ran past the right edge (and was clipped)."""
    rows = [plots.ForestRow("mm M1 N1024 K1024 float32", 0.5, 0.45, 0.55, "slower", 0.02)]
    title = (
        "patched/fast_math+prefer_metal (A) vs stock/fast_math+prefer_metal (B); "
        "claim patched/fast_math+prefer_metal faster: not shown"
    )
    fig = plots.forest_figure(rows, title, plots.FOREST_XLABEL)
    fig.canvas.draw()
    (text,) = fig.texts
    assert text.get_text().count("\n") == 1 and text.get_text().replace("\n", " ") == title
    assert _inside(fig, text) and _all_inside(fig)
    text.set_text(title)
    fig.canvas.draw()
    assert text.get_window_extent(fig.canvas.get_renderer()).x1 > fig.bbox.x1
    # a title that fits stays one line, at the canvas's left
    short = plots.forest_figure(rows, "patched/default (A) vs stock/default (B)", plots.FOREST_XLABEL)
    short.canvas.draw()
    assert [t.get_text() for t in short.texts] == ["patched/default (A) vs stock/default (B)"]
    assert _all_inside(short)


def test_a_legend_with_labels_longer_than_the_figure_fits_inside_the_canvas():
    """Latency series named by long configs: the legend takes one column and wraps the label wider than the
    4.2-inch figure, so it lies inside the canvas; the same labels in 3 columns, unwrapped, ran past both edges."""
    gemm = report.latency_points(report.analyse(_run()), "gemm")
    tail = "+fast_math+prefer_metal+" + "a_config_name_longer_than_the_figure_" * 3
    points = [replace(p, series=p.series + tail) for p in gemm]
    names = list(dict.fromkeys(p.series for p in points))
    fig = plots.latency_figure(points, "gemm", "device time / synchronize + host clock")
    fig.canvas.draw()
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert ["".join(label.split()) for label in labels[: len(names)]] == ["".join(n.split()) for n in names]
    assert all("\n" in label for label in labels[: len(names)]) and labels[len(names) :] == ["mm"]
    assert _inside(fig, legend) and _all_inside(fig)
    renderer = fig.canvas.get_renderer()
    assert len({round(t.get_window_extent(renderer).x0) for t in legend.get_texts()}) == 1  # one column
    # the height grew with the legend's lines, past the 3 it had room for
    assert fig.get_figheight() > plots.LATENCY_PANEL[1]
    # the legend as it was drawn before: up to 3 columns of the labels as given
    handles = legend.legend_handles
    legend.remove()
    old = fig.legend(handles, [*names, "mm"], loc="outside lower center", ncols=3, fontsize=7, frameon=False)
    fig.canvas.draw()
    box = old.get_window_extent(renderer)
    assert box.x0 < fig.bbox.x0 and box.x1 > fig.bbox.x1
