"""Standard ops: elementwise arithmetic, comparisons, unary math, casts, reductions, softmax.

Every op is written once against the array namespace ``xp`` (numpy on cpu and sim, cupy on
cuda) using only functions that behave the same in both, writing into the preallocated outputs.
Temporaries are always made by ``xp`` functions from the inputs (never host arrays), so the
same code runs unchanged on every device.

Dtype rules (checked by each op's shape function, which raises :class:`OpError`):

* binary ops take inputs of one dtype *family* (float, signed int, unsigned int or bool); the
  output has their numpy promotion (:func:`result_dtype`) and their broadcast shape.
  Mixing families (``float32`` with ``int32``) is refused: cast one input first.
* ``divide``, ``mean``, the transcendental ops, ``softmax`` and friends need float inputs.

Integer semantics: arithmetic wraps around; ``floor_divide`` and ``mod`` by zero give 0 (as
numpy and cupy do; ONNX Runtime refuses); ``power`` with a negative exponent gives what ONNX
Runtime's ``Pow`` gives (see :func:`_power`) instead of raising. ``sum`` and ``mean`` of
float16 accumulate in float32 and round once.

Ops with an ``elementwise`` expression can be fused into one CUDA kernel; the expressions are
written to compile for every dtype the op accepts. Ops whose expression would depend on an
attribute value, or for which no single C expression matches numpy for every accepted dtype
(``floor_divide``, ``mod``, ``power``), have none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .base import (
    Attrs,
    Direct,
    OpDef,
    OpError,
    TensorType,
    accumulator,
    broadcast,
    normalize_axis,
    register_op,
    result_dtype,
)
from .reductions import row_sums

__all__ = [
    "ArgmaxAttrs",
    "BiasAddAttrs",
    "CastAttrs",
    "ClipAttrs",
    "GeluAttrs",
    "LeakyReluAttrs",
    "NoAttrs",
    "ReduceAttrs",
    "SoftmaxAttrs",
]

# --------------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------------


class NoAttrs(Attrs):
    """Attributes of an op that takes none."""


class LeakyReluAttrs(Attrs):
    """``leaky_relu``: the slope for negative inputs."""

    alpha: float = 0.01


class ClipAttrs(Attrs):
    """``clip``: the bounds (``a_min <= a_max``)."""

    a_min: float
    a_max: float


class GeluAttrs(Attrs):
    """``gelu``: exact (erf) form, or the tanh approximation when ``approximate``."""

    approximate: bool = False


class CastAttrs(Attrs):
    """``cast``: the target dtype's name (``"float32"``, ``"int8"``, ``"bool"``, ...)."""

    dtype: str


class BiasAddAttrs(Attrs):
    """``bias_add``: the data axis the 1-D bias runs along."""

    axis: int = 1


class ReduceAttrs(Attrs):
    """``sum``/``mean``/``max``/``min``: the axes to reduce (None: all) and whether to keep them
    as length-1 dimensions."""

    axis: int | list[int] | None = None
    keepdims: bool = False


class ArgmaxAttrs(Attrs):
    """``argmax``: the axis to search and whether to keep it as a length-1 dimension."""

    axis: int
    keepdims: bool = False


class SoftmaxAttrs(Attrs):
    """``softmax``/``log_softmax``: the axis to normalize over."""

    axis: int = -1


# --------------------------------------------------------------------------------------------
# Dtype families and shared checks
# --------------------------------------------------------------------------------------------

FLOAT, INT, UINT, BOOL = "float", "int", "uint", "bool"

_FAMILY: dict[str, str] = {
    "float16": FLOAT, "float32": FLOAT, "float64": FLOAT,
    "int8": INT, "int16": INT, "int32": INT, "int64": INT,
    "uint8": UINT, "uint16": UINT, "uint32": UINT, "uint64": UINT,
    "bool": BOOL,
}
"""The dtypes these ops support, by family."""

CAST_DTYPES: tuple[str, ...] = tuple(_FAMILY)
"""The dtypes ``cast`` converts between."""

NUMERIC = frozenset({FLOAT, INT, UINT})
SIGNED = frozenset({FLOAT, INT})
FLOATS = frozenset({FLOAT})
BOOLS = frozenset({BOOL})
ANY = frozenset({FLOAT, INT, UINT, BOOL})

