"""Importing qworker for its Client loads no reward library, pool supervisor or framework (checked in a fresh interpreter)."""

from __future__ import annotations


def test_the_client_is_light_to_import():
    import subprocess
    import sys

    code = "import sys, qworker; c = qworker.Client; print(' '.join(m for m in ('math_verify', 'sympy', 'psutil', 'ray', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == ""  # no reward library, no pool supervisor, no framework
