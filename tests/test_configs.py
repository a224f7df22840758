import pytest

from harness import configs as cfg


def test_worker_environment_clears_inherited_torch_variables_and_sets_exactly_the_config():
    parent = {"PATH": "/bin", "PYTORCH_MPS_FAST_MATH": "1", "TORCH_BLAS_PREFER_CUBLASLT": "1",
              "ATEN_CPU_CAPABILITY": "avx2", "HOME": "/root"}
    (config,) = cfg.select("mps", "prefer_metal")
    env = cfg.worker_environment(config, parent)
    assert env == {"PATH": "/bin", "HOME": "/root", "PYTORCH_MPS_PREFER_METAL": "1"}


def test_mps_profiles_are_the_documented_five():
    names = [c.name for c in cfg.PROFILES["mps"]]
    assert names == ["vanilla", "fast_math", "prefer_metal", "fast_math+prefer_metal", "all"]
    (all_,) = cfg.select("mps", "all")
    assert dict(all_.env) == {"PYTORCH_MPS_FAST_MATH": "1", "PYTORCH_MPS_PREFER_METAL": "1",
                              "PYTORCH_MPS_GEMM_PREFER_FAST_MATH": "1"}


def test_unknown_config_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown env config 'fastmath' for device mps; choose from vanilla"):
        cfg.select("mps", "vanilla,fastmath")
    with pytest.raises(ValueError, match="unknown device"):
        cfg.select("tpu", None)


def test_snapshot_records_raw_values():
    assert cfg.snapshot({"PYTORCH_MPS_PREFER_METAL": "0", "X": "1"}) == {"PYTORCH_MPS_PREFER_METAL": "0"}
