"""``rollout.vllm.weight_sync: auto`` is the route measured faster (``bench/weight_sync.py``; the figures are
in ``trainer/rollout_vllm.py``): ``inprocess``, whatever the model's size; an explicit route is kept.  The
start-up log line says which and why.  No vLLM needed."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from trainer.rollout_vllm import ROUTES, resolve_weight_sync  # noqa: E402


def test_auto_is_the_route_measured_faster_and_an_explicit_route_is_kept():
    route, why = resolve_weight_sync("auto")
    assert route == "inprocess" and why.startswith("auto: ") and "bench/weight_sync.py" in why
    for route in ROUTES:
        assert resolve_weight_sync(route) == (route, "set")
