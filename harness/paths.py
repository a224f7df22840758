"""Where the harness keeps things on disk.

- cache (mirrors, imported archives, build-input venvs): ``$TORCH_PATCH_HARNESS_CACHE`` or
  ``~/.cache/torch-patch-harness``; shared between runs, safe to delete.
- work (worktrees, build trees): ``./work`` beside the user's checkout unless ``--workdir``.
- results: ``./results/<run>``; dist: ``./dist``.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TORCH_PATCH_HARNESS_CACHE"


def cache_dir() -> Path:
    """The harness cache directory (created on first use)."""
    root = os.environ.get(CACHE_ENV)
    path = Path(root) if root else Path.home() / ".cache" / "torch-patch-harness"
    path.mkdir(parents=True, exist_ok=True)
    return path


def slug(text: str) -> str:
    """A filesystem-safe name for a ref, requirement or config (``v2.6.0`` -> ``v2.6.0``, ``a/b`` -> ``a_b``)."""
    return "".join(c if c.isalnum() or c in "._-+" else "_" for c in text).strip("._") or "_"
