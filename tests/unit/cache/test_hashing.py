from qworker.cache.hashing import canonical, encode_payload, key_prefix, new_packer, params_fingerprint, task_key


def key(reward, params, payload):
    return task_key(reward, params_fingerprint(params), encode_payload(payload))


def test_key_ignores_map_order_at_every_depth():
    a = {"response": "x", "meta": {"b": 1, "a": [{"y": 2, "x": 1}]}}
    b = {"meta": {"a": [{"x": 1, "y": 2}], "b": 1}, "response": "x"}
    assert key("r", {}, a) == key("r", {}, b)
    assert len(key("r", {}, a)) == 16


def test_key_changes_with_reward_params_and_payload():
    base = key("judge", {"model": "m1"}, {"response": "x"})
    assert key("judge2", {"model": "m1"}, {"response": "x"}) != base
    assert key("judge", {"model": "m2"}, {"response": "x"}) != base
    assert key("judge", {"model": "m1"}, {"response": "y"}) != base
    assert key("judge", {}, {"response": "x"}) != base


def test_field_boundaries_are_unambiguous():
    # the reward name cannot bleed into the fingerprint or the payload
    assert task_key("ab", b"", b"c") != task_key("a", b"", b"bc")
    assert task_key("a", b"b", b"c") != task_key("a", b"", b"bc")


def test_tuples_encode_as_lists_and_mixed_keys_sort():
    assert canonical((1, (2, 3))) == [1, [2, 3]]
    assert list(canonical({2: "x", "a": "y"})) == sorted([2, "a"], key=repr)


def test_reused_packer_recovers_after_a_failed_pack():
    packer = new_packer()
    try:
        encode_payload({"a": [1, object()]}, packer)
    except TypeError:
        pass
    assert encode_payload({"a": 1}, packer) == encode_payload({"a": 1})


def test_prefix_matches_task_key():
    from hashlib import blake2b

    pre = key_prefix("r", b"fp")
    assert blake2b(pre + b"payload", digest_size=16).digest() == task_key("r", b"fp", b"payload")


def test_a_version_changes_the_key_and_no_version_keeps_the_old_one():
    fp, payload = params_fingerprint({"a": 1}), encode_payload({"response": "x"})
    plain = task_key("r", fp, payload)
    assert task_key("r", fp, payload, None) == plain  # caches written before versions existed stay valid
    assert len({plain, task_key("r", fp, payload, "1"), task_key("r", fp, payload, "2")}) == 3


def _random_value(rng, depth=0):
    kinds = ["str", "int", "float", "bool", "none", "bytes"] + (["dict", "list", "tuple"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "str":
        n = rng.choice([0, 1, 5, 31, 32, 255, 256, 70000 if depth == 0 else 3])
        return "".join(rng.choice("az Zé€😀\x00") for _ in range(min(n, 40))) * max(1, n // 40)
    if kind == "int":
        return rng.choice([0, 1, -1, 127, 128, -32, -33, 255, 256, 65535, 65536, 2**31, -(2**31) - 1, 2**63 - 1, 2**64 - 1, -(2**63),
                           rng.randint(-(2**63), 2**64 - 1)])
    if kind == "float":
        return rng.choice([0.0, -0.0, 1.5, 1e300, float("inf"), float("nan"), rng.random()])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, 255, 256])))
    items = [_random_value(rng, depth + 1) for _ in range(rng.choice([0, 1, 3, 15, 16, 17] if depth == 0 else [0, 1, 3]))]
    if kind == "dict":
        return {"".join(rng.choice("bBaé€_") for _ in range(rng.randrange(4))): v for v in items}
    return items if kind == "list" else tuple(items)


def test_payload_bytes_are_the_reference_canonical_msgpack_whichever_encoder_takes_them():
    # Cache keys are hashes of these bytes.  A plain payload (exact dicts with str keys, lists, tuples,
    # scalars) takes the fast sorted encoder and must encode exactly as msgpack.packb(canonical(...));
    # anything else takes that reference path itself, and what it refuses stays refused.
    import collections
    import datetime
    import random

    import msgpack
    import pytest

    from qworker.cache.hashing import _plain, _sorted_encoder

    rng = random.Random(7)
    for _ in range(3000):
        value = _random_value(rng)
        assert _plain(value)
        assert _sorted_encoder.encode(value) == msgpack.packb(canonical(value), use_bin_type=True) == encode_payload(value)

    class Score(float):
        pass

    odd = collections.OrderedDict([("b", 1), ("a", 2)])  # a dict subclass keeps its order, as before
    for value in ({"x": Score(0.5)}, {1: "int key", "a": 2}, {"o": odd}, [bytearray(b"ab")]):
        assert not _plain(value)
        assert encode_payload(value) == encode_payload(value, new_packer()) == msgpack.packb(canonical(value), use_bin_type=True)
    for refused in ({"s": {1, 2}}, {"t": datetime.datetime(2020, 1, 1)}, {"big": 2**64}):
        with pytest.raises((TypeError, OverflowError, ValueError)):
            encode_payload(refused)
