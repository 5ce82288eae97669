"""A model as the server holds it: one module (weights once, a run context per worker thread),
its interface in the protocol's terms, the checks a request's tensors must pass, and whether
requests can be stacked along a batch dimension.

Example:
    >>> model = load_model("examples/bundles/mlp")
    >>> model.name, model.batch, [info.describe() for info in model.inputs]
    ('mlp', None, [{'name': 'x', 'datatype': 'FP32', 'shape': [8, 64]}])
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..bundle import Bundle, load_bundle
from ..devices import Device, device
from ..errors import ArgumentError, BundleError, InputError, RequestError, describe
from ..params import to_host
from ..schema import parse_dtype
from .datatypes import DATATYPES, protocol_datatype

__all__ = ["BatchAxis", "ServedModel", "TensorInfo", "load_model"]

log = logging.getLogger(__name__)

Tensors = dict[str, np.ndarray[Any, Any]]


@dataclass(frozen=True)
class TensorInfo:
    """One input or output: its name, dtype, and shape (an int, or the name or expression of a
    symbolic dimension with its bounds where it is a bare variable)."""

    name: str
    dtype: np.dtype[Any]
    dtype_name: str
    shape: tuple[int | str, ...]
    bounds: tuple[tuple[int, int] | None, ...]

    @property
    def datatype(self) -> str:
        """The protocol's datatype (``FP32``, ...)."""
        return protocol_datatype(self.dtype_name)

    def protocol_shape(self) -> list[int]:
        """The shape as the protocol's metadata gives it: -1 for a symbolic dimension."""
        return [dim if isinstance(dim, int) else -1 for dim in self.shape]

    def describe(self) -> dict[str, Any]:
        """``{"name", "datatype", "shape"}`` for model metadata."""
        return {"name": self.name, "datatype": self.datatype, "shape": self.protocol_shape()}


@dataclass(frozen=True)
class BatchAxis:
    """The dimension along which requests can be stacked: dimension 0 of every input and
    output is the bare shape variable ``variable`` (used nowhere else), up to ``limit``."""

    variable: str
    limit: int


