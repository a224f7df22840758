"""CPU seconds and wall seconds of ``python -m harness merge`` over N synthetic Macs of the MPS default matrix.

Each machine is tests/mps_machines.py's run (the series' four configs x 51 default cells x 6 rounds, about
1.3 MB of results.json); the merge runs as its own process, whose user + system CPU seconds are read from
``os.wait4`` (what a reader of docs/machines.md's scale table asks: how long one merge job takes). Goal:
under 10 CPU seconds for 10 machines (docs/machines.md: 3.1 s on 2026-12-02); the PR block's length is
tests/test_merge.py's.

Usage: PYTHONPATH=. python3 benchmarks/merge_scale.py [--machines 10 20]
Exit status 1 when a count of at most 10 machines takes 10 CPU seconds or more.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from mps_machines import write_machines  # noqa: E402

#: CPU seconds under which 10 machines merge (docs/machines.md)
GOAL_CPU_S = 10.0
#: the deadline of one merge process (seconds): 20 machines took 9.4 s wall here (2026-12-05)
MERGE_DEADLINE_S = 300


def merge_seconds(runs: list[Path], out: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one ``python -m harness merge`` of ``runs`` into ``out``.

    Raises:
        SystemExit: the merge failed or ran past :data:`MERGE_DEADLINE_S` (its words in the message).
    """
    cmd = [sys.executable, "-m", "harness", "merge", *map(str, runs), "--out", str(out)]
    started = time.perf_counter()
    log = out.parent / "merge.stderr"
    with open(log, "wb") as err:  # a file, not a pipe: a full pipe would stall the merge until its deadline
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    deadline = started + MERGE_DEADLINE_S
    try:
        while (waited := os.wait4(proc.pid, os.WNOHANG))[0] == 0:
            if time.perf_counter() > deadline:
                raise SystemExit(f"merge of {len(runs)} machines ran past its {MERGE_DEADLINE_S} s deadline")
            time.sleep(0.05)
    except BaseException:  # the deadline, Ctrl-C: the merge never outlives the benchmark
        proc.kill()
        os.wait4(proc.pid, 0)
        raise
    wall = time.perf_counter() - started
    _, status, usage = waited
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"merge of {len(runs)} machines failed: {log.read_text(errors='replace')[-2000:]}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, nargs="+", default=[10, 20], help="machine counts (1-100)")
    args = parser.parse_args()
    if not all(1 <= n <= 100 for n in args.machines):
        parser.error(f"--machines {args.machines}: give counts from 1 to 100")
    missed = False
    print("| machines | merge CPU s | merge wall s |\n|---|---|---|")
    for n in args.machines:
        with tempfile.TemporaryDirectory() as tmp:
            runs = write_machines(Path(tmp), n)
            cpu, wall = merge_seconds(runs, Path(tmp) / "merged")
        print(f"| {n} | {cpu:.1f} | {wall:.1f} |")
        missed |= n <= 10 and cpu >= GOAL_CPU_S
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
