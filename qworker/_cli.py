"""Command line: ``qworker score | status | pool | ray-pools`` and ``qworker-pool``."""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import signal
import sys
import time
from typing import Any, Optional

import zmq

from . import _config
from ._exceptions import ConfigError, QworkerError
from ._options import PoolOptions
from ._progress import Progress
from .transport import wire
from .transport.sockets import make_socket, runtime_dir

log = logging.getLogger("qworker")


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)


def _split(values: Optional[list[str]]) -> list[str]:
    return [m for v in values or [] for m in v.split(",") if m]


# pool --------------------------------------------------------------------------
def pool_main(argv: Optional[list[str]] = None, prog: str = "qworker-pool") -> int:
    from .host.pool import Pool

    ap = argparse.ArgumentParser(prog=prog, description="Run a pool of reward workers that serve a producer.")
    ap.add_argument("--config", help="YAML config; its 'pool:' section gives defaults")
    PoolOptions.add_arguments(ap)
    args = ap.parse_args(argv)
    try:
        options = PoolOptions.from_args(args, _config.load(args.config)["pool"], where=args.config or prog)
        if not options.connect:
            raise ConfigError("no producer endpoint: pass --connect tcp://HOST:PORT or set pool.connect in the config")
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    _setup_logging(options.log_level)
    pool = Pool(options)
    signal.signal(signal.SIGTERM, pool.request_stop)
    signal.signal(signal.SIGINT, pool.request_stop)
    return pool.run()


# status ------------------------------------------------------------------------
def query_status(endpoint: str, timeout_s: float = 3.0) -> dict:
    """Ask the producer at ``endpoint`` for its status."""
    ctx = zmq.Context.instance()
    sock = make_socket(ctx, zmq.DEALER, connect=endpoint)
    try:
        sock.send_multipart(wire.encode(wire.StatusRequest()))
        if not sock.poll(int(timeout_s * 1000)):
            raise TimeoutError(f"no answer from {endpoint} within {timeout_s:.0f} s")
        kind, body = sock.recv_multipart()
        msg = wire.decode(kind, body, max_bytes=64 * 2**20)
        if not isinstance(msg, wire.StatusReply):
            raise wire.WireError(f"expected a status reply, got {type(msg).__name__}")
        return msg.status
    finally:
        sock.close(linger=0)


def _local_endpoints() -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(runtime_dir(), "producer-*.json"))):
        try:
            with open(path) as f:
                note = json.load(f)
            os.kill(int(note["pid"]), 0)
        except (OSError, ValueError, KeyError):
            continue  # stale note of a producer that is gone
        out.append(note["endpoint"])
    return out


