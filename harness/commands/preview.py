"""``preview``: report.md as GitHub renders it, optionally screenshotted (:mod:`harness.preview`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.numbers import Bound, option
from harness.preview import screenshot, write_html
from harness.progress import note

#: --width: the screenshot's width in pixels (a phone's to an 8K screen's)
WIDTH = Bound(320, 7680, integer=True, unit="pixels")


def add_arguments_preview(parser: argparse.ArgumentParser) -> None:
    """Options of ``preview``."""
    parser.add_argument("directory", type=Path, help="a results directory holding report.md")
    parser.add_argument("--screenshot", action="store_true", help="also write report.png with headless Chromium")
    parser.add_argument("--open-details", action="store_true", help="unfold <details> blocks (for a full screenshot)")
    parser.add_argument(
        "--width", type=option("--width", WIDTH), default=1280, help="screenshot width in pixels (default 1280)"
    )


def run_preview(args: argparse.Namespace) -> int:
    """``preview``: :func:`harness.preview.write_html`, then :func:`harness.preview.screenshot` on request."""
    page = write_html(args.directory, args.open_details)
    note(f"wrote {page}")
    if args.screenshot:
        note(f"wrote {screenshot(page, page.with_name('report.png'), args.width)}")
    return 0
