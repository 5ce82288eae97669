"""Differential tests: graphrt's elementwise and activation ops against ONNX Runtime.

One table row per op (and per attribute or dtype variant): the graphrt op and attrs, its
reference (a one-node ONNX model, a small multi-node ONNX model where graphrt's op has no
single ONNX counterpart, or a float64/Python-integer numpy reference where ONNX has none or
ONNX Runtime departs from the spec), the dtypes and the input domains. Every row runs on the
shape cases of its kind (scalar, zero-size, size-1 broadcasting, 4-D, a random shape, and
the domain's edge values such as 0, -0, inf, nan, the dtype's extremes), each case of its
first dtype also on ``graphrt.sim(0)`` (bitwise equal to cpu) and with non-contiguous
(transposed) inputs (bitwise equal to contiguous ones, up to summation order).
Disagreements found are in /work/briefs/diff_findings.md as ``D-E<n>``; cases with an unfixed
one are strict xfails.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from differential_harness import OPSET, assert_close, run_kernel
from ort_compat import ort_ir_version

import graphrt
from graphrt.ops import TensorType, get_op

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")

from onnx import helper, numpy_helper  # noqa: E402

# Edge values (log(0), 0/0, inf - inf) make numpy warn; the values are what is compared.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

INF, NAN = math.inf, math.nan
F = ("float32", "float16")
SINTS = ("int32", "int64")
INTS = ("int32", "int64", "uint8")

Ref = Callable[[list[np.ndarray], dict[str, Any]], np.ndarray]
"""A reference: ``ref(inputs, graphrt attrs)`` -> the expected output."""

# --------------------------------------------------------------------------------------------
# ONNX Runtime references
# --------------------------------------------------------------------------------------------


@functools.cache
def _session(model: bytes) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # tiny arrays: threads only add start-up time
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


Build = Callable[[list[str], np.dtype, dict[str, Any]],
                 tuple[list[Any], dict[str, np.ndarray]]]
"""``build(input names, dtype, attrs)`` -> (nodes writing output ``y``, initializers)."""


def run_model(build: Build, ins: Sequence[np.ndarray], attrs: dict[str, Any],
              opset: int = OPSET) -> np.ndarray:
    """ONNX Runtime's output ``y`` of the graph ``build`` makes (inputs of unknown shape, so
    one session serves every shape)."""
    names = [f"x{i}" for i in range(len(ins))]
    nodes, inits = build(names, ins[0].dtype, attrs)
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), None)
         for n, a in zip(names, ins, strict=True)],
        [onnx.ValueInfoProto(name="y")],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ort_ir_version())
    session = _session(model.SerializeToString())
    return np.asarray(session.run(["y"], dict(zip(names, ins, strict=True)))[0])


def ort_graph(build: Build, opset: int = OPSET) -> Ref:
    def ref(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        return run_model(build, ins, attrs, opset)

    return ref


def node(op_type: str, attrs: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
         consts: Callable[[np.dtype, dict[str, Any]], dict[str, np.ndarray]] | None = None,
         opset: int = OPSET, **fixed: Any) -> Ref:
    """A one-node ONNX model: the inputs, then ``consts`` as initializers; node attributes
    ``fixed`` plus ``attrs(graphrt attrs)``."""
    def build(names: list[str], dtype: np.dtype, given: dict[str, Any]
              ) -> tuple[list[Any], dict[str, np.ndarray]]:
        extra = consts(dtype, given) if consts else {}
        inputs = names + [k if v is not None else "" for k, v in extra.items()]
        node_attrs = {**fixed, **(attrs(given) if attrs else {})}
        made = helper.make_node(op_type, inputs, ["y"], **node_attrs)
        return [made], {k: v for k, v in extra.items() if v is not None}

    return ort_graph(build, opset)


def chain(*steps: tuple[str, dict[str, Any]]) -> Ref:
    """Unary ops applied one after another (``Reciprocal(Sqrt(x))``)."""
    def build(names: list[str], dtype: np.dtype, given: dict[str, Any]
              ) -> tuple[list[Any], dict[str, np.ndarray]]:
        nodes, source = [], names[0]
        for i, (op_type, node_attrs) in enumerate(steps):
            target = "y" if i == len(steps) - 1 else f"t{i}"
            nodes.append(helper.make_node(op_type, [source], [target], **node_attrs))
            source = target
        return nodes, {}

    return ort_graph(build)


def numpy64(function: Callable[..., Any], out: str | None = None) -> Ref:
    """A numpy reference computed in float64 (integers kept) and rounded once to ``out`` (the
    first input's dtype by default)."""
    def ref(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in ins]
        with np.errstate(all="ignore"):
            result = np.asarray(function(*wide, **attrs))
        return result.astype(out or ins[0].dtype)

    return ref


def _f32_inputs(ref: Ref) -> Ref:
    """``ref`` run on float32 copies of float16 inputs, its output rounded to float16."""
    def wrapped(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        if all(a.dtype != np.float16 for a in ins):
            return ref(ins, attrs)
        result = ref([a.astype(np.float32) if a.dtype == np.float16 else a for a in ins], attrs)
        return result.astype(np.float16) if result.dtype == np.float32 else result

    return wrapped


# --------------------------------------------------------------------------------------------
# Input domains: random values and edge values
# --------------------------------------------------------------------------------------------


def _float_edges(dtype: np.dtype) -> list[float]:
    fi = np.finfo(dtype)
    return [0.0, -0.0, INF, -INF, NAN, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0, -3.0, 1e-3,
            20.0, -20.0, float(fi.max), -float(fi.max), float(fi.tiny)]


def _int_edges(dtype: np.dtype) -> list[int]:
    ii = np.iinfo(dtype)
    if ii.min == 0:
        return [0, 1, 2, 7, 127, 128, 254, int(ii.max)]
    return [0, 1, -1, 2, -2, 7, -7, int(ii.min), int(ii.max)]


FLOAT_RANGES: dict[str, tuple[float, float]] = {
    "real": (-4.0, 4.0), "pos": (0.05, 10.0), "unit": (-0.95, 0.95), "ge1": (1.0, 10.0),
    "small": (-8.0, 8.0), "trig": (-1.4, 1.4), "nonzero": (-4.0, 4.0), "cast": (-100, 100),
    "byte": (0.0, 255.0),
}
"""Random float values per domain: uniform in the range ("nonzero": |x| >= 0.25)."""

FLOAT_EDGES: dict[str, Callable[[np.dtype], list[float]]] = {
    # float -> integer casts: NaN, inf and out-of-range values are undefined in C and ONNX.
    "cast": lambda dt: [0.0, -0.0, 0.5, -0.5, 0.999, -0.999, 2.5, -2.5, 99.9, -99.9],
    "byte": lambda dt: [0.0, -0.0, 0.5, 0.999, 1.0, 127.5, 254.9, 255.0],
}


INT_DOMAINS = frozenset({"int", "nonzero", "small", "exponent", "shift", "anyshift", "wide"})
"""The domains with integer meanings of their own (any other is "int" for integers)."""


def _int_random(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype,
                domain: str) -> np.ndarray:
    bits = dtype.itemsize * 8
    signed = dtype.kind == "i"
    ii = np.iinfo(dtype)
    low, high = {"int": (-20 if signed else 0, 40 if not signed else 20),
                 "nonzero": (-20 if signed else 1, 40 if not signed else 20),
                 "small": (-3 if signed else 0, 3), "exponent": (0, 4),
                 "shift": (0, bits - 1), "anyshift": (-2 if signed else 0, bits + 2),
                 "wide": (int(ii.min), int(ii.max))}[domain]
    values = rng.integers(low, high, size=shape, endpoint=True, dtype=dtype)
    if domain == "nonzero":
        values[values == 0] = 1
    return values


def _int_edge_values(dtype: np.dtype, domain: str) -> list[int]:
    bits = dtype.itemsize * 8
    if domain not in INT_DOMAINS:
        domain = "int"
    if domain == "nonzero":  # no division by zero, no min / -1 overflow (undefined in C)
        return [v for v in _int_edges(dtype) if v not in (0, -1)]
    if domain == "small":
        return [v for v in range(-3, 4) if dtype.kind == "i" or v >= 0]
    if domain == "exponent":
        return [0, 1, 2, 3, 5] + ([-1, -2] if dtype.kind == "i" else [])
    if domain == "shift":
        return [0, 1, 3, bits - 1]
    if domain == "anyshift":  # out-of-range amounts too (graphrt defines them)
        return [0, 1, bits - 1, bits, bits + 1, 2 * bits] + ([-1, -3] if dtype.kind == "i"
                                                             else [])
    return _int_edges(dtype)


def random_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str,
                  domain: str) -> np.ndarray:
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    if dt == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dt.kind in "iu":
        return _int_random(rng, shape, dt, domain if domain in INT_DOMAINS else "int")
    low, high = FLOAT_RANGES.get(domain, FLOAT_RANGES["real"])
    values = rng.uniform(low, high, size=shape)
    if domain == "nonzero":
        values = np.where(np.abs(values) < 0.25, np.copysign(0.25, values) + values, values)
    return np.asarray(values).astype(dt)


def edge_values(dtype: str, domain: str) -> np.ndarray:
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    if dt == np.bool_:
        return np.array([False, True])
    if dt.kind in "iu":
        return np.array(_int_edge_values(dt, domain), dt)
    wide = np.dtype(np.float32) if dtype == "bfloat16" else dt
    values = FLOAT_EDGES.get(domain, _float_edges)(wide)
    if domain == "nonzero":
        values = [v for v in values if v != 0]
    with np.errstate(over="ignore"):
        return np.array(values, np.float64).astype(dt)


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    op: str
    ref: Ref
    dtypes: tuple[str, ...] = F
    kind: str = "unary"
    attrs: dict[str, Any] = field(default_factory=dict)
    domains: tuple[str, ...] = ("real",)
    name: str = ""
    via_f32: bool = False
    """float16 inputs compared against the reference in float32, rounded to float16."""
    got_as: str | None = None
    """The dtype graphrt's output is converted to before the comparison (bfloat16 ones)."""
    signed_zero: bool = True
    """Whether the sign of a zero result is compared (not where the spec's max(-0, +0) may be
    either zero, as IEEE 754's maxNum leaves it)."""
    overrides: dict[str, Ref] = field(default_factory=dict)
    """Shape cases compared against another reference (where ONNX Runtime departs from the
    spec, or the spec leaves the case undefined), keyed by case name."""

    @property
    def id(self) -> str:
        return self.name or self.op


def onnx_dtype(name: str) -> int:
    if name == "bfloat16":
        return int(onnx.TensorProto.BFLOAT16)
    return int(helper.np_dtype_to_tensor_dtype(np.dtype(name)))


def _clip_consts(dtype: np.dtype, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {"lo": np.array(attrs["a_min"], dtype), "hi": np.array(attrs["a_max"], dtype)}


def _axes_const(dtype: np.dtype, attrs: dict[str, Any]) -> dict[str, np.ndarray]:
    axis = attrs.get("axis")
    if axis is None:
        return {}
    return {"axes": np.array([axis] if isinstance(axis, int) else axis, np.int64)}


def _keepdims(attrs: dict[str, Any]) -> dict[str, Any]:
    return {"keepdims": int(attrs.get("keepdims", False))}


def reduce(op_type: str) -> Ref:
    return node(op_type, attrs=_keepdims, consts=_axes_const)


def numpy_reduce(function: Callable[..., Any], out: str | None = None) -> Ref:
    """A numpy reduction in the input's dtype (integers wrap; float16 computed in float32)."""
    def ref(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        (x,) = ins
        axis = attrs.get("axis")
        wide = x.astype(np.float32) if x.dtype == np.float16 else x
        kwargs: dict[str, Any] = {"keepdims": bool(attrs.get("keepdims", False))}
        if function is not np.argmax:
            kwargs["axis"] = tuple(axis) if isinstance(axis, list) else axis
        else:
            kwargs["axis"] = axis
        if function is np.sum and x.dtype.kind in "iu":
            kwargs["dtype"] = x.dtype
        with np.errstate(all="ignore"):
            return np.asarray(function(wide, **kwargs)).astype(out or x.dtype)

    return ref


def _compare(op_type: str, negate: bool = False) -> Ref:
    """A comparison; bool inputs are compared as uint8 (ONNX's Less/Greater take no bool)."""
    def build(names: list[str], dtype: np.dtype, given: dict[str, Any]
              ) -> tuple[list[Any], dict[str, np.ndarray]]:
        if not negate:
            return [helper.make_node(op_type, names, ["y"])], {}
        return [helper.make_node(op_type, names, ["t"]), helper.make_node("Not", ["t"], ["y"])
                ], {}

    def ref(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        if ins[0].dtype == np.bool_ and op_type not in ("Equal",):
            ins = [a.astype(np.uint8) for a in ins]
        return run_model(build, ins, attrs)

    return ref


def _bias_add(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    data, bias = ins
    shape = [1] * data.ndim
    shape[attrs.get("axis", 1) % data.ndim] = bias.shape[0]
    return run_model(lambda n, d, a: ([helper.make_node("Add", n, ["y"])], {}),
                     [data, bias.reshape(shape)], {})


def _floor_divide(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    if ins[0].dtype.kind in "iu":  # no ONNX counterpart: exact Python floor division
        return python_int(lambda a, b: a // b)(ins, attrs)
    # ONNX has no float floor division and Floor(Div(a, b)) rounds the quotient first
    # (1 // 0.1 would be 10): numpy's exact floor_divide in float64, rounded once.
    return numpy64(np.floor_divide)(ins, attrs)


def _mod(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    if ins[0].dtype.kind in "iu":
        return node("Mod", fmod=0)(ins, attrs)
    # ONNX's Mod requires fmod=1 for floats: numpy's remainder (divisor's sign) in float64.
    return numpy64(np.remainder)(ins, attrs)


def _fmod_edges(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """fmod of the edge values: ONNX Runtime's for floats; for integers C's exact remainder
    (the dividend's sign) on Python integers, since some ONNX Runtime releases (1.30) compute an
    integer Mod(fmod=1) in float64, wrong past 2**53 (fmod(INT64_MAX, 2) gave 0)."""
    if ins[0].dtype.kind in "iu":
        return python_int(lambda a, b: abs(a) % abs(b) * (-1 if a < 0 else 1))(ins, attrs)
    return node("Mod", fmod=1)(ins, attrs)


def _where(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.where(*ins)


def _swish(names: list[str], dtype: np.dtype, given: dict[str, Any]
           ) -> tuple[list[Any], dict[str, np.ndarray]]:
    """x * Sigmoid(alpha * x) (ONNX's Swish is opset 24, beyond ONNX Runtime's)."""
    (x,) = names
    return [helper.make_node("Mul", [x, "alpha"], ["ax"]),
            helper.make_node("Sigmoid", ["ax"], ["s"]),
            helper.make_node("Mul", [x, "s"], ["y"])], {
                "alpha": np.array(given.get("alpha", 1.0), dtype)}


def _prelu(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """PRelu where the slope broadcasts to x (ONNX's is unidirectional) and ONNX Runtime has a
    kernel (floats); otherwise Where(x < 0, x * slope, x) in numpy."""
    x, slope = ins
    if x.dtype.kind == "f" and np.broadcast_shapes(x.shape, slope.shape) == x.shape:
        return node("PRelu")(ins, attrs)
    return numpy64(lambda a, s: np.where(a < 0, a * s, a))(ins, attrs)


def python_int(function: Callable[..., int]) -> Ref:
    """An exact reference on Python integers, elementwise with broadcasting, wrapped into the
    first input's dtype (two's complement)."""
    def ref(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        dtype = ins[0].dtype
        bits = dtype.itemsize * 8
        out = np.empty(np.broadcast_shapes(*(a.shape for a in ins)), dtype)
        for index, values in zip(np.ndindex(out.shape), np.broadcast(*ins), strict=True):
            value = function(*(int(v) for v in values), **attrs) & ((1 << bits) - 1)
            if dtype.kind == "i" and value >> (bits - 1):
                value -= 1 << bits
            out[index] = value
        return out

    return ref


def _shift(x: int, y: int, *, bits: int, left: bool) -> int:
    """``x`` shifted by ``y``; amounts outside [0, bits) give what graphrt documents (0, or -1
    for a negative value shifted right)."""
    if not 0 <= y < bits:
        return 0 if left or x >= 0 else -1
    return x << y if left else x >> y


def shift(left: bool) -> Ref:
    def ref(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        bits = ins[0].dtype.itemsize * 8
        return python_int(lambda x, y: _shift(x, y, bits=bits, left=left))(ins, attrs)

    return ref


def _shrink_int(x: int, *, bias: float, lambd: float) -> int:
    """ONNX's Shrink in exact integer arithmetic (the tests use integer bias and lambd)."""
    return x + int(bias) if x < -lambd else x - int(bias) if x > lambd else 0


def _by_dtype(kinds: dict[str, Ref], default: Ref) -> Ref:
    """``kinds[dtype name]`` for inputs of that dtype, else ``default``."""
    def ref(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        return kinds.get(str(ins[-1].dtype), default)(ins, attrs)

    return ref


def _isinf_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {"detect_positive": int(attrs.get("detect_positive", True)),
            "detect_negative": int(attrs.get("detect_negative", True))}


def _cast_rows() -> list[Row]:
    pairs = [("float32", "float16", "real"), ("float32", "int32", "cast"),
             ("float32", "bool", "real"), ("float32", "uint8", "byte"),
             ("float16", "float32", "real"), ("float16", "int64", "cast"),
             ("int32", "float32", "int"), ("int64", "int32", "wide"),
             ("int64", "uint8", "wide"), ("int32", "bool", "int"), ("bool", "float32", "real"),
             ("uint8", "int32", "int"), ("int32", "float16", "int")]
    return [Row("cast", node("Cast", attrs=lambda a: {"to": onnx_dtype(a["dtype"])}),
                (src,), attrs={"dtype": dst}, domains=(domain,), name=f"cast_to_{dst}")
            for src, dst, domain in pairs]


def _bf16_in(ref: Ref) -> Ref:
    """bfloat16 inputs fed to ONNX Runtime as float32 (exact) and cast to bfloat16 there."""
    def wrapped(ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        return ref([a.astype(np.float32) for a in ins], attrs)

    return wrapped


def _cast_via_bf16(to: str) -> Ref:
    return chain(("Cast", {"to": onnx.TensorProto.BFLOAT16}), ("Cast", {"to": onnx_dtype(to)}))


UNARY_FLOAT = {
    "exp": ("Exp", "small"), "log": ("Log", "pos"), "sqrt": ("Sqrt", "pos"),
    "tanh": ("Tanh", "small"), "sigmoid": ("Sigmoid", "small"), "erf": ("Erf", "real"),
    "floor": ("Floor", "real"), "ceil": ("Ceil", "real"), "round": ("Round", "real"),
    "sin": ("Sin", "real"), "cos": ("Cos", "real"), "tan": ("Tan", "trig"),
    "asin": ("Asin", "unit"), "acos": ("Acos", "unit"), "atan": ("Atan", "real"),
    "sinh": ("Sinh", "small"), "cosh": ("Cosh", "small"), "asinh": ("Asinh", "real"),
    "acosh": ("Acosh", "ge1"), "atanh": ("Atanh", "unit"), "reciprocal": ("Reciprocal", "real"),
    "softplus": ("Softplus", "small"), "softsign": ("Softsign", "real"),
    "mish": ("Mish", "small"), "hard_swish": ("HardSwish", "real"),
}

ROWS: list[Row] = [
    *[Row(op, node(op_type), domains=(domain,)) for op, (op_type, domain) in UNARY_FLOAT.items()],
    Row("abs", node("Abs"), F + SINTS),
    Row("negative", node("Neg"), F + SINTS),
    Row("relu", node("Relu"), (*F, "int32"), signed_zero=False),
    # ONNX Runtime has no int64 Relu kernel.
    Row("relu", numpy64(lambda x: np.maximum(x, 0)), ("int64",), name="relu_int64"),
    # ONNX Runtime's float16 Sign gives 0 for NaN (its float32 one NaN); the spec defines no
    # value for it, numpy's NaN is what float32 ONNX Runtime and graphrt give.
    Row("sign", node("Sign"), F + INTS, overrides={"edges": numpy64(np.sign)}),
    Row("rsqrt", chain(("Sqrt", {}), ("Reciprocal", {})), domains=("pos",)),
    Row("leaky_relu", node("LeakyRelu", alpha=0.1), attrs={"alpha": 0.1}),
    Row("clip", node("Clip", consts=_clip_consts), attrs={"a_min": -1.5, "a_max": 2.0}),
    Row("gelu", node("Gelu", approximate="none", opset=20)),
    Row("gelu", node("Gelu", approximate="tanh", opset=20), attrs={"approximate": True},
        name="gelu_tanh"),
    Row("elu", node("Elu", alpha=0.5), attrs={"alpha": 0.5}, domains=("small",)),
    Row("selu", node("Selu"), domains=("small",)),
    # ONNX's Celu is float32 only: float16 against float32, rounded.
    Row("celu", node("Celu", alpha=0.7), attrs={"alpha": 0.7}, domains=("small",),
        via_f32=True),
    Row("hard_sigmoid", node("HardSigmoid", alpha=0.3, beta=0.4),
        attrs={"alpha": 0.3, "beta": 0.4}),
    Row("thresholded_relu", node("ThresholdedRelu", alpha=0.5), attrs={"alpha": 0.5}),
    Row("swish", ort_graph(_swish), attrs={"alpha": 1.5}, domains=("small",)),
    Row("shrink", node("Shrink", bias=0.2, lambd=0.6), attrs={"bias": 0.2, "lambd": 0.6}),
    # ONNX Runtime's integer Shrink computes x - bias in float32 (int32 max - 1 comes out as
    # int32 min): exact integer arithmetic, the spec's formula, instead.
    Row("shrink", python_int(_shrink_int), INTS, attrs={"bias": 1.0, "lambd": 2.0},
        name="shrink_int"),
    Row("isnan", node("IsNaN")),
    Row("isinf", node("IsInf", attrs=_isinf_attrs)),
    Row("isinf", node("IsInf", attrs=_isinf_attrs), attrs={"detect_negative": False},
        name="isinf_positive"),
    Row("isinf", node("IsInf", attrs=_isinf_attrs), attrs={"detect_positive": False},
        name="isinf_negative"),
    Row("logical_not", node("Not"), ("bool",)),
    Row("bitwise_not", node("BitwiseNot"), INTS),
    *_cast_rows(),
    Row("cast_bfloat16", _cast_via_bf16("float32"), ("float32", "float16"),
        attrs={"dtype": "bfloat16"}, got_as="float32", name="cast_bfloat16_to"),
    Row("cast_bfloat16", _bf16_in(_cast_via_bf16("float32")), ("bfloat16",),
        attrs={"dtype": "float32"}, name="cast_bfloat16_from"),
    Row("cast_bfloat16", _bf16_in(_cast_via_bf16("int32")), ("bfloat16",),
        attrs={"dtype": "int32"}, domains=("cast",), name="cast_bfloat16_to_int32"),
    # binary
    Row("add", node("Add"), F + INTS, "binary", domains=("real", "real")),
    Row("subtract", node("Sub"), F + INTS, "binary", domains=("real", "real")),
    Row("multiply", node("Mul"), F + INTS, "binary", domains=("real", "real")),
    Row("divide", node("Div"), F, "binary", domains=("real", "nonzero")),
    Row("floor_divide", _floor_divide, F + INTS, "binary", domains=("real", "nonzero")),
    Row("trunc_divide", node("Div"), INTS, "binary", domains=("int", "nonzero")),
    Row("mod", _mod, F + INTS, "binary", domains=("real", "nonzero")),
    Row("fmod", node("Mod", fmod=1), F + INTS, "binary", domains=("real", "nonzero"),
        overrides={"edges": _fmod_edges}),
    Row("power", node("Pow"), F, "binary", domains=("pos", "real")),
    Row("power", node("Pow"), SINTS, "binary", domains=("small", "exponent"),
        name="power_int"),
    Row("maximum", node("Max"), F + INTS, "binary", domains=("real", "real"),
        signed_zero=False),
    Row("minimum", node("Min"), F + INTS, "binary", domains=("real", "real"),
        signed_zero=False),
    Row("equal", _compare("Equal"), (*F, *INTS, "bool"), "binary", domains=("real", "real")),
    Row("not_equal", _compare("Equal", negate=True), (*F, *INTS, "bool"), "binary",
        domains=("real", "real")),
    Row("less", _compare("Less"), (*F, *INTS, "bool"), "binary", domains=("real", "real")),
    Row("less_equal", _compare("LessOrEqual"), (*F, *INTS, "bool"), "binary",
        domains=("real", "real")),
    Row("greater", _compare("Greater"), (*F, *INTS, "bool"), "binary",
        domains=("real", "real")),
    Row("greater_equal", _compare("GreaterOrEqual"), (*F, *INTS, "bool"), "binary",
        domains=("real", "real")),
    Row("logical_and", node("And"), ("bool",), "binary", domains=("real", "real")),
    Row("logical_or", node("Or"), ("bool",), "binary", domains=("real", "real")),
    Row("logical_xor", node("Xor"), ("bool",), "binary", domains=("real", "real")),
    Row("bitwise_and", node("BitwiseAnd"), INTS, "binary", domains=("int", "int")),
    Row("bitwise_or", node("BitwiseOr"), INTS, "binary", domains=("int", "int")),
    Row("bitwise_xor", node("BitwiseXor"), INTS, "binary", domains=("int", "int")),
    # ONNX's BitShift is unsigned only and leaves amounts >= the width undefined.
    Row("left_shift", node("BitShift", direction="LEFT"), ("uint8",), "binary",
        domains=("int", "shift")),
    Row("right_shift", node("BitShift", direction="RIGHT"), ("uint8",), "binary",
        domains=("int", "shift")),
    Row("left_shift", shift(left=True), INTS, "binary", domains=("wide", "anyshift"),
        name="left_shift_python"),
    Row("right_shift", shift(left=False), INTS, "binary", domains=("wide", "anyshift"),
        name="right_shift_python"),
    Row("prelu", _prelu, F + SINTS, "binary", domains=("real", "real")),
    # ONNX Runtime has no bool Where kernel: numpy's where for bool. Its float Where turns a
    # selected -0.0 into +0.0: numpy's where (the spec's selection) for the edge values.
    Row("where", _by_dtype({"bool": _where}, node("Where")), (*F, *INTS, "bool"), "where",
        domains=("real", "real"), overrides={"edges": _where}),
    Row("bias_add", _bias_add, F + INTS, "bias", domains=("real", "real")),
    Row("bias_add", _bias_add, ("float32",), "bias", attrs={"axis": -1},
        domains=("real", "real"), name="bias_add_last"),
    # reductions and per-axis ops (attrs per shape case)
    # ONNX's ReduceSum has no uint8, and ONNX Runtime's int64 one loses the low bits of large
    # values ([min, max] sums to 0, not -1): numpy's exact wrapping sum for those two.
    Row("sum", _by_dtype({"uint8": numpy_reduce(np.sum), "int64": numpy_reduce(np.sum)},
                         reduce("ReduceSum")), F + INTS, "reduce"),
    # The spec leaves the mean over nothing undefined (ONNX Runtime: 0); graphrt's NaN is
    # numpy's.
    Row("mean", reduce("ReduceMean"), F, "reduce",
        overrides={"empty": numpy_reduce(np.mean)}),
    # The spec's max/min are numpy's, which propagate NaN; ONNX Runtime skips NaN.
    Row("max", reduce("ReduceMax"), F + INTS, "reduce",
        overrides={"edges": numpy_reduce(np.max)}),
    Row("min", reduce("ReduceMin"), F + INTS, "reduce",
        overrides={"edges": numpy_reduce(np.min)}),
    # The spec says nothing of NaN; graphrt's argmax is numpy's (the first NaN), ONNX
    # Runtime's skips NaN.
    Row("argmax", node("ArgMax", attrs=lambda a: {"axis": a["axis"], **_keepdims(a)}),
        F + INTS, "axis", overrides={"edges": numpy_reduce(np.argmax, "int64")}),
    Row("softmax", node("Softmax", attrs=lambda a: {"axis": a.get("axis", -1)}), F, "axis"),
    Row("log_softmax", node("LogSoftmax", attrs=lambda a: {"axis": a.get("axis", -1)}), F,
        "axis"),
]

# --------------------------------------------------------------------------------------------
# Shape cases
# --------------------------------------------------------------------------------------------

CASES = ("scalar", "empty", "broadcast", "4d", "random", "edges")

Case = tuple[list[tuple[int, ...]], dict[str, Any]]
"""The input shapes and the attrs a shape case adds."""


def _random_shape(rng: np.random.Generator) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 4))))


def case_shapes(row: Row, case: str, rng: np.random.Generator, lengths: Sequence[int]
                ) -> Case | None:
    """The shapes (and attrs) of ``case`` for ``row``; None where the case does not apply.
    ``lengths``: how many edge values each input's domain has."""
    kind, shape, n = row.kind, _random_shape(rng), lengths
    if kind == "unary":
        return {"scalar": ([()], {}), "empty": ([(0, 3)], {}), "broadcast": ([(4, 1)], {}),
                "4d": ([(2, 3, 4, 5)], {}), "random": ([shape], {}), "edges": ([(n[0],)], {})
                }[case]
    if kind == "binary":
        return {"scalar": ([(), ()], {}), "empty": ([(0, 3), (1, 3)], {}),
                "broadcast": ([(4, 1), (1, 3)], {}), "4d": ([(2, 3, 4, 5), (3, 1, 5)], {}),
                "random": ([shape, shape], {}), "edges": ([(n[0], 1), (1, n[1])], {})}[case]
    if kind == "where":
        return {"scalar": ([(), (), ()], {}), "empty": ([(0, 3), (1, 3), (0, 1)], {}),
                "broadcast": ([(4, 1), (1, 3), (4, 3)], {}),
                "4d": ([(2, 3, 4, 5), (3, 4, 5), (1,)], {}),
                "random": ([shape, shape, shape], {}),
                "edges": ([(n[2], n[1]), (1, n[1]), (n[2], 1)], {})}[case]
    if kind == "bias":
        axis = row.attrs.get("axis", 1)
        data = {"scalar": None, "empty": (0, 3), "broadcast": (4, 1), "4d": (2, 3, 4, 5),
                "random": (*shape, 2), "edges": (n[0], n[1])}[case]
        return None if data is None else ([data, (data[axis],)], {})
    reductions = kind == "reduce"
    keep = {"keepdims": True} if row.op not in ("softmax", "log_softmax") else {}
    return {
        "scalar": ([()], {"axis": None}) if reductions else None,
        "empty": ([(0, 3)], {"axis": 0 if row.op in ("sum", "mean") else 1}),
        "broadcast": ([(4, 1)], {"axis": 1, **keep}),
        "4d": ([(2, 3, 4, 5)], {"axis": [1, 3] if reductions else 2}),
        "random": ([shape], {"axis": -1, **keep}),
        "edges": ([(3, n[0])], {"axis": -1}),
    }[case]


def _input_dtypes_domains(row: Row, dtype: str) -> tuple[list[str], list[str]]:
    arity = {"where": 3, "binary": 2, "bias": 2}.get(row.kind, 1)
    dtypes, domains = [dtype] * arity, list(row.domains)
    if row.kind == "where":
        dtypes[0], domains = "bool", ["real", *domains]
    return dtypes, domains + [domains[-1]] * (arity - len(domains))


def _edge_input(row: Row, index: int, edges: list[np.ndarray], shape: tuple[int, ...],
                rng: np.random.Generator) -> np.ndarray:
    """Input ``index`` of an edge case: the edge values laid out along its own axis."""
    values = edges[index]
    if row.kind == "where" and index == 0:
        return (np.add.outer(np.arange(shape[0]), np.arange(shape[1])) % 2 == 0)
    if row.kind in ("reduce", "axis"):  # rows: the edges, all lowest, shuffled finite ones
        lowest = -INF if values.dtype.kind == "f" else values.min()
        finite = values[np.abs(values.astype(np.float64)) < 1e4]  # sums stay exact-ish
        return np.stack([values, np.full_like(values, lowest),
                         rng.permutation(np.resize(finite, values.shape))])
    if row.kind == "bias" and index == 0:
        return np.repeat(values[:, None], shape[1], axis=1)
    return values.reshape(shape)


def inputs_for(row: Row, dtype: str, case: str, seed: str
               ) -> tuple[list[np.ndarray], dict[str, Any]] | None:
    """The inputs and attrs of one test: random values, or the domains' edge values."""
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    dtypes, domains = _input_dtypes_domains(row, dtype)
    edges = [edge_values(d, dom) for d, dom in zip(dtypes, domains, strict=True)]
    found = case_shapes(row, case, rng, [len(e) for e in edges])
    if found is None:
        return None
    shapes, case_attrs = found
    if case == "edges":
        ins = [_edge_input(row, i, edges, s, rng) for i, s in enumerate(shapes)]
    else:
        ins = [random_values(rng, s, d, dom)
               for s, d, dom in zip(shapes, dtypes, domains, strict=True)]
    return ins, {**row.attrs, **case_attrs}


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------

XFAIL: dict[str, str] = {}
"""Test ids (``row-dtype-case``, ``-sim`` for the sim/strided test) with an unfixed finding."""


def _xfail(test_id: str) -> list[Any]:
    reason = XFAIL.get(test_id)
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


def _params() -> list[Any]:
    params = []
    for row in ROWS:
        for dtype in row.dtypes:
            for case in CASES:
                if case_shapes(row, case, np.random.default_rng(0), [3, 3, 3]) is None:
                    continue  # scalar: bias_add, argmax and softmax need an axis
                test_id = f"{row.id}-{dtype}-{case}"
                params.append(pytest.param(row, dtype, case, id=test_id,
                                           marks=_xfail(test_id)))
    return params


def reference(row: Row, case: str, ins: list[np.ndarray], attrs: dict[str, Any]
              ) -> np.ndarray:
    ref = row.overrides.get(case, row.ref)
    ref = _f32_inputs(ref) if row.via_f32 else ref
    return ref(ins, attrs)


def _bitwise_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, what
    assert got.tobytes() == want.tobytes(), f"{what}: {got!r} != {want!r}"


@pytest.mark.parametrize(("row", "dtype", "case"), _params())
def test_against_reference(row: Row, dtype: str, case: str) -> None:
    test_id = f"{row.id}-{dtype}-{case}"
    found = inputs_for(row, dtype, case, test_id)
    assert found is not None
    ins, attrs = found
    (got,) = run_kernel(row.op, ins, attrs)
    want = reference(row, case, ins, attrs)
    if row.got_as:
        got = got.astype(row.got_as)
    # Every row passes with the harness's per-dtype tolerance (ONNX Runtime's fast tanh, erf
    # and sigmoid stay within a few float32 ulps): no row widens it.
    assert_close(got, want, what=f"{test_id} on {ins!r}")
    if want.dtype.kind == "f" and row.signed_zero:  # allclose takes -0 == 0: signs apart
        zeros = want == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]),
                                      err_msg=f"{test_id}: sign of zero on {ins!r}")


SUMMING = frozenset({"sum", "mean", "softmax", "log_softmax"})
"""Ops whose float results depend on the order numpy adds in."""

SIM_PARAMS = [pytest.param(row, case, id=f"{row.id}-{row.dtypes[0]}-{case}",
                           marks=_xfail(f"{row.id}-{row.dtypes[0]}-{case}-sim"))
              for row in ROWS for case in CASES
              if case_shapes(row, case, np.random.default_rng(0), [3, 3, 3]) is not None]


@pytest.mark.parametrize(("row", "case"), SIM_PARAMS)
def test_sim_and_strided_match_cpu(row: Row, case: str) -> None:
    """Every case of the row's first dtype (float32 for float ops) on sim, and with
    transposed (non-contiguous) inputs on cpu, is bitwise what cpu gives."""
    dtype = row.dtypes[0]
    found = inputs_for(row, dtype, case, f"{row.id}-{dtype}-{case}")
    assert found is not None
    ins, attrs = found
    (want,) = run_kernel(row.op, ins, attrs)
    (on_sim,) = run_kernel(row.op, ins, attrs, graphrt.sim(0))
    _bitwise_equal(on_sim, want, f"{row.id} on sim")
    strided = run_strided(row.op, ins, attrs)
    if row.op in SUMMING and want.dtype.kind == "f":
        # numpy's pairwise summation follows the memory layout: the order of the additions
        # (not the values summed) changes with the strides.
        assert_close(strided, want, what=f"{row.id} on strided inputs")
    else:
        _bitwise_equal(strided, want, f"{row.id} on strided inputs")


def run_strided(name: str, ins: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The op's lowered kernel on cpu with every input of 2+ dimensions a transposed view."""
    op = get_op(name)
    parsed = op.attrs.model_validate(attrs)
    views = [np.ascontiguousarray(a.T).T if a.ndim >= 2 else a for a in ins]
    assert all(not v.flags.c_contiguous for v in views if sum(d > 1 for d in v.shape) >= 2)
    types = [TensorType(tuple(a.shape), str(a.dtype)) for a in ins]
    data = [a if need else None for a, need in zip(ins, op.needs_data(len(ins)), strict=True)]
    (out_type,) = op.infer(types, parsed, data)
    out = np.empty(out_type.shape, out_type.dtype)
    op.positional(np, parsed, len(views))(*views, out)
    return out


def test_every_op_has_a_row() -> None:
    from graphrt.ops import OPS

    mine = {n for n, o in OPS.items()
            if o.compute.__module__.endswith(("elementwise", "activations"))}
    assert mine == {row.op for row in ROWS}
