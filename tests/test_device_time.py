"""Device time beside host time: a launch-bound cell with device time on both sides is judged on it ("kernel",
at the kernel-bound band) and on host time apart ("dispatch"); planted slowdowns of the kernel and of the host
are each caught by their own verdict only. In-process, synthetic results (tests/test_evidence.synthetic) and
fake devices for the timer (harness.bench.timer.measure_device)."""

from __future__ import annotations

import math
import random

import pytest
from test_evidence import synthetic

from harness import contrasts as con
from harness import document as doc
from harness import report, stats
from harness import results as res
from harness.bench import devices
from harness.bench.timer import (
    DEVICE_PILOT_CALLS,
    DEVICE_REPLAY_S,
    DEVICE_REPLAYS,
    MAX_BLOCK_CALLS,
    Measurement,
    device_unit,
    measure_device,
)
from harness.policy import CellClass

LAUNCH = ["mm/512x512x512/float16", "sdpa/1x8x512x64/float16"]
BUSY = "mm/4096x4096x4096/float16"


def _cuda_run(rounds: int, host_of, device_of, cells=(*LAUNCH, BUSY)) -> dict:
    """A cuda results.json: per (build, cell, round) the host median ``host_of(...)`` (a launch-bound block: the
    host enqueue is the whole block, except for :data:`BUSY`) and device samples around ``device_of(...)``
    (None: no device time, with a note)."""
    data = synthetic("cuda", {"default": {}}, list(cells), rounds, host_of)
    for proc in data["processes"]:
        for key, rec in proc["cells"].items():
            m = rec["measurement"]
            t = m["median"]
            m.update(method="synchronize+perf_counter", deferred=False, number=64)
            m["enqueue"] = [t * (0.2 if key == BUSY else 0.97)] * len(m["samples"])
            d = device_of(proc["build"], key, proc["round"])
            if d is None:
                m.update(device=[], device_method="", device_calls=0, device_note="no device time (test)")
            else:
                jitter = random.Random(f"{proc['name']}/{key}")
                m.update(
                    device=[d * (1 + jitter.uniform(-0.002, 0.002)) for _ in range(10)],
                    device_method="cuda-graph+events",
                    device_calls=100,
                    device_note="",
                )
    return data


def _bimodal_host(extra_patched: float = 1.0, levels: tuple[float, float] = (18.5e-6, 28.3e-6)):
    """Host time at one of two per-process levels (18.5 or 28.3 µs, as on the H100), the level a property of
    the process (all its cells together)."""

    def host_of(build, config, key, rnd):
        level = levels[1] if random.Random(f"{build}/{rnd}").random() < 0.5 else levels[0]
        if key == BUSY:
            return 180e-6 * (1 + random.Random(f"{build}/{key}/{rnd}").gauss(0, 0.003))
        noise = 1 + random.Random(f"{key}{rnd}").gauss(0, 0.01)
        return level * (extra_patched if build == "patched" else 1.0) * noise

    return host_of


def _device(extra_patched: float = 1.0, sd: float = 0.01):
    def device_of(build, key, rnd):
        base = {"mm/512x512x512/float16": 3.3e-6, "sdpa/1x8x512x64/float16": 9.4e-6}.get(key, 178e-6)
        z = random.Random(f"dev/{build}/{key}/{rnd}").gauss(0, sd)
        return base * (extra_patched if build == "patched" and key in LAUNCH else 1.0) * math.exp(z)

    return device_of


def _rows(data) -> dict[str, con.ContrastRow]:
    (result,) = con.evaluate_all(data)
    return {r.cell.key: r for r in result.rows}


