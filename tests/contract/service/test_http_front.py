"""The HTTP front's request checks and failure modes (a real producer, real workers, real HTTP on 127.0.0.1)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from qworker import Producer
from qworker.service.http import HttpFront
from tests.conftest import TEST_REWARDS


@pytest.fixture(scope="module")
def producer():
    with Producer(local_workers=1, reward_modules=[TEST_REWARDS], fallback_score=-1.0) as p:
        yield p


@pytest.fixture
def front(producer, request):
    mode = getattr(request, "param", "error")
    http = HttpFront(producer, reward="gsm8k", port=0, on_failure=mode).start()
    yield http
    http.stop()


def post(url: str, body, content_type: str = "application/json") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_body_that_is_not_json_is_415(front):
    status, body = post(front.url + "/get_reward", b"query=x", content_type="application/x-www-form-urlencoded")
    assert status == 415 and "application/json" in body["error"]
    status, _ = post(front.url + "/get_reward", {"query": ["#### 1"], "prompts": [""], "labels": ["1"]},
                     content_type="application/json; charset=utf-8")
    assert status == 200


@pytest.mark.parametrize("body, match", [
    ({"query": ["#### 1"], "prompts": [""]}, "labels missing"),
    ({"query": ["#### 1"], "labels": ["1"]}, "prompts missing"),
    ({"query": ["#### 1"], "prompts": ["", ""], "labels": ["1"]}, "one length"),
    ({"query": [1], "prompts": [""], "labels": ["1"]}, "must be strings"),
])
def test_a_malformed_openrlhf_body_is_400(front, body, match):
    status, reply = post(front.url + "/get_reward", body)
    assert status == 400 and match in reply["error"]


def test_a_query_that_does_not_start_with_its_prompt_fails_that_sample(front):
    body = {"query": ["<s> Example: \\boxed{5}. Now solve: 2+3? I do not know.", "Other text #### 5"],
            "prompts": ["<s>Example: \\boxed{5}. Now solve: 2+3?", "Now solve: 2+3?"], "labels": ["5", "5"]}
    status, reply = post(front.url + "/get_reward", body)
    assert status == 502 and [f["index"] for f in reply["failed"]] == [1]
    assert "does not start with its prompt" in reply["failed"][0]["error"]
    body["query"], body["prompts"] = body["query"][:1], body["prompts"][:1]
    body["labels"] = body["labels"][:1]
    status, reply = post(front.url + "/get_reward", body)  # matched despite the space after <s>: the prompt is not scored
    assert status == 200 and reply["rewards"] == [0.0]


@pytest.mark.parametrize("front", ["fallback"], indirect=True)
def test_fallback_mode_scores_failed_samples_and_flags_them(front):
    body = {"query": ["P #### 3", "Q #### 4", "nope"], "prompts": ["P", "Q", "Z"], "labels": ["3", "5", "1"]}
    status, reply = post(front.url + "/get_reward", body)
    assert status == 200
    assert reply["rewards"] == [1.0, 0.0, -1.0] and reply["extra_logs"]["qworker_failed"] == [0.0, 0.0, 1.0]
    status, reply = post(front.url + "/score", [{"prompt": "", "response": "#### 2", "label": "2"}, {"prompt": "", "response": 5}])
    assert status == 400  # a malformed slime item is still the request's error
    status, reply = post(front.url + "/score", {"prompt": "", "response": "#### 2", "label": "2"})
    assert status == 200 and reply["score"] == 1.0 and reply["qworker_failed"] == 0.0


def test_a_length_penalty_must_count_characters_to_be_served_over_http():
    # HTTP requests carry text only: unit auto would read a max_len meant in tokens as characters
    from qworker import ConfigError
    from qworker.registry.catalog import Plain
    from qworker.service.http import check_http_reward

    for params, why in (({"max_len": 512}, "unit auto"), ({"unit": "tokens", "max_len": 512}, "unit tokens"),
                        ({"unit": "chars"}, "no max_len")):
        with pytest.raises(ConfigError, match=f"length_penalty with {why}"):
            check_http_reward(Plain("length_penalty", params))
    check_http_reward(Plain("length_penalty", {"unit": "chars", "max_len": 2048, "buffer_len": 512}))
    check_http_reward(Plain("math", {}))
