"""Standard ops: signal processing (``dft``, ``stft``), over complex numbers stored as a
trailing dimension of size 2 (real, imaginary), as ONNX stores them: graphrt has no complex
dtype, and needs none.

* ``dft``: the discrete Fourier transform of ``x`` (``[..., 1]`` real or ``[..., 2]``
  complex) along signal axis ``axis`` (any axis but the last), over ``length`` points (the
  axis is zero-padded or truncated to it; None: the axis' size, or ``2 * (size - 1)`` for an
  inverse one-sided transform), as ONNX ``DFT``:

  ========  =========  ====================  ==========================================
  inverse   onesided   input                 output along ``axis``, last dim
  ========  =========  ====================  ==========================================
  0         0          real or complex       ``length`` bins, 2 (complex)
  0         1          real                  ``length // 2 + 1`` bins, 2 (RFFT)
  1         0          real or complex       ``length`` samples, 2 (divided by length)
  1         1          complex (one-sided)   ``length`` samples, 1 (real: IRFFT)
  ========  =========  ====================  ==========================================

* ``stft``: ONNX ``STFT``: ``signal`` ``[batch, length, 1 or 2]`` cut into
  ``1 + (length - frame_length) // frame_step`` frames of ``frame_length`` samples, each
  multiplied by ``window`` (``[frame_length]``) and transformed: ``[batch, frames, bins, 2]``
  with ``frame_length // 2 + 1`` bins when ``onesided`` (the first bins of the full
  transform, also for a complex signal, as ONNX's reference and ONNX Runtime give), else
  ``frame_length``.

Both run the device namespace's FFT (``numpy.fft``, ``cupy.fft``): float32 and float64 in
their own precision, float16 and bfloat16 in float32, with the result cast once.

Example:
    >>> import numpy as np
    >>> from graphrt.ops import TensorType, get_op
    >>> dft = get_op("dft")
    >>> attrs = dft.attrs(axis=1)
    >>> x = np.array([[[1.0], [2.0], [3.0], [4.0]]], "float32")       # [1, 4, 1]: real
    >>> dft.infer([TensorType(x.shape, "float32")], attrs, [None])
    [TensorType(shape=(1, 4, 2), dtype='float32')]
    >>> y = np.empty((1, 4, 2), "float32")
    >>> dft.compute(np, [x], [y], attrs)
    >>> y[0].tolist()                                                   # (real, imaginary)
    [[10.0, 0.0], [-2.0, 2.0], [-2.0, 0.0], [-2.0, -2.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from .base import Attrs, OpDef, OpError, TensorType, accumulator, register_op

__all__ = ["DftAttrs", "StftAttrs", "dft_length"]

_FLOATS = ("float16", "float32", "float64", "bfloat16")
PosInt = Annotated[int, Field(ge=1)]


class DftAttrs(Attrs):
    """``dft``: the signal axis (negative counts from the back; never the last, complex,
    axis), the number of points (None: the default of ONNX ``DFT``), and the direction and
    one-sidedness."""

    axis: int
    length: PosInt | None = None
    inverse: bool = False
    onesided: bool = False


class StftAttrs(Attrs):
    """``stft``: samples between frames, samples per frame (the DFT size, the window's
    length), and whether only the ``frame_length // 2 + 1`` first bins are kept."""

    frame_step: PosInt
    frame_length: PosInt
    onesided: bool = True


def _show(t: TensorType) -> str:
    return f"{t.dtype}{list(t.shape)}"


def _check_complex(x: TensorType, what: str, op: str) -> None:
    """``x`` is a float tensor whose last dim holds a real (1) or complex (2) value."""
    if x.dtype not in _FLOATS:
        raise OpError(f"{op}: {what} must be one of {', '.join(_FLOATS)}, given {x.dtype}")
    if x.ndim < 2 or x.shape[-1] not in (1, 2):
        raise OpError(f"{op}: {what} {_show(x)} must have a signal axis and a last dim of 1 "
                      "(real) or 2 (complex: real, imaginary)")


def dft_length(size: int, length: int | None, inverse: bool, onesided: bool) -> int:
    """The number of points of a DFT along an axis of ``size``: ``length``, or ONNX's default
    (``size``; ``2 * (size - 1)`` for an inverse one-sided transform).

    Raises:
        OpError: the number is below 1.

    Example:
        >>> dft_length(6, None, inverse=True, onesided=True)
        10
    """
    points = length if length is not None else (
        2 * (size - 1) if inverse and onesided else size)
    if points < 1:
        raise OpError(f"dft: the transform needs at least 1 point, given {points} (axis of "
                      f"size {size}{'' if length is not None else ', default length'})")
    return points


# --------------------------------------------------------------------------------------------
# dft


def _dft_axis(x: TensorType, axis: int) -> int:
    """``axis`` in ``[-r, -2]`` or ``[0, r - 2]`` as a non-negative axis (the last is complex)."""
    r = x.ndim
    if not (-r <= axis <= -2 or 0 <= axis <= r - 2):
        raise OpError(f"dft: axis {axis} is out of range for input {_show(x)}: expected a "
                      f"signal axis in [{-r}, -2] or [0, {r - 2}] (the last dim holds the "
                      "real and imaginary parts)")
    return axis % r


