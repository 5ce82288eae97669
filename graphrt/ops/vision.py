"""Standard ops: detection and deformable vision ops (used by the ONNX frontend; numpy and
cupy).

* ``roi_align``: each region of interest (``[x1, y1, x2, y2]`` on image ``batch_index``) of an
  ``[N, C, H, W]`` feature map pooled to ``[C, output_height, output_width]`` by averaging (or
  taking the maximum of) bilinear samples on a regular grid in every bin, as ONNX RoiAlign and
  its reference implementation (ONNX Runtime's) compute it: the grid has ``sampling_ratio``
  points per bin side, or ``ceil(bin size)`` when it is 0; a sample more than one pixel outside
  the map counts as 0; ``max`` takes the largest *weighted corner* of each sample, as the
  reference does.
* ``deform_conv``: an N-d grouped convolution whose kernel taps are displaced by a learned
  ``offset`` per output position (and optionally scaled by a ``mask``), the input read by
  N-linear interpolation with zeros outside (ONNX DeformConv).

Both are vectorized gathers. ``roi_align`` takes the regions grouped by sampling grid (an
adaptive grid follows each region's size, read back to the host once per call), one gather per
distinct grid rather than per region, in blocks of bounded memory; ``deform_conv`` gathers its
displaced columns (im2col) and multiplies them with the weights in one GEMM per group.
Coordinates are computed in float32 (float64 for float64 inputs) and values accumulate in
float32 for 16-bit floats, rounded once.

Example:
    >>> import numpy as np
    >>> from graphrt.ops import get_op
    >>> op = get_op("roi_align")
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    >>> rois = np.array([[0, 0, 3, 3]], np.float32)
    >>> out = np.empty((1, 1, 1, 1), np.float32)
    >>> attrs = op.attrs(sampling_ratio=1, half_pixel=False)
    >>> op.compute(np, [x, rois, np.zeros(1, np.int64)], [out], attrs)
    >>> float(out[0, 0, 0, 0])  # the one sample sits at (1.5, 1.5)
    7.5
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from .attention import _select
from .base import Attrs, OpDef, OpError, TensorType, accumulator, register_op, window_attrs

__all__ = ["DeformConvAttrs", "RoiAlignAttrs"]

PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]

_FLOATS = ("float16", "float32", "float64", "bfloat16")

_BLOCK = 1 << 22
"""Elements of the largest temporary one gather step makes (the work is cut into blocks)."""

_MAX_SAMPLES = 1 << 24
"""Most sampling points ``roi_align`` takes per bin (an adaptive grid follows the regions'
sizes, which are data: a region spanning a million pixels would ask for billions)."""


def _show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def _is_int(dtype: str) -> bool:
    return dtype != "bfloat16" and np.dtype(dtype).kind in "iu"


def _coordinate_dtype(dtype: Any) -> np.dtype[Any]:
    """The dtype sampling coordinates are computed in: float64 for float64, else float32."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _arange(xp: Any, ref: Any, n: int, dtype: Any) -> Any:
    """``0 .. n-1`` of ``dtype`` on the device of ``ref`` (numpy's ``arange`` makes a host
    array, which the sim device's arrays refuse to be combined with)."""
    values = xp.arange(n, dtype=dtype)
    if type(values) is type(ref):
        return values
    out = xp.empty_like(ref, shape=(n,), dtype=dtype)
    out[...] = values
    return out


# --------------------------------------------------------------------------------------------
# roi_align
# --------------------------------------------------------------------------------------------


class RoiAlignAttrs(Attrs):
    """``roi_align``: pool regions of interest of a feature map.

    Attributes:
        mode: ``"avg"`` (the mean of the samples of a bin) or ``"max"`` (their largest
            weighted corner, as ONNX's reference and ONNX Runtime compute it).
        output_height, output_width: the pooled size of every region.
        sampling_ratio: sampling points per bin side; 0: ``ceil`` of the bin's size, per
            region.
        spatial_scale: multiplies the regions' coordinates (input image → feature map).
        half_pixel: shift the scaled coordinates by -0.5 (ONNX ``half_pixel``); False keeps
            them and makes regions at least 1x1 (``output_half_pixel``, RoiAlign-10).
    """

    mode: Literal["avg", "max"] = "avg"
    output_height: PosInt = 1
    output_width: PosInt = 1
    sampling_ratio: NonNegInt = 0
    spatial_scale: float = 1.0
    half_pixel: bool = True


