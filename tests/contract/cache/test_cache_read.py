"""``ProducerOptions.cache_read``: False recomputes every task (no memory, disk or registration-time cache
reads) and still writes the results to the cache (real producer, real workers, real SQLite)."""

from qworker import Producer

PAYLOADS = [{"response": f"#### {i}", "ground_truth": "3"} for i in range(20)]


def test_no_cache_read_recomputes_and_still_writes_the_cache(tmp_path):
    db = str(tmp_path / "c.sqlite")
    with Producer(local_workers=1, cache_path=db) as p:
        assert not any(r.cached for r in p.map("gsm8k", PAYLOADS, timeout=60))
    with Producer(local_workers=1, cache_path=db, cache_read=False) as p:
        first = p.map("gsm8k", PAYLOADS, timeout=60)
        again = p.map("gsm8k", PAYLOADS, timeout=60)  # the memory tier holds them now: still not read
        assert not any(r.cached for r in first + again) and p.status()["producer"]["cache_hits"] == 0
        assert [r.score for r in again] == [1.0 if i == 3 else 0.0 for i in range(20)]
    with Producer(local_workers=1, cache_path=db) as p:
        assert all(r.cached for r in p.map("gsm8k", PAYLOADS, timeout=60))
