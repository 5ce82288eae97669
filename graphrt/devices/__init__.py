"""Devices: creating them, their backends, locating arrays, and copies between any two.

Example:
    >>> import numpy as np, graphrt
    >>> from graphrt.devices import backend_for, locate
    >>> sim = graphrt.sim(0)
    >>> buf = backend_for(sim).allocate(16)
    >>> locate(buf)[0]
    graphrt.device('sim:0')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import (
    ArgumentError,
    DeviceError,
    InputError,
    PlacementError,
    argument_error,
    describe,
)
from .base import ALIGNMENT, CPU, CUDA, KIND_CODES, SIM, Array, Backend, Device, Replay
from .cpu_backend import CpuBackend
from .host_memory import host_memory_limit
from .sim_backend import SimArray, SimBackend, SimCounters

__all__ = [
    "ALIGNMENT",
    "CPU",
    "CUDA",
    "SIM",
    "Array",
    "Backend",
    "Copier",
    "Device",
    "DeviceArgumentError",
    "Replay",
    "SimArray",
    "SimCounters",
    "allocate",
    "allocate_host",
    "backend_for",
    "copier",
    "cpu",
    "cuda",
    "device",
    "host_memory_limit",
    "is_array",
    "locate",
    "parse_device_map",
    "sim",
    "sim_counters",
]

Copier = Callable[[Array, Array], None]
"""A copy from one device to another: ``copy(src, dst)``."""

_BACKENDS: dict[Device, Backend] = {}
_MAX_ORDINAL = 1 << 31


class DeviceArgumentError(ArgumentError, DeviceError):
    """A device argument of the wrong kind (``cpu("0")``, ``device(3)``): an
    :class:`~graphrt.ArgumentError` (so also a ``TypeError``) and a
    :class:`~graphrt.DeviceError`, as every bad device argument is."""


def _device_argument(name: str, expected: str, given: object) -> DeviceArgumentError:
    """A :class:`DeviceArgumentError` with :func:`~graphrt.errors.argument_error`'s message."""
    try:
        argument_error(name, expected, given)
    except ArgumentError as err:
        return DeviceArgumentError(*err.args)


def _check_ordinal(kind: str, ordinal: int) -> None:
    if not isinstance(ordinal, int) or isinstance(ordinal, bool):
        raise _device_argument(f"{kind}(ordinal)", "a non-negative int", ordinal)
    if not 0 <= ordinal < _MAX_ORDINAL:
        raise DeviceError(f"{kind} device ordinal must be a non-negative int below "
                          f"{_MAX_ORDINAL}, given {describe(ordinal)}")


def cpu(ordinal: int = 0) -> Device:
    """The host CPU (numpy arrays). ``graphrt.cpu()`` is ``cpu:0``."""
    _check_ordinal("cpu", ordinal)
    return Device(CPU, ordinal)


def sim(ordinal: int = 0) -> Device:
    """A simulated accelerator (device type 12): host memory, tagged arrays, copy counters."""
    _check_ordinal("sim", ordinal)
    return Device(SIM, ordinal)


def cuda(ordinal: int = 0) -> Device:
    """GPU ``ordinal`` through cupy.

    Raises:
        DeviceError: cupy is not installed (install the ``cuda`` extra), or no such GPU.
    """
    _check_ordinal("cuda", ordinal)
    _cuda_module().check_available(ordinal)
    return Device(CUDA, ordinal)


def device(spec: str | Device) -> Device:
    """A device from text: ``"cpu"``, ``"cuda:1"``, ``"sim:0"`` (the ordinal defaults to 0).

    Example:
        >>> import graphrt
        >>> graphrt.device("sim:2")
        graphrt.device('sim:2')
    """
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise _device_argument("device", "a Device or text like 'cuda:0'", spec)
    kind, colon, ordinal_text = spec.strip().lower().partition(":")
    if kind not in KIND_CODES:
        raise DeviceError(f"unknown device kind {describe(kind)} in {describe(spec)} (known: "
                          f"{', '.join(KIND_CODES)})")
    if colon and not (ordinal_text.isascii() and ordinal_text.isdigit()
                      and len(ordinal_text) <= 10):
        raise DeviceError(f"device ordinal in {describe(spec)} must be a non-negative integer "
                          f"below {_MAX_ORDINAL}")
    factory = {"cpu": cpu, "cuda": cuda, "sim": sim}[kind]
    return factory(int(ordinal_text or 0))