_WHAT = {NUMERIC: "int, uint or float", SIGNED: "int or float", FLOATS: "float",
         BOOLS: "bool", ANY: "bool, int, uint or float"}

Types = Sequence[TensorType]


def _arity(name: str, types: Types, n: int) -> None:
    if len(types) != n:
        raise OpError(f"{name} takes {n} input(s), got {len(types)}")


def _family(name: str, index: int, tensor: TensorType, allowed: frozenset[str]) -> str:
    """The family of input ``index``; refuse dtypes outside ``allowed``."""
    family = _FAMILY.get(tensor.dtype)
    if family is None or family not in allowed:
        raise OpError(f"{name} expects {_WHAT[allowed]} input(s), but input {index} is "
                      f"{tensor.dtype}")
    return family


def _common_dtype(name: str, types: Types, allowed: frozenset[str],
                  indices: Sequence[int] | None = None) -> str:
    """The promoted dtype of ``types`` (inputs ``indices``), which must share one family."""
    indices = list(range(len(types))) if indices is None else list(indices)
    families = [_family(name, i, t, allowed) for i, t in zip(indices, types, strict=True)]
    for i, t, family in zip(indices[1:], types[1:], families[1:], strict=True):
        if family != families[0]:
            raise OpError(f"{name} needs inputs of one dtype family, but input {indices[0]} is "
                          f"{types[0].dtype} and input {i} is {t.dtype}; cast one of them first")
    return result_dtype(*(t.dtype for t in types))


def _broadcast(name: str, types: Types) -> tuple[int, ...]:
    try:
        return broadcast(*(t.shape for t in types))
    except OpError as err:
        raise OpError(f"{name}: input {err}") from None


def _axis(name: str, axis: int, ndim: int) -> int:
    try:
        return normalize_axis(axis, ndim)
    except OpError as err:
        raise OpError(f"{name}: {err}") from None


def _register(name: str, attrs: type[Attrs], arity: int,
              infer: Callable[[Types, Any], list[TensorType]],
              compute: Callable[[Any, Sequence[Any], Sequence[Any], Any], None],
              elementwise: str | None = None, direct: Direct | None = None) -> None:
    """Register an op whose shape function never needs input values."""
    def shape_function(types: Types, attrs: Any, data: Sequence[Any]) -> list[TensorType]:
        _arity(name, types, arity)
        return infer(types, attrs)

    register_op(OpDef(name=name, attrs=attrs, arity=arity, infer=shape_function,
                      compute=compute, elementwise=elementwise, direct=direct))


# --------------------------------------------------------------------------------------------
# Binary ops: arithmetic, comparison, logical
# --------------------------------------------------------------------------------------------


_OUT_BY_KEYWORD = frozenset({"maximum", "minimum"})
"""numpy 2.4 deprecates a positional output for these two (it reads as a third input)."""


BinaryCompute = Callable[[Any, Any, Any, Any], None]
"""``compute(xp, a, b, out)`` of a binary op that is more than one array function."""


def _binary(name: str, function: str, allowed: frozenset[str], elementwise: str | None, *,
            boolean: bool = False, note: str = "", custom: BinaryCompute | None = None
            ) -> None:
    """A broadcasting binary op computed by ``xp.<function>`` (bool output when ``boolean``),
    or by ``custom``."""
    def infer(types: Types, attrs: Any) -> list[TensorType]:
        try:
            dtype = _common_dtype(name, types, allowed)
        except OpError as err:
            raise OpError(f"{err}{note}") from None
        return [TensorType(_broadcast(name, types), "bool" if boolean else dtype)]

    def compute(xp: Any, ins: Sequence[Any], outs: Sequence[Any], attrs: Any) -> None:
        if custom is not None:
            custom(xp, ins[0], ins[1], outs[0])
        else:
            getattr(xp, function)(ins[0], ins[1], out=outs[0])

    direct = None if custom is not None else Direct(
        function, out_keyword=function in _OUT_BY_KEYWORD)  # else ufunc(a, b, out)
    _register(name, NoAttrs, 2, infer, compute, elementwise, direct)