def format_status(status: dict) -> str:
    p = status["producer"]
    lines = [
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
    return "\n".join(lines)


def status_main(args: argparse.Namespace) -> int:
    endpoints = [args.connect] if args.connect else _local_endpoints()
    if not endpoints:
        print("qworker status: no running producer found on this host; pass --connect ENDPOINT", file=sys.stderr)
        return 1
    rc = 0
    for ep in endpoints:
        try:
            status = query_status(ep, args.timeout)
        except (TimeoutError, QworkerError, zmq.ZMQError) as exc:
            print(f"qworker status: {ep}: {exc}", file=sys.stderr)
            rc = 1
            continue
        print(json.dumps(status, indent=2) if args.json else format_status(status))
    return rc


# score -------------------------------------------------------------------------
def _read_jsonl(path: str) -> list[Any]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
    return rows


def score_main(args: argparse.Namespace) -> int:
    from ._producer import Producer

    try:
        rows = _read_jsonl(args.input)
        params = json.loads(args.params) if args.params else None
        if params is not None and not isinstance(params, dict):
            raise ConfigError("--params must be a JSON object")
    except (OSError, ConfigError, json.JSONDecodeError) as exc:
        print(f"qworker score: {exc}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        producer = Producer(
            config=args.config, local_workers=args.workers, bind=args.bind, reward_modules=_split(args.rewards) or None,
            cache_path=args.cache, task_timeout_s=args.timeout,
        )
    except QworkerError as exc:
        print(f"qworker score: {exc}", file=sys.stderr)
        return 2
    with producer:
        if args.bind:
            print(f"qworker score: waiting for pools on {producer.endpoint}", file=sys.stderr)
        started = time.monotonic()
        try:
            futures = producer.submit_batch(args.reward, rows, params=params)
        except QworkerError as exc:
            print(f"qworker score: {exc}", file=sys.stderr)
            return 2
        progress = Progress(len(futures), enabled=not args.quiet)
        for f in futures:
            f.add_done_callback(progress.advance)
        results = producer.gather(futures)
        progress.close()
        elapsed = time.monotonic() - started
        counts = producer.status()["producer"]
        with open(args.out, "w", encoding="utf-8") as out:
            for row, r in zip(rows, results, strict=False):
                out.write(json.dumps({"input": row, **r.to_dict()}) + "\n")
    failed = [r for r in results if r.error]
    hits = sum(r.cached for r in results)
    n = len(results)
    mean = sum(r.score for r in results if not r.error) / max(1, n - len(failed))
    print(
        f"scored {n} tasks with '{args.reward}' in {elapsed:.2f} s ({n / max(elapsed, 1e-9):,.0f} tasks/s; "
        f"{time.monotonic() - t0:.2f} s with start-up)\n"
        f"  evaluated {counts['resolved']}  duplicates {counts['deduplicated']}  cache hits {hits}  failed {len(failed)}"
        f"  mean score {mean:.4f}  -> {args.out}",
        file=sys.stderr,
    )
    kinds: dict[str, int] = {}
    for r in failed:
        kinds[r.error_kind or "?"] = kinds.get(r.error_kind or "?", 0) + 1
    if kinds:
        print("  failures: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())), file=sys.stderr)
        print(f"  first failure: {failed[0].error}", file=sys.stderr)
    return 1 if failed and args.strict else 0


# main --------------------------------------------------------------------------
def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pool"]:
        return pool_main(argv[1:], prog="qworker pool")
    if argv[:1] == ["mock-judge"]:
        from ._mockjudge import main as mock_judge_main

        return mock_judge_main(argv[1:])
    if argv[:1] == ["ray-pools"]:
        from .launchers.ray import main as ray_pools_main

        return ray_pools_main(argv[1:])
    ap = argparse.ArgumentParser(prog="qworker", description="Reward computation on a pool of worker processes.")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("pool", help="run a pool daemon (same as qworker-pool)", add_help=False)
    sub.add_parser("mock-judge", help="run an OpenAI-compatible mock judge on 127.0.0.1", add_help=False)
    sub.add_parser("ray-pools", help="run a pool on every node of a Ray cluster (needs qworker[ray])", add_help=False)

    sc = sub.add_parser("score", help="score a JSONL file of rollouts")
    sc.add_argument("input", help="JSONL file, one payload object per line")
    sc.add_argument("--reward", required=True, help="reward name, package.module:function, or a name from the config's rewards: section")
    sc.add_argument("--out", required=True, help="JSONL output: each input with its result")
    sc.add_argument("--workers", type=int, help="local worker processes (default: CPU count; 0 with --bind)")
    sc.add_argument("--bind", help="also accept remote pools on this endpoint, e.g. tcp://127.0.0.1:5555")
    sc.add_argument("--rewards", action="append", help="reward modules for the workers to import; repeatable")
    sc.add_argument("--params", help="reward parameters as a JSON object")
    sc.add_argument("--config", help="YAML config ('producer:' and 'rewards:' sections)")
    sc.add_argument("--cache", help="persistent result cache (SQLite file)")
    sc.add_argument("--timeout", type=float, help="hard limit per task, seconds")
    sc.add_argument("--strict", action="store_true", help="exit 1 if any task failed")
    sc.add_argument("--quiet", action="store_true", help="no progress bar")
    sc.add_argument("--log-level", default="WARNING")

    st = sub.add_parser("status", help="show the pools and workers a producer sees")
    st.add_argument("--connect", help="producer endpoint (default: every producer running on this host)")
    st.add_argument("--json", action="store_true", help="print raw JSON")
    st.add_argument("--timeout", type=float, default=3.0)
    st.add_argument("--log-level", default="WARNING")

    args = ap.parse_args(argv)
    _setup_logging(args.log_level)
    return score_main(args) if args.command == "score" else status_main(args)


def pool_entry() -> int:
    return pool_main()
