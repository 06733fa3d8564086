"""A reward service run in this process (a real producer, real worker processes, real sockets): how it stops
when its producer closes, and in what order a client's answers leave."""

from __future__ import annotations

import gc
import socket
import threading
import time
import weakref

import zmq

from qworker import Client, Producer
from qworker.engine import dispatcher as dispatcher_module
from qworker.service.server import RewardService
from qworker.transport import client_wire as cw
from qworker.transport import wire


def port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` (connections it accepted may linger in TIME_WAIT)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_producer_closed_without_stopping_its_service_fails_what_clients_wait_on_at_once():
    """No ``stop()``: the end of the producer's dispatcher tells every client (``Closing``), so a waiting future
    fails as service_lost now, not after the client's service_timeout_s."""
    p = Producer(local_workers=0)  # no worker: a task waits until the producer closes
    service = RewardService(p, listen="tcp://127.0.0.1:0", no_workers_grace_s=600).start()
    with Client(service.endpoint, service_timeout_s=600) as c:
        fut = c.submit("noop", {"i": 1})  # taken by the service
        p.close()
        r = fut.result(timeout=60)
    assert r.error_kind == "service_lost" and "producer closed" in r.error, r
    assert port_is_free(port_of(service.endpoint))  # the service's socket is closed with its producer
    service.stop()  # after the fact: returns at once


def test_stop_racing_a_producer_close_returns_without_waiting_on_the_ended_dispatcher_and_closes_the_socket(monkeypatch):
    """``stop()`` called while the producer's dispatcher thread is past its last turn but not yet gone (here held
    in its own socket's close) returns without that thread's help, and the service's socket is closed."""
    p = Producer(local_workers=0)
    service = RewardService(p, listen="tcp://127.0.0.1:0").start()
    ended, release = threading.Event(), threading.Event()
    real_close = dispatcher_module.close_server

    def held_close(ctx: zmq.Context, sock: zmq.Socket, **kw: int) -> None:
        ended.set()  # the dispatcher's reactor has taken its last turn
        release.wait(60)
        real_close(ctx, sock, **kw)

    monkeypatch.setattr(dispatcher_module, "close_server", held_close)
    closer = threading.Thread(target=p.close, daemon=True)
    closer.start()
    try:
        assert ended.wait(60), "the producer's dispatcher did not stop"
        stopper = threading.Thread(target=service.stop, daemon=True)
        stopper.start()
        stopper.join(5.0)  # it needs nothing from the dispatcher thread: well under its 10 s wait for one
        waited = stopper.is_alive()
        closed = port_is_free(port_of(service.endpoint))
    finally:
        release.set()
        closer.join(60)
    stopper.join(60)
    assert not waited, "stop() waited on a dispatcher thread that had stopped taking turns"
    assert closed, "the service's socket was left open"


def test_stop_while_the_reactor_ends_leaves_it_on_one_thread_only(monkeypatch):
    """``stop()`` called while the dispatcher thread is itself leaving the reactor (its producer closing) waits for
    that thread instead of leaving it too: the last messages go out on one thread, and the socket is closed after."""
    p = Producer(local_workers=0)
    service = RewardService(p, listen="tcp://127.0.0.1:0").start()
    saying: list[str] = []
    inside, go_on = threading.Event(), threading.Event()
    real_say = service._say_closing

    def slow_say() -> None:  # many clients to tell: the dispatcher thread is inside its leaving for a while
        saying.append(threading.current_thread().name)
        inside.set()
        go_on.wait(0.5)
        real_say()

    monkeypatch.setattr(service, "_say_closing", slow_say)
    try:
        p._dispatcher._reactor.stop()  # as the producer's close does: the reactor's end leaves it (at_exit)
        assert inside.wait(60), "the reactor's end did not leave the service"
        service.stop()
        assert saying == ["qworker-dispatcher"], f"Closing was said on {saying}"
        assert port_is_free(port_of(service.endpoint)), "stop() returned before the socket was closed"
    finally:
        go_on.set()
        p.close()


def test_a_client_submitting_on_gets_the_results_of_its_earlier_requests_meanwhile():
    """A client with a steady stream of requests being taken still gets the results of those already taken:
    the first request's result reaches it before the last request is even answered."""
    requests = 3000  # one no-op task each, all waiting at the service's socket: it takes 64 a turn
    with Producer(local_workers=1) as p:
        service = RewardService(p, listen="tcp://127.0.0.1:0").start()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(service.endpoint)
        try:
            gate = threading.Event()
            holder = threading.Thread(target=p._dispatcher.call, args=(lambda: gate.wait(60),), kwargs={"timeout": 90}, daemon=True)
            holder.start()  # the service takes nothing until every request waits at its socket
            tag = time.time()
            for n in range(1, requests + 1):
                sock.send_multipart(cw.encode(cw.Submit(*wire.STAMP, n, "noop", None, [{"n": n, "run": tag}], None)))
            time.sleep(0.5)  # let them cross the loopback into the service's queue
            gate.set()
            order: list[str] = []
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            deadline = time.monotonic() + 120
            while "accepted last" not in order and time.monotonic() < deadline:
                if not poller.poll(1000):
                    continue
                kind, body = sock.recv_multipart()
                msg = cw.CLIENT.decode(kind, body, max_bytes=1 << 26)
                if isinstance(msg, cw.Resolved):
                    if any(group.request == 1 for group in msg.requests):
                        order.append("first resolved")
                    sock.send_multipart(cw.encode(cw.Ack([msg.seq])))
                elif isinstance(msg, cw.Accepted) and msg.request == requests:
                    order.append("accepted last")
            holder.join(30)
        finally:
            sock.close()
            ctx.term()
            service.stop()
    assert "accepted last" in order, "the service did not answer every request"
    assert "first resolved" in order and order.index("first resolved") < order.index("accepted last"), order


def test_a_stopped_service_is_no_longer_referenced_by_its_producers_reactor():
    """Services started and stopped on one producer (a test suite, a server that restarts its front) do not pile
    up: once stopped, nothing of the producer's dispatcher holds the service (its handlers, its deadline, its
    exit hook), and the reactor asks no stopped service for a deadline."""
    with Producer(local_workers=0) as p:
        service = RewardService(p, listen="tcp://127.0.0.1:0", no_workers_grace_s=600).start()
        with Client(service.endpoint) as c:
            assert c.status()["service"]["instance"] == service.instance  # it served a request before it stopped
        service.stop()
        gone = weakref.ref(service)
        del service
        p._dispatcher.call(lambda: None)  # a turn of the reactor after the stop
        gc.collect()
        assert gone() is None, [type(r).__name__ for r in gc.get_referrers(gone())]