def _power(xp: Any, a: Any, b: Any, out: Any) -> None:
    """``a ** b``; for signed integers a negative exponent gives what ONNX Runtime's ``Pow``
    gives (``trunc(pow(double(a), double(b)))``): ``1 ** -n = 1``, ``(-1) ** -n = +-1`` by the
    parity of n, ``0 ** -n`` the dtype's minimum (C's conversion of inf on x86), 0 otherwise.
    """
    if out.dtype.kind != "i":
        xp.power(a, b, out=out)
        return
    negative = b < 0
    xp.power(a, xp.maximum(b, 0), out=out)  # numpy raises on a negative integer exponent
    xp.copyto(out, 0, where=negative)
    xp.copyto(out, 1, where=negative & ((a == 1) | ((a == -1) & ((b & 1) == 0))))
    xp.copyto(out, -1, where=negative & (a == -1) & ((b & 1) == 1))
    xp.copyto(out, out.dtype.type(_int_min(out.dtype)), where=negative & (a == 0))


def _int_min(dtype: Any) -> int:
    return -(1 << (int(dtype.itemsize) * 8 - 1))


# ``maximum``/``minimum`` propagate NaN from either side like numpy (``in0 != in0`` is NaN).
_binary("add", "add", NUMERIC, "in0 + in1")
_binary("subtract", "subtract", NUMERIC, "in0 - in1")
_binary("multiply", "multiply", NUMERIC, "in0 * in1")
_binary("divide", "divide", FLOATS, "in0 / in1", note=" (divide is true division; use "
        "floor_divide for integers)")
_binary("floor_divide", "floor_divide", NUMERIC, None)
_binary("power", "power", NUMERIC, None, custom=_power)
_binary("maximum", "maximum", NUMERIC, "(in0 > in1 || in0 != in0) ? in0 : in1")
_binary("minimum", "minimum", NUMERIC, "(in0 < in1 || in0 != in0) ? in0 : in1")
_binary("mod", "remainder", NUMERIC, None)
_binary("equal", "equal", ANY, "in0 == in1", boolean=True)
_binary("not_equal", "not_equal", ANY, "in0 != in1", boolean=True)
_binary("less", "less", ANY, "in0 < in1", boolean=True)
_binary("less_equal", "less_equal", ANY, "in0 <= in1", boolean=True)
_binary("greater", "greater", ANY, "in0 > in1", boolean=True)
_binary("greater_equal", "greater_equal", ANY, "in0 >= in1", boolean=True)
_binary("logical_and", "logical_and", BOOLS, "in0 && in1", boolean=True)
_binary("logical_or", "logical_or", BOOLS, "in0 || in1", boolean=True)


# --------------------------------------------------------------------------------------------
# erf (vectorized, W. J. Cody's rational Chebyshev approximations, SPECFUN CALERF)
# --------------------------------------------------------------------------------------------

_ERF_THRESH = 0.46875
_SQRPI = 5.6418958354775628695e-1  # 1/sqrt(pi)
_ERF_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
          3.20937758913846947e03, 1.85777706184603153e-1)
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
          2.84423683343917062e03)
_ERF_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
          2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
          2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_ERF_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
          1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
          3.43936767414372164e03, 1.23033935480374942e03)
_ERF_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
          1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_ERF_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
          6.05183413124413191e-2, 2.33520497626869185e-3)
_ERFC_CUTOFF = 30.0
"""erfc(30) ~ 2.6e-393 underflows to 0 in float64: larger |x| are clamped here (keeps inf
from turning into inf - inf = nan)."""


def _exp_neg_square(xp: Any, y: Any) -> Any:
    """``exp(-y*y)`` without the rounding error of ``y*y`` (Cody's split at 1/16ths)."""
    head = xp.trunc(y * 16.0) / 16.0
    tail = (y - head) * (y + head)
    return xp.exp(-(head * head)) * xp.exp(-tail)


