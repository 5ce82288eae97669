"""Dynamic batching: requests to one model that wait together run as one stacked batch.

A request joins the model's queue. Whenever a worker is free, the batcher takes the oldest
request and, if the model has a batch axis, every other waiting request of the same signature
(the same shape past the batch dimension) up to ``max_batch`` samples; with ``max_delay_s`` it
first waits up to that long after the oldest request arrived for the batch to fill. The batch
runs on a worker thread (its own run context; the event loop never computes), and each request
gets its own slice of the outputs. While every worker is busy, requests queue, so batches form
under load even with no delay.

If a stacked batch is refused as input (a shape variable bound two ways, say) or a kernel
raises on it (an index out of range), its requests run one by one, so that only the request at
fault gets the error. The queue is bounded: a
request beyond ``max_queue`` is answered 503 at once.

Example:
    >>> batcher = Batcher(model, max_batch=64, max_delay_s=0.002)  # doctest: +SKIP
    >>> outputs = await batcher.submit({"input": x}, timeout_s=5.0)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ExecutionError, InputError, RequestError
from .metrics import Metrics
from .models import ServedModel, Tensors

__all__ = ["Batcher"]


@dataclass(eq=False)  # identity: two requests are never "equal" (their arrays cannot compare)
class _Pending:
    inputs: Mapping[str, np.ndarray[Any, Any]]
    size: int
    signature: tuple[Any, ...]
    future: asyncio.Future[Tensors]
    arrived: float = field(default_factory=time.monotonic)


class Batcher:
    """The queue and workers of one model.

    Args:
        model: the model.
        max_batch: the most samples in one run (1: no stacking; clipped to the model's
            batch bound).
        max_delay_s: how long a batch may wait for more requests after its oldest arrived.
        max_queue: the most requests waiting; more are refused with 503.
        workers: runs at once (threads, each with its own run context).
        metrics: where to count queue times, batch sizes and run times.
    """

    def __init__(self, model: ServedModel, *, max_batch: int | None = None,
                 max_delay_s: float = 0.0, max_queue: int = 1024, workers: int = 1,
                 metrics: Metrics | None = None) -> None:
        limit = model.batch.limit if model.batch else 1
        self.model = model
        self.max_batch = limit if max_batch is None else max(1, min(max_batch, limit))
        self.max_delay_s = max(0.0, max_delay_s)
        self.max_queue = max_queue
        self.workers = workers
        self.metrics = metrics or Metrics()
        self._queue: deque[_Pending] = deque()
        self._arrival = asyncio.Event()
        self._slots = asyncio.Semaphore(workers)
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=f"graphrt-{model.name}")
        self._runs: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def queued(self) -> int:
        """Requests waiting for a worker."""
        return len(self._queue)

    def start(self) -> None:
        """Start taking requests (on the running event loop)."""
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._dispatch())

    async def submit(self, inputs: Mapping[str, np.ndarray[Any, Any]],
                     timeout_s: float | None = None) -> Tensors:
        """Queue one checked request and wait for its outputs (host arrays).

        Raises:
            RequestError: 503 when the queue is full or the server is shutting down, 504 when
                ``timeout_s`` passed first.
            InputError, ExecutionError: the model refused the inputs or a kernel raised.
        """
        if self._closing:
            raise RequestError(503, f"model {self.model.name!r} is shutting down")
        if len(self._queue) >= self.max_queue:
            raise RequestError(503, f"model {self.model.name!r}: the queue is full "
                                    f"({self.max_queue} requests waiting); retry later")
        self.start()
        future: asyncio.Future[Tensors] = asyncio.get_running_loop().create_future()
        pending = _Pending(inputs, self.model.batch_size(inputs), self.model.signature(inputs),
                           future)
        self._queue.append(pending)
        self.metrics.queue_depth.labels(self.model.name).set(len(self._queue))
        self._arrival.set()
        try:
            return await asyncio.wait_for(future, timeout_s)
        except (TimeoutError, asyncio.CancelledError) as err:
            if pending in self._queue:  # it never ran: its place goes to the next request
                self._queue.remove(pending)
                self.metrics.queue_depth.labels(self.model.name).set(len(self._queue))
            if isinstance(err, asyncio.CancelledError):
                raise
            raise RequestError(504, f"model {self.model.name!r}: no result within the "
                                    f"request's timeout of {timeout_s:g} s") from None

    async def close(self) -> None:
        """Refuse new requests, finish the queued and running ones, stop the workers."""
        self._closing = True
        while self._queue or self._runs:
            self._arrival.set()
            await asyncio.sleep(0.005)
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        self._executor.shutdown(wait=True)

    # -- the dispatch loop --------------------------------------------------------------------

    async def _dispatch(self) -> None:
        while True:
            await self._slots.acquire()
            batch = await self._collect()
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._runs.add(task)
            task.add_done_callback(self._runs.discard)

    def _drop_abandoned(self) -> None:
        while self._queue and self._queue[0].future.done():  # timed out while waiting
            self._queue.popleft()

    async def _collect(self) -> list[_Pending]:
        while True:
            self._drop_abandoned()
            if not self._queue:
                self._arrival.clear()
                await self._arrival.wait()
                continue
            first = self._queue[0]
            if self.max_batch > 1 and self.max_delay_s > 0:
                deadline = first.arrived + self.max_delay_s
                while self._fill(first) < self.max_batch and not first.future.done():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._arrival.clear()
                    try:
                        await asyncio.wait_for(self._arrival.wait(), remaining)
                    except TimeoutError:
                        break
                if first.future.done():
                    continue
            return self._take(first)

    def _fill(self, first: _Pending) -> int:
        return sum(p.size for p in self._queue
                   if p.signature == first.signature and not p.future.done())

    def _take(self, first: _Pending) -> list[_Pending]:
        batch: list[_Pending] = []
        total = 0
        kept: deque[_Pending] = deque()
        for pending in self._queue:
            if pending.future.done():
                continue
            fits = pending is first or (self.max_batch > 1 and pending.signature ==
                                        first.signature and total + pending.size <=
                                        self.max_batch)
            if fits:
                batch.append(pending)
                total += pending.size
            else:
                kept.append(pending)
        self._queue = kept
        self.metrics.queue_depth.labels(self.model.name).set(len(kept))
        return batch

    async def _run(self, batch: list[_Pending]) -> None:
        started = time.monotonic()
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._execute, [p.inputs for p in batch])
        except Exception as err:  # every waiting request gets the error
            results = [err] * len(batch)
        finally:
            self._slots.release()
        self.metrics.ran(self.model.name, sum(p.size for p in batch),
                         [started - p.arrived for p in batch], time.monotonic() - started)
        for pending, result in zip(batch, results, strict=True):
            if pending.future.done():
                continue
            if isinstance(result, BaseException):
                pending.future.set_exception(result)
            else:
                pending.future.set_result(result)

    def _execute(self, requests: Sequence[Mapping[str, np.ndarray[Any, Any]]]
                 ) -> list[Tensors | BaseException]:
        try:
            return list(self.model.run_stacked(requests))
        except (InputError, ExecutionError):
            if len(requests) == 1:
                raise
        outcomes: list[Tensors | BaseException] = []
        for request in requests:  # find the request at fault
            try:
                outcomes.append(self.model.run(request))
            except Exception as err:  # handed to that request's caller
                outcomes.append(err)
        return outcomes