def test_an_aa_run_decides_launch_bound_cells_on_device_time_and_reports_host_levels_as_modes():
    data = _cuda_run(12, _bimodal_host(), _device())
    rows = _rows(data)
    for key in LAUNCH:
        row = rows[key]
        assert row.launch_bound and row.time == con.DEVICE and row.judged == CellClass.KERNEL_BOUND
        assert row.cmp.verdict == stats.EQUIVALENT and row.cmp.threshold == 0.02
        assert 0.98 < row.cmp.ci_low and row.cmp.ci_high < 1.02  # the device-time CI within ±2 %
        assert row.dispatch.cmp.threshold == 0.05 and row.dispatch.cmp.verdict in (stats.UNDETERMINED, stats.EQUIVALENT)
        assert row.a == pytest.approx([rows[key].a[i] for i in range(len(row.rounds))])
        assert max(row.a) < 10e-6  # device medians (µs of kernel), not the host's 18-28 µs
    busy = rows[BUSY]
    assert not busy.launch_bound and busy.time == con.HOST and busy.dispatch is None
    line = "\n".join(report.launch_bound_line(doc.from_json(data), report.analyse(doc.from_json(data))))
    assert "2 of 3 stock-vs-patched cells" in line and "; all are judged on device time" in line
    assert "**kernel**: 2 equivalent" in line and "CUDA graph" in line
    assert "two per-process levels (modes)" in line and "18.5 µs" in line and "28.3 µs" in line


def test_a_planted_kernel_slowdown_is_caught_by_device_time_on_every_launch_bound_cell():
    data = _cuda_run(8, _bimodal_host(), _device(extra_patched=1.05))
    rows = _rows(data)
    for key in LAUNCH:
        assert rows[key].time == con.DEVICE and rows[key].cmp.verdict == stats.SLOWER, key
        assert rows[key].cmp.ratio == pytest.approx(1.05, abs=0.01)
        assert rows[key].dispatch.cmp.verdict != stats.SLOWER  # host time did not move
    assert rows[BUSY].cmp.verdict == stats.EQUIVALENT


def test_a_planted_host_slowdown_is_caught_by_dispatch_only():
    data = _cuda_run(8, _bimodal_host(extra_patched=1.3, levels=(18.5e-6, 18.5e-6)), _device())
    rows = _rows(data)
    for key in LAUNCH:
        assert rows[key].cmp.verdict == stats.EQUIVALENT, key  # the kernels did not change
        assert rows[key].dispatch.cmp.verdict == stats.SLOWER, key
    line = "\n".join(report.launch_bound_line(doc.from_json(data), report.analyse(doc.from_json(data))))
    assert "**dispatch**: 2 slower" in line and "dispatch changed: `default` mm M512 N512 K512 float16 0.7" in line


def test_without_device_time_on_both_sides_a_launch_bound_cell_keeps_its_host_verdict():
    def device_of(build, key, rnd):
        return None if build == "stock" else 3.3e-6

    data = _cuda_run(6, _bimodal_host(), device_of)
    rows = _rows(data)
    for key in LAUNCH:
        assert rows[key].time == con.HOST and rows[key].judged == CellClass.LAUNCH_BOUND
        assert rows[key].cmp.threshold == 0.05
    line = "\n".join(report.launch_bound_line(doc.from_json(data), report.analyse(doc.from_json(data))))
    assert "judged on device time" not in line and "judged on host time at ±5%" in line


class _Fake:
    device_clock = "fake-clock"
    device_note = ""

    def __init__(self, fn):
        self.device_time = fn


def test_measure_device_sizes_the_replay_by_a_pilot_of_device_time_not_the_host_median():
    """The unit is sized by the device's own time (a pilot replay), a power of two: two processes whose host
    medians differ 1.6x (the two host levels) capture the same calls; the host median does not enter."""
    units = []
    for host in (18.5e-6, 28.3e-6):
        m = Measurement(samples=[host] * 5, enqueue=[host] * 5, number=512, method="synchronize+perf_counter")
        seen = []
        measure_device(
            _Fake(lambda fn, calls, replays, seen=seen: seen.append((calls, replays)) or [3.3e-6] * replays), None, m
        )
        assert seen == [(DEVICE_PILOT_CALLS, 1), (512, DEVICE_REPLAYS)]  # 1 ms / 3.3 µs = 303 -> 512
        assert m.device_median == pytest.approx(3.3e-6) and m.device_method == "fake-clock" and not m.device_note
        units.append(m.device_calls)
    assert units == [512, 512]
    # just inside and just outside a power of two: 1 ms / 256 calls = 3.90625 µs
    assert device_unit(DEVICE_REPLAY_S / 256) == 256 and device_unit(DEVICE_REPLAY_S / 256 * 0.999) == 512
    assert device_unit(2 * DEVICE_REPLAY_S) == 1 and device_unit(DEVICE_REPLAY_S) == 1
    big = Measurement(samples=[1e-9] * 5, enqueue=[1e-9] * 5, number=4096)
    measure_device(_Fake(lambda fn, calls, replays: [1e-9] * replays), None, big)
    assert big.device_calls == MAX_BLOCK_CALLS  # never more calls than a block enqueues

    def not_capturable(fn, calls, replays):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    m = Measurement(samples=[20e-6] * 5, number=8)
    measure_device(_Fake(not_capturable), None, m)
    assert m.device == [] and m.device_note == (
        "no device time (fake-clock): RuntimeError: operation not permitted when stream is capturing"
    )
    for bad in ([], [3e-6, math.nan], [0.0], [-1e-6]):
        m = Measurement(samples=[20e-6] * 5, number=8)
        measure_device(_Fake(lambda fn, calls, replays, bad=bad: bad), None, m)
        assert m.device == [] and "not all finite positive seconds" in m.device_note
    m = Measurement(samples=[20e-6] * 5, number=8)
    measure_device(devices.profile("cpu", None), None, m)
    assert m.device == [] and m.device_note == devices.CPU_DEVICE_NOTE


