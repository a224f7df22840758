"""noxfile.py's ``tests`` session, run on a recording session object: what it installs and in which order (the
newer pip first, so that the suite's install resolves with it), and the byte-compiling warm-up, which runs once
per environment and only for the whole suite."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from conftest import noxfile as load_noxfile
from packaging.requirements import Requirement


class Session:
    """What the ``tests`` session calls on nox's session: ``install`` and ``run``, recorded in order."""

    def __init__(self, posargs: list[str], venv: Path) -> None:
        self.posargs, self.virtualenv, self.calls = posargs, SimpleNamespace(location=str(venv)), []

    def install(self, *args: str) -> None:
        self.calls.append(("install", args))

    def run(self, *args: str, **kwargs) -> None:
        self.calls.append(("run", args))


def test_the_tests_session_installs_pip_first_and_warms_up_once_per_environment(tmp_path):
    noxfile = load_noxfile()
    first = Session([], tmp_path)
    noxfile.tests.func(first)  # nox.session wraps the function in a Func
    installs = [args for kind, args in first.calls if kind == "install"]
    assert installs == [("--no-compile", noxfile.TEST_PIP), ("--no-compile", "-e", ".[test]", noxfile.TEST_TORCH)]
    assert Requirement(noxfile.TEST_PIP).name == "pip"
    runs = [args for kind, args in first.calls if kind == "run"]
    assert [r[:2] for r in runs] == [("ruff", "check"), ("ruff", "format"), ("python", "-c"), ("python", "-m")]
    assert runs[2][2] == noxfile.WARM_UP and runs[3][2:] == ("pytest", "-q")
    # the same environment again: no warm-up; a chosen file: none either, and its arguments reach pytest
    again = Session([], tmp_path)
    noxfile.tests.func(again)
    assert [args[:2] for kind, args in again.calls if kind == "run"] == [
        ("ruff", "check"),
        ("ruff", "format"),
        ("python", "-m"),
    ]
    chosen = Session(["tests/test_stats.py"], tmp_path / "other")
    noxfile.tests.func(chosen)
    assert [args for kind, args in chosen.calls if kind == "run"][-1] == (
        "python",
        "-m",
        "pytest",
        "tests/test_stats.py",
    )
    assert not any(args[:2] == ("python", "-c") for kind, args in chosen.calls if kind == "run")


class _Recorder:
    """What a harness session calls on nox's session (``run``, ``error``), with no environment made."""

    def __init__(self, posargs: list[str]) -> None:
        self.posargs, self.calls = posargs, []

    def run(self, *args: str, **kwargs) -> None:
        self.calls.append(args)

    def error(self, message: str) -> None:
        raise AssertionError(message)


def test_every_nox_session_is_the_harness_command_of_its_name_with_its_arguments(tmp_path, monkeypatch, capsys):
    """One vocabulary: ``nox -s X -- ARGS`` runs ``python -m harness X ARGS`` (``tests`` aside: the toolkit's own
    tests; ``doctor`` adds ``--build`` of the interpreter it tests), every harness command has a session, and
    ``python -m harness X --help`` works for each."""
    from harness import cli

    noxfile = load_noxfile()
    sessions = {name: f for name, f in vars(noxfile).items() if type(f).__name__ == "Func"}
    assert set(sessions) - {"tests"} == set(cli.COMMANDS)
    env = tmp_path / "harness-env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")  # the environment exists: no venv is made
    monkeypatch.setattr(noxfile, "HARNESS_ENV", env)
    for name, func in sessions.items():
        if name == "tests":
            continue
        session = _Recorder(["--base", "v9"])
        func.func(session)
        harness = [c for c in session.calls if c[1:3] == ("-m", "harness")]
        assert len(harness) == 1, (name, session.calls)
        command = list(harness[0][3:])
        if name == "doctor":  # its torch: the interpreter nox runs under, or the one it installed
            assert command[1] == "--build" and command[2].startswith("python:"), command
            del command[1:3]
        assert command == [name, "--base", "v9"], (name, command)
        try:
            code = cli.main([name, "--help"])
        except SystemExit as exc:  # argparse's --help exits 0 after printing
            code = exc.code
        assert code == 0, name
        assert f"usage: python -m harness {name}" in capsys.readouterr().out
