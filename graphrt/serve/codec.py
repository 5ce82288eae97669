"""Infer requests and responses of the Open Inference Protocol's REST API, with the binary
tensor data extension that ``tritonclient`` uses.

A request body is a JSON header, optionally followed by raw tensor bytes: the
``Inference-Header-Content-Length`` HTTP header gives the JSON's length, and each input sent in
binary says how many bytes it takes (``parameters.binary_data_size``), in input order. A
response is encoded the same way when an output asks for binary data (``parameters.binary_data``
on the output, or ``binary_data_output`` on the request).

Example:
    >>> import orjson
    >>> body = orjson.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2],
    ...                                  "data": [1, 2]}]})
    >>> parse_body(body, None)["inputs"][0]["name"]
    'x'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
import orjson

from ..errors import RequestError, abridge, describe
from .datatypes import graphrt_dtype
from .models import ServedModel, TensorInfo

__all__ = ["InferRequest", "OutputRequest", "check_tensor", "decode_request", "encode_response",
           "parse_body", "requested_outputs", "tensor_from_bytes", "tensor_from_data"]

_MAX_ID = 256


@dataclass(frozen=True)
class OutputRequest:
    """One output the response carries, and whether as binary data."""

    name: str
    binary: bool


@dataclass(frozen=True)
class InferRequest:
    """A decoded, checked infer request.

    Attributes:
        id: the request's ``id``, echoed in the response.
        inputs: every model input, as a host array of the model's dtype and a fitting shape.
        outputs: the outputs to return, in the order to return them.
        timeout_s: the request's own ``parameters.timeout`` (microseconds in the protocol),
            or None.
    """

    id: str | None
    inputs: dict[str, np.ndarray[Any, Any]]
    outputs: tuple[OutputRequest, ...]
    timeout_s: float | None


def _bad(message: str) -> RequestError:
    return RequestError(400, message)


def parse_body(body: bytes, header_length: int | None) -> dict[str, Any]:
    """The JSON header of an infer request body.

    Raises:
        RequestError: (400) the header length does not fit the body, or the JSON is malformed
            or not an object.
    """
    if header_length is not None and not 0 <= header_length <= len(body):
        raise _bad(f"Inference-Header-Content-Length is {header_length}, but the body has "
                   f"{len(body)} bytes")
    text = body if header_length is None else body[:header_length]
    try:
        header = orjson.loads(text)
    except orjson.JSONDecodeError as err:
        raise _bad(f"the request body is not valid JSON: {err}") from None
    if not isinstance(header, dict):
        raise _bad(f"the request body must be a JSON object, given {type(header).__name__}")
    return header


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str,
           *, required: bool = False) -> Any:
    value = obj.get(key)
    if value is None:
        if required:
            raise _bad(f"{where}: the field {key!r} is required")
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise _bad(f"{where}: {key!r} must be {_JSON_NAMES.get(names, names)}, given "
                   f"{abridge(orjson.dumps(value).decode(), 80)}")
    return value


_JSON_NAMES = {"str": "a string", "list": "an array", "dict": "an object", "int": "an integer",
               "bool": "true or false"}


def _shape(tensor: Mapping[str, Any], where: str) -> list[int]:
    shape = _field(tensor, "shape", list, where, required=True)
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**62
               for d in shape):
        raise _bad(f"{where}: 'shape' must be an array of non-negative integers, given "
                   f"{abridge(orjson.dumps(shape).decode(), 80)}")
    return [int(d) for d in shape]


def _from_json(data: Any, info: TensorInfo, shape: list[int], where: str
               ) -> np.ndarray[Any, Any]:
    count = prod(shape)
    try:
        array = np.asarray(data)
    except (ValueError, TypeError, OverflowError):
        raise _bad(f"{where}: 'data' is not a flat or nested array of numbers of one shape"
                   ) from None
    kind = array.dtype.kind
    wanted = info.dtype.kind if info.dtype_name != "bfloat16" else "f"
    if array.size and kind not in {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}[wanted]:
        expected = {"b": "true/false", "i": "integers", "u": "non-negative integers",
                    "f": "numbers"}[wanted]
        raise _bad(f"{where}: 'data' must hold {expected} for datatype {info.datatype}, "
                   f"given {_json_kind(array)}")
    if array.size != count:
        raise _bad(f"{where}: 'data' has {array.size} elements, the shape {shape} needs "
                   f"{count}")
    if wanted in "iu" and array.size:
        limits = np.iinfo(info.dtype)
        low, high = int(array.min()), int(array.max())
        if low < limits.min or high > limits.max:
            raise _bad(f"{where}: 'data' holds {low if low < limits.min else high}, outside "
                       f"{info.datatype}'s range [{limits.min}, {limits.max}]")
    return np.ascontiguousarray(array.astype(info.dtype)).reshape(shape)


def _json_kind(array: np.ndarray[Any, Any]) -> str:
    return {"b": "true/false", "i": "integers", "u": "integers", "f": "numbers with a fraction",
            "U": "strings", "O": "mixed or nested values"}.get(array.dtype.kind,
                                                              str(array.dtype))


def _from_binary(chunk: memoryview, info: TensorInfo, shape: list[int], where: str
                 ) -> np.ndarray[Any, Any]:
    expected = prod(shape) * info.dtype.itemsize
    if len(chunk) != expected:
        raise _bad(f"{where}: binary_data_size is {len(chunk)} bytes, the shape {shape} of "
                   f"{info.datatype} needs {expected}")
    if info.dtype_name == "bool":
        flags: np.ndarray[Any, Any] = np.frombuffer(chunk, np.uint8) != 0
        return flags.reshape(shape)
    array: np.ndarray[Any, Any] = np.frombuffer(chunk, info.dtype.newbyteorder("<"))
    typed: np.ndarray[Any, Any] = array.astype(info.dtype, copy=False)
    return typed.reshape(shape)


def decode_request(model: ServedModel, body: bytes, header_length: int | None
                   ) -> InferRequest:
    """Decode and check an infer request for ``model``.

    Every input is checked against the model's interface (name, datatype, shape, the data's
    length), every requested output exists, and the binary section is consumed exactly.

    Raises:
        RequestError: (400) naming the input or field and what was expected and given.
    """
    header = parse_body(body, header_length)
    request_id = header.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise _bad(f"'id' must be a string, given {describe(request_id)}")
    if request_id is not None and len(request_id) > _MAX_ID:
        raise _bad(f"'id' is {len(request_id)} characters long, more than {_MAX_ID}")
    params = _field(header, "parameters", dict, "request") or {}
    binary_default = _flag(params, "binary_data_output", "request parameters")
    timeout = _timeout(params)
    if params.get("sequence_id") not in (None, 0, ""):
        raise _bad("request parameters: 'sequence_id' is set, but graphrt serves stateless "
                   "models only (no sequence batching)")

    tensors = _field(header, "inputs", list, "request", required=True)
    binary = memoryview(body)[header_length:] if header_length is not None else memoryview(b"")
    offset = 0
    inputs: dict[str, np.ndarray[Any, Any]] = {}
    names: list[str] = []
    for position, tensor in enumerate(tensors):
        where = f"inputs[{position}]"
        if not isinstance(tensor, dict):
            raise _bad(f"{where} must be an object with name, datatype, shape and data")
        name = _field(tensor, "name", str, where, required=True)
        where = f"input {describe(name)}"
        datatype = _field(tensor, "datatype", str, where, required=True)
        shape = _shape(tensor, where)
        info = check_tensor(model, name, datatype, shape)
        tensor_params = _field(tensor, "parameters", dict, where) or {}
        size = tensor_params.get("binary_data_size")
        has_data = tensor.get("data") is not None
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise _bad(f"{where}: binary_data_size must be a non-negative integer, given "
                           f"{describe(size)}")
            if has_data:
                raise _bad(f"{where}: give either 'data' or binary_data_size, not both")
            if offset + size > len(binary):
                raise _bad(f"{where}: binary_data_size {size} runs past the body's binary "
                           f"section ({len(binary)} bytes, {len(binary) - offset} left)")
            inputs[name] = tensor_from_bytes(info, binary[offset:offset + size], shape)
            offset += size
        elif has_data:
            inputs[name] = tensor_from_data(info, tensor["data"], shape)
        else:
            raise _bad(f"{where}: no 'data' and no binary_data_size")
        names.append(name)
    if offset != len(binary):
        raise _bad(f"the body has {len(binary) - offset} bytes of binary data that no input "
                   f"claims (binary_data_size)")
    model.check_complete(names)
    return InferRequest(request_id, inputs, _outputs(model, header, binary_default), timeout)


def requested_outputs(model: ServedModel, names: Sequence[str], binary: bool
                      ) -> tuple[OutputRequest, ...]:
    """The outputs named (all of the model's when none are), checked.

    Raises:
        RequestError: (400) an output the model does not have.
    """
    for name in names:
        _check_output(model, name)
    return tuple(OutputRequest(name, binary) for name in names or model.output_names)


def _check_output(model: ServedModel, name: str) -> None:
    if name not in model.output_names:
        raise _bad(f"model {describe(model.name)} has no output {describe(name)} (its "
                   f"outputs: {', '.join(model.output_names)})")


def check_tensor(model: ServedModel, name: str, datatype: str, shape: list[int]
                 ) -> TensorInfo:
    """The model's input ``name``, checked against a request's datatype and shape.

    Raises:
        RequestError: (400) no such input, another datatype, or a shape that cannot fit.
    """
    info = model.input_info(name)
    if datatype != info.datatype:
        known = "" if graphrt_dtype(datatype) else " (not a datatype graphrt has)"
        raise _bad(f"input {describe(name)}: datatype {describe(datatype)}{known} does not "
                   f"match the model's {info.datatype}")
    model.check_shape(info, shape)
    return info


def tensor_from_data(info: TensorInfo, data: Any, shape: list[int]) -> np.ndarray[Any, Any]:
    """An input from the protocol's JSON ``data`` (flat or nested numbers) or gRPC's typed
    contents, checked: kinds of numbers, count, range.

    Raises:
        RequestError: (400) naming the input and what was wrong.
    """
    where = f"input {describe(info.name)}"
    if info.dtype_name == "bfloat16":
        return _from_json(data, _float32(info), shape, where).astype(info.dtype)
    return _from_json(data, info, shape, where)


def tensor_from_bytes(info: TensorInfo, raw: bytes | memoryview, shape: list[int]
                      ) -> np.ndarray[Any, Any]:
    """An input from raw little-endian bytes (the binary extension, gRPC's raw contents).

    Raises:
        RequestError: (400) the byte count does not fit the shape.
    """
    return _from_binary(memoryview(raw), info, shape, f"input {describe(info.name)}")


def _float32(info: TensorInfo) -> TensorInfo:
    return TensorInfo(info.name, np.dtype(np.float32), "float32", info.shape, info.bounds)


def _flag(params: Mapping[str, Any], key: str, where: str) -> bool:
    value = params.get(key, False)
    if not isinstance(value, bool):
        raise _bad(f"{where}: {key!r} must be true or false, given {describe(value)}")
    return value


def _timeout(params: Mapping[str, Any]) -> float | None:
    value = params.get("timeout")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad(f"request parameters: 'timeout' must be a non-negative integer (microseconds),"
                   f" given {describe(value)}")
    return value / 1e6 if value else None


def _outputs(model: ServedModel, header: Mapping[str, Any], binary_default: bool
             ) -> tuple[OutputRequest, ...]:
    wanted = _field(header, "outputs", list, "request")
    if not wanted:
        return tuple(OutputRequest(name, binary_default) for name in model.output_names)
    chosen: list[OutputRequest] = []
    for position, output in enumerate(wanted):
        where = f"outputs[{position}]"
        if not isinstance(output, dict):
            raise _bad(f"{where} must be an object with a name")
        name = _field(output, "name", str, where, required=True)
        _check_output(model, name)
        params = _field(output, "parameters", dict, f"output {describe(name)}") or {}
        if params.get("classification"):
            raise _bad(f"output {describe(name)}: the classification extension is not "
                       f"supported; ask for the tensor and take its top classes")
        binary = _flag(params, "binary_data", f"output {describe(name)}") if (
            "binary_data" in params) else binary_default
        chosen.append(OutputRequest(name, binary))
    return tuple(chosen)


def encode_response(model: ServedModel, request: InferRequest,
                    results: Mapping[str, np.ndarray[Any, Any]]) -> tuple[bytes, dict[str, str]]:
    """The response body and the headers it needs (``Inference-Header-Content-Length`` and
    ``application/octet-stream`` when it carries binary data)."""
    by_name = {info.name: info for info in model.outputs}
    outputs: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for wanted in request.outputs:
        value = np.ascontiguousarray(results[wanted.name])
        info = by_name[wanted.name]
        entry: dict[str, Any] = {"name": wanted.name, "datatype": info.datatype,
                                 "shape": list(value.shape)}
        if wanted.binary:
            raw = value.astype(value.dtype.newbyteorder("<"), copy=False).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            flat = value.reshape(-1)
            entry["data"] = flat.astype(np.float32) if info.dtype_name == "bfloat16" else flat
        outputs.append(entry)
    response: dict[str, Any] = {"model_name": model.name, "model_version": "1",
                                "outputs": outputs}
    if request.id is not None:
        response["id"] = request.id
    header = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return header, {"content-type": "application/json"}
    return b"".join([header, *chunks]), {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(header))}
