"""Producer behaviour against a real local pool (real processes, real ipc sockets)."""

import asyncio
import concurrent.futures
import time

import pytest

from qworker import ConfigError, GatherTimeout, Producer, ProducerClosed, Result
from tests.conftest import TEST_REWARDS, count_lines


@pytest.fixture(scope="module")
def producer(tmp_path_factory):
    import os

    os.environ["QWORKER_RUNTIME_DIR"] = str(tmp_path_factory.mktemp("rt-module"))
    with Producer(local_workers=2, reward_modules=[TEST_REWARDS], task_timeout_s=20) as p:
        yield p


@pytest.mark.parametrize("payloads", ["abc", b"abc", {"response": "#### 3"}, 7])
def test_one_payload_given_as_payloads_is_refused_before_any_task_is_made(producer, payloads):
    submitted = producer.status()["producer"]["submitted"]
    with pytest.raises(TypeError, match="payloads must be an iterable of payloads"):
        producer.submit_batch("gsm8k", payloads)
    assert producer.status()["producer"]["submitted"] == submitted


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), float("inf"), "3", True])
def test_a_timeout_that_is_not_seconds_above_zero_is_refused_at_submission(producer, timeout_s):
    with pytest.raises(ConfigError, match="timeout_s must be a finite number of seconds above 0"):
        producer.submit("noop", {"t": 1}, timeout_s=timeout_s)


def test_a_timeout_of_any_real_number_type_is_taken_as_seconds(producer):
    np = pytest.importorskip("numpy")
    results = [producer.submit("noop", {"t": str(t)}, timeout_s=t).result(30) for t in (np.int64(30), np.float32(5), 7)]
    assert all(r.ok for r in results), results


def test_gather_of_one_future_says_what_to_write(producer):
    with pytest.raises(TypeError, match=r"gather\(\[future\]\)"):
        producer.gather(producer.submit("noop", {"g": 1}), timeout=10)


def test_results_come_back_in_input_order(producer):
    results = producer.map("spin", [{"ms": 0, "i": i} for i in range(500)])
    assert all(isinstance(r, Result) and r.ok and r.score == 1.0 for r in results)
    assert len({r.key for r in results}) == 500
    assert all(r.attempts == 1 and r.worker and r.latency_s > 0 for r in results)


def test_extra_travels_back(producer):
    [r] = producer.map("gsm8k", [{"response": "so #### 1,024", "ground_truth": "1024"}])
    assert r.ok and r.score == 1.0 and r.extra == {"pred": "1024"}


def test_duplicates_in_a_batch_cost_one_evaluation(producer, tmp_path):
    log = str(tmp_path / "evals")
    payloads = [{"log": log, "i": 7}] * 50 + [{"log": log, "i": i} for i in range(100, 110)]
    futures = producer.submit_batch("count_eval", payloads)
    assert futures[0] is futures[49]  # in flight: the same future is shared
    results = producer.gather(futures, timeout=30)
    assert [r.score for r in results] == [7.0] * 50 + [float(i) for i in range(100, 110)]
    assert count_lines(log) == 11  # one evaluation for the 50 copies, one per distinct payload
    # a later identical submission is a cache hit, with no worker call
    [again] = producer.map("count_eval", [{"log": log, "i": 7}])
    assert again.cached and again.score == 7.0 and count_lines(log) == 11


def test_params_are_part_of_the_identity(producer):
    a = producer.map("gsm8k", [{"response": "#### 3", "ground_truth": "4"}], params={"format_score": 0.1})
    b = producer.map("gsm8k", [{"response": "#### 3", "ground_truth": "4"}], params={"format_score": 0.2})
    assert (a[0].score, b[0].score) == (0.1, 0.2) and not b[0].cached


def test_failures_are_explicit_never_a_silent_zero(producer):
    boom, unknown, bad, ok = producer.map("boom", [{"i": 1}]) + producer.map("no_such_module_q:fn", [{}]) + \
        producer.map("not_a_score", [{}]) + producer.map("noop", [{}])
    assert boom.error_kind == "reward_error" and "RuntimeError: boom on 1" in boom.error
    assert unknown.error_kind == "unknown_reward" and "no_such_module_q" in unknown.error  # a path only a worker could import
    assert bad.error_kind == "bad_result" and "str" in bad.error
    assert ok.ok
    assert boom.score == unknown.score == bad.score == 0.0  # the fallback, flagged by error


def test_failed_results_are_not_cached(producer):
    first = producer.map("boom", [{"i": 99}])[0]
    second = producer.map("boom", [{"i": 99}])[0]
    assert first.error and second.error and not second.cached


def test_bad_payloads_fail_alone(producer):
    results = producer.map("noop", [{"ok": 1}, {"bad": object()}, {"ok": 2}])
    assert results[0].ok and results[2].ok
    assert results[1].error_kind == "bad_payload" and "cannot encode" in results[1].error


def test_an_encoded_submission_fails_a_payload_that_is_not_bytes_alone(producer):
    from qworker.cache.hashing import encode_payload

    futs = producer.submit_batch("noop", [encode_payload({"ok": 1}), {"ok": 2}, encode_payload({"ok": 3})], encoded=True)
    first, wrong, third = producer.gather(futs, timeout=60)
    assert first.ok and third.ok
    assert wrong.error_kind == "bad_payload" and "encoded=True" in wrong.error


