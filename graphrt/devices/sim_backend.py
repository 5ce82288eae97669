"""The simulated accelerator: host memory behind a device boundary that is enforced and counted.

A :class:`SimArray` is a numpy array tagged with its sim device. Ufuncs refuse to mix it with
arrays of any other device (as cupy refuses numpy arrays), so a kernel that was handed another
device's array fails loudly. :class:`SimCounters` counts every copy and byte that crosses into,
out of and within the device, so tests can prove what moved.

Graph capture is simulated too (:meth:`SimBackend.capture`): while a thread records work for a
sim device, reading that device's memory on the host (``item()``, ``tolist()``, ``int()``,
``float()``, ``bool()``, indexing a scalar, a download) or writing it from the host (an
upload) raises, as a host synchronization does under CUDA stream capture; a recording
launches the same calls on the same arrays again, so work recorded before its memory was
rebound would replay on the old memory, as a CUDA graph would.

Copies are as strict as cupy's: ``ndarray.set`` and ``ndarray.get(out=)`` refuse a host
array of another shape or dtype (a 0-d array and its 1-element reshape included), and a raw
device copy moves bytes whatever the shapes say; so the sim refuses every such pair, as an
internal error of graphrt, where numpy would broadcast it. Neither side needs to be
contiguous: cupy makes a source contiguous itself, and the cuda backend hands ``set`` and
``get(out=)`` contiguous destinations only (any other goes through a temporary).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .base import Array, Backend, Device, aligned_zeros

__all__ = ["SimArray", "SimBackend", "SimCounters", "SimReplay"]

_capturing = threading.local()
"""``devices``: the sim devices the calling thread is recording work for."""


def _refuse_under_capture(device: Device | None, what: str) -> None:
    if device is not None and device in getattr(_capturing, "devices", ()):
        raise RuntimeError(f"{what} on {device} while its work is being captured into a graph: "
                           "the host cannot wait for a device inside a capture (CUDA refuses "
                           "it as cudaErrorStreamCaptureUnsupported)")


def _check_transfer(what: str, src: Any, dst: Any, *, host_src: bool = False,
                    host_dst: bool = False) -> None:
    """Refuse a copy cupy would refuse, or would make by bytes whatever the shapes say.

    ``src`` and ``dst`` must have the same shape and dtype (no broadcast, cast or reshape:
    ``cupy.ndarray.set`` raises ``Shape mismatch`` for a 0-d array set from shape ``(1,)``); a
    host side (``host_src``, ``host_dst``) must be a plain ``numpy.ndarray`` (cupy's
    ``set``/``get(out=)`` take nothing else), and a device side a :class:`SimArray`.

    Raises:
        AssertionError: the pair differs; graphrt checks what users give before it copies,
            so this is an internal bug of the caller (the message names both sides).
    """
    for side, array, host in (("source", src, host_src), ("destination", dst, host_dst)):
        if host != (isinstance(array, np.ndarray) and not isinstance(array, SimArray)):
            expected = "a host numpy.ndarray" if host else "a sim array"
            raise AssertionError(f"{what}: the {side} must be {expected}, given "
                                 f"{type(array).__name__}")
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise AssertionError(f"{what}: source {src.dtype}{list(src.shape)} and destination "
                             f"{dst.dtype}{list(dst.shape)} differ; cupy copies only between "
                             "arrays of one shape and dtype (reshape the view, not the data)")


class SimArray(np.ndarray):  # type: ignore[type-arg,unused-ignore]
    """A numpy array that lives on a sim device (``arr.device`` says which)."""

    _sim_device: Device | None = None

    def __array_finalize__(self, obj: object) -> None:
        self._sim_device = getattr(obj, "_sim_device", None)

    @property
    def device(self) -> Device:  # type: ignore[override]
        """The sim device holding this array."""
        assert self._sim_device is not None
        return self._sim_device

    def __getitem__(self, key: Any) -> Any:
        result = super().__getitem__(key)
        if not isinstance(result, np.ndarray):  # a scalar: cupy would give a 0-d array
            _refuse_under_capture(self._sim_device, "indexing a scalar reads device memory on "
                                  "the host")
        return result

    def item(self, *args: Any) -> Any:
        _refuse_under_capture(self._sim_device, "item() reads device memory on the host")
        return super().item(*args)

    def tolist(self) -> Any:
        _refuse_under_capture(self._sim_device, "tolist() reads device memory on the host")
        return super().tolist()

    def __int__(self) -> int:
        _refuse_under_capture(self._sim_device, "int() reads device memory on the host")
        return int(self.view(np.ndarray))

    def __float__(self) -> float:
        _refuse_under_capture(self._sim_device, "float() reads device memory on the host")
        return float(self.view(np.ndarray))

    def __bool__(self) -> bool:
        _refuse_under_capture(self._sim_device, "bool() reads device memory on the host")
        return bool(self.view(np.ndarray))

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        device = self._sim_device
        outs = kwargs.get("out") or ()
        for value in (*inputs, *outs):
            if isinstance(value, np.ndarray) and getattr(value, "_sim_device", None) != device:
                where = getattr(value, "_sim_device", None) or "the host"
                raise TypeError(f"{ufunc.__name__}: an array on {device} cannot be combined with "
                                f"an array on {where}; copy it to {device} first")
        plain = tuple(v.view(np.ndarray) if isinstance(v, SimArray) else v for v in inputs)
        if outs:
            kwargs["out"] = tuple(v.view(np.ndarray) for v in outs)
        result = getattr(ufunc, method)(*plain, **kwargs)
        if outs:
            return outs[0] if len(outs) == 1 else outs
        return _tag(result, device)


def _tag(result: Any, device: Device | None) -> Any:
    if isinstance(result, tuple):
        return tuple(_tag(item, device) for item in result)
    if isinstance(result, np.ndarray):
        tagged = result.view(SimArray)
        tagged._sim_device = device
        return tagged
    return result


@dataclass
class SimCounters:
    """Copies and bytes that crossed a sim device's boundary (or moved within it)."""

    uploads: int = 0
    """host → sim copies."""
    upload_bytes: int = 0
    downloads: int = 0
    """sim → host copies."""
    download_bytes: int = 0
    device_copies: int = 0
    """sim → sim copies."""
    device_copy_bytes: int = 0

    def reset(self) -> None:
        """Set every counter back to zero."""
        for field in fields(self):
            setattr(self, field.name, 0)


