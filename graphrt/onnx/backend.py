"""graphrt as an ONNX backend (``onnx.backend.base.Backend``), so ONNX's own conformance suite
(``onnx.backend.test.BackendTest``) runs against it.

``prepare`` checks every node is supported and converts the model. Where the model leaves
something to run time that graphrt fixes at conversion (a symbolic input dimension, or a graph
input that feeds a shape, axes or pads), the representation specializes on each run's input
shapes and those inputs' values, converting once per distinct specialization and caching the
module.

Example:
    >>> import numpy as np
    >>> from onnx import TensorProto, helper
    >>> import graphrt.onnx.backend as backend
    >>> graph = helper.make_graph(
    ...     [helper.make_node("Relu", ["x"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    >>> backend.run_model(model, [np.array([-1.0, 2.0], "float32")])[0]
    array([0., 2.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from onnx.backend.base import Backend, BackendRep

from ..devices import Device, allocate, backend_for, cpu
from ..devices import device as make_device
from ..errors import ConversionError, DeviceError, InputError, argument_error, describe
from .builder import NotConstantError
from .convert import from_onnx, item_name
from .model import load_model
from .registry import check_supported

__all__ = ["GraphrtBackend", "GraphrtRep", "prepare", "run_model", "supports_device"]

_MAX_SPECIALIZATIONS = 64

OPTIONS = frozenset({"dim_bounds", "fuse", "devices", "placement"})
"""The :func:`graphrt.from_onnx` options ``prepare`` passes on (the representation chooses
``shapes`` and ``constants`` itself, per run)."""


def _device(spec: str) -> Device:
    kind, _, ordinal = str(spec).lower().partition(":")
    return make_device(f"{kind}:{ordinal or 0}")


def _host_array(shape: tuple[int, ...], dtype: Any, what: str) -> np.ndarray[Any, Any]:
    """A host array the caller owns (a PlacementError, not a bare MemoryError, when the
    process cannot hold it)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    host: np.ndarray[Any, Any] = allocate(cpu(0), nbytes, what).view(dtype).reshape(shape)
    return host


def _shape_of(value: Any) -> Any:
    """An input's shape, or a sequence input's list of item shapes (a hashable key)."""
    return tuple(item.shape for item in value) if isinstance(value, list) else value.shape


def _bytes_of(value: Any) -> bytes:
    if isinstance(value, list):
        return b"".join(repr((item.dtype.str, item.shape)).encode() + item.tobytes()
                        for item in value)
    return bytes(value.tobytes())


class _Prepared(NamedTuple):
    """A converted specialization: its module, and per graph output the number of items it
    was split into (``None``: a tensor output)."""

    module: Any
    layout: list[int | None]


class GraphrtRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns its outputs as a list of numpy arrays."""

    def __init__(self, model: Any, device: str, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - OPTIONS)
        if unknown:
            argument_error(f"prepare(..., {unknown[0]}=...)",
                           f"one of the options {', '.join(sorted(OPTIONS))}", unknown[0])
        loaded = load_model(model)
        check_supported(loaded.nodes)
        self._proto = loaded.proto
        self._device = _device(device)
        self._options = dict(options)
        graph = self._proto.graph
        initializers = {t.name for t in graph.initializer}
        self._inputs = [vi.name for vi in graph.input if vi.name not in initializers]
        self._declared = {vi.name: tuple(d.dim_value if d.HasField("dim_value") else
                                         (d.dim_param or "?")
                                         for d in vi.type.tensor_type.shape.dim)
                          for vi in graph.input if vi.name not in initializers
                          and vi.type.tensor_type.HasField("shape")}
        for value_info in [*graph.input, *graph.output]:
            kind = value_info.type.WhichOneof("value")
            if kind not in ("tensor_type", "sequence_type"):
                raise ConversionError(f"graph input or output {value_info.name!r} is a {kind}; "
                                      "a graphrt graph takes and gives tensors and sequences "
                                      "of tensors")
        self._sequences = {vi.name for vi in graph.input
                           if vi.type.WhichOneof("value") == "sequence_type"}
        self._frozen: list[str] = []  # inputs whose values the conversion needs
        self._modules: dict[Any, _Prepared] = {}
        self._static = all(
            d.HasField("dim_value") for vi in graph.input if vi.name not in initializers
            for d in vi.type.tensor_type.shape.dim) and all(
            vi.type.tensor_type.HasField("shape") for vi in graph.input
            if vi.name not in initializers)
        if self._static:
            try:
                self._modules[()] = self._build({}, {})
            except NotConstantError as err:
                if err.value not in self._inputs:
                    raise
                self._frozen.append(err.value)

    def _build(self, shapes: Mapping[str, Any], constants: Mapping[str, Any]) -> _Prepared:
        bundle = from_onnx(self._proto, shapes=shapes or None, constants=constants or None,
                           **self._options)
        sequences: Any = bundle.metadata.get("sequences") or {}
        outputs: Mapping[str, int] = sequences.get("outputs", {})
        layout = [int(outputs[vi.name]) if vi.name in outputs else None
                  for vi in self._proto.graph.output]
        return _Prepared(bundle.create(self._device), layout)

    def _frozen_input(self, value: str) -> str | None:
        """The graph input whose value the conversion needs, for a ``NotConstantError`` on
        ``value`` (an item ``name[i]`` of a sequence input freezes the whole sequence)."""
        if value in self._inputs:
            return value
        name, bracket, _ = value.rpartition("[")
        return name if bracket and name in self._sequences else None

    def _module(self, feeds: Mapping[str, Any]) -> _Prepared:
        if () in self._modules:
            return self._modules[()]
        while True:
            key = tuple((name, _shape_of(feeds[name])) for name in self._inputs) + tuple(
                (name, _bytes_of(feeds[name])) for name in self._frozen)
            module = self._modules.get(key)
            if module is not None:
                return module
            shapes = {name: _shape_of(feeds[name]) for name in self._inputs
                      if name not in self._frozen}
            constants = {name: feeds[name] for name in self._frozen}
            try:
                module = self._build(shapes, constants)
            except NotConstantError as err:
                frozen = self._frozen_input(err.value)
                if frozen is None or frozen in self._frozen:
                    raise
                self._frozen.append(frozen)
                continue
            if len(self._modules) >= _MAX_SPECIALIZATIONS:
                self._modules.pop(next(iter(self._modules)))
            self._modules[key] = module
            return module

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray[Any, Any], ...]:
        """Run on ``inputs``: a list in graph-input order, a dict by name, or one array.

        Raises:
            ArgumentError: ``inputs`` is none of those.
            InputError: an unknown name, a value that is not an array, or a shape of another
                rank than the model declares, or another size where it declares one.
            ConversionError: too many or too few inputs (and what converting raises).
        """
        if isinstance(inputs, Mapping):
            pairs = list(inputs.items())
            unknown = [name for name, _ in pairs if name not in self._inputs]
            if unknown:
                raise InputError(f"the model has no input {describe(unknown[0])} (its inputs: "
                                 f"{', '.join(map(repr, self._inputs))})")
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            if not isinstance(inputs, Sequence) or isinstance(inputs, str | bytes):
                argument_error("run(inputs)", "a list of arrays in graph-input order, a dict "
                               "of arrays by input name, or one array", inputs)
            if len(inputs) > len(self._inputs):
                raise ConversionError(f"the model takes {len(self._inputs)} inputs, given "
                                      f"{len(inputs)}")
            pairs = list(zip(self._inputs, inputs, strict=False))
        feeds = {name: self._feed(name, value) for name, value in pairs}
        missing = [name for name in self._inputs if name not in feeds]
        if missing:
            raise ConversionError(f"no value given for input(s) {', '.join(missing)}")
        prepared = self._module(feeds)
        run_feeds: dict[str, np.ndarray[Any, Any]] = {}
        for name, value in feeds.items():
            if name in self._frozen:
                continue
            if name in self._sequences:
                run_feeds.update((item_name(name, i), item) for i, item in enumerate(value))
            else:
                run_feeds[name] = value
        flat = [self._host(index, out) for index, out in enumerate(prepared.module(**run_feeds))]
        results: list[Any] = []
        for items in prepared.layout:  # a sequence output's items, regrouped as a list
            if items is None:
                results.append(flat.pop(0))
            else:
                results.append(flat[:items])
                del flat[:items]
        return tuple(results)

    def _host(self, index: int, out: Any) -> np.ndarray[Any, Any]:
        if type(out) is np.ndarray:  # fresh: the module's call hands it over
            return out
        host = _host_array(out.shape, out.dtype, f"output {index}")
        backend_for(self._device).download(out, host)
        return host


    def _feed(self, name: str, value: Any) -> Any:
        """``value`` as an array, checked against the rank and sizes the model declares (a
        sequence input: a list of arrays)."""
        if name in self._sequences:
            if isinstance(value, np.ndarray) or not isinstance(value, Sequence) or isinstance(
                    value, str | bytes):
                raise InputError(f"input {name!r} is a sequence: give a list of arrays, given "
                                 f"{type(value).__name__}")
            return [self._feed(item_name(name, i), item) for i, item in enumerate(value)]
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as err:  # a ragged list
            raise InputError(f"input {name!r}: not an array ({err})") from None
        if array.dtype == np.dtype("O"):
            raise InputError(f"input {name!r}: not a numeric array (dtype object)")
        declared = self._declared.get(name)
        if declared is None:
            return array
        fits = array.ndim == len(declared) and all(
            not isinstance(d, int) or d == n for d, n in zip(declared, array.shape, strict=True))
        if not fits:
            shown = "[" + ", ".join(map(str, declared)) + "]"
            raise InputError(f"input {name!r}: the model declares shape {shown}, given "
                             f"{list(array.shape)}")
        return array


class GraphrtBackend(Backend):
    """ONNX's backend interface over graphrt."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> GraphrtRep:
        """Check and convert ``model`` for ``device`` (``"CPU"``, ``"CUDA"``, ``"SIM"``);
        ``kwargs`` are :func:`graphrt.from_onnx` options."""
        return GraphrtRep(model, device, kwargs)  # loading checks the model (no bare onnx error)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray[Any, Any], ...]:
        """Prepare ``model`` and run it once on ``inputs``."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether graphrt can run on ``device`` here (CUDA needs cupy and a GPU)."""
        try:
            backend_for(_device(device))
        except (DeviceError, ValueError):
            return False
        return True


prepare = GraphrtBackend.prepare
run_model = GraphrtBackend.run_model
run_node = GraphrtBackend.run_node
supports_device = GraphrtBackend.supports_device
