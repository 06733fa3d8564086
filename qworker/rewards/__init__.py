"""Built-in rewards, registered when this package is imported (every worker does).

Every built-in reads the payload convention of ``_payload``: ``response``,
``ground_truth``, and optionally ``prompt``, ``data_source``, ``extra_info``,
``response_length`` and ``max_response_length``.

========================  ====================================================
``math``                  final-answer correctness with math-verify
``gsm8k``                 verl's strict GSM8K rule (last ``#### number``)
``format``, ``tag_count`` ``<think>/<answer>`` layout: regex match, partial credit
``length_penalty``        DAPO overlong buffer, or a peaked length penalty
``code_tests``            generated Python or C++ against tests, confined (Landlock + seccomp), judged outside the program
``llm_judge``             an OpenAI-compatible judge over pooled HTTP (kind="io")
``noop``, ``spin``, ...   diagnostics for measuring a pool
========================  ====================================================
"""

from . import code_tests, diagnostic, format, gsm8k, length_penalty, llm_judge, math_answer

__all__ = ["code_tests", "diagnostic", "format", "gsm8k", "length_penalty", "llm_judge", "math_answer"]
