"""Result-cache microbenchmark: what the memory tier costs per operation as it fills.

In one process, no workers: for each size (``--sizes``, entries already held), a fresh
``MemoryCache(max_entries=--max-entries)`` is filled with that many entries (16-byte keys, as
``task_key`` makes, a score and an empty ``extra``: a no-op task's result), in ``put_many`` batches
of ``--batch`` (256), as the dispatcher writes them.  Then, timed, each per operation:

  miss       ``holds(key)`` of a key never stored (the pending table's lookup for a fresh task)
  put        ``put_many`` of fresh keys in batches of ``--batch`` (at ``--max-entries``, each put evicts)
  hit        ``get(key)`` of stored keys, in random order (each moves its entry to the most recent end)
  full gc    one ``gc.collect()`` (ms) with the cache held: what a full collection pays for it

``--ops`` operations each (miss/put/hit), median of ``--repeats`` rounds.  Run it from the tree it
measures: it imports the ``qworker`` of the working directory.

    python bench/cache_size.py                       # sizes 0, 100k, 400k, 1M
    python bench/cache_size.py --sizes 0,100000 --ops 20000 --repeats 1
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())

from qworker.cache.memory import MemoryCache  # noqa: E402


def keys(n: int, rng: random.Random) -> list[bytes]:
    return [rng.randbytes(16) for _ in range(n)]


def fill(cache: MemoryCache, ks: list[bytes], batch: int) -> None:
    for i in range(0, len(ks), batch):
        cache.put_many([(k, 1.0, {}) for k in ks[i : i + batch]])


def one_round(size: int, args: argparse.Namespace, rng: random.Random) -> dict[str, float]:
    cache = MemoryCache(max_entries=args.max_entries)
    held = keys(size, rng)
    fill(cache, held, args.batch)
    fresh = keys(args.ops, rng)
    holds = cache.holds
    t = time.perf_counter()
    for k in fresh:
        holds(k)
    miss = (time.perf_counter() - t) / len(fresh)
    rows: list[list[tuple]] = [[(k, 1.0, {}) for k in fresh[i : i + args.batch]] for i in range(0, len(fresh), args.batch)]
    put_many = cache.put_many
    t = time.perf_counter()
    for r in rows:
        put_many(r)
    put = (time.perf_counter() - t) / len(fresh)
    stored = (held + fresh)[-min(len(cache), len(held) + len(fresh)):]
    probe = [rng.choice(stored) for _ in range(args.ops)]
    get = cache.get
    t = time.perf_counter()
    for k in probe:
        get(k)
    hit = (time.perf_counter() - t) / len(probe)
    del held, fresh, rows, stored, probe  # the collection then scans the cache, not this round's own lists
    gc.collect()  # (untimed: what they left)
    t = time.perf_counter()
    gc.collect()
    full = time.perf_counter() - t
    return {"miss": miss * 1e9, "put": put * 1e9, "hit": hit * 1e9, "gc": full * 1e3, "len": len(cache)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0,100000,400000,1000000")
    ap.add_argument("--max-entries", type=int, default=1_000_000)
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import qworker

    print(f"qworker from {os.path.dirname(qworker.__file__)}; max_entries {args.max_entries}, {args.ops} ops, "
          f"batch {args.batch}, median of {args.repeats}")
    print(f"{'size':>9} {'entries':>9} {'miss ns':>8} {'put ns':>8} {'hit ns':>8} {'full gc ms':>10}")
    rng = random.Random(1)
    for size in (int(s) for s in args.sizes.split(",")):
        rounds = [one_round(size, args, rng) for _ in range(args.repeats)]
        med = {f: statistics.median(r[f] for r in rounds) for f in rounds[0]}
        print(f"{size:>9} {int(med['len']):>9} {med['miss']:>8.0f} {med['put']:>8.0f} {med['hit']:>8.0f} {med['gc']:>10.1f}")


if __name__ == "__main__":
    main()
