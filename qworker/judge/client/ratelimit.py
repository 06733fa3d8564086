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

Every value is checked, as a server may send anything: a value that is not a
finite number, a negative one, a limit of 0, a limit above ``MAX_PER_MINUTE``
(1e9 per minute), a delay or reset beyond ``MAX_DELAY_S`` (one day) is ignored,
as if the header were absent (so ``inf``, ``1e400``, ``NaN``, ``-1`` never
reach the gate).  Both functions take ``bad``, a dict that collects each
ignored header's name and value, for the gate to report once per endpoint.
An HTTP-date in the past is a delay of 0 (clocks differ), not an error.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Optional

__all__ = ["MAX_DELAY_S", "MAX_PER_MINUTE", "duration_s", "rate_limits", "retry_after", "rfc3339_s"]

MAX_DELAY_S = 86400.0  # a Retry-After or reset beyond a day is not believed
MAX_PER_MINUTE = 1e9  # nor an announced limit beyond this many requests or tokens a minute

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")


def _delay(x: float) -> Optional[float]:
    """``x`` seconds when believable: finite, not negative, at most ``MAX_DELAY_S``."""
    return x if math.isfinite(x) and 0.0 <= x <= MAX_DELAY_S else None


def _float(text: str) -> Optional[float]:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def duration_s(text: str) -> Optional[float]:
    """A Go duration (``"6m0s"``, ``"20ms"``, ``"1.5s"``) or a bare number of seconds, in seconds (None: unreadable or unbelievable)."""
    text = text.strip()
    if (x := _float(text)) is not None:
        return _delay(x)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return _delay(sum(float(n) * _UNITS[u] for n, u in parts))


def rfc3339_s(text: str, now: float) -> Optional[float]:
    """Seconds from ``now`` (Unix time) until an RFC 3339 time such as ``2024-05-01T12:00:30Z``; 0 when past; None beyond a day."""
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return _delay(max(0.0, at.timestamp() - now))


def retry_after(headers: dict, now: float, bad: Optional[dict] = None) -> Optional[float]:
    """The delay a refusal asks for, in seconds (see the module docstring for the forms read)."""
    bad = {} if bad is None else bad
    ms = headers.get("retry-after-ms")
    if ms is not None:
        x = _float(ms)
        if x is not None and (d := _delay(x / 1000.0)) is not None:
            return d
        bad["retry-after-ms"] = ms
    s = headers.get("retry-after")
    if s is None:
        return None
    x = _float(s)
    if x is None:
        try:
            when = parsedate_to_datetime(s)
        except (TypeError, ValueError, IndexError, OverflowError):
            when = None
        if when is not None:
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            x = max(0.0, when.timestamp() - now)
    if x is not None and (d := _delay(x)) is not None:
        return d
    bad["retry-after"] = s
    return None


def _count(v: str, *, zero: bool) -> Optional[int]:
    """A limit (``zero`` False) or what remains of it: a finite number, at least 0 (1 for a limit), at most ``MAX_PER_MINUTE``."""
    x = _float(v)
    if x is None or not math.isfinite(x) or x < (0.0 if zero else 1.0) or x > MAX_PER_MINUTE:
        return None
    return int(x)


def _family(headers: dict, limit: str, remaining: str, reset: str, reset_parse, bad: dict) -> Optional[dict]:
    out: dict = {}
    for name, key, zero in ((limit, "limit", False), (remaining, "remaining", True)):
        if (raw := headers.get(name)) is not None:
            if (v := _count(raw, zero=zero)) is None:
                bad[name] = raw
            else:
                out[key] = v
    if (r := headers.get(reset)) is not None:
        if (s := reset_parse(r)) is None:
            bad[reset] = r
        else:
            out["reset_s"] = s
    return out or None


def rate_limits(headers: dict, now: float, bad: Optional[dict] = None) -> Optional[dict]:
    """The request and token budgets the reply announces (``None`` when it announces none)."""
    bad = {} if bad is None else bad
    out: dict = {}
    for kind in ("requests", "tokens"):
        fam = _family(headers, f"x-ratelimit-limit-{kind}", f"x-ratelimit-remaining-{kind}", f"x-ratelimit-reset-{kind}", duration_s, bad)
        if fam is None:
            a = f"anthropic-ratelimit-{kind}"
            fam = _family(headers, f"{a}-limit", f"{a}-remaining", f"{a}-reset", lambda t: rfc3339_s(t, now), bad)
        if fam is None and kind == "tokens":  # Anthropic may announce input and output tokens separately
            found = [_family(headers, f"anthropic-ratelimit-{k}-limit", f"anthropic-ratelimit-{k}-remaining",
                             f"anthropic-ratelimit-{k}-reset", lambda t: rfc3339_s(t, now), bad) for k in ("input-tokens", "output-tokens")]
            fams = [f for f in found if f is not None and "remaining" in f]
            if fams:  # the tighter of the two
                fam = min(fams, key=lambda f: f["remaining"] / max(1, f.get("limit", f["remaining"]) or 1))
        if fam is not None:
            out[kind] = fam
    return out or None
