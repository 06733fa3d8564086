import time

from qworker.host.slot import TaskSlot


def test_slot_is_shared_between_writer_and_reader(tmp_path):
    path = str(tmp_path / "slot")
    writer = TaskSlot(path, create=True)
    reader = TaskSlot(path)
    assert reader.read() is None
    now = time.monotonic()
    writer.begin(b"k" * 16, now, now + 5)
    assert reader.read() == (b"k" * 16, now, now + 5)
    writer.end()
    assert reader.read() is None
    writer.close()
    reader.close()
    writer.unlink()
