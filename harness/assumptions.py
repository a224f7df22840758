"""``doctor``'s assumption rows: what the evidence assumes about the device, measured on it.

Each :class:`Assumption` of :data:`ASSUMPTIONS` names the upstream source it rests on and judges the numbers
that :mod:`harness.bench.assumptions` measured inside the build's interpreter, in one fresh process per
route config of the device (:data:`ROUTES`; on MPS ``vanilla`` is the MPSGraph route and ``prefer_metal``
the Metal GEMM route) plus :data:`FRESH` − 1 more fresh processes of the first route. Every row says
"assumption held" or "did not hold", what that means for the evidence, and the source. A process that
runs past its step's deadline (:data:`STEP_S`) is a failed row naming the step; the other rows stand.

The rows (the same code on cpu, cuda and mps; under ``--device mps`` in CI through the conformance mode,
:mod:`harness.bench.conformance`):

1. ``synchronize waits``: a block ended by the synchronize alone lasts as long as one that first reads the
   last output to the host (at least :data:`SYNC_RATIO` of it). On the cpu, whose ops end within the call,
   a lower ratio cannot be an under-count: it is a busy host's time, a warning.
2. ``host encode``: the share of a block's time the host spends enqueuing, per route, on :data:`CELL` and
   on the device's smallest default GEMM cell (:func:`small_cell`: host encode per call is fixed while
   device time grows with FLOP, so the small cell carries the largest share). Whether a route's work is
   submitted as issued or deferred until the synchronize is measured, not assumed: the timer's deferral
   probe on :data:`CELL` (:meth:`harness.bench.timer.BlockTimer.probe_deferred`, the function every timed
   cell runs). On a deferred route (block = encode + device time) the encode share adds to its block
   time; on a route submitted as issued encoding overlaps the device's work. The difference between
   routes biases a ``faster`` contrast between them: the row reports its range over the two cells, and
   over :data:`ENCODE_BIAS` the report names it next to the contrast (:func:`encode_bias_note`). A route
   the probe left out (its sized block launch-bound with too little device work left to tell:
   ``Measurement.deferred`` None) is shown as "deferral not measured" and counted both ways: the range
   holds the bias whether its work was deferred or not, so the row holds only if both would. Such a
   route's encode share is 90 % or more (the probe leaves out only launch-bound blocks), so the row then
   fails: its blocks are host latency whatever the answer, and nothing measured says otherwise.
3. ``duty``: duty 1/3 is not slower than back to back by more than :data:`DUTY_TOLERANCE` (resting does
   not clock the device down); picks the duty for this device (``doctor.json``: ``recommend.duty``).
4. ``stall timeout``: the slowest cell of the default matrix (largest per op family and dtype), with
   :func:`cell_calls` calls per cell: compare without ``--stall-timeout`` sets each cell's stall timeout to
   :data:`harness.supervise.STALL_MARGIN` times its estimate (:func:`harness.supervise.derived_stall`, at
   least the default); the row says what it sets for this cell and fails only when that would pass
   :data:`harness.supervise.STALL_MAX_S` (no stall timeout the harness allows holds the cell).
5. ``fresh-process kernel choice``: the cell's time in :data:`FRESH` fresh processes is one level
   (pytorch issue 182815). Each process times the cell first, then again warmed (``fresh_again``; on the
   cpu in CPU seconds, which a busy host does not add to): a kernel choice lasts the process, a cold start
   does not. Levels (:func:`levels`): the warmed repeats (the first times where a repeat is missing)
   sorted, split where neighbours differ by over :data:`FRESH_SPREAD`; the main level is the largest. Another
   level is a mode when it holds two processes or more, or one whose repeat is off the main level's and
   whose first time does not say the opposite; a level of one with no repeat cannot tell. Two modes or more:
   did not hold. One mode with first times spread over :data:`FRESH_SPREAD` (cold processes, or one that
   cannot tell): held, as a warning that the machine is noisy.
6. ``accuracy``: GEMM and SDPA errors per route within their bounds (:mod:`harness.bench.accuracy`).
7. ``device time``: where the device's time is read in a process of its own
   (:attr:`harness.bench.kernels.Trace.device_env`; mps: the profiler's ``gpu=`` under
   ``PYTORCH_MPS_LOG_PROFILE_INFO=385`` and ``PYTORCH_MPS_TRACE_SIGNPOSTS=4``), one more process per route
   reads :data:`CELL`'s device time per call, and on every route whose row-1 block is kernel-bound (encode
   share under :func:`harness.bench.timer.launch_ratio`) it agrees with the host time per call of that
   block within :data:`DEVICE_AGREE`. A kernel-bound block lasts its calls' device time plus a synchronize,
   so the two agree unless the trace misreads by more than the tolerance (a whole command buffer's time given
   to each operation in it, another field read) or the probe's variables change the kernel; a misreading smaller
   than that (the scheduling time added: tens of µs on a block of ms) and what only small or several-operation
   cells show (the log's 1 µs rounding, unprofiled copies) are not caught here. Not applicable elsewhere.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness import children
from harness import configs as cfg
from harness.bench import assumptions as child
from harness.bench import kernels
from harness.bench.timer import launch_ratio
from harness.bench.worker import LAYOUT_BLOCKS
from harness.bench.workloads import DTYPES, Cell, default_cells
from harness.errors import HarnessError
from harness.supervise import SOURCE_ROOT, STALL_MARGIN, STALL_MAX_S

#: device -> route config -> how the report names its GEMM route (the first config is the fresh-process one)
ROUTES = {
    "mps": {"vanilla": "MPSGraph", "prefer_metal": "Metal"},
    "cuda": {"default": "cuBLAS", "cublaslt": "cuBLASLt"},
    "cpu": {"default": "vectorised ATen", "no_vec": "ATen without vectors"},
}
#: device -> the kernel-bound GEMM cell rows 1-3 and 5 time (cheap on the device: ms, not s)
CELL = {"cpu": "mm/256x256x256/float32", "cuda": "mm/4096x4096x4096/float16", "mps": "mm/2048x2048x2048/float16"}
#: device -> shortest timed block, seconds (the runner's: harness.plan.TIMING)
MIN_BLOCK_S = {"cpu": 2e-3, "cuda": 5e-3, "mps": 5e-3}
#: device -> seconds the stall row may spend on direct calls (the rest is scaled from a probe call)
SLOWEST_BUDGET_S = {"cpu": 3.0, "cuda": 10.0, "mps": 10.0}
#: under the conformance mode (CPU tensors in CI) every size smaller: the code paths run, the numbers mean little
EMULATED = {
    "cell": "mm/64x64x64/float32",
    "small_cell": "mm/1x64x64/float32",
    "min_block_s": 1e-3,
    "budget_s": 0.2,
    "blocks": 4,
    "measure_s": 0.01,
    "probes": {"gemm": ("mm", (32, 32, 32)), "sdpa": ("sdpa", (1, 2, 32, 16))},
    "accuracy": ("mm/32x32x32", "sdpa/1x2x32x16"),
}
#: the small cells the stall row scales from, per op family, and the accuracy row's cells (without dtype)
PROBES = {"gemm": ("mm", (256, 256, 256)), "sdpa": ("sdpa", (1, 8, 256, 64))}
ACCURACY = ("mm/256x256x256", "sdpa/1x8x256x64")
#: a candidate predicted to take longer than this per call is scaled from its probe, not run
DIRECT_S = 2.0
#: fresh processes of the first route config for row 5 (two levels of two processes each at the least)
FRESH = 4
#: row 1: the synchronize-only block is at least this share of the host-read block
SYNC_RATIO = 0.9
#: row 2: a difference in host-encode share above this is named next to the contrast
ENCODE_BIAS = 0.01
#: row 3: duty 1/3 may be this much slower than duty 1 before the device counts as clocking down
DUTY_TOLERANCE = 0.03
#: row 7: device time per call may differ from a kernel-bound block's host time per call by this share (a
#: stated tolerance, not a measurement: the block adds one synchronize, tens of µs on a block of ms; a trace
#: that gives each operation its whole command buffer's time, or reads another field, misses by far more)
DEVICE_AGREE = 0.10
#: seconds each step of an assumption process may take (tests shorten them)
STEP_S = {child.IMPORT_STEP: children.IMPORT_TORCH_S, **{s: 120.0 for s in child.STEPS.values()}}


def small_cell(device: str) -> str:
    """The smallest default GEMM cell (by FLOP) in the dtype of the device's :data:`CELL`: row 2 measures its
    encode share too (``mm/1x1024x1024`` of :func:`harness.bench.workloads.default_cells`)."""
    dtype = Cell.from_key(CELL[device]).dtype
    return min((c for c in default_cells((dtype,)) if c.family == "gemm"), key=lambda c: c.flop).key


@dataclass(frozen=True)
class Measured:
    """What the processes answered: ``routes``: config -> answer dict (or ``{"error": why}``); ``fresh``:
    the first route's cell time in each fresh process (seconds); ``fresh_again``: each of those processes'
    warmed repeat of the cell (seconds per call; on the cpu device CPU seconds, else wall; None where it did
    not answer one); ``labels``: config -> route name;
    the runner's ``stall_s`` (the ``--stall-timeout`` default, the floor of what compare sets) and
    ``timing`` the stall row judges against."""

    device: str
    routes: dict[str, dict]
    fresh: list[float]
    labels: dict[str, str]
    stall_s: float
    timing: dict
    fresh_errors: list[str] = field(default_factory=list)
    fresh_again: list[float | None] = field(default_factory=list)
    #: config -> the ``device`` row's answer of that route's device-time process (row 7), or ``{"error"}``
    device_time: dict[str, dict] = field(default_factory=dict)

    def ok(self, key: str) -> dict[str, dict]:
        """Label -> that route's ``key`` record, for the routes that answered it."""
        return {self.labels[c]: a[key] for c, a in self.routes.items() if isinstance(a.get(key), (dict, list))}

    def cell(self) -> str:
        """The cell rows 1-3 and 5 timed (as the processes said)."""
        return next((a["cell"] for a in self.routes.values() if a.get("cell")), CELL.get(self.device, "?"))

    def errors(self) -> str:
        bad = [f"{self.labels[c]}: {a['error']}" for c, a in self.routes.items() if "error" in a]
        return "; ".join(bad)


