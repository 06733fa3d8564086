"""The adapters' process-wide client: which object, from which environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import qworker
from qworker.integrations import _client
from tests.contract.integrations.conftest import REWARDS


@pytest.fixture(autouse=True)
def _fresh() -> None:
    _client.close_client()
    _client.use_client(None)
    yield
    _client.close_client()


def test_embedded_producer_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "q.yaml"
    cfg.write_text(f"producer:\n  reward_modules: [{REWARDS}]\nrewards:\n  short_len: {{reward: adapter_len}}\n")
    monkeypatch.delenv("QWORKER_CONNECT", raising=False)
    monkeypatch.setenv("QWORKER_CONFIG", str(cfg))
    monkeypatch.setenv("QWORKER_WORKERS", "1")
    client = _client.reward_client()
    assert isinstance(client, qworker.Producer) and client.options.local_workers == 1
    assert _client.reward_client() is client  # one per process
    assert [r.score for r in client.map("short_len", [{"response": "abc"}])] == [0.5]  # the config's alias
    _client.close_client()
    assert client._closed


def test_a_given_client_is_used_and_not_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    class Given:
        closed = False

        def close(self) -> None:
            self.closed = True

    given = Given()
    _client.use_client(given)
    assert _client.reward_client() is given
    _client.close_client()
    assert not given.closed


def test_connect_uses_a_client_of_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.contract.service.test_service import free_port, serve, stop

    port = free_port()
    proc = serve(port, "--workers", "1", "--reward-modules", REWARDS)
    try:
        monkeypatch.setenv("QWORKER_CONNECT", f"tcp://127.0.0.1:{port}")
        client = _client.reward_client()
        assert isinstance(client, qworker.Client) and client.endpoint == f"tcp://127.0.0.1:{port}"
        assert [r.score for r in client.gather(client.submit_batch("adapter_len", [{"response": "abc"}]))] == [0.5]
    finally:
        _client.close_client()
        stop(proc)


def test_bad_worker_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QWORKER_CONNECT", raising=False)
    monkeypatch.setenv("QWORKER_WORKERS", "four")
    with pytest.raises(RuntimeError, match="QWORKER_WORKERS"):
        _client.reward_client()


def test_a_forked_child_makes_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    class Given:
        def close(self) -> None:
            pass

    parent, child = Given(), Given()
    _client.use_client(parent)
    monkeypatch.setattr(_client, "_make", lambda: child)
    monkeypatch.setattr(_client, "_owner_pid", os.getpid() + 1)  # as if made by another process
    assert _client.reward_client() is child
