"""The built-in rewards on a real pool: pathological inputs, composites, the CLI."""

from __future__ import annotations

import json
import subprocess
import time

from qworker import Producer
from tests.conftest import REPO, TEST_REWARDS, console_script, count_lines
from tests.contract.rewards.test_code_tests import sandbox_processes

EXAMPLE = REPO / "examples" / "math_rollouts.jsonl"
CONFIG = REPO / "configs" / "rewards.yaml"


def test_pathological_inputs_resolve_within_their_limits_and_the_pool_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the workers' sandboxes go here, so only ours are counted
    # The pool's default hard limit is far past every reward's own limit: a worker's first math task also
    # imports sympy inside its limit (seconds on a loaded machine).  Each outcome below names the limit that
    # ended it, so a reward whose own limit did not fire still fails the test (as the hard limit's "timeout:",
    # or by hanging past the 60 s wait).
    with Producer(local_workers=2, task_timeout_s=30) as p:
        futures = {
            # math-verify gives up on its own (SIGALRM on the worker's main thread): an explicit error
            "tower": p.submit("math", {"response": r"\boxed{9^{9^{9^{9}}}}", "ground_truth": "3"}, params={"timeout_s": 1}),
            # with math-verify's own limit set past the hard limit, the pool kills the worker instead
            "tower_hard": p.submit("math", {"response": r"\boxed{9^{9^{9^{9}}}}", "ground_truth": "3"}, params={"timeout_s": 30},
                                   timeout_s=3),
            "one_mb": p.submit("math", {"response": "x" * (1 << 20) + r" so \boxed{7}", "ground_truth": "7"}),
            "nested": p.submit("math", {"response": r"\boxed{" + "{" * 20_000 + "1" + "}" * 20_000 + "}", "ground_truth": "1"},
                               params={"timeout_s": 1}),
            "regex": p.submit("format", {"response": "a" * 64 + "b"}, params={"pattern": "(a+)+$"}, timeout_s=1.5),
            "fork": p.submit("code_tests", {"response": "import os, time\nfor _ in range(8):\n    os.fork()\ntime.sleep(60)\n",
                                            "ground_truth": ["assert True"]}, params={"timeout_s": 1}),
            "alloc": p.submit("code_tests", {"response": "x = bytearray(10 * 1024**3)", "ground_truth": ["assert True"]}),
            "loop": p.submit("code_tests", {"response": "while True: pass", "ground_truth": ["assert True"]}, params={"timeout_s": 1}),
        }
        r = {name: f.result(60) for name, f in futures.items()}
        assert r["tower"].error.startswith("reward_error: TimeoutError: math-verify took over 1 s"), r["tower"]
        assert r["tower_hard"].error.startswith("timeout: reward ran past its 3 s hard limit"), r["tower_hard"]
        assert r["one_mb"].ok and r["one_mb"].score == 1.0
        assert r["nested"].error_kind in ("reward_error", None)  # an explicit error, or a plain 0
        assert r["nested"].score == 0.0
        assert r["regex"].error.startswith("timeout: reward ran past its 1.5 s hard limit"), r["regex"]
        for name in ("fork", "alloc", "loop"):
            assert r[name].ok and r[name].score == 0.0 and r[name].extra["first_failure"], (name, r[name])
        assert "MemoryError" in r["alloc"].extra["first_failure"]
        assert r["loop"].extra["first_failure"] == "wall-clock timeout after 1.0 s"  # the sandbox's own limit ended it
        assert sandbox_processes(str(tmp_path)) == []  # the fork test's 256 processes are gone
        after = p.map("math", [{"response": rf"\boxed{{{i}}}", "ground_truth": i} for i in range(20)], timeout=60)
        assert all(x.ok and x.score == 1.0 for x in after)
        deadline = time.monotonic() + 60  # a worker killed twice in a row is respawned after a back-off
        while True:
            workers = p.status()["pools"][0]["workers"]
            if sum(w["alive"] for w in workers) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sum(w["alive"] for w in workers) == 2
        assert sum(w["restarts"] for w in workers) >= 2  # tower_hard and regex were killed and respawned


