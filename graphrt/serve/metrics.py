"""The server's Prometheus metrics, in a registry of its own (so that two apps in one process,
as in the tests or under Ray Serve, never share counts).

Example:
    >>> metrics = Metrics()
    >>> metrics.batch_size.labels("mlp").observe(4)
    >>> b"graphrt_batch_size_count" in metrics.exposition()[0]
    True
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["Metrics"]

_LATENCY = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """Counters and histograms of one app, by model.

    Attributes:
        requests: infer requests answered, by model and HTTP status.
        errors: infer requests answered with an error (status >= 400), by model and status.
        latency: seconds from receiving an infer request to its response, by model.
        queue_time: seconds a request waited for a worker, by model.
        compute_time: seconds one run (a batch) took, by model.
        batch_size: samples per run, by model.
        queue_depth: requests waiting, by model.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.requests = Counter("graphrt_inference_requests", "infer requests answered",
                                ["model", "status"], registry=registry)
        self.errors = Counter("graphrt_inference_errors", "infer requests answered with an "
                              "error", ["model", "status"], registry=registry)
        self.latency = Histogram("graphrt_request_latency_seconds", "time from receiving an "
                                 "infer request to answering it", ["model"], buckets=_LATENCY,
                                 registry=registry)
        self.queue_time = Histogram("graphrt_queue_seconds", "time a request waited for a "
                                    "worker", ["model"], buckets=_LATENCY, registry=registry)
        self.compute_time = Histogram("graphrt_compute_seconds", "time one run (a batch of "
                                      "requests) took", ["model"], buckets=_LATENCY,
                                      registry=registry)
        self.batch_size = Histogram("graphrt_batch_size", "samples per run", ["model"],
                                    buckets=_BATCH, registry=registry)
        self.queue_depth = Gauge("graphrt_queue_depth", "requests waiting for a worker",
                                 ["model"], registry=registry)

    def answered(self, model: str, status: int, seconds: float) -> None:
        """Count one infer request answered with ``status`` after ``seconds``."""
        self.requests.labels(model, str(status)).inc()
        if status >= 400:
            self.errors.labels(model, str(status)).inc()
        self.latency.labels(model).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        """The metrics in Prometheus' text format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
