"""``from_onnx``: an ONNX model in, an ordinary graphrt bundle out.

The passes, in order: load and check the model (``model.py``), refuse every unsupported
(op, opset) at once (``registry.py``), convert node by node into standard-op steps with
constants folded as they appear (``builder.py`` and ``converters/``), fold batch norms into
convolutions and fuse (``fusion.py``), place steps on devices (``placement.py``), and write
graph, lib and params (``emit.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import replace
from typing import Any

import numpy as np
import orjson

from .._version import __version__
from ..bundle import Bundle, bundle_from_parts, prepare_bundle
from ..errors import ConversionError, GraphrtError
from ..kernels.cpu.jit import direct_conv
from . import converters  # noqa: F401  (registers the converters)
from .builder import Builder, TensorType
from .channels_last import channels_last_layouts
from .emit import Emitted, emit
from .fusion import fold_batch_norms, fuse_steps
from .layout import block_layouts
from .model import LoadedModel, dtype_name, load_model, to_array
from .placement import check_devices, place_steps, placement_decisions
from .qdq import fuse_qdq
from .registry import check_supported, find_converter
from .symbolic import generalize, sample_points, symbolic_bounds
from .symint import SymInt

__all__ = ["Converted", "convert_model", "from_onnx", "item_name"]


class Converted:
    """What conversion made, before it becomes a bundle (used by ``graphrt convert``)."""

    def __init__(self, model: LoadedModel, emitted: Emitted, placement: list[dict[str, Any]],
                 devices: Sequence[str] = ("cpu",),
                 sequences: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self.model = model
        self.sequences = {role: dict(items) for role, items in (sequences or {}).items()}
        """Sequence-typed graph inputs and outputs: ``{"inputs": {name: items}, "outputs":
        {...}}``; item ``i`` of ``name`` is the graph input or output ``name[i]``."""
        self.emitted = emitted
        self.placement = placement
        """One decision per op node: ``{node, func_name, device, reason}``."""
        self.devices = tuple(devices)

    def metadata(self) -> dict[str, Any]:
        model, emitted = self.model, self.emitted
        return {
            "source": {"format": "onnx", "path": model.source, "sha256": model.sha256,
                       "producer": model.producer, "ir_version": int(model.proto.ir_version),
                       "opset_imports": dict(model.opsets),
                       **({"upgraded_from_opset": model.upgraded_from}
                          if model.upgraded_from is not None else {})},
            "converter": f"graphrt {__version__}",
            "memory": {"planned_bytes": emitted.pool_bytes,
                       "lower_bound_bytes": emitted.lower_bound_bytes,
                       "one_buffer_per_entry_bytes": emitted.naive_bytes},
            **({"placement": self.placement} if len(self.devices) > 1 else {}),
            **({"sequences": self.sequences} if self.sequences else {}),
        }


def _given_shape(name: str, shape: Any) -> tuple[int, ...]:
    """``shapes[name]`` as a shape, or a :class:`ConversionError` saying what it should be."""
    if not isinstance(shape, Sequence) or isinstance(shape, str) or not all(
            isinstance(d, int | np.integer) and not isinstance(d, bool) and d >= 0
            for d in shape):
        raise ConversionError(f"shapes[{name!r}] must be a list of non-negative ints, given "
                              f"{shape!r:.100}")
    return tuple(int(d) for d in shape)


def _given_constant(name: str, value: Any, dtype: str | None) -> np.ndarray[Any, Any]:
    """``constants[name]`` as an array of the input's dtype, or a :class:`ConversionError`."""
    try:
        array = np.asarray(value, dtype=dtype)
    except (ValueError, TypeError) as err:
        raise ConversionError(f"constants[{name!r}] cannot be a {dtype or 'tensor'}: {err}"
                              ) from None
    if array.dtype == np.dtype("O"):
        raise ConversionError(f"constants[{name!r}] is not a numeric tensor")
    return array


