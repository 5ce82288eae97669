"""ONNX converters: ``Resize`` (opsets 10, 11, 13, 18, 19) and ``Upsample`` (7, 9).

All become the standard op ``resize``. What changes between versions:

* Upsample-7: ``scales`` attribute; Upsample-9 and Resize-10: ``scales`` input. Their
  coordinates are ``asymmetric`` (``y / scale``), ``nearest`` floors when upsampling and ceils
  when downsampling (``simple``), ``linear`` only. Upsample takes scales >= 1 and is
  deprecated from opset 10.
* Resize-11: ``roi``, ``scales`` (may be empty) or ``sizes``, ``cubic``,
  ``coordinate_transformation_mode`` (with ``tf_half_pixel_for_nn``), ``nearest_mode``,
  ``cubic_coeff_a``, ``exclude_outside``, ``extrapolation_value``.
* Resize-13: ``roi`` and ``scales`` optional; no ``tf_half_pixel_for_nn``.
* Resize-18: ``axes``, ``keep_aspect_ratio_policy``, ``antialias``.
* Resize-19: ``half_pixel_symmetric``.

The output length of an axis is ``floor(in * scale)`` given scales, or the given size (with
``keep_aspect_ratio_policy``: one scale for every listed axis, ``round_half_up(scale * in)``).
A float scale stands for the simplest fraction it is the rounding of (0.6f is 3/5, see
:func:`intended`); scales derived from sizes are exact ratios.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from ..builder import Builder
from ..model import OnnxNode
from ..registry import converter
from .common import const_ints

_COORDINATE_MODES = {
    11: ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
         "tf_half_pixel_for_nn", "tf_crop_and_resize"),
    13: ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
         "tf_crop_and_resize"),
    19: ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
         "asymmetric", "tf_crop_and_resize"),
}
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_LIMIT = 1 << 62
"""Largest numerator or denominator of an exact scale (they travel as JSON integers)."""


def _ratio(n: OnnxNode, value: Fraction, what: str) -> tuple[int, int]:
    if value <= 0:
        raise n.fail(f"{what} must be positive, given {float(value)}")
    if value.numerator >= _LIMIT or value.denominator >= _LIMIT:
        raise n.fail(f"{what} {float(value)!r} is too small or too large to resize by")
    return value.numerator, value.denominator


def intended(value: float, dtype: str = "float32") -> Fraction:
    """The simplest fraction that ``value`` (a float of ``dtype``) is the rounding of.

    A float scale is the nearest binary value to what the model's author wrote: 0.6 is stored
    as 0.60000002384..., and resizing 5 pixels by it in exact binary arithmetic would map
    output 3 to source 4.9999998 instead of 5, and floor to the wrong pixel. The written value
    (3/5) is recovered as the fraction of smallest denominator that rounds to the same float.
    """
    exact = Fraction(value)
    kind = np.dtype(dtype).type
    limit = 1
    while limit < exact.denominator:
        guess = exact.limit_denominator(limit)
        if kind(float(guess)) == kind(value):
            return guess
        limit *= 2
    return exact


def _from_scales(n: OnnxNode, shape: tuple[int, ...], scales: list[float], dtype: str
                 ) -> tuple[list[int], list[tuple[int, int]]]:
    """Output shape and exact scales from one float scale (of ``dtype``) per axis."""
    if len(scales) != len(shape):
        raise n.fail(f"scales has {len(scales)} values for a {len(shape)}-D input")
    exact = []
    for axis, value in enumerate(scales):
        if not math.isfinite(value):
            raise n.fail(f"scale {value} of axis {axis} is not finite")
        exact.append(_ratio(n, intended(value, dtype), f"scale of axis {axis}"))
    size = [int(Fraction(num, den) * d // 1) for (num, den), d in zip(exact, shape, strict=True)]
    return size, exact


def _emit(b: Builder, n: OnnxNode, size: list[int], scales: list[tuple[int, int]] | None,
          attrs: dict[str, Any]) -> list[str]:
    return b.op("resize", [n.inputs[0]], {"size": size, "scales": scales, **attrs})


# --------------------------------------------------------------------------------------------
# Upsample-7/9 and Resize-10


def _legacy_mode(n: OnnxNode) -> str:
    mode = n.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise n.fail(f"mode {mode!r} is not supported by {n.op_type}-{n.opset} (nearest, "
                     "linear)")
    return str(mode)


def _legacy(b: Builder, n: OnnxNode, scales: list[float], dtype: str, at_least_one: bool
            ) -> list[str]:
    mode = _legacy_mode(n)
    if at_least_one and any(s < 1 for s in scales):
        raise n.fail(f"Upsample scales must be >= 1, given {scales}")
    size, exact = _from_scales(n, b.shape(n.inputs[0]), scales, dtype)
    return _emit(b, n, size, exact, {"mode": mode, "coordinate_transformation_mode":
                                     "asymmetric", "nearest_mode": "simple"})


@converter("Upsample", until=8)
def upsample_7(b: Builder, n: OnnxNode) -> list[str]:
    """Upsample-7: scales attribute."""
    return _legacy(b, n, [float(s) for s in n.attr("scales")], "float32", True)


@converter("Upsample", since=9, until=9)
def upsample_9(b: Builder, n: OnnxNode) -> list[str]:
    """Upsample-9: scales input."""
    scales = [float(s) for s in np.asarray(b.constant_value(n.inputs[1], "scales")).ravel()]
    return _legacy(b, n, scales, b.dtype(n.inputs[1]), True)


@converter("Resize", since=10, until=10)
def resize_10(b: Builder, n: OnnxNode) -> list[str]:
    """Resize-10: scales input, Upsample's semantics with scales < 1 allowed."""
    scales = [float(s) for s in np.asarray(b.constant_value(n.inputs[1], "scales")).ravel()]
    return _legacy(b, n, scales, b.dtype(n.inputs[1]), False)


