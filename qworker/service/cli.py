"""``qworker serve``: a reward service for every process of a distributed trainer.

    qworker serve [--listen tcp://127.0.0.1:5557] [--config PATH] [--workers N] [--bind ENDPOINT]
                  [--http PORT --reward NAME] [producer flags]

``--listen`` is where ``qworker.Client``\\s connect; ``--bind`` (optional) where
remote ``qworker-pool``\\s connect; ``--workers`` local worker processes.  The
producer flags are ``ProducerOptions``'.  Stops on SIGTERM or Ctrl-C: connected
clients are told, and what they wait on fails at once as ``service_lost``; the
exit code is 128 + the signal (130 for Ctrl-C, 143 for SIGTERM), as ``qworker score``'s.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Optional

from .._client import DEFAULT_SERVICE_ENDPOINT
from .._exceptions import QworkerError
from .._options import ProducerOptions

__all__ = ["main"]


def main(argv: Optional[list[str]] = None, prog: str = "qworker serve") -> int:
    ap = argparse.ArgumentParser(prog=prog, description="Serve rewards to qworker.Client processes (and over HTTP).")
    ap.add_argument("--listen", default=DEFAULT_SERVICE_ENDPOINT, help=f"endpoint for clients (default {DEFAULT_SERVICE_ENDPOINT})")
    ap.add_argument("--config", help="YAML config: producer: and rewards: sections")
    ap.add_argument("--http", type=int, metavar="PORT", help="also serve OpenRLHF's /get_reward and slime's /score on this port")
    ap.add_argument("--http-host", default="127.0.0.1", help="address for --http (default 127.0.0.1)")
    ap.add_argument("--reward", help="the reward (or composite) HTTP requests are scored with; needed with --http")
    ap.add_argument("--no-workers-grace", type=float, default=10.0, metavar="S",
                    help="refuse requests when no worker has connected this many seconds after start (default 10)")
    ap.add_argument("--log-level", default="INFO")
    ProducerOptions.add_arguments(ap)
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    if args.http is not None and not args.reward:
        ap.error("--http needs --reward NAME: the reward HTTP requests are scored with")

    from .._producer import Producer
    from .http import HttpFront
    from .server import RewardService

    stop = threading.Event()
    stopped_by: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopped_by.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        # the flags given, as overrides: they win over the config file even when equal to a default
        producer = Producer(config=args.config, **ProducerOptions.given(args))
    except QworkerError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    http = None
    with producer:
        try:
            if args.reward:
                producer.catalog.resolve(args.reward)  # an unknown composite or bad params fail here, not per request
            service = RewardService(producer, listen=args.listen, no_workers_grace_s=args.no_workers_grace).start()
            if args.http is not None:
                http = HttpFront(producer, reward=args.reward, port=args.http, host=args.http_host).start()
        except (QworkerError, OSError) as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
        print(f"qworker serve: clients on {service.endpoint}" + (f", HTTP on {http.url}" if http else "")
              + f", pools on {producer.endpoint}", file=sys.stderr, flush=True)
        stop.wait()
        print("qworker serve: stopping", file=sys.stderr, flush=True)
        if http is not None:
            http.stop()
        service.stop(signal.Signals(stopped_by[0]).name if stopped_by else "it was stopped")
    return 128 + stopped_by[0] if stopped_by else 0
