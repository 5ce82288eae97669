"""The cuda backend: cupy arrays in GPU memory.

This is the only module that imports cupy; :mod:`graphrt.devices` imports it lazily, the first
time a cuda device is created or a cupy array is seen.

Streams: graphrt queues its copies and kernels on cupy's *current* stream of the device (the one
``cupy.cuda.get_current_stream()`` returns while the module runs). A caller working on its own
stream should run graphrt under ``with stream:`` or synchronize before handing arrays over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cupy
import numpy as np

from ..errors import DeviceError
from .base import Array, Backend, Device

__all__ = ["CudaBackend", "EventTimer", "check_available"]


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
            if dst.flags.c_contiguous:
                dst.set(np.ascontiguousarray(src))
            else:
                dst[...] = cupy.asarray(src)

    def download(self, src: Array, dst: np.ndarray[Any, Any]) -> None:
        with self._context:
            if dst.flags.c_contiguous:
                src.get(out=dst)
            else:
                dst[...] = src.get()

    def synchronize(self) -> None:
        self._context.synchronize()

    def capacity(self) -> int | None:
        with self._context:
            _free, total = cupy.cuda.runtime.memGetInfo()
        return int(total)

    def step_timer(self) -> EventTimer:
        return EventTimer(self._context)

    def bind_kernel(self, kernel: Callable[..., object]) -> Callable[..., object]:
        context = self._context

        def in_context(*args: Array) -> object:
            with context:
                return kernel(*args)

        return in_context