def _input_type(value_info: Any, fixed: Mapping[str, Sequence[int]],
                dim_bounds: Mapping[str, int], varying: Set[str] = frozenset()) -> TensorType:
    name = value_info.name
    kind = value_info.type.WhichOneof("value")
    if kind != "tensor_type":
        raise ConversionError(f"graph input {name!r} is a {kind or 'value of no type'}; graphrt "
                              "converts tensor inputs only")
    tensor = value_info.type.tensor_type
    dtype = dtype_name(tensor.elem_type, f"graph input {name!r}")
    if name in fixed:
        return TensorType(_given_shape(name, fixed[name]), dtype)
    if not tensor.HasField("shape"):
        raise ConversionError(f"graph input {name!r} has no shape; give it: "
                              f"from_onnx(model, shapes={{{name!r}: [...]}}) (graphrt convert: "
                              f"--shape {name}=D0,D1,...)")
    dims = []
    for axis, dim in enumerate(tensor.shape.dim):
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.dim_param and dim.dim_param in varying:
            dims.append(SymInt.variable(dim.dim_param, int(dim_bounds[dim.dim_param])))
        elif dim.dim_param and dim.dim_param in dim_bounds:
            dims.append(int(dim_bounds[dim.dim_param]))
        else:
            symbol = dim.dim_param or "?"
            raise ConversionError(
                f"graph input {name!r}: dimension {axis} is symbolic ({symbol!r}); give the "
                f"largest size to plan for, from_onnx(model, dim_bounds={{{symbol!r}: 64}}), "
                f"or fix the input's shape, from_onnx(model, shapes={{{name!r}: [...]}}) "
                f"(graphrt convert: --dim {symbol}=64 or --shape {name}=D0,D1,...)")
    return TensorType(tuple(dims), dtype)


def item_name(sequence: str, index: int) -> str:
    """The graph input or output that carries item ``index`` of ONNX sequence ``sequence``.

    >>> item_name("frames", 2)
    'frames[2]'
    """
    return f"{sequence}[{index}]"


def _sequence_input(b: Builder, value_info: Any, fixed: Mapping[str, Any],
                    constants: Mapping[str, Any]) -> str:
    """A sequence-typed graph input as a sequence of graph inputs ``name[0]``, ``name[1]``,
    ... (or of constants): its length and every item's shape are fixed at conversion."""
    name = value_info.name
    elem = value_info.type.sequence_type.elem_type
    if elem.WhichOneof("value") != "tensor_type":
        raise ConversionError(f"graph input {name!r} is a sequence of "
                              f"{elem.WhichOneof('value') or 'untyped values'}; graphrt "
                              "converts sequences of tensors")
    dtype = dtype_name(elem.tensor_type.elem_type, f"graph input {name!r}")
    if name in constants:
        values = constants[name]
        if not isinstance(values, Sequence) or isinstance(values, str | bytes):
            raise ConversionError(f"constants[{name!r}] must be a list of tensors (the "
                                  f"input is a sequence), given {type(values).__name__}")
        return b.sequence([b.constant(_given_constant(item_name(name, i), v, dtype))
                           for i, v in enumerate(values)])
    shapes = fixed.get(name)
    if shapes is None or not isinstance(shapes, Sequence) or isinstance(shapes, str) or any(
            not isinstance(shape, Sequence) or isinstance(shape, str) for shape in shapes):
        raise ConversionError(
            f"graph input {name!r} is a sequence of tensors; give the shape of each item: "
            f"from_onnx(model, shapes={{{name!r}: [[2, 3], [4, 3]]}}) (the length and the "
            f"shapes are fixed at conversion; each item becomes an input {name!r}[i])")
    return b.sequence([b.input(item_name(name, i), TensorType(
        _given_shape(item_name(name, i), shape), dtype)) for i, shape in enumerate(shapes)])


def _convert_nodes(model: LoadedModel, b: Builder,
                   sequences: Mapping[str, str] | None = None) -> dict[str, str]:
    env: dict[str, str] = {name: name for name in b.types}
    env.update(sequences or {})
    b.names.update(env)
    for node in model.nodes:
        conv = find_converter(node)
        assert conv is not None  # check_supported ran first
        missing = [name for name in node.inputs if name and name not in env]
        if missing:
            raise node.fail(f"reads {missing[0]!r}, which no earlier node or input defines")
        view = replace(node, inputs=tuple(env[name] if name else "" for name in node.inputs))
        b.source = node.label
        try:
            outs = conv.fn(b, view)
        except GraphrtError:
            raise
        except Exception as err:  # a converter bug must still name the node
            raise node.fail(f"conversion failed: {type(err).__name__}: {err}") from err
        for k, name in enumerate(node.outputs):
            if not name:
                continue
            if k >= len(outs):
                raise node.fail(f"output {k} ({name!r}) is not supported")
            env[name] = b.names[name] = outs[k]
    return env


