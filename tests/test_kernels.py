"""Observed kernel paths: each device's trace parsed and classified on recorded or
emulated lines, the fd capture, a real cpu worker's observations of every GEMM cell, and a planted
wrong route declaration named on the report's first screen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from documents import run_of

from harness import observed
from harness import results as res
from harness.bench import kernels
from harness.bench.kernels import classify, observation, parse_cpu, parse_cuda, parse_mps, parse_mps_gpu

ROOT = Path(__file__).resolve().parent.parent

#: lines this machine printed (torch 2.13.0, oneMKL 2024.0, oneDNN 3.12, AVX-512 BF16), pointers shortened
CPU_LINES = [
    "MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture Intel(R) "
    "Architecture processors, Lnx 2.60GHz lp64 gnu_thread",
    "MKL_VERBOSE SGEMM(N,N,16,64,32,0x7fff30,0x55fd80,16,0x55fd40,32,0x7fff50,0x55fd00,16) 32.12us CNR:OFF "
    "Dyn:0 FastMM:1 TID:0  NThr:1",
    "MKL_VERBOSE SGEMM_BATCH(N,N,0x7fff58,0x7fff54,0x7fff50) 17.41us CNR:OFF Dyn:0 FastMM:1 TID:0  NThr:1",
    "onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71049cd69a3df32adcccb623b12cd7baa22)",
    "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost and bfloat16 support",
    "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_bf16,undef,src:bf16::blocked:ab::f0 "
    "wei:bf16::blocked:ab::f0 dst:bf16::blocked:ab::f0,attr-scratchpad:user,,64x32:32x16,0.00512695",
    # oneDNN before 3.1 had no v1/primitive fields
    "onednn_verbose,exec,cpu,inner_product,brgemm:avx512_core,forward_training,src_f32::blocked:ab:f0,,,4x8,0.01",
]

#: names shaped after the kernels measured on the H200 (torch 2.11.0+cu130): fp32 mm 1024³
#: default / TORCH_BLAS_PREFER_CUBLASLT=1, 4096³ under cublaslt, TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, fp16
CUDA_NAMES = {
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x64x8_stage3_warpsize2x2x1_ffma_execute_kernel": "xmma",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8_stage3_warpsize1x2x1_ffma_execute_kernel": "xmma",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(cutlass_80_simt_sgemm_128x128_8x4_nn_"
    "align1::Params)": "cutlass",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off": "tf32",
    "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_NNN": "nvjet",
    "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>::Params)": "attention",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4>>(Flash_fwd_params)": "attention",
}

#: MPS profiler lines in upstream's format, one per variant the log options give (OperationInfo::toString,
#: CopyInfo::toString, CpuFbInfo::toString, BaseInfo::buildTensorString: aten/src/ATen/mps/MPSProfiler.mm,
#: the same at pytorch 458fd422, Debian v2.6.0 blob 2dd27045, ROCm/pytorch ee04104d, versi379/pytorch
#: 2d8cc652 and pytorch 05b8ccb7; graph keys: MPSGraphCache::profileCachedGraph with the cache keys of
#: LinearAlgebra.mm, v2.6.0 blob be94fca8 lines 226 and 413)
MPS_LINES = [
    # OPERATION_INFO (1): printed when the execution begins; v2.6.0 do_metal_mm (LinearAlgebra.mm line 45)
    "aten::naive_matmul:MPS:Half[64, 32]:MPS:Half[32, 16] (id=K1, run=1)",
    # | INCLUDE_GPU_TIME (129): printed on completion with gpu=; main do_metal_mm (LinearAlgebra.mm @ 001077cb)
    "aten::matmul:MPS:BFloat16[64, 32]:MPS:BFloat16[32, 16] (id=K2, run=3, gpu=0.324 ms)",
    # | INCLUDE_KERNEL_TIME: gpu= and cpu=; an MPSGraph mm, keyed "mm_out_mps_impl" + getTensorsStringKey
    "aten::mm_out_mps_impl:f16[64,32]:f16[32,16] (id=G1, run=1, gpu=0.310 ms, cpu=0.036 ms)",
    # v2.6.0 addmm under PREFER_METAL: still a graph (key: operands, the bias expanded to the output, beta, alpha)
    "aten::addmm_out_mps_impl:f16[64,32]:f16[32,16]:f16[64,16]:1.000000:1.000000 (id=G2, run=1)",
    # | INCLUDE_BUFFER_ID (513): parentheses inside the key; main do_metal_addmm
    "aten::addmm:MPS(buf#12:3):Float[64, 32]:MPS(buf#13:3):Float[32, 16] (id=K3, run=1)",
    # main's linear on macOS >= 15: MPSNDArrayMatrixMultiplication, also a K line (Linear.mm @ 033fee85)
    "aten::mps_linear:MPS:Half[64, 32]:MPS:Half[16, 32]:MPS:Half[16] (id=K4, run=1)",
    # a kernel that is not a GEMM (a made-up SDPA kernel name): neither Metal GEMM nor MPSNDArray
    "aten::sdpa_vector_half_64:MPS:Half[1, 8, 1, 64] (id=K5, run=1)",
    "BlitCopySync: MPS:Float[64, 16] --> CPU:Float[64, 16] (len=4.00 KB)",
    "CPU Fallback::aten::foo:MPS:Float[2] (id=1, run=1, CopyOverhead=8 bytes)",
    # the *_STATS exit table (logOperationsProfilingStats) and a warning never count as executions
    "  K1      1        0.000          0.324          0.324      naive_matmul:MPS:Half[64, 32]:MPS:Half[32, 16]",
    "UserWarning: beginProfileKernel() called without a stream, may end up profiling the wrong stream",
]


def test_cpu_verbose_lines_name_the_blas_call_and_the_onednn_implementation():
    names = parse_cpu(CPU_LINES)
    assert names == [
        "mkl:SGEMM(N,N,16,64,32)",
        "mkl:SGEMM_BATCH(N,N)",
        "onednn:matmul:brg_matmul:avx512_core_bf16",
        "onednn:inner_product:brgemm:avx512_core",
    ]
    assert classify("cpu", names[:1]) == ("mkl", "default")
    assert classify("cpu", names[2:3]) == ("onednn", "default")
    assert classify("cpu", []) == (None, None)  # fp16 on this CPU: no library call, "no trace"
    assert observation("cpu", [])["path"] is None and kernels.label(None) == "no trace"


@pytest.mark.parametrize("name, path", CUDA_NAMES.items())
def test_cuda_kernel_names_classify_by_family_and_tf32(name, path):
    assert classify("cuda", parse_cuda(["  ", name])) == (path, "default")


def test_cuda_auxiliary_kernels_do_not_classify_and_unknown_names_are_unclassified():
    names = ["[memset (Device)]", "void cublasLt::splitKreduce_kernel<float>(...)", *list(CUDA_NAMES)[:1]]
    assert classify("cuda", names) == ("xmma", "default")
    assert classify("cuda", ["some_new_kernel"]) == (kernels.UNCLASSIFIED, None)


def test_profiler_names_use_the_real_torch_profiler_api():
    """On this CPU-only build the same code reads CPU events (the cuda probe reads CUDA ones)."""
    a, b = torch.randn(8, 4), torch.randn(4, 2)
    out, lines = kernels.profiler_names(torch, lambda: a @ b, lambda: None, "CPU")
    names, durations = parse_cuda(lines), kernels.cuda_durations(lines)
    assert out.shape == (8, 2) and "aten::mm" in names
    # each event's duration comes with it: aten::mm inside aten::matmul takes no longer than it
    assert durations is not None and len(durations) == len(names) and all(d >= 0 for d in durations)
    assert durations[names.index("aten::mm")] <= durations[names.index("aten::matmul")]


def test_mps_profiler_lines_tell_metal_kernels_from_graphs():
    names = parse_mps(MPS_LINES)
    assert names == [
        "Kernel:naive_matmul:MPS:Half[64, 32]:MPS:Half[32, 16]",
        "Kernel:matmul:MPS:BFloat16[64, 32]:MPS:BFloat16[32, 16]",
        "MPSGraph:mm_out_mps_impl:f16[64,32]:f16[32,16]",
        "MPSGraph:addmm_out_mps_impl:f16[64,32]:f16[32,16]:f16[64,16]:1.000000:1.000000",
        "Kernel:addmm:MPS(buf#12:3):Float[64, 32]:MPS(buf#13:3):Float[32, 16]",
        "Kernel:mps_linear:MPS:Half[64, 32]:MPS:Half[16, 32]:MPS:Half[16]",
        "Kernel:sdpa_vector_half_64:MPS:Half[1, 8, 1, 64]",
    ]
    assert [classify("mps", [n]) for n in names] == [
        ("metal", "metal"),
        ("metal", "metal"),
        ("mpsgraph", "default"),
        ("mpsgraph", "default"),
        ("metal", "metal"),
        ("mpsndarray", "default"),  # an id=K line is not the Metal route by itself
        ("kernel", "default"),
    ]
    # a kernel whose name merely starts like a Metal GEMM is not one
    assert classify("mps", ["Kernel:matmul_backward:MPS:Half[2]"]) == ("kernel", "default")


def test_mps_profiler_lines_give_their_gpu_time_and_only_operation_lines_count():
    """The device-time probe reads ``gpu=`` of operation lines only (BaseInfo::toString: ``, gpu={:.3f} ms``
    then ``, cpu={:.3f} ms``, the scheduling time); a line without it is None, never 0. Planted: the
    ``cpu=`` field read instead gives 0.036 for the graph line, and a copy line's time would count."""
    assert parse_mps_gpu(MPS_LINES) == [None, 0.324, 0.310, None, None, None, None]
    assert parse_mps_gpu(["BlitCopy: MPS:Float[2] --> MPS:Float[2] (len=8 bytes, gpu=1.000 ms)"]) == []
    key = "aten::linear:MPS:Float[4, 32] (id=G6, run=2, gpu=0.101 ms, cpu=0.100 ms)"  # a key with ", "
    assert parse_mps_gpu([key]) == [0.101]