@dataclass(frozen=True)
class Verdict:
    """``held``: True, False, or None (not measured: a process failed); ``detail``: one line; ``data``: JSON."""

    held: bool | None
    detail: str
    data: dict = field(default_factory=dict)
    #: False: the assumption does not concern this device (the row is ``skipped``, never ``failed``)
    applies: bool = True
    #: True: held, but the numbers were noisy (the row is a ``warning``, never ``failed``)
    noisy: bool = False


@dataclass(frozen=True)
class Assumption:
    """One row: ``name``, the upstream ``source`` it rests on, what holding or not ``means`` for the
    evidence (two sentences), and ``judge(Measured) -> Verdict``."""

    name: str
    source: str
    means: tuple[str, str]
    judge: Callable[[Measured], Verdict]


def _pct(x: float) -> str:
    return f"{x:.0%}" if abs(x) >= 0.01 else f"{x:.1%}"


def _missing(m: Measured, what: str) -> Verdict:
    return Verdict(None, f"not measured ({m.errors() or 'no process answered ' + what})")


def judge_sync(m: Measured) -> Verdict:
    got = m.ok("sync")
    if not got:
        return _missing(m, "sync")
    ratios = {r: s["sync_s"] / s["read_s"] for r, s in got.items() if s["read_s"] > 0}
    held = all(v >= SYNC_RATIO for v in ratios.values())
    shown = ", ".join(f"{r} {v:.2f}x" for r, v in ratios.items())
    detail = f"synchronize-only block / host-read block: {shown}"
    if not held and m.device == "cpu":  # torch's cpu ops end within the call: a block cannot under-count
        why = f"on the cpu each call's work ends within the call, so under {SYNC_RATIO:g}x is other processes' time"
        return Verdict(True, f"{detail}; noisy machine: {why}", {"ratio": ratios}, noisy=True)
    return Verdict(held, detail, {"ratio": ratios})


