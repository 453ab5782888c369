"""Puts the repository root on ``sys.path``, so a script run as ``python benchmarks/<name>.py``
imports its helpers as ``benchmarks.<helper>`` (graft_jax itself is installed)."""

import pathlib
import sys

ROOT = str(pathlib.Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
