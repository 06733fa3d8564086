"""A socket stub for the unit tier: it hands out the messages it was given, one per ``recv_multipart``, then raises
``zmq.Again`` as a drained non-blocking socket does; what is sent to it is kept in ``sent``."""

from __future__ import annotations

from typing import Iterable

import zmq


class StubSocket:
    def __init__(self, messages: Iterable[list[bytes]]) -> None:
        self.messages = iter(messages)
        self.sent: list[list[bytes]] = []

    def recv_multipart(self, flags: int = 0, copy: bool = True) -> list[bytes]:
        for frames in self.messages:
            return frames
        raise zmq.Again()

    def send_multipart(self, frames: list[bytes], flags: int = 0) -> None:
        self.sent.append(frames)