def _infer_roi_align(types: Sequence[TensorType], attrs: RoiAlignAttrs, data: Sequence[Any]
                     ) -> list[TensorType]:
    if len(types) != 3:
        raise OpError(f"roi_align takes 3 inputs (x, rois, batch_indices), given {len(types)}")
    x, rois, indices = types
    if x.dtype not in _FLOATS or x.ndim != 4:
        raise OpError(f"x must be a 4-D float tensor ([N, C, H, W]), given {_show(x)}")
    if rois.dtype != x.dtype or rois.ndim != 2 or rois.shape[1] != 4:
        raise OpError(f"rois must be {x.dtype}[num_rois, 4], given {_show(rois)}")
    count = rois.shape[0]
    if not _is_int(indices.dtype) or indices.shape != (count,):
        raise OpError(f"batch_indices must be an integer tensor of shape [{count}] (one per "
                      f"region), given {_show(indices)}")
    batch, channels, height, width = x.shape
    if count and channels and (batch == 0 or height == 0 or width == 0):
        raise OpError(f"x {_show(x)} has no pixel for the {count} regions to sample")
    return [TensorType((count, channels, attrs.output_height, attrs.output_width), x.dtype)]


def _axis_samples(xp: Any, start: Any, bins: Any, grid: int, pooled: int, size: int
                  ) -> tuple[Any, ...]:
    """Along one axis, for every region, bin and sample ``[R, pooled, grid]``: the low and
    high pixel, their weights and whether the sample lies outside the map (it counts as 0).

    The arithmetic follows ONNX's reference step by step, in the coordinates' dtype.
    """
    cdt = start.dtype
    bins_ = bins[:, None, None]
    cells = _arange(xp, start, pooled, cdt).reshape(1, pooled, 1)
    steps = _arange(xp, start, grid, cdt).reshape(1, 1, grid)
    pos = (start[:, None, None] + cells * bins_) + (steps + cdt.type(0.5)) * bins_ / cdt.type(
        grid)
    outside = (pos < -1.0) | (pos > size) | ~xp.isfinite(pos)
    pos = _select(xp, outside, cdt.type(0), xp.maximum(pos, cdt.type(0)), cdt)
    low = xp.floor(pos)
    at_end = low >= size - 1
    low = _select(xp, at_end, cdt.type(size - 1), low, cdt)
    pos = _select(xp, at_end, low, pos, cdt)
    high = _select(xp, at_end, low, low + 1, cdt)
    frac = pos - low
    return low.astype(np.int64), high.astype(np.int64), 1 - frac, frac, outside


def _blocks(total: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + size, total)) for lo in range(0, total, max(size, 1))]


def _grid_groups(xp: Any, bin_h: Any, bin_w: Any, ratio: int
                 ) -> list[tuple[list[int] | None, int, int]]:
    """The regions by sampling grid: ``(members, rows, cols)``, members None for all.

    A positive ``ratio`` gives every region one grid; 0 gives each ``ceil`` of its bin size
    (read back to the host once), and regions without a sample (an empty or negative bin)
    belong to no group."""
    if ratio > 0:
        return [(None, ratio, ratio)]
    cdt = bin_h.dtype
    limit = cdt.type(_MAX_SAMPLES + 1)
    sizes = []
    for bins in (bin_h, bin_w):
        grid = xp.ceil(bins)
        sizes.append(_select(xp, grid > 0, xp.minimum(grid, limit), cdt.type(0), cdt).astype(
            np.int64).tolist())
    groups: dict[tuple[int, int], list[int]] = {}
    for region, (rows, cols) in enumerate(zip(*sizes, strict=True)):
        if rows > 0 and cols > 0:
            groups.setdefault((rows, cols), []).append(region)
    largest = max((rows * cols for rows, cols in groups), default=0)
    if largest > _MAX_SAMPLES:
        raise OpError(f"roi_align: a region asks for {largest:,} sampling points per bin, more "
                      f"than the {_MAX_SAMPLES:,} graphrt takes (give a sampling_ratio)")
    return [(members, rows, cols) for (rows, cols), members in groups.items()]


