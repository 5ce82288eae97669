"""The frontend's intermediate form: standard-op steps over named values, folded as emitted.

Converters translate each ONNX node into calls of :meth:`Builder.op`, which infers the output
types with the op's own shape function (the one the runtime uses) and, when every input is a
constant, runs the op on the host at once: Shape → Gather → Concat → Reshape chains and
ConstantOfShape weights become constants here, never steps.

Example:
    >>> import numpy as np
    >>> b = Builder()
    >>> x = b.input("x", TensorType((2, 3), "float32"))
    >>> w = b.constant(np.ones((4, 3), "float32"))
    >>> (y,) = b.op("dense", [x, w])
    >>> b.type(y), len(b.steps)
    (TensorType(shape=(2, 4), dtype='float32'), 1)
    >>> (z,) = b.op("add", [w, w])          # all inputs constant: folded, no step
    >>> float(b.constant_value(z)[0, 0]), len(b.steps)
    (2.0, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np
from pydantic import ValidationError

from ..errors import ConversionError, abridge
from ..ops import OpError, TensorType, get_op
from ..schema.dtypes import MAX_NDIM, parse_dtype
from .symint import SymInt, has_symbols, sym_max, sym_min

__all__ = ["Builder", "ConvertedStep", "TensorType"]

Array = np.ndarray[Any, Any]

MAX_TENSOR_BYTES = 1 << 62
"""Bytes above which a value's size is refused at conversion: no device holds it, and sizes
near 2**63 overflow the int64 arithmetic of planning and of numpy."""

FOLD_LIMIT = 1 << 26
"""Largest constant (bytes) the builder computes at import; bigger results stay steps."""

FOLD_BUDGET = 1 << 30
"""Bytes of constants the builder computes at import in all (folded results and the tables
converters build from declared sizes; not the model's own initializers): past it, results stay
steps and tables are refused, so a small model cannot make conversion allocate without bound."""


def nbytes(tensor: TensorType) -> int:
    """The exact size of ``tensor`` in bytes (Python ints: no overflow)."""
    return prod(tensor.shape) * parse_dtype(tensor.dtype).itemsize


@dataclass
class ConvertedStep:
    """``outputs = op(inputs, **attrs)``, made while converting ONNX node ``source``.

    Attributes:
        device: the device type (``"cpu"``, ``"cuda"``, ...) placement chose, or None
            until placement runs.
    """

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    source: str
    device: str | None = None


@dataclass
class Builder:
    """Values (graph inputs, constants, step outputs) and the steps that make them."""

    types: dict[str, TensorType] = field(default_factory=dict)
    constants: dict[str, Array] = field(default_factory=dict)
    steps: list[ConvertedStep] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    source: str = ""
    """The ONNX node being converted (set by the converter driver, recorded in steps)."""
    symbolic_dims: dict[str, tuple[int | str, ...]] = field(default_factory=dict)
    """Values whose shape follows symbolic input dimensions: their dims as expressions."""
    shape_vars: dict[str, tuple[int, int]] = field(default_factory=dict)
    """The symbolic dimensions' ``(min, max)``."""
    sequences: dict[str, list[str]] = field(default_factory=dict)
    """ONNX sequence values, which exist only while converting: each is the list of its
    tensor values (its length and element positions are known at conversion)."""
    opsets: dict[str, int] = field(default_factory=dict)
    """The model's opset per domain (``""`` the default), for the nodes of its subgraphs."""
    names: dict[str, str] = field(default_factory=dict)
    """ONNX value name → builder value, for converters whose attributes name values."""
    shape_values: dict[str, Array] = field(default_factory=dict)
    """Integer constants computed from symbolic sizes (``Shape`` and what follows it): their
    elements as :class:`~graphrt.onnx.symint.SymInt` where they follow the variables, so a
    reshape target built from them keeps its expressions (an object array per constant)."""
    var_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Every traced variable's ``(min, max)`` over all conversions (the symbolic input
    dimensions' bounds, the data-dependent counts' planned bounds)."""
    data_vars: dict[str, int] = field(default_factory=dict)
    """Shape variables that ops with data-dependent outputs bind at run time (``nonzero``'s
    count, say) → their bound in this conversion."""
    made: dict[str, ConvertedStep] = field(default_factory=dict)
    """How each folded constant was computed (the step it would have been): a constant that
    turns out to follow the variables and is read as data is made at run time from this."""
    computed_bytes: int = 0
    """Bytes of constants computed so far (counted against :data:`FOLD_BUDGET`)."""
    _count: int = 0

    def _fresh(self, hint: str) -> str:
        self._count += 1
        return f"%{self._count}:{hint}"

    def value(self, hint: str, tensor: TensorType) -> str:
        """A new value of type ``tensor``, for a step a rewrite adds (its name says ``hint``)."""
        name = self._fresh(hint)
        self.types[name] = tensor
        return name

    def input(self, name: str, tensor: TensorType) -> str:
        """Declare a graph input.

        Raises:
            ConversionError: its shape has a negative dimension or a size no device holds.
        """
        self._check_size(tensor, f"graph input {name!r}", "has")
        self.types[name] = tensor
        self.inputs.append(name)
        return name

    def constant(self, value: Any, dtype: str | None = None, name: str | None = None) -> str:
        """A constant value (an initializer, an attribute, a folded result)."""
        array = np.asarray(value, dtype=dtype)
        if array.dtype == np.dtype("O"):
            raise ConversionError(f"{self.source}: a constant of Python objects is not a tensor")
        key = name or self._fresh("const")
        self.constants[key] = array
        if has_symbols(value) and array.dtype.kind in "iu":
            symbolic = np.empty(array.shape, dtype=object)
            symbolic[...] = _nested(value)
            self.shape_values[key] = symbolic
        self.types[key] = TensorType(tuple(int(d) for d in array.shape), str(array.dtype))
        return key

    def computed(self, shape: Sequence[int], dtype: str, what: str,
                 make: Callable[[], Any]) -> str:
        """A constant the converter computes from declared sizes (an index table, a mask):
        ``make()`` runs only when ``shape`` fits the fold limit and what is left of the budget.

        Raises:
            ConversionError: the constant would be too large; the message names ``what``.
        """
        tensor = TensorType(tuple(int(d) for d in shape), dtype)
        self._check_size(tensor, what)
        size = nbytes(tensor)
        if not self._may_compute(size):
            where = f"{self.source}: " if self.source else ""
            raise ConversionError(f"{where}{what} would be a constant of shape "
                                  f"{list(tensor.shape)} {dtype} ({size:,} bytes) computed at "
                                  f"conversion, {self._over(size)}")
        value = np.asarray(make(), dtype=parse_dtype(dtype).numpy)
        if value.shape != tensor.shape:
            raise AssertionError(f"{what}: built {value.shape}, declared {tensor.shape}")
        self.computed_bytes += size
        return self.constant(value)

    def filled(self, value: Any, shape: Sequence[int], dtype: str) -> str:
        """A value of ``shape`` holding ``value`` everywhere: a constant when it fits the fold
        budget, else a step that fills it at run time."""
        scalar = self.constant(np.asarray(value, dtype=parse_dtype(dtype).numpy))
        return self.op("broadcast_to", [scalar], {"shape": [int(d) for d in shape]})[0]

    def _may_compute(self, size: int) -> bool:
        return size <= FOLD_LIMIT and self.computed_bytes + size <= FOLD_BUDGET

    def _over(self, size: int) -> str:
        if size > FOLD_LIMIT:
            return f"more than the {FOLD_LIMIT:,} bytes graphrt computes for one constant"
        return (f"past the {FOLD_BUDGET:,} bytes graphrt computes at conversion in all "
                f"({self.computed_bytes:,} used)")

    def sequence(self, items: Sequence[str]) -> str:
        """A new sequence value holding the tensor values ``items``."""
        key = self._fresh("sequence")
        self.sequences[key] = list(items)
        return key

    def sequence_items(self, name: str) -> list[str]:
        """The tensor values of sequence ``name``.

        Raises:
            ConversionError: ``name`` is a tensor, not a sequence.
        """
        items = self.sequences.get(name)
        if items is None:
            raise ConversionError(f"{self.source}: {name!r} is a tensor where a sequence is "
                                  "expected")
        return list(items)

    def type(self, name: str) -> TensorType:
        """The type of value ``name``."""
        if name in self.sequences:
            raise ConversionError(f"{self.source}: {name!r} is a sequence where a tensor is "
                                  "expected")
        return self.types[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return self.type(name).shape

    def dtype(self, name: str) -> str:
        return self.type(name).dtype

    def is_constant(self, name: str) -> bool:
        return name in self.constants

    def constant_value(self, name: str, what: str = "") -> Array:
        """The value of constant ``name``.

        Raises:
            ConversionError: ``name`` is computed at run time; the message names ``what`` and
                says how to make it constant.
        """
        value = self.constants.get(name)
        if value is None:
            root = self._input_behind(name)
            if root is not None and root != name:
                what = f"{what or 'this input'}, computed from graph input {root!r},"
            raise NotConstantError(self.source, root or name, what)
        return value

    def _input_behind(self, name: str) -> str | None:
        """The first graph input whose values ``name`` is computed from, or None (so that a
        caller such as the ONNX backend can freeze that input)."""
        made_by = {out: step for step in self.steps for out in step.outputs}
        seen, todo = set(), [name]
        while todo:
            value = todo.pop()
            if value in seen:
                continue
            seen.add(value)
            if value in self.inputs:
                return value
            step = made_by.get(value)
            if step is not None:
                todo.extend(reversed(step.inputs))
        return None

    def op(self, op_name: str, inputs: Sequence[str], attrs: Mapping[str, Any] | None = None,
           num_outputs: int | None = None) -> list[str]:
        """Apply standard op ``op_name``; returns its output value names.

        The output types come from the op's shape function; when every input is a constant
        the op runs on the host now and its outputs are constants (never a random op's: it
        draws anew on every run).

        Raises:
            ConversionError: bad attributes, or the shape function refuses the inputs.
        """
        op = get_op(op_name)
        attr_dict = dict(attrs or {})
        try:
            parsed = op.attrs.model_validate(attr_dict)
        except ValidationError as err:
            raise ConversionError(f"{self.source}: op {op_name!r} refuses attributes "
                                  f"{abridge(str(attr_dict))}: {err.errors()[0]['msg']}"
                                  ) from None
        symbolic = {key: value for key, value in attr_dict.items() if has_symbols(value)}
        if symbolic:  # validation made them plain ints; the shape function should see sizes
            parsed = parsed.model_copy(update=symbolic)
        in_types = [self.type(name) for name in inputs]
        data = [self.constants.get(name) if needed else None
                for name, needed in zip(inputs, op.needs_data(len(inputs)), strict=True)]
        if any(needed and value is None for needed, value in
               zip(op.needs_data(len(inputs)), data, strict=True)):
            if op.bound is None:
                raise ConversionError(f"{self.source}: op {op_name!r} needs constant shape "
                                      "inputs")
            return self._data_dependent(op_name, op, parsed, inputs, attr_dict, in_types)
        try:
            out_types = op.infer(in_types, parsed, data)
        except OpError as err:
            shown = ", ".join(f"{t.dtype}{list(t.shape)}" for t in in_types)
            raise ConversionError(f"{self.source}: {abridge(str(err))} (op {op_name!r}, "
                                  f"inputs {abridge(shown)})") from None
        if num_outputs is not None and num_outputs != len(out_types):
            raise ConversionError(f"{self.source}: op {op_name!r} makes {len(out_types)} "
                                  f"outputs, expected {num_outputs}")
        for index, tensor in enumerate(out_types):
            self._check_size(tensor, f"output {index} of op {op_name!r}")
        if inputs and not op.random and all(name in self.constants for name in inputs) and all(
                nbytes(t) <= FOLD_LIMIT for t in out_types) and self._may_compute(
                sum(nbytes(t) for t in out_types)):
            outputs = self._fold(op_name, op, parsed, inputs, out_types)
            self.record(ConvertedStep(op_name, list(inputs), outputs, attr_dict, self.source))
            return outputs
        outputs = [self._fresh(op_name) for _ in out_types]
        for name, tensor in zip(outputs, out_types, strict=True):
            self.types[name] = tensor
        self.steps.append(ConvertedStep(op_name, list(inputs), outputs, attr_dict, self.source))
        return outputs

    def _data_dependent(self, op_name: str, op: Any, attrs: Any, inputs: Sequence[str],
                        attr_dict: dict[str, Any], in_types: Sequence[TensorType]
                        ) -> list[str]:
        """A step whose output shapes follow input values not known yet: each output is
        planned at the op's bound, every axis the values decide a fresh shape variable
        (:attr:`data_vars`) that the step's shape function binds at run time."""
        try:
            bounds = op.bound(in_types, attrs)
        except OpError as err:
            shown = ", ".join(f"{t.dtype}{list(t.shape)}" for t in in_types)
            raise ConversionError(f"{self.source}: {abridge(str(err))} (op {op_name!r}, "
                                  f"inputs {abridge(shown)})") from None
        outputs = [self._fresh(op_name) for _ in bounds]
        variables: dict[str, SymInt] = {}
        for name, (tensor, axes) in zip(outputs, bounds, strict=True):
            shape = list(tensor.shape)
            for axis, key in axes.items():
                if key not in variables:
                    var = f"{op_name}{self._count}_{key}"
                    self.data_vars[var] = int(shape[axis])
                    self.var_ranges[var] = (0, int(shape[axis]))
                    variables[key] = SymInt.variable(var, int(shape[axis]))
                shape[axis] = variables[key]
            self.types[name] = TensorType(tuple(shape), tensor.dtype)
            self._check_size(self.types[name], f"output of op {op_name!r}")
        self.steps.append(ConvertedStep(op_name, list(inputs), outputs, attr_dict, self.source))
        return outputs

    def _check_size(self, tensor: TensorType, what: str, verb: str = "would have") -> None:
        """Refuse a shape with a negative dimension, or whose size no device could hold
        (computed exactly: a converter's arithmetic on declared values can produce either)."""
        where = f"{self.source}: " if self.source else ""
        if any(d < 0 for d in tensor.shape):
            raise ConversionError(f"{where}{what} {verb} shape {list(tensor.shape)}, with a "
                                  "negative dimension")
        if len(tensor.shape) > MAX_NDIM:
            raise ConversionError(f"{where}{what} {verb} {len(tensor.shape)} dimensions, more "
                                  f"than the {MAX_NDIM} numpy allows")
        # numpy sizes even an empty array by its non-zero dimensions: (0, 2**62) cannot exist
        span = prod(d for d in tensor.shape if d) * parse_dtype(tensor.dtype).itemsize
        if span > MAX_TENSOR_BYTES:
            size = nbytes(tensor)
            shown = f"{size:,} bytes" if size else (
                f"empty, but its other dimensions span {span:,} bytes")
            raise ConversionError(f"{where}{what} {verb} shape {list(tensor.shape)} "
                                  f"{tensor.dtype}: {shown}, more than the "
                                  f"{MAX_TENSOR_BYTES:,} graphrt plans for")

    def _fold(self, op_name: str, op: Any, attrs: Any, inputs: Sequence[str],
              out_types: Sequence[TensorType]) -> list[str]:
        arrays = [self.constants[name] for name in inputs]
        outs = [np.empty(t.shape, parse_dtype(t.dtype).numpy) for t in out_types]
        self.computed_bytes += sum(nbytes(t) for t in out_types)
        try:
            with np.errstate(all="ignore"):
                op.positional(np, attrs, len(arrays))(*arrays, *outs)
        except Exception as err:  # the op's own compute: name it and the node
            raise ConversionError(f"{self.source}: folding op {op_name!r} on constants failed: "
                                  f"{type(err).__name__}: {err}") from None
        names = [self.constant(out) for out in outs]
        for name, tensor in zip(names, out_types, strict=True):
            self.types[name] = tensor  # the inferred type keeps symbolic sizes
        if any(name in self.shape_values for name in inputs):
            self._fold_symbolic(op_name, op, attrs, inputs, names)
        return names

    def record(self, step: ConvertedStep) -> None:
        """Remember that ``step`` computes the constants it names as outputs (see
        :attr:`made`)."""
        for out in step.outputs:
            self.made[out] = step

    def shape_constant(self, x: str, start: int = 0, end: int | None = None) -> str:
        """``x``'s shape (``[start:end]``) as an int64 constant that keeps its traced sizes
        and remembers where it came from (``shape_of``)."""
        end = len(self.shape(x)) if end is None else end
        name = self.constant(list(self.shape(x)[start:end]), "int64")
        self.record(ConvertedStep("shape_of", [x], [name], {"start": start, "end": end},
                                  self.source))
        return name

    def symbolic_ints(self, name: str) -> list[int] | None:
        """The elements of integer constant ``name`` as sizes that keep their expressions
        (:class:`~graphrt.onnx.symint.SymInt`), or None when it follows no variable."""
        values = self.shape_values.get(name)
        return None if values is None else list(values.reshape(-1))

    def _fold_symbolic(self, op_name: str, op: Any, attrs: Any, inputs: Sequence[str],
                       outputs: Sequence[str]) -> None:
        """Run a folded op again on the expressions of its symbolic inputs (Python ints in
        object arrays, whose arithmetic keeps the expressions), so that ``Shape`` →
        ``Gather`` → ``Mul`` → ``Concat`` chains stay exact. Anything the op cannot do on
        objects, or a result that differs from the concrete fold, just stays concrete."""
        if any(self.constants[out].dtype.kind not in "iu" for out in outputs):
            return
        arrays = [self.shape_values.get(name, self.constants[name]) for name in inputs]
        picked = _PICKS.get(op_name if op_name != "reduce" else f"reduce_{attrs.kind}")
        if op_name == "cast":
            results = [arrays[0].copy()]
        elif picked is not None:  # min and max choose an operand: keep it as min(a, b)
            results = [_pick_symbolic(picked, op_name, attrs, arrays)]
        else:
            results = [np.empty(self.constants[out].shape, dtype=object) for out in outputs]
            try:
                with np.errstate(all="ignore"):
                    op.positional(np, attrs, len(arrays))(*arrays, *results)
            except Exception:  # an op that needs numbers: the result stays plain
                return
        for out, result in zip(outputs, results, strict=True):
            concrete = self.constants[out]
            try:
                same = result.shape == concrete.shape and all(
                    isinstance(v, int) and int(v) == int(c)
                    for v, c in zip(result.reshape(-1), concrete.reshape(-1), strict=True))
            except (TypeError, ValueError):
                same = False
            if same and any(isinstance(v, SymInt) for v in result.reshape(-1)):
                self.shape_values[out] = result


