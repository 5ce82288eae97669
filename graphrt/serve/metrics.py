"""The server's Prometheus metrics, in a registry of its own (so that two apps in one process,
as in the tests or under Ray Serve, never share counts).

Example:
    >>> metrics = Metrics()
    >>> metrics.batch_size.labels("mlp").observe(4)
    >>> b"graphrt_batch_size_count" in metrics.exposition()[0]
    True
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["Metrics", "ModelStatistics"]

_LATENCY = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float, count: int = 1) -> None:
        self.count += count
        self.ns += int(seconds * 1e9)

    def describe(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class ModelStatistics:
    """One model's cumulative statistics in Triton's terms (``GET /v2/models/{name}/stats``):
    requests that succeeded and failed with their total time, time queued, time decoding
    (``compute_input``), running (``compute_infer``) and encoding (``compute_output``), samples
    (``inference_count``) and runs (``execution_count``), and the runs by batch size."""

    success: _Duration = field(default_factory=_Duration)
    fail: _Duration = field(default_factory=_Duration)
    queue: _Duration = field(default_factory=_Duration)
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    batches: dict[int, _Duration] = field(default_factory=lambda: defaultdict(_Duration))

    def describe(self, name: str) -> dict[str, Any]:
        """The statistics as Triton's JSON gives them."""
        zero = {"count": 0, "ns": 0}
        return {
            "name": name, "version": "1", "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count, "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.describe(), "fail": self.fail.describe(),
                "queue": self.queue.describe(), "compute_input": self.compute_input.describe(),
                "compute_infer": self.compute_infer.describe(),
                "compute_output": self.compute_output.describe(), "cache_hit": zero,
                "cache_miss": zero},
            "batch_stats": [{"batch_size": size, "compute_input": zero,
                             "compute_infer": runs.describe(), "compute_output": zero}
                            for size, runs in sorted(self.batches.items())]}


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
        self.statistics: dict[str, ModelStatistics] = defaultdict(ModelStatistics)
        """Triton's statistics by model (the same events, kept as totals)."""

    def answered(self, model: str, status: int, seconds: float) -> None:
        """Count one infer request answered with ``status`` after ``seconds``."""
        self.requests.labels(model, str(status)).inc()
        stats = self.statistics[model]
        if status >= 400:
            self.errors.labels(model, str(status)).inc()
            stats.fail.add(seconds)
        else:
            stats.success.add(seconds)
        self.latency.labels(model).observe(seconds)

    def ran(self, model: str, samples: int, queued: list[float], seconds: float) -> None:
        """Count one run of ``samples`` for requests that waited ``queued`` seconds each."""
        stats = self.statistics[model]
        for wait in queued:
            self.queue_time.labels(model).observe(wait)
            stats.queue.add(wait)
        self.batch_size.labels(model).observe(samples)
        self.compute_time.labels(model).observe(seconds)
        stats.compute_infer.add(seconds, len(queued))
        stats.batches[samples].add(seconds)
        stats.inference_count += samples
        stats.execution_count += 1
        stats.last_inference_ms = int(time.time() * 1000)

    def coded(self, model: str, decoding: float, encoding: float) -> None:
        """Count the time one request took to decode and its answer to encode."""
        stats = self.statistics[model]
        stats.compute_input.add(decoding)
        stats.compute_output.add(encoding)

    def exposition(self) -> tuple[bytes, str]:
        """The metrics in Prometheus' text format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