def _share(enqueue_s: float, block_s: float) -> float:
    return min(1.0, enqueue_s / block_s) if block_s > 0 else 1.0


def _bias(shares: dict[str, float], deferred: dict[str, bool | None]) -> float:
    """What encoding adds to one route's blocks and not to another's: the encode share of each deferred
    route (0 for a route submitted as issued: its encoding overlaps the device's work), max - min."""
    added = [v if deferred.get(r) else 0.0 for r, v in shares.items()]
    return max(added) - min(added)


def judge_encode(m: Measured) -> Verdict:
    got = m.ok("sync")
    if not got:
        return _missing(m, "sync")
    shares = {r: _share(s["enqueue_s"], s["sync_s"]) for r, s in got.items()}
    deferred = {r: s.get("deferred") for r, s in got.items()}  # the timer's probe on CELL: a route's property
    small = {r: s["small"] for r, s in got.items() if isinstance(s.get("small"), dict)}
    small_shares = {r: _share(x["enqueue_s"], x["block_s"]) for r, x in small.items()}
    # a route the probe left out (None) is taken both ways: the range holds every answer they could have had
    unknown = [r for r, d in deferred.items() if d is None]
    biases = [
        _bias(cell_shares, {**deferred, **dict(zip(unknown, answers))})
        for answers in itertools.product((False, True), repeat=len(unknown))
        for cell_shares in ([shares, small_shares] if small_shares else [shares])
    ]
    low, high = min(biases), max(biases)
    how = {True: "deferred until the synchronize", False: "submitted as issued", None: "deferral not measured"}
    shown = ", ".join(
        f"{r} {_pct(v)}" + (f" / {_pct(small_shares[r])}" if r in small_shares else "") + f" ({how[deferred[r]]})"
        for r, v in shares.items()
    )
    cells = m.cell() + (f" / {next(iter(small.values()))['cell']}" if small else "")
    span = _pct(high) if high - low < 0.005 else f"{_pct(low)}-{_pct(high)}"
    detail = (
        f"host-encode share of a block per call on {cells}: {shown} (measured); bias on a `faster` contrast "
        f"between routes (encode share of the deferred routes) {span}"
        + (f", taking {' and '.join(unknown)} as deferred or not" if unknown else "")
    )
    data = {
        "shares": shares,
        "small_shares": small_shares,
        "deferred": deferred,
        "bias": high,
        "bias_range": [low, high],
        "cell": m.cell(),
        "small_cell": next(iter(small.values()))["cell"] if small else None,
    }
    return Verdict(high <= ENCODE_BIAS, detail, data)


