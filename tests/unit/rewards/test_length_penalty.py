from __future__ import annotations

import pytest

from qworker.rewards.length_penalty import length_penalty


def row(length: int, max_len: int = 1000, tokens: bool = True) -> dict:
    if tokens:
        return {"response": "x", "response_length": length, "max_response_length": max_len}
    return {"response": "x" * length, "max_response_length": max_len}


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, 0.0), (750, 0.0), (800, 0.0), (850, -0.25), (900, -0.5), (1000, -1.0), (1200, -1.0)],
)
def test_overlong_matches_dapo(length, expected):
    # DAPO: no penalty up to max_len - buffer (800), linear to -factor at max_len, flat beyond
    out = length_penalty(row(length), mode="overlong", buffer_len=200)
    assert out["score"] == pytest.approx(expected)
    assert (out["unit"], out["length"], out["max_len"]) == ("tokens", length, 1000)


def test_overlong_factor_and_explicit_max_len():
    assert length_penalty(row(950), buffer_len=100, max_len=1000, penalty_factor=0.5)["score"] == pytest.approx(-0.25)


@pytest.mark.parametrize(
    ("length", "expected"),
    [(500, 0.0), (400, -0.2), (600, -0.2), (250, -0.5), (1000, -0.5), (0, -0.5)],
)
def test_peaked(length, expected):
    # peak at 0.5 of 1000; |r - 0.5| / 0.25 scaled to max_penalty 0.5, flat beyond
    out = length_penalty(row(length), mode="peaked", peak_ratio=0.5, outer_ratio=0.25, max_penalty=0.5)
    assert out["score"] == pytest.approx(expected)


def test_peaked_scale():
    out = length_penalty(row(250), mode="peaked", outer_ratio=0.25, max_penalty=0.5, penalty_scale=0.1)
    assert out["score"] == pytest.approx(-0.05)


def test_characters_when_no_token_count():
    out = length_penalty(row(95, max_len=100, tokens=False), buffer_len=10)
    assert (out["unit"], out["length"], out["score"]) == ("chars", 95, pytest.approx(-0.5))


def test_never_negative_zero():
    assert str(length_penalty(row(10), buffer_len=100)["score"]) == "0.0"


@pytest.mark.parametrize(
    ("payload", "params", "match"),
    [
        ({"response": "x"}, {"buffer_len": 10}, "max length"),
        (row(10), {}, "needs buffer_len"),
        (row(10), {"buffer_len": 2000}, "buffer_len"),
        (row(10), {"mode": "cubic"}, "mode"),
        ({"response": "x", "response_length": -1, "max_response_length": 10}, {"buffer_len": 5}, "response_length"),
    ],
)
def test_bad_input_is_named(payload, params, match):
    with pytest.raises(ValueError, match=match):
        length_penalty(payload, **params)


def test_in_characters_it_needs_no_length_from_the_payload_and_ignores_token_counts():
    # what OpenRLHF's and slime's HTTP requests carry: text only
    text_only = {"response": "x" * 1792}
    out = length_penalty(text_only, mode="overlong", unit="chars", max_len=2048, buffer_len=512)
    assert out["score"] == pytest.approx(-0.5) and (out["unit"], out["length"], out["max_len"]) == ("chars", 1792, 2048)
    with_tokens = {**text_only, "response_length": 10, "max_response_length": 64}  # counted in characters all the same
    assert length_penalty(with_tokens, unit="chars", max_len=2048, buffer_len=512)["score"] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="unit 'chars' needs params max_len in characters"):
        length_penalty(with_tokens, unit="chars", buffer_len=512)


def test_in_tokens_it_needs_the_payloads_token_count():
    with pytest.raises(ValueError, match="unit 'tokens' needs 'response_length'"):
        length_penalty({"response": "x", "max_response_length": 10}, unit="tokens", buffer_len=2)
    assert length_penalty(row(900), unit="tokens", buffer_len=200)["score"] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="unit must be one of"):
        length_penalty(row(900), unit="words", buffer_len=200)
