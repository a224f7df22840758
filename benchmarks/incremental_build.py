"""Incremental patched build vs full patched build: translation units recompiled and wall time.

Generates the small upstream of tests/small_upstream.py (7 C++ translation units, the series
touches one), then runs build_stock, build_patched (full, own worktree) and build_patched
--incremental (series applied in the built stock tree) through harness.build, and reports

    ratio = units compiled by the incremental build / units compiled by the full build

(compile steps counted from the CMake/Ninja output in each build log). Goal: ratio == touched
units / all units (1/7 here): only the translation units the series touches recompile.

Usage: python benchmarks/incremental_build.py [--jobs N] [--out results/incremental_build.json]
Exit status 1 when the goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import small_upstream as su  # noqa: E402

from harness.build import plan as plan_mod  # noqa: E402
from harness.build import wheel as wheel_mod  # noqa: E402
from harness.fsutil import atomic_write_json  # noqa: E402


def measure(workdir: Path, jobs: int) -> dict:
    """Run the three builds in ``workdir``; return units, seconds and the ratio."""
    os.environ.setdefault("TORCH_PATCH_HARNESS_CACHE", str(workdir / "cache"))
    repo = su.make_upstream(workdir)
    series_dir = su.make_series(repo, workdir / "patches")
    patches = tuple(sorted((series_dir / "v1.4.0").glob("*.patch")))
    stock = su.worktree(repo, workdir / "stock")
    patched = su.worktree(repo, workdir / "patched")
    su.apply_series(patched, list(patches))
    series = plan_mod.SeriesRef(su.SERIES_NAME, patches, (su.MARKER,), (su.PATCHED_FILE,))
    sha = plan_mod.git_head(stock)
    # no compiler cache: it would hide recompiles of the full build behind cache hits in wall time
    common = dict(jobs=jobs, base_sha=sha, launcher=None)
    runs = {
        "stock": plan_mod.plan_build(stock, "linux-cpu", kind="stock", dist_dir=workdir / "dist", **common),
        "patched_full": plan_mod.plan_build(
            patched, "linux-cpu", kind="patched", series=series, dist_dir=workdir / "dist", **common
        ),
        "patched_incremental": plan_mod.plan_build(
            stock,
            "linux-cpu",
            kind="patched",
            series=series,
            incremental=True,
            dist_dir=workdir / "dist-incremental",
            **common,
        ),
    }
    out = {}
    for name, plan in runs.items():
        result = wheel_mod.build_wheel(plan, force=True)
        out[name] = {"compiled_units": result.compiled_units, "seconds": round(result.duration_s, 2)}
    full, inc = out["patched_full"]["compiled_units"], out["patched_incremental"]["compiled_units"]
    return {
        "units_total": len(su.UNITS),
        "units_touched_by_series": 1,
        "builds": out,
        "ratio_incremental_over_full": inc / full if full else None,
        "goal_ratio": 1 / len(su.UNITS),
        "jobs": jobs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="incremental-build-") as tmp:
        data = measure(Path(tmp), args.jobs)
    print(json.dumps(data, indent=1))
    if args.out:
        atomic_write_json(args.out, data)
    ok = data["ratio_incremental_over_full"] is not None and data["ratio_incremental_over_full"] <= data["goal_ratio"]
    print(
        f"incremental/full translation units: {data['builds']['patched_incremental']['compiled_units']}/"
        f"{data['builds']['patched_full']['compiled_units']} = {data['ratio_incremental_over_full']:.3f} "
        f"(goal <= {data['goal_ratio']:.3f}): {'met' if ok else 'MISSED'}",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
