import pytest

from harness import configs as cfg
from harness.bench.recorded import snapshot


def test_worker_environment_clears_inherited_torch_variables_and_sets_exactly_the_config():
    parent = {
        "PATH": "/bin",
        "PYTORCH_MPS_FAST_MATH": "1",
        "TORCH_BLAS_PREFER_CUBLASLT": "1",
        "ATEN_CPU_CAPABILITY": "avx2",
        "HOME": "/root",
    }
    (config,) = cfg.select("mps", "prefer_metal")
    env = cfg.worker_environment(config, parent)
    assert env == {"PATH": "/bin", "HOME": "/root", "PYTORCH_MPS_PREFER_METAL": "1"}


def test_mps_profiles_are_the_four_upstream_ones_and_the_series_adds_its_own():
    names = [c.name for c in cfg.PROFILES["mps"]]
    assert names == ["vanilla", "fast_math", "prefer_metal", "fast_math+prefer_metal"]
    with pytest.raises(ValueError, match="unknown env config 'all'"):
        cfg.select("mps", "all")  # the series' config is the series' (series.toml [evidence])
    from harness.manifest import load_series

    evidence = load_series("mps-gemm-prefer-fast-math").evidence
    (all_,) = cfg.select("mps", "all", evidence.profiles("mps"))
    assert dict(all_.env) == {
        "PYTORCH_MPS_FAST_MATH": "1",
        "PYTORCH_MPS_PREFER_METAL": "1",
        "PYTORCH_MPS_GEMM_PREFER_FAST_MATH": "1",
    }
    assert [c.name for c in cfg.select("mps", None, evidence.profiles("mps"), evidence.default_configs("mps"))] == [
        "vanilla",
        "prefer_metal",
        "fast_math+prefer_metal",
        "all",
    ]


def test_unknown_config_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown env config 'fastmath' for device mps; choose from vanilla"):
        cfg.select("mps", "vanilla,fastmath")
    with pytest.raises(ValueError, match="unknown device"):
        cfg.select("tpu", None)


def test_worker_environment_is_an_allow_list_and_everything_torch_related_is_recorded():
    """NVIDIA_TF32_OVERRIDE=0 and PYTORCH_CUDA_ALLOC_CONF from the parent reached workers unrecorded before."""
    parent = {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_ALL": "C",
        "NVIDIA_TF32_OVERRIDE": "0",
        "OMP_NUM_THREADS": "3",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "MY_SECRET": "x",
        "KMP_AFFINITY": "compact",
    }
    (config,) = cfg.select("cuda", "default")
    env = cfg.worker_environment(config, parent, keep=("OMP_NUM_THREADS",))
    assert env == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "OMP_NUM_THREADS": "3", **config.env}
    assert snapshot(parent) == {
        "KMP_AFFINITY": "compact",
        "NVIDIA_TF32_OVERRIDE": "0",
        "OMP_NUM_THREADS": "3",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }


def test_snapshot_records_raw_values():
    assert snapshot({"PYTORCH_MPS_PREFER_METAL": "0", "X": "1"}) == {"PYTORCH_MPS_PREFER_METAL": "0"}
