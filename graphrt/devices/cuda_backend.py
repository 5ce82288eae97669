"""The cuda backend: cupy arrays in GPU memory.

This is the only module that imports cupy; :mod:`graphrt.devices` imports it lazily, the first
time a cuda device is created or a cupy array is seen.

Streams: every run context queues its copies and kernels on a stream of its own
(:class:`ContextStream`), ordered after cupy's *current* stream of the device when the run
starts (the one ``cupy.cuda.get_current_stream()`` returns, a caller's ``with stream:``) and
before it again when the run ends. So a caller's stream sees its inputs consumed and its outputs
ready in its own order, and contexts of different threads overlap on the GPU.

Graph capture (:meth:`CudaBackend.capture`): the work is recorded from the context's stream
(``Stream.begin_capture``/``end_capture``, relaxed mode) into a CUDA graph that is launched at
once and then at every replay. Whatever the kernels allocate meanwhile (cupy temporaries) comes
from a memory pool private to that graph and kept with it, so replays write memory nothing
else is given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import cupy
import cupyx
import numpy as np

from ..errors import DeviceError
from .base import Array, Backend, Device

__all__ = ["ContextStream", "CudaBackend", "CudaReplay", "EventTimer", "check_available"]


def check_available(ordinal: int) -> None:
    """Raise :class:`DeviceError` unless GPU ``ordinal`` can be used."""
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as err:
        raise DeviceError(f"cuda:{ordinal} is not available: no usable CUDA driver or GPU "
                          f"({err})") from None
    if not 0 <= ordinal < count:
        raise DeviceError(f"cuda:{ordinal} does not exist: this machine has {count} GPU(s)")


class EventTimer:
    """CUDA events around one step, a pair per repeat, on the current stream."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self._events: dict[int, tuple[Any, Any]] = {}

    def start(self, repeat: int) -> None:
        with self._context:
            pair = self._events.get(repeat) or (cupy.cuda.Event(), cupy.cuda.Event())
            self._events[repeat] = pair
            pair[0].record()

    def stop(self, repeat: int) -> None:
        with self._context:
            self._events[repeat][1].record()

    def elapsed_us(self, repeat: int) -> float:
        begin, end = self._events[repeat]
        return float(cupy.cuda.get_elapsed_time(begin, end)) * 1e3


class ContextStream:
    """One run context's stream on one GPU.

    Entering orders it after the caller's current stream (an event) and makes it current;
    leaving makes the caller's stream wait for it (an event). So runs of different contexts
    overlap on the GPU, while a caller that works under ``with stream:`` sees the outputs ready
    in its own stream's order, as the stream contract says. Not for use by two threads at once
    (a context belongs to one thread).
    """

    def __init__(self, context: Any) -> None:
        self._context = context
        with context:
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self._caller: Any = None

    def __enter__(self) -> ContextStream:
        self._context.__enter__()
        self._caller = cupy.cuda.get_current_stream()
        self.stream.wait_event(self._caller.record())
        self.stream.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.__exit__(*exc)
        self._caller.wait_event(self.stream.record())
        self._caller = None
        self._context.__exit__(*exc)


class CudaReplay:
    """A captured CUDA graph, the private memory pool its temporaries came from, and the
    stream to launch it on by default."""

    def __init__(self, graph: Any, pool: Any) -> None:
        self.graph, self.pool = graph, pool

    def launch(self) -> None:
        """Launch the graph on the current stream (the run context's, inside a run)."""
        self.graph.launch(stream=cupy.cuda.get_current_stream())


_TO_DEVICE = cupy.cuda.runtime.memcpyHostToDevice
_TO_HOST = cupy.cuda.runtime.memcpyDeviceToHost


def _same_type(src: Any, dst: Any) -> None:
    if src.shape != dst.shape or src.dtype != dst.dtype:  # a caller's bug (Backend.copy)
        raise AssertionError(f"source {src.dtype}{list(src.shape)} and destination "
                             f"{dst.dtype}{list(dst.shape)} differ")