def test_oversized_payload_is_refused():
    with Producer(local_workers=1, max_payload_bytes=1000) as p:
        big, small = p.map("noop", [{"x": "a" * 2000}, {"x": "a"}])
    assert big.error_kind == "bad_payload" and "1000-byte limit" in big.error
    assert small.ok


def test_module_function_names_resolve_in_workers(producer):
    [r] = producer.map("qworker.rewards.gsm8k:gsm8k", [{"response": "#### 5", "ground_truth": "5"}])
    assert r.ok and r.score == 1.0
    [r] = producer.map("qworker.rewards.gsm8k:nothing_here", [{}])
    assert r.error_kind == "unknown_reward" and "no function 'nothing_here'" in r.error


def test_futures_work_with_concurrent_futures_and_asyncio(producer):
    futures = producer.submit_batch("spin", [{"ms": 1, "k": i} for i in range(20)])
    done, not_done = concurrent.futures.wait(futures, timeout=30)
    assert len(done) == 20 and not not_done

    async def main():
        fut = producer.submit("spin", {"ms": 1, "async": True})
        return await fut

    assert asyncio.run(main()).ok


def test_gather_timeout_raises_and_leaves_futures_pending(producer):
    futures = producer.submit_batch("sleep", [{"ms": 1500, "t": time.time()}])
    with pytest.raises(GatherTimeout) as info:
        producer.gather(futures, timeout=0.2)
    assert info.value.pending == 1
    assert producer.gather(futures, timeout=30)[0].ok  # it still finishes


def test_status_shows_pools_and_workers(producer):
    producer.map("noop", [{"status": i} for i in range(10)])
    st = producer.status()
    assert st["producer"]["resolved"] >= 10
    [pool] = st["pools"]
    assert pool["state"] == "running" and len(pool["workers"]) == 2
    assert all(w["alive"] for w in pool["workers"])
    assert sum(w["done"] for w in pool["workers"]) >= 10


def test_a_reward_defined_by_the_calling_script_is_forwarded(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "from qworker import Producer, reward\n"
        "@reward('double')\n"
        "def double(payload):\n"
        "    return 2 * payload['x']\n"
        "if __name__ == '__main__':\n"
        "    with Producer(local_workers=1) as p:\n"
        "        print([r.score for r in p.map('double', [{'x': 1}, {'x': 2.5}])])\n"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[2.0, 5.0]"


def test_close_cancels_unfinished_and_refuses_new_work():
    p = Producer(local_workers=1)
    futures = p.submit_batch("sleep", [{"ms": 5000}, {"ms": 5001}])
    time.sleep(0.3)
    p.close(timeout=2)
    results = [f.result(timeout=5) for f in futures]
    assert all(r.error_kind == "cancelled" for r in results)
    with pytest.raises(ProducerClosed):
        p.submit("noop", {})


def test_io_rewards_overlap_on_the_worker_thread_pool():
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS]) as p:
        t0 = time.monotonic()
        results = p.map("io_wait", [{"ms": 300, "i": i} for i in range(64)], timeout=60)
        took = time.monotonic() - t0
    assert all(r.ok for r in results)
    assert all(r.extra["thread"].startswith("qworker-io") for r in results)
    assert took < 64 * 0.3 / 2  # one worker, 64 waits of 0.3 s (19 s in a row): they ran side by side


def test_a_hung_io_reward_times_out_without_killing_its_worker_or_blocking_close():
    t0 = time.monotonic()
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS]) as p:
        hung, ok = p.map("io_hang", [{}], timeout=30) + p.map("io_wait", [{"ms": 1}], timeout=30)
        restarts = p.status()["pools"][0]["workers"][0]["restarts"]
    assert hung.error_kind == "timeout" and "0.5 s limit" in hung.error
    assert ok.ok and restarts == 0
    assert time.monotonic() - t0 < 20  # closing did not wait for the 60 s sleep


def test_batches_stay_under_the_frame_limit():
    # 8 x 200 kB would be a 1.6 MB frame, over the 1 MB cap that producer and
    # workers share: batches are cut by bytes as well as by count.
    with Producer(local_workers=1, max_message_bytes=1 << 20, max_payload_bytes=300_000) as p:
        results = p.map("noop", [{"blob": "x" * 200_000, "i": i} for i in range(24)], timeout=30)
    assert all(r.ok for r in results)


def test_each_submitted_key_is_looked_up_once_per_cache_tier(producer, monkeypatch):
    producer.map("spin", [{"ms": 0, "warm": True}])  # the workers report the reward's version: its keys can be read
    memory, read, persistent = [], [], []  # the memory tier asked whether it holds a key; an entry it holds read
    cache = producer.cache
    holds, get, get_persistent = cache.holds, cache.get, cache.get_persistent
    monkeypatch.setattr(cache, "holds", lambda key: memory.append(key) or holds(key))
    monkeypatch.setattr(cache, "get", lambda key: read.append(key) or get(key))
    monkeypatch.setattr(cache, "get_persistent", lambda keys: get_persistent(persistent.append(list(keys)) or persistent[-1]))
    payloads = [{"ms": 0, "once": i} for i in range(1500)]  # two chunks of the submit path
    results = producer.map("spin", payloads)
    assert all(r.ok and not r.cached for r in results)
    assert len(memory) == len(set(memory)) == 1500 and not read  # the memory tier: once per key (a miss reads nothing)
    assert [len(keys) for keys in persistent] == [1024, 476]  # the persistent tier: once per chunk, for the misses
    again = producer.map("spin", payloads[:10])
    assert all(r.cached for r in again) and len(memory) == 1510 and read == memory[1500:]
