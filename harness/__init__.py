"""torch-patch-harness: carry a C++ patch to PyTorch from idea to upstream pull request.

This package is imported inside the interpreters of the torch builds under test
(see :mod:`harness.bench.worker`), so this file and the modules the worker uses
(``harness.bench``, ``harness.checks``, ``harness.provenance``, ``harness.configs``)
import only the standard library and torch.
"""

__version__ = "0.1.0"
