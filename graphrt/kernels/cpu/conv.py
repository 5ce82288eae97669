"""The direct convolution on the host: its geometry at given shapes, and the call that runs
the compiled kernel of :mod:`graphrt.kernels.cpu.direct_conv` over the cores.

A 2-D float32 convolution of one group runs with no im2col and no GEMM: the threads of the
call first copy the data into a padded buffer together (the workspace; data that needs no
padding is read in place, except a wide blocked 1x1 convolution's, copied into panels of 6
pixels per tile: :data:`_PANEL_OUTPUTS`), the weight is packed 16 output channels at a time
once per loaded weight (:func:`graphrt.devices.frozen.derived`), and the tiles of 16
channels x 6 pixels are run on the calling thread and helper threads, one per other core
(the compiled kernel releases the GIL; :mod:`graphrt.kernels.cpu.crew`). Threads claim tiles
a few at a time from a shared counter, so a helper that starts late takes less or none of
the work, and the calling thread returns once every tile is done. Safe to call from several
threads at once: one caller at a time has the helpers, the others run alone. A 1x1
convolution without padding runs the pointwise kernel the same way (:class:`PointwisePlan`),
and either adds a residual and applies relu as it stores (:func:`run_plan`'s ``residual``
and ``relu``).

Example:
    >>> plan = direct_plan((1, 3, 8, 8), (16, 3, 3, 3), (1, 16, 8, 8), (1, 1), (1, 1),
    ...                    (1, 1))
    >>> plan.workspace, plan.length, plan.jobs  # a padded 10x10 copy; 64 pixels in 11 tiles
    ((300,), 64, 11)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from math import prod
from types import ModuleType
from typing import Any

import numpy as np

from ...devices.base import aligned_copy
from ...devices.frozen import derived, is_frozen
from ...ops import TensorType
from ...ops.base import gemm_dtype
from ...ops.convolution import ConvPlan
from ...ops.convolution import conv_plan as reference_plan
from ...ops.convolution import run_conv as reference_conv
from ...ops.nn import nchw_shape
from ..base import Binding
from .crew import JobCall, LastArrays
from .jit import direct_conv as direct_kernels

__all__ = ["DepthwisePlan", "DirectPlan", "HostConvPlan", "PointwisePlan",
           "conv_epilogue", "conv_plan", "direct_plan", "pack_unbiased", "pointwise_plan",
           "run_conv", "run_conv_with", "run_plan", "strip_tiles"]

# Tiles, as in direct_conv (not imported: that needs numba): 16 output channels x 6 pixels,
# and pointwise 6 output channels x 16 pixels.
_CHANNELS, _PIXELS, _ROWS, _SPAN = 16, 6, 6, 16
Clip = tuple[float, float] | None
"""An epilogue's clip to ``(low, high)``, or None."""
Packed = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None
"""A weight and bias packed for a plan (the bias padded to whole blocks), or None."""

_MIN_WORK = 15_000
"""Tile-taps (12 multiply-adds: 5-7 ns each on a 2-core AMD EPYC) below which a convolution
runs on the calling thread alone: bringing in the helpers costs tens of microseconds, so
about 100 us of work alone pays for them (MobileNetV2 ran 4-10% faster than with 50 000,
which kept its 28x28 projections on one core)."""