def pick_duty(pairs: dict[str, dict]) -> float:
    """1/3 (the runner's GPU duty) unless duty 1/3 ran slower than duty 1 by over :data:`DUTY_TOLERANCE`
    on some route (the device clocks down while it rests): then 1."""
    slow = any(p["duty_third"] > p["duty_1"] * (1 + DUTY_TOLERANCE) for p in pairs.values())
    return 1.0 if slow else 1 / 3


def judge_duty(m: Measured) -> Verdict:
    if m.device == "cpu":  # the runner never rests the cpu (TIMING: duty 1 on the cpu clock)
        return Verdict(None, "the cpu is timed back to back (duty 1), never rested", {"duty": 1.0}, applies=False)
    got = m.ok("duty")
    if not got:
        return _missing(m, "duty")
    duty = pick_duty(got)
    shown = ", ".join(f"{r} {p['duty_third'] / p['duty_1']:.3f}x" for r, p in got.items())
    detail = f"duty 1/3 time / duty 1 time: {shown}; duty for this device: {'1' if duty == 1 else '1/3'}"
    return Verdict(
        duty != 1.0, detail, {"ratio": {r: p["duty_third"] / p["duty_1"] for r, p in got.items()}, "duty": duty}
    )


def cell_calls(timing: dict) -> int:
    """Calls one cell makes in a worker under ``timing`` (harness.plan.TIMING), in units of one call:
    warm-up, sizing and check (1 each, for a call longer than a block), ``min_samples`` blocks with their
    pre-roll and duty rest, and each further layout's 3 warm-up calls and
    :data:`harness.bench.worker.LAYOUT_BLOCKS` blocks."""
    duty = timing.get("duty", 1.0)
    block = 1 + (1 / duty - 1) + (1 if duty < 1 else 0)  # the block, its rest, its pre-roll call
    layouts = int(timing.get("layouts", 1))
    return math.ceil(3 + timing.get("min_samples", 10) * block + (layouts - 1) * (3 + LAYOUT_BLOCKS * block))


def judge_stall(m: Measured) -> Verdict:
    got = m.ok("slowest")
    if not got:
        return _missing(m, "slowest")
    calls = cell_calls(m.timing)
    worst = max(
        ((r, c) for r, cs in got.items() for c in cs if "call_s" in c),
        key=lambda rc: rc[1]["first_s"] + rc[1]["call_s"],
    )
    route, c = worst
    cell_s = c["first_s"] + (calls - 1) * c["call_s"]
    held = cell_s * STALL_MARGIN <= STALL_MAX_S
    sets = max(m.stall_s, cell_s * STALL_MARGIN) if held else None
    how = "scaled by FLOP from a small probe" if c["extrapolated"] else "measured"
    detail = (
        f"slowest: {c['key']} under {route}, {c['call_s']:.3g} s a call ({how}), first call {c['first_s']:.3g} s, "
        f"about {cell_s:.3g} s a cell ({calls} calls); "
        + (
            f"compare sets its stall timeout to {sets:.0f} s ({STALL_MARGIN:g}x its estimate from the cells "
            f"before it, at least the default {m.stall_s:g} s; a --stall-timeout given is used as given)"
            if held
            else f"{STALL_MARGIN:g}x that is over the most a stall timeout may be ({STALL_MAX_S:g} s): "
            "leave the cell out (--cells / --dtypes)"
        )
    )
    return Verdict(held, detail, {"cell": c["key"], "route": route, "cell_s": cell_s, "stall_timeout_s": sets})


#: row 5: neighbouring fresh-process times more than this far apart (relative) are two levels; a spread over
#: it is a noisy machine (a warning); a repeat within it of the other processes' band is back at their level
FRESH_SPREAD = 0.10


