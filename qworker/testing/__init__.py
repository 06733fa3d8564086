"""Test doubles users can reuse: a stub transport for the scheduler and an OpenAI-compatible mock judge.

``StubTransport`` stands in for the dispatcher's sockets (drive a ``Scheduler`` by hand, read what it
sent); ``MockJudge`` is a judge server on 127.0.0.1 that behaves like real ones (capacity, rate limits,
Retry-After, faults, outages), also run as ``qworker mock-judge``.
"""

from .mockjudge import DEFAULT_PORT, MockJudge, expected_score
from .stub import StubTransport

__all__ = ["DEFAULT_PORT", "MockJudge", "StubTransport", "expected_score"]
