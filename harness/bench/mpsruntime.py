"""The macOS the MPS backend of each torch release needs at run time: one table, read inside a build's
interpreter (the provenance probe says why MPS is unavailable; the MPS device profile) and on the host
(:mod:`harness.macos`: ``build`` and ``doctor`` refuse a Mac older than the base needs).

macOS the MPS backend needs at run time (``MPSDevice::MPSDevice()`` in
``aten/src/ATen/mps/MPSDevice.mm`` leaves the device nil, so ``torch.backends.mps.is_available()``
is False, when ``MPSGraph`` lacks the probed selector):

=========  ========  ================================================================================
torch      needs     source
=========  ========  ================================================================================
2.6        13.0      v2.6.0 ``MPSDevice.mm`` (Debian 2.6.0+dfsg tree): ``cumulativeSumWithTensor:axis:
                     name:`` ("method introduced in 13.0"); ``EmptyTensor.cpp`` "supported on MacOS
                     13.0+".
2.7-2.8    13.0 (*)  not read: assumed from 2.6 (pytorch/pytorch issue 159275, "Remove MacOS-13
                     support", was opened on 2025-07-28).
2.9        14.0 (*)  not read: 2.9's own MPSDevice.mm is not stored here; the later 14.0 is assumed.
2.10-main  14.0      ``MPSDevice.mm`` at 017943b7: ``HermiteanToRealFFTWithTensor:axes:descriptor:name:``
                     ("method introduced in 14.0"); torch 2.10.0 says "The MPS backend is supported on
                     macOS 14.0+" (pytorch/pytorch issue 177819); 2.10.0.dev20251008 refuses macOS
                     13.7.4 (pytorch/pytorch issue 164943).
=========  ========  ================================================================================

(*) not established: :attr:`RuntimeNeed.established` is False and messages say "assumed".
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def release_of(version: str) -> tuple[int, int]:
    """``"2.6.0a0+git…"`` -> ``(2, 6)``; ``"main"`` or anything unreadable -> the newest row's."""
    match = re.match(r"v?(\d+)\.(\d+)", version or "")
    return (int(match[1]), int(match[2])) if match else (99, 0)


@dataclass(frozen=True)
class RuntimeNeed:
    """The macOS the MPS backend of torch releases ``first``..``last`` (major.minor, inclusive) needs.

    Attributes:
        macos: (major, minor), e.g. (14, 0).
        source: the upstream file and commit (or issue) it was read in, one line.
        established: False where the release's own source was not read and the value is assumed.
    """

    first: tuple[int, int]
    last: tuple[int, int]
    macos: tuple[int, int]
    source: str
    established: bool = True


#: macOS the MPS backend needs at run time, per torch release (see the module docstring)
RUNTIME: tuple[RuntimeNeed, ...] = (
    RuntimeNeed(
        (2, 6),
        (2, 6),
        (13, 0),
        "aten/src/ATen/mps/MPSDevice.mm of v2.6.0 (Debian 2.6.0+dfsg): MPSGraph cumulativeSumWithTensor:axis:name:, "
        "a macOS 13.0 API",
    ),
    RuntimeNeed(
        (2, 7),
        (2, 8),
        (13, 0),
        'assumed from 2.6 (pytorch/pytorch issue 159275, "Remove MacOS-13 support", opened 2025-07-28)',
        established=False,
    ),
    RuntimeNeed(
        (2, 9),
        (2, 9),
        (14, 0),
        "assumed from 2.10 (2.9's MPSDevice.mm was not read)",
        established=False,
    ),
    RuntimeNeed(
        (2, 10),
        (99, 99),
        (14, 0),
        "aten/src/ATen/mps/MPSDevice.mm at pytorch/pytorch 017943b7: MPSGraph "
        "HermiteanToRealFFTWithTensor:axes:descriptor:name:, a macOS 14.0 API",
    ),
)


def mps_runtime_need(torch_version: str) -> RuntimeNeed:
    """The :class:`RuntimeNeed` row of ``torch_version`` (``"2.6.0"``, ``"2.13.0a0+git…"``, ``"main"``);
    a release before 2.6 gets the 2.6 row (the oldest this harness builds)."""
    release = release_of(torch_version)
    for row in RUNTIME:
        if row.first <= release <= row.last:
            return row
    return RUNTIME[0]


#: the oldest macOS any supported base's MPS runs on (2.6-2.8: 13.0)
MPS_OLDEST_MACOS = min(row.macos for row in RUNTIME)
