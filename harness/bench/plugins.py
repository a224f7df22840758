"""A series' own workload module (``patches/<series>/workload.py``): loaded, checked and registered.

A workload module is a Python file (standard library + torch + ``harness.bench``; import torch inside
its functions, as :mod:`harness.bench.ops` does) that defines:

- ``OPS``: a sequence of :class:`harness.bench.ops.Op` records, the ops it adds (may be empty: a module that
  only picks cells of the built-in ops). Each names its sizes (``dims``), FLOP per call (``flop``, with its
  public source), input and output shapes, the reduction length that sets the accuracy bound
  (:mod:`harness.bench.accuracy`), the call, and a float64 reference computed without the op itself.
- ``CELLS``: ``(op, shape)`` pairs measured in every dtype of a run when ``--cells`` is not given.
- optional ``QUICK_CELLS`` (the ``--quick`` pairs; default ``CELLS``) and ``BUILTIN_CELLS`` (bool, default
  False: also measure the built-in GEMM/SDPA cells, before the module's).

:func:`load` refuses, in one line (:class:`WorkloadError`), a file that does not import (a syntax error, an
exception), a missing or mistyped attribute, an op named like a built-in one, and a size function that does not
give a positive integer at the op's probe and example shapes and at every declared cell: FLOP per call must be
a positive integer count (``2.0 * m * n * k`` is; ``0``, ``-1``, ``1.5``, NaN are not). Inside a worker,
:func:`flop_problem` cross-checks the declared FLOP against ``torch.utils.flop_counter.FlopCounterMode``'s
count of the op's own call (on meta tensors) wherever torch counts it (matmul-class ops: ``mm``, ``addmm``, ``bmm``,
convolutions, SDPA; torch 2.13.0 ``torch/utils/flop_counter.py`` ``flop_registry``); an op it does not count
(``cumsum``, ``layer_norm``) is checked at load only.

Runs in the harness and inside a build's interpreter (the worker loads the file the spec names: the series
folder's own file, which :mod:`harness.manifest` checked is inside the folder).
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
import types
from dataclasses import replace
from pathlib import Path

from harness.bench import ops, words
from harness.bench.ops import Op
from harness.bench.workloads import Cell, Workload

#: a series op's name: a cell key's first part
NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class WorkloadError(ValueError):
    """A workload module that cannot be used; the message is one line naming the file and the cause."""


def _import(path: Path) -> types.ModuleType:
    """The module executed from ``path`` (under a name of its own: two series' modules never collide), compiled
    from its text: no ``__pycache__`` is written into the series folder."""
    name = "harness_workload_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses in the module look themselves up there
    try:
        exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise WorkloadError(f"{path} line {exc.lineno}: SyntaxError: {exc.msg}") from None
    except Exception as exc:  # the module's own failure, in its words
        sys.modules.pop(name, None)
        raise WorkloadError(f"{path}: importing it raised {words(exc, 200)}") from None
    return module


def _positive_int(value) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
        and float(value).is_integer()
    )


def _sizes_problem(op: Op, shape: tuple[int, ...]) -> str | None:
    """Why ``op``'s size functions are unusable at ``shape`` (FLOP, reduction, input and output shapes), or None."""
    try:
        flop, reduction = op.flop(*shape), op.reduction(*shape)
        shapes = [*op.inputs(*shape), op.output(*shape)]
    except Exception as exc:
        return f"its size functions raised {words(exc, 200)} at {shape}"
    if not _positive_int(flop):
        return f"FLOP per call at {shape} is {flop!r}, not a positive integer count"
    if not _positive_int(reduction):
        return f"reduction at {shape} is {reduction!r}, not a positive integer length"
    if not all(isinstance(s, tuple) and all(isinstance(n, int) and n > 0 for n in s) for s in shapes):
        return f"input/output shapes at {shape} are {shapes!r}, not tuples of positive integers"
    return None


def _pairs(path: Path, attribute: str, value) -> tuple[tuple[str, tuple[int, ...]], ...]:
    try:
        pairs = tuple((str(op), tuple(int(n) for n in shape)) for op, shape in value)
    except (TypeError, ValueError):
        raise WorkloadError(
            f"{path}: {attribute} must be a sequence of (op, shape) pairs, e.g. ('mm', (512, 512, 512))"
        ) from None
    return pairs


def _checked_ops(path: Path, module) -> tuple[Op, ...]:
    declared = module.OPS
    if not isinstance(declared, (list, tuple)) or not all(isinstance(o, Op) for o in declared):
        raise WorkloadError(f"{path}: OPS must be a list of harness.bench.ops.Op records")
    names = [o.name for o in declared]
    for op in declared:
        if op.name in ops.BUILTIN:
            raise WorkloadError(f"{path}: op {op.name!r} is a built-in op; give the series' op its own name")
        if not NAME.match(str(op.name)) or names.count(op.name) > 1:
            raise WorkloadError(f"{path}: op name {op.name!r} is not unique lowercase letters, digits and _")
        for shape in (op.probe_shape, op.example_shape):
            problem = _sizes_problem(op, tuple(shape))
            if problem:
                raise WorkloadError(f"{path}: op {op.name!r}: {problem}")
    return tuple(replace(o, origin=str(path)) for o in declared)


def load(path: str | Path) -> Workload:
    """The :class:`~harness.bench.workloads.Workload` of the module file ``path`` (see the module docstring
    for what it defines and what is refused). Its ops are not registered: :func:`register` does that.

    Raises:
        WorkloadError: one line naming the file and the cause.
    """
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise WorkloadError(f"{path}: not a Python file (.py)")
    module = _import(path)
    missing = [a for a in ("OPS", "CELLS") if not hasattr(module, a)]
    if missing:
        raise WorkloadError(f"{path}: no {' and no '.join(missing)} (a workload module defines OPS and CELLS)")
    own = _checked_ops(path, module)
    full = _pairs(path, "CELLS", module.CELLS)
    quick = _pairs(path, "QUICK_CELLS", getattr(module, "QUICK_CELLS", module.CELLS))
    builtin = getattr(module, "BUILTIN_CELLS", False)
    if not isinstance(builtin, bool):
        raise WorkloadError(f"{path}: BUILTIN_CELLS must be True or False, not {builtin!r}")
    known = {o.name: o for o in own} | {n: ops.REGISTRY[n] for n in ops.BUILTIN}
    for name, shape in full + quick:
        if name not in known:
            raise WorkloadError(f"{path}: cell ({name!r}, {shape}) names no op of OPS nor a built-in one")
        if len(shape) != len(known[name].dims):
            raise WorkloadError(f"{path}: cell ({name!r}, {shape}): {name} takes {len(known[name].dims)} sizes")
        problem = _sizes_problem(known[name], shape) if name not in ops.BUILTIN else None
        if problem:
            raise WorkloadError(f"{path}: op {name!r}: {problem}")
    return Workload(path.name, own, full, quick, builtin, str(path))


def register(workload: Workload) -> None:
    """Add ``workload``'s ops to :data:`harness.bench.ops.REGISTRY` (cells of them parse from then on)."""
    for op in workload.ops:
        ops.register(op)


def describe(workload: Workload, cells) -> dict:
    """What results.json records of ``workload`` (``evidence.workload``): file, sha256, each op's family,
    dims, dim words and FLOP source, and the FLOP per call of each of ``cells`` of its ops, so that a report
    renders the run without the module (:func:`harness.bench.workloads.register_recorded`)."""
    names = {o.name for o in workload.ops}
    return {
        "file": workload.name,
        "sha256": hashlib.sha256(Path(workload.path).read_bytes()).hexdigest(),
        "ops": {
            o.name: {
                "family": o.family,
                "dims": list(o.dims),
                "dim_words": list(o.dim_words),
                "flop_source": o.flop_source,
            }
            for o in workload.ops
        },
        "flop": {c.key: c.flop for c in cells if c.op in names},
    }


def flop_problem(cell: Cell) -> str | None:
    """For a series op, why its declared FLOP is wrong at ``cell``'s shape: the op's own call on meta tensors of
    the cell's input shapes (no data, no device work), run under ``torch.utils.flop_counter.FlopCounterMode``,
    counts a different non-zero number. None when it agrees, when torch counts 0 (an op it has no formula for,
    e.g. ``cumsum``: checked at load only), when the call cannot run on meta tensors, and for the built-in ops
    (tested against the counter in tests/test_ops.py; causal SDPA halves its count on purpose)."""
    if not cell.spec.origin:
        return None
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    dtype = getattr(torch, cell.dtype)
    try:
        metas = [torch.empty(s, dtype=dtype, device="meta") for s in cell.input_shapes()]
        with FlopCounterMode(display=False) as counter:
            cell.spec.call(*metas)()
    except Exception:  # no meta kernel for the op: nothing to count with
        return None
    counted = counter.get_total_flops()
    if counted and counted != cell.flop:
        return (
            f"FLOP formula gives {cell.flop:.6g} per call but torch.utils.flop_counter counts {counted:.6g} "
            f"for the op's call (fix flop in {Path(cell.spec.origin).name})"
        )
    return None