def levels(times: list[float]) -> list[list[int]]:
    """Indices of ``times`` grouped into levels: sorted, split where a time is over :data:`FRESH_SPREAD`
    above its neighbour below; largest level first (the earlier on a tie)."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    out: list[list[int]] = []
    for i in order:
        if out and times[i] <= times[out[-1][-1]] * (1 + FRESH_SPREAD):
            out[-1].append(i)
        else:
            out.append([i])
    return sorted(out, key=len, reverse=True)


def judge_fresh(m: Measured) -> Verdict:
    if len(m.fresh) < FRESH:
        why = "; ".join(m.fresh_errors) or m.errors() or "too few processes answered"
        return Verdict(None, f"not measured: {len(m.fresh)} of {FRESH} fresh processes answered ({why})")
    again = list(m.fresh_again) + [None] * (len(m.fresh) - len(m.fresh_again))
    repeated = all(v is not None for v in again)
    # a process's level: its warmed repeat where every process has one (a kernel choice lasts the process,
    # a cold start does not), else its first time
    by = [v for v in again] if repeated else list(m.fresh)
    found = levels(by)
    main = found[0]
    modes, kept, unknown = 1, [], []
    for lv in found[1:]:
        if len(lv) > 1:
            modes += 1  # two processes at a level of their own
            kept += lv if repeated else []
        elif not repeated or len(main) == 1:
            unknown += lv  # one process at a level, with no repeat (or no level of two) to tell
        elif _off_alike(m.fresh, again, lv[0], main):
            # its warmed repeat off the main level too: a level it keeps, or a host busy through both (seen on
            # this project's 2-core machine: 0.43 ms against 0.33 ms in two of five runs); one process cannot
            # tell, so a warning that names it, never a failure: a mode needs two processes at its level
            kept += lv
            unknown += lv
        else:
            unknown += lv
    spread = max(m.fresh) / min(m.fresh) - 1
    shown = ", ".join(f"{v * 1e3:.3g}" for v in m.fresh)
    repeats = ", ".join("-" if v is None else f"{v * 1e3:.3g}" for v in again)
    label = next(iter(m.labels.values()))
    detail = (
        f"{m.cell()} under {label} in {len(m.fresh)} fresh processes: {shown} ms (warmed repeats {repeats} ms); "
        f"{modes} mode(s), slowest {spread:.0%} above the fastest"
    )
    detail += "".join(f"; process {i + 1} stayed at {again[i] * 1e3:.3g} ms on a warmed repeat" for i in kept)
    held = modes == 1
    noisy = held and spread > FRESH_SPREAD
    if not held and m.device == "cpu":
        # cpu runs one ATen kernel per op and dtype: two levels there are the host's own per-process levels (a
        # pure-Python loop lands at one of two in a KVM guest, docs/timing.md "Two host-time levels"), which the
        # report states as modes; a warning, never a failure (this project's 2-core VM: 0.36-0.38 ms in two
        # processes, 0.45-0.47 ms in two, their warmed repeats alike, in one of three doctor runs)
        held = noisy = True
        detail += "; on cpu not a kernel choice: the host's per-process levels (docs/timing.md), reported as modes"
    cold = [i for i in range(len(m.fresh)) if repeated and m.fresh[i] > min(m.fresh) * (1 + FRESH_SPREAD)]
    if noisy:
        why = [f"process {i + 1} was cold ({m.fresh[i] * 1e3:.3g} ms, again {again[i] * 1e3:.3g} ms)" for i in cold]
        if unknown:
            why.append(
                f"process {', '.join(str(i + 1) for i in unknown)} alone at its level"
                + ("" if repeated else " with no repeat")
                + ": cannot tell a cold process (or a busy host) from a second mode; run doctor again"
            )
        detail += f"; noisy machine, spread {spread * 100:.0f} %" + (f": {'; '.join(why)}" if why else "")
    data = {"times_s": m.fresh, "again_s": again, "modes": modes, "spread": spread, "cold": cold if held else []}
    return Verdict(held, detail, data, noisy=noisy)


def _off_alike(first: list[float], again: list[float], i: int, main: list[int]) -> bool:
    """Process ``i``'s warmed repeat off the ``main`` level's repeats (widened by :data:`FRESH_SPREAD`), and its
    first time not off the main level's first times the other way (a repeat that says slower, a first time
    that says faster, is noise)."""
    side = _side(again[i], [again[j] for j in main])
    return side != 0 and _side(first[i], [first[j] for j in main]) in (0, side)


def _side(value: float, band: list[float]) -> int:
    """-1 below ``band`` (widened by :data:`FRESH_SPREAD`), 0 within it, 1 above."""
    return -1 if value < min(band) / (1 + FRESH_SPREAD) else (1 if value > max(band) * (1 + FRESH_SPREAD) else 0)


def judge_accuracy(m: Measured) -> Verdict:
    got = m.ok("accuracy")
    if not got:
        return _missing(m, "accuracy")
    worst: dict[str, dict[str, float]] = {}
    skipped = []
    for route, cells in got.items():
        for key, r in cells.items():
            if r.get("error") or r.get("rel_error") is None:
                skipped.append(f"{route} {key}: {r.get('error') or 'not finite'}")
                continue
            family = "GEMM" if Cell.from_key(key).family == "gemm" else "SDPA"
            ratio = r["rel_error"] / r["bound"]
            worst.setdefault(route, {})[family] = max(worst.get(route, {}).get(family, 0.0), ratio)
    held = not skipped and all(v <= 1 for fam in worst.values() for v in fam.values())
    shown = "; ".join(f"{r}: " + ", ".join(f"{f} {_pct(v)}" for f, v in fam.items()) for r, fam in worst.items())
    detail = f"worst error / bound: {shown}" + (f"; {skipped[0]}" if skipped else "")
    return Verdict(held, detail, {"worst": worst})


def judge_device(m: Measured) -> Verdict:
    trace = kernels.TRACES.get(m.device)
    if trace is None or not trace.device_env:
        how = "in the timed process (CUDA graph replay)" if m.device == "cuda" else "host time is device time"
        return Verdict(None, f"no device-time probe process on {m.device}: {how}", applies=False)
    host = m.ok("sync")
    judged, skipped = {}, []
    for config, label in m.labels.items():
        answer, block = m.device_time.get(config, {}).get("device", {}), host.get(label)
        if not block or "device_s" not in answer:
            skipped.append(
                f"{label}: {answer.get('error') or m.device_time.get(config, {}).get('error') or 'no answer'}"
            )
        elif _share(block["enqueue_s"], block["sync_s"]) >= launch_ratio(block.get("deferred")):
            skipped.append(f"{label}: launch-bound block, its host time is not the device's")
        else:
            judged[label] = answer["device_s"] / block["sync_s"]
    if not judged:
        return Verdict(None, f"not measured ({'; '.join(skipped) or m.errors() or 'no route answered'})")
    held = all(abs(r - 1) <= DEVICE_AGREE for r in judged.values())
    shown = ", ".join(f"{r} {v:.3f}x" for r, v in judged.items())
    method = next((a["device"].get("method") for a in m.device_time.values() if "device_s" in a.get("device", {})), "")
    detail = (
        f"device time ({method}) / host time per call of a kernel-bound block on {m.cell()}: {shown} "
        f"(agree within ±{DEVICE_AGREE:.0%})" + (f"; {'; '.join(skipped)}" if skipped else "")
    )
    return Verdict(held, detail, {"ratio": judged, "tolerance": DEVICE_AGREE})


_MPS = "aten/src/ATen/mps/MPSStream.mm @ fba75098"
ASSUMPTIONS: list[Assumption] = [
    Assumption(
        "assumption: synchronize waits for uncommitted work",
        "torch.mps.synchronize -> torch._C._mps_deviceSynchronize (torch/csrc/mps/Module.cpp @ f3b72801) -> "
        "MPSHooks::deviceSynchronize -> synchronize(SyncType::COMMIT_AND_WAIT) (aten/src/ATen/mps/MPSHooks.mm @ "
        f"fe0b902f) -> commitAndWait; a blocking copy_and_sync commits and waits ({_MPS})",
        (
            "block times include all the work of their calls",
            "synchronize returned before the work ended: every block time under-counts; no evidence from this device",
        ),
        judge_sync,
    ),
    Assumption(
        "assumption: host encoding does not bias a contrast",
        "harness/bench/timer.py deferral probe (measured per route); "
        "aten/src/ATen/native/mps/operations/LinearAlgebra.mm @ 001077cb (do_metal_mm encodes, no commit); "
        "aten/src/ATen/native/mps/OperationUtils.mm @ bff2c90b (runMPSGraph: COMMIT_ADAPTIVE, which commits "
        f"only at the allocator's low watermark, {_MPS}; whether MPSGraph submits as it encodes is Apple's)",
        (
            "block times measure the device's work alike on every route",
            "the report names this bias next to any `faster` contrast between these routes (doctor.json encode bias)",
        ),
        judge_encode,
    ),
    Assumption(
        "assumption: resting between blocks does not clock the device down",
        "harness/bench/timer.py duty cycle (measured on an H200 only); Apple GPUs lower their clock when idle",
        (
            "duty 1/3 times the awake clock, as on the H200",
            "duty 1/3 times a device that clocks down while it rests: pass --duty 1 to compare and bench here",
        ),
        judge_duty,
    ),
    Assumption(
        "assumption: the slowest cell finishes well inside the stall timeout",
        "harness/options.py STALL_TIMEOUT; v2.6.0's naive Metal GEMM (LinearAlgebra.metal, Debian blob 85b82e3a)",
        (
            "no worker is stopped for a slow cell",
            "a worker would be stopped in that cell and its evidence lost: raise the stall timeout as said",
        ),
        judge_stall,
    ),
    Assumption(
        "assumption: a fresh process picks the same GEMM kernel",
        "pytorch issue 182815 (kernel choice differs between fresh processes)",
        (
            "one level per cell: process-to-process spread is noise",
            "a cell's time is one of several levels per process: its CI needs more processes; report the modes",
        ),
        judge_fresh,
    ),
    Assumption(
        "assumption: GEMM and SDPA errors are within their bounds on every route",
        "harness/bench/accuracy.py (bounds); LinearAlgebra.metal accumulators per base (series.toml)",
        (
            "the accuracy checks can pass on this device and fail on a wrong output",
            "a bound is wrong for this device, or a route is less accurate: report these numbers",
        ),
        judge_accuracy,
    ),
    Assumption(
        "assumption: device time from the MPS profiler agrees with host time on a kernel-bound cell",
        "aten/src/ATen/mps/MPSProfiler.mm @ 05b8ccb7 and 458fd422 (addProfilerCompletedHandler: gpu= is the "
        "command buffer's GPUEndTime - GPUStartTime; WAIT_UNTIL_COMPLETED commits and waits after each op); "
        "MPSProfiler.h LogOptions/ProfileOptions, the same in every wheel 2.6.0-2.14.1",
        (
            "a launch-bound cell's device time (its kernel verdict) is read right",
            "the profiler's gpu= is misread or not this kernel's time: do not trust mps device time here",
        ),
        judge_device,
    ),
]


def candidates(dtypes: tuple[str, ...] = DTYPES, probes: dict | None = None) -> dict[str, str]:
    """The largest cell of the default matrix per op family and dtype -> its small probe cell (:data:`PROBES`)."""
    out = {}
    for dt in dtypes:
        for family, (op, shape) in (probes or PROBES).items():
            cells = [c for c in default_cells((dt,)) if c.family == family]
            out[max(cells, key=lambda c: c.flop).key] = Cell(op, shape, dt).key
    return out


def accuracy_cells(stems: tuple[str, ...] = ACCURACY) -> list[str]:
    """The accuracy row's cells: each of ``stems`` in every default dtype."""
    return [f"{stem}/{dt}" for dt in DTYPES for stem in stems]