def test_capture_fd_reads_what_c_code_writes_and_restores_the_descriptor(capfd):
    out, lines = kernels.capture_fd(1, lambda: os.write(1, b"MKL_VERBOSE SGEMM(N,N,1,2,3)\nsecond\n") and 7)
    assert out == 7 and lines == ["MKL_VERBOSE SGEMM(N,N,1,2,3)", "second"]
    os.write(1, b"after\n")
    assert capfd.readouterr().out == "after\n"
    with pytest.raises(ZeroDivisionError):
        kernels.capture_fd(2, lambda: 1 / 0)
    os.write(2, b"restored\n")
    assert capfd.readouterr().err == "restored\n"


def test_a_real_cpu_worker_records_the_library_call_of_every_gemm_cell(tmp_path):
    """One worker process, small cells: the first-round (observe inline) call of each GEMM cell. 32³:
    ATen hands bfloat16 GEMM to oneDNN only when M·N·K > 16³ (measured here: 16x16x16 and 32x16x8 print
    nothing, 17³ does)."""
    cells = [f"{op}/32x32x32/{dt}" for op in ("mm", "addmm", "linear") for dt in ("float32", "bfloat16", "float16")]
    cells += [f"bmm/2x32x32x32/{dt}" for dt in ("float32", "bfloat16", "float16")]
    spec = {
        "device": "cpu",
        "cells": cells,
        "check": True,
        "observe": "inline",
        "seed": 0,
        "threads": 1,
        "timing": {"warmup_s": 0.0, "measure_s": 0.0, "min_block_s": 1e-4, "min_samples": 2},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run(
        [sys.executable, "-m", "harness.bench.worker", str(tmp_path / "spec.json"), str(tmp_path / "out.jsonl")],
        env={"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    seen = {r["key"]: r["kernels"] for r in records if r["type"] == "cell"}
    assert sorted(seen) == sorted(cells)
    table = {k: (v["path"], v["names"][:1]) for k, v in seen.items()}
    print(json.dumps(table, indent=1))
    for key, (path, names) in table.items():
        op, _, dtype = key.split("/")
        if dtype == "float32":  # MKL's SGEMM, or SGEMM_BATCH for bmm
            assert path == "mkl" and names[0].startswith("mkl:SGEMM_BATCH(" if op == "bmm" else "mkl:SGEMM("), key
        elif dtype == "bfloat16" and torch.ops.mkldnn._is_mkldnn_bf16_supported():  # oneDNN's matmul
            assert path == "onednn" and names[0].startswith("onednn:matmul:"), key
        elif dtype == "bfloat16":  # no AVX512-BF16/AMX (an AVX2-only AMD EPYC, measured): ATen's own GEMM
            assert path is None and names == [], key
    assert table["mm/32x32x32/float32"][1] == ["mkl:SGEMM(N,N,32,32,32)"]  # column-major: N, M, K
    # float16 depends on the CPU: without AVX512-FP16/AMX-FP16 ATen runs its own GEMM and nothing is
    # printed (measured on an AMD EPYC: recorded honestly as no trace); on a CPU with AMX-FP16 (measured on
    # an Intel Xeon with avx10_1_512_amx) oneDNN takes it. Either way the record names what ran, never MKL.
    for op in ("mm", "addmm", "linear"):
        path, names = table[f"{op}/32x32x32/float16"]
        assert (path, names) == (None, []) or (path == "onednn" and names[0].startswith("onednn:matmul:")), op


def _mps_run(builds: dict[str, dict[str, str]], routes: dict) -> dict:
    """A results document reduced to what harness.observed reads: mps, the given route declarations,
    and per build {cell key: observed path}."""
    keys = sorted({k for per in builds.values() for k in per})
    names = {"metal": "Kernel:matmul:MPS:Half[2, 2]:MPS:Half[2, 2]", "mpsgraph": "MPSGraph:mm"}
    return {
        "run": {"device": "mps", "builds": list(builds), "configs": ["all"], "cells": keys},
        "configs": {"all": {"routes": routes}},
        "kernels": {
            b: {"all": {k: observation("mps", [names[p]]) for k, p in per.items()}} for b, per in builds.items()
        },
    }


def test_a_declared_route_no_build_takes_is_an_error_naming_config_op_dtype_and_builds():
    key = "mm/64x64x64/float16"
    wrong = _mps_run({"stock": {key: "mpsgraph"}, "patched": {key: "mpsgraph"}}, {"mm": "metal"})
    assert [m.text for m in observed.mismatches(run_of(wrong))] == [
        "declared metal, observed MPSGraph for mm float16 under `all` on stock, patched (1 cell)"
    ]
    # the series' case: stock still takes Metal, patched MPSGraph; the looser path is declared
    assert (
        observed.mismatches(run_of(_mps_run({"stock": {key: "metal"}, "patched": {key: "mpsgraph"}}, {"mm": "metal"})))
        == []
    )
    # Metal observed where nothing is declared: the bound in force is the default path's
    loose = _mps_run({"stock": {key: "metal"}, "patched": {key: "mpsgraph"}}, {})
    assert [m.text for m in observed.mismatches(run_of(loose))] == [
        "declared default, observed Metal for mm float16 under `all` on stock (1 cell)"
    ]


def test_a_declared_route_no_trace_could_check_is_named_not_verified_never_silent():
    """A trace that printed nothing for every build (an mps probe whose log was not captured) cannot
    contradict a declared route; the first screen says the route went unchecked instead of staying silent."""
    key = "mm/64x64x64/float16"
    data = _mps_run({"stock": {key: "metal"}, "patched": {key: "mpsgraph"}}, {"mm": "metal"})
    assert observed.unverified(run_of(data)) == [] and observed.error_notes(run_of(data)) == []
    for build in ("stock", "patched"):
        data["kernels"][build]["all"][key] = observation("mps", [])  # no trace
    assert observed.mismatches(run_of(data)) == []
    assert observed.unverified(run_of(data)) == [("all", "mm", "float16", "metal", 1)]
    assert observed.error_notes(run_of(data)) == [
        "> **Route not verified:** declared metal for mm float16 under `all`, but no build's trace named a "
        "kernel (1 cell): the bound rests on the declaration alone (Kernels in the details)."
    ]
    # one build observed is enough to judge the declaration
    data["kernels"]["stock"]["all"][key] = observation("mps", ["Kernel:matmul:MPS:Half[2, 2]:MPS:Half[2, 2]"])
    assert observed.unverified(run_of(data)) == []


#: a GEMM call as the H100 default A/A's probe saw it: a memset first, then the GEMM that did the work
MEMSET = "Memset (Device)"
NVJET_A = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNN"
NVJET_B = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopB_TNN"


def _cuda_run(per_build: dict[str, list[tuple[str, float | None]]]) -> dict:
    """A cuda results document reduced to what harness.observed reads: one cell, one config, per build
    the call's (kernel name, device µs or None) in call order."""
    key = "mm/4096x4096x4096/float16"

    def obs(calls):
        names = [n for n, _ in calls]
        us = [d for _, d in calls]
        return observation("cuda", names, durations=None if None in us else us)

    return {
        "run": {"device": "cuda", "builds": list(per_build), "configs": ["default"], "cells": [key]},
        "configs": {"default": {"routes": {}}},
        "kernels": {b: {"default": {key: obs(calls)}} for b, calls in per_build.items()},
    }


def test_the_kernel_that_did_the_work_is_the_longest_not_the_first_memset():
    """A call whose first kernel is a memset and whose GEMM differs between A and B reads "different
    kernel"; comparing first names (the old rule) said "the same kernel in every cell" of two memsets."""
    from harness.evidence import parse_contrast

    data = _cuda_run({"stock": [(MEMSET, 1.2), (NVJET_A, 310.0)], "patched": [(MEMSET, 1.1), (NVJET_B, 305.0)]})
    run = run_of(data)
    contrast = parse_contrast("patched/default vs stock/default")
    line = observed.contrast_line(run, contrast)
    assert line.endswith("A and B ran a different kernel in every cell."), line
    assert f"`{NVJET_B}`" in line and MEMSET not in line
    table = "\n".join(observed.details(run))
    assert f"nvjet `{NVJET_A}` 310.0 µs" in table and f"`{MEMSET}` in 2 calls" in table
    # the old rule, planted back: the first names are the same memset, so it would read "same kernel"
    first = {b: data["kernels"][b]["default"]["mm/4096x4096x4096/float16"]["names"][0] for b in ("stock", "patched")}
    assert first["stock"] == first["patched"] == MEMSET
    # the same GEMM on both sides reads "same", whatever the memsets
    same = run_of(_cuda_run({"stock": [(MEMSET, 9.0), (NVJET_A, 310.0)], "patched": [(NVJET_A, 300.0)]}))
    assert observed.contrast_line(same, contrast).endswith("the same kernel in every cell.")


def test_a_memset_is_named_only_when_it_is_the_longest_kernel():
    run = run_of(_cuda_run({"stock": [(NVJET_A, 0.5), (MEMSET, 0.6)]}))
    assert observed.describe(observed.seen(run, "stock", "default", "mm/4096x4096x4096/float16"), run) == (
        f"nvjet `{MEMSET}` 0.6 µs"
    )
    assert kernels.main_index("cuda", [NVJET_A, MEMSET], [0.6, 0.6]) == 0  # a tie: the first
    assert kernels.main_index("cuda", [NVJET_A, MEMSET], [0.6, 0.61]) == 1


def test_older_observations_without_durations_name_the_first_kernel_that_is_not_a_memset():
    data = _cuda_run({"stock": [(MEMSET, None), (NVJET_A, None)], "patched": [(MEMSET, None), (NVJET_B, None)]})
    assert "device_us" not in data["kernels"]["stock"]["default"]["mm/4096x4096x4096/float16"]
    run = run_of(data)
    from harness.evidence import parse_contrast

    line = observed.contrast_line(run, parse_contrast("patched/default vs stock/default"))
    assert "durations not recorded" in line and line.endswith("a different kernel in every cell."), line
    assert "durations were not recorded" in " ".join(observed.details(run))
    assert res.kernels_problem(data["kernels"], data["run"]) is None


def test_more_kernels_than_kept_keep_the_longest_ones_and_classify_by_device_time():
    names = [f"{MEMSET} {i}" for i in range(kernels.MAX_NAMES + 2)] + [NVJET_A]
    rec = observation("cuda", names, durations=[1.0] * (kernels.MAX_NAMES + 2) + [50.0])
    assert len(rec["names"]) == kernels.MAX_NAMES and rec["names"][-1] == NVJET_A and rec["path"] == "nvjet"
    # an edited duration that changes which kernel did the work no longer matches the recorded path
    both = observation("cuda", [CUDA_SGEMM := list(CUDA_NAMES)[0], NVJET_A], durations=[10.0, 200.0])
    assert both["path"] == "nvjet"
    run = {"device": "cuda", "builds": ["stock"], "configs": ["default"], "cells": ["mm/1x1x1/float32"]}
    edited = {**both, "device_us": [200.0, 10.0]}
    problem = res.kernels_problem({"stock": {"default": {"mm/1x1x1/float32": edited}}}, run)
    assert problem and "not what its names give" in problem, CUDA_SGEMM
    bad = {**both, "device_us": [1.0]}
    assert "device_us" in res.kernels_problem({"stock": {"default": {"mm/1x1x1/float32": bad}}}, run)


def test_old_results_without_kernels_render_not_observed_and_validate():
    data = res.load(ROOT / "docs" / "examples" / "cpu-ab")
    assert "kernels" not in data and observed.mismatches(run_of(data)) == []
    assert observed.details(run_of(data))[2].startswith("Not observed")


@pytest.mark.parametrize(
    "planted, fragment",
    [
        ([], "kernels is array, not an object"),
        ({"nobody": {}}, "kernels.nobody is not a build"),
        ({"stock": {"default": {"mm/1x1x1/float32": {}}}}, "not in run.cells"),
        ({"stock": {"default": {"KEY": {"names": "SGEMM", "path": None, "route": None, "trace": "t"}}}}, "names"),
        ({"stock": {"default": {"KEY": {"names": [], "path": "mkl", "route": None, "trace": "t"}}}}, "no kernel"),
        # an edited path or route, or a name that would break the report's tables (hostile review, N10)
        (
            {
                "stock": {
                    "default": {
                        "KEY": {"names": ["mkl:SGEMM(N,N,1)"], "path": "bogus", "route": "default", "trace": "t"}
                    }
                }
            },
            "path 'bogus' and route 'default' are not what its names give on cpu ('mkl', 'default')",
        ),
        (
            {
                "stock": {
                    "default": {"KEY": {"names": ["mkl:SGEMM(N,N,1)"], "path": "mkl", "route": "zzz", "trace": "t"}}
                }
            },
            "route 'zzz'",
        ),
        (
            {"stock": {"default": {"KEY": {"names": ["x\n# H"], "path": "unclassified", "route": None, "trace": "t"}}}},
            "control character",
        ),
    ],
)
def test_a_malformed_kernels_section_is_refused_on_read(planted, fragment):
    data = res.load(ROOT / "docs" / "examples" / "cpu-ab")
    key = data["run"]["cells"][0]
    data["kernels"] = json.loads(json.dumps(planted).replace("KEY", key))
    assert fragment in (res.problem(data) or "")


EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"


def test_the_h200_example_records_the_gemm_kernel_of_every_build_config_and_cell():
    # docs/examples/h200-kernels: one compare on the H200 (torch 2.11.0+cu130), A/A, 4 mm cells x 3 configs
    data = res.load(EXAMPLES / "h200-kernels")
    names = {}
    for build in ("stock", "patched"):
        for config in ("default", "cublaslt", "tf32_override"):
            for key in data["run"]["cells"]:
                obs = observed.seen(run_of(data), build, config, key)
                assert obs and obs["names"] and not obs.get("error"), (build, config, key)
                names[build, config, key] = [n for n in obs["names"] if classify("cuda", [n])[0]][0]
    fp32, fp16 = "mm/1024x1024x1024/float32", "mm/1024x1024x1024/float16"
    for build in ("stock", "patched"):
        assert "tilesize128x64x8" in names[build, "default", fp32]
        assert "tilesize64x128x8" in names[build, "cublaslt", fp32]  # cublaslt: another kernel for fp32
        assert "cutlass_80_simt_sgemm" in names[build, "cublaslt", "mm/4096x4096x4096/float32"]
        assert "tf32" in names[build, "tf32_override", fp32]
        assert observed.seen(run_of(data), build, "tf32_override", fp32)["path"] == "tf32"
        # fp16: the same nvjet kernel under all three configs, and the report says so
        assert {names[build, c, fp16] for c in ("default", "cublaslt", "tf32_override")} == {
            "nvjet_sm90_hsh_128x64_64x8_1x2_h_bz_NNT"
        }
    text = (EXAMPLES / "h200-kernels" / "report.md").read_text()
    kernels = text[text.index("## Kernels") :]
    assert f"| {fp16} | same kernel as `default` | same kernel as `default` |" in kernels
    assert f"| {fp32} | same kernel as `default` |" not in kernels
    assert observed.mismatches(run_of(data)) == []


def test_the_h200_planted_route_example_names_the_mismatch_on_the_first_screen():
    # docs/examples/h200-planted-route: the same A/A with --series benchmarks/planted-route (mm = metal)
    text = (EXAMPLES / "h200-planted-route" / "report.md").read_text()
    first_screen = text[: text.index("<details>")]
    for path, dtype in (("xmma", "float32"), ("nvjet", "float16")):
        line = f"> **Error:** declared metal, observed {path} for mm {dtype} under `default` on stock, patched"
        assert line in first_screen


def test_the_mps_group_time_is_the_gpu_sum_over_the_calls_and_a_group_it_cannot_split_is_refused(monkeypatch):
    """kernels.mps_group_time on lines written to fd 2 as the profiler's completion handlers would: 4 calls of
    two operations each (0.250 + 0.750 ms) are 1 ms a call; a line lost or another operation's line (9 for
    4 calls: not a whole multiple), a line without gpu=, or a process without WAIT_UNTIL_COMPLETED gives no
    time, said why. Planted: without the multiple check the 9-line group read 1.1875 ms a call."""
    import pytest

    from harness.bench import kernels

    monkeypatch.setattr(kernels, "SETTLE_S", 0.0)
    for k, v in kernels.MPS_DEVICE_ENV.items():
        monkeypatch.setenv(k, v)

    def calls(*gpu: str):
        def fn():
            for g in gpu:
                os.write(2, f"aten::mm:MPS:Float[2, 2] (id=G1, run=1{g}, cpu=0.010 ms)\n".encode())

        return fn

    assert kernels.mps_group_time(None, calls(", gpu=0.250 ms", ", gpu=0.750 ms"), 4, lambda: None) == pytest.approx(
        1e-3
    )
    extra = iter([True])

    def one_more():
        calls(", gpu=0.250 ms", ", gpu=0.750 ms")()
        if next(extra, False):
            calls(", gpu=0.750 ms")()

    with pytest.raises(kernels.NoDeviceTime, match="9 operation lines for 4 calls, not a whole multiple"):
        kernels.mps_group_time(None, one_more, 4, lambda: None)
    with pytest.raises(kernels.NoDeviceTime, match="4 of 8 operation lines carry no gpu= time"):
        kernels.mps_group_time(None, calls(", gpu=0.250 ms", ""), 4, lambda: None)
    monkeypatch.setenv("PYTORCH_MPS_TRACE_SIGNPOSTS", "1")
    with pytest.raises(kernels.NoDeviceTime, match="lacks PYTORCH_MPS_TRACE_SIGNPOSTS bit 4"):
        kernels.mps_group_time(None, calls(", gpu=0.250 ms"), 4, lambda: None)
