"""Real upstream input for the tests: Debian's ``pytorch`` source package, fetched at run time.

``apt-get source --download-only pytorch=2.6.0+dfsg-7`` through a private apt configuration whose
``deb-src`` line uses the Debian mirror this machine's apt already uses (read from its sources;
no registry host is written into the repository). The download is cached under the harness cache
(``<cache>/debian-src/pytorch_2.6.0+dfsg-7/``), so reruns cost nothing. apt verifies the files
against the signed ``Sources`` index (keyring ``/usr/share/keyrings/debian-archive-keyring.gpg``).

The orig tarball is PyTorch 2.6.0 with third_party submodules stripped (DFSG): real source, not
buildable -- exactly what checkout must detect.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

PACKAGE = "pytorch"
VERSION = "2.6.0+dfsg-7"
SUITE = "trixie"
ORIG = "pytorch_2.6.0+dfsg.orig.tar.xz"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
APT_SOURCES = (Path("/etc/apt/sources.list.d"), Path("/etc/apt/sources.list"))


class Unavailable(Exception):
    """apt (or a Debian mirror in its sources) is not available here: the caller skips."""


def _source_files() -> list[Path]:
    directory, single = APT_SOURCES
    files = sorted(directory.glob("*.sources")) + sorted(directory.glob("*.list")) if directory.is_dir() else []
    return files + ([single] if single.is_file() else [])


def debian_mirror() -> str | None:
    """The first Debian archive URI in apt's sources (deb822 ``URIs:`` or one-line ``deb URI suite``).

    Security and updates archives are skipped (they do not carry the full ``Sources`` of a release).
    """
    for path in _source_files():
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"(?m)^([A-Za-z-]+):[ \t]*(.*)$", stanza))
                suites = fields.get("Suites", "")
                if "URIs" in fields and "security" not in suites and "security" not in fields["URIs"]:
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                parts = re.sub(r"\[[^\]]*\]", "", line).split()
                if len(parts) >= 3 and parts[0] in ("deb", "deb-src") and "security" not in parts[1] + parts[2]:
                    return parts[1]
    return None


def fetch_orig_archive(cache: Path) -> Path:
    """Download (once) Debian's pytorch 2.6.0+dfsg-7 source package into ``cache``; return the orig tarball.

    Raises:
        Unavailable: no ``apt-get`` on this machine, or no Debian mirror in its apt sources.
        subprocess.CalledProcessError: apt-get failed (network, mirror); the test fails, not skips.
    """
    dest = cache / "debian-src" / f"{PACKAGE}_{VERSION}"
    orig = dest / ORIG
    if orig.is_file() and (dest / f"{PACKAGE}_{VERSION}.dsc").is_file():
        return orig
    apt_get = shutil.which("apt-get")
    if apt_get is None:
        raise Unavailable("apt-get is not available on this machine (needed to fetch Debian's pytorch source)")
    mirror = debian_mirror()
    if mirror is None:
        raise Unavailable("apt has no Debian mirror in its sources (needed for Debian's pytorch source)")
    state = dest / ".apt"
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    sources = state / "sources.list"
    signed = f"[signed-by={KEYRING}] " if KEYRING.is_file() else ""
    sources.write_text(f"deb-src {signed}{mirror} {SUITE} main\n")
    options = [
        "-o",
        f"Dir::Etc::SourceList={sources}",
        "-o",
        "Dir::Etc::SourceParts=/dev/null",
        "-o",
        f"Dir::State::Lists={state / 'lists'}",
        "-o",
        f"Dir::Cache={state / 'cache'}",
        "-o",
        "APT::Sandbox::User=root",
        "-q",
    ]
    subprocess.run([apt_get, *options, "update"], check=True, capture_output=True)
    subprocess.run(
        [apt_get, *options, "source", "--download-only", f"{PACKAGE}={VERSION}"],
        check=True,
        capture_output=True,
        cwd=dest,
    )
    if not orig.is_file():
        raise FileNotFoundError(f"apt-get source did not produce {orig}")
    return orig
