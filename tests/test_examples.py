"""The example reports in docs/examples/ are exactly what the current code renders from their
results.json: report.md byte for byte, each PNG by the digest of the data it shows, and three examples
rendered again down to the PNG bytes (rendering is deterministic)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness import contrasts, report
from harness import document as doc
from harness import results as res

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "docs" / "examples").glob("*/results.json"))


def test_there_are_cpu_and_h200_examples():
    assert {p.parent.name for p in EXAMPLES} >= {"cpu-ab", "h200-aa"}


#: examples rendered in full, PNGs included, and compared byte for byte (a cpu run, a GPU run with device time,
#: a planted route run); every other example's PNGs are checked by the digest of the data they show
RENDERED = {"cpu-ab", "h200-planted-device-time", "h200-planted-route"}


def png_description(path: Path) -> str:
    from PIL import Image  # matplotlib's own dependency

    with Image.open(path) as image:
        return image.text.get("Description", "")


@pytest.mark.parametrize("results", EXAMPLES, ids=lambda p: p.parent.name)
def test_example_report_is_current_and_its_plots_show_its_data(results, tmp_path):
    data = res.load(results.parent)
    assert report.render(data) == (results.parent / "report.md").read_text(), (
        "re-render it: python -m harness report " + str(results.parent)
    )
    digests = report.plot_digests(data)
    assert {p.name for p in results.parent.glob("*.png")} == set(digests), "a plot is missing or left from before"
    for name, digest in digests.items():
        assert png_description(results.parent / name) == digest, f"{name} shows other data: re-render it"
    if results.parent.name not in RENDERED:
        return
    # byte-identical: every file equals an independent render of the same results.json -- the committed
    # one, rendered by an earlier process; where a plot differs from it (another matplotlib), a second
    # render in this process
    written = report.write(tmp_path / "a", data)
    assert sorted(p.name for p in written[1:]) == sorted(digests)
    if any(path.read_bytes() != (results.parent / path.name).read_bytes() for path in written):
        second = tmp_path / "b"
        report.write(second, data)
        for path in written:
            assert path.read_bytes() == (second / path.name).read_bytes(), path.name


def test_a_plot_of_other_data_is_caught_by_its_digest(tmp_path):
    """The digest check above catches a committed PNG drawn from other data: one cell's ratio changed."""
    from harness import plots

    rows = [plots.ForestRow("mm M1 N1024 K1024 float32", 1.01, 0.99, 1.02, "equivalent", 0.02)]
    drawn = plots.forest_png(tmp_path / "c.png", rows, "t", plots.FOREST_XLABEL)
    assert png_description(drawn) == plots.forest_digest(rows, "t", plots.FOREST_XLABEL)
    other = [dataclasses.replace(rows[0], ratio=1.011)]
    assert png_description(drawn) != plots.forest_digest(other, "t", plots.FOREST_XLABEL)


def test_processes_per_cell_of_the_h200_default_matrix_examples():
    # A/A: 4 planned rounds, then 18 adaptive rounds that took SDPA causal L512 fp32 (cublaslt) to 22
    # processes per side; the planted run: 12 adaptive rounds, 16 at most
    root = Path(__file__).resolve().parent.parent / "docs" / "examples"
    assert res.processes_range(res.load(root / "h200-aa-default-matrix")) == (4, 22)
    assert res.processes_range(res.load(root / "h200-planted-default-matrix")) == (4, 16)