# --------------------------------------------------------------------------------------------
# Resize-11 and later


def _choice(n: OnnxNode, key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = str(n.attr(key, default))
    if value not in allowed:
        raise n.fail(f"{key} {value!r} is not supported by {n.op_type}-{n.opset} (supported: "
                     f"{', '.join(allowed)})")
    return value


def _flag(n: OnnxNode, key: str) -> bool:
    value = n.attr(key, 0)
    if value not in (0, 1):
        raise n.fail(f"{key} must be 0 or 1, given {value}")
    return bool(value)


def _optional_values(b: Builder, n: OnnxNode, index: int, what: str) -> list[float] | None:
    """Input ``index`` as floats; None when omitted or empty."""
    name = n.input(index)
    if name is None:
        return None
    values = np.asarray(b.constant_value(name, what)).ravel()
    return [float(v) for v in values] if values.size else None


def _resize(b: Builder, n: OnnxNode, coordinate_modes: tuple[str, ...], opset18: bool
            ) -> list[str]:
    data = n.inputs[0]
    shape = b.shape(data)
    rank = len(shape)
    mode = _choice(n, "mode", "nearest", ("nearest", "linear", "cubic"))
    coordinate = _choice(n, "coordinate_transformation_mode", "half_pixel", coordinate_modes)
    attrs: dict[str, Any] = {
        "mode": mode, "coordinate_transformation_mode": coordinate,
        "nearest_mode": _choice(n, "nearest_mode", "round_prefer_floor", _NEAREST_MODES),
        "cubic_coeff_a": float(n.attr("cubic_coeff_a", -0.75)),
        "exclude_outside": _flag(n, "exclude_outside"),
        "extrapolation_value": float(n.attr("extrapolation_value", 0.0)),
        "antialias": _flag(n, "antialias") if opset18 else False,
    }
    axes = list(range(rank))
    policy = "stretch"
    if opset18:
        given = [int(a) for a in n.attr("axes", [])] or axes
        for a in given:
            if not -rank <= a < rank:
                raise n.fail(f"axis {a} is out of range for a {rank}-D input")
        axes = [a % rank for a in given]
        if len(set(axes)) != len(axes):
            raise n.fail(f"axes {given} name an axis more than once")
        policy = _choice(n, "keep_aspect_ratio_policy", "stretch",
                         ("stretch", "not_larger", "not_smaller"))
    if coordinate == "tf_crop_and_resize":
        roi = _optional_values(b, n, 1, "roi")
        if roi is None or len(roi) != 2 * len(axes):
            raise n.fail(f"tf_crop_and_resize needs a roi of {2 * len(axes)} values, given "
                         f"{roi}")
        full = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            full[a], full[rank + a] = roi[i], roi[len(axes) + i]
        attrs["roi"] = full
    scales = _optional_values(b, n, 2, "scales")
    sizes_name = n.input(3)
    sizes = None
    if sizes_name is not None:
        sizes = const_ints(b, sizes_name, "sizes") or None  # traced where they follow shapes
    if (scales is None) == (sizes is None):
        raise n.fail("exactly one of scales and sizes must be given, "
                     f"given {'both' if scales is not None else 'neither'}")
    if scales is not None:
        if len(scales) != len(axes):
            raise n.fail(f"scales has {len(scales)} values for {len(axes)} axes")
        full_scales = [1.0] * rank
        for i, a in enumerate(axes):
            full_scales[a] = scales[i]
        size, exact = _from_scales(n, shape, full_scales, b.dtype(n.inputs[2]))
        return _emit(b, n, size, exact, attrs)
    assert sizes is not None
    if len(sizes) != len(axes):
        raise n.fail(f"sizes has {len(sizes)} values for {len(axes)} axes")
    if any(s < 0 for s in sizes):
        raise n.fail(f"sizes must not be negative, given {sizes}")
    size = list(shape)
    for i, a in enumerate(axes):
        size[a] = sizes[i]
    if policy == "stretch":
        return _emit(b, n, size, None, attrs)
    if any(shape[a] == 0 for a in axes):
        raise n.fail(f"keep_aspect_ratio_policy {policy!r} needs non-empty axes, given input "
                     f"shape {list(shape)}")
    ratios = [Fraction(size[a], shape[a]) for a in axes]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    exact_scales = [(1, 1)] * rank
    for a in axes:
        size[a] = int(scale * shape[a] + Fraction(1, 2))  # round half up
        exact_scales[a] = _ratio(n, scale, "scale")
    return _emit(b, n, size, exact_scales, attrs)


@converter("Resize", since=11, until=12)
def resize_11(b: Builder, n: OnnxNode) -> list[str]:
    return _resize(b, n, _COORDINATE_MODES[11], False)


@converter("Resize", since=13, until=17)
def resize_13(b: Builder, n: OnnxNode) -> list[str]:
    return _resize(b, n, _COORDINATE_MODES[13], False)


@converter("Resize", since=18, until=18)
def resize_18(b: Builder, n: OnnxNode) -> list[str]:
    return _resize(b, n, _COORDINATE_MODES[13], True)


@converter("Resize", since=19)
def resize_19(b: Builder, n: OnnxNode) -> list[str]:
    return _resize(b, n, _COORDINATE_MODES[19], True)
