"""A ``submit_batch`` bigger than the service's frame limit (``--max-message-bytes``; libzmq drops a larger message
unread, and the link with it) is taken and scored, as at a ``Producer``: the Client learns the limit from the service and
sends it in parts under it, never resending one that cannot pass; a payload over the limit by itself fails at once as
``bad_payload`` naming its size and the limit.  Over CURVE too, whose framing the limit counts.  Real sockets over
tcp."""

from __future__ import annotations

import shutil

from qworker import Client, ErrorKind
from qworker.transport.security import create_keys
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


def test_over_curve_a_batch_in_parts_filled_to_the_limit_is_scored_without_a_resend(tmp_path):
    keys = {name: create_keys(str(tmp_path), name) for name in ("service", "client")}  # (public, secret)
    (tmp_path / "allowed").mkdir()
    shutil.copy(keys["client"][0], tmp_path / "allowed")
    port, pools = free_port(), free_port()
    service = serve(port, "--workers", "1", "--max-message-bytes", str(LIMIT), "--max-payload-bytes", str(LIMIT // 2),
                    "--bind", f"tcp://127.0.0.1:{pools}", "--curve-secret-key", keys["service"][1],
                    "--curve-allowed-keys", str(tmp_path / "allowed"))
    try:
        with Client(f"tcp://127.0.0.1:{port}", connect_timeout_s=20, curve_secret_key=keys["client"][1],
                    curve_server_key=keys["service"][0]) as client:
            payloads = [{"i": i} for i in range(40_000)]  # small payloads: each part filled to within a few bytes
            results = client.map("noop", payloads, timeout=60)
            assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
            assert client.resubmitted == 0  # no part was over the limit as the wire counts it
    finally:
        stop(service)