def spec(device: str, rows: list[str], emulate: dict | None) -> dict:
    """The child's spec (:mod:`harness.bench.assumptions`); ``emulate``: the conformance mode's settings
    (then the sizes of :data:`EMULATED`)."""
    small = EMULATED if emulate else {}
    probes = candidates(probes=small.get("probes"))
    return {
        "device": device,
        "cell": small.get("cell", CELL[device]),
        "small_cell": small.get("small_cell", small_cell(device)),
        "rows": rows,
        "min_block_s": small.get("min_block_s", MIN_BLOCK_S[device]),
        "blocks": small.get("blocks", 10),
        "measure_s": small.get("measure_s", 0.05),
        "slowest": {
            "candidates": list(probes),
            "probes": probes,
            "direct_s": DIRECT_S,
            "budget_s": small.get("budget_s", SLOWEST_BUDGET_S[device]),
        },
        "accuracy": accuracy_cells(small.get("accuracy", ACCURACY)),
        "accumulator": "float32",
        "threads": 1 if device == "cpu" or emulate else 0,
        "emulate": emulate,
    }


def run_child(
    python: Path, config: cfg.EnvConfig, spec_: dict, raw: Path, name: str, keep=(), extra: dict | None = None
) -> dict:
    """One assumption process under ``config`` (plus ``extra`` variables): its answer, or ``{"error": why}``
    (it failed or ran past a step's deadline, named)."""
    path = raw / f"{name}.spec.json"
    path.write_text(json.dumps(spec_))
    env = cfg.worker_environment(config, keep=keep)
    env.update(extra or {})
    env["PYTHONPATH"] = SOURCE_ROOT
    what = f"doctor assumptions under {config.name} ({python})"
    try:
        proc = children.run(
            [str(python), "-m", "harness.bench.assumptions", str(path)],
            what=what,
            deadline=max(STEP_S.values()),
            steps=STEP_S,
            answer=True,
            env=env,
        )
    except HarnessError as exc:
        return {"error": exc.cause}
    if proc.returncode != 0 or not isinstance(proc.answer, dict):
        step = proc.steps[-1] if proc.steps else children.START_STEP
        return {"error": f"{what} failed while {step}: {proc.last_line()}"}
    return proc.answer


