"""Judge faults: random 503s, resets and hangs; and the API key searched for in every place it could leak."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from qworker import Producer, Result
from tests.chaos_scenarios.measure import Outcome, Timeline, collect, paid_twice
from tests.chaos_scenarios.processes import HB, console_script, start_pool, stop_proc
from tests.chaos_scenarios.recording_judge import RecordingJudge, judge_config, judge_rows


def judge_faults(tmp: Path, n: int) -> Outcome:
    """A judge answering with random 503s (5%), resets (3%) and hangs (0.5%); request timeout 1 s."""
    judge = RecordingJudge(capacity=64, latency_s=0.02, latency_dist="lognormal", sigma=0.6,
                           p_error=0.05, error_status=503, p_reset=0.03, p_hang=0.005, seed=11).start()
    try:
        with Producer(local_workers=2, heartbeat_s=HB, config=judge_config({"url": judge.url}, timeout_s=1.0)) as p:
            futures = p.submit_batch("llm_judge", judge_rows(n, "faults"))
            tl = Timeline(futures)
            results = collect(p, futures, 300)
            ep = p.status()["judges"][0]["endpoints"][0]
        stats = dict(judge.stats)
        twice = paid_twice(judge.answered())
    finally:
        judge.stop_soon()
    failed = [r for r in results if r is not None and not r.ok]
    return Outcome("judge: random 503s, resets, hangs", "a judge answering 5% 503, 3% resets, 0.5% hangs (timeout_s 1)",
                   n, sum(r is None for r in results), twice, 0, len(failed), tl.stall(), 1.0 + 6 * HB,
                   f"limit at the end {ep['limit']} (floor 1); judge saw {stats['requests']} requests, {stats['errors']} errors, "
                   f"{stats['resets']} resets, {stats['hangs']} hangs",
                   {"results": results, "endpoint": ep, "judge_stats": stats, "failed": failed})



def key_leak(tmp: Path, n: int, capture_log: Any = None) -> Outcome:
    """Judge tasks with an API key that the judge echoes in 200 replies and in 401 bodies (JSON-escaped
    slashes); then every place the key could be kept or shown is searched for it and its first 8 characters.

    Phase 1: endpoint A accepts the key and quotes it; endpoint B refuses it (401, quoting it), so B is
    cooled and its reason shows in status.  Phase 2: B alone, so the 401 reaches ``Result.error``.
    The producer runs here (its log is ``capture_log()``, or this process's qworker log at DEBUG);
    the workers run in a ``qworker-pool`` with ``--log-level DEBUG``, its stderr kept."""
    import logging
    import urllib.parse

    secret = f"sk-{os.urandom(3).hex()}/{os.urandom(6).hex()}/{os.urandom(6).hex()}"
    env = {**os.environ, "QW_CHAOS_JUDGE_KEY": secret}
    a = RecordingJudge(capacity=32, latency_s=0.01, api_key=secret, echo_key=True).start()
    b = RecordingJudge(capacity=32, latency_s=0.01, api_key="sk-the-right-one", echo_key=True).start()
    db = tmp / "leak-cache.sqlite"
    pool_log = tmp / "pool.log"
    records: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    keep = _Keep(logging.DEBUG)
    keep.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    qlog = logging.getLogger("qworker")
    old_level = qlog.level
    qlog.addHandler(keep)
    qlog.setLevel(logging.DEBUG)
    texts: dict[str, str] = {}
    unresolved = ok1 = redacted_replies = 0
    failed2: list[Result] = []
    try:
        with open(pool_log, "w") as err:
            pool = None
            try:
                for phase, eps in (("1", [a, b]), ("2", [b])):
                    cfg = judge_config(*({"url": e.url, "api_key_env": "QW_CHAOS_JUDGE_KEY"} for e in eps), dead_after_s=3)
                    with Producer(bind="tcp://127.0.0.1:0", local_workers=0, heartbeat_s=HB, cache_path=str(db), config=cfg) as p:
                        pool = start_pool(p.endpoint, "--workers", "1", "--id", f"leak{phase}", "--log-level", "DEBUG", stderr=err, env=env)
                        p.wait_for_workers(1, timeout=60)
                        results = collect(p, p.submit_batch("llm_judge", judge_rows(n, f"leak{phase}")), 120)
                        unresolved += sum(r is None for r in results)
                        texts[f"results, phase {phase}"] = "\n".join(repr(r) for r in results)
                        texts[f"status(), phase {phase}"] = json.dumps(p.status())
                        cli = subprocess.run([console_script("qworker"), "status", "--connect", p.endpoint, "--json"],
                                             capture_output=True, text=True, timeout=60)
                        texts[f"qworker status --json, phase {phase}"] = cli.stdout + cli.stderr
                        stop_proc(pool)
                        pool = None
                    if phase == "1":
                        ok1 = sum(r is not None and r.ok for r in results)
                        redacted_replies = sum(r is not None and r.ok and "***" in str(r.extra.get("reply")) for r in results)
                    else:
                        failed2 = [r for r in results if r is not None and not r.ok]
            finally:
                if pool is not None:
                    stop_proc(pool)
    finally:
        qlog.removeHandler(keep)
        qlog.setLevel(old_level)
        a.stop()
        b.stop()
    texts["producer log"] = "\n".join(records) + (capture_log() if capture_log else "")
    texts["pool and worker log"] = pool_log.read_text()
    cache_bytes = b"".join(Path(f).read_bytes() for f in sorted(tmp.glob("leak-cache.sqlite*")))
    needles = {
        "the key": secret, "the key, JSON-escaped": secret.replace("/", "\\/"), "the key, \\u002f": secret.replace("/", "\\u002f"),
        "the key, URL-encoded": urllib.parse.quote(secret, safe=""), "its first 8 characters": secret[:8],
        **{f"its part {i + 1}": part for i, part in enumerate(secret.split("/")[1:])},
    }
    found = {f"{what} in {where}" for where, text in texts.items() for what, needle in needles.items() if needle in text}
    found |= {f"{what} in the disk cache's bytes" for what, needle in needles.items() if needle.encode() in cache_bytes}
    places = len(texts) + 1
    return Outcome("the key in every place it could leak", "a judge echoing the API key in 200 replies and 401 bodies "
                   "(JSON-escaped slashes); Results, disk cache bytes, logs, status searched", 2 * n,
                   unresolved, None, 0, n - ok1, None, 0.0,
                   f"key found in {len(found)} of {places} places x {len(needles)} forms",
                   {"found": sorted(found), "ok1": ok1, "redacted_replies": redacted_replies, "failed2": failed2,
                    "b_requests": b.stats["requests"], "a_requests": a.stats["requests"], "texts": texts, "secret": secret,
                    "cache_bytes": len(cache_bytes)}, clean=not found)
