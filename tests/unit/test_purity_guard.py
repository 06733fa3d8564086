"""The unit tier's guard fails a test that starts a process or opens a network socket, and lets pure code be."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import threading

import pytest
import zmq

Failed = pytest.fail.Exception


def _refused(purity_guard: list[str], call, named: str) -> None:
    with pytest.raises(Failed, match="a unit test may not start a process or open a network socket") as e:
        call()
    assert named in str(e.value)
    assert purity_guard == [purity_guard[0]] and named in purity_guard[0]
    purity_guard.clear()  # this test made the calls on purpose: nothing left to fail at teardown


def test_starting_a_subprocess_fails_the_test(purity_guard):
    _refused(purity_guard, lambda: subprocess.run(["true"], check=True), "subprocess.Popen")


def test_forking_fails_the_test_before_the_fork(purity_guard):
    def fork() -> None:
        if os.fork() == 0:  # reached only if the guard let the fork through: the child must not run pytest on
            os._exit(0)

    _refused(purity_guard, fork, "os.fork")


def test_starting_a_multiprocessing_process_fails_the_test(purity_guard):
    _refused(purity_guard, multiprocessing.get_context("spawn").Process(target=print).start, "Process.start")


@pytest.mark.parametrize("method", ["bind", "connect", "connect_ex"])
def test_binding_or_connecting_a_network_socket_fails_the_test(purity_guard, method):
    with socket.socket() as s:
        _refused(purity_guard, lambda: getattr(s, method)(("127.0.0.1", 0)), f"socket.{method}")


def test_a_zmq_socket_fails_the_test(purity_guard):
    ctx = zmq.Context()
    try:
        _refused(purity_guard, lambda: ctx.socket(zmq.PUSH), "zmq.Context.socket")
    finally:
        ctx.term()


def test_a_call_on_another_thread_is_kept_for_teardown(purity_guard):
    def start_one() -> None:
        try:
            subprocess.run(["true"])
        except Failed:
            pass  # only this thread ends; the guard keeps the violation

    t = threading.Thread(target=start_one)
    t.start()
    t.join(30)
    assert len(purity_guard) == 1 and "subprocess.Popen" in purity_guard[0]  # the teardown would fail the test
    purity_guard.clear()


def test_a_socketpair_reaches_no_network_and_is_allowed(purity_guard):
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"x")
        assert b.recv(1) == b"x"
    assert purity_guard == []


@pytest.fixture(scope="module")
def thread_from_before():
    """A thread already running when a test's guard is installed (module scope: set up before the
    function-scoped guard), as a closed producer's metrics poller left by an earlier test in this process."""
    go, done = threading.Event(), threading.Event()

    def bind_when_told() -> None:
        try:
            go.wait(30)
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
        finally:
            done.set()

    threading.Thread(target=bind_when_told, daemon=True).start()
    return go, done


def test_a_socket_opened_by_a_thread_that_was_running_before_the_test_is_not_the_tests_doing(
    purity_guard, thread_from_before
):
    go, done = thread_from_before
    go.set()
    assert done.wait(30)
    assert purity_guard == []