_PICKS = {"minimum": sym_min, "maximum": sym_max, "reduce_min": sym_min,
          "reduce_max": sym_max}


def _pick_symbolic(pick: Any, op_name: str, attrs: Any, arrays: Sequence[Array]) -> Array:
    """``minimum``/``maximum`` (broadcasting) or a ``min``/``max`` reduction of object arrays,
    each choice made with :func:`sym_min`/:func:`sym_max`."""
    ufunc = np.frompyfunc(pick, 2, 1)
    if op_name != "reduce":
        return np.asarray(ufunc(*[np.asarray(a, dtype=object) for a in arrays]), dtype=object)
    result = np.asarray(arrays[0], dtype=object)
    axes = range(result.ndim) if attrs.axes is None else [a % result.ndim for a in attrs.axes]
    for axis in sorted(axes, reverse=True):
        result = ufunc.reduce(result, axis=axis, keepdims=bool(attrs.keepdims))
    return np.asarray(result, dtype=object)


def _nested(value: Any) -> Any:
    """Nested lists and tuples as nested lists (what an object array is filled from)."""
    if isinstance(value, list | tuple):
        return [_nested(v) for v in value]
    return value


class NotConstantError(ConversionError):
    """A value a converter needs at import time (a shape, axes, pads) is computed at run time.

    Attributes:
        value: the ONNX value name.
    """

    def __init__(self, where: str, value: str, what: str) -> None:
        super().__init__(f"{where}: {what or 'this input'} ({value!r}) must be known when the "
                         "model is converted, but it is computed at run time; if it is a graph "
                         f"input, give its value: from_onnx(model, constants={{{value!r}: ...}})")
        self.value = value