def _dft_infer(types: Sequence[TensorType], attrs: DftAttrs, data: Sequence[Any]
               ) -> list[TensorType]:
    if len(types) != 1:
        raise OpError(f"dft: expected 1 input, given {len(types)}")
    (x,) = types
    _check_complex(x, "the input", "dft")
    axis = _dft_axis(x, attrs.axis)
    complex_input = x.shape[-1] == 2
    if attrs.onesided and not attrs.inverse and complex_input:
        raise OpError(f"dft: a one-sided forward transform (RFFT) takes a real input (last dim "
                      f"1), given {_show(x)}")
    if attrs.onesided and attrs.inverse and not complex_input:
        raise OpError(f"dft: a one-sided inverse transform (IRFFT) takes a complex input (last "
                      f"dim 2), given {_show(x)}")
    points = dft_length(x.shape[axis], attrs.length, attrs.inverse, attrs.onesided)
    shape = list(x.shape)
    shape[axis] = points // 2 + 1 if attrs.onesided and not attrs.inverse else points
    shape[-1] = 1 if attrs.onesided and attrs.inverse else 2
    return [TensorType(tuple(shape), x.dtype)]


def _values(xp: Any, x: Any) -> Any:
    """The values of ``x`` (``[..., 1]`` or ``[..., 2]``) without their last dim: real, or
    complex in the precision of ``x`` (computed in float32 for float16 and bfloat16)."""
    work = accumulator(x.dtype)
    if x.dtype != work:
        x = x.astype(work)
    if x.shape[-1] == 1:
        return x[..., 0]
    return x[..., 0] + 1j * x[..., 1]


def _store(out: Any, values: Any) -> None:
    """Write ``values`` (complex, or real for a last dim of 1) into ``out``, cast once."""
    out[..., 0] = values.real
    if out.shape[-1] == 2:
        out[..., 1] = values.imag


def _transform(xp: Any, values: Any, points: int, axis: int, inverse: bool, onesided: bool
               ) -> Any:
    """The DFT of ``values`` (real or complex, without the last dim) along ``axis``."""
    if inverse and onesided:
        return xp.fft.irfft(values, n=points, axis=axis)
    if inverse:
        return xp.fft.ifft(values, n=points, axis=axis)
    if onesided:
        return xp.fft.rfft(values, n=points, axis=axis)
    return xp.fft.fft(values, n=points, axis=axis)


def _dft_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                 attrs: DftAttrs) -> None:
    x, out = inputs[0], outputs[0]
    if out.size == 0:
        return
    if x.size == 0:  # an empty axis zero-padded: the transform of zeros
        out[...] = 0
        return
    axis = attrs.axis % x.ndim  # checked by the shape function
    points = dft_length(x.shape[axis], attrs.length, attrs.inverse, attrs.onesided)
    _store(out, _transform(xp, _values(xp, x), points, axis, attrs.inverse, attrs.onesided))


register_op(OpDef(name="dft", attrs=DftAttrs, arity=1, infer=_dft_infer,
                  compute=_dft_compute))


# --------------------------------------------------------------------------------------------
# stft


def _frames(length: int, attrs: StftAttrs) -> int:
    return 1 + (length - attrs.frame_length) // attrs.frame_step


def _stft_infer(types: Sequence[TensorType], attrs: StftAttrs, data: Sequence[Any]
                ) -> list[TensorType]:
    if len(types) != 2:
        raise OpError(f"stft: expected 2 inputs (signal, window), given {len(types)}")
    signal, window = types
    _check_complex(signal, "the signal", "stft")
    if signal.ndim != 3:
        raise OpError(f"stft: the signal must be [batch, length, 1 or 2], given "
                      f"{_show(signal)}")
    if window.dtype != signal.dtype or window.shape != (attrs.frame_length,):
        raise OpError(f"stft: the window must be {signal.dtype}[{attrs.frame_length}] (one "
                      f"weight per sample of a frame), given {_show(window)}")
    length = signal.shape[1]
    if attrs.frame_length > length:
        raise OpError(f"stft: a frame of {attrs.frame_length} samples does not fit the signal "
                      f"of {length} samples")
    bins = attrs.frame_length // 2 + 1 if attrs.onesided else attrs.frame_length
    return [TensorType((signal.shape[0], _frames(length, attrs), bins, 2), signal.dtype)]


def _stft_compute(xp: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                  attrs: StftAttrs) -> None:
    signal, window = inputs
    out = outputs[0]
    if out.size == 0:
        return
    work = accumulator(signal.dtype)
    frames = _frames(signal.shape[1], attrs)
    where = (xp.arange(frames)[:, None] * attrs.frame_step
             + xp.arange(attrs.frame_length)[None, :])
    cut = signal[:, where, :]  # [batch, frames, frame_length, 1 or 2]
    if cut.dtype != work:
        cut = cut.astype(work)
    weights = window.astype(work) if window.dtype != work else window
    values = _values(xp, cut * weights[:, None])
    bins = out.shape[2]
    if attrs.onesided and signal.shape[-1] == 1:
        spectrum = xp.fft.rfft(values, axis=2)
    else:
        spectrum = xp.fft.fft(values, axis=2)[:, :, :bins]
    _store(out, spectrum)


register_op(OpDef(name="stft", attrs=StftAttrs, arity=2, infer=_stft_infer,
                  compute=_stft_compute))
