import subprocess
import sys

import pytest

from harness import venvs
from harness.errors import BuildInputError
from harness.venvs import ensure_interpreter, parse_input


def test_parse_inputs(tmp_path):
    assert parse_input("torch==2.13.0", "stock").kind == "requirement"
    assert parse_input(f"python:{sys.executable}", "stock").value == sys.executable
    wheel = tmp_path / "torch-2.6.0+stock.abcdef12-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    parsed = parse_input(str(wheel), "patched")
    import hashlib

    assert parsed.kind == "wheel" and parsed.sha256 == hashlib.sha256(b"not really a wheel").hexdigest()


@pytest.mark.parametrize(
    "text, cause",
    [
        (
            "/nonexistent/torch-2.6.0-cp311-cp311-linux_x86_64.whl",
            "--stock: wheel /nonexistent/torch-2.6.0-cp311-cp311-linux_x86_64.whl does not exist",
        ),
        ("python:/nonexistent/python", "--stock: interpreter /nonexistent/python does not exist"),
        ("torch===", "--stock: 'torch===' is neither a wheel path nor a requirement"),
    ],
)
def test_bad_inputs_name_the_cause(text, cause):
    with pytest.raises(BuildInputError) as info:
        parse_input(text, "stock")
    assert info.value.cause.startswith(cause)
    assert info.value.remedy


def test_non_wheel_file_is_rejected(tmp_path):
    path = tmp_path / "torch.tar.gz"
    path.write_text("x")
    with pytest.raises(BuildInputError, match="is not a wheel"):
        parse_input(str(path), "patched")


@pytest.mark.slow
def test_requirement_gets_a_venv_created_once_and_reused(tmp_path, monkeypatch):
    """A real venv and a real pip install of a requirement, resolved offline from a local index: a
    small pure-Python wheel named torch (the 800 MB CPU wheel adds install time, not harness logic)."""
    from test_build import _fake_torch_wheel

    index = tmp_path / "index"
    index.mkdir()
    _fake_torch_wheel(index, "2.13.0", mps_built=False)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    envs = tmp_path / "envs"
    build = parse_input("torch==2.13.0", "stock")
    python, reused = ensure_interpreter(build, envs_dir=envs)
    assert not reused and python.parent.parent.parent == envs
    version = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert version == "2.13.0"
    # no pip of its own (no ensurepip): this interpreter's pip installed into it (pip --python)
    assert not list(python.parent.parent.glob("lib/python*/site-packages/pip"))
    with pytest.MonkeyPatch.context() as patch:  # reused: no venv is created and pip does not run
        patch.setattr(venvs.venv.EnvBuilder, "create", lambda *a, **k: pytest.fail("venv created again"))
        patch.setattr(venvs.children, "run", lambda *a, **k: pytest.fail(f"ran {a[0]} again"))
        again, reused = ensure_interpreter(build, envs_dir=envs)
    assert reused and again == python


@pytest.mark.slow
def test_unsatisfiable_requirement_quotes_pip(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: an empty local index has no torch at all
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty-index"))
    (tmp_path / "empty-index").mkdir()
    with pytest.raises(BuildInputError) as info:
        ensure_interpreter(parse_input("torch==0.0.1", "patched"), envs_dir=tmp_path)
    assert info.value.cause.startswith("pip could not install torch==0.0.1: ERROR:")
    assert "pip's log" in info.value.remedy
    assert not any(p.is_dir() and p.name.startswith("torch") for p in tmp_path.iterdir())  # removed again


def test_pip_cause_names_a_full_disk_and_skips_pips_bare_exception_line():
    from harness.venvs import _pip_cause

    full = (
        'ERROR: Exception:\nTraceback (most recent call last):\n  File "download.py", line 147, in __call__\n'
        "pip._vendor.urllib3.exceptions.ProtocolError: (\"Connection broken: OSError(28, 'No space left on "
        "device')\", OSError(28, 'No space left on device'))\n"
    )  # pip 24 on a full disk, as seen here
    assert _pip_cause(full).startswith("no space left on device")
    assert _pip_cause("ERROR: Exception:\nTraceback\nValueError: boom\n") == "ValueError: boom"
    assert (
        _pip_cause("x\nERROR: No matching distribution found for torch==0.0.1\n")
        == "ERROR: No matching distribution found for torch==0.0.1"
    )


@pytest.mark.parametrize("version", ["22.2.2", None])
def test_a_pip_without_the_python_option_is_one_line_before_any_environment(tmp_path, monkeypatch, version):
    """Environments are filled by this interpreter's ``pip --python`` (pip >= 22.3): an older pip, or
    none, is said in one line with the upgrade command, and no environment is left behind."""

    def pip_version(name):
        if version is None:
            raise venvs.importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(venvs.importlib.metadata, "version", pip_version)
    with pytest.raises(BuildInputError) as info:
        ensure_interpreter(parse_input("torch==2.13.0", "stock"), envs_dir=tmp_path / "envs")
    assert info.value.cause == (
        f"pip {version or '(none)'} of {sys.executable} cannot install into another environment "
        "(pip --python needs pip >= 22.3)"
    )
    upgrade = f"{sys.executable} -m pip install --upgrade 'pip>=22.3'"
    # without any pip, pip itself must come first
    assert info.value.remedy == (upgrade if version else f"{sys.executable} -m ensurepip --upgrade && {upgrade}")
    assert not [p for p in (tmp_path / "envs").rglob("*") if p.name.startswith("torch")]


def test_pip_command_runs_this_interpreters_pip_on_the_environment(tmp_path):
    python = tmp_path / "env" / "bin" / "python"
    assert venvs.pip_command(python) == [sys.executable, "-m", "pip", "--python", str(python)]


def test_series_test_requirements_with_an_old_pip_are_recorded_not_installed(monkeypatch):
    from harness.seriestests import install_requirements

    monkeypatch.setattr(venvs.importlib.metadata, "version", lambda name: "21.0")
    record = install_requirements("/env/bin/python", ("pytest<9",), managed=True)
    assert record == {
        "requirements": ["pytest<9"],
        "installed": False,
        "reason": f"pip 21.0 of {sys.executable} cannot install into another environment "
        f"(pip --python needs pip >= 22.3) -- {sys.executable} -m pip install --upgrade 'pip>=22.3'",
    }