def test_device_time_round_trips_and_is_validated():
    m = Measurement(samples=[2e-5] * 4, enqueue=[1e-5] * 4, number=8, method="perf_counter")
    m.device, m.device_method, m.device_calls = [3e-6, 3.1e-6], "cuda-graph+events", 100
    back = Measurement.from_json(m.to_json())
    assert back.device == m.device and back.device_calls == 100 and back.device_median == pytest.approx(3.05e-6)
    record = {"measurement": m.to_json()}
    assert res.device_problem(record["measurement"], "m") is None
    assert res.device_problem({**record["measurement"], "device_placements": 4}, "m") is None  # 100 = 4 x 25
    for key, value, words in (
        ("device", [3e-6, 0.0], "m.device holds 0.0"),
        ("device", "fast", "m.device is not a list"),
        ("device_calls", 0, "m.device_calls is 0"),
        ("device_calls", 1.5, "m.device_calls is 1.5"),
        ("device_note", 3, "m.device_note is"),
        ("device_placements", 0, "m.device_placements is 0"),
        ("device_placements", 3, "m.device_placements is 3"),  # 100 calls are not 3 placements' equal shares
        ("device_placements", 2.0, "m.device_placements is 2.0"),
    ):
        bad = {**record["measurement"], key: value}
        assert res.device_problem(bad, "m").startswith(words), key
    old = {k: v for k, v in record["measurement"].items() if not k.startswith("device")}
    assert res.device_problem(old, "m") is None  # results written before device time


def test_device_time_under_its_clocks_resolution_is_not_judged_and_the_cell_keeps_its_host_verdict():
    """The MPS profiler prints each operation's gpu= to 1 µs: a 3.3 µs call rounds the same on both sides
    whatever the patch does, so its device time is below resolution per call (100 ticks: 100 µs) and the cell
    is judged on host time with a note; just above (101 µs a call) it is judged on device time. CUDA-graph
    replay is judged per replayed unit (calls x time), as before."""
    for per_call, judged_on_device in ((3.3e-6, False), (99e-6, False), (101e-6, True)):

        def device_of(build, key, rnd, per_call=per_call):
            return per_call * (1 + random.Random(f"{build}{key}{rnd}").gauss(0, 0.003))

        data = _cuda_run(6, _bimodal_host(), device_of, cells=LAUNCH)
        for proc in data["processes"]:
            for rec in proc["cells"].values():
                rec["measurement"]["device_method"] = "mps-profiler-gpu-time"
        rows = _rows(data)
        for key in LAUNCH:
            row = rows[key]
            assert (row.time == con.DEVICE) is judged_on_device, (per_call, key)
            if not judged_on_device:
                assert "device time below its clock's resolution: judged on host time" in row.notes
                assert row.cmp.threshold == 0.05  # the host's launch-bound band
    cuda = _cuda_run(6, _bimodal_host(), _device(), cells=LAUNCH)  # 3.3 µs x 100 calls per replay: resolved
    assert all(r.time == con.DEVICE for r in _rows(cuda).values())


class _FakeEvent:
    """A CUDA event on a fake device clock (seconds): ``record`` stamps the device's time."""

    def __init__(self, gpu, enable_timing=True):
        self.gpu, self.t = gpu, None

    def record(self):
        self.t = self.gpu.enqueue(0.0)

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3  # milliseconds, as torch.cuda.Event.elapsed_time


