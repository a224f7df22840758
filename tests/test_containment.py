"""Every path from a manifest, an argument or a patch stays inside its folder
(:func:`harness.fsutil.inside`), checked before anything is read, written or deleted."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from conftest import export_series, git

from harness import cli, fsutil
from harness.upstream import worktrees


def _run(capsys, *args: str) -> tuple[int, str]:
    rc = cli.main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


def tree_digest(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """{relative path: sha256 of bytes, or link target, or 'dir'} of everything under ``root``
    (``skip``: folders the harness may change)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if any(here == s or here.is_relative_to(s) for s in skip):
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            path = here / name
            if any(path == s or path.is_relative_to(s) for s in skip):
                continue
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "->" + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# ------------------------------------------------------------------------------------ the helper
def test_inside_resolves_and_refuses_what_leaves(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "out-link").symlink_to(tmp_path)
    (root / "in-link").symlink_to(root / "sub")
    inside, OutsideFolder = fsutil.inside, fsutil.OutsideFolder
    assert inside(root, "sub/a.patch", "patch") == (root / "sub" / "a.patch").resolve()
    assert inside(root, "in-link/x", "patch") == (root / "sub" / "x").resolve()
    assert inside(root, root / "sub", "patch") == (root / "sub").resolve()
    for bad in ("/etc/passwd", "../x", "sub/../../x", "out-link/x", "a\0b", "x" * 300):
        with pytest.raises(OutsideFolder) as info:
            inside(root, bad, "patch")
        assert info.value.cause.startswith("patch ")


# ---------------------------------------------------------------------------- item 1: refresh
def test_refresh_with_hostile_patch_names_deletes_nothing_outside(
    tiny_upstream, project, isolated_cache, capsys, tmp_path
):
    folder = export_series(tiny_upstream, project)
    other = export_series(tiny_upstream, project, name="other")
    assert _run(capsys, "apply", "--series", "demo")[0] == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim2 = folder / "v1" / ".." / ".." / ".." / ".." / "victim2.txt"
    victim2.resolve().write_text("precious 2\n")
    rel2 = os.path.relpath(victim2.resolve(), folder / "v1")
    other_patch = sorted((other / "v1").iterdir())[0]
    manifest = folder / "series.toml"
    first = sorted((folder / "v1").iterdir())[0].name
    before = tree_digest(tmp_path, skip=(project / "work", isolated_cache))
    for name in (str(victim), rel2, f"../../other/v1/{other_patch.name}"):
        manifest.write_text(manifest.read_text().split("patches = ")[0] + f'patches = ["{first}", "{name}"]\n')
        rc, out = _run(capsys, "refresh", "--series", "demo")
        assert rc == 2 and out.count("error:") == 1 and name in out, out
        assert "Traceback" not in out
    assert tree_digest(tmp_path, skip=(project / "work", isolated_cache)) == {
        **before,
        str(manifest.relative_to(tmp_path)): hashlib.sha256(manifest.read_bytes()).hexdigest(),
    }
    assert victim.read_text() == "precious\n" and victim2.resolve().read_text() == "precious 2\n"
    assert other_patch.is_file()


def test_check_and_apply_refuse_to_read_a_patch_outside(tiny_upstream, project, isolated_cache, capsys):
    folder = export_series(tiny_upstream, project)
    manifest = folder / "series.toml"
    manifest.write_text(manifest.read_text().split("patches = ")[0] + 'patches = ["/etc/passwd"]\n')
    for command in ("check", "apply"):
        rc, out = _run(capsys, command, "--series", "demo")
        assert rc == 2 and "'/etc/passwd' is not a file name" in out, out
    # a symbolic link inside the series folder that leads out is refused too
    (folder / "v1" / "link.patch").symlink_to("/etc/passwd")
    manifest.write_text(manifest.read_text().split("patches = ")[0] + 'patches = ["link.patch"]\n')
    rc, out = _run(capsys, "check", "--series", "demo")
    assert rc == 2 and "link.patch is a symbolic link (to /etc/passwd)" in out, out


# ------------------------------------------------------------------- item 9: paths inside a patch
_ESCAPING = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Patch Author <author@example.org>
Date: Tue, 14 Nov 2023 22:13:20 +0000
Subject: [PATCH] escape

---
 {name} | 1 +
 1 file changed, 1 insertion(+)
 create mode 100644 {name}

diff --git a/{name} b/{name}
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/{name}
@@ -0,0 +1 @@
+owned
--
2.39.2

"""


@pytest.mark.parametrize("name", ["../x", "/tmp/harness-escape-x"])
def test_patch_path_escaping_the_tree_is_named_by_check_and_apply(tiny_upstream, project, isolated_cache, capsys, name):
    folder = export_series(tiny_upstream, project)
    (folder / "v1" / "0003-escape.patch").write_text(_ESCAPING.format(name=name))
    manifest = folder / "series.toml"
    manifest.write_text(manifest.read_text().replace('.patch"]', '.patch", "0003-escape.patch"]'))
    rc, out = _run(capsys, "check", "--series", "demo")
    assert rc == 1 and "0003-escape.patch: FAILS" in out, out
    assert "does not apply" not in out
    assert f"0003-escape.patch names the path {name!r}, which leaves the source tree" in out, out
    rc, out = _run(capsys, "apply", "--series", "demo")
    assert rc == 2 and out.count("error:") == 1 and "0003-escape.patch" in out, out
    assert "am --continue" not in out and "none marked" not in out
    _, patched = worktrees(project / "work", "v1")
    assert "am session" not in git(patched, "status") and git(patched, "status", "--porcelain") == ""
    assert not Path("/tmp/harness-escape-x").exists() and not (project / "work" / "v1" / "x").exists()


def test_patch_through_a_symbolic_link_gets_gits_own_reason(tiny_upstream, project, isolated_cache, capsys):
    git(tiny_upstream, "checkout", "-q", "-b", "linked", "v1")
    os.symlink("docs", tiny_upstream / "link")
    git(tiny_upstream, "add", "link")
    git(tiny_upstream, "commit", "-q", "-m", "a link to docs")
    git(tiny_upstream, "tag", "v5")
    git(tiny_upstream, "checkout", "-q", "main")
    folder = project / "patches" / "demo"
    (folder / "v5").mkdir(parents=True)
    (folder / "v5" / "0001-escape.patch").write_text(_ESCAPING.format(name="link/new.txt"))
    (folder / "series.toml").write_text(
        f'name = "demo"\ntitle = "t"\nupstream = "{tiny_upstream}"\n\n'
        '[[base]]\nref = "v5"\npatches = ["0001-escape.patch"]\n'
    )
    rc, out = _run(capsys, "check", "--series", "demo")
    assert rc == 1 and "git refuses the path: affected file 'link/new.txt' is beyond a symbolic link" in out, out
    assert "does not apply" not in out
    rc, out = _run(capsys, "apply", "--series", "demo")
    assert rc == 2 and "error: 0001-escape.patch: affected file 'link/new.txt' is beyond a symbolic link" in out, out
    assert "am --continue" not in out
    _, patched = worktrees(project / "work", "v5")
    assert git(patched, "status", "--porcelain") == "" and not (patched / "docs" / "new.txt").exists()
