"""Hostile names (absolute, ``..``, symbolic links inside and outside, NUL, very
long, unicode) in every manifest field and CLI path argument change nothing outside the allowed
folders (series folder, worktrees, cache, the argument's own folder), and every refusal is one line.
Property-style: every (field, hostile value) pair, the parent folder checksummed before and after."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import export_series, git
from test_containment import tree_digest

from harness import cli

REPO = Path(__file__).resolve().parent.parent


def make_links(tmp_path: Path, project: Path) -> None:
    """``patches/demo/v1/out-link`` -> the victim folder, ``patches/demo/in-link`` -> ``v1``. A series folder
    holding a link is refused as it loads (harness.manifest), before any field is read: the tests of the
    fields and options run without them, :func:`test_a_link_in_the_series_folder_is_refused_before_anything_runs`
    with them."""
    link_out = project / "patches" / "demo" / "v1" / "out-link"
    if not link_out.is_symlink():
        link_out.symlink_to(tmp_path / "victim")
    link_in = project / "patches" / "demo" / "in-link"
    if not link_in.is_symlink():
        link_in.symlink_to(project / "patches" / "demo" / "v1")


def hostile(tmp_path: Path, project: Path) -> list[str]:
    victim = tmp_path / "victim"
    victim.mkdir(exist_ok=True)
    (victim / "precious.txt").write_text("keep me\n")
    return [
        str(victim / "precious.txt"),
        "../../../victim/precious.txt",
        "../../../../victim",
        "out-link/precious.txt",
        "in-link",
        "nul\0name",
        "x" * 300,
        "ünïcødé-名前",
        "..",
        ".",
    ]


#: the refusal of a series folder that holds a symbolic link (harness.manifest): a command that stops there
#: never reads the hostile field or option under test
LINK_REFUSAL = "is a symbolic link"


def _cli(capsys, *args: str, links: bool = False) -> int:
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    assert links or LINK_REFUSAL not in text, text  # the value under test was read, not refused by a link
    if rc == 2:
        assert len([ln for ln in captured.err.splitlines() if ln.startswith("error:")]) == 1, text
    assert rc in (0, 1, 2), text
    return rc


def _toml(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\0", "\\u0000") + '"'


MANIFEST_FIELDS = {
    "name": lambda t, v: t.replace('name = "demo"', f"name = {_toml(v)}"),
    "upstream": lambda t, v: re.sub(r"(?m)^upstream = .*$", lambda m: f"upstream = {_toml(v)}", t),
    "ref": lambda t, v: t.replace('ref = "v1"', f'ref = {_toml(v)}\ndir = "v1"'),
    "dir": lambda t, v: t.replace('ref = "v1"', f'ref = "v1"\ndir = {_toml(v)}'),
    "patches": lambda t, v: re.sub(r"(?m)^patches = \[", lambda m: f"patches = [{_toml(v)}, ", t),
    "files": lambda t, v: t + f"files = [{_toml(v)}]\n",
    "related": lambda t, v: t.replace("env = ", f"related = [{_toml(v)}]\nenv = "),
    "env": lambda t, v: t.replace('env = ["DEMO_ENV"]', f"env = [{_toml(v)}]"),
    "read.path": lambda t, v: t + f'\n[[base.read]]\npath = {_toml(v)}\ncommit = "{"0" * 40}"\n',
}


#: fields that name no file: the commands that read them (apply reads none of them)
COMMANDS = {
    "files": ("check", "refresh"),
    "env": ("check", "refresh"),
    "related": ("check", "refresh"),
    "read.path": ("check", "refresh"),
}


@pytest.mark.parametrize("field", sorted(MANIFEST_FIELDS))
def test_hostile_manifest_fields_touch_nothing_outside(tiny_upstream, project, isolated_cache, tmp_path, capsys, field):
    folder = export_series(tiny_upstream, project)
    assert _cli(capsys, "apply", "--series", "demo") == 0
    # the patched branch carries one more commit, so that refresh has something to write or delete
    _, patched = (project / "work" / "v1" / "stock", project / "work" / "v1" / "patched")
    (patched / "c.txt").write_text("new\n")
    git(patched, "add", "c.txt")
    git(patched, "commit", "-q", "-m", "c: add")
    values = hostile(tmp_path, project)
    manifest = folder / "series.toml"
    original = manifest.read_text()
    allowed = (project / "work", isolated_cache, folder)
    before, victim = tree_digest(tmp_path, skip=allowed), tree_digest(tmp_path / "victim")
    for value in values:
        manifest.write_text(MANIFEST_FIELDS[field](original, value))
        for command in COMMANDS.get(field, ("check", "apply", "refresh")):
            _cli(capsys, command, "--series", "demo")
        assert tree_digest(tmp_path, skip=allowed) == before, (field, value)
        assert tree_digest(tmp_path / "victim") == victim, (field, value)
    assert (tmp_path / "victim" / "precious.txt").read_text() == "keep me\n"


def _exists(path: Path) -> bool:
    """``path.exists()``, False for a name the file system refuses (longer than its 255 bytes)."""
    try:
        return path.exists()
    except OSError:
        return False


@pytest.mark.parametrize("option", ["--workdir", "--series", "--base", "--upstream"])
def test_hostile_cli_paths_touch_nothing_outside(tiny_upstream, project, isolated_cache, tmp_path, capsys, option):
    """A NUL cannot reach argv (exec takes C strings), so the CLI values have none."""
    folder = export_series(tiny_upstream, project)
    values = [v for v in hostile(tmp_path, project) if "\0" not in v]
    victim = tree_digest(tmp_path / "victim")
    for value in values:
        # the worktrees go to <workdir>/<base>: that folder is the harness's, and the folders above it that
        # --workdir names and do not exist yet; an existing --workdir (.., ., the victim) is not
        own = ((project / value).resolve() if option == "--workdir" else project / "work") / "v1"
        while not _exists(own.parent):
            own = own.parent
        allowed = (project / "work", isolated_cache, folder, own)
        before = tree_digest(tmp_path, skip=allowed)
        base = {
            "--series": ["--series", value],
            "--workdir": ["--series", "demo", "--workdir", value],
            "--base": ["--series", "demo", "--base", value],
            "--upstream": ["--series", "demo", "--upstream", value],
        }
        for command in ("checkout", "refresh") if option == "--workdir" else ("checkout", "check", "apply", "refresh"):
            _cli(capsys, command, *base[option])
        assert tree_digest(tmp_path, skip=allowed) == before, (option, value)
        assert tree_digest(tmp_path / "victim") == victim, (option, value)
    for value in values:
        before = tree_digest(tmp_path, skip=(isolated_cache,))
        _cli(capsys, "report", value)
        assert tree_digest(tmp_path, skip=(isolated_cache,)) == before, ("report", value)


def test_a_link_in_the_series_folder_is_refused_before_anything_runs(
    tiny_upstream, project, isolated_cache, tmp_path, capsys
):
    """A link out of the series folder (to the victim) and one inside it: every command that loads the series
    stops in one line naming the link, and nothing outside the allowed folders changes."""
    folder = export_series(tiny_upstream, project)
    hostile(tmp_path, project)
    make_links(tmp_path, project)
    allowed = (project / "work", isolated_cache, folder)
    before = tree_digest(tmp_path, skip=allowed)
    for command in ("checkout", "check", "apply", "refresh"):
        assert _cli(capsys, command, "--series", "demo", links=True) == 2
    out = cli.main(["check", "--series", "demo"])
    err = capsys.readouterr().err
    assert out == 2 and LINK_REFUSAL in err and ("out-link" in err or "in-link" in err), err
    assert tree_digest(tmp_path, skip=allowed) == before
    assert (tmp_path / "victim" / "precious.txt").read_text() == "keep me\n"


# ------------------------------------------------------------------- every write and delete site
#: every function of harness/ that writes, renames or deletes a file, and why its path stays inside
#: its folder: "inside" = it resolves the path through harness.fsutil.inside itself; otherwise the
#: reason (a path the harness derived from a folder that was checked or is its own).
WRITE_SITES = {
    "fsutil.atomic_write_bytes": "the primitive: writes the path its caller resolved",
    "fsutil.atomic_write_text": "the primitive",
    "fsutil.atomic_write_json": "the primitive",
    "fsutil.open_write": "the primitive (the host's side of bench.files.open_nofollow)",
    "fsutil.exclusive_lock": "<directory>/.lock of a folder its caller chose (cache, --out, envs/.locks/<env>)",
    "fsutil._publish": "exclusive_lock's .lock and a .lock-* temporary file beside it, in that same folder",
    "manifest._write_manifest": "series.toml of the series folder that load_series resolved",
    "series._failing_hunks": "a temporary folder",
    "series.check_series": "a temporary folder",
    "series.write_patches": "inside",
    "newseries.init_series": "a temporary folder beside the new series folder, renamed to it (never over one)",
    "upstream._clear_interrupted_clone": "the cache's mirrors/, names from a hash of the upstream",
    "upstream._mirror": "a temporary folder in the cache's mirrors/, renamed to a hashed name",
    "upstream._extract": "inside",
    "upstream.import_archive": "a temporary folder in the cache's imports/, renamed to a hashed name",
    "upstream._clear_partial_worktrees": "inside",
    "build.wheel.ensure_build_venv": "the cache's build-venvs/, name from a hash of the requirements",
    "build.wheel._run_build": "--dist/logs/<kind>-<version slug>-<stamp>.log through open_write (no link followed)",
    "build.wheel._write_manifest": "<wheel>.build.json beside the wheel the build wrote in --dist",
    "build.verify.reject_wheel": "inside",
    "venvs.ensure_interpreter": "inside",
    "supervise.reap_orphans": "raw/*.worker.json globbed in the raw/ folder open_out resolved",
    "supervise.run_worker": "raw/<process>: raw/ resolved by open_out, process names from validated config names",
    "supervise._supervised": "raw/<process>.stderr and .worker.json of run_worker's process",
    "supervise.run_consistency": "raw/<process>: as run_worker",
    "seriestests.forget_source_bytecode": "inside",
    "seriestests.run_one": "raw/tests/<n>-<build>.xml (pytest's junit XML): raw/ resolved by execute, n a number",
    "rundir.check_resumable": "raw/plan.json",
    "rundir.kept_record": "set_aside of a raw/ status file",
    "rundir.read_status": "set_aside of a raw/ status file",
    "rundir._fresh": "set_aside of results.json, raw/plan.json and raw/*.status.json of --out (not the harness's)",
    "rundir.check_earlier_results": "set_aside of --out/results.json whose processes are not in raw/",
    "rundir._remove_if_empty": "--out itself, only when this run created it and it holds only its traces",
    "rundir.open_out": "inside",
    "outdir._write_marker": "the marker of an output folder that claim checked (new, empty, or a run of ours)",
    "outdir.finish": "the marker its own claim wrote, taken back when the command wrote nothing else there",
    "outdir.make_room": "set_aside of a file of an output folder the harness is about to write",
    "outdir.set_aside": "renames a file of raw/ or an output folder beside itself",
    "outdir.clear": "--fresh: the files its marker lists (relative, no '..', not through a linked folder)",
    "outdir._remove_all": "clear's files, moved into a hidden folder it makes in the output folder, then removed "
    "(or moved back when one refuses)",
    "results.save": "results.json in the results folder (--out) given",
    "report.write": "report.md and PNGs in the results folder given",
    "plots._save": "called by report.write",
    "plots.contrast_pngs": "contrast-*.png globbed in the results folder report.write was given (stale ones removed)",
    "plots.latency_png": "latency-<family>.png of report.write's results folder, removed when no line has two sizes",
    "preview.write_html": "report.html in the results folder given",
    "bench.worker.main": "the worker's own output file named by the runner (its error record)",
    "bench.worker._run": "the worker's own output file named by the runner",
    "doctor.run": "doctor.md, doctor.json and raw/ in the --out folder given (as compare's --out)",
    "assumptions.run_child": "raw/assumptions-<config>.spec.json in doctor's raw/ (doctor.run claimed --out)",
    "pr.make_branch": "a temporary folder",
    "pr.keep_edited": "PR.md beside the worktrees of the checkout that existing_checkout resolved (an edited "
    "one renamed to PR.md.~N~ beside it)",
    "build.preflight.metal_capability": "a temporary folder (the Metal probe shaders)",
    "merge.write": "results.json in the --out folder commands.merge claimed (outdir kind merge, never a source)",
    "merge.write_report": "report.md in the merge folder given (merge.write, report DIR)",
}
_WRITES = {
    "unlink",
    "rmtree",
    "write_text",
    "write_bytes",
    "rename",
    "rmdir",
    "atomic_write_text",
    "atomic_write_bytes",
    "atomic_write_json",
    "open_write",
    "open_nofollow",
    "set_aside",
    "move",
    "copyfile",
    "copy2",
}


def write_sites() -> dict[str, str]:
    """{module.function: source} of every function in harness/ that calls a write/delete/rename."""
    found = {}
    for path in sorted((REPO / "harness").rglob("*.py")):
        module = ".".join(path.relative_to(REPO / "harness").with_suffix("").parts)
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef):
                continue
            for call in ast.walk(node):
                if not isinstance(call, ast.Call):
                    continue
                func = call.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                is_os_replace = (
                    name == "replace" and isinstance(func, ast.Attribute) and getattr(func.value, "id", None) == "os"
                )
                if name in _WRITES or is_os_replace:
                    found[f"{module}.{node.name}"] = ast.get_source_segment(source, node)
                    break
    return found


def test_every_write_and_delete_site_is_listed_and_the_input_ones_go_through_inside():
    sites = write_sites()
    assert sorted(sites) == sorted(WRITE_SITES), "classify the new write sites in WRITE_SITES"
    for name, how in WRITE_SITES.items():
        if how == "inside":
            assert "inside(" in sites[name], name