def parse_device_map(mapping: Mapping[str | int, Device | str]) -> dict[int, Device]:
    """A ``device_map`` as type code -> device: keys are device kinds (``"cuda"``) or DLPack
    type codes (2), values devices or their text (``"sim:0"``).

    Raises:
        DeviceError: a key that names no device type, or a value that is not a device.

    Example:
        >>> parse_device_map({"cuda": "sim:0"})
        {2: graphrt.device('sim:0')}
    """
    if not isinstance(mapping, Mapping):
        raise _device_argument("device_map", "a mapping of device kinds to devices (device_map "
                               "must be a mapping)", mapping)
    result: dict[int, Device] = {}
    for key, value in mapping.items():
        if isinstance(key, str) and key.strip().lower() in KIND_CODES:
            code = KIND_CODES[key.strip().lower()]
        elif isinstance(key, int) and not isinstance(key, bool) and key > 0:
            code = key
        else:
            raise DeviceError(f"device_map key {describe(key)} is not a device kind ("
                              f"{', '.join(KIND_CODES)}) or a positive DLPack type code")
        result[code] = device(value)
    return result


def _cuda_module() -> Any:
    try:
        from . import cuda_backend
    except ImportError as err:
        raise DeviceError("cuda devices need CuPy, which is not installed: "
                          "pip install 'graphrt[cuda]'") from err
    return cuda_backend


def backend_for(dev: Device) -> Backend:
    """The backend of ``dev`` (one per device, so sim counters persist across modules)."""
    backend = _BACKENDS.get(dev)
    if backend is None:
        if dev.type_code == CPU:
            backend = CpuBackend(dev)
        elif dev.type_code == SIM:
            backend = SimBackend(dev)
        elif dev.type_code == CUDA:
            backend = _cuda_module().CudaBackend(dev)
        else:
            raise DeviceError(f"graphrt has no backend for device type {dev.type_code} "
                              "(it runs cpu, cuda and sim)")
        _BACKENDS[dev] = backend
    return backend


def sim_counters(dev: Device | str) -> SimCounters:
    """The copy and byte counters of a sim device.

    Example:
        >>> import graphrt
        >>> graphrt.sim_counters(graphrt.sim(0)).reset()
    """
    backend = backend_for(device(dev))
    if not isinstance(backend, SimBackend):
        raise DeviceError(f"{dev} is not a sim device; only sim devices count copies")
    return backend.counters


def locate(value: object) -> tuple[Device, Array]:
    """Find which device ``value`` lives on and return it as that device's native array.

    Accepts numpy and cupy arrays, sim arrays, anything with ``__dlpack__`` (PyTorch, JAX) and,
    on the host, anything ``numpy.asarray`` accepts. Never copies when the value is already an
    array a device can use directly.

    Raises:
        InputError: the value is on a device graphrt has no backend for, or is not array-like.
    """
    if isinstance(value, SimArray):
        return value.device, value
    if isinstance(value, np.ndarray):
        return Device(CPU, 0), value
    if type(value).__module__.partition(".")[0] == "cupy":
        return _locate_cuda(value, int(value.device.id))  # type: ignore[attr-defined]
    dlpack_device = getattr(value, "__dlpack_device__", None)
    if dlpack_device is not None and hasattr(value, "__dlpack__"):
        type_code, ordinal = (int(part) for part in dlpack_device())
        if type_code == CUDA:
            return _locate_cuda(value, ordinal)
        if type_code != CPU:
            raise InputError(f"{type(value).__name__} lives on DLPack device type {type_code}, "
                             "which graphrt has no backend for")
        try:
            return Device(CPU, 0), np.from_dlpack(value)
        except (TypeError, ValueError, RuntimeError, BufferError) as err:
            name = type(value).__name__
            raise InputError(f"cannot import {name} through DLPack: {err}") from None
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise InputError(f"{type(value).__name__} is not an array: {err}") from None
    if array.dtype.kind in "OSUV":  # None, text, arbitrary objects: nothing a tensor holds
        argument_error("value", "an array of numbers (numpy, cupy, sim, or anything with "
                       "__dlpack__ or __array__)", value)
    return Device(CPU, 0), array


