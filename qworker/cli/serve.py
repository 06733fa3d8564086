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
import errno
import signal
import socket
import sys
import threading
from typing import Optional

from .._exceptions import ConfigError, QworkerError
from ..config.file import load as load_config
from ..config.options import ProducerOptions
from ..engine.producer import Producer
from ..service.client import DEFAULT_SERVICE_ENDPOINT
from ..service.http import ON_FAILURE, HttpFront, check_http_reward
from ..service.server import RewardService
from ..transport.endpoint import check_endpoint, tcp_host_port
from ..transport.security import check_bind
from ..transport.sockets import bind_refusal
from .args import Parser, add_log_level, bool_flag, hidden_alias, setup_logging, tcp_port
from .score import check_modules, resolve_reward

__all__ = ["main"]


def _seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text!r}")
    return value


def _parser(prog: str) -> Parser:
    ap = Parser(prog=prog, description="Serve rewards to qworker.Client processes (and over HTTP). Exit codes: 130 stopped by "
                "Ctrl-C (143 by SIGTERM), 2 refused at start (one line names the fix), 1 failed while running.")
    ap.add_argument("--listen", default=DEFAULT_SERVICE_ENDPOINT, help="endpoint for clients")
    ap.add_argument("--config", help="YAML config: producer: and rewards: sections")
    ap.add_argument("--http", type=tcp_port, metavar="PORT", help="also serve OpenRLHF's /get_reward and slime's /score on this port")
    ap.add_argument("--http-host", default="127.0.0.1", help="address for --http")
    ap.add_argument("--reward", help="the reward (or composite) HTTP requests are scored with; needed with --http")
    ap.add_argument("--on-failure", choices=ON_FAILURE, default="error",
                    help="HTTP: a failed sample fails the request (error: HTTP 502) or scores the fallback score with "
                    "extra_logs.qworker_failed = 1 (fallback)")
    bool_flag(ap, "whole-query", help="HTTP /get_reward: score the whole query when it does not start with its prompt "
              "(logged; default: that sample fails)")
    ap.add_argument("--first-worker-timeout", dest="first_worker_timeout", type=_seconds, default=10.0, metavar="S",
                    help="seconds after start by which a worker must have connected; past them, while none is, clients' "
                    "requests are refused (ServiceUnavailable); 0 refuses at once")
    hidden_alias(ap, "--no-workers-grace", dest="first_worker_timeout", type=_seconds)  # the older spelling
    add_log_level(ap, "INFO")
    ProducerOptions.add_arguments(ap)
    return ap


def check_free(endpoint: str, *, http: bool = False) -> None:
    """``ConfigError`` when a ``tcp://HOST:PORT`` endpoint (a fixed port) cannot be bound on this host (already taken,
    an address of another host, a name that does not resolve), so ``qworker serve`` stops before it starts any worker
    (a second one on a taken port, most often); ``http``: the port is the HTTP front's."""
    tcp = tcp_host_port(endpoint)
    if tcp is None:
        return
    host, port = tcp
    if not port.isdigit() or int(port) == 0:
        return
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as libzmq binds: a port in TIME_WAIT is free
        try:
            probe.bind(("" if host in ("*", "0.0.0.0") else host, int(port)))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE and http:
                raise ConfigError(f"HTTP port {port} on {host} is already in use (another 'qworker serve --http', or any "
                                  f"other server: 'curl http://{host}:{port}/health' shows a qworker one); pick another --http port") from None
            raise ConfigError(bind_refusal(endpoint, exc.errno or 0, exc.strerror)) from None


def main(argv: Optional[list[str]] = None, prog: str = "qworker serve") -> int:
    ap = _parser(prog)
    args = ap.parse_args(argv)
    setup_logging(args.log_level)
    if args.http is not None and not args.reward:
        ap.error("--http needs --reward NAME: the reward HTTP requests are scored with")
    given = ProducerOptions.given(args)
    try:  # everything a user can get wrong, before any worker starts
        modules = list(given.get("reward_modules", ())) or None
        check_modules(config=args.config, modules=modules, bind=given.get("bind"))
        if args.reward:
            target, _ = resolve_reward(config=args.config, reward=args.reward, modules=modules, bind=given.get("bind"), params=None)
            if args.http is not None:
                check_http_reward(target)
        check_endpoint(args.listen, what="--listen")
        if given.get("bind"):
            check_endpoint(given["bind"], what="--bind")
        # binding beyond loopback without CURVE or --insecure is refused here, not after the workers have started
        loaded = load_config(args.config)
        opts = ProducerOptions.from_mapping(loaded["producer"], given, where=loaded["where"] + ": producer")
        for endpoint in (args.listen, opts.bind) if not opts.insecure else ():  # insecure: warned once, as it binds
            if endpoint:
                check_bind(endpoint, opts.curve(), insecure=False)
        for endpoint in (args.listen, opts.bind or ""):
            check_free(endpoint)
        if args.http:
            check_free(f"tcp://{args.http_host}:{args.http}", http=True)
    except QworkerError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2

    stop = threading.Event()
    stopped_by: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopped_by.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        # the flags given, as overrides: they win over the config file even when equal to a default
        producer = Producer(config=args.config, **given)
    except QworkerError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    http = None
    with producer:
        try:
            if args.reward:
                producer.catalog.resolve(args.reward)  # an unknown composite or bad params fail here, not per request
            service = RewardService(producer, listen=args.listen, no_workers_grace_s=args.first_worker_timeout).start()
            if args.http is not None:
                http = HttpFront(producer, reward=args.reward, port=args.http, host=args.http_host, on_failure=args.on_failure,
                                 whole_query=args.whole_query).start()
                service.http_url = http.url  # shown by 'qworker status'
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
