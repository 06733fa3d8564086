"""How each framework's fields become qworker's payload, in one place.

Every adapter builds the payload the built-in rewards read (see
``qworker/rewards/_payload.py``) with the functions below.  A key the
framework does not provide is left out, never filled with a guess.

| payload key | verl `compute_score` | verl `QworkerRewardManager` | TRL `GRPOTrainer` | OpenRLHF `reward_func` | slime `rm` |
|---|---|---|---|---|---|
| `response` | `solution_str` | valid response tokens, decoded (`skip_special_tokens=True`) | the completion; conversational: the last assistant message's text | `query` after `prompt` (`split_query`) | `sample.response` |
| `ground_truth` | `ground_truth` | `reward_model["ground_truth"]` | column `ground_truth`, else `solution`, `answer`, `label` (or the one named) | `label` | `sample.label` |
| `prompt` | - | valid prompt tokens, decoded | the prompt; conversational: the last user message's text | `prompt` | `sample.prompt`; messages: the last user message's text |
| `data_source` | `data_source` | `data_source` | column `data_source` | - | `sample.metadata["data_source"]` |
| `extra_info` | `extra_info` | `extra_info` | column `extra_info` | - | `sample.metadata` |
| `response_length` (tokens) | - | valid response tokens | `len(completion_ids[i])` | - | `sample.response_length` |
| `max_response_length` (tokens) | - | `responses.shape[-1]` | `max_completion_length` | - | `args.rollout_max_response_len` |

Values are made plain (``plain``) so they encode: numpy and torch values become
lists or numbers, mappings dicts with string keys, and objects of other types
(tokenizers, environments, ...) are dropped.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping, Optional, Sequence

__all__ = [
    "GROUND_TRUTH_COLUMNS", "from_openrlhf", "from_slime", "from_trl", "from_verl", "last_text", "message_text", "payload",
    "plain", "split_query", "trl_columns", "PromptMismatch",
]

log = logging.getLogger("qworker.integrations")

GROUND_TRUTH_COLUMNS = ("ground_truth", "solution", "answer", "label")  # TRL: the first present is used

_DROP = object()


def plain(value: Any) -> Any:
    """``value`` as plain JSON-like data (None, bool, int, float, str, list, dict).

    numpy/torch scalars and arrays become numbers and lists (``.tolist()``);
    tuples and sets become lists; mapping keys become strings; anything else
    is dropped from its container (and is None at the top level).
    """
    out = _plain(value)
    return None if out is _DROP else out


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            v = _plain(v)
            if v is not _DROP:
                out[str(k)] = v
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [v for v in map(_plain, value) if v is not _DROP]
    tolist = getattr(value, "tolist", None)  # numpy and torch, scalars included
    if callable(tolist) and hasattr(value, "dtype"):
        try:
            return _plain(tolist())
        except Exception:  # noqa: BLE001 - an exotic array: drop it like any unknown object
            return _DROP
    if hasattr(value, "items") and callable(value.items):  # OmegaConf DictConfig and similar
        return _plain(dict(value.items()))
    return _DROP


def message_text(message: Any) -> str:
    """The text of a chat message: its ``content`` string, or the joined ``text``
    parts of a list of content parts."""
    content = message.get("content", "") if isinstance(message, Mapping) else message
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type", "text") == "text")
    return "" if content is None else str(content)


def last_text(messages: Any, role: str) -> str:
    """A prompt or completion as text: a string as it is; a list of chat messages
    as the text of the last message with ``role`` (or of the last message)."""
    if isinstance(messages, str):
        return messages
    if isinstance(messages, Sequence) and messages:
        for m in reversed(messages):
            if isinstance(m, Mapping) and m.get("role") == role:
                return message_text(m)
        return message_text(messages[-1])
    return "" if messages is None else str(messages)


def payload(
    response: str,
    *,
    ground_truth: Any = None,
    prompt: Optional[str] = None,
    data_source: Any = None,
    extra_info: Any = None,
    response_length: Optional[int] = None,
    max_response_length: Optional[int] = None,
) -> dict[str, Any]:
    """One task's payload in qworker's convention; keys whose value is None are left out.
    Lengths are in tokens."""
    fields = {
        "response": response, "ground_truth": plain(ground_truth), "prompt": prompt, "data_source": plain(data_source),
        "extra_info": plain(extra_info),
        "response_length": None if response_length is None else int(response_length),
        "max_response_length": None if max_response_length is None else int(max_response_length),
    }
    return {k: v for k, v in fields.items() if v is not None}


class PromptMismatch(ValueError):
    """An OpenRLHF query that does not start with its prompt, even allowing for decoding differences."""


# special tokens a decoded query may hold, add or drop around the prompt's text: <|im_start|>, <|begin_of_text|>,
# <|endoftext|>, <s>, </s>, <pad>, <unk>, <bos>, <eos>, <start_of_turn>, <end_of_turn>, [PAD], [CLS], [SEP]
_SPECIAL = re.compile(r"<\|[^<>|\s]{1,64}\|>|</?s>|<(?:pad|unk|bos|eos|start_of_turn|end_of_turn)>|\[(?:PAD|CLS|SEP)\]")


def _significant(text: str) -> tuple[str, list[int]]:
    """The characters of ``text`` that must match (not whitespace, not inside a special token), and where each is."""
    chars: list[str] = []
    at: list[int] = []
    i = 0
    for m in [*_SPECIAL.finditer(text), None]:
        stop = m.start() if m is not None else len(text)
        for j in range(i, stop):
            if not text[j].isspace():
                chars.append(text[j])
                at.append(j)
        if m is not None:
            i = m.end()
    return "".join(chars), at


def split_query(query: str, prompt: Any, *, whole_query: bool = False) -> str:
    """OpenRLHF's ``query`` is the prompt followed by the response: the response is what follows the prompt.

    OpenRLHF decodes the prompt and response tokens together, so the query's prompt part may differ from
    the prompt text in whitespace and special tokens (a space after ``<s>``, padding, a BOS token the
    prompt lacks).  The prompt is matched ignoring whitespace and special tokens; the response starts after
    the last matched character (and after the special tokens that end the prompt).  A query whose start
    does not match its prompt raises ``PromptMismatch``: scoring the prompt as part of the response gives
    wrong scores silently.  ``whole_query`` (opt-in) scores such a query whole instead, with a warning.
    An empty or missing prompt leaves the whole query as the response."""
    if not isinstance(prompt, str) or not prompt:
        return query
    if query.startswith(prompt):
        return query[len(prompt):]
    want, _ = _significant(prompt)
    have, at = _significant(query)
    if want and have.startswith(want):
        cut = at[len(want) - 1] + 1
        tail = {m.group() for m in _SPECIAL.finditer(prompt, _significant(prompt)[1][-1] + 1)}
        while True:  # the special tokens that end the prompt (e.g. <|im_start|>assistant\n) end it here too
            rest = query[cut:]
            stripped = rest.lstrip()
            m = _SPECIAL.match(stripped)
            if m is None or m.group() not in tail:
                break
            cut += len(rest) - len(stripped) + m.end()
        return query[cut:]
    if whole_query:
        log.warning("openrlhf: a query does not start with its prompt; scoring the whole query (--whole-query): %r...", query[:80])
        return query
    raise PromptMismatch(f"the query does not start with its prompt (even ignoring whitespace and special tokens): query "
                         f"{query[:60]!r}..., prompt {prompt[:60]!r}...; pass the prompts OpenRLHF sent, or opt in to "
                         "scoring the whole query (qworker serve --whole-query, QWORKER_WHOLE_QUERY=1)")


# one function per framework: the table above, as code --------------------------------------------------
def from_verl(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, *, prompt: Optional[str] = None,
    response_length: Optional[int] = None, max_response_length: Optional[int] = None,
) -> dict[str, Any]:
    """verl's ``compute_score`` arguments (and, from the manager, the decoded prompt and token counts)."""
    return payload(
        solution_str, ground_truth=ground_truth, prompt=prompt, data_source=data_source, extra_info=extra_info,
        response_length=response_length, max_response_length=max_response_length,
    )


