"""torch-patch-harness: carry a C++ patch to PyTorch from idea to upstream pull request.

This package is imported inside the interpreters of the torch builds under test, whose environments hold
torch and nothing else: what runs there is :mod:`harness.bench` (the workers, the provenance probe, the
checks), which imports only the standard library, torch and itself (tests/test_architecture.py), and this
file, which imports nothing.
"""

__version__ = "0.1.0"
