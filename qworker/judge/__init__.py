"""LLM judges: one adaptive limit per endpoint, shared by every worker of a producer.

``control`` is the producer's side: ``control.gate.Gate`` holds a judge's tasks until an endpoint
has room (``control.limiter.AdaptiveLimit`` over ``control.estimators``, the endpoint's state in
``control.endpoint``); ``control.registry.JudgeGates`` keeps one gate per judge.  ``client`` is the
worker's side: ``client.http`` calls endpoints (pooled urllib3 with wall-clock deadlines) and
``client.ratelimit`` reads providers' rate-limit headers.  ``settings`` (a judge's parameters) and
``prompt`` (the template) are read by both sides; the reward itself is ``qworker.rewards.llm_judge``.
The mock judge is ``qworker.testing.MockJudge`` (``qworker mock-judge``).
"""