@pytest.mark.parametrize("results", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_example_pr_block_fits_one_screen(results):
    """The PR block (above the first <details>) is at most 60 lines for every real run; the H200
    default matrix's was 177 at dbd943c."""
    text = (results.parent / "report.md").read_text()
    block = text.split("<details><summary><b>Details</b>", 1)[0]
    block = block[block.index("## For the pull request") :]
    assert len(block.splitlines()) <= 60, results.parent.name


def _rows(name: str) -> list[tuple[str, contrasts.ContrastRow]]:
    run = doc.load(Path(__file__).resolve().parent.parent / "docs" / "examples" / name)
    return [(result.contrast.a.config, r) for result in contrasts.evaluate_all(run) for r in result.rows]


def test_the_h200_aa_under_the_floor_rule_spends_its_budget_on_the_busy_cells():
    """docs/examples/h200-aa-floor: the default `compare --device cuda` A/A after launch-bound cells whose
    spread cannot reach the band at their floor stopped riding along (576 s on the H200): no false verdict,
    53 of the 54 cells whose device was busy equivalent, 52 of them within ±1 %; the two left are SDPA causal
    B1 H8 L512 D64 float32, bimodal between processes (docs/examples/h200-aa-share: 3 of 65 not decided)."""
    root = Path(__file__).resolve().parent.parent / "docs" / "examples" / "h200-aa-floor"
    analysis = report.analyse(doc.load(root))
    rows = [(c, r) for c, result in analysis.per_config.items() for r in result.rows]
    assert len(rows) == 153 and not [r for _, r in rows if r.cmp.verdict in ("faster", "slower")]
    busy = [(c, r) for c, r in rows if not r.launch_bound]
    assert len(busy) == 54
    assert sum(r.cmp.verdict == "equivalent" for _, r in busy) == 53
    wide = sorted((c, r.cell.key) for c, r in busy if r.cmp.half_width > 0.01)
    assert wide == [("cublaslt", "sdpa_causal/1x8x512x64/float32"), ("default", "sdpa_causal/1x8x512x64/float32")]
    assert sum(r.cmp.verdict == "undetermined" for _, r in rows) == 92


def test_the_h200_device_time_aa_decides_the_launch_bound_cells_on_device_time():
    """docs/examples/h200-aa-device-time: the default `compare --device cuda` A/A (568 s on the H200) after the
    device-time corrections (the replayed unit sized by device time; each replay behind a spin that hides the
    graph's launch): 0 false verdicts, 2 of 153 undetermined; 83 launch-bound cells judged on device time, 81 of
    them with the CI inside ±2 %. The two left are one cell, mm 1x1024x1024 float32 outside cublaslt, whose
    device time sits at per-process levels (8.2-11.7 µs; docs/timing.md)."""
    rows = _rows("h200-aa-device-time")
    assert len(rows) == 153 and not [r for _, r in rows if r.cmp.verdict in ("faster", "slower")]
    undetermined = sorted((c, r.cell.key) for c, r in rows if r.cmp.verdict == "undetermined")
    assert undetermined == [("default", "mm/1x1024x1024/float32"), ("tf32_override", "mm/1x1024x1024/float32")]
    device = [(c, r) for c, r in rows if r.time == contrasts.DEVICE]
    assert len(device) == 83 and all(r.launch_bound for _, r in device)
    inside = [r for _, r in device if 0.98 <= r.cmp.ci_low and r.cmp.ci_high <= 1.02]
    assert len(inside) == 81


def test_the_h200_planted_run_is_caught_by_device_time_on_the_launch_bound_cells():
    """docs/examples/h200-planted-device-time: `--plant-k 0.05` on 21 GEMM cells, 5 rounds: of the 17 launch-bound
    on the H200, judged on device time, 16 slower (CI beyond +2 %), and mm 1x1024x1024 float32 (per-process
    levels) undetermined; none is called equivalent or faster."""
    root = Path(__file__).resolve().parent.parent / "docs" / "examples"
    (result,) = contrasts.evaluate_all(doc.load(root / "h200-planted-device-time"))
    device = {r.cell.key: r for r in result.rows if r.time == contrasts.DEVICE}
    assert len(device) == 17
    slower = {k for k, r in device.items() if r.cmp.verdict == "slower" and r.cmp.ci_low > 1.02}
    assert set(device) - slower == {"mm/1x1024x1024/float32"}
    assert device["mm/1x1024x1024/float32"].cmp.verdict == "undetermined"


def test_the_h100_placements_aa_decides_most_launch_bound_cells_and_spent_its_rounds_on_decided_ones():
    """docs/examples/h100-aa-placements: the default A/A (534 s on an H100) with device time averaged over 8
    placements of the inputs: 0 false verdicts; 104 launch-bound cells judged on device time, 88 of them with
    the CI inside ±2 %; mm 1x1024x1024 float32 (per-process levels on the H200) is among them. 16 stayed
    undetermined at 4-6 processes per side while the two adaptive rounds that fitted went to 33-47 cells,
    most already decided: what made the adaptive rounds decide the undetermined cells first."""
    rows = _rows("h100-aa-placements")
    assert len(rows) == 153 and not [r for _, r in rows if r.cmp.verdict in ("faster", "slower")]
    device = [(c, r) for c, r in rows if r.time == contrasts.DEVICE]
    assert len(device) == 104 and all(r.launch_bound for _, r in device)
    inside = {(c, r.cell.key) for c, r in device if 0.98 <= r.cmp.ci_low and r.cmp.ci_high <= 1.02}
    assert len(inside) == 88 and ("default", "mm/1x1024x1024/float32") in inside
    assert sum(r.cmp.verdict == "undetermined" for _, r in rows) == 26
    assert max(len(r.rounds) for _, r in device) == 6


def test_the_h100_planted_run_is_caught_by_device_time_where_the_grown_k_costs_more_than_the_band():
    """docs/examples/h100-planted-placements: `--plant-k 0.05` on 21 GEMM cells, 5 rounds, an H100: all 21
    launch-bound, judged on device time; 16 slower (mm 1x1024x1024 float32 among them, 0.879x), and the 5 whose
    grown K costs the kernel only 1.9-3.1 % (addmm 1024³, mm 512³: K 1024 -> 1088 and 512 -> 544 add 6.25 % of
    the FLOP) are undetermined at the band's edge (time ratio 1.019-1.031); none is equivalent or faster."""
    device = {r.cell.key: r for _, r in _rows("h100-planted-placements") if r.time == contrasts.DEVICE}
    assert len(device) == 21
    slower = {k for k, r in device.items() if r.cmp.verdict == "slower" and r.cmp.ci_low > 1.02}
    assert len(slower) == 16 and "mm/1x1024x1024/float32" in slower
    edge = {k: r.cmp for k, r in device.items() if k not in slower}
    assert {k.split("/")[0] + "/" + k.split("/")[1] for k in edge} == {"addmm/1024x1024x1024", "mm/512x512x512"}
    assert all(c.verdict == "undetermined" and 1.018 <= c.ratio <= 1.031 for c in edge.values())
