"""harness.preview: report.md rendered as GitHub renders it, and the Chromium screenshot."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.preview import CHROMIUM, render_html

REPO = Path(__file__).resolve().parent.parent
REPORT = """# A/B

> **Note:** an A/A run.

- **default**: speedup **1.002× [0.998, 1.006]**

<details><summary><b>default</b>: 1 cells</summary>

| cell | speedup [95% CI] |
|---|---|
| mm M64 N64 K64 | 1.002× [0.998, 1.006] |

</details>

<script>alert(1)</script>
"""


def test_github_flavoured_rendering_keeps_tables_and_details_and_filters_script():
    page = render_html(REPORT, "t")
    assert "<table>" in page and "<td>mm M64 N64 K64</td>" in page
    assert "<details><summary><b>default</b>: 1 cells</summary>" in page  # folded, as on GitHub
    assert "<blockquote>" in page and "<strong>1.002× [0.998, 1.006]</strong>" in page
    assert "<script>" not in page and "&lt;script>" in page  # GitHub's tag filter
    assert "<details open>" in render_html(REPORT, "t", open_details=True)


def _run(*args):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=REPO)


def _a_run(folder: Path) -> None:
    """``report.md`` beside a results.json of ours (preview takes an unmarked folder only with one that loads)."""
    shutil.copy(REPO / "docs" / "examples" / "cpu-ab" / "results.json", folder / "results.json")
    (folder / "report.md").write_text(REPORT)


def test_preview_command_writes_html_and_a_missing_report_is_one_line(tmp_path):
    missing = _run("preview", str(tmp_path))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "report.md does not exist -- run `nox -s report -- DIR`" in missing.stderr
    _a_run(tmp_path)
    ok = _run("preview", str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert "<td>mm M64 N64 K64</td>" in (tmp_path / "report.html").read_text()


@pytest.mark.skipif(not any(shutil.which(n) for n in CHROMIUM), reason="no Chromium here (apt-get install chromium)")
def test_screenshot_is_a_png_of_the_page(tmp_path):
    _a_run(tmp_path)
    proc = _run("preview", str(tmp_path), "--screenshot", "--width", "800")
    assert proc.returncode == 0, proc.stderr
    png = (tmp_path / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG") and int.from_bytes(png[16:20], "big") == 800  # IHDR width
