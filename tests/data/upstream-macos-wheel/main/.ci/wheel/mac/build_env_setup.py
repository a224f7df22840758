# derived from pytorch/pytorch .ci/wheel/mac/build_env_setup.py at 90e1bc14 (its MACOS_BUILD_ENV)
MACOS_BUILD_ENV: dict[str, str] = {
    "TH_BINARY_BUILD": "1",
    "INSTALL_TEST": "0",
    "MACOSX_DEPLOYMENT_TARGET": "14.0",
    "USE_DISTRIBUTED": "1",
    "USE_MKLDNN": "OFF",
    "USE_QNNPACK": "OFF",
    "BUILD_TEST": "OFF",
    "USE_PYTORCH_METAL_EXPORT": "1",
    "USE_COREML_DELEGATE": "1",
}
