"""Hostile ONNX models for the importer's fuzz targets: seeded mutations of valid models, and
random single-op models with hostile attributes and inputs.

The seeds are ONNX's own backend test models (about 1,900 single-node and small models, built
in memory by the installed ``onnx``), filtered to the ones graphrt converts so that mutations
reach the converters. Mutations edit the ``ModelProto`` (attributes, declared shapes and types,
initializers and their storage, wiring, op types, opsets) or the serialized bytes.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import graphrt

from .mutators import mutate_bytes

MAX_DIMS_DECLARED = (0, 1, 2, 3, 5, 2**31, 2**40, 2**62, -1, -(2**40))
HOSTILE_INTS = (0, 1, -1, 2, 3, -2, 7, 255, 2**31 - 1, 2**31, -(2**31), 2**40, 2**62,
                2**63 - 1, -(2**63), 10**6, 10**9)
HOSTILE_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, 3.4e38, -3.4e38, math.nan, math.inf,
                  -math.inf, 1e9, 2.0**62)
HOSTILE_STRINGS = ("", "constant", "reflect", "edge", "wrap", "linear", "nearest", "cubic",
                   "bilinear", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "DCR", "CRD",
                   "half_pixel", "asymmetric", "align_corners", "tf_crop_and_resize",
                   "round_prefer_floor", "floor", "ceil", "none", "tanh", "gelu", "silu",
                   "Sigmoid", "Relu", "bogus", "x" * 1000, "\x00", "é", "float", "sum", "mean",
                   "max", "min", "mul", "add")
ELEM_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT64,
              TensorProto.INT32, TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE,
              TensorProto.UINT8, TensorProto.INT8, TensorProto.BFLOAT16, TensorProto.STRING,
              TensorProto.COMPLEX64, 0, 999)
TYPE_STRS = {"tensor(float)": TensorProto.FLOAT, "tensor(double)": TensorProto.DOUBLE,
             "tensor(float16)": TensorProto.FLOAT16, "tensor(bfloat16)": TensorProto.BFLOAT16,
             "tensor(int64)": TensorProto.INT64, "tensor(int32)": TensorProto.INT32,
             "tensor(int16)": TensorProto.INT16, "tensor(int8)": TensorProto.INT8,
             "tensor(uint8)": TensorProto.UINT8, "tensor(uint16)": TensorProto.UINT16,
             "tensor(uint32)": TensorProto.UINT32, "tensor(uint64)": TensorProto.UINT64,
             "tensor(bool)": TensorProto.BOOL}
MAX_SEED_BYTES = 1 << 20


# -- seeds ------------------------------------------------------------------------------------


@cache
def seed_models() -> tuple[bytes, ...]:
    """ONNX's backend test models that graphrt converts, serialized (sorted by name)."""
    from onnx.backend.test.loader import load_model_tests

    from graphrt.onnx.model import load_model
    from graphrt.onnx.registry import check_supported

    seeds = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [case for kind in ("node", "simple", "pytorch-operator")
                 for case in load_model_tests(kind=kind)]
    for case in sorted(cases, key=lambda c: c.name):
        model = case.model if case.model is not None else onnx.load(
            f"{case.model_dir}/model.onnx")
        data = model.SerializeToString()
        if len(data) > MAX_SEED_BYTES:
            continue
        try:
            check_supported(load_model(data).nodes)
        except graphrt.GraphrtError:
            continue
        seeds.append(data)
    return tuple(seeds)


@cache
def single_op_table() -> tuple[tuple[str, str, int, int], ...]:
    """``(domain, op_type, first opset, last opset)`` of every converter with an ONNX schema."""
    from graphrt.onnx.registry import supported_table

    rows = []
    for op_type, first, last in supported_table():
        domain, _, name = op_type.rpartition(".")
        if first > last:
            continue
        try:
            onnx.defs.get_schema(name, last, domain)
        except onnx.defs.SchemaError:
            continue
        rows.append((domain, name, first, last))
    return tuple(rows)


# -- values -----------------------------------------------------------------------------------


def hostile_int(rng: random.Random) -> int:
    if rng.random() < 0.2:
        return rng.randint(-8, 8)
    return rng.choice(HOSTILE_INTS)


def hostile_ints(rng: random.Random) -> list[int]:
    roll = rng.random()
    if roll < 0.1:
        return []
    if roll < 0.15:
        return [hostile_int(rng)] * rng.choice((9, 65, 1000))
    return [hostile_int(rng) if rng.random() < 0.4 else rng.randint(0, 3)
            for _ in range(rng.randint(1, 8))]


