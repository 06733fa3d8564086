"""The admission-policy seam in real workers: the policy's meta reaches the reward, and the reward's report reaches the policy."""

from __future__ import annotations

from qworker import Producer
from tests.admission_policy import SOURCES
from tests.conftest import TEST_REWARDS


def test_a_reward_that_declares_a_policy_gets_its_meta_in_the_worker_and_the_policy_gets_the_rewards_report():
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS], task_timeout_s=20) as p:
        results = p.map("admitted_call", [{"i": i} for i in range(3)], params={"slots": 1}, timeout=60)
        policy = SOURCES[-1].policies[1]
        assert [r.extra["meta"] for r in results] == [{"slot": 0}] * 3 and all(r.error is None for r in results)
        assert policy.reported == [{"saw": {"slot": 0}, "busy": False}] * 3
