"""A metrics URL is read for the two counts alone where the server can filter, and as given where it cannot.

No sockets: the poller's ``fetch`` is a stand-in for three kinds of server.
"""

from __future__ import annotations

import urllib.error
from email.message import Message

from qworker.judge.control.endpoint import Endpoint, LoadPoller, filtered_urls, only_load
from qworker.judge.control.health import Health
from qworker.judge.control.limiter import AdaptiveLimit

COUNTS = ('vllm:num_requests_running{engine="0",model_name="judge"} 3.0\n'
          'vllm:num_requests_waiting{engine="0",model_name="judge"} 5.0\n')
WHOLE = ("# HELP python_gc_objects_collected_total Objects collected during gc\n"
         'python_gc_objects_collected_total{generation="0"} 8532.0\n' + COUNTS
         + 'vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="judge"} 12.0\n')
URL = "http://judge:8000/metrics"


def endpoint() -> Endpoint:
    limit = AdaptiveLimit()
    return Endpoint(0, "http://judge:8000/v1/chat/completions", 1.0, limit, Health(url="u", limiter=limit, error_budget=0.5, dead_after_s=60.0))


class Server:
    """``honours``: the URL that answers the filter (vLLM: prometheus_client's app under ``/metrics/``); every other
    URL with a query gets the whole text (``ignores``) or a 404 (a server routing on the raw path)."""

    def __init__(self, honours: str = "", with_query: str = "ignores") -> None:
        self.honours, self.with_query = honours, with_query
        self.got: list[str] = []
        self.down = False

    def __call__(self, url: str, timeout_s: float) -> str:
        self.got.append(url)
        if self.down:
            raise ConnectionRefusedError("refused")
        if url == self.honours:
            return COUNTS
        if "?" in url and self.with_query == "404":
            raise urllib.error.HTTPError(url, 404, "no route", Message(), None)
        return WHOLE


def test_a_server_that_honours_the_name_filter_is_read_for_the_two_counts_alone():
    slash = filtered_urls(URL)[0]
    assert slash.startswith(URL + "/?") and "name%5B%5D=vllm%3Anum_requests_running" in slash
    server = Server(honours=slash)
    poller = LoadPoller(endpoint(), URL, fetch=server)
    assert poller.read() == (3.0, 5.0)
    assert poller.read() == (3.0, 5.0)
    assert server.got == [slash, slash] and poller.read_url == slash  # one GET a reading, the first included


def test_a_server_that_ignores_the_filter_or_refuses_it_is_read_at_its_url_as_given():
    for with_query in ("ignores", "404"):
        server = Server(with_query=with_query)
        poller = LoadPoller(endpoint(), URL, fetch=server)
        assert poller.read() == (3.0, 5.0)
        assert poller.read_url == URL
        before = len(server.got)
        assert poller.read() == (3.0, 5.0) and server.got[before:] == [URL]  # the choice is kept: one GET a reading


def test_a_reading_that_fails_chooses_the_url_afresh():
    slash = filtered_urls(URL)[0]
    server = Server(honours=slash)
    poller = LoadPoller(endpoint(), URL, fetch=server)
    assert poller.read() == (3.0, 5.0)
    server.down = True
    assert poller.read() is None and poller.failures == 1 and poller.read_url is None
    server.down, server.honours = False, ""  # back, without the filter now
    assert poller.read() == (3.0, 5.0) and poller.read_url == URL


def test_only_the_counts_and_nothing_else_count_as_a_filtered_answer():
    assert only_load(COUNTS)
    assert not only_load(WHOLE)
    assert not only_load("# HELP x\n")  # no counts: not an answer to the filter
    assert filtered_urls("http://h/m?a=1")[0].startswith("http://h/m/?a=1&name%5B%5D=")


def test_a_server_that_does_not_answer_costs_one_get_a_reading():
    server = Server(honours=filtered_urls(URL)[0])
    poller = LoadPoller(endpoint(), URL, fetch=server)
    server.down = True
    for n in range(1, 4):
        assert poller.read() is None and poller.failures == n
    assert len(server.got) == 3  # one per reading, not one per candidate URL and the URL as given


def test_a_server_that_ignores_the_filter_is_read_once_when_the_url_is_chosen():
    server = Server(with_query="ignores")
    poller = LoadPoller(endpoint(), URL, fetch=server)
    assert poller.read() == (3.0, 5.0) and poller.read_url == URL
    assert len(server.got) == 1  # its whole text already held the counts: not fetched again without the query


def test_a_server_that_never_gives_the_counts_costs_one_get_a_reading_once_its_url_is_chosen():
    server = Server()
    poller = LoadPoller(endpoint(), URL, fetch=lambda url, t: (server(url, t), "no vllm counts here\n")[1])
    assert poller.read() is None  # the filtered URLs, then the URL as given
    chosen = len(server.got)
    assert poller.read() is None and poller.read() is None
    assert server.got[chosen:] == [URL, URL] and poller.failures == 3  # one GET a reading (it was every URL each time)
