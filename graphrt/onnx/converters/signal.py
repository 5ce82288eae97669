"""ONNX converters: signal processing (``DFT``, ``STFT``, ``HannWindow``, ``HammingWindow``,
``BlackmanWindow``, ``MelWeightMatrix``).

Complex values are real tensors with a trailing dimension of 2 (real, imaginary), as ONNX
stores them, so ``DFT`` and ``STFT`` become the standard ops ``dft`` and ``stft`` over plain
float tensors. Their sizes (``dft_length``, DFT's ``axis`` input from opset 20, STFT's
``frame_step`` and ``frame_length``) decide output shapes and must be constants. The windows
and the mel weight matrix depend on nothing but such sizes: they become constants computed at
conversion (counted against the fold budget), in float64 and cast once to
``output_datatype``, with the formulas of ONNX's reference implementation.

Example:
    >>> import numpy as np
    >>> from onnx import TensorProto, helper, numpy_helper
    >>> import graphrt
    >>> node = helper.make_node("HannWindow", ["size"], ["w"], periodic=0)
    >>> graph = helper.make_graph(
    ...     [node], "g", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, [5])],
    ...     [numpy_helper.from_array(np.array(5, np.int64), "size")])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    >>> (w,) = graphrt.from_onnx(model).create(graphrt.cpu(0))()
    >>> np.round(w, 3).tolist()
    [0.0, 0.5, 1.0, 0.5, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ...schema.dtypes import parse_dtype
from ..builder import Builder
from ..model import OnnxNode, dtype_name
from ..registry import ConvertFn, converter

__all__: list[str] = []

Array = np.ndarray[Any, Any]


# ---------------------------------------------------------------------------------------------
# helpers


def _flag(n: OnnxNode, key: str, default: int) -> bool:
    value = n.attr(key, default)
    if value not in (0, 1):
        raise n.fail(f"{key} must be 0 or 1, given {value}")
    return bool(value)


def _scalar(b: Builder, n: OnnxNode, index: int, what: str, kinds: str) -> Array:
    """Constant input ``index`` as a 0-d array: one element of a dtype of kind ``kinds``
    (``"iu"`` integers, ``"f"`` floats, bfloat16 included)."""
    name = n.input(index)
    if name is None:
        raise n.fail(f"input {index} ({what}) is required")
    value = np.asarray(b.constant_value(name, what))
    kind = "f" if value.dtype.name == "bfloat16" else value.dtype.kind
    if kind not in kinds:
        expected = "an integer" if kinds == "iu" else "a float"
        raise n.fail(f"{what} must be {expected} tensor, given {value.dtype}")
    if value.size != 1:
        raise n.fail(f"{what} must be a scalar, given shape {list(value.shape)}")
    return value.reshape(())


def _int(b: Builder, n: OnnxNode, index: int, what: str, least: int) -> int:
    """Constant integer scalar input ``index``, at least ``least``."""
    value = int(_scalar(b, n, index, what, "iu"))
    if value < least:
        raise n.fail(f"{what} must be >= {least}, given {value}")
    return value


def _output_dtype(n: OnnxNode) -> str:
    """The dtype of attribute ``output_datatype`` (default FLOAT): a number type."""
    dtype = dtype_name(int(n.attr("output_datatype", 1)), f"{n.label}: output_datatype")
    if dtype == "bool":
        raise n.fail("output_datatype must be a number type, given BOOL")
    return dtype


# ---------------------------------------------------------------------------------------------
# DFT, STFT


def _dft(since: int) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        inverse, onesided = _flag(n, "inverse", 0), _flag(n, "onesided", 0)
        length = None if n.input(1) is None else _int(b, n, 1, "dft_length", 1)
        if since >= 20:
            axis = -2 if n.input(2) is None else int(_scalar(b, n, 2, "axis", "iu"))
        else:
            axis = int(n.attr("axis", 1))
        return b.op("dft", [n.inputs[0]], {"axis": axis, "length": length,
                                           "inverse": inverse, "onesided": onesided})

    return convert


converter("DFT", since=17, until=19)(_dft(17))
converter("DFT", since=20)(_dft(20))


@converter("STFT", since=17)
def _stft(b: Builder, n: OnnxNode) -> list[str]:
    signal = n.inputs[0]
    shape = b.shape(signal)
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise n.fail(f"the signal must be [batch, length, 1 (real) or 2 (complex)], given "
                     f"shape {list(shape)}")
    step = _int(b, n, 1, "frame_step", 1)
    window, given = n.input(2), n.input(3)
    frame_length = None if given is None else _int(b, n, 3, "frame_length", 1)
    if window is not None:
        window_shape = b.shape(window)
        if len(window_shape) != 1:
            raise n.fail(f"the window must be 1-D, given shape {list(window_shape)}")
        if frame_length is not None and frame_length != window_shape[0]:
            raise n.fail(f"the window has {window_shape[0]} weights but frame_length is "
                         f"{frame_length}; they must be equal")
        frame_length = window_shape[0]
    elif frame_length is None:
        frame_length = shape[1]
    if not 1 <= frame_length <= shape[1]:
        raise n.fail(f"a frame of {frame_length} samples does not fit the signal of "
                     f"{shape[1]} samples")
    if window is None:  # rectangular
        window = b.filled(1, (frame_length,), b.dtype(signal))
    return b.op("stft", [signal, window], {"frame_step": step, "frame_length": frame_length,
                                           "onesided": _flag(n, "onesided", 1)})


# ---------------------------------------------------------------------------------------------
# windows


def _hann(i: Array, span: int) -> Array:
    return np.asarray(np.sin(i * np.pi / span) ** 2)


def _hamming(i: Array, span: int) -> Array:
    alpha = 25.0 / 46.0
    return np.asarray(alpha - np.cos(i * np.pi * 2 / span) * (1 - alpha))


def _blackman(i: Array, span: int) -> Array:
    y = np.cos((i * (np.pi * 2)) / span) * -0.5
    y += np.cos((i * (np.pi * 4)) / span) * 0.08
    return np.asarray(y + 0.42)


def _window_table(formula: Callable[[Array, int], Array], size: int, periodic: bool,
                  dtype: str) -> Array:
    """``formula`` over ``0..size-1`` in float64 (a periodic window spans ``size``, a
    symmetric one ``size - 1``: NaN for a symmetric window of one point, as ONNX's reference
    and ONNX Runtime give), cast once to ``dtype``."""
    with np.errstate(all="ignore"):
        values = formula(np.arange(size, dtype=np.float64), size if periodic else size - 1)
        return values.astype(parse_dtype(dtype).numpy)


def _window(formula: Callable[[Array, int], Array]) -> ConvertFn:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        size = _int(b, n, 0, "size", 1)
        periodic = _flag(n, "periodic", 1)
        dtype = _output_dtype(n)
        return [b.computed((size,), dtype, f"the {n.op_type} of size {size}",
                           partial(_window_table, formula, size, periodic, dtype))]

    return convert


converter("HannWindow", since=17)(_window(_hann))
converter("HammingWindow", since=17)(_window(_hamming))
converter("BlackmanWindow", since=17)(_window(_blackman))


# ---------------------------------------------------------------------------------------------
# MelWeightMatrix


def _mel_edges(n: OnnxNode, mel_bins: int, dft_length: Array, sample_rate: Array,
               lower: Array, upper: Array, bins: int) -> Array:
    """The spectrogram bin of each triangle's edges and centres (``mel_bins + 2``), computed
    as ONNX's reference does, in the dtypes of the inputs (the result is floored to bins, so
    the same arithmetic gives the same bins).

    Raises:
        ConversionError: a bin is not finite or outside ``[0, bins)``.
    """
    points = np.arange(0, mel_bins + 2)
    with np.errstate(all="ignore"):
        low_mel = 2595 * np.log1p(lower[()] / 700) / np.log(10)
        high_mel = 2595 * np.log1p(upper[()] / 700) / np.log(10)
        step = (high_mel - low_mel) / points.shape[0]
        hertz = 700 * np.expm1((points * step + low_mel) / 2595 * np.log(10))
        where = ((dft_length[()] + 1) * hertz) // sample_rate[()]
    where = np.asarray(where, np.float64)
    if not np.isfinite(where).all():
        raise n.fail(f"lower_edge_hertz {lower[()]} and upper_edge_hertz {upper[()]} give "
                     "no finite mel band edges")
    edges = where.astype(np.int64)
    low, high = int(edges.min()), int(edges.max())
    if low < 0 or high >= bins:
        raise n.fail(f"the mel bands of [{lower[()]}, {upper[()]}] Hz reach spectrogram bins "
                     f"[{low}, {high}], outside the {bins} bins of a DFT of "
                     f"{int(dft_length)} points at {int(sample_rate)} Hz (bins 0 to "
                     f"{bins - 1})")
    return edges


def _mel_table(n: OnnxNode, mel_bins: int, dft_length: Array, sample_rate: Array,
               lower: Array, upper: Array, dtype: str) -> Array:
    """The ``[dft_length // 2 + 1, mel_bins]`` triangular filter bank of ONNX's reference
    (each triangle rises from its left edge to 1 at its centre and falls to its right edge),
    in float64, cast once to ``dtype``."""
    bins = int(dft_length) // 2 + 1
    edges = _mel_edges(n, mel_bins, dft_length, sample_rate, lower, upper, bins)
    left, centre, right = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(bins, dtype=np.int64)[:, None]
    rising = (centre > left) & (j >= left) & (j <= centre)
    falling = (right > centre) & (j >= centre) & (j < right)
    table = np.where(rising, (j - left) / np.maximum(centre - left, 1), 0.0)
    point = np.flatnonzero(centre == left)  # a triangle with no rising side: 1 at its centre
    table[centre[point], point] = 1.0
    table = np.where(falling, (right - j) / np.maximum(right - centre, 1), table)
    return table.astype(parse_dtype(dtype).numpy)


@converter("MelWeightMatrix", since=17)
def _mel_weight_matrix(b: Builder, n: OnnxNode) -> list[str]:
    mel_bins = _int(b, n, 0, "num_mel_bins", 1)
    dft_length = _scalar(b, n, 1, "dft_length", "iu")
    sample_rate = _scalar(b, n, 2, "sample_rate", "iu")
    lower = _scalar(b, n, 3, "lower_edge_hertz", "f")
    upper = _scalar(b, n, 4, "upper_edge_hertz", "f")
    if int(dft_length) < 1:
        raise n.fail(f"dft_length must be >= 1, given {int(dft_length)}")
    if int(sample_rate) < 1:
        raise n.fail(f"sample_rate must be >= 1, given {int(sample_rate)}")
    dtype = _output_dtype(n)
    shape = (int(dft_length) // 2 + 1, mel_bins)
    return [b.computed(shape, dtype, "the mel weight matrix",
                       partial(_mel_table, n, mel_bins, dft_length, sample_rate, lower, upper,
                               dtype))]
