"""Command line: ``qworker score | status | cache | keys | serve | pool | ray-pools | mock-judge`` and ``qworker-pool``.

``score`` lives in ``cli.score``; ``serve``, ``ray-pools`` and ``mock-judge`` in their own modules.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
import time
from typing import Optional, cast

import zmq

from .. import __version__
from .._exceptions import ConfigError, QworkerError
from ..cache.disk import UNRECORDED, DiskCache
from ..config import file as _config
from ..config.data import data_main
from ..config.options import PoolOptions, positive_number
from ..engine.discovery import local_endpoints
from ..engine.status import Status
from ..host.pool import Pool
from ..registry.registry import registered
from ..transport import wire
from ..transport.endpoint import check_endpoint
from ..transport.security import CurveClient, create_keys, handshake_problem, is_loopback
from ..transport.sockets import make_socket
from .args import EXIT_INTERRUPTED, Parser, add_curve_client, add_log_level, bool_flag, guard, hidden_alias, setup_logging
from .score import default_cache_path, score_main

log = logging.getLogger("qworker")

DEFAULT_POOL_TIMEOUT_S = 300.0  # qworker score --bind: how long remote pools may take to come


def _split(values: Optional[list[str]]) -> list[str]:
    return [m for v in values or [] for m in v.split(",") if m]


# pool --------------------------------------------------------------------------
def add_pool_arguments(ap: argparse.ArgumentParser) -> None:
    """``--config`` and every ``PoolOptions`` flag (``qworker-pool``, ``qworker ray-pools``)."""
    ap.add_argument("--config", help="YAML config; its 'pool:' section gives defaults")
    PoolOptions.add_arguments(ap)


def pool_options(args: argparse.Namespace, prog: str) -> PoolOptions:
    """The pool's options from its flags over the config's ``pool:`` section; ``ConfigError`` without an endpoint."""
    options = PoolOptions.from_args(args, _config.load(args.config)["pool"], where=args.config or prog)
    if not options.connect:
        raise ConfigError("no producer endpoint: pass --connect tcp://HOST:PORT or set pool.connect in the config")
    check_endpoint(options.connect, what="--connect / pool.connect", connect=True)
    return options


def pool_main(argv: Optional[list[str]] = None, prog: str = "qworker-pool") -> int:
    """Run a pool until SIGTERM or Ctrl-C, which drain it (exit 0 after SIGTERM, 130 after Ctrl-C); a second Ctrl-C
    stops its workers at once.  Exit codes as ``cli.args`` documents."""
    return cast(int, guard(prog)(_pool_main)(argv, prog))


def _pool_main(argv: Optional[list[str]], prog: str) -> int:
    ap = Parser(prog=prog, description="Run a pool of reward workers that serve a producer.")
    add_pool_arguments(ap)
    args = ap.parse_args(argv)
    options = pool_options(args, prog)
    options.curve()  # half a CURVE setting: refused here, not in every worker
    setup_logging(options.log_level)
    if options.connect and options.curve() is None and not is_loopback(options.connect) and not options.insecure:
        log.warning("%s: connecting to %s without CURVE: tasks and results cross the network in clear; give --curve-secret-key "
                    "and --curve-server-key, or --insecure on a network you trust", prog, options.connect)
    pool = Pool(options)
    interrupted = False

    def ctrl_c(*_: object) -> None:
        nonlocal interrupted
        if interrupted:  # the second, while draining: out of the drain now (``Pool.run`` kills its workers on the way
            # out); before the drain began or once it ended, the first's stop is under way and this one is not needed
            if pool.state == "draining":
                raise KeyboardInterrupt
            return
        interrupted = True
        pool.request_stop()

    signal.signal(signal.SIGTERM, pool.request_stop)
    signal.signal(signal.SIGINT, ctrl_c)
    rc = pool.run()
    if pool.refused is not None:  # a producer of another wire protocol: one line, exit 2
        raise ConfigError(pool.refused)
    return EXIT_INTERRUPTED if interrupted and rc == 0 else rc


# status ------------------------------------------------------------------------
def query_status(endpoint: str, timeout_s: float = 3.0, curve: Optional[CurveClient] = None) -> Status:
    """Ask the producer (or reward service) at ``endpoint`` for its status; ``curve`` for a CURVE-protected one."""
    ctx: zmq.Context = zmq.Context.instance()
    sock = make_socket(ctx, zmq.DEALER, connect=endpoint, curve=curve)
    try:
        sock.send_multipart(wire.encode(wire.StatusRequest()))
        if not sock.poll(int(timeout_s * 1000)):
            problem = handshake_problem(endpoint) if curve is not None else None
            raise TimeoutError(problem or f"no answer from {endpoint} within {timeout_s:g} s" + (
                "" if curve is not None else " (is it running? one that uses CURVE needs --curve-secret-key and --curve-server-key)"))
        kind, body = sock.recv_multipart()
        msg = wire.STATUS_CLIENT.decode(kind, body, max_bytes=64 * 2**20)
        return cast(Status, msg.status)  # a map, as decode checked; its keys are the producer's
    finally:
        sock.close(linger=0)


def format_status(status: Status) -> str:
    p = status["producer"]
    service = cast(dict, status).get("service")
    lines = [f"service: clients on {service['endpoint']}  clients {service['clients']}  requests {service['requests']}"
             + (f"  HTTP on {service['http']}" if service.get("http") else "  no HTTP front")] if service else []
    ledger = service.get("ledger") if service else None
    if ledger:
        lines.append(f"  results awaiting acknowledgement {ledger['unacked']} ({ledger['unacked_bytes'] / 2**20:.1f} MiB)  sent {ledger['sent']}"
                     f"  resent {ledger['resent']}  acknowledged {ledger['acked']}  evicted unacknowledged {ledger['evicted']}")
    lines += [
        f"producer {p['endpoint']} (pid {p['pid']} on {p['host']}, up {p['uptime_s']} s)",
        f"  submitted {p['submitted']}  resolved {p['resolved']}  failed {p['failed']}  cache hits {p['cache_hits']}"
        f"  queued {p['queued']}  in flight {p['in_flight']}  redelivered {p['redelivered']}  dropped frames {p['dropped_frames']}",
    ]
    if not status["pools"]:
        lines.append("  no pools connected")
    for pool in status["pools"]:
        lines.append(f"  pool {pool['pool']} ({pool['state']}, host {pool['host'] or '?'}, pid {pool['pid']})")
        lines.append(f"    {'worker':<28} {'pid':>7} {'alive':>5} {'in flight':>9} {'done':>9} {'failed':>7} {'restarts':>8} {'rss MB':>7}")
        for w in pool["workers"]:
            lines.append(
                f"    {w['worker']:<28} {w['pid']:>7} {'yes' if w['alive'] else 'no':>5} {w['in_flight']:>9} "
                f"{w['done']:>9} {w['failed']:>7} {w['restarts']:>8} {w['rss_mb']:>7.0f}"
            )
    for judge in status.get("judges", []):
        lines.append(f"  judge {judge['model']} ({judge['queued']} waiting for capacity)")
        lines.append(f"    {'endpoint':<44} {'state':<20} {'in flight':>9} {'limit':>6} {'ok':>8} {'429s':>6} {'errors':>6} {'p50 s':>6} {'p99 s':>6}")
        for e in judge["endpoints"]:
            errors = e["timeouts"] + e["connect_errors"] + e["other_errors"]
            lines.append(
                f"    {e['url'][:44]:<44} {e['state'][:20]:<20} {e['in_flight']:>9} {e['limit']:>6.1f} {e['ok']:>8} "
                f"{e['status_429']:>6} {errors:>6} {e['latency_p50_s']:>6.3f} {e['latency_p99_s']:>6.3f}"
            )
            if e.get("other_producers"):
                lines.append(f"      shared with {e['other_producers']} other producer(s) on this host: "
                             f"this one may hold {e['share']:.0f} of the limit {e['limit']:.1f}")
    return "\n".join(lines)


def status_main(args: argparse.Namespace) -> int:
    curve = None
    if args.curve_secret_key or args.curve_server_key:
        if not (args.curve_secret_key and args.curve_server_key):
            raise ConfigError("CURVE needs both --curve-secret-key and --curve-server-key")
        curve = CurveClient(args.curve_secret_key, args.curve_server_key)
    endpoints = [check_endpoint(args.connect, what="--connect", connect=True)] if args.connect else local_endpoints()
    if not endpoints:
        print("qworker status: no running producer found on this host; pass --connect ENDPOINT", file=sys.stderr)
        if args.json:
            print("[]")  # still one JSON document for scripts
        return 1
    rc = 0
    found = []
    for ep in endpoints:
        try:
            status = query_status(ep, args.wait, curve)
        except (TimeoutError, QworkerError, zmq.ZMQError) as exc:
            print(f"qworker status: {ep}: {exc}", file=sys.stderr)
            rc = 1
            continue
        if not args.json:
            print(format_status(status))
        found.append(status)
    if args.json:  # one object for --connect; a list (one per producer) when found on this host
        print(json.dumps(found[0] if args.connect and found else found, indent=2))
    return rc


# cache -------------------------------------------------------------------------
def cache_main(args: argparse.Namespace) -> int:
    """``qworker cache stats|clear``: what the persistent result cache holds; clear all of it or one reward's rows."""
    import sqlite3

    path = os.path.expanduser(args.cache or default_cache_path())
    if not os.path.exists(path):
        print(f"qworker cache: no cache at {path}" + ("" if args.cache else " (pass --cache PATH for another)"), file=sys.stderr)
        return 1 if args.action == "stats" else 0
    try:
        cache = DiskCache(path)
    except Exception as exc:  # sqlite3.DatabaseError and OSError: not a cache file, unreadable, locked
        print(f"qworker cache: cannot open {path}: {exc}", file=sys.stderr)
        return 2
    try:
        if args.reward and args.reward not in cache.stats()["rewards"]:
            problem = _unknown_cached_reward(args.reward, cache.stats()["rewards"])
            if problem:
                print(f"qworker cache: {path}: {problem}", file=sys.stderr)
                return 2
        if args.action == "clear":
            deleted = cache.clear(args.reward)
            print(f"deleted {deleted} rows" + (f" of reward {args.reward!r}" if args.reward else "") + f" from {path}")
            return 0
        st = cache.stats()
    except sqlite3.Error as exc:  # locked by a producer for over 30 s, a full disk, a damaged file
        print(f"qworker cache: {args.action} failed on {path}: {exc}", file=sys.stderr)
        return 2
    finally:
        cache.close()
    rewards = st["rewards"] if not args.reward else {k: v for k, v in st["rewards"].items() if k == args.reward}
    if args.json:
        print(json.dumps({**st, "rewards": rewards}, indent=2))
        return 0
    print(f"{path}: {st['rows']} rows, {st['bytes'] / 2**20:.1f} MiB")
    if rewards:
        print(f"  {'reward':<32} {'rows':>10}  {'oldest':<19}  {'newest':<19}")
    for name, r in rewards.items():
        when = [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r[k])) for k in ("oldest", "newest")]
        print(f"  {name:<32} {r['rows']:>10}  {when[0]:<19}  {when[1]:<19}")
    if UNRECORDED in rewards:
        print(f"  {UNRECORDED}: rows written before the cache recorded rewards; 'qworker cache clear' (all) removes them")
    return 0


