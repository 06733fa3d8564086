"""The ``qworker`` command line: ``main`` parses and dispatches; ``score``, ``serve``, ``ray_pools`` and ``mock_judge`` each run one verb.

``args`` (the parser, ``--flag/--no-flag``, ``guard`` and the exit codes) is public: other command
lines built on qworker, such as the trainer's ``qworker-train``, use it.
"""
