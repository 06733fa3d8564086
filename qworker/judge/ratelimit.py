"""Parse what providers say about their rate limits: ``Retry-After`` and the rate-limit headers.

Pure functions of a reply's headers (names in lower case); no state.  Units:
seconds, requests, tokens.  Used in the worker (``llm_judge`` puts the parsed
values in the call's outcome) and nowhere else.

* ``retry_after(headers, now)``: ``retry-after-ms`` (milliseconds, OpenAI),
  else ``retry-after`` as whole or fractional seconds, or as an HTTP-date
  (RFC 9110, e.g. ``Wed, 21 Oct 2015 07:28:00 GMT``) counted from ``now``
  (Unix seconds).  ``None`` when absent or unreadable; never negative.
* ``rate_limits(headers, now)``: the OpenAI family
  (``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, resets as Go
  durations such as ``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``) and the Anthropic
  family (``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``,
  resets as RFC 3339 times).  Returns ``{"requests": {...}, "tokens": {...}}``
  with ``limit``, ``remaining`` and ``reset_s`` (seconds from now until the
  bucket is full again) where given, or ``None`` when no such header is there.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Optional

__all__ = ["duration_s", "rate_limits", "retry_after", "rfc3339_s"]

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")


def duration_s(text: str) -> Optional[float]:
    """A Go duration (``"6m0s"``, ``"20ms"``, ``"1.5s"``) or a bare number of seconds, in seconds."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def rfc3339_s(text: str, now: float) -> Optional[float]:
    """Seconds from ``now`` (Unix time) until an RFC 3339 time such as ``2024-05-01T12:00:30Z``; never negative."""
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return max(0.0, at.timestamp() - now)


def retry_after(headers: dict, now: float) -> Optional[float]:
    """The delay a refusal asks for, in seconds (see the module docstring for the forms read)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    s = headers.get("retry-after")
    if s is None:
        return None
    try:
        return max(0.0, float(s))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(s)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - now)


def _int(v: Optional[str]) -> Optional[int]:
    if v is None:
        return None
    try:
        return int(float(v))
    except ValueError:
        return None


def _family(headers: dict, limit: str, remaining: str, reset: str, reset_parse) -> Optional[dict]:
    out: dict = {}
    if (v := _int(headers.get(limit))) is not None:
        out["limit"] = v
    if (v := _int(headers.get(remaining))) is not None:
        out["remaining"] = v
    if (r := headers.get(reset)) is not None and (s := reset_parse(r)) is not None:
        out["reset_s"] = s
    return out or None


def rate_limits(headers: dict, now: float) -> Optional[dict]:
    """The request and token budgets the reply announces (``None`` when it announces none)."""
    out: dict = {}
    for kind in ("requests", "tokens"):
        fam = _family(headers, f"x-ratelimit-limit-{kind}", f"x-ratelimit-remaining-{kind}", f"x-ratelimit-reset-{kind}", duration_s)
        if fam is None:
            a = f"anthropic-ratelimit-{kind}"
            fam = _family(headers, f"{a}-limit", f"{a}-remaining", f"{a}-reset", lambda t: rfc3339_s(t, now))
        if fam is None and kind == "tokens":  # Anthropic may announce input and output tokens separately
            found = [_family(headers, f"anthropic-ratelimit-{k}-limit", f"anthropic-ratelimit-{k}-remaining",
                             f"anthropic-ratelimit-{k}-reset", lambda t: rfc3339_s(t, now)) for k in ("input-tokens", "output-tokens")]
            fams = [f for f in found if f is not None and "remaining" in f]
            if fams:  # the tighter of the two
                fam = min(fams, key=lambda f: f["remaining"] / max(1, f.get("limit", f["remaining"]) or 1))
        if fam is not None:
            out[kind] = fam
    return out or None
