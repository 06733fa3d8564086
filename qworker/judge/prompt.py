"""The judge prompt: the default template and how a payload fills it.

Shared by the reward that sends the prompt (``rewards.llm_judge``) and the
gate's prefix routing (``routing.affinity_text``), which must render it the
same way; a leaf module, so the gate never imports the reward plug-in.
"""

from __future__ import annotations

import json
import re

__all__ = ["DEFAULT_TEMPLATE", "render"]

DEFAULT_TEMPLATE = (
    "You are grading a model's answer.\n\nQuestion:\n{prompt}\n\nReference answer:\n{ground_truth}\n\n"
    "Model's answer:\n{response}\n\n{rubric}\nReply with a short justification, then a last line 'Score: N' "
    "with N from 0 to 10."
)
_PLACEHOLDER = re.compile(r"\{(prompt|response|ground_truth|rubric)\}")


def render(template: str, payload: dict, rubric: str) -> str:
    """The template with its four placeholders filled from the payload (other braces untouched)."""
    values = {
        "prompt": payload.get("prompt", ""), "response": payload.get("response", ""),
        "ground_truth": payload.get("ground_truth", ""), "rubric": rubric,
    }

    def fill(m: re.Match) -> str:
        v = values[m.group(1)]
        return v if isinstance(v, str) else json.dumps(v)

    return _PLACEHOLDER.sub(fill, template)
