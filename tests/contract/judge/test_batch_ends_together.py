"""A server that batches in steps and ends its sequences together (vLLM with replies of one length), in simulated time.

``judgesim.BatchServer``: 16 sequences at once, each 16 steps of 5 ms (80 ms) from the step that admitted it, so the
sequences admitted together free their slots together; the rest wait.  What keeps its batch full is the next batch
waiting at the server: a slot freed with nothing waiting stays empty until a replacement comes through the client.
"""

from __future__ import annotations

from tests.contract.judge import judgesim

BATCH, STEP, STEPS = 16, 0.005, 16


def stepped(metrics: bool, transit: tuple[float, float]) -> tuple[float, float, list[float]]:
    """(the share of slot-seconds serving, the mean seconds a request queued at the server after 2 s, the limits after
    2 s) for 3,000 tasks from one client."""
    sim = judgesim.Sim()
    server = judgesim.BatchServer(capacity=BATCH, step=STEP, steps=STEPS)
    client = judgesim.Client(sim, server, 3000, metrics=metrics, transit=transit)
    end = sim.run([client])
    assert len(client.done_at) == 3000 and not client.failed
    queued = [w for t, w in server.waits if t >= 2.0]
    return server.stats["service_s"] / (BATCH * end), sum(queued) / len(queued), [lim for t, lim in client.limits if t >= 2.0]


def test_a_metrics_reading_between_a_batch_end_and_its_refill_does_not_cut_the_next_batch():
    """The server logs its counts after each step: when a batch has just ended, it shows few running and the next batch
    waiting, before admitting it.  That is no queue past a batch (the batch is what runs at its high), so the limit
    keeps the next batch waiting: the slots are busy 99% of the time, and the limit stays above a batch."""
    busy, queued, limits = stepped(True, (0.005, 0.005))
    assert busy >= 0.99, f"the batch was busy {busy:.3f} of the time"
    assert min(limits) >= BATCH, f"the limit went down to {min(limits):.1f}"
    assert queued <= 1.5 * STEPS * STEP, f"a request queued {queued * 1000:.0f} ms on average"