class SimBackend(Backend):
    """The sim device's backend: numpy kernels, tagged arrays, counted copies."""

    xp = np

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self.counters = SimCounters()

    def allocate(self, nbytes: int) -> Array:
        return _tag(aligned_zeros(nbytes), self.device)

    def native(self, value: object) -> Array | None:
        return value if isinstance(value, SimArray) else None

    def copy(self, src: Array, dst: Array) -> None:
        _check_transfer(f"a copy on {self.device}", src, dst)
        np.copyto(dst.view(np.ndarray), src.view(np.ndarray), casting="no")
        self.counters.device_copies += 1
        self.counters.device_copy_bytes += src.nbytes

    def upload(self, src: np.ndarray[Any, Any], dst: Array) -> None:
        _refuse_under_capture(self.device, "an upload from the host")
        _check_transfer(f"an upload to {self.device}", src, dst, host_src=True)
        np.copyto(dst.view(np.ndarray), src, casting="no")
        self.counters.uploads += 1
        self.counters.upload_bytes += src.nbytes

    def download(self, src: Array, dst: np.ndarray[Any, Any]) -> None:
        _refuse_under_capture(self.device, "a download to the host")
        _check_transfer(f"a download from {self.device}", src, dst, host_dst=True)
        np.copyto(dst, src.view(np.ndarray), casting="no")
        self.counters.downloads += 1
        self.counters.download_bytes += src.nbytes

    def capture(self, work: Callable[[], None]) -> SimReplay:
        """Run ``work`` once, refusing host reads and writes of this device meanwhile (see the
        module's docstring), and return it as the recording."""
        devices: set[Device] = getattr(_capturing, "devices", set())
        _capturing.devices = devices | {self.device}
        try:
            work()
        finally:
            _capturing.devices = devices
        return SimReplay(work)


class SimReplay:
    """A sim device's recording: the captured calls, launched again on the same arrays."""

    def __init__(self, work: Callable[[], None]) -> None:
        self._work = work
        self.launches = 0

    def launch(self) -> None:
        """Run the recorded calls again."""
        self.launches += 1
        self._work()
