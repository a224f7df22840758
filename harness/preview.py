"""Command ``preview``: see report.md as a GitHub pull request would show it.

Renders ``report.md`` with cmark-gfm (``cmarkgfm``, the C library GitHub itself uses for
GitHub-flavoured markdown: tables, autolinks, the tag filter) to ``report.html`` next to it, with
a small stylesheet close to GitHub's, and optionally takes a screenshot with headless Chromium
(Debian package ``chromium``) so the rendering can be looked at, e.g. in a CI artifact.

``<details>`` blocks stay folded as on GitHub; ``--open-details`` unfolds them for a screenshot
of everything.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from harness import children
from harness.errors import UsageError
from harness.fsutil import atomic_write_text
from harness.outdir import PREVIEW_WRITES, claim, holds_results, make_room, marked_kind

#: GitHub's markdown body is 980 px wide at most; these rules mimic its tables, code and images
STYLE = """
body { font-family: -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; font-size: 14px;
       line-height: 1.5; color: #1f2328; max-width: 980px; margin: 24px auto; padding: 0 32px; }
h1, h2 { border-bottom: 1px solid #d1d9e0; padding-bottom: .3em; }
table { border-collapse: collapse; display: block; overflow: auto; margin: 0 0 16px; }
th, td { border: 1px solid #d1d9e0; padding: 6px 13px; }
tr:nth-child(2n) { background: #f6f8fa; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 85%; background: #f6f8fa; }
pre { padding: 16px; overflow: auto; }
blockquote { color: #59636e; border-left: .25em solid #d1d9e0; margin: 0; padding: 0 1em; }
img { max-width: 100%; }
details { margin-bottom: 16px; }
"""

#: seconds Chromium may take for one screenshot
SCREENSHOT_S = 120.0
CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def render_html(markdown: str, title: str, open_details: bool = False) -> str:
    """``markdown`` rendered as GitHub does (cmark-gfm, raw HTML kept as GitHub keeps
    ``<details>``), wrapped in a standalone page."""
    try:
        import cmarkgfm
        from cmarkgfm.cmark import Options
    except ImportError:
        raise UsageError(
            "the preview needs the cmarkgfm package (GitHub's markdown renderer)",
            "pip install cmarkgfm, or run `nox -s preview -- DIR`",
        ) from None
    body = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    if open_details:
        body = re.sub(r"<details>", "<details open>", body)
    return (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n"
    )


def screenshot(page: Path, png: Path, width: int) -> Path:
    """Screenshot ``page`` with headless Chromium into ``png`` (full page height estimated from
    the HTML's length; Chromium's --screenshot takes the window size).

    Raises:
        UsageError: no Chromium on PATH, or Chromium failed.
    """
    browser = next((shutil.which(name) for name in CHROMIUM if shutil.which(name)), None)
    if browser is None:
        raise UsageError(
            "no Chromium found on PATH (looked for " + ", ".join(CHROMIUM) + ")",
            "install it (Debian/Ubuntu: apt-get install chromium) or drop --screenshot",
        )
    text = page.read_text()
    height = min(
        16000, 400 + 22 * text.count("<tr") + 28 * text.count("<p") + 24 * text.count("<li") + 480 * text.count("<img")
    )
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        f"--screenshot={png.resolve()}",
        page.resolve().as_uri(),
    ]
    proc = children.run(
        cmd, what="Chromium taking the screenshot", deadline=SCREENSHOT_S, remedy="run it by hand: " + " ".join(cmd)
    )
    if proc.returncode != 0 or not png.is_file():
        last = proc.last_line()
        raise UsageError(
            f"Chromium could not take the screenshot (exit {proc.returncode}): {last}",
            "run it by hand to see why: " + " ".join(cmd),
        )
    return png


def _holds_a_report(directory: Path) -> bool:
    """A folder written before output folders were marked: it holds a results.json of ours that loads
    (:func:`harness.outdir.holds_results`; a report.md alone may be the user's, as may report.html)."""
    return holds_results(directory)


def write_html(directory: Path, open_details: bool = False) -> Path:
    """``directory/report.md`` (or the report.md given) rendered to ``report.html`` beside it; returns its path.

    Raises:
        UsageError: there is no report.md; cmarkgfm is not installed.
        ResultsError: the folder is not one the harness may write in (:func:`harness.outdir.claim`).
    """
    directory = directory.parent if directory.name == "report.md" else directory
    source = directory / "report.md"
    if not source.is_file():
        raise UsageError(f"{source} does not exist", "run `nox -s report -- DIR` (or compare) first")
    merged = directory.is_dir() and marked_kind(directory) == "merge"
    claim(directory, "preview DIR", PREVIEW_WRITES, _holds_a_report, kind="merge" if merged else None)
    page = directory / "report.html"
    make_room(directory, page.name)  # a page the harness did not write is set aside by name, never overwritten
    atomic_write_text(page, render_html(source.read_text(), f"report: {directory.name}", open_details))
    return page
