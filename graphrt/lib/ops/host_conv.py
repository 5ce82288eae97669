"""The direct convolution on the host: its geometry at given shapes, and the call that runs
the compiled kernel of :mod:`graphrt.lib.ops.direct_conv` over the cores.

A 2-D float32 convolution of one group runs with no im2col and no GEMM: the data is copied
once into a padded buffer (the workspace; only its border is zeroed, and data that needs no
padding is read in place), the weight is packed 16 output channels at a time once per loaded
weight (:func:`graphrt.lib.frozen.derived`), and the tiles of 16 channels x 6 pixels are run
on the calling thread and helper threads, one per other core (the compiled kernel releases
the GIL). Threads claim tiles a few at a time from a shared counter, so a
helper that starts late takes less or none of the work, and the calling thread returns once
every tile is done (see :class:`_Crew`). Safe to call from several threads at once: one
caller at a time has the helpers, the others run alone. A 1x1 convolution without padding
runs the pointwise kernel the same way (:class:`PointwisePlan`), and either adds a residual
and applies relu as it stores (:func:`run_direct`'s ``residual`` and ``relu``).

Example:
    >>> plan = direct_plan((1, 3, 8, 8), (16, 3, 3, 3), (1, 16, 8, 8), (1, 1), (1, 1),
    ...                    (1, 1))
    >>> plan.workspace, plan.length, plan.jobs  # a padded 10x10 copy; 64 pixels in 11 tiles
    ((300,), 64, 11)
"""

from __future__ import annotations

import itertools
import math
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any

import numpy as np

from ..frozen import derived

__all__ = ["DirectPlan", "PointwisePlan", "direct_plan", "pointwise_plan", "quiet_helpers",
           "run_direct", "run_pointwise"]

# Tiles, as in direct_conv (not imported: that needs numba): 16 output channels x 6 pixels,
# and pointwise 6 output channels x 16 pixels.
_CHANNELS, _PIXELS, _ROWS, _SPAN = 16, 6, 6, 16

_MIN_WORK = 50_000
"""Tile-taps (about 7 cycles each) below which a convolution runs on the calling thread
alone: bringing in the helpers costs tens of microseconds."""

Jobs = Callable[..., bool]
"""A job function of :mod:`graphrt.lib.ops.direct_conv` (:func:`conv_jobs`,
:func:`pointwise_jobs`): its arguments, then counters, grain, bell, caller, call, spins."""
Task = tuple[int, Jobs, tuple[Any, ...]]
"""What a helper is queued: the call number, the job function, its leading arguments."""


@dataclass(frozen=True)
class DirectPlan:
    """A direct convolution at given shapes.

    Attributes:
        workspace: the padded data buffer's shape (flat), None where the data is read in
            place.
        image: elements per (padded) image.
        length: output pixels per image.
        jobs: tiles (16 output channels x 6 pixels) over the batch.
        grain: tiles a thread claims at a time.
        strip: tiles along the output whose data (about :data:`_STRIP_BYTES`) every block
            of output channels runs over before the next strip.
        parallel: worth running on every core.
        padded_shape: the padded data ``[N, C, Hp, Wp]`` (the data's own shape when read in
            place).
        begin: the rows and columns of padding before the data (top, left).
        pixels: per output pixel (padded to whole tiles), its window's offset in an image.
        taps: per input channel and kernel offset, its offset from a window's corner.
    """

    workspace: tuple[int, ...] | None
    image: int
    length: int
    jobs: int
    grain: int
    strip: int
    parallel: bool
    padded_shape: tuple[int, ...]
    begin: tuple[int, int]
    pixels: np.ndarray[Any, Any] = field(compare=False, repr=False)
    taps: np.ndarray[Any, Any] = field(compare=False, repr=False)


