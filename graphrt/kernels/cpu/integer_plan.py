"""The quantized convolution's integer kernel on the host: its geometry at given shapes, the
weight packed for it, and the call that runs it over the cores
(:func:`graphrt.kernels.cpu.integer_conv.qconv_jobs`, AVX2).

A 2-D ``qlinear_conv`` (or ``conv_integer``) of one group runs in int32 where its weight
allows (:func:`pack_integer`): the threads of the call copy the 8-bit data into a padded
buffer of 32-bit words (4 input channels of a pixel to a word), the tiles of 8 output
channels x 8 pixels sum their taps 4 at a time with AVX2's integer multiply-adds, and
requantize into the 8-bit output as they store (``conv_integer``: store the int32 sums).
Where the weight does not allow it, or the CPU has no AVX2, :mod:`graphrt.kernels.cpu.qconv`
runs the float kernels (``conv_integer``: its reference) instead.

Example:
    >>> plan = integer_plan((1, 3, 8, 8), (16, 3, 3, 3), (1, 16, 8, 8), (1, 1), (1, 1),
    ...                     (1, 1))
    >>> plan.workspace, plan.length, plan.jobs, len(plan.taps)  # 10x10 words; 9 words of taps
    (100, 64, 16, 9)
    >>> weight = np.ones((16, 3, 3, 3), np.int8)
    >>> packed = pack_integer(weight, np.zeros(16, np.int8))
    >>> packed.weights.shape, packed.sums[:2].tolist()   # 16 channels x 9 words x 4 bytes
    ((576,), [27, 27])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any

import numpy as np

from ...devices.base import aligned_copy
from .conv import strip_tiles
from .crew import run_jobs

__all__ = ["IntegerCall", "IntegerPlan", "IntegerWeight", "integer_plan", "pack_integer"]

_CHANNELS, _PIXELS, _QUAD = 8, 8, 4  # as integer_conv's (not imported: that needs numba)

_MIN_WORK = 4_000
"""Tile-words (384 multiply-adds, about 4 float tile-taps) below which a call runs on the
calling thread alone (see :data:`graphrt.kernels.cpu.conv._MIN_WORK`)."""
_COPY_JOB = 8192
"""Words (about) one job of the padded copy writes."""

_PAIR_LIMIT = 128
"""The largest ``|w0| + |w1|`` of two adjacent taps whose products with any unsigned byte
sum exactly in int16 (``255 * 128 <= 32767``): AVX2's ``vpmaddubsw`` saturates beyond."""


@dataclass(frozen=True)
class IntegerPlan:
    """An integer direct convolution at given shapes.

    Attributes:
        workspace: 32-bit words of the padded copy ``[N, C/4, Hp, Wp]``.
        image: words per padded image.
        length: output pixels per image.
        jobs: tiles (8 output channels x 8 pixels) over the batch.
        grain: tiles a thread claims at a time.
        strip: tiles along the output every block of channels runs over before the next.
        parallel: worth running on every core.
        geometry: the padded copy's, as the kernel takes it
            (:data:`graphrt.kernels.cpu.integer_conv.GEOMETRY`), flip and fill zero; a 1x1
            convolution without begin pads copies every stride-th pixel alone.
        pixels: per output pixel (padded to whole tiles), its window's word in an image.
        taps: per word of taps (4 input channels, then kernel row and column), its offset
            from a window's word.
    """

    workspace: int
    image: int
    length: int
    jobs: int
    grain: int
    strip: int
    parallel: bool
    geometry: np.ndarray[Any, Any] = field(compare=False, repr=False)
    pixels: np.ndarray[Any, Any] = field(compare=False, repr=False)
    taps: np.ndarray[Any, Any] = field(compare=False, repr=False)


