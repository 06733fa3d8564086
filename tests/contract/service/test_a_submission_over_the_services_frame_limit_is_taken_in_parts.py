"""A ``submit_batch`` bigger than the service's frame limit (``--max-message-bytes``; libzmq drops a larger message
unread, and the link with it) is taken and scored, as at a ``Producer``: the Client learns the limit from the service and
sends it in parts under it, never resending one that cannot pass; a payload over the limit by itself fails at once as
``bad_payload`` naming its size and the limit.  Real sockets over tcp."""

from __future__ import annotations

from qworker import Client, ErrorKind
from tests.contract.service.test_service import free_port, serve, stop

LIMIT = 64 * 1024


def test_a_batch_over_the_frame_limit_is_scored_and_a_payload_over_it_fails_naming_both_sizes():
    port = free_port()
    service = serve(port, "--workers", "1", "--max-message-bytes", str(LIMIT), "--max-payload-bytes", str(LIMIT // 2))
    try:
        with Client(f"tcp://127.0.0.1:{port}", connect_timeout_s=20) as client:
            payloads = [{"text": "x" * 1000, "i": i} for i in range(300)]  # about 300 kB: five times the limit
            results = client.map("noop", payloads, timeout=60)
            assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
            again = client.map("noop", [*payloads[:100], {"big": "y" * 2 * LIMIT}], timeout=60)  # a pipelined one
            assert all(r.ok for r in again[:100])
            assert again[100].error_kind == ErrorKind.BAD_PAYLOAD and f"over the {LIMIT}-byte message limit" in again[100].error
            assert client.resubmitted == 0  # nothing was sent that the service could not read
    finally:
        stop(service)