def from_trl(
    prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Optional[Sequence[Sequence[int]]],
    columns: Mapping[str, Sequence[Any]], *, ground_truth_column: Optional[str] = None, max_response_length: Optional[int] = None,
) -> list[dict[str, Any]]:
    """One payload per completion from a TRL reward call: ``columns`` are the dataset
    columns TRL passes as keyword lists (one value per completion)."""
    gt_col = _trl_ground_truth_column(columns, ground_truth_column)
    out = []
    for i, completion in enumerate(completions):
        out.append(payload(
            last_text(completion, "assistant"),
            ground_truth=columns[gt_col][i] if gt_col is not None else None,
            prompt=last_text(prompts[i], "user"),
            data_source=columns["data_source"][i] if "data_source" in columns else None,
            extra_info=columns["extra_info"][i] if "extra_info" in columns else None,
            response_length=len(completion_ids[i]) if completion_ids is not None else None,
            max_response_length=max_response_length,
        ))
    return out


def _trl_ground_truth_column(columns: Mapping[str, Any], ground_truth_column: Optional[str]) -> Optional[str]:
    gt_col = ground_truth_column or next((c for c in GROUND_TRUTH_COLUMNS if c in columns), None)
    if gt_col is not None and gt_col not in columns:
        raise KeyError(f"ground truth column {gt_col!r} is not among the dataset's columns {sorted(columns)}")
    return gt_col