def is_array(value: object) -> bool:
    """Whether ``value`` is memory a device holds (a numpy, sim or cupy array, or a DLPack
    tensor), rather than something :func:`locate` would copy into a new array (a list)."""
    return (isinstance(value, np.ndarray) or hasattr(value, "__dlpack__")
            or type(value).__module__.partition(".")[0] == "cupy")


def allocate(dev: Device, nbytes: int, what: str) -> Array:
    """A zero-filled buffer of ``nbytes`` on ``dev`` for ``what`` (a storage id, scratch...).

    Every buffer graphrt allocates comes from here, so a failure is reported in one way.

    Raises:
        PlacementError: the device could not give the memory (numpy's or cupy's
            ``MemoryError``), naming ``what``, the bytes and the device.
    """
    try:
        return backend_for(dev).allocate(nbytes)
    except (MemoryError, ValueError) as err:  # ValueError: numpy's "array is too big"
        raise _no_memory(dev, nbytes, what, err) from None


def allocate_host(dev: Device, nbytes: int, what: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A host staging buffer for copies to and from ``dev`` (pinned on cuda).

    Raises:
        PlacementError: as :func:`allocate`.
    """
    try:
        return backend_for(dev).allocate_host(nbytes)
    except (MemoryError, ValueError) as err:
        raise _no_memory(dev, nbytes, f"host staging of {what}", err) from None


def _no_memory(dev: Device, nbytes: int, what: str, err: Exception) -> PlacementError:
    limit = host_memory_limit() if dev.type_code != CUDA else None
    left = "" if limit is None else f"; this process may allocate about {limit} more bytes"
    return PlacementError(f"cannot allocate {nbytes} bytes on {dev} for {what} "
                          f"({type(err).__name__}: {str(err)[:120]}){left}")


def _locate_cuda(value: object, ordinal: int) -> tuple[Device, Array]:
    dev = Device(CUDA, ordinal)
    native = backend_for(dev).native(value)
    if native is None:
        raise InputError(f"cannot import {type(value).__name__} on {dev}")
    return dev, native


def copier(src: Device, dst: Device, *, staging: int = 0) -> Copier:
    """The function that copies an array on ``src`` into an array on ``dst``.

    Chosen once (at ``create()``, or when a run context is made), so a run pays no dispatch:
    same kind → the backend's own copy; host ↔ device → upload or download; device ↔ device of
    different kinds → staged through host memory: a buffer of ``staging`` bytes from the source
    backend (pinned on cuda), allocated here once, or a fresh one per call when ``staging`` is 0
    or too small.
    Both arrays must have the same shape and dtype (:meth:`Backend.copy`); either may be
    non-contiguous.
    """
    src_backend, dst_backend = backend_for(src), backend_for(dst)
    if src.type_code == dst.type_code:
        return src_backend.copy
    if src.type_code == CPU:
        return dst_backend.upload
    if dst.type_code == CPU:
        return src_backend.download
    buffer = allocate_host(src, staging, f"a copy {src} -> {dst}") if staging else None

    def staged(source: Array, target: Array) -> None:
        if buffer is not None and source.nbytes <= buffer.nbytes:
            host = buffer[:source.nbytes].view(source.dtype).reshape(source.shape)
        else:
            host = np.empty(source.shape, dtype=source.dtype)
        src_backend.download(source, host)
        dst_backend.upload(host, target)

    return staged