def erf_erfc(xp: Any, x: Any) -> tuple[Any, Any]:
    """``(erf(x), erfc(x))`` of a float64 array, elementwise, to a few ulp.

    Cody's three intervals: ``|x| <= 0.46875`` (erf rational in ``x**2``), ``<= 4`` (erfc
    rational in ``|x|``) and beyond (erfc asymptotic rational in ``1/x**2``). Every branch is
    evaluated on inputs clamped into its own interval, so nothing overflows, and the results
    are selected with ``copyto(where=)``. NaN propagates; ``erf(+-inf) = +-1``,
    ``erfc(+inf) = 0``, ``erfc(-inf) = 2``.
    """
    shape = x.shape
    x = x.reshape(-1)  # numpy ufuncs on 0-d arrays return scalars, which copyto cannot fill
    y = xp.minimum(xp.abs(x), _ERFC_CUTOFF)  # NaN stays NaN
    # |x| <= 0.46875: erf(x) = x * A(x^2) / B(x^2)
    xs = xp.clip(x, -_ERF_THRESH, _ERF_THRESH)
    z = xs * xs
    num = _ERF_A[4] * z
    den = z.copy()
    for i in range(3):
        num = (num + _ERF_A[i]) * z
        den = (den + _ERF_B[i]) * z
    erf_small = xs * (num + _ERF_A[3]) / (den + _ERF_B[3])
    # 0.46875 < |x| <= 4: erfc(|x|) = exp(-x^2) C(|x|) / D(|x|)
    ym = xp.clip(y, _ERF_THRESH, 4.0)
    num = _ERF_C[8] * ym
    den = ym.copy()
    for i in range(7):
        num = (num + _ERF_C[i]) * ym
        den = (den + _ERF_D[i]) * ym
    erfc_abs = (num + _ERF_C[7]) / (den + _ERF_D[7]) * _exp_neg_square(xp, ym)
    # |x| > 4: erfc(|x|) = exp(-x^2) / |x| * (1/sqrt(pi) - P(1/x^2) / (x^2 Q(1/x^2)))
    yl = xp.maximum(y, 4.0)
    z = 1.0 / (yl * yl)
    num = _ERF_P[5] * z
    den = z.copy()
    for i in range(4):
        num = (num + _ERF_P[i]) * z
        den = (den + _ERF_Q[i]) * z
    erfc_large = (_SQRPI - z * (num + _ERF_P[4]) / (den + _ERF_Q[4])) / yl
    erfc_large *= _exp_neg_square(xp, yl)
    xp.copyto(erfc_abs, erfc_large, where=~(y <= 4.0))  # NaN takes this branch: stays NaN
    small = y <= _ERF_THRESH
    erf = (0.5 - erfc_abs) + 0.5
    xp.copysign(erf, x, out=erf)
    xp.copyto(erf, erf_small, where=small)
    erfc = erfc_abs.copy()
    xp.copyto(erfc, 2.0 - erfc_abs, where=x < 0)
    xp.copyto(erfc, 1.0 - erf_small, where=small)
    return erf.reshape(shape), erfc.reshape(shape)


def _as_float64(xp: Any, x: Any) -> Any:
    return x.astype(xp.float64, copy=False)


# --------------------------------------------------------------------------------------------
# Unary ops
# --------------------------------------------------------------------------------------------

UnaryCompute = Callable[[Any, Any, Any, Any], None]
"""``compute(xp, x, out, attrs)`` of a unary op."""


def _unary(name: str, allowed: frozenset[str], compute: UnaryCompute,
           elementwise: str | None, attrs: type[Attrs] = NoAttrs,
           check: Callable[[Any], None] | None = None,
           out_dtype: str | None = None) -> None:
    """A unary op: same shape out, same dtype (or ``out_dtype``)."""
    def infer(types: Types, parsed: Any) -> list[TensorType]:
        _family(name, 0, types[0], allowed)
        if check is not None:
            check(parsed)
        return [TensorType(types[0].shape, out_dtype or types[0].dtype)]

    def run(xp: Any, ins: Sequence[Any], outs: Sequence[Any], parsed: Any) -> None:
        compute(xp, ins[0], outs[0], parsed)

    found = _DIRECT.get(compute)  # one array function: called with no wrapper in between
    direct = None if found is None else Direct(found[0], found[1:], out_keyword=len(found) > 1)
    _register(name, attrs, 1, infer, run, elementwise, direct)


_DIRECT: dict[UnaryCompute, tuple[Any, ...]] = {}
"""Unary computes that are one array function: ``(name, extra positional args...)``."""


def _ufunc(function: str) -> UnaryCompute:
    def compute(xp: Any, x: Any, out: Any, attrs: Any) -> None:
        getattr(xp, function)(x, out=out)

    _DIRECT[compute] = (function,)
    return compute


def _rsqrt(xp: Any, x: Any, out: Any, attrs: Any) -> None:
    xp.sqrt(x, out=out)
    xp.divide(1.0, out, out=out)