def trl_columns(columns: Mapping[str, Any], *, ground_truth_column: Optional[str] = None) -> str:
    """In words, which dataset columns ``from_trl`` reads for ``columns`` (one line, for error messages)."""
    have = sorted(columns)
    gt_col = ground_truth_column if ground_truth_column in columns else (
        None if ground_truth_column else next((c for c in GROUND_TRUTH_COLUMNS if c in columns), None))
    if gt_col is not None:
        how = "named by ground_truth_column=" if ground_truth_column else "found by name"
        read = [f"ground_truth from column {gt_col!r} ({how})"]
    elif ground_truth_column:
        read = [f"no ground_truth: column {ground_truth_column!r} (named by ground_truth_column=) is not in the dataset"]
    else:
        read = [f"no ground_truth: none of the columns {', '.join(map(repr, GROUND_TRUTH_COLUMNS))} is in the dataset "
                "(name yours with ground_truth_column=)"]
    read += [f"{k} from column {k!r}" for k in ("data_source", "extra_info") if k in columns]
    return f"columns read: {'; '.join(read)}; the dataset's columns besides the prompt: {have}"


def from_openrlhf(query: str, prompt: Any, label: Any, *, whole_query: bool = False) -> dict[str, Any]:
    """One sample of OpenRLHF's ``reward_func(queries, prompts, labels)``; ``PromptMismatch`` as ``split_query``."""
    response = split_query(query, prompt, whole_query=whole_query)
    return payload(response, ground_truth=label, prompt=prompt if isinstance(prompt, str) else None)


def from_slime(args: Any, sample: Any) -> dict[str, Any]:
    """A slime ``Sample`` (``prompt``, ``response``, ``label``, ``metadata``, ``response_length``)."""
    metadata = getattr(sample, "metadata", None)
    metadata = metadata if isinstance(metadata, Mapping) else {}
    length = getattr(sample, "response_length", None)
    return payload(
        sample.response or "",
        ground_truth=getattr(sample, "label", None),
        prompt=last_text(getattr(sample, "prompt", None), "user") or None,
        data_source=metadata.get("data_source"),
        extra_info=metadata or None,
        response_length=length if (length or not sample.response) else None,  # slime's default 0 means "not set"
        max_response_length=getattr(args, "rollout_max_response_len", None),
    )