class _FakeGpu:
    """A device whose stream runs what the host enqueued, in order: a spin of ``cycles`` takes
    ``cycles / hz`` seconds; a graph replay takes ``launch_s`` of host time before its kernels reach the
    stream (the host latency of cudaGraphLaunch) and then ``calls * per_call`` on the device."""

    def __init__(self, hz: float, launch_s: float, per_call: float):
        self.hz, self.launch_s, self.per_call = hz, launch_s, per_call
        self.host = 0.0  # the host clock (time.perf_counter, patched)
        self.free = 0.0  # when the stream is next free
        self.spins: list[int] = []

    def enqueue(self, work: float) -> float:
        start = max(self.host, self.free)
        self.free = start + work
        return self.free

    def torch(self, calls_seen: list):
        gpu = self

        class Graph:
            def replay(self):
                gpu.host += gpu.launch_s
                gpu.enqueue(gpu.per_call * calls_seen[-1])

        class Ctx:
            def __init__(self, *a, **k):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *a):
                return False

        class Cuda:
            Stream = staticmethod(lambda: type("S", (), {"wait_stream": lambda self, other: None})())
            current_stream = staticmethod(lambda: type("S", (), {"wait_stream": lambda self, other: None})())
            stream = Ctx
            graph = Ctx
            CUDAGraph = Graph
            synchronize = staticmethod(lambda: None)

            @staticmethod
            def Event(enable_timing=True):
                return _FakeEvent(gpu)

            @staticmethod
            def _sleep(cycles):
                gpu.spins.append(cycles)
                gpu.enqueue(cycles / gpu.hz)

        return type("Torch", (), {"cuda": Cuda})


def _graph_timer(gpu: _FakeGpu, monkeypatch):
    calls_seen: list[int] = []
    monkeypatch.setattr(devices.time, "perf_counter", lambda: gpu.host)
    time_calls = devices.cuda_graph_time(gpu.torch(calls_seen))

    def timed(calls, replays):
        calls_seen.append(calls)
        return time_calls(lambda: None, calls, replays)

    return timed


def test_graph_replay_time_excludes_the_launch_latency_behind_the_spin(monkeypatch):
    """Without the spin the start event fires while the host launches the graph: 17 µs of launch latency in a
    replay of 64 calls of 3.3 µs reads 3.57 µs a call (+8 %). Behind a spin that outlasts the launch the replay
    reads the calls alone, whatever the launch latency of the process."""
    for launch in (10e-6, 17e-6, 40e-6):
        gpu = _FakeGpu(hz=1.98e9, launch_s=launch, per_call=3.3e-6)
        got = _graph_timer(gpu, monkeypatch)(64, 3)
        assert got == pytest.approx([3.3e-6] * 3, rel=1e-9)
        assert gpu.spins == [devices.SPIN_CYCLES] * 3


def test_a_spin_shorter_than_the_launch_is_doubled_and_past_its_tries_no_device_time(monkeypatch):
    """Planted: a launch of 150 µs outlasts the first spin (200,000 cycles at 1.98 GHz: 101 µs): the replay is
    timed again behind a doubled spin (202 µs) and reads the calls alone. A launch no spin hides within
    SPIN_TRIES doublings is refused with a RuntimeError (measure_device records it as the note)."""
    gpu = _FakeGpu(hz=1.98e9, launch_s=150e-6, per_call=3.3e-6)
    got = _graph_timer(gpu, monkeypatch)(64, 2)
    assert got == pytest.approx([3.3e-6] * 2, rel=1e-9)
    assert gpu.spins == [devices.SPIN_CYCLES, 2 * devices.SPIN_CYCLES, 2 * devices.SPIN_CYCLES]
    # just inside: a launch just under the first spin needs no doubling
    gpu = _FakeGpu(hz=1.98e9, launch_s=devices.SPIN_CYCLES / 1.98e9 * 0.99, per_call=3.3e-6)
    _graph_timer(gpu, monkeypatch)(64, 1)
    assert gpu.spins == [devices.SPIN_CYCLES]
    gpu = _FakeGpu(hz=1.98e9, launch_s=1.0, per_call=3.3e-6)
    with pytest.raises(RuntimeError, match="not hidden behind a spin"):
        _graph_timer(gpu, monkeypatch)(64, 1)
    assert len(gpu.spins) == devices.SPIN_TRIES