def _sigmoid(xp: Any, x: Any, out: Any, attrs: Any) -> None:
    # Stable both ways: with e = exp(-|x|) <= 1, sigmoid is 1/(1+e) for x >= 0, e/(1+e) else.
    negative = x < 0
    e = xp.exp(-xp.abs(x))
    denominator = e + 1.0
    xp.divide(1.0, denominator, out=out)
    xp.copyto(out, e / denominator, where=negative)


def _erf(xp: Any, x: Any, out: Any, attrs: Any) -> None:
    # float64 internally: float32/float16 results are then correctly rounded (in practice).
    out[...] = erf_erfc(xp, _as_float64(xp, x))[0]


_GELU_TANH_C = math.sqrt(2.0 / math.pi)


def _gelu(xp: Any, x: Any, out: Any, attrs: GeluAttrs) -> None:
    # gelu(x) = x * Phi(x). Phi is computed without cancellation in the left tail:
    # exact: Phi(x) = erfc(-x/sqrt(2)) / 2; tanh form: (1 + tanh(u)) / 2 = sigmoid(2u).
    x64 = _as_float64(xp, x).reshape(-1)  # 1-D: numpy computes on 0-d arrays give scalars
    if attrs.approximate:
        # Phi is already exactly 0 or 1 at |x| = 1e3; clamping keeps x**3 finite.
        u = xp.clip(x64, -1e3, 1e3)
        cube = u * u
        cube *= 0.044715
        cube += 1.0
        u *= cube
        u *= 2.0 * _GELU_TANH_C
        phi = xp.empty_like(u)
        _sigmoid(xp, u, phi, None)
    else:
        phi = erf_erfc(xp, x64 * -math.sqrt(0.5))[1]
        phi *= 0.5
    with np.errstate(invalid="ignore"):  # gelu(-inf) is -inf * 0 = nan by design, as
        phi *= x64  # ONNX's formula (and ONNX Runtime) give
    out[...] = phi.reshape(out.shape)


def _relu(xp: Any, x: Any, out: Any, attrs: Any) -> None:
    xp.maximum(x, 0, out=out)  # NaN propagates


_DIRECT[_relu] = ("maximum", 0)


def _leaky_relu(xp: Any, x: Any, out: Any, attrs: LeakyReluAttrs) -> None:
    positive = x > 0
    xp.multiply(x, attrs.alpha, out=out)
    xp.copyto(out, x, where=positive)


def _clip_check(attrs: ClipAttrs) -> None:
    if not attrs.a_min <= attrs.a_max:
        raise OpError(f"clip needs a_min <= a_max, got a_min={attrs.a_min} and "
                      f"a_max={attrs.a_max}")


def _clip(xp: Any, x: Any, out: Any, attrs: ClipAttrs) -> None:
    xp.clip(x, attrs.a_min, attrs.a_max, out=out)


_unary("exp", FLOATS, _ufunc("exp"), "exp(in0)")
_unary("log", FLOATS, _ufunc("log"), "log(in0)")
_unary("sqrt", FLOATS, _ufunc("sqrt"), "sqrt(in0)")
_unary("rsqrt", FLOATS, _rsqrt, "1 / sqrt(in0)")
_unary("tanh", FLOATS, _ufunc("tanh"), "tanh(in0)")
_unary("sigmoid", FLOATS, _sigmoid, "1 / (1 + exp(-in0))")
_unary("erf", FLOATS, _erf, "erf(in0)")
_unary("gelu", FLOATS, _gelu, None, GeluAttrs)
_unary("relu", SIGNED, _relu, "in0 < 0 ? 0 : in0")
_unary("leaky_relu", FLOATS, _leaky_relu, None, LeakyReluAttrs)
_unary("clip", FLOATS, _clip, None, ClipAttrs, check=_clip_check)
_unary("negative", SIGNED, _ufunc("negative"), "-in0")
_unary("abs", SIGNED, _ufunc("absolute"), "in0 > 0 ? in0 : -in0")
_unary("floor", FLOATS, _ufunc("floor"), "floor(in0)")
_unary("ceil", FLOATS, _ufunc("ceil"), "ceil(in0)")
_unary("round", FLOATS, _ufunc("rint"), "rint(in0)")  # half to even, like numpy
_unary("logical_not", BOOLS, _ufunc("logical_not"), "!in0", out_dtype="bool")


