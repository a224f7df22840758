# derived from pytorch/pytorch .ci/wheel/build_wheel.sh at 0303c4c3 (its flag lines and wheel command)
export TH_BINARY_BUILD=1
export INSTALL_TEST=0 # dont install test binaries into site-packages
export MACOSX_DEPLOYMENT_TARGET=10.15
retry brew install libomp
export USE_DISTRIBUTED=1
if [[ -n "$CROSS_COMPILE_ARM64" ]]; then
    export CMAKE_OSX_ARCHITECTURES=arm64
fi
export USE_MKLDNN=OFF
export USE_QNNPACK=OFF
export BUILD_TEST=OFF
    python setup.py bdist_wheel -d "$whl_tmp_dir"
