"""Final-answer extraction from a model's response.

Three markers, and the one that *starts last* in the text wins (the model's
final statement of its answer):

* ``\\boxed{...}`` or ``\\fbox{...}``, braces matched (``\\{`` and ``\\}`` are
  literal braces and do not count); ``\\boxed 5`` (no braces) runs to the next
  ``$`` or end of line;
* ``<answer>...</answer>``;
* ``#### ...`` (GSM8K), to the end of its line.

An unclosed ``\\boxed{`` or ``<answer>`` is not an answer.  Everything here is
linear in the response length: a 1 MB response costs milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

__all__ = ["Answer", "final_answer", "last_boxed", "last_answer_tag", "last_hash_answer"]

_BOXED = re.compile(r"\\(?:boxed|fbox)\b")
_BRACE = re.compile(r"\\[{}]|[{}]")
_ARG = re.compile(r"\s*(\{)|[ \t]+([^$\n]*[^$\s])")
_HASH = re.compile(r"####[ \t]*([^\n]*)")
MAX_TRIES = 16  # unclosed \boxed{ tried from the end before giving up (bounds the work)


@dataclass(frozen=True, slots=True)
class Answer:
    text: str  # the answer itself, without its marker
    source: str  # "boxed", "answer_tag" or "hash"
    start: int  # offset of the marker in the response


def _matched(text: str, open_at: int) -> Optional[int]:
    """Offset of the brace closing the one at ``open_at``, or None."""
    depth = 0
    for m in _BRACE.finditer(text, open_at):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return None


def last_boxed(text: str) -> Optional[Answer]:
    """The content of the last complete ``\\boxed{}``/``\\fbox{}``."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    for cmd_end in reversed(starts[-MAX_TRIES:]):
        arg = _ARG.match(text, cmd_end)
        start = cmd_end - (6 if text[cmd_end - 6:cmd_end] == "\\boxed" else 5)
        if arg is None:
            continue
        if arg.group(1):  # "{": the argument runs to the matching brace
            close = _matched(text, arg.end() - 1)
            if close is not None:
                return Answer(text[arg.end():close].strip(), "boxed", start)
        elif arg.group(2):  # "\\boxed 5": to the next $ or end of line
            return Answer(arg.group(2).strip(), "boxed", start)
    return None


def last_answer_tag(text: str) -> Optional[Answer]:
    """The content of the last closed ``<answer>...</answer>``."""
    start = text.rfind("<answer>")
    while start != -1:
        end = text.find("</answer>", start)
        if end != -1:
            return Answer(text[start + len("<answer>"):end].strip(), "answer_tag", start)
        start = text.rfind("<answer>", 0, start)
    return None


def last_hash_answer(text: str) -> Optional[Answer]:
    """The text after the last ``####``, to the end of its line."""
    start = text.rfind("####")
    if start == -1:
        return None
    m = _HASH.match(text, start)
    value = m.group(1).strip() if m else ""
    return Answer(value, "hash", start) if value else None


def final_answer(text: str) -> Optional[Answer]:
    """The answer whose marker starts last, or None when there is none."""
    found = [a for a in (last_boxed(text), last_answer_tag(text), last_hash_answer(text)) if a is not None]
    return max(found, key=lambda a: a.start) if found else None
