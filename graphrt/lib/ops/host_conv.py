"""The direct convolution on the host: its geometry at given shapes, and the call that runs
the compiled kernel of :mod:`graphrt.lib.ops.direct_conv` over the cores.

A 2-D float32 convolution of one group runs with no im2col and no GEMM: the threads of the
call first copy the data into a padded buffer together (the workspace; data that needs no
padding is read in place), the weight is packed 16 output channels at a time once per loaded
weight (:func:`graphrt.lib.frozen.derived`), and the tiles of 16 channels x 6 pixels are run
on the calling thread and helper threads, one per other core (the compiled kernel releases
the GIL; :mod:`graphrt.lib.ops.host_crew`). Threads claim tiles a few at a time from a
shared counter, so a helper that starts late takes less or none of the work, and the calling
thread returns once every tile is done. Safe to call from several threads at once: one
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
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any

import numpy as np

from ..frozen import derived
from .host_crew import run_jobs

__all__ = ["DirectPlan", "PointwisePlan", "direct_plan", "pointwise_plan", "run_direct",
           "run_pointwise"]

# Tiles, as in direct_conv (not imported: that needs numba): 16 output channels x 6 pixels,
# and pointwise 6 output channels x 16 pixels.
_CHANNELS, _PIXELS, _ROWS, _SPAN = 16, 6, 6, 16

_MIN_WORK = 50_000
"""Tile-taps (about 7 cycles each) below which a convolution runs on the calling thread
alone: bringing in the helpers costs tens of microseconds."""


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
        padding: the padded copy's geometry, as the compiled kernel takes it
            (:data:`graphrt.lib.ops.direct_conv.PADDING`: planes, h, w, hp, wp, top, left,
            blocks per job, channels per block; zeros where the data is read in place).
        blocked: the padded copy is ``[N, C/8, Hp, Wp, 8]`` (a padded copy of a multiple of
            8 channels), so the taps run input channel blocks, then kernel offsets, then
            the channels of a block, and the weight is packed in that order.
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
    blocked: bool
    padding: np.ndarray[Any, Any] = field(compare=False, repr=False)
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
    blocked = not in_place and c % _BLOCK == 0
    block = _BLOCK if blocked else 1  # channels side by side in the padded copy
    pixels = np.zeros(tiles * _PIXELS, np.int64)  # the last tile's extra pixels: pixel 0
    pixels[:length] = (y * sh * wp + x_ * sw) * block
    order = (itertools.product(range(c // block), range(kh), range(kw), range(block))
             if blocked else ((ci, i, j, 0) for ci, i, j in
                              itertools.product(range(c), range(kh), range(kw))))
    taps = np.array([cb * hp * wp * block + (i * dh * wp + j * dw) * block + ci
                     for cb, i, j, ci in order], np.int64)
    padding = np.zeros(9, np.int64)  # direct_conv.PADDING entries
    if not in_place:
        padding[:] = (n * c, h, width, hp, wp, top, left,
                      max(1, _PAD_JOB // (block * hp * wp)), block)
    pixels.flags.writeable = padding.flags.writeable = False
    jobs = n * -(-o // _CHANNELS) * tiles
    band = max(1, (_STRIP_BYTES // (4 * c * wp) - (kh - 1) * dh) // sh)  # output rows
    whole = 4 * c * hp * wp <= _WHOLE_BYTES
    strip = tiles if whole else min(tiles, max(1, band * ow // _PIXELS))
    return DirectPlan(None if in_place else (n * c * hp * wp,), c * hp * wp, length, jobs,
                      max(1, min(32, jobs // 32)), strip, jobs * len(taps) >= _MIN_WORK,
                      blocked, padding, pixels, taps.astype(np.int32))


_BLOCK = 8
"""Channels side by side in a blocked padded copy (:attr:`DirectPlan.blocked`)."""


_PAD_JOB = 8192
"""Padded elements (about) one job of the padded copy writes: a few per thread even for one
small image."""


_STRIP_BYTES = 1 << 17
"""Padded data (bytes) a strip of tiles reads, so that it stays in cache while every block of
output channels runs over it: a quarter of a core's L2 here (AMD EPYC, 512 KiB). Against one
strip per image, ResNet-18's 56x56 and 28x28 layers ran 2-9% faster (0.5-4% with 256 KiB
strips)."""

_WHOLE_BYTES = 1 << 18
"""Padded image (bytes) up to which one strip takes the whole image: there the weights are
the larger part (ResNet-18's 14x14 and 7x7 layers: 2.4-9.4 MB of weights), and each strip
reads all of them again (the 7x7 layers at batch 1 ran 5% faster, the strided 14x14 one
7%)."""

def _packed_bias(bias: np.ndarray[Any, Any] | None, channels: int, block: int
                 ) -> np.ndarray[Any, Any]:
    padded = np.zeros(-(-channels // block) * block, np.float32)
    if bias is not None:
        padded[:channels] = bias
    return padded


def _prepared(kernels: ModuleType, weight: np.ndarray[Any, Any],
              bias: np.ndarray[Any, Any] | None, block: int, blocked: bool = False
              ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The weight packed ``block`` output channels at a time (its taps in the order of a
    ``blocked`` plan's where it is one), and the bias padded to whole blocks (zeros without
    one): once per loaded param (:func:`derived`)."""
    o, key = weight.shape[0], f"direct_conv {block}"

    def pack() -> np.ndarray[Any, Any]:
        if not blocked:
            return kernels.pack_weights(weight, block)  # type: ignore[no-any-return]
        c, kh, kw = weight.shape[1:]
        taps = weight.reshape(o, c // _BLOCK, _BLOCK, kh, kw).transpose(0, 1, 3, 4, 2)
        return kernels.pack_weights(np.ascontiguousarray(taps), block)  # type: ignore[no-any-return]

    packed = derived(weight, (key, blocked), pack)
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


def run_direct(kernels: ModuleType, plan: DirectPlan, x: np.ndarray[Any, Any],
               weight: np.ndarray[Any, Any], bias: np.ndarray[Any, Any] | None,
               out: np.ndarray[Any, Any], buffer: np.ndarray[Any, Any] | None,
               residual: np.ndarray[Any, Any] | None = None, relu: bool = False) -> None:
    """The convolution ``plan`` of float32 ``x`` by ``weight`` (+ ``bias``) into ``out``
    (C-contiguous), with ``buffer`` the planned workspace (None where the plan needs none),
    then ``+ residual`` (shaped as ``out``) and relu as the results are stored."""
    data = np.ascontiguousarray(np.asarray(x)).reshape(-1)
    packed, summed = _prepared(kernels, weight, bias, _CHANNELS, plan.blocked)
    flat = np.asarray(out).reshape(-1)
    padded = flat[:0] if buffer is None else np.asarray(buffer).reshape(-1)
    counters = np.zeros(4, np.int64)  # tiles claimed, done; padded copy's jobs claimed, done
    run_jobs(kernels.conv_jobs, plan.parallel, (
        data, plan.padding, padded, plan.image, plan.pixels, plan.length, plan.taps, packed,
        summed, flat, weight.shape[0], *_epilogue(kernels, flat, residual, relu), plan.strip,
        counters, plan.grain))


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
    run_jobs(kernels.pointwise_jobs, plan.parallel, (
        data, plan.length, plan.depth, packed, summed, flat, weight.shape[0],
        *_epilogue(kernels, flat, residual, relu), plan.chunk, counters, plan.grain))


@lru_cache(maxsize=64)
def _zero_bias(channels: int, block: int) -> np.ndarray[Any, Any]:
    zeros = _packed_bias(None, channels, block)
    zeros.flags.writeable = False
    return zeros
