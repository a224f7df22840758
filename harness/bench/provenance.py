"""Facts about one torch build, probed inside that build's interpreter.

Run as ``<build python> -m harness.bench.provenance --device cpu --markers A,B --answer FILE`` (standard library +
torch only); answers one JSON object on the channel ``FILE`` (:mod:`harness.bench.channel`; without
``--answer`` it prints it), after announcing each of :data:`STEPS`, whose deadlines
:func:`harness.supervise.probe_build` applies. :mod:`harness.runner` stores it in ``results.json`` under
``builds.<name>.provenance``.

Recorded: torch version and git hash, ``torch.__config__.show()``, MPS built/available, CUDA
available (+ device name), OS (on macOS the ``sw_vers`` product version), CPU/GPU name, Python,
thread count, which env variables the build's shared libraries contain (a variable absent from
every library cannot be read by that build), which dtypes the device can run, and a health probe
of the device (a tiny allocation and a small matmul compared with the CPU).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import mmap
import platform
import subprocess
import sys
import threading
from pathlib import Path

from harness.bench import words
from harness.bench.channel import Channel
from harness.bench.devices import mps_gpu_name
from harness.bench.mpsruntime import mps_runtime_need
from harness.bench.workloads import OPS, make_inputs, op_callable, probe_cell

#: the probe's steps, as announced on its channel, and the seconds each may take (harness.supervise.probe_build).
#: "probing the device": the first CUDA call creates its context (1-3 s on an H200; tens of seconds while
#: another process holds the GPU) and the dtype table runs every op in six dtypes. collect_env gives up
#: after :func:`collect_env`'s own 180 s, so its deadline is above that.
IMPORT_STEP, DEVICE_STEP, COLLECT_STEP = "importing torch", "probing the device", "making torch's collect_env report"
STEPS = {IMPORT_STEP: 120.0, DEVICE_STEP: 120.0, COLLECT_STEP: 240.0}

PROBE_DTYPES = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")


def _cpu_name() -> str:
    if sys.platform == "darwin":
        return (_run_text(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip() or platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _os_name() -> dict:
    info = {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "platform": platform.platform(),
    }
    if sys.platform == "darwin":
        info["macos_product_version"] = (_run_text(["sw_vers", "-productVersion"]) or "").strip() or platform.mac_ver()[
            0
        ]
    return info


def torch_libraries(torch_dir: Path) -> list[Path]:
    """The shared libraries of a torch install (``torch/lib/*.so*``, ``*.dylib``, ``*.dll``)."""
    lib = torch_dir / "lib"
    found = [p for p in sorted(lib.glob("*")) if p.is_file() and (".so" in p.name or p.suffix in (".dylib", ".dll"))]
    return found


def strings_in_libraries(libraries: list[Path], names: list[str]) -> dict[str, list[str]]:
    """For each name, the libraries whose bytes contain it (memory-mapped search)."""
    hits: dict[str, list[str]] = {n: [] for n in names}
    for path in libraries:
        with open(path, "rb") as fh:
            try:
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # empty file
                continue
            with mm:
                for n in names:
                    if mm.find(n.encode()) != -1:
                        hits[n].append(path.name)
    return hits


def dtype_support(torch, device: str, names=OPS) -> dict[str, dict[str, str | None]]:
    """dtype -> op -> None when that op runs on ``device`` at its tiny :attr:`Op.probe_shape`
    (``names``: every built-in op of :data:`harness.bench.ops.REGISTRY` unless given, e.g. a series
    workload module's; the real workload code), else the reason it does not."""
    out: dict[str, dict[str, str | None]] = {}
    for name in PROBE_DTYPES:
        out[name] = {}
        for op in names:
            try:
                cell = probe_cell(op, name)
                op_callable(cell, make_inputs(cell, device))().float().sum().item()
                out[name][op] = None
            except Exception as exc:  # the device's own words are the reason
                out[name][op] = words(exc, 200)
    return out


def unsupported_reason(support: dict, dtype: str, op: str) -> str | None:
    """The reason ``op`` cannot run in ``dtype`` per a :func:`dtype_support` table (None: it can).
    An empty table is no table (nothing was probed: None); an op or dtype missing from a table that was
    probed is not assumed to run, and that is the reason."""
    if not support:
        return None
    row = support.get(dtype, {})
    if op not in row:
        return f"not probed by harness.bench.provenance (its table lists {', '.join(row) or 'no op'} in {dtype})"
    return row[op]


def health(torch, device: str) -> str | None:
    """None when ``device`` works: a 256-byte allocation and a 64x64 float32 matmul that matches
    the CPU within 1e-4 relative. Otherwise the reason (GitHub-hosted macOS runners report MPS
    available and then fail the first allocation: actions/runner-images#9918)."""
    try:
        torch.empty(64, dtype=torch.float32, device=device).fill_(1.0)
        g = torch.Generator().manual_seed(0)
        a = torch.randn(64, 64, generator=g)
        ref = a @ a
        got = (a.to(device) @ a.to(device)).cpu()
        err = float((got - ref).norm() / ref.norm())
        if not err < 1e-4:
            return f"a 64x64 float32 matmul on {device} differs from the CPU by {err:.3g} (relative)"
    except Exception as exc:
        return words(exc, 200)
    return None


def _run_text(args: list[str], timeout: float = 30.0) -> str | None:
    """stdout of a short program (argument list), or None when it is absent, fails or hangs."""
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def mac_facts() -> dict:
    """On macOS: the Mac's model identifier (``sysctl -n hw.model``, sysctl(3) ``HW_MODEL``), the macOS
    build (``sw_vers -buildVersion``, sw_vers(1)), the power source (``pmset -g batt``'s "Now drawing
    from 'AC Power'") and Low Power Mode (``pmset -g``'s ``lowpowermode`` line; pmset(1) and Apple's
    "Use Low Power Mode on your Mac", support.apple.com/101613). Values not readable are None; {} elsewhere."""
    if sys.platform != "darwin":
        return {}
    model = (_run_text(["sysctl", "-n", "hw.model"]) or "").strip() or None
    build = (_run_text(["sw_vers", "-buildVersion"]) or "").strip() or None
    batt = _run_text(["pmset", "-g", "batt"]) or ""
    power = next((line.split("'")[1] for line in batt.splitlines() if "drawing from '" in line), None)
    low = next(
        (
            line.split()[-1]
            for line in (_run_text(["pmset", "-g"]) or "").splitlines()
            if line.split()[:1] == ["lowpowermode"]
        ),
        None,
    )
    return {
        "model": model,
        "macos_build": build,
        "power_source": power,
        "low_power_mode": None if low is None else low == "1",
    }


def collect_env(timeout: float = 180.0) -> str | None:
    """torch's own environment report, the text ``python -m torch.utils.collect_env`` prints (its
    "Collecting environment information..." line, then ``torch.utils.collect_env.get_pretty_env_info()``),
    made in this process, where torch is imported already (another interpreter would import it again:
    about 3.5 of its 5 s); None when it fails or takes over ``timeout`` seconds (it runs programs such
    as ``nvidia-smi`` and ``pip list``; a thread that hangs is left behind, a daemon, with the probe)."""
    report: list[str] = []

    def run() -> None:
        try:
            from torch.utils import collect_env as torch_collect_env

            report.append(f"Collecting environment information...\n{torch_collect_env.get_pretty_env_info()}\n")
        except Exception:  # any failure of torch's report: the probe goes on without it
            pass

    worker = threading.Thread(target=run, name="collect_env", daemon=True)
    worker.start()
    worker.join(timeout)
    if not report:
        return None
    return report[0] + installed_packages(report[0])


#: torch's collect_env line when ``python -m pip list`` fails, e.g. in an environment without its own pip
PIP_NOT_COLLECTED = "[pip3] Could not collect"


def installed_packages(text: str) -> str:
    """The packages of this environment (``importlib.metadata``, ``name==version`` sorted) as lines to
    append to collect_env's ``text`` when its own pip list failed (:data:`PIP_NOT_COLLECTED`: the
    environments the harness creates have no pip, :mod:`harness.venvs`); "" otherwise."""
    if PIP_NOT_COLLECTED not in text:
        return ""
    names = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()}, key=str.lower)
    return "Packages in this environment (importlib.metadata; it has no pip of its own):\n" + "".join(
        f"[meta] {n}\n" for n in names
    )


def probe(device: str, variables: list[str], with_collect_env: bool = False, steps: Channel | None = None) -> dict:
    """Collect the provenance dict (see module docstring). ``variables`` are looked for in the
    build's libraries; ``with_collect_env`` adds torch's ``collect_env`` report (seconds) when the device
    is usable (``device_error`` None: a device that cannot produce evidence is refused without it);
    ``steps``: where each of :data:`STEPS` is announced as it starts."""
    steps = steps or Channel(None)
    steps.step(IMPORT_STEP)
    import torch

    steps.step(DEVICE_STEP)
    torch_dir = Path(torch.__file__).parent
    mps_built = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_built())
    mps_available = bool(mps_built and torch.backends.mps.is_available())
    cuda_available = bool(torch.cuda.is_available())
    info = {
        "torch_version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "cuda_version": torch.version.cuda,
        "config_show": torch.__config__.show(),
        "mps_built": mps_built,
        "mps_available": mps_available,
        "cuda_available": cuda_available,
        # the GPU, not the CPU's brand string: on MPS torch.backends.mps.get_name()/get_core_count()
        # (torch 2.13+; None before), see harness.bench.devices
        "gpu_name": torch.cuda.get_device_name(0)
        if cuda_available
        else (mps_gpu_name(torch) if mps_available else None),
        "cpu_name": _cpu_name(),
        "os": _os_name(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch_dir": str(torch_dir),
        "num_threads": torch.get_num_threads(),
        "variables_in_libraries": strings_in_libraries(torch_libraries(torch_dir), variables),
        "mac": mac_facts(),
        "collect_env": None,
    }
    ready = {"cpu": True, "cuda": cuda_available, "mps": mps_available}[device]
    info["device"] = device
    if not ready:
        why = {
            "cuda": "torch.cuda.is_available() is False",
            "mps": "MPS is not built into this torch (MPS needs a macOS build of torch on an Apple-silicon Mac)"
            if not mps_built
            else "MPS is built but torch.backends.mps.is_available() is False (the MPS backend of torch "
            f"{torch.__version__} needs macOS {mps_need_text(torch.__version__)} or newer on Apple silicon, "
            f"not a VM; this is macOS {platform.mac_ver()[0] or 'unknown'})",
        }
        info["device_error"] = why[device]
    else:
        info["device_error"] = health(torch, device)
    info["dtype_support"] = dtype_support(torch, device) if info["device_error"] is None else {}
    if with_collect_env and info["device_error"] is None:
        steps.step(COLLECT_STEP)
        info["collect_env"] = collect_env()
    return info


def mps_need_text(torch_version: str) -> str:
    """``14.0 (aten/src/ATen/mps/MPSDevice.mm at …)``: the macOS the MPS backend of ``torch_version``
    needs and where that was read (:func:`harness.bench.mpsruntime.mps_runtime_need`)."""
    need = mps_runtime_need(torch_version)
    return f"{need.macos[0]}.{need.macos[1]} ({need.source})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.provenance")
    parser.add_argument("--device", required=True, choices=("cpu", "cuda", "mps"))
    parser.add_argument(
        "--markers", "--vars", default="", help="comma-separated names to look for in the libraries (--vars: old name)"
    )
    parser.add_argument("--collect-env", action="store_true", help="add python -m torch.utils.collect_env's report")
    parser.add_argument("--answer", help="the answer channel (harness.bench.channel); without it the JSON is printed")
    args = parser.parse_args(argv)
    names = [v for v in args.markers.split(",") if v]
    if args.answer:
        answer = Channel(args.answer)
        answer.answer(probe(args.device, names, args.collect_env, answer))
        return 0
    # stdout carries the JSON alone: what torch or its collect_env prints meanwhile goes to stderr
    stdout, sys.stdout = sys.stdout, sys.stderr
    json.dump(probe(args.device, names, args.collect_env), stdout)
    stdout.flush()  # at exit Python flushes sys.stdout, which is stderr now
    return 0


if __name__ == "__main__":
    sys.exit(main())
