"""Producer seams: a disk tier that raises at random while several threads submit and another closes.

Randomised interleavings (seeded): submitting threads draw batches from one
shared range of payloads, so they share tasks in flight and hit each other's
cached results; the disk tier's read raises on a share of the calls; at a
random moment another thread closes the producer, while they submit (odd
rounds) or once they have stopped and their futures had ``RESOLVE_WITHIN_S``
to resolve (even rounds: a future still pending then was stranded).  Every
future handed out must resolve (scored right, or ``cancelled`` by a racing
close), nothing twice paid within one producer, and ``close`` must leave
nothing pending.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from pathlib import Path

from qworker import Producer, ProducerClosed
from tests.chaos_scenarios.measure import Outcome, evaluations, paid_twice
from tests.conftest import TEST_REWARDS

RESOLVE_WITHIN_S = 30.0


def submit_close_interleavings(tmp: Path, n: int, *, rounds: int = 3, threads: int = 4, seed: int = 0) -> Outcome:
    """``rounds`` producers, each fed by ``threads`` submitting threads and closed at a random moment."""
    rng = random.Random(seed)
    log = tmp / "evals"
    handed = lost = innocent = raised = cancelled = left = 0
    twice = 0
    for r in range(rounds):
        p = Producer(local_workers=2, reward_modules=[TEST_REWARDS], cache_path=str(tmp / f"cache-{r}.sqlite"))
        real = p.cache.get_persistent
        fail_share = rng.uniform(0.1, 0.4)
        draws = random.Random(rng.random())
        lock = threading.Lock()

        def flaky(keys, real=real, fail_share=fail_share, draws=draws, lock=lock):
            with lock:
                fail = draws.random() < fail_share
            if fail:
                raise sqlite3.OperationalError("disk I/O error (injected)")
            return real(keys)

        p.cache.get_persistent = flaky  # type: ignore[method-assign]
        rlog = tmp / f"evals-{r}"
        out: list[tuple[int, object]] = []  # (payload index, future)
        errors: list[BaseException] = []

        stop = threading.Event()
        racing = r % 2 == 1

        def submit(seed_t: float, rlog: Path = rlog, p: Producer = p, out: list = out, errors: list = errors,
                   stop: threading.Event = stop) -> None:
            g = random.Random(seed_t)
            while not stop.is_set():
                idx = [g.randrange(n) for _ in range(g.randint(1, 200))]
                try:
                    futs = p.submit_batch("count_eval", [{"log": str(rlog), "i": i, "sleep_ms": 1} for i in idx])
                except ProducerClosed:
                    return
                except sqlite3.OperationalError as exc:
                    errors.append(exc)
                    continue
                out.extend(zip(idx, futs, strict=True))
                time.sleep(g.uniform(0, 0.02))

        ts = [threading.Thread(target=submit, args=(rng.random(),), daemon=True) for _ in range(threads)]
        for t in ts:
            t.start()
        time.sleep(rng.uniform(0.5, 2.0))
        if not racing:
            stop.set()
            for t in ts:
                t.join(60)
            deadline = time.monotonic() + RESOLVE_WITHIN_S
            for _, f in out:
                try:
                    f.exception(timeout=max(0.0, deadline - time.monotonic()))  # type: ignore[attr-defined]
                except TimeoutError:
                    break  # stranded: counted below
        closer = threading.Thread(target=p.close)
        closer.start()
        closer.join(60)
        for t in ts:
            t.join(60)
        left += len(p._table)
        deadline = time.monotonic() + RESOLVE_WITHIN_S
        for i, f in out:
            handed += 1
            try:
                res = f.result(timeout=max(0.0, deadline - time.monotonic()))  # type: ignore[attr-defined]
            except TimeoutError:
                lost += 1
                continue
            if not racing and res.error_kind == "cancelled":  # it was still pending after its threads stopped
                lost += 1
                continue
            if res.ok:
                lost += res.score != float(i)
            elif res.error_kind == "cancelled":
                cancelled += 1
            else:
                innocent += 1
        raised += len(errors)
        twice += paid_twice(evaluations(rlog))
        if rlog.exists():
            log.write_text((log.read_text() if log.exists() else "") + rlog.read_text())
    return Outcome(
        "submit/close interleavings", f"{rounds} producers x {threads} submitting threads, the disk tier's read raising "
        "on 10-40% of calls, close() from another thread while they submit (odd rounds) or after", handed, lost + left, twice, 0, innocent, None, 0.0,
        f"{handed} futures handed out: {cancelled} cancelled by close, {raised} submissions raised the injected error; "
        f"left pending after close {left}",
    )
