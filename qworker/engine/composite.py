"""Composite rewards: one hashed task per component, combined by the producer.

Each component is submitted as an ordinary task, so its result is cached and
shared on its own: changing a weight, or adding a component, never re-pays a
judge call already in the cache.  The composite's future resolves when its
last component does (a callback, not a poll), with::

    score = sum(weight * component score)

``extra`` holds each component's score under its name (None when it failed),
and under ``"components"`` the details: score, weight, error, cached, extra.
A failed component with ``on_error: fallback`` counts as its ``fallback``
value; with ``on_error: fail`` the composite fails with that component's error
kind, e.g. ``timeout: component 'judge': ...``, and ``score = fallback_score``.
"""

from __future__ import annotations

import threading
from hashlib import blake2b
from typing import Callable, Sequence

from .._errors import ErrorKind
from ..registry.catalog import Composite
from .result import Result, ResultFuture

__all__ = ["combine", "submit"]

SubmitPlain = Callable[[str, list, dict], list[ResultFuture]]


def combine(composite: Composite, results: Sequence[Result], fallback_score: float) -> Result:
    """The composite's ``Result`` from its components' results, in component order."""
    score = 0.0
    error = None
    details: dict = {}
    flat: dict = {}
    for c, r in zip(composite.components, results, strict=True):
        value = r.score if r.ok else (c.fallback if c.on_error == "fallback" else None)
        if value is None and error is None:
            kind, _, detail = (r.error or "").partition(":")
            error = f"{kind}: component {c.name!r}:{detail}"
        if value is not None:
            score += c.weight * value
        flat[c.name] = value
        details[c.name] = {"score": value, "weight": c.weight, "error": r.error, "cached": r.cached, "extra": r.extra}
    key = blake2b(b"".join(bytes.fromhex(r.key) for r in results if r.key), digest_size=16).hexdigest()
    return Result(
        score=fallback_score if error else score,
        extra={**flat, "components": details},
        error=error,
        cached=all(r.cached for r in results),
        attempts=max(r.attempts for r in results),
        worker=",".join(sorted({r.worker for r in results if r.worker})),
        latency_s=max(r.latency_s for r in results),
        compute_s=sum(r.compute_s for r in results),
        key=key,
    )


class _Join:
    """Resolves ``future`` once every part is done (on whichever thread finishes last)."""

    __slots__ = ("composite", "parts", "future", "left", "lock", "fallback_score")

    def __init__(self, composite: Composite, parts: list[ResultFuture], fallback_score: float) -> None:
        self.composite = composite
        self.parts = parts
        self.future = ResultFuture()
        self.left = len(parts)
        self.lock = threading.Lock()
        self.fallback_score = fallback_score
        for part in parts:
            part.add_done_callback(self._one_done)

    def _one_done(self, _part: object) -> None:
        with self.lock:
            self.left -= 1
            last = self.left == 0
        if last:
            results = [p.result() for p in self.parts]
            self.parts = []
            try:
                out = combine(self.composite, results, self.fallback_score)
            except Exception as exc:  # never leave the caller waiting
                out = Result(score=self.fallback_score, error=ErrorKind.BAD_RESULT.error(f"combining {self.composite.name!r} failed: {exc}"))
            self.future.set_result(out)


def submit(submit_plain: SubmitPlain, composite: Composite, payloads: list, fallback_score: float) -> list[ResultFuture]:
    """Submit every component for every payload; one composite future per payload, in order."""
    per_component = [submit_plain(c.task.reward, payloads, c.task.params) for c in composite.components]
    return [_Join(composite, [futs[i] for futs in per_component], fallback_score).future for i in range(len(payloads))]
