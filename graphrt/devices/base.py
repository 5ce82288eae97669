"""The device value type and the small interface every backend implements."""

from __future__ import annotations

import mmap
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from math import prod
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from .host_memory import host_memory_limit

__all__ = [
    "ALIGNMENT",
    "CPU",
    "CUDA",
    "HUGE_PAGE",
    "SIM",
    "Array",
    "Backend",
    "Device",
    "Replay",
    "StepTimer",
    "aligned_copy",
    "aligned_zeros",
]

# DLPack device type codes graphrt has backends for. Sim takes ext_dev's code.
CPU, CUDA, SIM = 1, 2, 12
KIND_NAMES = {CPU: "cpu", CUDA: "cuda", SIM: "sim"}
KIND_CODES = {name: code for code, name in KIND_NAMES.items()}

ALIGNMENT = 64
"""Byte alignment of every buffer graphrt allocates (TVM's kAllocAlignment)."""

Array = Any
"""A device's native array: ``numpy.ndarray`` on cpu, ``SimArray`` on sim, ``cupy.ndarray``."""


def aligned_zeros(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A zero-filled uint8 host buffer whose first byte is :data:`ALIGNMENT`-aligned; from
    :data:`HUGE_PAGE` bytes up, in huge pages where the system has them (:func:`_huge_zeros`).

    Example:
        >>> buffer = aligned_zeros(3 << 20)
        >>> buffer.ctypes.data % ALIGNMENT, int(buffer.sum())
        (0, 0)
    """
    if nbytes >= HUGE_PAGE and _MADV_HUGEPAGE is not None:
        return _huge_zeros(nbytes, _MADV_HUGEPAGE)
    raw = np.zeros(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    # Not a slice: numpy gives an empty slice its base's address, unaligned.
    aligned: np.ndarray[Any, np.dtype[np.uint8]] = np.ndarray(
        (nbytes,), dtype=np.uint8, buffer=raw, offset=offset)
    return aligned


HUGE_PAGE = 1 << 21
"""Bytes of a transparent huge page on x86-64 and most arm64 kernels; buffers of at least
this size start on one (:func:`_huge_zeros`)."""
_MADV_HUGEPAGE: int | None = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only


def _huge_zeros(nbytes: int, advice: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """``nbytes`` of fresh anonymous memory starting on a :data:`HUGE_PAGE` boundary, its
    whole huge pages advised to the kernel as such (``madvise(MADV_HUGEPAGE)``; the rest and
    the slack before the start are never touched, so they take no memory).

    A weight read from 4 KiB pages needs a page-table walk every 4 KiB, and in a virtual
    machine each walk is two (the guest's tables, then the host's): four 1024 x 1024 float32
    matrix-vector products took 0.85-0.92x as long on weights in huge pages as in 4 KiB
    pages (60 rounds in random order, one process). numpy advises only the aligned 2 MiB
    stretches of its own large allocations, so about half of graphrt's weights had been in
    huge pages; all of them are now, and the MLP at batch 1 runs about 7% faster (two
    processes, old and new tree alternated, both orders). Products that reuse each weight
    over many rows gain nothing (ResNet-18 and -50, the 512 x 512 branches: level). Where the
    kernel's THP setting is ``never`` the advice does nothing and this is plain zeroed memory.
    """
    try:
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, OverflowError) as err:  # ENOMEM, or past any address: as numpy's would be
        raise MemoryError(f"cannot map {nbytes} bytes: {err}") from None
    whole = np.frombuffer(region, dtype=np.uint8)
    start = -whole.ctypes.data % HUGE_PAGE
    pages = nbytes - nbytes % HUGE_PAGE
    with suppress(OSError):  # a kernel without THP: plain pages
        region.madvise(advice, start, pages)
    return whole[start:start + nbytes]


def aligned_copy(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``values`` flattened into a new buffer whose first byte is :data:`ALIGNMENT`-aligned:
    a packed weight whose 64-byte rows each start a cache line (numpy's own buffers start 16
    bytes into one, and every other vector load of such a row then spans two lines).

    Example:
        >>> aligned_copy(np.arange(3, dtype=np.float32)).ctypes.data % ALIGNMENT
        0
    """
    flat = np.ascontiguousarray(values).reshape(-1)
    out: np.ndarray[Any, Any] = aligned_zeros(flat.nbytes).view(flat.dtype)
    out[...] = flat
    return out


@dataclass(frozen=True, order=True)
class Device:
    """A device: a DLPack device type code and an ordinal.

    Create them with :func:`graphrt.cpu`, :func:`graphrt.cuda`, :func:`graphrt.sim` or
    :func:`graphrt.device`, which also check the device can be used.

    Example:
        >>> import graphrt
        >>> str(graphrt.sim(1)), graphrt.sim(1).type_code
        ('sim:1', 12)
    """

    type_code: int
    id: int = 0

    @property
    def kind(self) -> str:
        """``"cpu"``, ``"cuda"``, ``"sim"``, or ``"type<N>"`` for a code graphrt cannot run."""
        return KIND_NAMES.get(self.type_code, f"type{self.type_code}")

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"

    def __repr__(self) -> str:
        return f"graphrt.device({str(self)!r})"


class Replay(Protocol):
    """Device work recorded once by :meth:`Backend.capture`, launched again as a whole."""

    def launch(self) -> None:
        """Queue the recorded work again (on cuda, on the current stream), as recorded: on
        the same memory, at the same shapes."""
        ...


class StepTimer(Protocol):
    """Times one step on a device whose work is asynchronous (one start/stop per repeat)."""

    def start(self, repeat: int) -> None: ...

    def stop(self, repeat: int) -> None: ...

    def elapsed_us(self, repeat: int) -> float:
        """Valid once the device has been synchronized."""
        ...


class Backend(ABC):
    """What graphrt needs from one device: memory, views, copies, synchronization.

    Every copy between devices goes through these methods, so streams, pinned staging buffers
    and events have one place to live. Copies take ``(src, dst)``, like a ``__copy`` kernel.
    """

    device: Device
    xp: ModuleType
    """The array namespace kernels of this device use (numpy or cupy)."""

    def __init__(self, device: Device) -> None:
        self.device = device

    @abstractmethod
    def allocate(self, nbytes: int) -> Array:
        """A zero-filled 1-D uint8 buffer of ``nbytes`` bytes, aligned to :data:`ALIGNMENT`."""

    def view(self, buffer: Array, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
        """An offset-0 view of ``buffer`` typed as ``dtype`` with ``shape``."""
        nbytes = prod(shape) * dtype.itemsize
        return buffer[:nbytes].view(dtype).reshape(shape)

    @abstractmethod
    def native(self, value: object) -> Array | None:
        """``value`` as this device kind's array without a copy, or None if it is not one."""

    def data_ptr(self, array: Array) -> int:
        """Address of the array's first element (host address on host devices)."""
        return int(array.ctypes.data)

    @abstractmethod
    def copy(self, src: Array, dst: Array) -> None:
        """Copy between two arrays of this device kind (the ordinals may differ).

        In :meth:`copy`, :meth:`upload` and :meth:`download`, ``src`` and ``dst`` have the
        same shape and dtype (a 0-d array and a 1-element one differ): cupy's ``ndarray.set``
        and ``ndarray.get(out=)`` refuse anything else, and a raw device copy would move bytes
        whatever the shapes. Either may be non-contiguous. The sim backend refuses a pair
        that differs (an ``AssertionError``: a caller's bug), so CPU tests find it.
        """

    @abstractmethod
    def upload(self, src: np.ndarray[Any, Any], dst: Array) -> None:
        """Copy a host (numpy) array into an array of this device (as :meth:`copy`)."""

    @abstractmethod
    def download(self, src: Array, dst: np.ndarray[Any, Any]) -> None:
        """Copy an array of this device into a host (numpy) array (as :meth:`copy`)."""

    def allocate_host(self, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """A host buffer for staging copies to and from this device (pinned on cuda, so
        copies through it run at the bus's speed), zero-filled and :data:`ALIGNMENT`-aligned
        like :meth:`allocate`'s. Allocated once, when a run context is made: the host slots of
        a graph's ``__copy`` nodes to and from this device, and staging buffers."""
        return aligned_zeros(nbytes)

    def run_scope(self) -> AbstractContextManager[object] | None:
        """What a run context enters around each run on this device: on cuda, the context's
        own stream, ordered after the caller's current stream and before it again. None on
        host devices (their work is done when a kernel returns)."""
        return None

    def synchronize(self) -> None:  # noqa: B027 (host devices finish work synchronously)
        """Wait until all work queued on this device has finished."""

    def capacity(self) -> int | None:
        """Bytes this device can still hold, or None when unknown: on host devices what this
        process may still allocate (:func:`~graphrt.devices.host_memory.host_memory_limit`:
        available memory, resource limits and the cgroup's limit, less what is in use)."""
        return host_memory_limit()

    def step_timer(self) -> StepTimer | None:
        """A device-side timer for the profiler, or None where wall clock is exact (host)."""
        return None

    def capture(self, work: Callable[[], None]) -> Replay | None:
        """Run ``work`` (kernels queued on this device) once and return a recording of it to
        launch again, or None where this device records nothing (host devices: their kernels
        are plain calls, a recording would save nothing). On cuda, a CUDA graph captured from
        the current stream; whatever ``work`` raises (a host synchronization the capture
        cannot record, say) propagates, and nothing of it ran."""
        work()
        return None

    def bind_kernel(self, kernel: Callable[..., object]) -> Callable[..., object]:
        """Wrap a kernel so it runs in this device's context (identity on host devices)."""
        return kernel