# --------------------------------------------------------------------------------------------
# cast, where, bias_add
# --------------------------------------------------------------------------------------------


def _cast_infer(types: Types, attrs: CastAttrs) -> list[TensorType]:
    if attrs.dtype not in _FAMILY:
        raise OpError(f"cast: unsupported target dtype {attrs.dtype!r} (expected one of "
                      f"{', '.join(CAST_DTYPES)})")
    _family("cast", 0, types[0], ANY)
    return [TensorType(types[0].shape, attrs.dtype)]


def _cast(xp: Any, ins: Sequence[Any], outs: Sequence[Any], attrs: CastAttrs) -> None:
    outs[0][...] = ins[0]  # numpy's unsafe cast: floats truncate toward zero, nonzero -> True


# The target dtype is the output's, so the plain conversion ``(T)(in0)`` is the whole cast.
_register("cast", CastAttrs, 1, _cast_infer, _cast, "in0")


def _where_infer(types: Types, attrs: Any) -> list[TensorType]:
    _family("where", 0, types[0], BOOLS)
    dtype = _common_dtype("where", types[1:], ANY, indices=(1, 2))
    return [TensorType(_broadcast("where", types), dtype)]


def _where(xp: Any, ins: Sequence[Any], outs: Sequence[Any], attrs: Any) -> None:
    cond, x, y = ins
    outs[0][...] = y
    xp.copyto(outs[0], x, where=cond)


_register("where", NoAttrs, 3, _where_infer, _where, "in0 ? in1 : in2")


def _bias_add_infer(types: Types, attrs: BiasAddAttrs) -> list[TensorType]:
    data, bias = types
    _family("bias_add", 0, data, NUMERIC)
    _family("bias_add", 1, bias, NUMERIC)
    if bias.dtype != data.dtype:
        raise OpError(f"bias_add needs the bias's dtype to match the data's: data is "
                      f"{data.dtype}, bias is {bias.dtype}")
    axis = _axis("bias_add", attrs.axis, data.ndim)
    if bias.ndim != 1:
        raise OpError(f"bias_add expects a 1-D bias, got shape {list(bias.shape)}")
    if bias.shape[0] != data.shape[axis]:
        raise OpError(f"bias_add: bias length {bias.shape[0]} does not match data axis "
                      f"{attrs.axis} of length {data.shape[axis]} (data shape "
                      f"{list(data.shape)})")
    return [data]


def _bias_add(xp: Any, ins: Sequence[Any], outs: Sequence[Any], attrs: BiasAddAttrs) -> None:
    data, bias = ins
    shape = [1] * data.ndim
    axis = normalize_axis(attrs.axis, data.ndim)
    shape[axis] = bias.shape[0]
    xp.add(data, bias.reshape(shape), out=outs[0])


_register("bias_add", BiasAddAttrs, 2, _bias_add_infer, _bias_add)


# --------------------------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------------------------


def _reduce_axes(name: str, axis: int | list[int] | None, ndim: int) -> tuple[int, ...]:
    """The normalized axes to reduce (all for None); repeats refused."""
    if axis is None:
        return tuple(range(ndim))
    given = [axis] if isinstance(axis, int) else list(axis)
    axes: list[int] = []
    for a in given:
        normalized = _axis(name, a, ndim)
        if normalized in axes:
            raise OpError(f"{name}: axis {axis} names axis {normalized} more than once")
        axes.append(normalized)
    return tuple(axes)


def _reduced_shape(shape: tuple[int, ...], axes: Sequence[int], keepdims: bool
                   ) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _refuse_empty(name: str, shape: tuple[int, ...], axes: Sequence[int]) -> None:
    for a in axes:
        if shape[a] == 0:
            raise OpError(f"{name} over an empty axis has no value: axis {a} of shape "
                          f"{list(shape)} has length 0")


