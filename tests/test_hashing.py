from qworker._hashing import canonical, encode_payload, key_prefix, new_packer, params_fingerprint, task_key


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
