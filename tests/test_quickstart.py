"""The quickstart's commands, as written, as far as Linux can run them.

docs/quickstart-macos.md told a fresh Mac ``python3 -m pip install nox``, which Homebrew's Python
refuses (PEP 668: ``externally-managed-environment``). Here every fenced ``sh`` block of the
quickstart (and of README.md) is read:

- each block passes ``bash -n``;
- each command line is one of :data:`LINES`: a ``nox -s``/``python -m harness`` line, parsed by the
  harness's own argument parser (the session's command from ``noxfile.py``), or a line that cannot run
  here, skipped with its reason (the macOS tools). A line in none of them fails: a new command in the
  quickstart must be classified;
- the venv line runs as written (``HOME`` in a temporary folder, ``python3`` an externally managed
  Python where this machine has one, like Homebrew's), then ``nox --list`` from that venv lists every
  session the quickstart names; the build dry run runs through the harness.

The planted defects: the old ``python3 -m pip install nox`` into an externally managed Python, a
misspelt option and an unknown session are each caught.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.errors import UsageError

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "docs" / "quickstart-macos.md"
#: what ``$FRESH`` stands for when a line is parsed (the SHA of `main` that `git ls-remote` gives on a Mac)
FRESH_SHA = "0123456789abcdef0123456789abcdef01234567"
#: seconds the venv line (venv + pip install nox from PyPI) and ``nox --list`` may take together
VENV_S = 300

#: (pattern of a command line, what the test does with it, why). "harness": parsed through the harness's
#: parser; "run": run by a test below as written; "skip": cannot run here (the reason is the skip's).
LINES: tuple[tuple[str, str, str], ...] = (
    (r"^(sudo )?xcode-select ", "skip", "macOS only: Xcode's command line tools / selecting the full Xcode"),
    (r"^xcrun ", "skip", "macOS only: xcrun (Xcode) finds the Metal shader compiler"),
    (r"^xcodebuild ", "skip", "macOS only: Xcode's component download"),
    (r"^brew ", "skip", "macOS only: Homebrew"),
    (r"^ccache -M ", "skip", "sets the size of the user's compiler cache: a test changes nothing of the user's"),
    (r"^git clone <this repository> ", "skip", "a placeholder URL: the checkout the tests run in"),
    (r"^git config --global ", "skip", "sets the user's git identity: a test changes nothing of the user's"),
    (r"^FRESH=\$\(git ls-remote https://github\.com/", "skip", "asks GitHub, which this machine cannot reach"),
    (r"^python3 -m venv ~/\.venvs/tph && \. ~/\.venvs/tph/bin/activate && pip install nox$", "run", ""),
    (r"^python3 -m pip install nox && nox -s ", "harness", ""),  # README's CI commands (pyenv's python3 here)
    (r"^nox -s \S+ -- .*--dry-run", "run", ""),
    (r"^nox -s tests$", "harness", ""),
    (r"^nox -s ", "harness", ""),
    (r"^python3? -m harness ", "harness", ""),
)


def sh_blocks(path: Path) -> list[tuple[int, str]]:
    """``(first line number, text)`` of each fenced ``sh`` block of ``path``."""
    blocks, start, lines = [], None, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if start is None and line.strip() == "```sh":
            start, lines = number + 1, []
        elif start is not None and line.strip() == "```":
            blocks.append((start, "\n".join(lines) + "\n"))
            start = None
        elif start is not None:
            lines.append(line)
    return blocks


def command_lines(path: Path) -> list[tuple[str, str]]:
    """``(where, command without its comment)`` of every command line of every ``sh`` block."""
    found = []
    for start, text in sh_blocks(path):
        for offset, line in enumerate(text.splitlines()):
            command = _strip_comment(line)
            if command:
                found.append((f"{path.relative_to(REPO)}:{start + offset}", command))
    return found


def _strip_comment(line: str) -> str:
    """The line without its ``# comment`` (a ``#`` that starts a word, outside quotes)."""
    for match in re.finditer(r"(?:^|\s)#", line):
        head = line[: match.start()]
        try:
            shlex.split(head)
        except ValueError:  # the # is inside quotes
            continue
        return head.strip()
    return line.strip()


def classify(line: str) -> tuple[str, str]:
    """``(action, reason)`` of a command line (:data:`LINES`).

    Raises:
        AssertionError: no entry of :data:`LINES` knows the line.
    """
    for pattern, action, reason in LINES:
        if re.search(pattern, line):
            return action, reason
    raise AssertionError(f"no entry of LINES classifies {line!r}: add one (run, parse or skip with a reason)")


