# derived from pytorch/pytorch .ci/wheel/mac/build_wheel.py at 97ddf012 (the lines that set the flags and the command)
MACOS_PLATFORM = "macosx-14.0-arm64"
env = {}
env.setdefault("_PYTHON_HOST_PLATFORM", MACOS_PLATFORM)
env.setdefault("ARCHFLAGS", "-arch arm64")
command = [
    "-m",
    "build",
    "--wheel",
    "--no-isolation",
]
