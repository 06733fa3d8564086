"""LLM judges: one adaptive limit per endpoint, shared by every worker of a producer.

``gate.Gate`` holds a judge's tasks in the producer until an endpoint has room
(``limiter.AdaptiveLimit`` over the ``estimators``, the endpoint's state in ``endpoint``, providers'
rate-limit headers read by ``ratelimit``); ``registry.JudgeGates`` keeps one gate
per judge.  Workers call endpoints through ``http`` (pooled urllib3 with
wall-clock deadlines); the reward itself is ``qworker.rewards.llm_judge``.
``mock.MockJudge`` is an OpenAI-compatible judge that behaves like real ones,
for demos, tests and benchmarks (``qworker mock-judge``).
"""
