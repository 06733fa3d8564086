"""``qworker serve`` and ``qworker.Client``: real service processes, real sockets, real HTTP."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request

import pytest

from qworker import Client, ConfigError, ProducerClosed, RewardError, ServiceUnavailable
from qworker.testing import MockJudge
from qworker.transport import client_wire as cw
from tests.conftest import REPO, TEST_REWARDS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(port: int, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "qworker", "serve", "--listen", f"tcp://127.0.0.1:{port}", "--reward-modules", TEST_REWARDS, *args],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    line = proc.stderr.readline()  # "qworker serve: clients on ..." once it is up
    while "clients on" not in line:
        assert proc.poll() is None and line, f"qworker serve did not start: {line}{proc.stderr.read()}"
        line = proc.stderr.readline()
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining its log
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def service():
    port = free_port()
    proc = serve(port, "--workers", "2", "--config", str(REPO / "configs" / "rewards.yaml"))
    yield f"tcp://127.0.0.1:{port}"
    stop(proc)


def test_a_client_has_the_producers_api(service):
    with Client(service) as c:
        results = c.map("gsm8k", [{"response": f"#### {i}", "ground_truth": "3"} for i in range(200)], timeout=60)
        again = c.map("gsm8k", [{"response": "#### 3", "ground_truth": "3"}], timeout=30)
        shaped = c.map("math_shaped", [{"response": "<think>x</think><answer>4</answer>", "ground_truth": "4", "max_response_length": 512}], timeout=60)
        status = c.status()
    assert [r.score for r in results] == [1.0 if i == 3 else 0.0 for i in range(200)]
    assert again[0].cached and again[0].score == 1.0
    assert shaped[0].ok and shaped[0].extra["math"] == 1.0
    assert status["service"]["requests"] >= 3 and sum(len(p["workers"]) for p in status["pools"]) == 2


def test_client_errors_are_raised_at_submission(service):
    with Client(service) as c, pytest.raises(RewardError, match="composite"):
        c.submit_batch("math_shaped", [{"response": "x"}], params={"strict": True})
    with Client(service) as c:
        [r] = c.map("boom", [{"i": 1}], timeout=30)  # a failing task is a result, not an exception
    assert r.error_kind == "reward_error"


def test_the_client_refuses_a_call_the_producer_refuses_before_sending_it(service):
    with Client(service) as c:
        requests = c.status()["service"]["requests"]
        with pytest.raises(TypeError, match="payloads must be an iterable of payloads"):
            c.submit_batch("gsm8k", {"response": "#### 3", "ground_truth": "3"})
        with pytest.raises(ConfigError, match="timeout_s must be a finite number of seconds above 0"):
            c.submit("noop", {"t": 1}, timeout_s=-1)
        with pytest.raises(TypeError, match=r"gather\(\[future\]\)"):
            c.gather(c.submit("noop", {"g": 1}), timeout=10)
        assert c.status()["service"]["requests"] == requests + 1  # only the gathered one was sent


def test_a_payload_the_client_cannot_encode_fails_as_bad_payload_and_the_rest_of_its_request_is_scored(service):
    """As at a ``Producer``: a payload with no msgpack encoding resolves as ``bad_payload``, at once and naming
    the problem; the other payloads of the same request are scored (a request of only such payloads sends nothing)."""
    with Client(service, connect_timeout_s=5) as c:
        results = c.map("noop", [{"i": 1}, object(), {"i": 2}], timeout=60)
        [alone] = c.map("noop", [object()], timeout=60)
    assert results[0].ok and results[2].ok, results
    assert results[1].error_kind == "bad_payload" and "cannot encode payload" in results[1].error, results[1]
    assert alone.error_kind == "bad_payload", alone


def test_a_task_asked_twice_in_a_request_and_by_another_client_while_it_runs_answers_every_asker_and_runs_once(service, tmp_path):
    """The service follows one future for every asker of a task: both places of it in one request, and a second
    client's request for it while it runs (deduplicated by the producer) each get its result."""
    log = tmp_path / "evaluations.log"
    slow, other = {"log": str(log), "i": 5, "sleep_ms": 500}, {"log": str(log), "i": 6}
    with Client(service) as a, Client(service) as b:
        first = a.submit_batch("count_eval", [slow, other, slow])
        second = b.submit_batch("count_eval", [other, slow])  # taken while the first runs
        results = a.gather(first, timeout=60) + b.gather(second, timeout=60)
    assert [r.score for r in results] == [5.0, 6.0, 5.0, 6.0, 5.0], results
    assert sorted(line.split()[0] for line in log.read_text().splitlines()) == ["5", "6"]  # each task ran once


