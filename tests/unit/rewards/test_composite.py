from __future__ import annotations

import threading

import pytest

from qworker.engine.composite import combine, submit
from qworker.engine.result import Result, ResultFuture
from qworker.registry.catalog import Catalog

COMPOSITE = Catalog({"c": {"components": [
    {"reward": "math", "weight": 1.0},
    {"reward": "judge", "weight": 0.5, "on_error": "fallback", "fallback": 0.2},
    {"reward": "length_penalty"},
]}}, remote=True).resolve("c")  # "judge": a reward only a remote pool has


def r(score, error=None, cached=False, key="00" * 16, worker="w1", latency=0.1, compute=0.01):
    return Result(score=score, extra={"x": 1}, error=error, cached=cached, attempts=1, worker=worker, latency_s=latency, compute_s=compute, key=key)


def test_weighted_sum_and_extra():
    out = combine(COMPOSITE, [r(1.0), r(0.8), r(-0.25)], fallback_score=0.0)
    assert out.ok and out.score == pytest.approx(1.0 + 0.4 - 0.25)
    assert {k: v for k, v in out.extra.items() if k != "components"} == {"math": 1.0, "judge": 0.8, "length_penalty": -0.25}
    assert out.extra["components"]["judge"] == {"score": 0.8, "weight": 0.5, "error": None, "cached": False, "extra": {"x": 1}}


def test_fallback_policy_uses_the_fallback_value():
    out = combine(COMPOSITE, [r(1.0), r(0.0, error="timeout: judge slow"), r(0.0)], fallback_score=-9)
    assert out.ok and out.score == pytest.approx(1.0 + 0.5 * 0.2)
    assert out.extra["judge"] == 0.2 and out.extra["components"]["judge"]["error"] == "timeout: judge slow"


def test_fail_policy_fails_the_whole_reward_with_the_components_kind():
    out = combine(COMPOSITE, [r(0.0, error="reward_error: ValueError: bad"), r(1.0), r(0.0)], fallback_score=-9)
    assert out.score == -9 and out.error == "reward_error: component 'math': ValueError: bad"
    assert out.error_kind == "reward_error" and out.extra["math"] is None


def test_cached_only_when_every_component_was():
    assert combine(COMPOSITE, [r(1, cached=True)] * 3, 0).cached
    assert not combine(COMPOSITE, [r(1, cached=True), r(1), r(1, cached=True)], 0).cached


def test_key_depends_on_the_component_keys():
    a = combine(COMPOSITE, [r(1, key="11" * 16), r(1), r(1)], 0).key
    b = combine(COMPOSITE, [r(1, key="22" * 16), r(1), r(1)], 0).key
    assert a != b and len(a) == 32


def test_submit_resolves_when_the_last_component_does_from_any_thread():
    made: dict[str, list[ResultFuture]] = {}

    def submit_plain(name, payloads, params):
        made[name] = [ResultFuture() for _ in payloads]
        return made[name]

    futs = submit(submit_plain, COMPOSITE, [{"i": 0}, {"i": 1}], fallback_score=0.0)
    made["math"][0].set_result(r(1.0))
    made["judge"][0].set_result(r(1.0))
    assert not futs[0].done()
    threads = [threading.Thread(target=made[name][i].set_result, args=(r(0.0),))
               for name, i in [("length_penalty", 0), ("math", 1), ("judge", 1), ("length_penalty", 1)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert futs[0].result(5).score == pytest.approx(1.5) and futs[1].result(5).score == 0.0