def nox_sessions() -> dict[str, tuple[str, ...] | None]:
    """Session name -> the ``python -m harness`` argv prefix it runs (None: not a harness command), read
    from ``noxfile.py``'s AST: ``_harness(session, "<command>", *fixed)`` or
    ``session.run("python", "-m", "harness", "<command>", ...)``."""
    sessions: dict[str, tuple[str, ...] | None] = {}
    for node in ast.parse((REPO / "noxfile.py").read_text()).body:
        if not isinstance(node, ast.FunctionDef) or not any(
            ast.unparse(d).startswith("nox.session") for d in node.decorator_list
        ):
            continue
        sessions[node.name] = None
        for call in ast.walk(node):
            if not isinstance(call, ast.Call):
                continue
            consts = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if ast.unparse(call.func) == "_harness":
                sessions[node.name] = tuple(consts)
            elif ast.unparse(call.func) == "session.run" and consts[:3] == ["python", "-m", "harness"]:
                sessions[node.name] = tuple(consts[3:])
    return sessions


def expand(line: str, fresh: str = FRESH_SHA) -> str:
    """``$FRESH`` and ``${FRESH:0:8}`` as bash would expand them after the ``FRESH=$(...)`` line."""
    return line.replace("${FRESH:0:8}", fresh[:8]).replace("$FRESH", fresh)


def harness_argvs(line: str, fresh: str = FRESH_SHA) -> list[list[str]]:
    """The ``python -m harness`` argv of each command of a line (one per nox session it names).

    Raises:
        AssertionError: a nox session that noxfile.py does not have, or a malformed nox call.
    """
    argvs = []
    sessions = nox_sessions()
    for command in re.split(r"\s*(?:&&|;)\s*", expand(line, fresh)):
        words = shlex.split(command)
        if words[:1] == ["nox"]:
            assert words[1:2] == ["-s"], f"{line!r}: nox without -s"
            names = words[2 : words.index("--")] if "--" in words else words[2:]
            posargs = words[words.index("--") + 1 :] if "--" in words else []
            for name in names:
                assert name in sessions, f"{line!r}: noxfile.py has no session {name!r} ({', '.join(sessions)})"
                if sessions[name] is not None:
                    argvs.append([*sessions[name], *posargs])
        elif words[:3] in (["python", "-m", "harness"], ["python3", "-m", "harness"]):
            argvs.append(words[3:])
    return argvs


def parse(argv: list[str]) -> None:
    """Parse ``argv`` with the harness's own parser of its command (nothing runs).

    Raises:
        UsageError: an unknown command, option or value.
    """
    cli.build_parser(argv[0]).parse_args(argv[1:])


ALL_LINES = command_lines(QUICKSTART) + command_lines(REPO / "README.md")


@pytest.mark.parametrize(("start", "block"), sh_blocks(QUICKSTART) + sh_blocks(REPO / "README.md"))
def test_every_sh_block_is_valid_bash(start, block):
    result = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"block at line {start}: {result.stderr}"


@pytest.mark.parametrize(("where", "line"), ALL_LINES, ids=[w for w, _ in ALL_LINES])
def test_every_command_line_is_parsed_run_or_skipped_with_its_reason(where, line):
    action, reason = classify(line)
    if action == "skip":
        pytest.skip(f"{where}: {reason}")
    argvs = harness_argvs(line)
    for argv in argvs:
        parse(argv)
    if re.match(r"^(nox|python3? -m harness) ", line) and line != "nox -s tests":
        assert argvs, f"{where}: {line!r} names no harness command"


def test_the_quickstart_has_the_commands_a_fresh_mac_needs():
    lines = [line for _, line in command_lines(QUICKSTART)]
    assert "python3 -m venv ~/.venvs/tph && . ~/.venvs/tph/bin/activate && pip install nox" in lines
    assert not [ln for ln in lines if re.search(r"python3 -m pip install", ln)]  # PEP 668 refuses it on a Mac
    assert not [ln for ln in lines if ln.startswith("nox -s checkout")]  # rebase makes the worktrees
    skipped = [(line, classify(line)[1]) for line in lines if classify(line)[0] == "skip"]
    assert [line.split()[0] for line, _ in skipped] == [
        "xcode-select",
        "sudo",
        "xcrun",
        "brew",
        "ccache",
        "git",
        "FRESH=$(git",
        "git",
    ]