def test_many_threads_and_asyncio_share_one_client(service):
    with Client(service) as c:
        out: dict[int, list] = {}

        def run(t: int) -> None:
            out[t] = c.map("noop", [{"t": t, "i": i} for i in range(300)], timeout=60)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
        [t.start() for t in threads]
        [t.join(90) for t in threads]

        async def main():
            return await asyncio.gather(*c.submit_batch("noop", [{"a": i} for i in range(50)]))

        awaited = asyncio.run(main())
    assert sorted(out) == list(range(8)) and all(r.ok for rs in out.values() for r in rs)
    assert len(awaited) == 50 and all(r.ok for r in awaited)


def test_no_service_is_a_clear_error_not_a_wait():
    with Client(f"tcp://127.0.0.1:{free_port()}", connect_timeout_s=1.0) as c, pytest.raises(ServiceUnavailable, match="did not answer"):
        c.submit_batch("noop", [{}])


def test_close_during_a_large_submission_returns_promptly_and_leaves_no_future_pending():
    # Registering 300k tasks takes seconds (3.5-6 s here while the whole batch held the table's lock, which
    # close() then waited for); close() must not wait on it.
    n = 300_000
    payloads = [{"i": i} for i in range(n)]
    c = Client(f"tcp://127.0.0.1:{free_port()}", connect_timeout_s=60)
    out: dict = {}

    def submit() -> None:
        try:
            out["futures"] = c.submit_batch("noop", payloads)
        except ProducerClosed as exc:
            out["error"] = exc

    th = threading.Thread(target=submit)
    th.start()
    deadline = time.monotonic() + 60
    while len(c._table) == 0 and th.is_alive() and time.monotonic() < deadline:  # registration has begun
        time.sleep(0.001)
    assert len(c._table) > 0, "registration never began"
    started = time.monotonic()
    c.close()
    took = time.monotonic() - started
    th.join(60)
    assert not th.is_alive()
    assert took < 2.0, f"close() took {took:.1f} s"
    assert len(c._table) == 0  # every task registered before close was cancelled
    if "futures" in out:  # registration finished first: its futures are all resolved, cancelled
        assert all(f.done() and f.result().error_kind == "cancelled" for f in out["futures"])
    else:
        assert isinstance(out["error"], ProducerClosed)


def test_a_service_with_no_workers_refuses_with_a_reason():
    port = free_port()
    proc = serve(port, "--workers", "0", "--no-workers-grace", "0")
    try:
        with Client(f"tcp://127.0.0.1:{port}") as c, pytest.raises(ServiceUnavailable, match="no workers.*qworker-pool --connect"):
            c.submit_batch("noop", [{}])
    finally:
        stop(proc)


def test_a_service_restart_mid_run_loses_nothing_and_hangs_nothing():
    port = free_port()
    proc = serve(port, "--workers", "2")
    try:
        with Client(f"tcp://127.0.0.1:{port}", service_timeout_s=60) as c:
            futures = c.submit_batch("sleep", [{"ms": 5, "i": i} for i in range(1500)])
            while sum(f.done() for f in futures) < 200:
                time.sleep(0.05)
            proc.kill()  # the service dies with most tasks unanswered
            proc.wait()
            proc = serve(port, "--workers", "2")
            results = c.gather(futures, timeout=120)
    finally:
        stop(proc)
    assert len(results) == 1500 and all(r.ok for r in results), [r.error for r in results if not r.ok][:3]


def test_one_judge_limit_for_every_client_process(tmp_path):
    judge = MockJudge(capacity=64, latency_s=0.05).start()
    port = free_port()
    config = tmp_path / "judge.yaml"
    config.write_text(textwrap.dedent(f"""
        rewards:
          llm_judge:
            model: mock
            endpoints: [{{url: "{judge.url}", max_concurrency: 6}}]
    """))
    proc = serve(port, "--workers", "2", "--config", str(config))
    script = textwrap.dedent(f"""
        import sys, threading
        from qworker import Client
        c = Client("tcp://127.0.0.1:{port}")
        bad = []
        def run(t):
            rs = c.map("llm_judge", [{{"prompt": "p", "response": f"{{sys.argv[1]}}-{{t}}-{{i}}"}} for i in range(40)], timeout=120)
            bad.extend(r.error for r in rs if not r.ok)
        ts = [threading.Thread(target=run, args=(t,)) for t in range(3)]
        [t.start() for t in ts]; [t.join() for t in ts]
        c.close()
        sys.exit(1 if bad else 0)
    """)
    try:
        clients = [subprocess.Popen([sys.executable, "-c", script, str(n)]) for n in range(4)]
        codes = [p.wait(180) for p in clients]
    finally:
        stop(proc)
        judge.stop()
    assert codes == [0, 0, 0, 0]
    assert judge.stats["served"] == 4 * 3 * 40 and judge.stats["max_in_flight"] <= 6  # one limit, not one per process


