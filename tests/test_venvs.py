import hashlib
import json
import subprocess
import sys

import pytest

from harness import cli, venvs
from harness.errors import BuildInputError
from harness.venvs import ensure_interpreter, parse_input, parse_inputs, wheel_in


def test_parse_inputs(tmp_path):
    assert parse_input("torch==2.13.0", "stock").kind == "requirement"
    assert parse_input(f"python:{sys.executable}", "stock").value == sys.executable
    wheel = tmp_path / "torch-2.6.0+stock.abcdef12-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    parsed = parse_input(str(wheel), "patched")
    assert parsed.kind == "wheel" and parsed.sha256 == hashlib.sha256(b"not really a wheel").hexdigest()


@pytest.mark.parametrize(
    "text, cause",
    [
        (
            "/nonexistent/torch-2.6.0-cp311-cp311-linux_x86_64.whl",
            "--stock: wheel /nonexistent/torch-2.6.0-cp311-cp311-linux_x86_64.whl does not exist",
        ),
        ("python:/nonexistent/python", "--stock: interpreter /nonexistent/python does not exist"),
        ("/nonexistent/dist/", "--stock: build folder /nonexistent/dist does not exist"),  # a folder, not a wheel
        ("/nonexistent/dist", "--stock: build folder /nonexistent/dist does not exist"),
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


# ------------------------------------------------------------------ build folders (compare --stock dist/)
BASE, OTHER_BASE = "a" * 40, "b" * 40
SERIES = {"name": "tiny-fast-path", "hash": "c" * 64}


def _plant(dist, name, kind, base_sha, series=None, end="2026-01-02T00:00:00+00:00"):
    """A wheel file and the build manifest ``harness.build`` writes beside it (the keys a folder is read by)."""
    dist.mkdir(parents=True, exist_ok=True)
    wheel = dist / name
    wheel.write_bytes(name.encode())
    inputs = {"kind": kind, "base_sha": base_sha, "series": series}
    (dist / f"{name}.build.json").write_text(json.dumps({"schema": 1, "inputs": inputs, "end": end}))
    return wheel


def test_a_build_folder_gives_the_pair_of_one_series_and_base(tmp_path):
    dist = tmp_path / "dist"
    stock = _plant(dist, "torch-2.6.0+stock.aaaaaaaa-cp312-none-any.whl", "stock", BASE)
    patched = _plant(dist, "torch-2.6.0+tiny.fast.path.cccccccc-cp312-none-any.whl", "patched", BASE, SERIES)
    # planted: an older build of the series, another series, a stock wheel of another base (newer), and a
    # manifest whose wheel is gone and one that is not JSON
    _plant(dist, "torch-2.6.0+tiny.fast.path.dddddddd-cp312-none-any.whl", "patched", BASE, SERIES, "2026-01-01")
    _plant(dist, "torch-2.6.0+other.eeeeeeee-cp312-none-any.whl", "patched", BASE, {"name": "other", "hash": "e"})
    _plant(dist, "torch-2.6.0+stock.bbbbbbbb-cp312-none-any.whl", "stock", OTHER_BASE, end="2026-12-31")
    _plant(dist, "gone-py3-none-any.whl", "patched", BASE, SERIES, "2027-01-01").unlink()
    (dist / "broken-py3-none-any.whl.build.json").write_text("{not json")
    folder = f"{dist}/"
    builds = parse_inputs({"stock": folder, "patched": folder}, "tiny-fast-path")
    assert list(builds) == ["stock", "patched"]
    assert (builds["stock"].value, builds["patched"].value) == (str(stock), str(patched))
    assert (
        builds["patched"].kind == "wheel"
        and builds["patched"].sha256 == hashlib.sha256(patched.name.encode()).hexdigest()
    )
    # the same wheel as its path gives the same input (one code path: the folder becomes the wheel's path)
    assert parse_input(str(patched), "patched") == builds["patched"]
    # a series folder names the series as well; the current hash keeps the newer build
    assert wheel_in(dist, "patched", series=str(tmp_path / "patches" / "tiny-fast-path")) == patched
    assert wheel_in(dist, "patched", series="tiny-fast-path", series_hashes={"c" * 64}) == patched
    # a stock folder with a patched wheel: the patched wheel's manifest picks the stock wheel's base
    assert parse_inputs({"stock": folder, "patched": str(patched)})["stock"].value == str(stock)


def _line(excinfo) -> str:
    line = excinfo.value.line()
    assert "\n" not in line and excinfo.value.remedy
    return line


def test_a_build_folder_without_one_answer_is_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BuildInputError) as info:
        parse_input(f"{empty}/", "stock")
    assert f"--stock {empty}/ holds no stock wheel with a build manifest" in _line(info)
    assert f"--dist {empty}" in info.value.remedy
    # two candidate wheels of one role: stock wheels of two bases, nothing to pick one by
    two = tmp_path / "two"
    _plant(two, "torch-2.6.0+stock.aaaaaaaa-cp312-none-any.whl", "stock", BASE)
    _plant(two, "torch-2.6.0+stock.bbbbbbbb-cp312-none-any.whl", "stock", OTHER_BASE)
    with pytest.raises(BuildInputError) as info:
        parse_input(f"{two}/", "stock")
    assert f"holds stock wheels of 2 bases ({BASE[:12]}, {OTHER_BASE[:12]}): which one is ambiguous" in _line(info)
    # patched wheels of two series and no --series
    _plant(two, "torch-2.6.0+tiny.fast.path.cccccccc-cp312-none-any.whl", "patched", BASE, SERIES)
    _plant(two, "torch-2.6.0+other.eeeeeeee-cp312-none-any.whl", "patched", BASE, {"name": "other", "hash": "e"})
    with pytest.raises(BuildInputError) as info:
        parse_inputs({"stock": f"{two}/", "patched": f"{two}/"})
    assert "holds patched wheels of 2 series (other, tiny-fast-path): which one is ambiguous" in _line(info)
    # a manifest of another series
    with pytest.raises(BuildInputError) as info:
        parse_inputs({"stock": f"{two}/", "patched": f"{two}/"}, "mps-gemm-prefer-fast-math")
    assert "holds no patched wheel of series mps-gemm-prefer-fast-math (its patched wheels: other, tiny-fast-path)" in (
        _line(info)
    )
    # a manifest of another base: the only stock wheel is not of the patched wheel's base
    other = tmp_path / "other-base"
    _plant(other, "torch-2.6.0+stock.bbbbbbbb-cp312-none-any.whl", "stock", OTHER_BASE)
    _plant(other, "torch-2.6.0+tiny.fast.path.cccccccc-cp312-none-any.whl", "patched", BASE, SERIES)
    with pytest.raises(BuildInputError) as info:
        parse_inputs({"stock": f"{other}/", "patched": f"{other}/"}, "tiny-fast-path")
    assert (
        f"holds no stock wheel of base {BASE[:12]} (the --patched wheel's base); its stock wheels are of base "
        f"{OTHER_BASE[:12]}" in _line(info)
    )
    # a build of an older state of the series
    with pytest.raises(BuildInputError) as info:
        wheel_in(other, "patched", series="tiny-fast-path", series_hashes={"f" * 64})
    assert "built from another state of the series (hash cccccccc, not ffffffff)" in _line(info)
    # bench --build takes no folder: its role has no manifest kind
    with pytest.raises(BuildInputError) as info:
        parse_input(f"{other}/", "build")
    assert "only --stock/--patched take a build folder" in _line(info)


def test_compare_on_an_empty_build_folder_says_it_in_one_line(tmp_path, capsys):
    empty = tmp_path / "dist"
    empty.mkdir()
    out = str(tmp_path / "out")
    rc = cli.main(["compare", "--stock", f"{empty}/", "--patched", f"{empty}/", "--device", "cpu", "--out", out])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"error: --patched {empty}/ holds no patched wheel with a build manifest")
    assert not (tmp_path / "out").exists()
