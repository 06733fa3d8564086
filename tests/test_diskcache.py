import multiprocessing as mp
import time

from qworker._diskcache import DiskCache


def _writer(path: str, start: int) -> None:
    c = DiskCache(path)
    for i in range(start, start + 500):
        c.put(i.to_bytes(16, "little"), float(i), {"i": i})
    c.close()


def test_roundtrip_and_survives_reopening(tmp_path):
    path = str(tmp_path / "new" / "dir" / "c.sqlite")  # parent directories are created
    c = DiskCache(path)
    c.put(b"k" * 16, 0.5, {"pred": "4", "nested": {"a": [1, 2]}})
    c.close()
    again = DiskCache(path)
    assert again.get_many([b"k" * 16, b"x" * 16]) == {b"k" * 16: (0.5, {"pred": "4", "nested": {"a": [1, 2]}})}
    again.close()


def test_processes_share_it_safely(tmp_path):
    path = str(tmp_path / "c.sqlite")
    DiskCache(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, n * 500)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    c = DiskCache(path)
    found = c.get_many(i.to_bytes(16, "little") for i in range(1500))
    assert len(found) == 1500 and found[(1234).to_bytes(16, "little")] == (1234.0, {"i": 1234})
    c.close()


def test_max_entries_keeps_the_newest(tmp_path):
    c = DiskCache(str(tmp_path / "c.sqlite"), max_entries=10)
    for i in range(30):
        c.put(i.to_bytes(16, "little"), float(i), {})
        c.flush()
    found = c.get_many(i.to_bytes(16, "little") for i in range(30))
    assert sorted(int.from_bytes(k, "little") for k in found) == list(range(20, 30))
    c.close()


def test_ttl_hides_old_rows(tmp_path):
    c = DiskCache(str(tmp_path / "c.sqlite"), ttl_s=0.1)
    c.put(b"a" * 16, 1.0, {})
    c.flush()
    assert c.get_many([b"a" * 16])
    time.sleep(0.15)
    assert c.get_many([b"a" * 16]) == {}
    c.close()
