"""Task identity: a blake2b-128 hash of a canonical encoding.

``task_key(reward, params, payload, version)`` hashes the reward's name, its
``version``, its params and the payload, with every map's keys sorted, so two
payloads that compare equal as JSON-like values get the same key whatever their
key order.  Tuples encode as lists.  The version is the one the reward declares
(``@reward(..., version="2")``), else a fingerprint of its code
(``registry.fingerprint``), as the workers that run it report it (``cache.identity``).
Changing a judge prompt, a weight, a reward's code or its declared version
never returns a stale cached score.

``version=None`` gives the prefix of a reward without a version.

``encode_payload`` returns the canonical msgpack bytes of the payload, which are
both hashed and sent to the worker, so a payload is packed once.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Any, Iterable, Optional, Union

import msgpack
import msgspec

_packer_options = {"use_bin_type": True}


_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})


def canonical(obj: Any) -> Any:
    """``obj`` with every dict rebuilt with sorted keys (recursively)."""
    t = type(obj)
    if t is dict:
        try:
            keys = sorted(obj)
        except TypeError:  # mixed key types: order by the repr of the key
            keys = sorted(obj, key=repr)
        return {k: (v if type(v) in _SCALARS else canonical(v)) for k in keys for v in (obj[k],)}
    if t is list or t is tuple:
        return [v if type(v) in _SCALARS else canonical(v) for v in obj]
    return obj


def _plain(obj: Any) -> bool:
    """Whether ``obj`` holds only exact dicts with str keys, lists, tuples and ``_SCALARS``: the values
    ``_sorted_encoder`` encodes to the same bytes as ``msgpack.packb(canonical(obj))``."""
    t = type(obj)
    if t is dict:
        for k, v in obj.items():
            if type(k) is not str or (type(v) not in _SCALARS and not _plain(v)):
                return False
        return True
    if t is list or t is tuple:
        for v in obj:
            if type(v) not in _SCALARS and not _plain(v):
                return False
        return True
    return t in _SCALARS


def _plain_each(payloads: list[Any]) -> bool:
    """``_plain(payloads)``, without a Python call per payload for the usual one (a dict of str keys and scalar
    values, checked here as ``_plain`` checks a dict)."""
    scalars = _SCALARS
    for payload in payloads:
        if type(payload) is dict:
            for k, v in payload.items():
                if type(k) is not str or (type(v) not in scalars and not _plain(v)):
                    return False
        elif type(payload) not in scalars and not _plain(payload):
            return False
    return True


# Sorts every map's keys as it encodes (str keys compare by code point here as in ``sorted``), ten times
# faster than rebuilding the payload with ``canonical``; used only where ``_plain`` says the bytes are the same.
_sorted_encoder = msgspec.msgpack.Encoder(order="sorted")


def encode_payload(payload: Any, packer: Optional[msgpack.Packer] = None) -> bytes:
    """Canonical msgpack bytes of ``payload``; ``TypeError`` if it cannot be encoded.

    Pass a ``packer`` from ``new_packer()`` to reuse it across calls (one per thread).
    """
    if _plain(payload):
        try:
            return _sorted_encoder.encode(payload)
        except Exception:  # an int past 64 bits, a lone surrogate...: the reference path names the problem
            pass
    if packer is None:
        return msgpack.packb(canonical(payload), **_packer_options)
    try:
        return packer.pack(canonical(payload))
    except BaseException:
        packer.reset()  # a failed pack leaves partial bytes in the packer's buffer
        raise


def encode_payloads(payloads: Iterable[Any], packer: msgpack.Packer) -> list[Union[bytes, Exception]]:
    """``encode_payload(p, packer)`` of each of ``payloads``, in order, with the exception it raised in place of
    a payload that cannot be encoded.  The same bytes, without a Python call per payload for the usual one
    (a dict of str keys and scalar values, checked here as ``_plain`` would)."""
    out: list[Union[bytes, Exception]] = []
    append, encode, scalars = out.append, _sorted_encoder.encode, _SCALARS
    for payload in payloads:
        if type(payload) is dict:
            try:
                for k, v in payload.items():
                    if type(k) is not str or (type(v) not in scalars and not _plain(v)):
                        break
                else:  # plain (``_plain`` inline)
                    append(encode(payload))
                    continue
            except Exception:  # a cycle, an int past 64 bits...: the reference path names the problem
                pass
        try:
            append(encode_payload(payload, packer))
        except Exception as exc:
            append(exc)
    return out


_split = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode  # an encoded array -> its elements' encodings


def encode_payload_array(payloads: list[Any]) -> Optional[list[msgspec.Raw]]:
    """``encode_payload`` of each payload (as ``msgspec.Raw`` slices of one buffer), made in one pass, or None
    when one of them needs the per-payload path (call ``encode_payload`` on each, to learn which fails)."""
    try:
        if not _plain_each(payloads):
            return None
        return _split(_sorted_encoder.encode(payloads))  # an array's encoding is its elements' encodings, in a row
    except Exception:  # a cycle, an int past 64 bits, a lone surrogate...
        return None


def new_packer() -> msgpack.Packer:
    return msgpack.Packer(**_packer_options)


def params_fingerprint(params: dict) -> bytes:
    """Canonical bytes of a reward's parameters (empty params encode as ``b""``)."""
    return msgpack.packb(canonical(params), **_packer_options) if params else b""


def key_prefix(reward: str, fingerprint: bytes, version: Optional[str] = None) -> bytes:
    """The bytes hashed before every payload of one (reward, version, params) triple.

    The version joins the name as ``name NUL version`` (reward names never hold
    NUL); ``version=None`` gives the unversioned prefix.
    """
    r = (reward if version is None else f"{reward}\0{version}").encode()
    # Length prefixes keep (reward, fingerprint, payload) boundaries unambiguous.
    return len(r).to_bytes(4, "little") + r + len(fingerprint).to_bytes(4, "little") + fingerprint


def task_key(reward: str, fingerprint: bytes, payload_bytes: bytes, version: Optional[str] = None) -> bytes:
    """The 16-byte identity of a task."""
    return key_with_prefix(key_prefix(reward, fingerprint, version), payload_bytes)


def prefix_state(prefix: bytes) -> Any:
    """The hash state after ``prefix``: ``s = prefix_state(prefix).copy(); s.update(payload_bytes); s.digest()`` is
    ``key_with_prefix(prefix, payload_bytes)``, without hashing the prefix (or parsing the constructor's keyword
    arguments) again for each payload of a batch."""
    return blake2b(prefix, digest_size=16)


def key_with_prefix(prefix: bytes, payload_bytes: bytes) -> bytes:
    """The 16-byte identity of a task whose ``key_prefix`` is ``prefix``: ``task_key`` with the prefix made once
    for a whole batch (the submit path's form)."""
    return blake2b(prefix + payload_bytes, digest_size=16).digest()