def measure(
    python: Path, device: str, raw: Path, *, stall_s: float, timing: dict, emulate: dict | None = None, keep=()
) -> Measured:
    """Run every assumption process (module docstring) and collect their answers."""
    by_name = {c.name: c for c in cfg.PROFILES[device]}
    labels = dict(ROUTES[device])
    routes, fresh, fresh_errors = {}, [], []
    again: list[float | None] = []

    def keep_fresh(answer: dict) -> None:
        if "fresh_s" in answer:
            fresh.append(answer["fresh_s"])
            # on the cpu the repeat in CPU seconds: a busy host adds wall time to a process, not CPU time
            again.append(answer.get("fresh_again_cpu_s" if device == "cpu" else "fresh_again_s"))
        else:
            fresh_errors.append(answer.get("error"))

    for i, name in enumerate(labels):
        rows = (["fresh", "fresh_again"] if i == 0 else []) + ["sync", "duty", "slowest", "accuracy"]
        routes[name] = run_child(python, by_name[name], spec(device, rows, emulate), raw, f"assumptions-{name}", keep)
        if i == 0:
            keep_fresh(routes[name])
    first = by_name[next(iter(labels))]
    for i in range(1, FRESH):
        rows = ["fresh", "fresh_again"]
        keep_fresh(run_child(python, first, spec(device, rows, emulate), raw, f"assumptions-fresh-{i}", keep))
    device_time = {}
    trace = kernels.TRACES[device]
    if trace.device_env:  # row 7: its own process per route, the trace's variables on (nothing host-timed)
        for name in labels:
            name_ = f"assumptions-device-{name}"
            device_spec = spec(device, ["device"], emulate)
            device_time[name] = run_child(python, by_name[name], device_spec, raw, name_, keep, dict(trace.device_env))
    return Measured(device, routes, fresh, labels, stall_s, timing, fresh_errors, again, device_time)