def _reduction(name: str, function: str, allowed: frozenset[str], *,
               needs_values: bool) -> None:
    """``sum``-like ops: ``xp.<function>(x, axis, out=, keepdims=)``, dtype kept."""
    def infer(types: Types, attrs: ReduceAttrs) -> list[TensorType]:
        (x,) = types
        _family(name, 0, x, allowed)
        axes = _reduce_axes(name, attrs.axis, x.ndim)
        if needs_values:
            _refuse_empty(name, x.shape, axes)
        return [TensorType(_reduced_shape(x.shape, axes, attrs.keepdims), x.dtype)]

    def compute(xp: Any, ins: Sequence[Any], outs: Sequence[Any], attrs: ReduceAttrs) -> None:
        (x,), (out,) = ins, outs
        axes = None if attrs.axis is None else _reduce_axes(name, attrs.axis, x.ndim)
        if function in ("max", "min"):
            getattr(xp, function)(x, axis=axes, out=out, keepdims=attrs.keepdims)
            return
        # Integers accumulate in (and wrap around) their own dtype, not numpy's widened
        # default; float16 accumulates in float32 and is rounded once.
        work = accumulator(x.dtype)
        if work == x.dtype:
            getattr(xp, function)(x, axis=axes, out=out, keepdims=attrs.keepdims, dtype=work)
        else:
            out[...] = getattr(xp, function)(x, axis=axes, keepdims=attrs.keepdims, dtype=work)

    _register(name, ReduceAttrs, 1, infer, compute)


_reduction("sum", "sum", NUMERIC, needs_values=False)
_reduction("mean", "mean", FLOATS, needs_values=False)  # mean over nothing is nan
_reduction("max", "max", NUMERIC, needs_values=True)
_reduction("min", "min", NUMERIC, needs_values=True)


def _argmax_infer(types: Types, attrs: ArgmaxAttrs) -> list[TensorType]:
    (x,) = types
    _family("argmax", 0, x, ANY)
    axis = _axis("argmax", attrs.axis, x.ndim)
    _refuse_empty("argmax", x.shape, (axis,))
    return [TensorType(_reduced_shape(x.shape, (axis,), attrs.keepdims), "int64")]


def _argmax(xp: Any, ins: Sequence[Any], outs: Sequence[Any], attrs: ArgmaxAttrs) -> None:
    (x,) = ins
    xp.argmax(x, axis=normalize_axis(attrs.axis, x.ndim), out=outs[0],
              keepdims=attrs.keepdims)


_register("argmax", ArgmaxAttrs, 1, _argmax_infer, _argmax)


# --------------------------------------------------------------------------------------------
# softmax, log_softmax
# --------------------------------------------------------------------------------------------


def _axis_sum(xp: Any, a: Any, axis: int) -> Any:
    """The sum of ``a`` over ``axis``, kept as a length-1 axis; a contiguous last axis in one
    pass through :func:`graphrt.ops.reductions.row_sums`."""
    if axis != a.ndim - 1 or not a.flags.c_contiguous:
        return xp.sum(a, axis=axis, keepdims=True)
    total = xp.empty_like(a, shape=(*a.shape[:-1], 1))
    row_sums(xp, a.reshape(-1, a.shape[-1]), total.reshape(-1))
    return total


def _softmax_like(name: str, log: bool) -> None:
    def infer(types: Types, attrs: SoftmaxAttrs) -> list[TensorType]:
        (x,) = types
        if x.dtype != "bfloat16":
            _family(name, 0, x, FLOATS)
        _axis(name, attrs.axis, x.ndim)
        return [x]

    def compute(xp: Any, ins: Sequence[Any], outs: Sequence[Any], attrs: SoftmaxAttrs) -> None:
        (x,), (out,) = ins, outs
        if x.size == 0:
            return
        if x.dtype.itemsize == 2:  # float16, bfloat16: accumulate in float32, round once
            wide = x.astype("float32")
            compute(xp, [wide], [wide], attrs)  # in place: x is read before out is written
            out[...] = wide
            return
        axis = normalize_axis(attrs.axis, x.ndim)
        xp.subtract(x, xp.max(x, axis=axis, keepdims=True), out=out)  # <= 0: exp cannot overflow
        total = _axis_sum(xp, xp.exp(out) if log else xp.exp(out, out=out), axis)
        if log:
            out -= xp.log(total, out=total)
        else:  # times the reciprocal, as ONNX Runtime's softmax
            out *= xp.reciprocal(total, out=total)

    _register(name, SoftmaxAttrs, 1, infer, compute)


_softmax_like("softmax", log=False)
_softmax_like("log_softmax", log=True)