def hostile_float(rng: random.Random) -> float:
    return rng.choice(HOSTILE_FLOATS) if rng.random() < 0.7 else rng.uniform(-4, 4)


def hostile_array(rng: random.Random, elem: int, shape: tuple[int, ...]) -> np.ndarray:
    """Values of ``shape`` (at most a few thousand elements) of ONNX type ``elem``."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    size = math.prod(shape)
    if dtype.kind == "b":
        values: list[Any] = [rng.random() < 0.5 for _ in range(size)]
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [min(max(hostile_int(rng), int(info.min)), int(info.max))
                  if rng.random() < 0.3 else rng.randint(0, 3) for _ in range(size)]
    else:  # float16, bfloat16, float32, float64
        values = [hostile_float(rng) if rng.random() < 0.3 else rng.uniform(-3, 3)
                  for _ in range(size)]
    with np.errstate(all="ignore"):
        kind = dtype.kind if dtype.kind in "iub" else "f"
        return np.array(values, dtype={"f": np.float64, "b": bool}.get(kind, np.int64)
                        ).astype(dtype).reshape(shape)


def small_shape(rng: random.Random) -> tuple[int, ...]:
    rank = rng.choice((0, 1, 1, 2, 2, 3, 3, 4, 4, 5))
    return tuple(rng.choice((1, 1, 2, 2, 3, 4, 0)) if rng.random() < 0.9 else
                 rng.choice((5, 8, 16)) for _ in range(rank))


def hostile_attribute(rng: random.Random, name: str, kind: int) -> AttributeProto:
    """An attribute named ``name`` of type ``kind`` (now and then of another type)."""
    if rng.random() < 0.05:
        kind = rng.choice((AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING,
                           AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.TENSOR))
    if kind == AttributeProto.INT:
        return helper.make_attribute(name, hostile_int(rng))
    if kind == AttributeProto.FLOAT:
        return helper.make_attribute(name, hostile_float(rng))
    if kind == AttributeProto.STRING:
        return helper.make_attribute(name, rng.choice(HOSTILE_STRINGS))
    if kind == AttributeProto.INTS:
        return helper.make_attribute(name, hostile_ints(rng), attr_type=AttributeProto.INTS)
    if kind == AttributeProto.FLOATS:
        return helper.make_attribute(name, [hostile_float(rng) for _ in range(
            rng.randint(0, 6))], attr_type=AttributeProto.FLOATS)
    if kind == AttributeProto.STRINGS:
        return helper.make_attribute(name, [rng.choice(HOSTILE_STRINGS) for _ in range(
            rng.randint(0, 4))], attr_type=AttributeProto.STRINGS)
    if kind == AttributeProto.TENSOR:
        elem = rng.choice(ELEM_TYPES[:11])
        array = hostile_array(rng, elem, small_shape(rng)[:2])
        return helper.make_attribute(name, numpy_helper.from_array(array))
    return helper.make_attribute(name, hostile_int(rng))


# -- mutations of a valid model ---------------------------------------------------------------


def _pick_node(model: onnx.ModelProto, rng: random.Random) -> onnx.NodeProto | None:
    nodes = model.graph.node
    return nodes[rng.randrange(len(nodes))] if nodes else None


def _attr(model: onnx.ModelProto, rng: random.Random) -> str:
    node = _pick_node(model, rng)
    if node is None:
        return "attr: no node"
    if node.attribute and rng.random() < 0.75:
        index = rng.randrange(len(node.attribute))
        old = node.attribute[index]
        if old.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            return "attr: a graph attribute, left"
        new = hostile_attribute(rng, old.name, old.type)
        node.attribute[index].CopyFrom(new)
        return f"attr {node.op_type}.{old.name} = {_show(new)}"
    try:
        schema = onnx.defs.get_schema(node.op_type, _opset(model), node.domain)
        names = sorted(schema.attributes)
    except onnx.defs.SchemaError:
        names = []
    if not names:
        return "attr: none to add"
    name = rng.choice(names)
    new = hostile_attribute(rng, name, int(schema.attributes[name].type))
    del node.attribute[:]
    node.attribute.append(new)
    return f"attr {node.op_type}.{name} := {_show(new)} (others removed)"


def _show(attr: AttributeProto) -> str:
    value = helper.get_attribute_value(attr)
    text = repr(value.dims if isinstance(value, TensorProto) else value)
    return text if len(text) < 80 else text[:80] + "..."


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _dim(model: onnx.ModelProto, rng: random.Random) -> str:
    values = [*model.graph.input, *model.graph.output]
    if not values:
        return "dim: no value"
    value = rng.choice(values)
    tensor = value.type.tensor_type
    roll = rng.random()
    if roll < 0.1:
        tensor.ClearField("shape")
        return f"dim: {value.name} shape removed"
    if roll < 0.2:
        tensor.elem_type = rng.choice(ELEM_TYPES)
        return f"dim: {value.name} elem_type {tensor.elem_type}"
    if roll < 0.3:
        tensor.shape.dim.add().dim_value = rng.choice((1, 2, 0))
        return f"dim: {value.name} one more dim"
    dims = tensor.shape.dim
    if not dims:
        return "dim: a scalar, left"
    dim = dims[rng.randrange(len(dims))]
    if rng.random() < 0.3:
        dim.dim_param = rng.choice(("N", "batch", "", "x" * 300))
        return f"dim: {value.name} symbolic {dim.dim_param[:10]!r}"
    dim.dim_value = rng.choice(MAX_DIMS_DECLARED)
    return f"dim: {value.name} {dim.dim_value}"


def _init(model: onnx.ModelProto, rng: random.Random) -> str:
    inits = model.graph.initializer
    if not inits:
        return "init: none"
    tensor = inits[rng.randrange(len(inits))]
    roll = rng.random()
    if roll < 0.2 and tensor.dims:
        tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice(MAX_DIMS_DECLARED[:6])
        return f"init {tensor.name}: dims {list(tensor.dims)}"
    if roll < 0.3:
        tensor.data_type = rng.choice(ELEM_TYPES)
        return f"init {tensor.name}: data_type {tensor.data_type}"
    if roll < 0.4 and tensor.raw_data:
        tensor.raw_data = tensor.raw_data[:rng.randrange(len(tensor.raw_data))]
        return f"init {tensor.name}: raw_data cut to {len(tensor.raw_data)}"
    if roll < 0.5:
        tensor.data_location = TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", rng.choice(("secret.bin", "../../etc/passwd",
                                                    "/etc/hostname", "", "x"))),
                           ("offset", str(rng.choice((0, -1, 2**62)))),
                           ("length", str(rng.choice((4, 2**40, -1))))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        return f"init {tensor.name}: external {next(iter(tensor.external_data)).value!r}"
    try:
        array = numpy_helper.to_array(tensor)
    except Exception:
        return f"init {tensor.name}: unreadable, left"
    if array.dtype.kind not in "fiub" or array.size > 4096:
        return f"init {tensor.name}: left"
    new = hostile_array(rng, tensor.data_type, array.shape)
    tensor.CopyFrom(numpy_helper.from_array(new, tensor.name))
    return f"init {tensor.name}: hostile values"


def _wire(model: onnx.ModelProto, rng: random.Random) -> str:
    node = _pick_node(model, rng)
    if node is None:
        return "wire: no node"
    names = [v.name for v in model.graph.input] + [o for n in model.graph.node for o in n.output]
    roll = rng.random()
    if roll < 0.3 and node.input:
        index = rng.randrange(len(node.input))
        node.input[index] = rng.choice([*names, "", "nowhere"])
        return f"wire: {node.op_type} input {index} <- {node.input[index]!r}"
    if roll < 0.5:
        node.input.append(rng.choice([*names, ""]))
        return f"wire: {node.op_type} one more input"
    if roll < 0.6 and node.input:
        del node.input[-1]
        return f"wire: {node.op_type} last input dropped"
    if roll < 0.8 and node.output:
        node.output.append(rng.choice([*names, "extra"]))
        return f"wire: {node.op_type} one more output"
    if len(model.graph.node) > 1:
        model.graph.node.remove(node)
        return f"wire: {node.op_type} removed"
    return "wire: left"


def _op(model: onnx.ModelProto, rng: random.Random) -> str:
    node = _pick_node(model, rng)
    if node is None:
        return "op: no node"
    domain, name, _, _ = rng.choice(single_op_table())
    old = node.op_type
    node.op_type, node.domain = name, domain
    return f"op: {old} -> {name}"


def _opset_change(model: onnx.ModelProto, rng: random.Random) -> str:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = rng.choice((1, 6, 7, 9, 11, 13, 17, 18, 21, 23, 25, 27, 99, -1))
            return f"opset {opset.version}"
    return "opset: none"


MUTATIONS: tuple[Callable[[onnx.ModelProto, random.Random], str], ...] = (
    _attr, _attr, _attr, _dim, _dim, _init, _init, _wire, _op, _opset_change)


def mutated_model(seed: bytes, rng: random.Random) -> tuple[bytes | onnx.ModelProto, str]:
    """One seed model with 1-3 mutations, as a ModelProto or (now and then) mutated bytes."""
    if rng.random() < 0.15:
        data, done = mutate_bytes(seed, rng)
        return data, "bytes: " + ", ".join(done)
    model = onnx.ModelProto()
    model.ParseFromString(seed)
    done = [rng.choice(MUTATIONS)(model, rng) for _ in range(rng.choice((1, 1, 2, 3)))]
    return model, "; ".join(done)


# -- random single-op models ------------------------------------------------------------------


def single_op_model(rng: random.Random) -> tuple[onnx.ModelProto, str]:
    """A one-node model of a supported op at an opset it is converted at: every input declared
    or given as a hostile initializer, every attribute now and then hostile."""
    domain, op_type, first, last = rng.choice(single_op_table())
    opset = rng.randint(first, last)
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        schema = onnx.defs.get_schema(op_type, last, domain)
    constraints = {c.type_param_str: list(c.allowed_type_strs)
                   for c in schema.type_constraints}
    chosen: dict[str, int] = {}
    inputs, graph_inputs, inits = [], [], []
    for index, formal in enumerate(schema.inputs):
        option = formal.option
        if option == onnx.defs.OpSchema.FormalParameterOption.Optional and rng.random() < 0.4:
            inputs.append("")
            continue
        count = rng.randint(1, 3) if option == (
            onnx.defs.OpSchema.FormalParameterOption.Variadic) else 1
        for k in range(count):
            name = f"in{index}_{k}"
            elem = _elem_for(formal.type_str, constraints, chosen, rng)
            shape = small_shape(rng)
            if rng.random() < 0.4 or (elem in (TensorProto.INT64, TensorProto.INT32) and (
                    rng.random() < 0.6)):
                inits.append(numpy_helper.from_array(hostile_array(rng, elem, shape), name))
            else:
                declared = list(shape)
                if declared and rng.random() < 0.1:
                    declared[rng.randrange(len(declared))] = rng.choice(MAX_DIMS_DECLARED)
                graph_inputs.append(helper.make_tensor_value_info(name, elem, declared))
            inputs.append(name)
    while inputs and not inputs[-1]:
        inputs.pop()
    attrs = [hostile_attribute(rng, name, int(attr.type))
             for name, attr in sorted(schema.attributes.items())
             if attr.required or rng.random() < 0.5]
    n_out = max(len(schema.outputs), 1)
    outputs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op_type, inputs, outputs, name=f"fuzz_{op_type.lower()}",
                            domain=domain)
    node.attribute.extend(attrs)
    graph = helper.make_graph([node], "fuzz", graph_inputs,
                              [onnx.ValueInfoProto(name=o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)]
                              + ([helper.make_opsetid("", 21)] if domain else []), ir_version=8)
    _type_outputs(model)
    label = (f"{domain + '.' if domain else ''}{op_type}-{opset}("
             + ", ".join(f"{t.name}:{list(t.dims)}" for t in inits) + "; "
             + ", ".join(a.name + "=" + _show(a) for a in attrs) + ")")
    return model, label


def _elem_for(type_str: str, constraints: dict[str, list[str]], chosen: dict[str, int],
              rng: random.Random) -> int:
    if type_str in chosen and rng.random() < 0.95:
        return chosen[type_str]
    allowed = [TYPE_STRS[t] for t in constraints.get(type_str, [type_str]) if t in TYPE_STRS]
    elem = rng.choice(allowed) if allowed and rng.random() < 0.95 else rng.choice(ELEM_TYPES[:11])
    chosen[type_str] = elem
    return elem


def _type_outputs(model: onnx.ModelProto) -> None:
    """Every output typed float of unknown shape: the checker wants a type, graphrt computes
    its own. (Not ONNX's shape inference: it crashes the process on some of these models.)"""
    for output in model.graph.output:
        output.type.tensor_type.elem_type = TensorProto.FLOAT
        output.type.tensor_type.shape.SetInParent()


def dim_bounds(model: Any, rng: random.Random) -> dict[str, Any] | None:
    """Bounds for the symbolic dims a model declares: small, now and then hostile."""
    if not isinstance(model, onnx.ModelProto):
        return None
    names = {d.dim_param for vi in model.graph.input for d in vi.type.tensor_type.shape.dim
             if d.dim_param}
    return {name: rng.choice((1, 2, 3, 4, 0, -1, 2**40)) if rng.random() < 0.2 else
            rng.randint(1, 4) for name in names} or None
