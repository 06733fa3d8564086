from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from qworker import Producer
from qworker.integrations import _client

REWARDS = str(Path(__file__).resolve().parent / "adapter_rewards.py")


@pytest.fixture(scope="module")
def producer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Producer]:
    """One embedded producer (2 workers, the adapter test rewards) per test module,
    made the adapters' process-wide client."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QWORKER_RUNTIME_DIR", str(tmp_path_factory.mktemp("rt-adapters")))
        mp.delenv("QWORKER_CONNECT", raising=False)
        p = Producer(local_workers=2, reward_modules=[REWARDS])
        _client.use_client(p)
        try:
            yield p
        finally:
            _client.use_client(None)
            p.close()