def _unknown_cached_reward(name: str, with_rows: dict) -> Optional[str]:
    """Why ``--reward NAME`` names nothing (no rows, and no reward registered here), with the closest names; None
    for a known reward that simply has no rows."""
    import difflib

    from .. import rewards as _builtins  # noqa: F401  (registers the built-ins; lazily: math-verify is slow to import)

    known = sorted(set(with_rows) | {n for n in registered() if ":" not in n})
    if name in known:
        return None
    near = difflib.get_close_matches(name, known, 3)
    return (f"--reward {name!r} matches no rows and no known reward" + (f" (did you mean {' or '.join(map(repr, near))}?)" if near else "")
            + f"; rewards with rows: {', '.join(sorted(with_rows)) or 'none'}")


# main --------------------------------------------------------------------------
_OWN_PARSERS = {"mock-judge": ".mock_judge:main", "serve": ".serve:main", "ray-pools": ".ray_pools:main"}


def _parser() -> Parser:
    ap = Parser(prog="qworker", description="Reward computation on a pool of worker processes. Exit codes: 0 done, "
                "1 failed while running, 2 refused at start (usage, config, environment; one line names the fix), 130 Ctrl-C.")
    ap.add_argument("--version", action="version", version=f"qworker {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    # listed alphabetically; 'pool', 'mock-judge', 'serve' and 'ray-pools' parse their own flags
    ca = sub.add_parser("cache", help="inspect or clear the persistent result cache")
    ca.add_argument("action", choices=["stats", "clear"])
    ca.add_argument("--cache", help="the SQLite file (default: $XDG_CACHE_HOME/qworker/results.sqlite or ~/.cache/qworker/...)")
    ca.add_argument("--reward", help="only this reward's rows")
    bool_flag(ca, "json", help="stats as JSON")
    add_log_level(ca)

    for name, what in (("configs", "configs/*.yaml"), ("examples", "examples/*.jsonl rollouts")):
        ex = sub.add_parser(name, help=f"print the directory of the bundled {what} (or copy them with --copy DIR)")
        ex.add_argument("--copy", metavar="DIR", help="copy the files into DIR (created if missing; existing files are kept)")
        add_log_level(ex)

    ks = sub.add_parser("keys", help="create a CURVE key pair (NAME.key public, NAME.key_secret secret) in DIR")
    ks.add_argument("dir", help="where to write the key files")
    ks.add_argument("--name", required=True, help="e.g. producer, or the host name of a pool")
    bool_flag(ks, "force", help="replace an existing pair of that name (peers holding its old public key are locked out)")
    add_log_level(ks)

    sub.add_parser("mock-judge", help="run an OpenAI-compatible mock judge on 127.0.0.1", add_help=False)
    sub.add_parser("pool", help="run a pool daemon (same as qworker-pool)", add_help=False)
    sub.add_parser("ray-pools", help="run a pool on every node of a Ray cluster (needs qworker-rl[ray])", add_help=False)

    sc = sub.add_parser("score", help="score a JSONL file of rollouts")
    sc.add_argument("input", help="JSONL file, one payload object per line; - for stdin")
    sc.add_argument("--reward", required=True, help="reward name, package.module:function, or a name from the config's rewards: section")
    sc.add_argument("--out", required=True, help="JSONL output: each input with its result; - for stdout (no resume)")
    sc.add_argument("--workers", type=int, help="local worker processes (default: CPU count; 0 with --bind)")
    sc.add_argument("--bind", help="also accept remote pools on this endpoint, e.g. tcp://127.0.0.1:5555")
    sc.add_argument("--reward-modules", dest="rewards", action="append", metavar="MODULE", help="reward modules for the workers to import; repeatable")
    hidden_alias(sc, "--rewards", dest="rewards", action="append")
    sc.add_argument("--params", help="reward parameters as a JSON object")
    sc.add_argument("--config", help="YAML config ('producer:' and 'rewards:' sections)")
    sc.add_argument("--cache", help="persistent result cache, an SQLite file (default: the config's cache_path, "
                    "else $XDG_CACHE_HOME/qworker/results.sqlite or ~/.cache/qworker/results.sqlite)")
    bool_flag(sc, "no-cache", help="no persistent result cache: nothing read from it or written to it")
    bool_flag(sc, "refresh", help="recompute every task instead of reading the cache (the new results replace the cached ones)")
    bool_flag(sc, "overwrite", help="score every row again: ignore a partial --out and the cache (implies --refresh)")
    sc.add_argument("--timeout", type=positive_number, help="hard limit per task, seconds (default: 60, or the config's / reward's)")
    sc.add_argument("--pool-timeout", type=positive_number, default=DEFAULT_POOL_TIMEOUT_S, metavar="S",
                    help="with --bind and no local worker: seconds to wait for a first pool to connect before giving up (exit 1)")
    bool_flag(sc, "strict", help="exit 1 if any task failed (without it: exit 1 only when every task failed)")
    sc.add_argument("--skip-bad-lines", type=int, default=0, metavar="N",
                    help="skip up to N input lines that are not JSON (or not UTF-8), naming each; more is an error")
    bool_flag(sc, "quiet", help="no progress line")
    sc.add_argument("--curve-secret-key", help="CURVE (with --bind): this producer's secret key file (NAME.key_secret)")
    sc.add_argument("--curve-allowed-keys", help="CURVE (with --bind): directory of the public keys of pools to admit")
    bool_flag(sc, "insecure", help="allow --bind beyond loopback without CURVE (a trusted network only)")
    add_log_level(sc)

    sub.add_parser("serve", help="serve rewards to qworker.Client processes and over HTTP", add_help=False)

    st = sub.add_parser("status", help="show the pools and workers a producer (or a 'qworker serve') sees")
    st.add_argument("--connect", help="producer or service endpoint (default: every producer running on this host)")
    bool_flag(st, "json", help="print raw JSON")
    st.add_argument("--wait", type=positive_number, default=3.0, help="seconds to wait for each answer")
    hidden_alias(st, "--timeout", dest="wait", type=positive_number)
    add_curve_client(st)
    add_log_level(st)
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pool"]:
        return pool_main(argv[1:], prog="qworker pool")
    if argv[:1] and argv[0] in _OWN_PARSERS:  # verbs that parse their own flags, imported only when used
        module, _, fn = _OWN_PARSERS[argv[0]].partition(":")
        return cast(int, guard(f"qworker {argv[0]}")(getattr(importlib.import_module(module, __package__), fn))(argv[1:]))
    return _main(argv)


@guard("qworker")
def _main(argv: list[str]) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    setup_logging(args.log_level)
    if args.command == "score":
        if args.no_cache and args.cache:
            ap.error("--cache and --no-cache contradict each other")
        args.rewards = _split(args.rewards)
        return score_main(args)
    if args.command in ("examples", "configs"):
        return data_main(args.command, args.copy)
    if args.command == "keys":
        return keys_main(args)
    return cache_main(args) if args.command == "cache" else status_main(args)


def keys_main(args: argparse.Namespace) -> int:
    public, secret = create_keys(args.dir, args.name, force=args.force)
    print(f"public key: {public}  (give it to the other side: the producer's allowed-keys directory, or each pool's --curve-server-key)")
    print(f"secret key: {secret}  (mode 0600; keep it on this host: --curve-secret-key)")
    return 0


def pool_entry() -> int:
    return pool_main()