def post(url: str, body: object) -> tuple[int, object]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_protocols_of_openrlhf_and_slime():
    port, http = free_port(), free_port()
    proc = serve(port, "--workers", "1", "--http", str(http), "--reward", "gsm8k")
    base = f"http://127.0.0.1:{http}"
    try:
        prompts = ["Q1 ", "Q2 "]
        status, body = post(base + "/get_reward", {"query": [p + "#### 7" for p in prompts], "prompts": prompts, "labels": ["7", "8"]})
        assert status == 200 and body["rewards"] == body["scores"] == [1.0, 0.0]
        status, body = post(base + "/score", {"prompt": "Q", "response": "#### 5", "label": "5"})
        assert status == 200 and body["score"] == 1.0 and body["pred"] == "5"
        status, body = post(base + "/", [{"prompt": "Q", "response": "#### 5", "label": "6"}])
        assert status == 200 and body[0]["score"] == 0.0
        status, body = post(base + "/get_reward", {"query": "not a list"})
        assert status == 400 and "query" in body["error"]
        status, body = post(base + "/score", {"prompt": "Q", "response": "#### 5"})  # no label: gsm8k fails the task
        assert status == 502 and body["failed"][0]["index"] == 0 and "reward_error" in body["failed"][0]["error"]
        with urllib.request.urlopen(base + "/health", timeout=10) as resp:
            assert resp.status == 200
    finally:
        stop(proc)


def test_http_without_a_reward_is_refused_at_start():
    out = subprocess.run([sys.executable, "-m", "qworker", "serve", "--http", "1", "--workers", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--http needs --reward" in out.stderr


@pytest.mark.parametrize("moment", ["registering", "taken by the service", "results arriving"])
def test_close_racing_a_50k_task_submission_on_another_thread_returns_promptly(service, moment):
    # close() never waits on a registration in progress, on futures it never handed out, or on a flood of results
    n = 50_000
    payloads = [{"i": i, "race": moment, "t": time.time()} for i in range(n)]  # fresh: nothing comes from the cache
    c = Client(service, connect_timeout_s=120)
    requests_before = c.status()["service"]["requests"]
    started, handed = threading.Event(), threading.Event()
    out: dict = {}

    def submit() -> None:
        started.set()
        try:
            out["futures"] = c.submit_batch("noop", payloads)
            handed.set()
        except ProducerClosed as exc:
            out["error"] = exc

    th = threading.Thread(target=submit, daemon=True)
    th.start()
    assert started.wait(30)
    deadline = time.monotonic() + 120
    if moment == "taken by the service":
        while c.status()["service"]["requests"] == requests_before and not handed.is_set():
            assert time.monotonic() < deadline, "the service never took the request"
            time.sleep(0.01)
    elif moment == "results arriving":
        assert handed.wait(120), "the service never took the request"
        while not any(f.done() for f in out["futures"][-1000:]):
            assert time.monotonic() < deadline, "no result came back"
            time.sleep(0.01)
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (c.close(), closed.set()), daemon=True)
    closer.start()
    assert closed.wait(5.0), f"close() did not return within 5 s of a 50k-task submit_batch ({moment})"
    th.join(60)
    assert not th.is_alive(), "submit_batch did not return after close()"
    if "futures" in out:  # handed out before close(): every one resolved, by its result or as cancelled
        assert all(f.done() for f in out["futures"])
        assert {f.result().error_kind for f in out["futures"]} <= {None, "cancelled"}
    else:
        assert isinstance(out["error"], ProducerClosed)
    assert len(c._table) == 0


def test_close_while_a_large_submission_waits_to_be_taken_returns_at_once():
    # Its futures were never handed out: close() need not resolve them one by one (the submitter raises instead).
    import zmq

    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)  # a "service" that reads requests and never answers
    silent.setsockopt(zmq.LINGER, 0)
    silent.bind("tcp://127.0.0.1:0")
    endpoint = silent.getsockopt(zmq.LAST_ENDPOINT).decode()
    n = 300_000
    payloads = [{"i": i} for i in range(n)]
    c = Client(endpoint, connect_timeout_s=120)
    out: dict = {}

    def submit() -> None:
        try:
            out["futures"] = c.submit_batch("noop", payloads)
        except ProducerClosed as exc:
            out["error"] = exc

    th = threading.Thread(target=submit, daemon=True)
    th.start()
    try:
        assert silent.poll(120_000), "the submission never reached the service"
        frames = silent.recv_multipart()
        while frames[1] == cw.PING:  # the Client's first ping asks its frame limit: answered, as a service does
            silent.send_multipart([frames[0], *cw.encode(cw.Pong("silent", 1, [], 64 * 2**20))])
            assert silent.poll(120_000), "the submission never reached the service"
            frames = silent.recv_multipart()
        assert frames[1] == cw.SUBMIT  # every task is registered and sent: the request waits to be taken
        closed = threading.Event()
        threading.Thread(target=lambda: (c.close(), closed.set()), daemon=True).start()
        assert closed.wait(2.0), f"close() did not return within 2 s while a {n:,}-task submission waited to be taken"
        th.join(60)
        assert not th.is_alive() and isinstance(out.get("error"), ProducerClosed)
        assert len(c._table) == 0
    finally:
        silent.close()
        ctx.term()