def _roi_align(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
               attrs: RoiAlignAttrs) -> None:
    x, rois, batch_indices = inputs
    out = outputs[0]
    if out.size == 0:
        return
    batch, channels, height, width = x.shape
    bidx = batch_indices.astype(np.int64)
    low_index, high_index = int(bidx.min()), int(bidx.max())
    if low_index < 0 or high_index >= batch:
        raise OpError(f"roi_align: batch_indices must lie in [0, {batch}), given values in "
                      f"[{low_index}, {high_index}]")
    cdt = _coordinate_dtype(rois.dtype)
    work = accumulator(x.dtype)
    boxes = rois.astype(cdt)
    scale = cdt.type(attrs.spatial_scale)
    shift = cdt.type(0.5 if attrs.half_pixel else 0.0)
    start_w, start_h = boxes[:, 0] * scale - shift, boxes[:, 1] * scale - shift
    end_w, end_h = boxes[:, 2] * scale - shift, boxes[:, 3] * scale - shift
    roi_w, roi_h = end_w - start_w, end_h - start_h
    if not attrs.half_pixel:  # malformed regions become 1x1
        roi_w, roi_h = xp.maximum(roi_w, cdt.type(1)), xp.maximum(roi_h, cdt.type(1))
    ph, pw = attrs.output_height, attrs.output_width
    bin_h, bin_w = roi_h / cdt.type(ph), roi_w / cdt.type(pw)
    groups = _grid_groups(xp, bin_h, bin_w, attrs.sampling_ratio)
    # regions without a sample stay 0 (the reference's initial value in both modes)
    acc = xp.zeros_like(x, dtype=work, shape=(rois.shape[0], ph, pw, channels))
    if groups:  # [N, H*W, C]: a gathered pixel reads its channels contiguously
        pixels = x.reshape(batch, channels, height * width).transpose(0, 2, 1).astype(
            work, order="C")
    for members, rows, cols in groups:
        if members is None:
            chosen: Any = slice(None)
        else:
            chosen = _on_device(xp, bidx, members)
        ys = _axis_samples(xp, start_h[chosen], bin_h[chosen], rows, ph, height)
        xs = _axis_samples(xp, start_w[chosen], bin_w[chosen], cols, pw, width)
        part = _roi_pool(xp, pixels, bidx[chosen], ys, xs, ph, pw, attrs.mode, width)
        if attrs.mode == "avg":
            part /= work.type(rows * cols)
        acc[chosen] = part
    out[...] = acc.transpose(0, 3, 1, 2).astype(out.dtype)


def _on_device(xp: Any, ref: Any, values: list[int]) -> Any:
    """``values`` as an int64 array on the device of ``ref``."""
    array = xp.asarray(values, dtype=np.int64)
    if type(array) is type(ref):
        return array
    out = xp.empty_like(ref, shape=(len(values),), dtype=np.int64)
    out[...] = array
    return out