def _memcpy(dst: int, src: int, nbytes: int, kind: int) -> None:
    """Copy ``nbytes`` between host and device on the current stream (the run context's,
    inside a run) and wait for that stream only: from or to pinned host memory (the slots
    at a graph's ``__copy`` nodes are pinned) the DMA runs at the bus's speed, and once this
    returns the host may read what came down or write over what went up."""
    if nbytes:
        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
        stream.synchronize()


class CudaBackend(Backend):
    """GPU memory from cupy's memory pool; kernels run under the device's context."""

    xp = cupy

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self._context = cupy.cuda.Device(device.id)

    def allocate(self, nbytes: int) -> Array:
        # cupy's pool hands out blocks aligned to 512 bytes, beyond ALIGNMENT.
        with self._context:
            return cupy.zeros(nbytes, dtype=cupy.uint8)

    def native(self, value: object) -> Array | None:
        if isinstance(value, cupy.ndarray):
            return value
        dlpack_device = getattr(value, "__dlpack_device__", None)
        if dlpack_device is not None and dlpack_device()[0] == self.device.type_code:
            return cupy.from_dlpack(value)
        return None

    def data_ptr(self, array: Array) -> int:
        return int(array.data.ptr)

    def copy(self, src: Array, dst: Array) -> None:
        with self._context:
            if src.flags.c_contiguous and dst.flags.c_contiguous:
                # A raw device-to-device memcpy; works across GPUs (unified addressing).
                dst.data.copy_from_device_async(src.data, src.nbytes)
            else:
                cupy.copyto(dst, src)

    def upload(self, src: np.ndarray[Any, Any], dst: Array) -> None:
        with self._context:
            if src.flags.c_contiguous and dst.flags.c_contiguous:
                _same_type(src, dst)
                _memcpy(int(dst.data.ptr), src.ctypes.data, src.nbytes, _TO_DEVICE)
            else:
                dst[...] = cupy.asarray(src)

    def download(self, src: Array, dst: np.ndarray[Any, Any]) -> None:
        with self._context:
            if src.flags.c_contiguous and dst.flags.c_contiguous:
                _same_type(src, dst)
                _memcpy(dst.ctypes.data, int(src.data.ptr), src.nbytes, _TO_HOST)
            else:
                dst[...] = src.get()

    def allocate_host(self, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        try:
            pinned: np.ndarray[Any, np.dtype[np.uint8]] = cupyx.zeros_pinned((nbytes,),
                                                                             np.uint8)
        except cupy.cuda.runtime.CUDARuntimeError as err:  # cudaErrorMemoryAllocation
            raise MemoryError(f"pinned host memory: {err}") from None
        return pinned

    def run_scope(self) -> ContextStream:
        return ContextStream(self._context)

    def synchronize(self) -> None:
        self._context.synchronize()

    def capacity(self) -> int | None:
        with self._context:
            _free, total = cupy.cuda.runtime.memGetInfo()
        return int(total)

    def step_timer(self) -> EventTimer:
        return EventTimer(self._context)

    def capture(self, work: Callable[[], None]) -> CudaReplay:
        with self._context:
            stream = cupy.cuda.get_current_stream()
            pool = cupy.cuda.MemoryPool()
            with cupy.cuda.using_allocator(pool.malloc):
                stream.begin_capture()
                try:
                    work()
                except BaseException:
                    with contextlib.suppress(Exception):  # the original error is the news
                        stream.end_capture()  # discard what was recorded: none of it ran
                    raise
                graph = stream.end_capture()
            replay = CudaReplay(graph, pool)
            replay.launch()
        return replay

    def bind_kernel(self, kernel: Callable[..., object]) -> Callable[..., object]:
        context = self._context

        def in_context(*args: Array) -> object:
            with context:
                return kernel(*args)

        return in_context
