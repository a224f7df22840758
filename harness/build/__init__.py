"""Wheel builds of a base and of base + patch series: one configuration, two labels, verified.

One module per job, in import order (each imports only those above it):

- :mod:`harness.build.platforms` -- platforms as a registry (``Platform``, ``REGISTRY``), their build
  variables, the host's platform and compiler cache, ``--build-env`` overrides;
- :mod:`harness.build.convention` -- what the base's own files say: release, version variable,
  deployment target, CMake 4, build requirements and command, free disk;
- :mod:`harness.build.plan` -- ``BuildPlan``: everything one build needs, computed before anything
  runs (``--dry-run`` prints it), with the local version label;
- :mod:`harness.build.preflight` -- one-line refusals before anything is installed or compiled, and
  ``doctor``'s toolchain rows;
- :mod:`harness.build.wheel` -- the build venv, the base's command with its log, the build manifest;
- :mod:`harness.build.verify` -- the wheel in a fresh venv: import, label, MPS, series markers.

The steps are strung together (checkout -> apply -> preflight -> build -> verify) in
:mod:`harness.workflow`; the command ``build`` is :mod:`harness.commands.build`. Everything here uses
the standard library, ``packaging``, and git through :func:`harness.upstream.git_run`.
"""
