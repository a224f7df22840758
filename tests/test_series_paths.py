"""Series operations compare paths resolved and normalised, and refuse a symbolic link
anywhere inside the series folder (listed or not). Each test plants the case that destroyed a patch."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import export_series, git

from harness import cli


def _run(capsys, *args: str) -> tuple[int, str]:
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


def _one_line(rc: int, text: str) -> str:
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and "Traceback" not in text, text
    return errors[0]


def _commit(worktree: Path, name: str, text: str, message: str) -> None:
    (worktree / name).write_text(text)
    git(worktree, "add", name)
    git(worktree, "commit", "-q", "-m", message)


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.is_symlink()}


def test_refresh_refuses_a_link_to_a_sibling_patch(tiny_upstream, project, isolated_cache, capsys):
    """The new commit's patch was written through an unlisted link onto the first patch."""
    folder = export_series(tiny_upstream, project)
    assert _run(capsys, "apply", "--series", "demo")[0] == 0
    _commit(project / "work" / "v1" / "patched", "c.txt", "new\n", "c: add")
    patches = folder / "v1"
    first = sorted(patches.iterdir())[0]
    (patches / "0003-c-add.patch").symlink_to(first.name)  # the name refresh gives the new commit
    before = _bytes(patches)
    line = _one_line(*_run(capsys, "refresh", "--series", "demo"))
    assert f"0003-c-add.patch is a symbolic link (to {first.name})" in line, line
    assert " -- replace the link with a copy" in line
    assert _bytes(patches) == before  # the first patch keeps its bytes
    # the check covers the folder's contents anywhere, not just listed names: a linked folder too
    (patches / "0003-c-add.patch").unlink()
    (folder / "notes").symlink_to(patches)
    line = _one_line(*_run(capsys, "check", "--series", "demo"))
    assert "notes is a symbolic link" in line, line


def test_refresh_keeps_a_patch_listed_as_dot_slash_name(tiny_upstream, project, isolated_cache, capsys):
    """The stale-file check compared "./0002-x.patch" with "0002-x.patch" as strings and deleted the
    patch refresh had just written."""
    folder = export_series(tiny_upstream, project)
    manifest = folder / "series.toml"
    second = sorted((folder / "v1").iterdir())[1].name
    manifest.write_text(manifest.read_text().replace(f'"{second}"', f'"./{second}"'))
    assert _run(capsys, "apply", "--series", "demo")[0] == 0
    patched = project / "work" / "v1" / "patched"
    subject = git(patched, "log", "-1", "--format=%s").strip()  # the same subject: the same file name
    git(patched, "commit", "-q", "--amend", "-m", subject, "-m", "Why: a better message.")
    rc, out = _run(capsys, "refresh", "--series", "demo")
    assert rc == 0, out
    assert (folder / "v1" / second).is_file()
    assert "Why: a better message." in (folder / "v1" / second).read_text()
    listed = re.findall(r'"([^"]+\.patch)"', manifest.read_text())
    assert all((folder / "v1" / name).is_file() for name in listed) and len(listed) == 2, listed


def test_refresh_keeps_the_spelling_of_every_entry_it_rewrites(tiny_upstream, project, isolated_cache, capsys):
    """A refresh that rewrote one patch listed as "./name" wrote it back as "name" and kept the other "./"."""
    folder = export_series(tiny_upstream, project)
    manifest = folder / "series.toml"
    first, second = (p.name for p in sorted((folder / "v1").iterdir()))
    text = manifest.read_text().replace(f'"{first}"', f'"./{first}"').replace(f'"{second}"', f'"./{second}"')
    manifest.write_text(text)
    assert _run(capsys, "apply", "--series", "demo")[0] == 0
    patched = project / "work" / "v1" / "patched"
    subject = git(patched, "log", "-1", "--format=%s").strip()  # the same subject: the same file name
    git(patched, "commit", "-q", "--amend", "-m", subject, "-m", "Why: a better message.")
    rc, out = _run(capsys, "refresh", "--series", "demo")
    assert rc == 0 and "Why: a better message." in (folder / "v1" / second).read_text(), out
    assert re.findall(r'"([^"]+\.patch)"', manifest.read_text()) == [f"./{first}", f"./{second}"]
    assert manifest.read_text() == text  # the list unchanged: nothing to rewrite


def test_a_patch_listed_twice_under_two_spellings_is_refused(tiny_upstream, project, isolated_cache, capsys):
    folder = export_series(tiny_upstream, project)
    manifest = folder / "series.toml"
    first = sorted((folder / "v1").iterdir())[0].name
    manifest.write_text(manifest.read_text().replace(f'"{first}"', f'"{first}", "./{first}"'))
    line = _one_line(*_run(capsys, "check", "--series", "demo"))
    assert f"lists patches/demo/v1/{first} twice ('{first}' and './{first}')" in line, line


def test_two_bases_in_one_folder_are_refused(tiny_upstream, project, isolated_cache, capsys):
    """refresh of one base would remove the other's patches as stale."""
    folder = export_series(tiny_upstream, project)
    manifest = folder / "series.toml"
    block = manifest.read_text().split("[[base]]")[1]
    manifest.write_text(manifest.read_text() + "\n[[base]]" + block.replace('ref = "v1"', 'ref = "v2"\ndir = "./v1"'))
    line = _one_line(*_run(capsys, "check", "--series", "demo", "--base", "v2"))
    assert "[[base]] #2 (ref 'v2'): key 'dir': './v1' is the folder of [[base]] #1 ('v1')" in line, line