@lru_cache(maxsize=256)
def direct_plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...],
                strides: tuple[int, ...], dilation: tuple[int, ...], begin: tuple[int, ...]
                ) -> DirectPlan:
    """The :class:`DirectPlan` of data ``x`` ``[N, C, H, W]``, weight ``w`` ``[O, C, kh, kw]``
    into ``out`` (shapes), with per-axis strides, dilation and begin pads."""
    (n, c, h, width), (o, _, kh, kw), (oh, ow) = x, w, out[2:]
    (sh, sw), (dh, dw), (top, left) = strides, dilation, begin
    rows = (oh - 1) * sh + (kh - 1) * dh + 1  # the padded rows and columns windows read
    cols = (ow - 1) * sw + (kw - 1) * dw + 1
    in_place = top == left == 0 and rows <= h and cols <= width
    hp, wp = (h, width) if in_place else (rows, cols)
    length = oh * ow
    tiles = -(-length // _PIXELS)
    y, x_ = np.divmod(np.arange(length, dtype=np.int64), ow)
    pixels = np.zeros(tiles * _PIXELS, np.int64)  # the last tile's extra pixels: pixel 0
    pixels[:length] = y * sh * wp + x_ * sw
    taps = np.array([ci * hp * wp + i * dh * wp + j * dw
                     for ci, i, j in itertools.product(range(c), range(kh), range(kw))],
                    np.int64)
    pixels.flags.writeable = False
    jobs = n * -(-o // _CHANNELS) * tiles
    band = max(1, (_STRIP_BYTES // (4 * c * wp) - (kh - 1) * dh) // sh)  # output rows
    strip = min(tiles, max(1, band * ow // _PIXELS))
    return DirectPlan(None if in_place else (n * c * hp * wp,), c * hp * wp, length, jobs,
                      max(1, min(32, jobs // 32)), strip, jobs * len(taps) >= _MIN_WORK,
                      (n, c, hp, wp), (top, left), pixels, taps.astype(np.int32))


_STRIP_BYTES = 1 << 17
"""Padded data (bytes) a strip of tiles reads, so that it stays in cache while every block of
output channels runs over it: a quarter of a core's L2 here (AMD EPYC, 512 KiB). Against one
strip per image, ResNet-18's layers ran 2-9% faster (0.5-4% with 256 KiB strips); the
14x14 ones, which fit whole, within noise."""

_SPIN_LOOKS = 2_000_000
"""How many times (about 1 ms) a helper thread looks for the next convolution before it
blocks: the ops between two convolutions of a model take less, and a thread woken from a
block (or a caller that waits for the GIL) can start milliseconds late on a virtual
machine, longer than a whole convolution of one image."""


class _Crew:
    """Helper threads, one per other core, that join the convolutions of one calling thread
    at a time.

    Neither side ever waits for the other in Python: the caller queues the call's arguments
    for each helper and rings a bell from compiled code (without the GIL); a helper that is
    busy-waiting there (after its last call) sees it, takes the queued arguments (the GIL is
    free: the caller is computing) and joins; one that started late finds no tiles left. A
    helper blocks on its queue only after :data:`_SPIN_LOOKS` looks without a call.
    """

    def __init__(self, kernels: ModuleType, helpers: int) -> None:
        self.kernels = kernels
        self.bell = np.zeros(1, np.int64)  # rings so far (calls, and quiet())
        self.last = -math.inf  # time.monotonic() at the end of the last call
        self.lock = threading.Lock()  # one calling thread at a time
        self.tasks: list[queue.SimpleQueue[Task]] = []
        for k in range(helpers):
            tasks: queue.SimpleQueue[Task] = queue.SimpleQueue()
            self.tasks.append(tasks)
            threading.Thread(target=self._serve, args=(tasks,), name=f"graphrt-conv-{k}",
                             daemon=True).start()

    def run(self, jobs: Jobs, args: tuple[Any, ...]) -> None:
        """``jobs(*args, ...)`` (a job function of :mod:`~graphrt.lib.ops.direct_conv`) on
        the calling thread, with the helpers if they are free (another thread's convolution
        holds them: alone)."""
        if not self.lock.acquire(blocking=False):
            jobs(*args, np.zeros(1, np.int64), True, 0, 0)
            return
        try:
            call = int(self.bell[0]) + 1  # the caller's ring makes it so (rings hold the lock)
            for tasks in self.tasks:
                tasks.put((call, jobs, args))
            jobs(*args, self.bell, True, 0, 0)
            self.last = time.monotonic()
        finally:
            self.lock.release()

    def quiet(self) -> None:
        """Stop the helpers' busy wait (they block until the next call): before other work
        that runs threads of its own (OpenBLAS), which a spinning helper would slow."""
        if self.lock.acquire(blocking=False):
            try:
                self.kernels.ring(self.bell)
            finally:
                self.lock.release()

    def _serve(self, tasks: queue.SimpleQueue[Task]) -> None:
        call, jobs, args = tasks.get()
        while True:
            if jobs(*args, self.bell, False, call, _SPIN_LOOKS):
                try:
                    call, jobs, args = tasks.get_nowait()  # queued before the ring
                    continue
                except queue.Empty:
                    pass
            call, jobs, args = tasks.get()


_crew_lock = threading.Lock()
_crew: _Crew | None = None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _helpers(kernels: ModuleType) -> _Crew:
    global _crew
    with _crew_lock:
        if _crew is None:
            _crew = _Crew(kernels, _cores() - 1)
        return _crew


def quiet_helpers() -> bool:
    """Stop the direct convolution's helper threads from busy-waiting, if there are any: a
    GEMM on OpenBLAS's threads is next. Returns whether they ran a convolution in the last
    :data:`_BUSY_S` (more are likely to follow soon)."""
    if _crew is None:
        return False
    _crew.quiet()
    return time.monotonic() - _crew.last < _BUSY_S


_BUSY_S = 0.25
"""Seconds after a convolution on the helpers during which more are expected (a model's
next run) and GEMMs avoid waking OpenBLAS's threads."""


def _forget_crew() -> None:
    """In a forked child, whose helper threads did not survive the fork: start new ones."""
    global _crew, _crew_lock
    _crew, _crew_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_crew)


def _packed_bias(bias: np.ndarray[Any, Any] | None, channels: int, block: int
                 ) -> np.ndarray[Any, Any]:
    padded = np.zeros(-(-channels // block) * block, np.float32)
    if bias is not None:
        padded[:channels] = bias
    return padded


def _prepared(kernels: ModuleType, weight: np.ndarray[Any, Any],
              bias: np.ndarray[Any, Any] | None, block: int
              ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The weight packed ``block`` output channels at a time, and the bias padded to whole
    blocks (zeros without one): once per loaded param (:func:`derived`)."""
    o, key = weight.shape[0], f"direct_conv {block}"
    packed = derived(weight, key, lambda: kernels.pack_weights(weight, block))
    summed = (_zero_bias(o, block) if bias is None else
              derived(bias, key, lambda: _packed_bias(bias, o, block)))
    return packed, summed


def _epilogue(kernels: ModuleType, out: np.ndarray[Any, Any],
              residual: np.ndarray[Any, Any] | None, relu: bool
              ) -> tuple[np.ndarray[Any, Any], int]:
    """The epilogue arguments of a job function: the residual (flat; empty without one) and
    the flags."""
    flags = kernels.RELU if relu else 0
    if residual is None:
        return out.reshape(-1)[:0], flags
    return np.ascontiguousarray(residual).reshape(-1), flags | kernels.RESIDUAL


def _run_jobs(kernels: ModuleType, jobs: Jobs, parallel: bool, args: tuple[Any, ...]
              ) -> None:
    if parallel:
        _helpers(kernels).run(jobs, args)  # with no helper on one core
    else:
        jobs(*args, np.zeros(1, np.int64), True, 0, 0)


def run_direct(kernels: ModuleType, plan: DirectPlan, x: np.ndarray[Any, Any],
               weight: np.ndarray[Any, Any], bias: np.ndarray[Any, Any] | None,
               out: np.ndarray[Any, Any], buffer: np.ndarray[Any, Any] | None,
               residual: np.ndarray[Any, Any] | None = None, relu: bool = False) -> None:
    """The convolution ``plan`` of float32 ``x`` by ``weight`` (+ ``bias``) into ``out``
    (C-contiguous), with ``buffer`` the planned workspace (None where the plan needs none),
    then ``+ residual`` (shaped as ``out``) and relu as the results are stored."""
    if buffer is None:
        data = np.ascontiguousarray(np.asarray(x)).reshape(-1)
    else:
        data = np.asarray(buffer).reshape(-1)
        n, c, h, w = x.shape
        kernels.pad(np.ascontiguousarray(x).reshape(-1), data, n * c, h, w,
                    *plan.padded_shape[2:], *plan.begin)
    packed, summed = _prepared(kernels, weight, bias, _CHANNELS)
    flat = np.asarray(out).reshape(-1)
    counters = np.zeros(2, np.int64)  # tiles claimed, tiles done
    _run_jobs(kernels, kernels.conv_jobs, plan.parallel, (
        data, plan.image, plan.pixels, plan.length, plan.taps, packed, summed, flat,
        weight.shape[0], *_epilogue(kernels, flat, residual, relu), plan.strip, counters,
        plan.grain))


@dataclass(frozen=True)
class PointwisePlan:
    """A 1x1 convolution without padding at given shapes: a product of the weight
    ``[O, C]`` and each image's data ``[C, pixels]``, tiles of 6 output channels x 16 pixels
    (:func:`graphrt.lib.ops.direct_conv.pointwise_jobs`).

    Attributes:
        workspace: the strided data's shape ``[N, C, OH, OW]`` (every stride-th pixel,
            copied once), None for stride 1 (the data is read in place).
        strides: per axis.
        length: output pixels per image.
        depth: input channels.
        chunk: blocks of 6 output channels per job (their packed weights fill about
            :data:`_CHUNK_BYTES`).
        jobs: 16-pixel stretches by chunks, over the batch.
        grain: jobs a thread claims at a time.
        parallel: worth running on every core.
    """

    workspace: tuple[int, ...] | None
    strides: tuple[int, ...]
    length: int
    depth: int
    chunk: int
    jobs: int
    grain: int
    parallel: bool


_CHUNK_BYTES = 1 << 22
"""Packed weight bytes of the output channels one pointwise job runs over one 16-pixel
stretch (whose data stays in cache over them). Measured on ResNet-50's 1x1 layers, a chunk of
every channel (the weights streamed from L2/L3, the data read once) ran fastest: 32 KiB
chunks were 10-45% slower, 256 KiB ones up to 20%."""


@lru_cache(maxsize=256)
def pointwise_plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...],
                   strides: tuple[int, ...]) -> PointwisePlan:
    """The :class:`PointwisePlan` of data ``x`` ``[N, C, H, W]``, weight ``w``
    ``[O, C, 1, 1]`` into ``out`` ``[N, O, OH, OW]`` (shapes) at per-axis ``strides``.

    Example:
        >>> plan = pointwise_plan((1, 64, 56, 56), (256, 64, 1, 1), (1, 256, 56, 56), (1, 1))
        >>> plan.workspace, plan.length, plan.jobs  # read in place; 196 stretches, 1 chunk
        (None, 3136, 196)
    """
    (n, c), (o,), (oh, ow) = x[:2], w[:1], out[2:]
    length = oh * ow
    blocks = -(-o // _ROWS)
    chunk = max(1, min(blocks, _CHUNK_BYTES // (c * _ROWS * 4)))
    stretches = n * -(-length // _SPAN)
    jobs = stretches * -(-blocks // chunk)
    strided = any(s != 1 for s in strides)
    return PointwisePlan((n, c, oh, ow) if strided else None, strides, length, c, chunk, jobs,
                         max(1, min(8, jobs // 32)), stretches * blocks * c >= _MIN_WORK)


def run_pointwise(kernels: ModuleType, plan: PointwisePlan, x: np.ndarray[Any, Any],
                  weight: np.ndarray[Any, Any], bias: np.ndarray[Any, Any] | None,
                  out: np.ndarray[Any, Any], buffer: np.ndarray[Any, Any] | None,
                  residual: np.ndarray[Any, Any] | None = None, relu: bool = False) -> None:
    """The pointwise convolution ``plan``: as :func:`run_direct`."""
    if buffer is None:
        data = np.ascontiguousarray(np.asarray(x)).reshape(-1)
    else:
        strided = np.asarray(buffer).reshape(plan.workspace)
        strided[...] = np.asarray(x)[:, :, ::plan.strides[0], ::plan.strides[1]]
        data = strided.reshape(-1)
    packed, summed = _prepared(kernels, weight, bias, _ROWS)
    flat = np.asarray(out).reshape(-1)
    counters = np.zeros(2, np.int64)  # jobs claimed, jobs done
    _run_jobs(kernels, kernels.pointwise_jobs, plan.parallel, (
        data, plan.length, plan.depth, packed, summed, flat, weight.shape[0],
        *_epilogue(kernels, flat, residual, relu), plan.chunk, counters, plan.grain))


@lru_cache(maxsize=64)
def _zero_bias(channels: int, block: int) -> np.ndarray[Any, Any]:
    zeros = _packed_bias(None, channels, block)
    zeros.flags.writeable = False
    return zeros
