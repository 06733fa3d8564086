"""Chaos scenarios: real processes, real sockets, one fault injected each.

Shared by ``tests/chaos/test_one_fault_at_a_time_loses_nothing.py`` (small sizes, with assertions) and
``bench/chaos.py`` (larger sizes, one table).  Each scenario returns an
``Outcome`` with these figures:

* **lost**: tasks unresolved, or resolved with the wrong score (a reward whose
  score is its input index shows a missing or misplaced result);
* **paid twice**: judge calls answered twice for one prompt, counted by the judge
  itself (``RecordingJudge``); elsewhere, evaluations counted by ``count_eval``,
  which appends a line per call;
* **innocent failures**: tasks that failed but were not the faulty ones;
* **stall**: the longest gap with no result while work was pending.

The judge is the only thing mocked (``qworker.testing.mockjudge.MockJudge``, in this
process, so it counts every call server-side).

The modules, by scenario family:

* ``workers``: a killed or stopped local worker, hung tasks, a killed pool daemon;
* ``producer``: a killed trainer with the disk cache, scoring with a judge;
* ``judges``: a judge's 503s, resets and hangs; the API key searched for everywhere;
* ``peers``: garbage on every reachable socket; a rogue peer;
* ``seams_*``: faults between components: ``seams_producer``, several
  threads submitting while a cache tier raises and another thread closes;
  ``seams_disk``, a cache disk that fills, locks and holds damaged rows;
  ``seams_transport``, results near and over the frame limit; ``seams_judge``, a
  judge down for 2 s, and hostile headers, giant bodies and an outage interleaved;
  ``seams_link``, the TCP link between a Client and ``qworker serve`` cut again
  and again (``tests/faults/proxy.py``);

and what they share: ``measure`` (``Outcome`` and its counts), ``processes``
(pools, ports, waiting), ``recording_judge`` (the judge that counts).
"""

from __future__ import annotations

from qworker.cache.disk import COMMIT_WITHIN_S
from tests.chaos_scenarios.judges import judge_faults, key_leak
from tests.chaos_scenarios.measure import Outcome
from tests.chaos_scenarios.peers import garbage, rogue_peer
from tests.chaos_scenarios.processes import HB
from tests.chaos_scenarios.producer import producer_sigkill_judge
from tests.chaos_scenarios.recording_judge import RecordingJudge
from tests.chaos_scenarios.seams_disk import disk_faults
from tests.chaos_scenarios.seams_judge import hostile_judge, judge_outage
from tests.chaos_scenarios.seams_link import link_cuts
from tests.chaos_scenarios.seams_producer import submit_close_interleavings
from tests.chaos_scenarios.seams_transport import big_results
from tests.chaos_scenarios.workers import hung_tasks, pool_sigkill, worker_sigkill, worker_sigstop

__all__ = [
    "COMMIT_WITHIN_S", "HB", "Outcome", "RecordingJudge",
    "worker_sigkill", "worker_sigstop", "hung_tasks", "pool_sigkill",
    "producer_sigkill_judge",
    "judge_faults", "key_leak",
    "garbage", "rogue_peer",
    "submit_close_interleavings", "disk_faults", "big_results", "judge_outage", "hostile_judge", "link_cuts",
]
