"""Loading an ONNX model and reading its nodes: opsets, attributes, tensors, dtypes.

Everything that touches ``onnx`` protobufs directly lives here, so the rest of the frontend
works with plain Python values and numpy arrays.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConversionError, abridge, argument_error, describe
from ..files import open_regular, read_regular
from ..schema.dtypes import LOW_PRECISION, parse_dtype

__all__ = [
    "MAX_OPSET",
    "MIN_OPSET",
    "LoadedModel",
    "OnnxNode",
    "dtype_name",
    "load_model",
    "require_onnx",
    "to_array",
]

MIN_OPSET = 7
"""The oldest default-domain opset the frontend converts."""

try:  # the newest opset the installed onnx defines
    import onnx as _onnx_probe

    MAX_OPSET = int(_onnx_probe.defs.onnx_opset_version())
except ImportError:  # pragma: no cover - onnx is an optional extra
    MAX_OPSET = 0

_DEFAULT_DOMAINS = ("", "ai.onnx")
_ABSENT = object()


def require_onnx() -> Any:
    """The ``onnx`` module, or a :class:`ConversionError` that says how to install it."""
    try:
        import onnx
    except ImportError:
        raise ConversionError("converting ONNX models needs the 'onnx' package: "
                              "pip install 'graphrt[onnx]'") from None
    return onnx


# ONNX TensorProto data type → numpy dtype name graphrt has (None: graphrt has no such type).
_DTYPES: dict[int, str] = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
    **{code: name for code, name in {
        17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz",
        21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu", 25: "uint2",
        26: "int2"}.items() if name in LOW_PRECISION},  # those the installed ml_dtypes has
}

_PACKED_BITS: dict[int, int] = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}
"""Bits per element of the ONNX types a TensorProto packs several to a byte (UINT4, INT4,
FLOAT4E2M1, UINT2, INT2); graphrt unpacks them to one byte each when it reads them."""


def dtype_name(elem_type: int, where: str) -> str:
    """The graphrt dtype of an ONNX element type (FLOAT8E4M3FN is ``"float8_e4m3fn"``, INT4
    ``"int4"``: ml_dtypes' names).

    Raises:
        ConversionError: a type graphrt has no dtype for (string, complex, float6, ...).
    """
    name = _DTYPES.get(elem_type)
    if name is None:
        onnx = require_onnx()
        try:
            shown = onnx.TensorProto.DataType.Name(elem_type)
        except ValueError:
            shown = str(elem_type)
        raise ConversionError(f"{where}: element type {shown} is not supported (graphrt has "
                              f"{', '.join(sorted(set(_DTYPES.values())))})")
    return name


def to_array(tensor: Any, where: str) -> np.ndarray[Any, Any]:
    """A TensorProto as a numpy array of a graphrt dtype (a copy it owns): float8, float4,
    int4 and int2 tensors as ml_dtypes arrays, one element a byte (packed ones unpacked)."""
    onnx = require_onnx()
    name = dtype_name(tensor.data_type, where)
    try:
        array = onnx.numpy_helper.to_array(tensor)
    except Exception as err:  # onnx raises ValueError, TypeError, ... on malformed tensors
        raise ConversionError(f"{where}: cannot read tensor {tensor.name!r}: {err}") from None
    if tensor.data_type == 16:  # bfloat16 comes back as its own dtype or as uint16 bits
        import ml_dtypes

        if array.dtype != ml_dtypes.bfloat16:
            array = array.view(ml_dtypes.bfloat16)
    elif name in LOW_PRECISION and array.dtype != parse_dtype(name).numpy:
        # onnx < 1.18 gives float32 values or raw codes in dtypes of its own
        raise ConversionError(f"{where}: tensor {tensor.name!r} is {name}, which onnx "
                              f"{onnx.__version__} reads as {array.dtype}: reading it needs "
                              "onnx >= 1.18 (ml_dtypes arrays)")
    return np.array(array, copy=True)


@dataclass(frozen=True)
class OnnxNode:
    """One ONNX node as the converters see it.

    Attributes:
        op_type: the operator (``"Conv"``).
        name: the node's name, or ``"<op_type> #<index>"`` when the model gives none.
        inputs: input value names; ``""`` marks an omitted optional input.
        outputs: output value names; ``""`` marks an output the model does not use.
        attrs: attribute name → Python value (ints, floats, str, lists, numpy arrays for
            tensors, :class:`Any` for graphs).
        opset: the model's opset for this node's domain.
        index: position in the graph.
    """

    op_type: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    opset: int
    index: int

    @property
    def label(self) -> str:
        """How errors name the node: ``node 3 'conv1' (Conv)``."""
        return f"node {self.index} {self.name!r} ({self.op_type})"

    def attr(self, key: str, default: Any = _ABSENT) -> Any:
        """Attribute ``key``, or ``default``; a required one that is missing is an error."""
        if key in self.attrs:
            return self.attrs[key]
        if default is _ABSENT:
            raise ConversionError(f"{self.label}: required attribute {key!r} is missing")
        return default

    def input(self, index: int) -> str | None:
        """Input ``index``'s value name, or None when it is omitted."""
        if index < len(self.inputs) and self.inputs[index]:
            return self.inputs[index]
        return None

    def fail(self, problem: str) -> ConversionError:
        """A :class:`ConversionError` naming this node (a problem quoting thousands of
        attribute values is cut in the middle: its head and its end stay readable)."""
        return ConversionError(f"{self.label}: {abridge(problem)}")


def _attribute(attr: Any, where: str) -> Any:
    onnx = require_onnx()
    value = onnx.helper.get_attribute_value(attr)
    kind = attr.type
    if kind == onnx.AttributeProto.STRING:
        return value.decode("utf-8", "replace")
    if kind == onnx.AttributeProto.STRINGS:
        return [v.decode("utf-8", "replace") for v in value]
    if kind == onnx.AttributeProto.TENSOR:
        return to_array(value, f"{where} attribute {attr.name!r}")
    if kind in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
        return list(value)
    if kind == onnx.AttributeProto.FLOAT:
        return float(value)
    if kind == onnx.AttributeProto.INT:
        return int(value)
    return value


@dataclass(frozen=True)
class LoadedModel:
    """A checked ONNX model and what the frontend needs to know about it.

    Attributes:
        proto: the ``onnx.ModelProto``.
        opset: the default domain's opset version.
        opsets: every imported domain's version (``""`` is the default domain).
        sha256: SHA-256 of the serialized model (recorded in the bundle manifest).
        nodes: the graph's nodes, in order.
        source: where the model came from, for messages and metadata.
        upgraded_from: the model's own opset when it was older than :data:`MIN_OPSET` and
            ONNX's version converter upgraded it, else None.
    """

    proto: Any
    opset: int
    opsets: Mapping[str, int]
    sha256: str
    nodes: tuple[OnnxNode, ...]
    source: str
    upgraded_from: int | None = None

    @property
    def producer(self) -> str:
        """``producer_name producer_version`` of the model, or ``""``."""
        return f"{self.proto.producer_name} {self.proto.producer_version}".strip()


def _read(model: Any) -> tuple[Any, bytes, str]:
    onnx = require_onnx()
    if isinstance(model, onnx.ModelProto):
        _load_external_data(model, None, "<ModelProto>")  # refuses any: there is no folder
        return model, model.SerializeToString(), "<ModelProto>"
    if isinstance(model, bytes | bytearray | memoryview):
        raw, source = bytes(model), "<bytes>"
    elif isinstance(model, str | os.PathLike):
        path = Path(model)
        if not os.path.lexists(path):
            raise ConversionError(f"ONNX model {describe(os.fspath(model), 200)}: no such file")
        raw, source = read_regular(path, "ONNX model", ConversionError), str(path)
    else:
        argument_error("from_onnx(model)", "a path, bytes or an onnx.ModelProto", model)
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(raw)
    except Exception as err:  # protobuf's DecodeError
        raise ConversionError(f"{source}: not an ONNX model ({err})") from None
    _load_external_data(proto, path.parent if isinstance(model, str | os.PathLike) else None,
                        source)
    return proto, raw, source


def _tensors(graph: Any) -> Iterator[Any]:
    """Every TensorProto of ``graph``: initializers, and tensors in node attributes, in
    subgraphs too."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _tensors(attr.g)
            for sub in attr.graphs:
                yield from _tensors(sub)


def _load_external_data(proto: Any, folder: Path | None, source: str) -> None:
    """Read the tensors the model stores in files of its own folder, each confined to that
    folder and read only as far as its shape and dtype need (onnx's own loader reads a whole
    file, relative to the current directory for a model given as bytes).

    Raises:
        ConversionError: a model given as bytes or a ModelProto names external data (there is
            no folder to read it from), or a tensor's file is outside the model's folder, not a
            regular file, shorter than the tensor, or its declared length disagrees with the
            tensor's size; nothing is read then beyond the tensor that failed.
    """
    onnx = require_onnx()
    helper = onnx.external_data_helper
    for tensor in _tensors(proto.graph):
        if not helper.uses_external_data(tensor):
            continue
        try:
            info = helper.ExternalDataInfo(tensor)
        except (ValueError, TypeError) as err:  # offset or length not an integer
            raise ConversionError(f"{source}: tensor {describe(tensor.name)}: malformed "
                                  f"external data entries ({err})") from None
        where = (f"{source}: tensor {describe(tensor.name)} stores its data in "
                 f"{describe(info.location)}")
        if folder is None:
            raise ConversionError(f"{where}, but a model given as bytes or a ModelProto has no "
                                  "folder to read it from: give the model file's path")
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
        except (KeyError, TypeError, ValueError):
            raise ConversionError(f"{where}: its element type {tensor.data_type} cannot be "
                                  "stored externally") from None
        if dtype.kind in "OSU":
            raise ConversionError(f"{where}: string tensors cannot be stored externally")
        count = 1
        for dim in tensor.dims:
            if dim < 0:
                raise ConversionError(f"{where}: its shape {list(tensor.dims)} is negative")
            count *= int(dim)
        bits = _PACKED_BITS.get(tensor.data_type)
        need = count * dtype.itemsize if bits is None else (count * bits + 7) // 8
        if info.length and int(info.length) != need:
            raise ConversionError(f"{where}: its length {info.length} is not the {need} bytes "
                                  f"of its shape {list(tensor.dims)} and dtype {dtype.name}")
        root = folder.resolve()
        target = (root / info.location).resolve()
        if not info.location or os.path.isabs(info.location) or not target.is_relative_to(root):
            raise ConversionError(f"{where}, which is not a file inside the model's folder")
        offset = int(info.offset or 0)
        with open_regular(target, "external tensor data", ConversionError) as file:
            file.seek(offset)
            data = file.read(need)
        if len(data) != need:
            raise ConversionError(f"{where} at offset {offset}: it holds {len(data)} bytes "
                                  f"there, the tensor needs {need}")
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def load_model(model: Any) -> LoadedModel:
    """Read and check an ONNX model: a path, bytes or an ``onnx.ModelProto``.

    A model older than :data:`MIN_OPSET` (opset 6 PyTorch exports) is upgraded with ONNX's
    version converter first.

    Raises:
        ConversionError: not an ONNX model, no default-domain opset, an opset newer than
            :data:`MAX_OPSET` or one the version converter cannot upgrade, or a graph ONNX's
            checker refuses.
    """
    onnx = require_onnx()
    proto, raw, source = _read(model)
    if not proto.HasField("graph"):
        raise ConversionError(f"{source}: the model has no graph")
    opsets = {o.domain if o.domain != "ai.onnx" else "": int(o.version)
              for o in proto.opset_import}
    if "" not in opsets:
        if proto.ir_version and proto.ir_version < 3:
            opsets[""] = 1
        elif opsets and not any(node.domain in _DEFAULT_DOMAINS for node in proto.graph.node):
            opsets[""] = MAX_OPSET  # only other domains' ops (ai.onnx.ml): none to version
        else:
            raise ConversionError(f"{source}: the model imports no default-domain opset")
    opset = opsets[""]
    upgraded_from = None
    if opset < MIN_OPSET:
        proto, upgraded_from = _upgrade(proto, opset, source), opset
        opsets[""] = opset = MIN_OPSET
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ConversionError(f"{source}: opset {opset} of the default domain is not supported "
                              f"(graphrt converts opsets {MIN_OPSET} to {MAX_OPSET}; convert "
                              "older models with onnx.version_converter.convert_version)")
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as err:
        raise ConversionError(f"{source}: the ONNX checker refuses the model: "
                              f"{str(err).splitlines()[0][:500]}") from None
    except ValueError as err:  # e.g. a model over 2 GB given as a proto
        raise ConversionError(f"{source}: {err}") from None
    nodes = []
    for index, node in enumerate(proto.graph.node):
        name = node.name or f"{node.op_type} #{index}"
        where = f"node {index} {name!r} ({node.op_type})"
        domain = node.domain if node.domain != "ai.onnx" else ""
        attrs = {a.name: _attribute(a, where) for a in node.attribute}
        nodes.append(OnnxNode(node.op_type if not domain else f"{domain}.{node.op_type}", name,
                              tuple(node.input), tuple(node.output), attrs,
                              opsets.get(domain, 0), index))
    return LoadedModel(proto, opset, opsets, hashlib.sha256(raw).hexdigest(), tuple(nodes),
                       source, upgraded_from)


def _upgrade(proto: Any, opset: int, source: str) -> Any:
    """An opset < MIN_OPSET model rewritten by ONNX's own version converter, which carries each
    op's semantics over (e.g. opset 6's ``broadcast`` attribute to numpy broadcasting)."""
    onnx = require_onnx()
    try:
        return onnx.version_converter.convert_version(proto, MIN_OPSET)
    except Exception as err:  # the converter raises RuntimeError/ValueError on what it cannot do
        raise ConversionError(
            f"{source}: opset {opset} is older than the oldest graphrt converts ({MIN_OPSET}) "
            f"and ONNX's version converter could not upgrade it: {str(err)[:300]}") from None
