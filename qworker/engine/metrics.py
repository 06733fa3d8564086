"""Prometheus metrics for a producer: ``Producer(metrics_port=9464)``.

Served by ``prometheus_client`` on 127.0.0.1.
Values are read from the dispatcher's status at scrape time, so nothing is
counted twice and the hot path does no metrics work.

* ``qworker_tasks_total{state}``: submitted, resolved, failed, cache_hits, deduplicated
* ``qworker_tasks_queued``, ``qworker_tasks_in_flight``
* the disk cache: ``qworker_cache_unwritten_rows`` (handed to it, not yet committed:
  above zero for more than a moment, the disk fails), ``qworker_cache_write_errors_total``
  (failed write attempts, each retried), ``qworker_cache_read_errors_total`` (failed
  reads, answered as misses), ``qworker_cache_corrupt_rows_total`` (damaged rows skipped),
  ``qworker_cache_dropped_rows_total`` (results that will not be on disk)
* per judge endpoint (labels ``endpoint``, ``model``): ``qworker_judge_in_flight``,
  ``qworker_judge_limit``, ``qworker_judge_requests_total{outcome}`` (ok,
  status_429, timeouts, connect_errors, other_errors, retries),
  ``qworker_judge_latency_seconds{quantile}`` (0.5, 0.9, 0.99 of recent answers),
  ``qworker_judge_up`` (1 up or probing, 0 down or cooling),
  ``qworker_judge_error_share`` (5xx and resets among the last 200 answers: the error budget's measure),
  ``qworker_judge_latency_gradient`` (recent / baseline latency: above 1.3 the server queues),
  ``qworker_judge_share`` (what this producer may hold: the limit, or its even share when
  ``qworker_judge_other_producers`` other producers on this host call the endpoint too)
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Protocol, cast

from ..config.extras import need
from .status import Status

__all__ = ["serve"]

_OUTCOMES = ("ok", "status_429", "timeouts", "connect_errors", "other_errors", "retries")


class _Collector:
    def __init__(self, status: Callable[[], Status]) -> None:
        self._status = status

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        st = self._status()
        p = st["producer"]
        tasks = CounterMetricFamily("qworker_tasks", "Tasks by state", labels=["state"])
        for state, value in (("submitted", p["submitted"]), ("resolved", p["resolved"]), ("failed", p["failed"]),
                             ("cache_hits", p["cache_hits"]), ("deduplicated", p["deduplicated"])):
            tasks.add_metric([state], value)
        yield tasks
        yield GaugeMetricFamily("qworker_tasks_queued", "Tasks waiting for credit", value=p["queued"])
        yield GaugeMetricFamily("qworker_tasks_in_flight", "Tasks leased to workers", value=p["in_flight"])
        yield GaugeMetricFamily("qworker_cache_unwritten_rows", "Results handed to the disk cache, not yet committed",
                                value=p["cache_unwritten"])
        for name, value, doc in (
            ("qworker_cache_write_errors", p["cache_write_errors"], "Failed disk cache write attempts (each retried)"),
            ("qworker_cache_read_errors", p["cache_read_errors"], "Failed disk cache reads (answered as misses)"),
            ("qworker_cache_corrupt_rows", p["cache_corrupt_rows"], "Damaged disk cache rows skipped"),
            ("qworker_cache_dropped_rows", p["cache_rows_dropped"], "Results the disk cache could not keep"),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        labels = ["endpoint", "model"]
        in_flight = GaugeMetricFamily("qworker_judge_in_flight", "Judge requests in flight", labels=labels)
        limit = GaugeMetricFamily("qworker_judge_limit", "Adaptive concurrency limit", labels=labels)
        up = GaugeMetricFamily("qworker_judge_up", "1 when the endpoint takes requests", labels=labels)
        requests = CounterMetricFamily("qworker_judge_requests", "Judge answers by outcome", labels=[*labels, "outcome"])
        latency = GaugeMetricFamily("qworker_judge_latency_seconds", "Latency quantiles of recent answers", labels=[*labels, "quantile"])
        errors = GaugeMetricFamily("qworker_judge_error_share", "Errors among the last 200 answers", labels=labels)
        gradient = GaugeMetricFamily("qworker_judge_latency_gradient", "Recent / baseline latency", labels=labels)
        share = GaugeMetricFamily("qworker_judge_share", "Requests this producer may hold at once", labels=labels)
        others = GaugeMetricFamily("qworker_judge_other_producers", "Other producers on this host sharing the endpoint", labels=labels)
        for judge in st["judges"]:
            for row in judge["endpoints"]:
                e = cast(Mapping[str, Any], row)  # read by the names in _OUTCOMES
                lv = [e["url"], e["model"]]
                in_flight.add_metric(lv, e["in_flight"])
                limit.add_metric(lv, e["limit"])
                up.add_metric(lv, 1.0 if e["state"] in ("up", "probing") else 0.0)
                for o in _OUTCOMES:
                    requests.add_metric([*lv, o], e[o])
                for q, key in (("0.5", "latency_p50_s"), ("0.9", "latency_p90_s"), ("0.99", "latency_p99_s")):
                    latency.add_metric([*lv, q], e[key])
                errors.add_metric(lv, e.get("error_share", 0.0))
                gradient.add_metric(lv, e.get("latency_gradient", 1.0))
                share.add_metric(lv, e.get("share", e["limit"]))
                others.add_metric(lv, e.get("other_producers", 0))
        yield from (in_flight, limit, up, requests, latency, errors, gradient, share, others)


class MetricsServer(Protocol):
    def shutdown(self) -> None: ...


def check_available() -> None:
    """Raise ``MissingExtra`` (a ``ConfigError``) naming the ``metrics`` extra when prometheus_client is absent."""
    need("prometheus_client", "metrics", "--metrics-port (metrics_port)")


def serve(status: Callable[[], Status], port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Start the metrics HTTP server; returns it (``shutdown()`` stops it)."""
    # prometheus_client is imported here, not at the top: it is an optional extra (``metrics``), needed only to serve
    from prometheus_client import start_http_server
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(status))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server