def _build(loaded: LoadedModel, shapes: Mapping[str, Sequence[int]],
           dim_values: Mapping[str, int], constants: Mapping[str, Any],
           varying: Set[str] = frozenset(), bounds: Mapping[str, int] | None = None
           ) -> tuple[Builder, list[str], list[str]]:
    """Convert every node at fixed input shapes: the builder, the graph's output values and
    their names (a sequence output gives one per item, ``name[i]``). The dimensions named in
    ``varying`` are traced as :class:`SymInt` variables, ranging up to their ``bounds``."""
    graph = loaded.proto.graph
    b = Builder(opsets=dict(loaded.opsets))
    for tensor in graph.initializer:
        b.constant(to_array(tensor, f"initializer {tensor.name!r}"), name=tensor.name)
    for tensor in graph.sparse_initializer:
        raise ConversionError(f"sparse initializer {tensor.values.name!r} is not supported")
    initializers = {t.name for t in graph.initializer}
    known = {vi.name for vi in graph.input}
    for name in [*constants, *shapes]:
        if name not in known:
            raise ConversionError(f"{name!r} is not a graph input (inputs: "
                                  f"{', '.join(sorted(known - initializers)) or 'none'})")
    sequences: dict[str, str] = {}
    for value_info in graph.input:
        name = value_info.name
        if value_info.type.WhichOneof("value") == "sequence_type":
            sequences[name] = _sequence_input(b, value_info, shapes, constants)
        elif name in constants:
            elem = value_info.type.tensor_type.elem_type
            dtype = dtype_name(elem, f"graph input {name!r}") if elem else None
            b.constant(_given_constant(name, constants[name], dtype), name=name)
        elif name not in initializers:
            b.input(name, _input_type(value_info, shapes, dim_values, varying))
    b.var_ranges.update({name: (1, bound) for name, bound in (bounds or {}).items()
                         if name in varying})
    env = _convert_nodes(loaded, b, sequences)
    outputs, names = [], []
    for value_info in graph.output:
        name = value_info.name
        if name not in env:
            raise ConversionError(f"graph output {name!r} is never computed")
        declared = value_info.type.WhichOneof("value") or "tensor_type"
        if (env[name] in b.sequences) != (declared == "sequence_type"):
            given = "a sequence" if env[name] in b.sequences else "a tensor"
            raise ConversionError(f"graph output {name!r} is {given}, but the model declares "
                                  f"it a {declared.removesuffix('_type')}")
        if env[name] in b.sequences:
            items = b.sequence_items(env[name])
            outputs += items
            names += [item_name(name, i) for i in range(len(items))]
        else:
            outputs.append(env[name])
            names.append(name)
    return b, outputs, names


def convert_model(model: Any, *, shapes: Mapping[str, Sequence[int]] | None = None,
                  dim_bounds: Mapping[str, int] | None = None,
                  constants: Mapping[str, Any] | None = None, fuse: bool = True,
                  devices: Sequence[str] | None = None,
                  placement: Mapping[str, str] | None = None,
                  channels_last: bool = True) -> Converted:
    """Convert without making a bundle (see :func:`from_onnx` for the arguments)."""
    loaded = load_model(model)
    check_supported(loaded.nodes)
    for option, value in (("shapes", shapes), ("dim_bounds", dim_bounds),
                          ("constants", constants), ("placement", placement)):
        if value is not None and not isinstance(value, Mapping):
            raise ConversionError(f"{option} must be a mapping of names, given "
                                  f"{type(value).__name__}")
    shapes, constants = dict(shapes or {}), dict(constants or {})
    bounds = symbolic_bounds(loaded.proto.graph, shapes, constants, dim_bounds or {})
    points = sample_points(bounds)
    varying = {name for name, bound in bounds.items() if bound >= 2}
    built = [_build(loaded, shapes, point, constants, varying, bounds) for point in points]
    b, outputs, names = built[0]
    if len(built) > 1 or b.data_vars:
        generalize(points, [(built_b, outs) for built_b, outs, _ in built], bounds)
    device_types = check_devices(devices)
    kinds = device_types or ["cpu"]
    if fuse and "cuda" not in kinds:  # on cuda, cuDNN's float convolutions are the fast path
        fuse_qdq(b, outputs)
    if fuse:
        fold_batch_norms(b, outputs)
    labels = {node.label: (node.op_type, node.name) for node in loaded.nodes}
    reasons = place_steps(b, kinds, placement or {}, labels)
    if fuse and channels_last and "cuda" in kinds:  # cuDNN's fast convolutions read NHWC
        placed = {id(step): reason for step, reason in zip(b.steps, reasons, strict=True)}
        channels_last_layouts(b, outputs)
        reasons = [placed.get(id(step), "a layout transform between NCHW and the NHWC of "
                              "cuda's convolutions") for step in b.steps]
    if fuse and direct_conv() is not None:  # the compiled convolutions read blocked data
        block_layouts(b, outputs)
    groups = fuse_steps(b, outputs) if fuse else [[i] for i in range(len(b.steps))]
    emitted = emit(b, outputs, groups, names, kinds)
    decisions = placement_decisions(emitted.nodes, reasons)
    return Converted(loaded, emitted, decisions, kinds, _sequence_io(loaded, b.inputs, names))