@dataclass(frozen=True)
class DirectPlan:
    """A direct convolution at given shapes.

    Attributes:
        workspace: the padded data buffer's (or the panels') shape (flat), None where the
            data is read in place.
        image: elements per (padded, or packed) image.
        length: output pixels per image.
        jobs: tiles (16 output channels x 6 pixels) over the batch.
        grain: the fewest tiles a thread claims at a time (of 16 channels: a job of
            ``direct_conv.JOB_CHANNELS`` counts as that many of them; claims are guided,
            :data:`~graphrt.kernels.cpu.job_protocol.GUIDED`).
        strip: tiles along the output whose data (about :data:`_STRIP_BYTES`) every block
            of output channels runs over before the next strip.
        parallel: worth running on every core.
        padding: the padded copy's (or the panels') geometry, as the compiled kernel takes
            it (:data:`graphrt.kernels.cpu.direct_conv.PADDING`; zeros where the data is read
            in place).
        blocked: the data the tiles read is ``[N, C/8, Hp, Wp, 8]`` (a padded copy of a
            multiple of 8 channels, or blocked data read in place), so the taps run input
            channel blocks, then kernel offsets, then the channels of a block, and the
            weight is packed in that order.
        pixels: per output pixel (padded to whole tiles), its window's offset in an image.
        taps: per input channel and kernel offset, its offset from a window's corner.
        blocked_out: the output is ``[N, O/8, OH, OW, 8]``.
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
    blocked_out: bool = False


@lru_cache(maxsize=256)
def direct_plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...],
                strides: tuple[int, ...], dilation: tuple[int, ...], begin: tuple[int, ...],
                blocked_in: bool = False, blocked_out: bool = False) -> DirectPlan:
    """The :class:`DirectPlan` of data ``x`` ``[N, C, H, W]``, weight ``w`` ``[O, C, kh, kw]``
    into ``out`` (logical shapes: the data is ``[N, C/8, H, W, 8]`` where ``blocked_in``,
    the output ``[N, O/8, OH, OW, 8]`` where ``blocked_out``), with per-axis strides,
    dilation and begin pads."""
    (n, c, h, width), (o, _, kh, kw), (oh, ow) = x, w, out[2:]
    (sh, sw), (dh, dw), (top, left) = strides, dilation, begin
    rows = (oh - 1) * sh + (kh - 1) * dh + 1  # the padded rows and columns windows read
    cols = (ow - 1) * sw + (kw - 1) * dw + 1
    in_place = top == left == 0 and rows <= h and cols <= width
    hp, wp = (h, width) if in_place else (rows, cols)
    length = oh * ow
    tiles = -(-length // _PIXELS)
    blocked = (blocked_in or not in_place) and c % _BLOCK == 0
    block = _BLOCK if blocked else 1  # channels side by side in the padded copy
    # panels: per tile, a blocked image of its 6 pixels (tiles side by side)
    panels = (blocked_in and in_place and kh == kw == 1 and blocked
              and c >= _PANEL_CHANNELS and o >= _PANEL_OUTPUTS)
    plane = _PIXELS if panels else hp * wp  # pixels of one block of what the tiles read
    image = c * plane * (tiles if panels else 1)
    q = np.arange(tiles * _PIXELS, dtype=np.int64)
    if panels:
        pixels = q // _PIXELS * c * _PIXELS + q % _PIXELS * _BLOCK
    else:
        y, x_ = np.divmod(np.where(q < length, q, 0), ow)  # the last tile's extras: pixel 0
        pixels = (y * sh * wp + x_ * sw) * block
    order = (itertools.product(range(c // block), range(kh), range(kw), range(block))
             if blocked else ((ci, i, j, 0) for ci, i, j in
                              itertools.product(range(c), range(kh), range(kw))))
    taps = np.array([cb * plane * block + (i * dh * wp + j * dw) * block + ci
                     for cb, i, j, ci in order], np.int64)
    padding = np.zeros(11, np.int64)  # direct_conv.PADDING entries
    if panels:
        padding[:] = (n * c, h, width, c, ow, length, sh,
                      max(1, _PAD_JOB // (c * _PIXELS)), sw, 1, 1)
        strip = strip_tiles(4 * c * _PIXELS, tiles, 0, 1, _PIXELS, tiles, 4 * o * c)
    else:
        if not in_place:
            padding[:] = (n * c, h, width, hp, wp, top, left,
                          max(1, _PAD_JOB // (block * hp * wp)), block, blocked_in, 0)
        strip = strip_tiles(4 * c * wp, hp, (kh - 1) * dh, sh, ow, tiles,
                            4 * o * c * kh * kw, min(rows, oh * kh))
    jobs = n * -(-o // _CHANNELS) * tiles
    pixels.flags.writeable = padding.flags.writeable = False
    return DirectPlan(None if not padding[0] else (n * image,), image, length, jobs,
                      max(1, min(32, jobs // 32)), strip, jobs * len(taps) >= _MIN_WORK,
                      blocked, padding, pixels, taps.astype(np.int32), blocked_out)


_PANEL_OUTPUTS = 256
"""Output channels from which a blocked 1x1 convolution of :data:`_PANEL_CHANNELS` input
channels or more reads its data from panels, copied by the call's threads first
(:func:`graphrt.kernels.cpu.direct_conv.conv_jobs`' copy phase): per tile and block of 8
channels, its 6 pixels' data side by side (at the strides), so that a tile reads one stream
of memory where in place it read one per block, more than the prefetchers follow. The copy
(a read and a write of the data) is shared by every block of 16 output channels, and pays
from 16 of them. One thread, weights in cache, against in place: ResNet-50's 1024 -> 2048
(stride 2) 0.78x, 2048 -> 512 0.77x, 1024 -> 256 0.84x, 256 -> 1024 0.95x. In ResNet-50 at
batch 1 (per-node profiles of both plans, interleaved), its wide 1x1 layers ran 0.74-0.99x
as long (the model 0.95-0.97x), at batch 8 0.70-0.98x (0.96x); the narrow ones (64 and 128
outputs, 56x56 and 28x28) 1.08-1.26x, and MobileNetV2's 576 -> 160 1.08x, so those keep
their passes (:func:`pass_channels`); MobileNetV2's wide ones ran level."""

_PANEL_CHANNELS = 128
"""Input channels from which a wide 1x1 convolution reads panels (:data:`_PANEL_OUTPUTS`)."""


_BLOCK = 8
"""Channels side by side in a blocked layout or padded copy (:attr:`DirectPlan.blocked`), a
depthwise group, and the pixels of a depthwise tile (direct_conv.LANES)."""


_PAD_JOB = 8192
"""Padded elements (about) one job of the padded copy writes: a few per thread even for one
small image."""


_STRIP_BYTES = 1 << 17
"""Padded data (bytes) a strip of tiles reads, so that it stays in cache while every block of
output channels runs over it: a quarter of a core's L2 here (AMD EPYC, 512 KiB). Against one
strip per image, ResNet-18's 56x56 and 28x28 layers ran 2-9% faster (0.5-4% with 256 KiB
strips)."""

_CACHE_BYTES = 1 << 19
"""A core's L2 here (AMD EPYC, 512 KiB): the most data a strip of the whole image reads
where the weights outweigh it (:func:`strip_tiles`)."""

_WHOLE_BYTES = 1 << 18
"""Padded image (bytes) up to which one strip takes the whole image (ResNet-18's 14x14 and
7x7 layers: the 7x7 layers at batch 1 ran 5% faster, the strided 14x14 one 7%). A larger
image is one strip too where its weights outweigh it (:func:`strip_tiles`)."""

def strip_tiles(row_bytes: int, rows: int, reach: int, stride: int, width: int,
                tiles: int, weight_bytes: int = 0, read_rows: int = 0) -> int:
    """Tiles of a strip of a direct convolution's output (:attr:`DirectPlan.strip`), whose
    padded data rows of ``row_bytes`` (``rows`` of them in an image; ``reach`` more than
    the output rows read, at ``stride``) stay in cache while every block of output channels
    runs over it: about :data:`_STRIP_BYTES`; or the whole image, up to
    :data:`_WHOLE_BYTES`, or up to :data:`_CACHE_BYTES` of the ``read_rows`` its windows
    touch where the weights (``weight_bytes``) outweigh those. ``width``: output pixels per
    row.

    Every strip reads all the weights again; every block of output channels reads the
    strip's data, from a core's L2 where it fits. ResNet-50's last stage at batch 1 (4-9 MB
    of weights, 0.4-0.5 MB of data read) took strips of one or two tiles by the data's size
    alone and so read its weights 5 to 9 times over: as one strip, its strided 3x3 and 1x1
    layers ran 0.74-0.85x and 0.65-0.90x as long in the model (per-node profiles of both
    plans, interleaved), at batch 8 0.94-1.06x and 0.87-1.08x. Data that does not fit (the
    14x14 layers' 0.8 MB) lost the other way (1.08-1.33x at batch 1)."""
    image = row_bytes * rows
    read = row_bytes * (read_rows or rows)
    if image <= _WHOLE_BYTES or read <= min(_CACHE_BYTES, weight_bytes):
        return tiles
    band = max(1, (_STRIP_BYTES // row_bytes - reach) // stride)  # output rows
    return min(tiles, max(1, band * width // _PIXELS))


def _packed_bias(bias: np.ndarray[Any, Any] | None, channels: int, block: int
                 ) -> np.ndarray[Any, Any]:
    padded = np.zeros(-(-channels // block) * block, np.float32)
    if bias is not None:
        padded[:channels] = bias
    return padded


def _pack_weight(kernels: ModuleType, weight: np.ndarray[Any, Any], block: int,
                blocked: bool = False) -> np.ndarray[Any, Any]:
    """``weight`` ``[O, C, kh, kw]`` packed ``block`` output channels at a time, its taps in
    the order of a ``blocked`` plan's where it is one."""
    if blocked:
        o, c, kh, kw = weight.shape
        weight = np.ascontiguousarray(
            weight.reshape(o, c // _BLOCK, _BLOCK, kh, kw).transpose(0, 1, 3, 4, 2))
    return aligned_copy(kernels.pack_weights(weight, block))


def _block(plan: DirectPlan | PointwisePlan | DepthwisePlan) -> tuple[int, bool]:
    """The packing of a plan's weight: output channels per block, and the blocked tap order."""
    if isinstance(plan, DepthwisePlan):
        return _BLOCK, False
    if isinstance(plan, PointwisePlan):
        return _ROWS, False
    return _CHANNELS, plan.blocked


def pack_unbiased(kernels: ModuleType, plan: DirectPlan | PointwisePlan,
                  weight: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any],
                                                         np.ndarray[Any, Any]]:
    """``weight`` packed for ``plan`` with a zero bias, as :func:`run_plan`'s ``packed``
    takes it (for weights that are no param, which the caller keeps)."""
    block, blocked = _block(plan)
    return _pack_weight(kernels, weight, block, blocked), zero_bias(weight.shape[0], block)


def _prepared(kernels: ModuleType, weight: np.ndarray[Any, Any],
              bias: np.ndarray[Any, Any] | None, block: int, blocked: bool = False
              ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The weight packed ``block`` output channels at a time (its taps in the order of a
    ``blocked`` plan's where it is one), and the bias padded to whole blocks (zeros without
    one): once per loaded param (:func:`derived`)."""
    packed = derived(weight, (f"direct_conv {block}", blocked),
                     lambda: _pack_weight(kernels, weight, block, blocked))
    return packed, _bias_of(bias, weight.shape[0], block)


def _bias_of(bias: np.ndarray[Any, Any] | None, channels: int, block: int
             ) -> np.ndarray[Any, Any]:
    """The bias padded to whole blocks (zeros without one), once per loaded param."""
    return (zero_bias(channels, block) if bias is None else
            derived(bias, f"direct_conv {block}", lambda: _packed_bias(bias, channels, block)))


def _epilogue(kernels: ModuleType, out: np.ndarray[Any, Any],
              residual: np.ndarray[Any, Any] | None, relu: bool, clip: Clip = None,
              blocked_out: bool = False) -> tuple[np.ndarray[Any, Any], int, np.ndarray[Any, Any]]:
    """The epilogue arguments of a job function: the residual (flat; empty without one), the
    flags (with the output's layout) and the clip's bounds."""
    flags = ((kernels.RELU if relu else 0) | (0 if clip is None else kernels.CLIP)
             | (kernels.BLOCKED if blocked_out else 0))
    bounds = _bounds(clip or (0.0, 0.0))
    if residual is None:
        return out.reshape(-1)[:0], flags, bounds
    return np.ascontiguousarray(residual).reshape(-1), flags | kernels.RESIDUAL, bounds


def direct_call(kernels: ModuleType, plan: DirectPlan, x: np.ndarray[Any, Any],
                weight: np.ndarray[Any, Any], bias: np.ndarray[Any, Any] | None,
                out: np.ndarray[Any, Any], buffer: np.ndarray[Any, Any] | None,
                residual: np.ndarray[Any, Any] | None = None, relu: bool = False,
                clip: Clip = None, packed: Packed = None) -> JobCall:
    """:func:`run_plan`'s call of a direct plan, prepared: made again, it runs the same
    convolution of whatever these arrays (C-contiguous) then hold. A large blocked 1x1
    convolution's jobs run their tiles in passes over the input channels
    (:func:`pass_channels`)."""
    data = np.ascontiguousarray(np.asarray(x)).reshape(-1)
    flat = np.asarray(out).reshape(-1)
    padded = flat[:0] if buffer is None else np.asarray(buffer).reshape(-1)
    weights, summed = packed or _prepared(kernels, weight, bias, *_block(plan))
    o, c = weight.shape[:2]
    extra, flags, bounds = _epilogue(kernels, flat, residual, relu, clip, plan.blocked_out)
    if plan.blocked:  # the taps run 8 channels of a block at one kernel offset at a time
        flags |= kernels.GROUPED
    # counters: tiles claimed, done; padded copy's jobs claimed, done
    return JobCall(kernels.conv_jobs, plan.parallel, (
        data, plan.padding, padded, plan.image, plan.pixels, plan.length, plan.taps, weights,
        summed, flat, o, extra, flags, bounds, plan.strip,
        pass_channels(plan, o, c, data.nbytes) or max(1, len(plan.taps))), 4,
        max(1, plan.grain * _CHANNELS // kernels.JOB_CHANNELS) | kernels.GUIDED)


_NARROW = 128
"""Output channels up to which a pass holds :data:`_NARROW_PASS` input channels, else
:data:`_WIDE_PASS` (:func:`pass_channels`)."""
_NARROW_PASS, _WIDE_PASS = 64, 128
_PASS_PIXELS = 196
"""Output pixels per image (14x14) below which a 1x1 convolution runs in one pass."""
_PASS_BYTES = 8 << 20
"""Bytes of data below which a 1x1 convolution runs in one pass: the layer before has just
written it, and it is still in the caches (the last level's share of a core and its own).
On an Intel Xeon (2 MiB of L2 a core), one pass against passes, two processes alternating
(both orders): MobileNetV2 at batch 1 (1.8 MiB at 56x56) 0.91x as long, ResNet-50 at
batch 1 (3.1 MiB) 0.97-1.0x; at batch 8 (14 and 25 MiB) MobileNetV2 level and ResNet-50
1.04x, so those keep their passes."""


def pass_channels(plan: DirectPlan, outputs: int, inputs: int, size: int) -> int | None:
    """The input channels per pass of the tiles of a blocked 1x1 convolution read in place
    from ``size`` bytes of data, where passes are worth it, else None (one pass).

    A tile reads its 6 pixels in every input block, one stream of memory per block (24 for
    192 channels), which a Zen 3 core's prefetchers do not follow once the data has left
    its caches, as the activations of ResNet-50 and MobileNetV2 at batch 8 have. A job
    (its run of tiles) therefore runs its tiles over the first 8 or 16 blocks, then over
    the next ones, adding into the sums it stored (in cache: a run's tiles hold 12 KiB).
    Narrow outputs reuse each input byte least and take the short passes. Measured in
    the models' context, per layer against one pass (batch 8; ``benchmarks/layer_gap.py``
    style interleaved profiles): ResNet-50's 256 -> 64 at 56x56 0.52-0.57x as long,
    1024 -> 256 at 14x14 0.77-0.79x, 512 -> 128 at 28x28 0.73x; MobileNetV2's 192 -> 32 at
    28x28 0.51-0.64x, 576 -> 96 at 14x14 0.72-0.74x. At 7x7 an image's data of 512
    channels is read whole into cache and passes lost (512 -> 2048: 1.01-1.09x at batch 8,
    1.07-1.14x at 1; MobileNetV2's 960 -> 160: 1.12-1.18x at batch 1). From 256 output
    channels a tile reads panels instead (:data:`_PANEL_OUTPUTS`), one stream, no passes.
    Data of less than :data:`_PASS_BYTES` takes one pass.

    Example:
        >>> plan = direct_plan((8, 256, 56, 56), (64, 256, 1, 1), (8, 64, 56, 56), (1, 1),
        ...                    (1, 1), (0, 0), True, True)
        >>> size = 8 * 256 * 56 * 56 * 4
        >>> pass_channels(plan, 64, 256, size), pass_channels(plan, 64, 96, size)
        (64, None)
        >>> pass_channels(plan, 64, 256, size // 8)  # one image's: it stays in cache
    """
    span = _NARROW_PASS if outputs <= _NARROW else _WIDE_PASS
    if (not plan.blocked or plan.workspace is not None or len(plan.taps) != inputs
            or inputs < 2 * span or plan.length < _PASS_PIXELS or size < _PASS_BYTES):
        return None
    return span


@dataclass(frozen=True)
class PointwisePlan:
    """A 1x1 convolution without padding at given shapes: a product of the weight
    ``[O, C]`` and each image's data ``[C, pixels]``, tiles of 6 output channels x 16 pixels
    (:func:`graphrt.kernels.cpu.direct_conv.pointwise_jobs`).

    Attributes:
        workspace: the strided data's shape ``[N, C, OH, OW]`` (every stride-th pixel,
            copied once), None for stride 1 (the data is read in place).
        strides: per axis.
        length: output pixels per image.
        depth: input channels.
        chunk: blocks of 6 output channels per job (their packed weights fill about
            :data:`_CHUNK_BYTES`).
        jobs: 16-pixel stretches by chunks, over the batch.
        grain: the fewest jobs a thread claims at a time (claims are guided: see
            :data:`~graphrt.kernels.cpu.job_protocol.GUIDED`).
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


def restride(plan: PointwisePlan, x: np.ndarray[Any, Any], buffer: np.ndarray[Any, Any]
             ) -> None:
    """Copy every stride-th pixel of ``x`` into a strided plan's ``buffer``, before each call
    of :func:`pointwise_call`."""
    strided = np.asarray(buffer).reshape(plan.workspace)
    strided[...] = np.asarray(x)[:, :, ::plan.strides[0], ::plan.strides[1]]


def pointwise_call(kernels: ModuleType, plan: PointwisePlan, x: np.ndarray[Any, Any],
                   weight: np.ndarray[Any, Any], bias: np.ndarray[Any, Any] | None,
                   out: np.ndarray[Any, Any], buffer: np.ndarray[Any, Any] | None,
                   residual: np.ndarray[Any, Any] | None = None, relu: bool = False,
                   clip: Clip = None, packed: Packed = None) -> JobCall:
    """:func:`run_plan`'s call of a pointwise plan, prepared (as :func:`direct_call`); a
    strided plan reads ``buffer``, which :func:`restride` fills first on every call."""
    data = (np.ascontiguousarray(np.asarray(x)) if buffer is None else buffer).reshape(-1)
    weights, summed = packed or _prepared(kernels, weight, bias, *_block(plan))
    flat = np.asarray(out).reshape(-1)
    return JobCall(kernels.pointwise_jobs, plan.parallel, (  # counters: jobs claimed, done
        data, plan.length, plan.depth, weights, summed, flat, weight.shape[0],
        *_epilogue(kernels, flat, residual, relu, clip), plan.chunk), 2,
        plan.grain | kernels.GUIDED)


@dataclass(frozen=True)
class DepthwisePlan:
    """A depthwise convolution (groups = input channels = output channels) at given shapes,
    8 channels at a time over bands of output rows
    (:func:`graphrt.kernels.cpu.direct_conv.depthwise_jobs`).

    Attributes:
        geometry: height, width, out height, out width, row stride, begin pads, padded
            width, output rows per band, input rows per band, whether the data is blocked
            (int64, read-only).
        pixels: offset of each output pixel's window corner in a band's interleaved buffer,
            padded to whole tiles (int64, read-only).
        taps: offset of each tap from the corner (int32, read-only).
        workspace: None (each thread interleaves its band in a buffer of its own).
        jobs: bands over the groups of 8 channels and the batch.
        grain: the fewest jobs a thread claims at a time (claims are guided: see
            :data:`~graphrt.kernels.cpu.job_protocol.GUIDED`).
        parallel: worth running on every core.
        blocked_out: the output is ``[N, C/8, OH, OW, 8]``.
    """

    geometry: np.ndarray[Any, Any] = field(repr=False)
    pixels: np.ndarray[Any, Any] = field(repr=False)
    taps: np.ndarray[Any, Any] = field(repr=False)
    workspace: None
    jobs: int
    grain: int
    parallel: bool
    blocked_out: bool = False


_BAND_FLOATS = 8192
"""Floats (32 KiB) of a depthwise band's interleaved input, to which its rows are sized:
the buffer and the band's results stay in the L2 cache."""


@lru_cache(maxsize=256)
def depthwise_plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...],
                   strides: tuple[int, ...], dilation: tuple[int, ...], begin: tuple[int, ...],
                   blocked_in: bool = False, blocked_out: bool = False) -> DepthwisePlan:
    """The :class:`DepthwisePlan` of data ``x`` ``[N, C, H, W]``, weight ``w``
    ``[C, 1, KH, KW]`` into ``out`` ``[N, C, OH, OW]`` (logical shapes: either is
    ``[N, C/8, H, W, 8]`` where blocked).

    Example:
        >>> plan = depthwise_plan((1, 96, 112, 112), (96, 1, 3, 3), (1, 96, 56, 56), (2, 2),
        ...                       (1, 1), (0, 0))
        >>> plan.jobs, int(plan.geometry[8]), plan.parallel  # 12 groups x 14 bands of 4 rows
        (168, 4, True)
    """
    (kh, kw), (oh, ow), (sh, sw), (dh, dw) = w[2:], out[2:], strides, dilation
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    reach = (kh - 1) * dh + 1  # input rows of one output row
    band = max(1, min(oh, (_BAND_FLOATS // (wp * _BLOCK) - reach) // sh + 1))
    tiles = -(-band * ow // _BLOCK)
    q = np.minimum(np.arange(tiles * _BLOCK), band * ow - 1)
    pixels = (((q // ow) * sh * wp + (q % ow) * sw) * _BLOCK).astype(np.int64)
    ky, kx = np.divmod(np.arange(kh * kw), kw)
    taps = ((ky * dh * wp + kx * dw) * _BLOCK).astype(np.int32)
    row = sw if kw == 3 and dw == 1 and sw in (1, 2) else 0  # the row tiles' stride
    geometry = np.array([*x[2:], oh, ow, sh, *begin, wp, band, (band - 1) * sh + reach,
                         blocked_in, row], np.int64)
    for array in (geometry, pixels, taps):
        array.flags.writeable = False
    groups = x[0] * -(-x[1] // _BLOCK)
    jobs = groups * -(-oh // band)
    # a tile-tap (8 multiply-adds, and its share of the transposes) took about 4 direct
    # tile-taps' time, the interleaving about one per 16 input floats
    work = groups * (-(-oh * ow // _BLOCK) * kh * kw * 4 + x[2] * x[3] * _BLOCK // 16)
    return DepthwisePlan(geometry, pixels, taps, None, jobs, max(1, min(8, jobs // 64)),
                         work >= _MIN_WORK and jobs > 1, blocked_out)


def depthwise_call(kernels: ModuleType, plan: DepthwisePlan, x: np.ndarray[Any, Any],
                   weight: np.ndarray[Any, Any], bias: np.ndarray[Any, Any] | None,
                   out: np.ndarray[Any, Any], residual: np.ndarray[Any, Any] | None = None,
                   relu: bool = False, clip: Clip = None, packed: Packed = None) -> JobCall:
    """:func:`run_plan`'s call of a depthwise plan, prepared (as :func:`direct_call`)."""
    data = np.ascontiguousarray(np.asarray(x)).reshape(-1)
    weights, summed = packed or _prepared(kernels, weight, bias, *_block(plan))
    flat = np.asarray(out).reshape(-1)
    return JobCall(kernels.depthwise_jobs, plan.parallel, (  # counters: jobs claimed, done
        data, weights, summed, flat, weight.shape[0], plan.geometry, plan.pixels, plan.taps,
        *_epilogue(kernels, flat, residual, relu, clip, plan.blocked_out)), 2,
        plan.grain | kernels.GUIDED)


@lru_cache(maxsize=64)
def _bounds(clip: tuple[float, float]) -> np.ndarray[Any, Any]:
    """A clip's bounds as the job functions read them (made once, read-only)."""
    bounds = np.array(clip, np.float32)
    bounds.flags.writeable = False
    return bounds


@lru_cache(maxsize=64)
def zero_bias(channels: int, block: int) -> np.ndarray[Any, Any]:
    zeros = _packed_bias(None, channels, block)
    zeros.flags.writeable = False
    return zeros


# --------------------------------------------------------------------------------------------
# The cpu's convolution: the compiled kernels where they apply, else the reference


@dataclass(frozen=True)
class HostConvPlan:
    """How the cpu runs one convolution at given shapes: the direct or pointwise kernel's
    geometry (``direct``), else the reference's :class:`~graphrt.ops.convolution.ConvPlan`.

    Attributes:
        direct: the compiled kernel's geometry, None where the reference runs.
        reference: the reference's plan, None where the compiled kernel runs.
    """

    direct: DirectPlan | PointwisePlan | DepthwisePlan | None
    reference: ConvPlan | None

    def workspace(self) -> list[TensorType]:
        """The workspace the call takes after its output: the compiled kernel's padded or
        strided copy (empty where the data is read in place), or the reference's three."""
        if self.direct is None:
            assert self.reference is not None
            return self.reference.workspace()
        return [TensorType(self.direct.workspace or (0,), "float32")]


SMALL_PLANE = 196
"""Output pixels (14x14) up to which a 1x1 convolution of stride 1 runs the direct kernel
(16 output channels x 6 pixels a tile, the data broadcast) rather than the pointwise one (6
channels x 16 pixels): on such planes 16-pixel tiles fit poorly (a 7x7 plane is 3 tiles and
a 1-pixel one) and the direct kernel ran 4-16% faster on every 14x14 and 7x7 layer of
ResNet-50 and MobileNetV2, while the pointwise one stays 5-37% faster on 56x56 planes."""


@lru_cache(maxsize=512)
def conv_plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], dtype: str,
              gemm: str, host: bool, groups: int, strides: tuple[int, ...],
              dilation: tuple[int, ...], begin: tuple[int, ...], direct: bool = False,
              blocked: tuple[bool, bool] = (False, False)) -> HostConvPlan:
    """The cpu's plan of a convolution (see :func:`graphrt.ops.convolution.conv_plan` for
    the arguments): the compiled direct kernel's geometry where ``direct`` (numba is there),
    ``host``, the dtype float32, one group and 2-D; a 1x1 convolution without begin pads
    whose output keeps every stride-th pixel runs the pointwise kernel (but one of stride 1
    onto at most :data:`SMALL_PLANE` pixels the direct one); a depthwise one (a group per
    channel, one output channel each) the depthwise kernel. ``blocked``: whether the data
    and the output are blocked (``[N, C/8, H, W, 8]``; ``x`` and ``out`` are the logical
    shapes), which the direct and depthwise kernels read and write (the reference, None of
    the compiled kernels applying, takes NCHW).

    Example:
        >>> plan = conv_plan((1, 4, 6, 6), (16, 4, 3, 3), (1, 16, 4, 4), "float32", "float32",
        ...                  True, 1, (1, 1), (1, 1), (0, 0), True)
        >>> type(plan.direct).__name__, plan.reference
        ('DirectPlan', None)
    """
    space, out_space = x[2:], out[2:]
    compiled = direct and host and dtype == gemm == "float32" and len(space) == 2
    if compiled and groups > 1 and groups == x[1] == w[0] and w[1] == 1:
        return HostConvPlan(depthwise_plan(x, w, out, strides, dilation, begin, *blocked),
                            None)
    if compiled and groups == 1:
        strided = w[2:] == (1, 1) and not any(begin) and all(
            o == (i - 1) // s + 1 for o, i, s in zip(out_space, space, strides, strict=True))
        small = all(s == 1 for s in strides) and prod(out_space) <= SMALL_PLANE
        geometry = (pointwise_plan(x, w, out, strides) if strided and not small
                    and not any(blocked) else
                    direct_plan(x, w, out, strides, dilation, begin, *blocked))
        return HostConvPlan(geometry, None)
    return HostConvPlan(None, reference_plan(x, w, out, dtype, gemm, host, groups, strides,
                                             dilation, begin))


def run_plan(kernels: ModuleType, plan: DirectPlan | PointwisePlan | DepthwisePlan, x: Any,
             weight: Any, bias: Any, out: Any, buffer: Any, residual: Any = None,
             relu: bool = False, clip: Clip = None, packed: Packed = None) -> None:
    """The convolution ``plan`` (direct, pointwise or depthwise) of float32 ``x`` by
    ``weight`` (+ ``bias``) into ``out`` (C-contiguous), with ``buffer`` the planned
    workspace (None where the plan needs none), then ``+ residual`` (shaped as ``out``),
    relu and the clip as the results are stored. ``packed``: the weight and bias already
    packed for this plan (:func:`pack_unbiased`), else they are packed once per loaded
    param."""
    if isinstance(plan, PointwisePlan) and buffer is not None:
        restride(plan, x, buffer)
    _call(kernels, plan, x, weight, bias, out, buffer, residual, relu, clip, packed)()


def _call(kernels: ModuleType, plan: DirectPlan | PointwisePlan | DepthwisePlan, x: Any,
          weight: Any, bias: Any, out: Any, buffer: Any, residual: Any, relu: bool,
          clip: Clip = None, packed: Packed = None) -> Callable[[], None]:
    if isinstance(plan, DepthwisePlan):
        return depthwise_call(kernels, plan, x, weight, bias, out, residual, relu, clip, packed)
    if isinstance(plan, PointwisePlan):
        return pointwise_call(kernels, plan, x, weight, bias, out, buffer, residual, relu,
                              clip, packed)
    return direct_call(kernels, plan, x, weight, bias, out, buffer, residual, relu, clip,
                       packed)


def run_conv(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any], groups: int,
             strides: tuple[int, ...], dilation: tuple[int, ...], begin: tuple[int, ...],
             residual: Any = None, relu: bool = False, clip: Clip = None) -> None:
    """A convolution planned for this call's shapes (:func:`conv_plan`, with the compiled
    kernel where numba is there), then ``+ residual`` and relu: as the compiled kernels
    store, else in place after the reference. ``outputs``: the output, then the plan's
    workspace or nothing (allocated for the call)."""
    run_conv_with(direct_kernels(), xp, inputs, outputs, groups, strides, dilation, begin,
                  residual, relu, clip)


def run_conv_with(kernels: ModuleType | None, xp: Any, inputs: Sequence[Any],
                  outputs: Sequence[Any], groups: int, strides: tuple[int, ...],
                  dilation: tuple[int, ...], begin: tuple[int, ...], residual: Any = None,
                  relu: bool = False, clip: Clip = None) -> None:
    """:func:`run_conv` with the compiled ``kernels`` decided by the caller (None: the
    reference), so a kernel prepared at ``create()`` never asks again."""
    x, weight, out = inputs[0], inputs[1], outputs[0]
    plan = conv_plan(tuple(x.shape), tuple(weight.shape), tuple(out.shape), str(x.dtype),
                     gemm_dtype(xp, x.dtype).name, True, groups, strides, dilation, begin,
                     kernels is not None)
    if plan.direct is None or not out.size:
        reference_conv(xp, inputs, outputs, groups, strides, dilation, begin)
        _apply(xp, out, residual, relu, clip)
        return
    assert kernels is not None
    target = out if out.flags.c_contiguous else np.empty(out.shape, np.float32)
    buffer = _buffer(plan.direct, outputs[1:])
    bias = inputs[2] if len(inputs) == 3 else None
    run_plan(kernels, plan.direct, x, weight, bias, target, buffer, residual, relu, clip)
    if target is not out:
        out[...] = target


def _buffer(plan: DirectPlan | PointwisePlan | DepthwisePlan, workspace: Sequence[Any]
            ) -> Any:
    """The padded or strided copy's buffer: the planned workspace, or one allocated for a
    plain call; None where the plan reads the data in place.

    Raises:
        ValueError: the workspace given is smaller than the plan's (the kernels would write
            past its end).
    """
    if plan.workspace is None:
        return None
    if not workspace:
        return np.empty(plan.workspace, np.float32)
    if workspace[0].size < prod(plan.workspace):
        raise ValueError(f"the convolution's workspace holds {workspace[0].size} floats; its "
                         f"plan copies {prod(plan.workspace)} into it")
    return workspace[0]


def _apply(xp: Any, out: Any, residual: Any, relu: bool, clip: Clip = None) -> None:
    if residual is not None:
        xp.add(out, residual, out=out)
    if relu:
        xp.maximum(out, 0, out=out)  # NaN stays NaN, as the relu op
    if clip is not None:
        xp.clip(out, clip[0], clip[1], out=out)


def conv_epilogue(xp: Any, types: Sequence[TensorType], out: TensorType, groups: int,
                  strides: tuple[int, ...], dilation: tuple[int, ...], begin: tuple[int, ...],
                  residual: bool, relu: bool, clip: Clip = None,
                  blocked: tuple[bool, bool] = (False, False)) -> Callable[..., None] | None:
    """The convolution of ``types`` (its inputs') into ``out`` followed by ``+ residual``
    and/or relu, as one kernel ``kernel(*inputs, residual?, out, workspace)`` (the sum and
    relu applied as the results are stored, with no pass of their own), where the compiled
    kernels run it (numba, 2-D float32 of one group, or depthwise); else None. ``blocked``:
    whether the data and the output are ``[N, C/8, H, W, 8]`` (conv2d's ``NCHW8c``
    layouts). The plan is made here, once, not per call.

    Example:
        >>> import numpy as np
        >>> types = TensorType((1, 8, 6, 6), "float32"), TensorType((16, 8, 3, 3), "float32")
        >>> out_type = TensorType((1, 16, 6, 6), "float32")
        >>> kernel = conv_epilogue(np, types, out_type, 1, (1, 1), (1, 1), (1, 1), True, True)
        >>> x, w = np.ones((1, 8, 6, 6), np.float32), np.ones((16, 8, 3, 3), np.float32)
        >>> out, r = np.empty((1, 16, 6, 6), np.float32), np.full((1, 16, 6, 6), -40, np.float32)
        >>> if kernel is not None:  # None without numba
        ...     kernel(x, w, r, out)  # a corner sees 2x2x8 ones, the middle 3x3x8
        ...     print(out[0, 0, 0, 0], out[0, 0, 2, 2])
        0.0 32.0
    """
    x = types[0]
    kernels = direct_kernels()
    if not (kernels is not None and x.dtype == "float32" and x.ndim == 4 + blocked[0]
            and 0 not in out.shape):
        return None
    geometry = conv_plan(nchw_shape(x.shape, blocked[0]), types[1].shape,
                         nchw_shape(out.shape, blocked[1]), "float32", "float32", True, groups,
                         strides, dilation, begin, True, blocked).direct
    if geometry is None:  # grouped, not depthwise: the reference
        return None
    n_in = len(types)
    has_bias = n_in == 3
    strided = geometry if isinstance(geometry, PointwisePlan) and geometry.workspace else None
    last = LastArrays()

    def kernel(*arrays: Any) -> None:
        call = last.get(arrays) or _prepare(arrays)
        if call is not None:
            if strided is not None:
                restride(strided, arrays[0], arrays[-1])
            call()
            return
        # a plain call: its output no C-contiguous array, or no workspace given
        target = arrays[n_in + residual]
        into = target if target.flags.c_contiguous else np.empty(target.shape, np.float32)
        run_plan(kernels, geometry, arrays[0], arrays[1], arrays[2] if has_bias else None, into,
                _buffer(geometry, arrays[n_in + residual + 1:]),
                arrays[n_in] if residual else None, relu, clip)
        if into is not target:
            target[...] = into

    def _prepare(arrays: tuple[Any, ...]) -> Callable[[], None] | None:
        """The job call of these arrays, kept for the next call where the weight and bias are
        frozen params and every array is C-contiguous (read in place, not copied)."""
        weight, bias = arrays[1], arrays[2] if has_bias else None
        extra = arrays[n_in] if residual else None
        target, *space = arrays[n_in + residual:]
        if not target.flags.c_contiguous or (geometry.workspace is not None and not space):
            return None
        call = _call(kernels, geometry, arrays[0], weight, bias, target,
                     _buffer(geometry, space), extra, relu, clip)
        if is_frozen(weight) and (bias is None or is_frozen(bias)):
            last.keep(arrays, None, call)
        return call

    def bind(arrays: tuple[Any, ...]) -> tuple[Callable[..., None], tuple[Any, ...]]:
        """A step's call on ``arrays``: the job call itself where it is kept for them (the
        weight and bias frozen params, see ``_prepare``) and no strided copy is due per
        call (1.5 us less a call than ``kernel``), else ``kernel`` and the arrays."""
        frozen = is_frozen(arrays[1]) and (not has_bias or is_frozen(arrays[2]))
        if strided is None and frozen:
            call = _prepare(arrays)
            if call is not None and last.get(arrays) is call:  # kept: read in place
                return call, ()
        return kernel, arrays

    return Binding(kernel, bind)