def _taps(xp: Any, samples: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[Any, ...]:
    """One axis' samples with a last axis for their two taps (low, high): pixel index, weight
    and outside flag, each reshaped to ``shape`` (a 1 where the other axis goes)."""
    low, high, keep, frac, outside = samples
    upper = _arange(xp, low, 2, np.int64) == 1
    at = _select(xp, upper, high[..., None], low[..., None], np.int64)
    weight = _select(xp, upper, frac[..., None], keep[..., None], keep.dtype)
    return at.reshape(shape), weight.reshape(shape), outside.reshape((*shape[:-2], 1, 1))


def _roi_pool(xp: Any, pixels: Any, bidx: Any, ys: tuple[Any, ...], xs: tuple[Any, ...],
              ph: int, pw: int, mode: str, width: int) -> Any:
    """The sum (``avg``) or the maximum (``max``) of the samples of every bin ``[R, ph, pw,
    C]`` of regions that share one sampling grid, in blocks of regions and of samples of
    bounded size. A sample's value is the weighted sum (``avg``) or the largest weighted value
    (``max``) of its four corners, as in ONNX's reference."""
    regions, rows, cols = ys[0].shape[0], ys[0].shape[2], xs[0].shape[2]
    channels, work = pixels.shape[2], pixels.dtype
    acc = xp.full_like(pixels, 0 if mode == "avg" else -np.inf,
                       shape=(regions, ph, pw, channels))
    per_sample = ph * pw * channels * 4
    cols_step = max(1, min(cols, _BLOCK // per_sample))
    rows_step = max(1, min(rows, _BLOCK // (per_sample * cols_step)))
    region_step = max(1, _BLOCK // (per_sample * rows_step * cols_step))
    for r0, r1 in _blocks(regions, region_step):
        count = r1 - r0
        source = bidx[r0:r1].reshape(count, 1, 1, 1)
        for i0, i1 in _blocks(rows, rows_step):
            y_at, y_w, y_out = _taps(xp, tuple(v[r0:r1, :, i0:i1] for v in ys),
                                     (count, ph, 1, i1 - i0, 1, 2, 1))
            for j0, j1 in _blocks(cols, cols_step):
                x_at, x_w, x_out = _taps(xp, tuple(v[r0:r1, :, j0:j1] for v in xs),
                                         (count, 1, pw, 1, j1 - j0, 1, 2))
                taps = (i1 - i0) * (j1 - j0) * 4
                outside = y_out | x_out  # reads pixel 0 with weight 0, as the reference does
                at = _select(xp, outside, 0, y_at * width + x_at, np.int64)
                weight = _select(xp, outside, 0, y_w * x_w, y_w.dtype).astype(work)
                values = pixels[source, at.reshape(count, ph, pw, taps)]  # [r, ph, pw, S, C]
                if mode == "avg":
                    part = xp.matmul(weight.reshape(count, ph, pw, 1, taps), values)
                    acc[r0:r1] += part.reshape(count, ph, pw, channels)
                else:
                    values = values * weight.reshape(count, ph, pw, taps, 1)
                    part = xp.max(values, axis=3)
                    xp.maximum(acc[r0:r1], part, out=acc[r0:r1])
    return acc


register_op(OpDef(name="roi_align", attrs=RoiAlignAttrs, arity=3, infer=_infer_roi_align,
                  compute=_roi_align))


# --------------------------------------------------------------------------------------------
# deform_conv
# --------------------------------------------------------------------------------------------


class DeformConvAttrs(Attrs):
    """``deform_conv``: inputs ``x [N, C, *spatial]``, ``weight [O, C/group, *kernel]``,
    ``offset [N, offset_group * prod(kernel) * ndim, *out]`` (per kernel tap, the displacement
    along each spatial axis), then ``bias [O]`` and ``mask [N, offset_group * prod(kernel),
    *out]`` where their flags say.

    Attributes:
        strides, dilations: per spatial axis (default 1).
        pads: begin pads then end pads per spatial axis (default 0).
        group: groups of input and output channels.
        offset_group: groups of input channels sharing one set of offsets (and mask).
        bias: a bias input follows the offset.
        mask: a mask input follows the offset (and the bias).
    """

    strides: list[PosInt] | None = None
    pads: list[NonNegInt] | None = None
    dilations: list[PosInt] | None = None
    group: PosInt = 1
    offset_group: PosInt = 1
    bias: bool = False
    mask: bool = False


def _deform_geometry(x: tuple[int, ...], w: tuple[int, ...], attrs: DeformConvAttrs
                     ) -> tuple[list[int], list[int], list[int], list[int]]:
    """Strides, pads (begins then ends), dilations and the output size per spatial axis."""
    dims = len(x) - 2
    strides, dilations, pads = window_attrs(attrs.strides, attrs.dilations, attrs.pads, dims,
                                            "deform_conv")
    sizes = []
    for axis in range(dims):
        span = dilations[axis] * (w[2 + axis] - 1) + 1
        room = x[2 + axis] + pads[axis] + pads[axis + dims] - span
        if room < 0:
            raise OpError(f"deform_conv: the kernel spans {span} along spatial axis {axis}, "
                          f"more than the padded input's {x[2 + axis] + pads[axis]}"
                          f"+{pads[axis + dims]}")
        sizes.append(room // strides[axis] + 1)
    return strides, pads, dilations, sizes


def _infer_deform_conv(types: Sequence[TensorType], attrs: DeformConvAttrs,
                       data: Sequence[Any]) -> list[TensorType]:
    expected = 3 + int(attrs.bias) + int(attrs.mask)
    if len(types) != expected:
        raise OpError(f"deform_conv takes {expected} inputs (x, weight, offset"
                      f"{', bias' if attrs.bias else ''}{', mask' if attrs.mask else ''}), "
                      f"given {len(types)}")
    x, w, offset = types[:3]
    if x.dtype not in _FLOATS or x.ndim < 3:
        raise OpError(f"x must be a float tensor [N, C, *spatial] with at least one spatial "
                      f"axis, given {_show(x)}")
    for t in types[1:]:
        if t.dtype != x.dtype:
            raise OpError(f"every input must have x's dtype {x.dtype}, given {_show(t)}")
    dims = x.ndim - 2
    if w.ndim != x.ndim or min(w.shape[2:]) < 1:
        raise OpError(f"weight must be [O, C/group, *kernel] ({x.ndim}-D, kernel sizes >= 1) "
                      f"for x {_show(x)}, given {_show(w)}")
    batch, channels = x.shape[:2]
    out_channels = w.shape[0]
    group, offset_group = attrs.group, attrs.offset_group
    if w.shape[1] * group != channels or out_channels % group:
        raise OpError(f"x's {channels} channels must be weight's axis 1 ({w.shape[1]}) times "
                      f"group ({group}), and weight's {out_channels} output channels a "
                      "multiple of group")
    if channels % offset_group:
        raise OpError(f"x's {channels} channels are not a multiple of offset_group "
                      f"{offset_group}")
    _, _, _, sizes = _deform_geometry(x.shape, w.shape, attrs)
    taps = math.prod(w.shape[2:])
    want = (batch, offset_group * taps * dims, *sizes)
    if offset.shape != want:
        raise OpError(f"offset must be {list(want)} (batch, offset_group * kernel taps * "
                      f"spatial axes, output size), given {_show(offset)}")
    extra = list(types[3:])
    if attrs.bias:
        bias = extra.pop(0)
        if bias.shape != (out_channels,):
            raise OpError(f"bias must be [{out_channels}], given {_show(bias)}")
    if attrs.mask:
        mask = extra.pop(0)
        want_mask = (batch, offset_group * taps, *sizes)
        if mask.shape != want_mask:
            raise OpError(f"mask must be {list(want_mask)} (batch, offset_group * kernel taps, "
                          f"output size), given {_show(mask)}")
    return [TensorType((batch, out_channels, *sizes), x.dtype)]


def _deform_conv(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                 attrs: DeformConvAttrs) -> None:
    x, w, offset = inputs[:3]
    rest = list(inputs[3:])
    bias = rest.pop(0) if attrs.bias else None
    mask = rest.pop(0) if attrs.mask else None
    out = outputs[0]
    if out.size == 0:
        return
    strides, pads, dilations, sizes = _deform_geometry(x.shape, w.shape, attrs)
    batch, channels, *space = x.shape
    out_channels, kernel = w.shape[0], list(w.shape[2:])
    dims, taps, places = len(space), math.prod(kernel), math.prod(sizes)
    group, offset_group = attrs.group, attrs.offset_group
    work = accumulator(x.dtype)
    cdt = _coordinate_dtype(x.dtype)
    # where each kernel tap reads at each output position before the offsets: [K, P] per axis
    tap_index = _arange(xp, x, taps, np.int64)[:, None]
    place_index = _arange(xp, x, places, np.int64)[None, :]
    bases = []
    for axis in range(dims):
        k_at = (tap_index // math.prod(kernel[axis + 1:])) % kernel[axis]
        o_at = (place_index // math.prod(sizes[axis + 1:])) % sizes[axis]
        bases.append((o_at * strides[axis] - pads[axis] + k_at * dilations[axis]).astype(cdt))
    weights = w.astype(work).reshape(group, out_channels // group, channels // group * taps)
    step = max(1, _BLOCK // max(1, channels * taps * places))
    for n0, n1 in _blocks(batch, step):
        count = n1 - n0
        moved = offset[n0:n1].astype(cdt).reshape(count, offset_group, taps, dims, places)
        scale = None if mask is None else mask[n0:n1].astype(work).reshape(
            count, offset_group, taps * places)
        columns = _deform_columns(xp, x[n0:n1], moved, bases, scale, offset_group, work)
        columns = columns.reshape(count, group, channels // group * taps, places)
        result = xp.matmul(weights, columns)  # [n, group, O/group, P]
        result = result.reshape(count, out_channels, places)
        if bias is not None:
            result = result + bias.astype(work)[:, None]
        out[n0:n1] = result.reshape(count, out_channels, *sizes).astype(out.dtype)


def _deform_columns(xp: Any, x: Any, moved: Any, bases: Sequence[Any], scale: Any,
                    offset_group: int, work: Any) -> Any:
    """The displaced columns ``[n, C, K * P]``: ``x`` N-linearly interpolated (zeros outside)
    where each kernel tap lands at each output position, times the mask."""
    count, channels, *space = x.shape
    _, _, taps, dims, places = moved.shape
    if math.prod(space) == 0:  # every tap lies in the padding
        return xp.zeros_like(moved, dtype=work, shape=(count, channels, taps * places))
    per_group = channels // offset_group
    image = x.astype(work).reshape(count, offset_group, per_group, math.prod(space))
    corners: list[list[tuple[Any, Any, Any]]] = []  # per axis: (index, weight, inside) per tap
    for axis in range(dims):
        pos = moved[:, :, :, axis, :] + bases[axis]  # [n, G, K, P]
        low = xp.floor(pos)
        frac = (pos - low).astype(work)
        axis_taps = []
        for at, tap_weight in ((low, 1 - frac), (low + 1, frac)):
            tap_inside = (at >= 0) & (at <= space[axis] - 1)
            index = _select(xp, tap_inside, at, 0, at.dtype).astype(np.int64)
            axis_taps.append((index, tap_weight, tap_inside))
        corners.append(axis_taps)
    strides = [math.prod(space[axis + 1:]) for axis in range(dims)]
    columns: Any = None
    for combo in itertools.product(range(2), repeat=dims):
        flat: Any = None
        weight: Any = None
        inside: Any = None
        for axis, k in enumerate(combo):
            index, w, ok = corners[axis][k]
            flat = index * strides[axis] if flat is None else flat + index * strides[axis]
            weight = w if weight is None else weight * w
            inside = ok if inside is None else inside & ok
        flat = flat.reshape(count, offset_group, 1, taps * places)
        inside = inside.reshape(count, offset_group, 1, taps * places)
        weight = weight.reshape(count, offset_group, 1, taps * places)
        if scale is not None:
            weight = weight * scale[:, :, None, :]
        values = xp.take_along_axis(image, flat, axis=3)  # [n, G, C/G, K*P]
        term = _select(xp, inside, values, work.type(0), work) * weight
        columns = term if columns is None else columns + term
    return columns.reshape(count, channels, taps * places)


register_op(OpDef(name="deform_conv", attrs=DeformConvAttrs, arity=None,
                  infer=_infer_deform_conv, compute=_deform_conv))