class ServedModel:
    """A loaded model: the bundle's module on its device and its interface.

    Every call of :meth:`run` may come from another thread: the module gives each thread its
    own run context, so the weights are held once and runs never share buffers.

    Attributes:
        name: the name clients address it by.
        bundle: the bundle it was made from.
        inputs, outputs: the interface, in order.
        batch: the batch axis, or None when requests cannot be stacked.
        device: where it runs.
    """

    def __init__(self, name: str, bundle: Bundle, dev: Device, *,
                 max_batch: int | None = None) -> None:
        self.name = name
        self.bundle = bundle
        self.device = dev
        self.module = bundle.create(dev)
        bounds = {var.name: (var.min, var.max) for var in bundle.graph.shape_vars.values()}
        self.inputs = tuple(_info(spec.name, spec.dtype, spec.shape, bounds)
                            for spec in bundle.inputs)
        self.outputs = tuple(_info(spec.name, spec.dtype, spec.shape, bounds)
                             for spec in bundle.outputs)
        for info in (*self.inputs, *self.outputs):
            if info.dtype_name not in DATATYPES:
                raise BundleError(
                    f"model {name!r}: {info.name!r} is {info.dtype_name}, which the Open "
                    f"Inference Protocol has no datatype for (it has "
                    f"{', '.join(sorted(DATATYPES.values()))}); cast it in the model to serve "
                    "it")
        self.input_names = tuple(info.name for info in self.inputs)
        self.output_names = tuple(info.name for info in self.outputs)
        self._by_input = {info.name: info for info in self.inputs}
        self.batch = _batch_axis(self.inputs, self.outputs, bounds, max_batch)

    # -- the protocol's descriptions ----------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        """``GET /v2/models/{name}``: name, versions, platform, inputs and outputs."""
        return {"name": self.name, "versions": ["1"], "platform": "graphrt",
                "inputs": [info.describe() for info in self.inputs],
                "outputs": [info.describe() for info in self.outputs]}

    def config(self, max_delay_us: int) -> dict[str, Any]:
        """``GET /v2/models/{name}/config``, in Triton's model configuration terms: with a
        batch axis, ``max_batch_size`` is its limit and ``dims`` leave it out."""
        skip = 1 if self.batch else 0

        def tensor(info: TensorInfo) -> dict[str, Any]:
            return {"name": info.name, "data_type": f"TYPE_{info.datatype}",
                    "dims": info.protocol_shape()[skip:]}

        config: dict[str, Any] = {
            "name": self.name, "platform": "graphrt", "backend": "graphrt",
            "max_batch_size": self.batch.limit if self.batch else 0,
            "input": [tensor(info) for info in self.inputs],
            "output": [tensor(info) for info in self.outputs],
            "instance_group": [{"kind": "KIND_GPU" if self.device.kind == "cuda"
                                else "KIND_CPU", "count": 1}],
            "parameters": {"graphrt_version": {"string_value": __version__},
                           "bundle_digest": {"string_value": self.bundle.digest}}}
        if self.batch:
            config["dynamic_batching"] = {"max_queue_delay_microseconds": max_delay_us}
        return config

    # -- requests -----------------------------------------------------------------------------

    def input_info(self, name: str) -> TensorInfo:
        """The input called ``name``.

        Raises:
            RequestError: (400) the model has no such input, listing the ones it has.
        """
        info = self._by_input.get(name)
        if info is None:
            raise RequestError(400, f"model {describe(self.name)} has no input "
                                    f"{describe(name)} (its inputs: "
                                    f"{', '.join(self.input_names)})")
        return info

    def check_shape(self, info: TensorInfo, shape: Sequence[int]) -> None:
        """Refuse a shape that cannot fit ``info``: the wrong rank, a fixed dimension of
        another size, or a bare symbolic dimension outside its bounds.

        Raises:
            RequestError: (400) naming the input, the dimension, expected and given.
        """
        if len(shape) != len(info.shape):
            raise RequestError(400, f"input {describe(info.name)}: shape {list(shape)} has "
                                    f"{len(shape)} dimensions, the model's "
                                    f"{info.protocol_shape()} has {len(info.shape)}")
        for axis, (given, dim, bound) in enumerate(zip(shape, info.shape, info.bounds,
                                                       strict=True)):
            if isinstance(dim, int) and given != dim:
                raise RequestError(400, f"input {describe(info.name)}: dimension {axis} is "
                                        f"{given}, the model's is {dim} (shape "
                                        f"{info.protocol_shape()}, given {list(shape)})")
            if bound is not None and not bound[0] <= given <= bound[1]:
                raise RequestError(400, f"input {describe(info.name)}: dimension {axis} "
                                        f"({dim!s}) is {given}, outside its bounds "
                                        f"[{bound[0]}, {bound[1]}]")

    def check_complete(self, names: Sequence[str]) -> None:
        """Refuse a request that leaves an input out or gives one twice.

        Raises:
            RequestError: (400) naming the missing or repeated inputs.
        """
        if len(set(names)) != len(names):
            repeated = sorted({name for name in names if names.count(name) > 1})
            raise RequestError(400, f"input {describe(repeated[0])} is given more than once")
        missing = [name for name in self.input_names if name not in names]
        if missing:
            raise RequestError(400, f"model {describe(self.name)} needs input(s) "
                                    f"{', '.join(map(repr, missing))}, not in the request "
                                    f"(given: {', '.join(map(repr, names)) or 'none'})")

    def batch_size(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> int:
        """How many samples a checked request holds along the batch axis (1 without one)."""
        if self.batch is None:
            return 1
        return int(inputs[self.input_names[0]].shape[0])

    def signature(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> tuple[Any, ...]:
        """What must be equal for two requests to run stacked: every input's shape past the
        batch dimension."""
        return tuple(inputs[name].shape[1:] for name in self.input_names)

    # -- runs ---------------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> Tensors:
        """Run one request's (or one stacked batch's) inputs; outputs on the host.

        Raises:
            InputError: inputs the module refuses (a shape variable bound two ways, ...).
            ExecutionError: a kernel raised, naming the node.
        """
        results = self.module(**inputs)
        return {name: to_host(name, value)
                for name, value in zip(self.output_names, results, strict=True)}

    def run_stacked(self, requests: Sequence[Mapping[str, np.ndarray[Any, Any]]]
                    ) -> list[Tensors]:
        """Run requests of one signature as one batch and split the outputs back.

        Raises:
            InputError, ExecutionError: as :meth:`run`, for the batch as a whole.
        """
        if len(requests) == 1:
            return [self.run(requests[0])]
        stacked = {name: np.concatenate([request[name] for request in requests])
                   for name in self.input_names}
        outputs = self.run(stacked)
        sizes = np.cumsum([self.batch_size(request) for request in requests])[:-1]
        pieces = {name: np.split(value, sizes) for name, value in outputs.items()}
        return [{name: pieces[name][i] for name in self.output_names}
                for i in range(len(requests))]

    def warm_up(self) -> None:
        """Run once on zeros at the smallest admissible shapes, so that compiled kernels are
        built before the first request. A model whose zeros are not valid data (or whose
        shapes are expressions) is only logged, not refused."""
        inputs = {}
        for info in self.inputs:
            if not all(isinstance(d, int) or b is not None for d, b in zip(info.shape,
                                                                           info.bounds,
                                                                           strict=True)):
                return
            shape = [d if isinstance(d, int) else max(b[0], 1) if b else 1
                     for d, b in zip(info.shape, info.bounds, strict=True)]
            inputs[info.name] = np.zeros(shape, info.dtype)
        try:
            self.run(inputs)
        except InputError as err:
            log.warning("model %r: the warm-up run on zeros failed (%s); the first request "
                        "will compile its kernels", self.name, err)

    def __repr__(self) -> str:
        return (f"<ServedModel {self.name!r} on {self.device}: inputs "
                f"{[i.name for i in self.inputs]}, batch {self.batch}>")


def _info(name: str, dtype: str, shape: Sequence[int | str],
          bounds: Mapping[str, tuple[int, int]]) -> TensorInfo:
    return TensorInfo(name, parse_dtype(dtype).numpy, dtype, tuple(shape),
                      tuple(bounds.get(dim) if isinstance(dim, str) else None for dim in shape))


def _batch_axis(inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo],
                bounds: Mapping[str, tuple[int, int]], max_batch: int | None
                ) -> BatchAxis | None:
    tensors = [*inputs, *outputs]
    if not tensors or any(not info.shape for info in tensors):
        return None
    first = tensors[0].shape[0]
    if not isinstance(first, str) or first not in bounds:
        return None
    if any(info.shape[0] != first for info in tensors):
        return None
    if any(first in str(dim) for info in tensors for dim in info.shape[1:]):
        return None
    low, high = bounds[first]
    limit = high if max_batch is None else min(high, max_batch)
    if low > 1 or limit < 2:
        return None
    return BatchAxis(first, limit)


def _model_name(bundle: Bundle, source: Path | None) -> str:
    named = bundle.metadata.get("model")
    if isinstance(named, str) and named:
        return named
    if source is not None:
        return source.stem if source.suffix else source.name
    return "model"


def _convert(path: Path, dim_bounds: Mapping[str, int]) -> Bundle:
    """Convert an ONNX file with the bounds of the symbolic dimensions its inputs use (one
    ``--dim`` list serves every model of a server)."""
    import onnx  # the optional onnx package, only for .onnx files

    from ..onnx import from_onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # not readable as ONNX: from_onnx says why, naming the file
        return from_onnx(path, dim_bounds=dim_bounds or None)
    used = {dim.dim_param for value in proto.graph.input
            for dim in value.type.tensor_type.shape.dim if dim.dim_param}
    return from_onnx(path, dim_bounds={k: v for k, v in dim_bounds.items() if k in used} or None)


def load_model(source: str | os.PathLike[str] | Bundle, *, name: str | None = None,
               device_spec: Device | str = "cpu", max_batch: int | None = None,
               dim_bounds: Mapping[str, int] | None = None, warm_up: bool = True
               ) -> ServedModel:
    """Load a bundle (a directory or a ``.grb``/``.zip`` file), convert an ``.onnx`` file, or
    take a :class:`~graphrt.Bundle`, and create its module for serving.

    Args:
        source: the model.
        name: the name clients use; default: the bundle's ``model`` metadata, else the file's
            stem.
        device_spec: where it runs (``"cpu"``, ``"cuda:0"``, ...).
        max_batch: the most samples one stacked run may hold (default: the batch variable's
            upper bound).
        dim_bounds: for an ``.onnx`` file, symbolic dimension → the largest size to plan for
            (as ``graphrt convert --dim``); names its inputs do not use are left out.
        warm_up: run once on zeros before serving.

    Raises:
        BundleError, ConversionError: the model cannot be loaded or converted.
        ArgumentError: a source of the wrong type.

    Example:
        >>> load_model("examples/bundles/cnn.grb", name="cnn").name  # doctest: +SKIP
        'cnn'
    """
    where: Path | None = None
    if isinstance(source, Bundle):
        bundle = source
    elif isinstance(source, str | os.PathLike):
        where = Path(source)
        if where.suffix == ".onnx":
            bundle = _convert(where, dim_bounds or {})
        elif not where.exists():
            raise BundleError(f"no model at {where} (a bundle directory, a .grb/.zip bundle "
                              f"or an .onnx file)")
        else:
            bundle = load_bundle(where)
    else:
        raise ArgumentError(f"load_model: expected a path or a Bundle, given "
                            f"{describe(source)}")
    dev = device_spec if isinstance(device_spec, Device) else device(device_spec)
    model = ServedModel(name or _model_name(bundle, where), bundle, dev, max_batch=max_batch)
    if warm_up:
        model.warm_up()
    log.info("loaded %r from %s on %s (%d inputs, batch %s)", model.name,
             where or "memory", dev, len(model.inputs), model.batch)
    return model