def externally_managed_python() -> str | None:
    """An interpreter of this machine that PEP 668 marks externally managed and that can make venvs
    (Debian's /usr/bin/python3 with python3-venv: what Homebrew's python3 is on a Mac); None without one."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/opt/homebrew/bin/python3"):
        if not os.access(candidate, os.X_OK):
            continue
        probe = subprocess.run(
            [
                candidate,
                "-c",
                "import ensurepip, os, sys, sysconfig; "
                "sys.exit(0 if sys.prefix == sys.base_prefix and os.path.isfile("
                "os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')) else 1)",
            ],
            capture_output=True,
            timeout=30,
        )
        if probe.returncode == 0:
            return candidate
    return None


def _shell(tmp_path: Path, python3: str, script: str) -> subprocess.CompletedProcess:
    """``script`` in bash with ``python3`` on PATH first and HOME in ``tmp_path`` (``~/.venvs`` lands
    there); pip keeps the user's download cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "python3"
    if not link.exists():
        link.symlink_to(python3)
    cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")},
        "HOME": str(tmp_path / "home"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PIP_CACHE_DIR": cache,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_COMPILE": "1",  # no byte-compiling of what pip installs: seconds on a loaded 2-core machine
    }
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=VENV_S)


def _mac_like_python() -> str:
    return externally_managed_python() or getattr(sys, "_base_executable", sys.executable)


@pytest.mark.slow
def test_the_venv_line_runs_as_written_and_its_nox_lists_every_session_the_quickstart_names(tmp_path):
    """The step-2 line on a Python like Homebrew's, then ``nox --list`` (noxfile.py read by that nox)."""
    (line,) = (ln for _, ln in command_lines(QUICKSTART) if classify(ln)[0] == "run" and "venv" in ln)
    result = _shell(tmp_path, _mac_like_python(), f'set -e\n{line}\necho "nox is $(command -v nox)"\nnox --list\n')
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert f"nox is {tmp_path / 'home' / '.venvs' / 'tph' / 'bin' / 'nox'}\n" in out
    listed = set(re.findall(r"^[*-] (\w+)", out, flags=re.MULTILINE))
    named = {ln.split()[2] for _, ln in command_lines(QUICKSTART) if ln.startswith("nox -s ")}
    assert {"tests", "doctor", "check", "rebase", "apply", "build_stock", "build_patched", "compare", "pr"} <= named
    assert named <= listed, (named - listed, out)


def test_the_old_pip_line_into_an_externally_managed_python_is_refused(tmp_path):
    """Planted: the quickstart's former step 2, ``python3 -m pip install nox``, on a Python like
    Homebrew's: pip refuses before installing anything (PEP 668); the venv line above passes there."""
    python3 = externally_managed_python()
    if python3 is None:
        pytest.skip("this machine has no externally managed Python (PEP 668) to stand in for Homebrew's")
    result = _shell(tmp_path, python3, "python3 -m pip install nox\n")
    assert result.returncode != 0
    assert "externally-managed-environment" in result.stderr


def test_the_build_dry_run_line_runs(monkeypatch, capsys):
    """Step 5's dry run through the harness (what its nox session runs), for the platform of the Mac;
    ``$FRESH`` is ``main`` here: the series' base that ``rebase`` carries to the fresh commit."""
    (line,) = (ln for _, ln in command_lines(QUICKSTART) if classify(ln)[0] == "run" and "--dry-run" in ln)
    (argv,) = harness_argvs(line, fresh="main")
    monkeypatch.chdir(REPO)
    before = sorted(REPO.iterdir())
    assert cli.main([*argv, "--platform", "macos-arm64"]) == 0
    out = capsys.readouterr().out
    assert "# stock build, platform macos-arm64" in out and "USE_MPS=1" in out
    assert "# series: mps-gemm-prefer-fast-math" in out
    assert sorted(REPO.iterdir()) == before  # a dry run writes nothing (no dist/, no work/)


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        (
            "nox -s compare -- --stock a.whl --patched b.whl --device mps --out r --quik",
            "unrecognized arguments: --quik",
        ),
        ("nox -s rebase -- --series mps-gemm-prefer-fast-math --base main", "--onto"),
        ("nox -s doctor -- --device metal", "invalid choice"),
    ],
)
def test_a_quickstart_line_the_harness_would_refuse_is_caught(line, caught):
    (argv,) = harness_argvs(line)
    with pytest.raises(UsageError, match=caught):
        parse(argv)


def test_an_unknown_session_or_an_unclassified_line_is_caught():
    with pytest.raises(AssertionError, match="noxfile.py has no session 'build-stock'"):
        harness_argvs("nox -s build-stock -- --dry-run")
    with pytest.raises(AssertionError, match="no entry of LINES classifies"):
        classify("curl -fsSL https://example.org/install.sh")
