"""Fixtures of the service's unit tests."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator

import pytest


@pytest.fixture
def caller() -> Iterator[Callable[..., Future]]:
    """Runs a call on another thread (a caller that may wait for the service's answer)."""
    with ThreadPoolExecutor(1) as pool:
        yield lambda fn, *args, **kw: pool.submit(fn, *args, **kw)
