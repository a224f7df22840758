"""Correctness checks run inside a build's interpreter (standard library + torch only)."""