@lru_cache(maxsize=256)
def integer_plan(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...],
                 strides: tuple[int, ...], dilation: tuple[int, ...], begin: tuple[int, ...]
                 ) -> IntegerPlan:
    """The :class:`IntegerPlan` of data ``x`` ``[N, C, H, W]``, weight ``w``
    ``[O, C, kh, kw]`` into ``out`` ``[N, O, OH, OW]``, with per-axis strides, dilation and
    begin pads."""
    (n, c, h, width), (o, _, kh, kw), (oh, ow) = x, w, out[2:]
    (sh, sw), (dh, dw), (top, left) = strides, dilation, begin
    sampled = kh == kw == 1 and top == left == 0  # the copy takes every stride-th pixel
    steps = (sh, sw) if sampled else (1, 1)
    (sh, sw) = (1, 1) if sampled else (sh, sw)
    hp = (oh - 1) * sh + (kh - 1) * dh + 1  # the rows and columns the windows read
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    words = -(-c // _QUAD)
    length = oh * ow
    tiles = -(-length // _PIXELS)
    y, x_ = np.divmod(np.arange(length, dtype=np.int64), ow)
    pixels = np.zeros(tiles * _PIXELS, np.int64)  # the last tile's extra pixels: pixel 0
    pixels[:length] = y * sh * wp + x_ * sw
    k, i, j = (a.ravel() for a in np.meshgrid(np.arange(words), np.arange(kh), np.arange(kw),
                                              indexing="ij"))
    taps = (k * hp * wp + i * dh * wp + j * dw).astype(np.int32)
    geometry = np.array([n, c, h, width, hp, wp, top, left,
                         max(1, _COPY_JOB // (hp * wp)), 0, 0, *steps], np.int64)
    jobs = n * -(-o // _CHANNELS) * tiles
    strip = strip_tiles(_QUAD * words * wp, hp, (kh - 1) * dh, sh, ow, tiles)
    for array in (geometry, pixels, taps):
        array.flags.writeable = False
    return IntegerPlan(n * words * hp * wp, words * hp * wp, length, jobs,
                       max(1, min(32, jobs // 32)), strip, jobs * len(taps) >= _MIN_WORK,
                       geometry, pixels, taps)


@dataclass(frozen=True)
class IntegerWeight:
    """A weight packed for the integer kernel: ``weights`` ``[ceil(O/B), T, B, 4]`` signed
    bytes (the weight minus its zero points; zeros past ``O`` and ``C``; ``B`` the kernel's
    ``PACK``, 8, or 16 with AVX-512 VNNI), flattened, and ``sums`` per output channel
    (int64: what the data's zero point is multiplied by)."""

    weights: np.ndarray[Any, Any]
    sums: np.ndarray[Any, Any]


def pack_integer(weight: np.ndarray[Any, Any], zero: np.ndarray[Any, Any],
                 block: int = _CHANNELS) -> IntegerWeight | None:
    """``weight`` (8-bit ``[O, C, kh, kw]``) minus ``zero`` (one, or one per output
    channel) packed for the integer kernel, ``block`` output channels side by side; None
    where a value leaves int8 or two adjacent taps of a word break :data:`_PAIR_LIMIT`."""
    o, c, kh, kw = weight.shape
    centered = weight.astype(np.int32) - np.asarray(zero, np.int32).reshape(-1, 1, 1, 1)
    if centered.size and (centered.min() < -128 or centered.max() > 127):
        return None
    blocks, words = -(-o // block), -(-c // _QUAD)
    full = np.zeros((blocks * block, words * _QUAD, kh, kw), np.int32)
    full[:o, :c] = centered
    taps = full.reshape(blocks * block, words, _QUAD, kh, kw).transpose(0, 1, 3, 4, 2)
    magnitudes = np.abs(taps)
    if (magnitudes[..., 0::2] + magnitudes[..., 1::2]).max(initial=0) > _PAIR_LIMIT:
        return None
    packed = taps.reshape(blocks, block, -1, _QUAD).transpose(0, 2, 1, 3)
    return IntegerWeight(aligned_copy(packed.astype(np.int8)),
                         centered.reshape(o, -1).sum(axis=1, dtype=np.int64))


def _scale(packed: IntegerWeight, bias: np.ndarray[Any, Any] | None, zero: int,
           multiplier: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any],
                                                     np.ndarray[Any, Any]]:
    """The kernel's bias (with the data's zero point folded in: ``bias - zero * sums``) and
    multiplier per output channel, float64, padded to whole blocks."""
    o = packed.sums.shape[0]
    size = -(-o // _CHANNELS) * _CHANNELS
    summed, scales = np.zeros(size), np.zeros(size)
    summed[:o] = -zero * packed.sums
    if bias is not None:
        summed[:o] += np.asarray(bias, np.int64).reshape(-1)
    scales[:o] = multiplier
    return summed, scales


class IntegerCall:
    """The integer kernel's call of one ``qlinear_conv`` (or ``conv_integer``, where
    ``sums``) at the static types of :func:`integer_plan`: ``call(packed, inputs, out,
    buffer)`` with the op's inputs (``x, x_scale, x_zero, w, w_scale, w_zero, y_scale,
    y_zero[, bias]``; ``x, w, x_zero, w_zero``), the 8-bit output (int32) and the plan's
    padded copy (uint32). What the call derives from the scales, zero points and bias (the
    kernel's bias and multiplier per channel, the copy's fill) is kept by their values, so a
    model's runs (whose are constants) compute it once: the call of a small convolution took
    42 us of Python before, 23 after."""

    def __init__(self, kernels: ModuleType, plan: IntegerPlan, signed: bool,
                 bounds: tuple[int, int], sums: bool = False) -> None:
        self.kernels, self.plan, self.signed, self.bounds = kernels, plan, signed, bounds
        self.sums = sums
        # of its jobs, claimed guided (as the float convolutions')
        self.grain = max(1, plan.grain * _CHANNELS // kernels.JOB_CHANNELS) | kernels.GUIDED
        self.small = (2,) if sums else (1, 2, 4, 6, 7)  # the inputs the call derives from
        self.derived: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def _arguments(self, packed: IntegerWeight, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """The kernel's arguments after the padded copy that derive from the small inputs:
        geometry (with the flip and the fill), bias, multiplier, levels."""
        xz = np.asarray(inputs[2])
        zero = int(xz.reshape(-1)[0]) + (128 if self.signed else 0)
        geometry = self.plan.geometry.copy()
        geometry[9:11] = (128 if self.signed else 0, zero)
        if self.sums:
            summed, scales = _scale(packed, None, zero, np.zeros(1))
            return geometry, summed, scales, np.zeros(3)
        xs, ws, ys, yz = (np.asarray(inputs[i]) for i in (1, 4, 6, 7))
        bias = np.asarray(inputs[8]) if len(inputs) == 9 else None
        multiplier = np.asarray(np.divide(np.multiply(xs.reshape(()), ws), ys.reshape(())),
                                np.float64).reshape(-1)
        summed, scales = _scale(packed, bias, zero, multiplier)
        levels = np.array([int(yz.reshape(-1)[0]), *self.bounds], np.float64)
        return geometry, summed, scales, levels

    def __call__(self, packed: IntegerWeight, inputs: Sequence[Any], out: Any, buffer: Any
                 ) -> None:
        key = (id(packed), *(np.asarray(inputs[i]).tobytes() for i in self.small),
               np.asarray(inputs[8]).tobytes() if len(inputs) == 9 else b"")
        found = self.derived.get(key)
        if found is None:
            if len(self.derived) >= 8:
                self.derived.clear()
            # (packed kept alive with its entry: its id stays its own)
            found = self.derived[key] = (*self._arguments(packed, inputs), packed)
        geometry, summed, scales, levels, _ = found
        plan = self.plan
        data = np.ascontiguousarray(inputs[0]).reshape(-1).view(np.uint8)
        target = out.reshape(-1)
        bytes_, sums = (_NO_BYTES, target) if self.sums else (target.view(np.uint8), _NO_SUMS)
        run_jobs(self.kernels.qconv_jobs, plan.parallel, (
            data, geometry, buffer.reshape(-1)[:plan.workspace], plan.image, plan.pixels,
            plan.length, plan.taps, packed.weights, summed, scales, levels, bytes_, sums,
            packed.sums.shape[0], plan.strip, np.zeros(4, np.int64), self.grain))


_NO_BYTES = np.zeros(0, np.uint8)
_NO_SUMS = np.zeros(0, np.int32)
