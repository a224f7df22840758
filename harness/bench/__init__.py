"""Microbenchmarks that run inside a build's interpreter: workloads, timers, the worker.

Standard library + torch only (the build's venv holds nothing else).
"""