def _sequence_io(loaded: LoadedModel, inputs: Sequence[str], outputs: Sequence[str]
                 ) -> dict[str, dict[str, int]]:
    """How many items each sequence-typed graph input and output became."""
    graph = loaded.proto.graph
    found: dict[str, dict[str, int]] = {}
    for role, infos, names in (("inputs", graph.input, inputs), ("outputs", graph.output,
                                                                  outputs)):
        for value_info in infos:
            if value_info.type.WhichOneof("value") == "sequence_type":
                prefix = value_info.name + "["
                found.setdefault(role, {})[value_info.name] = sum(
                    1 for name in names if name.startswith(prefix))
    return found


def from_onnx(model: Any, *, shapes: Mapping[str, Sequence[int]] | None = None,
              dim_bounds: Mapping[str, int] | None = None,
              constants: Mapping[str, Any] | None = None, fuse: bool = True,
              devices: Sequence[str] | None = None,
              placement: Mapping[str, str] | None = None,
              channels_last: bool = True) -> Bundle:
    """Convert an ONNX model into a bundle (graph, declarative lib, params) ready to run.

    Args:
        model: a path, the serialized bytes, or an ``onnx.ModelProto``.
        shapes: input name → concrete shape, overriding what the model declares; for a
            sequence-typed input, the list of its items' shapes (item ``i`` becomes graph
            input ``name[i]``; a sequence output becomes outputs ``name[i]`` likewise).
        dim_bounds: symbolic dimension name (``dim_param``) → the size to plan for.
        constants: graph input name → value, frozen into the model (e.g. a shape input).
        fuse: fuse elementwise and injective ops into their producers (TVM's rule) and fold
            batch norms into convolutions; ``False`` keeps one node per standard op.
        devices: device types in order of preference (``["cuda", "cpu"]``): each node goes to
            the first whose kernels implement it. Default: everything on the fallback device.
        placement: ONNX op type or node name → device type, overriding the preference.
        channels_last: with ``fuse``, lay the tensors between cuda convolutions out NHWC
            (cuDNN's tensor cores read it; :mod:`graphrt.onnx.channels_last`); ``False``
            keeps the model's NCHW.

    Returns:
        A :class:`graphrt.Bundle` held in memory (``kind == "memory"``); ``.create("cpu")``
        runs it and ``.save(path)`` writes it. Its metadata records the source model's
        SHA-256, opset imports and producer, and the planned memory against its lower bound.

    Raises:
        ConversionError: every unsupported (op, opset) listed at once, a symbolic dimension
            without a size, a value that must be constant but is not, a malformed model.

    Example:
        >>> import graphrt
        >>> bundle = graphrt.from_onnx("model.onnx")  # doctest: +SKIP
        >>> (y,) = bundle.create("cpu")(x=x)  # doctest: +SKIP
    """
    converted = convert_model(model, shapes=shapes, dim_bounds=dim_bounds, constants=constants,
                              fuse=fuse, devices=devices, placement=placement,
                              channels_last=channels_last)
    emitted = converted.emitted
    parts = prepare_bundle(emitted.graph, orjson.dumps(emitted.lib), emitted.params,
                           converted.metadata())
    return bundle_from_parts(parts, label=converted.model.source)
