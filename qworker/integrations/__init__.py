"""Adapters that let RL frameworks score rewards with qworker.

Each adapter lives in its own module and imports its framework only when that
module is imported (``pip install 'qworker-rl[verl]'``, ``[trl]``, ``[openrlhf]``):

* ``qworker.integrations.verl``: ``compute_score`` and ``QworkerRewardManager``;
* ``qworker.integrations.trl``: ``QworkerReward`` / ``AsyncQworkerReward`` for
  ``GRPOTrainer(reward_funcs=...)`` and ``QworkerGRPOTrainer``, which submits the
  rewards as soon as completions exist and gathers them when advantages need them;
* ``qworker/integrations/openrlhf_reward_func.py``: a file for OpenRLHF's
  ``--reward.remote_url``;
* ``qworker.integrations.slime``: ``rm`` and ``group_rm`` for ``--custom-rm-path``.

All score through one process-wide client (``service.client.reward_client``): the
service named by ``QWORKER_CONNECT``, or a pool embedded in the process.  How
each framework's fields map onto the payload is in ``_payload``; which reward
is used and how failures show is in ``_outcome``.
"""

from ._client import close_client, reward_client, use_client

__all__ = ["close_client", "reward_client", "use_client"]