def composite_config(components: list[dict]) -> dict:
    return {"rewards": {"mix": {"components": components}}}


def test_a_changed_weight_or_a_new_component_never_re_evaluates_cached_components(tmp_path):
    log = str(tmp_path / "evals")
    cache = str(tmp_path / "cache.sqlite")
    rows = [{"log": log, "i": i, "response": rf"\boxed{{{i}}}", "ground_truth": i} for i in range(30)]
    counted = {"reward": "count_eval", "weight": 1.0}
    math = {"reward": "math", "weight": 2.0}

    def run(components):
        with Producer(local_workers=2, reward_modules=[TEST_REWARDS], cache_path=cache, config=composite_config(components)) as p:
            return p.map("mix", rows, timeout=120)

    first = run([counted, math])
    assert [r.score for r in first] == [i + 2.0 for i in range(30)]
    assert count_lines(log) == 30 and not any(r.cached for r in first)
    assert first[3].extra["count_eval"] == 3.0 and first[3].extra["components"]["math"]["extra"]["pred"] == "3"

    reweighted = run([{**counted, "weight": 0.5}, math])
    assert [r.score for r in reweighted] == [0.5 * i + 2.0 for i in range(30)]
    assert count_lines(log) == 30 and all(r.cached for r in reweighted)  # nothing ran again

    grown = run([counted, math, {"reward": "format", "params": {"pattern": r"\\boxed\{\d+\}"}, "weight": 10.0}])
    assert [r.score for r in grown] == [i + 12.0 for i in range(30)]
    assert count_lines(log) == 30  # only the new component was evaluated
    assert not any(r.cached for r in grown) and all(r.extra["components"]["count_eval"]["cached"] for r in grown)


def test_composite_on_the_bundled_example_from_the_cli(tmp_path):
    out = tmp_path / "scores.jsonl"
    res = subprocess.run(
        [console_script("qworker"), "score", str(EXAMPLE), "--reward", "math_shaped", "--config", str(CONFIG),
         "--workers", "2", "--out", str(out), "--strict", "--quiet"],
        capture_output=True, text=True, timeout=180,
    )
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(EXAMPLE.read_text().splitlines())
    for row in rows:
        assert row["error"] is None
        assert abs(row["score"] - row["input"]["extra_info"]["expected"]) < 1e-6, row
        assert set(row["extra"]) == {"math", "format", "overlong", "components"}


def test_composite_params_on_the_command_line_are_refused(tmp_path):
    res = subprocess.run(
        [console_script("qworker"), "score", str(EXAMPLE), "--reward", "math_shaped", "--config", str(CONFIG),
         "--workers", "1", "--out", str(tmp_path / "o.jsonl"), "--params", '{"strict": true}'],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 2 and "is a composite" in res.stderr


def test_an_encoded_payload_that_does_not_decode_fails_alone_in_a_composite():
    """submit_batch(encoded=True) to a composite (what a reward service does for its clients): bytes that are not
    an encode_payload encoding fail as bad_payload, and the other payloads of the batch are scored, in order."""
    from qworker.cache.hashing import encode_payload

    config = composite_config([{"reward": "gsm8k", "weight": 1.0}, {"reward": "format", "params": {"pattern": "####"}, "weight": 1.0}])
    good = [encode_payload({"response": f"#### {i}", "ground_truth": str(i)}) for i in range(3)]
    with Producer(local_workers=1, config=config) as p:
        futures = p.submit_batch("mix", [good[0], b"\xc1", good[1], {"not": "bytes"}, good[2], b"\x91" * 1100 + b"\x01"], encoded=True)
        results = p.gather(futures, timeout=120)
    assert all(r.ok and r.extra["gsm8k"] == 1.0 for r in (results[0], results[2], results[4])), results
    for bad in (results[1], results[3], results[5]):
        assert bad.error_kind == "bad_payload" and "encoded=True" in bad.error, bad