def judge(m: Measured) -> list[tuple[Assumption, Verdict]]:
    """Every assumption's verdict on ``m``."""
    return [(a, a.judge(m)) for a in ASSUMPTIONS]


def row_text(a: Assumption, v: Verdict) -> tuple[str, str]:
    """(status, detail) of the doctor row: ``ok`` / ``warning`` (held, on noisy numbers) / ``failed``,
    "assumption held" or "did not hold", the numbers, what it means, and the source."""
    if not v.applies:
        return "skipped", f"not applicable: {v.detail}"
    if v.held is None:
        return "failed", f"{v.detail} [{a.source}]"
    if v.held and v.noisy:
        return "warning", f"assumption held, noisy machine: {v.detail}; {a.means[0]} [{a.source}]"
    word, means = ("assumption held", a.means[0]) if v.held else ("did not hold", a.means[1])
    return ("ok" if v.held else "failed"), f"{word}: {v.detail}; {means} [{a.source}]"


def to_json(m: Measured, verdicts: list[tuple[Assumption, Verdict]]) -> dict:
    """``doctor.json``'s ``assumptions`` part: each row's verdict and data, and what it recommends."""
    rows = {a.name: {"held": v.held, "detail": v.detail, "source": a.source, "data": v.data} for a, v in verdicts}
    by_judge = {a.judge: v for a, v in verdicts}
    none = Verdict(None, "")
    duty, stall, encode = (by_judge.get(j, none) for j in (judge_duty, judge_stall, judge_encode))
    return {
        "device": m.device,
        "routes": m.labels,
        "rows": rows,
        "recommend": {
            "duty": duty.data.get("duty"),
            "stall_timeout_s": stall.data.get("stall_timeout_s"),
        },
        "encode_bias": encode.data.get("bias"),
        "encode_bias_range": encode.data.get("bias_range"),
        "encode_shares": encode.data.get("shares"),
        "encode_deferred": encode.data.get("deferred"),
    }


def encode_bias_note(doctor_json: dict) -> str | None:
    """The line a report puts next to a `faster` contrast between GEMM routes when the doctor measured a
    host-encode bias over :data:`ENCODE_BIAS` on this device (``doctor.json``), else None."""
    part = doctor_json.get("assumptions") or {}
    bias = part.get("encode_bias")
    if bias is None or bias <= ENCODE_BIAS:
        return None
    deferred = part.get("encode_deferred") or {}
    shares = ", ".join(
        f"{r} {_pct(v)}" + {True: " deferred", None: " deferral not measured"}.get(deferred.get(r, False), "")
        for r, v in (part.get("encode_shares") or {}).items()
    )
    low = (part.get("encode_bias_range") or [bias])[0]
    span = f"{_pct(low)}-{_pct(bias)}" if bias - low >= 0.005 else f"up to {_pct(bias)}"
    return f"host encoding biases this contrast by {span} (doctor: host-encode share {shares})"