def test_drift_reads_launch_bound_cells_in_device_time_so_host_levels_in_late_small_rounds_are_no_drift():
    """An A/A whose late (adaptive) rounds measured 1-4 launch-bound cells, each process at one of the two host
    levels: host time made those rounds read 0.87-1.06 and three (build, config)s a 'drift' of -2.7 % to -4.4 %
    (H200 A/A). Here host time falls 2 % a round after round 3 while device time stays put: judged in device
    time the series is stable. Planted: device time growing 1 % per round over 10 rounds (+9 %) is drift."""

    def late_rounds_fast_host(build, config, key, rnd):
        if key == BUSY:
            return 180e-6
        level = 18.5e-6 if rnd < 4 else 18.5e-6 * (1 - 0.02 * (rnd - 3))  # late rounds read lower host levels
        return level * (1 + random.Random(f"{key}{rnd}").gauss(0, 0.005))

    def steady(build, key, rnd):
        return {LAUNCH[0]: 3.3e-6, LAUNCH[1]: 9.4e-6}.get(key, 178e-6)

    def growing(build, key, rnd):
        return steady(build, key, rnd) * (1 + 0.01 * rnd)

    for device_of, verdict in ((steady, stats.STABLE), (growing, stats.DRIFT)):
        data = _cuda_run(10, late_rounds_fast_host, device_of, cells=LAUNCH)
        run = doc.from_json(data)
        series = report.round_series(run, "default", "stock")
        assert stats.drift(series, threshold=0.02).verdict == verdict, series
    # the host-time series of the same run is the false drift the device series replaces
    host = data
    for proc in host["processes"]:
        for rec in proc["cells"].values():
            rec["measurement"].update(device=[], device_method="", device_calls=0, device_note="none")
    series = report.round_series(doc.from_json(host), "default", "stock")
    assert stats.drift(series, threshold=0.02).verdict == stats.DRIFT, [round(v, 3) for v in series]


def test_placed_callable_cycles_every_placement_equally_and_fewer_for_large_inputs():
    """Device time cycles over placements of the inputs (harness.bench.worker.placed_callable): each call the
    next copy in turn, every copy the same values at its own address; the number of placements halves until
    the further copies fit DEVICE_PLACEMENT_BYTES (just inside and just outside each edge); the unit holds
    every placement equally often, even for a kernel that alone fills a replay."""
    torch = pytest.importorskip("torch")
    from harness.bench import worker
    from harness.bench.workloads import Cell, make_inputs

    budget, n = worker.DEVICE_PLACEMENT_BYTES, worker.DEVICE_PLACEMENTS
    assert n == 8
    assert worker.device_placements(budget // 7) == 8 and worker.device_placements(budget // 7 + 1) == 4
    assert worker.device_placements(budget // 3) == 4 and worker.device_placements(budget // 3 + 1) == 2
    assert worker.device_placements(budget) == 2 and worker.device_placements(budget + 1) == 1

    cell = Cell.from_key("mm/1x64x64/float32")
    inputs = make_inputs(cell, "cpu")
    seen = []
    real = worker.op_callable
    try:  # record which copy each call ran on
        worker.op_callable = lambda c, xs: lambda: seen.append(xs[1].data_ptr()) or real(c, xs)()
        fn, placements, kept = worker.placed_callable(torch, cell, inputs, "cpu")
    finally:
        worker.op_callable = real
    outs = [fn() for _ in range(2 * n)]
    assert placements == n and len(set(seen)) == n and seen[:n] == seen[n:] and seen[0] == inputs[1].data_ptr()
    assert all(torch.equal(o, outs[0]) for o in outs)
    assert len(kept) == 2 * (n - 1)  # a spacer and a copy per further placement, alive while timed

    m = Measurement(samples=[20e-3] * 5, enqueue=[1e-5] * 5, number=1)
    calls_seen = []
    measure_device(
        _Fake(lambda fn, calls, replays: calls_seen.append(calls) or [2e-3] * replays), None, m, placements=n
    )
    assert calls_seen == [DEVICE_PILOT_CALLS, n] and m.device_calls == n and m.device_placements == n
    assert Measurement.from_json(m.to_json()).device_placements == n
