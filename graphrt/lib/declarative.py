"""Declarative fused functions: a lib as data, safe to load, runnable on every device.

A document maps each func_name to a short sequence of standard ops::

    {"format": "graphrt.lib", "version": 1, "functions": {
      "fused_dense_relu": {
        "inputs": ["x", "w", "b"], "outputs": ["y"],
        "body": [{"op": "dense", "inputs": ["x", "w", "b"], "outputs": ["t"]},
                 {"op": "relu", "inputs": ["t"], "outputs": ["y"]}]}}}

Loading checks the document's form and every function's dataflow (known ops, valid
attributes, arity, each name defined once before use, every output written). ``create()`` then
lowers each function for its node: types are inferred through the body and checked against the
graph's entries, and the intermediates are listed for the executor to plan (the lib allocates
nothing).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import GraphFormatError, KernelNotFoundError, describe
from ..jsondoc import describe_validation_error, read_json
from ..kernels import Epilogue, KernelChain, Prepared
from ..ops import OpDef, OpError, TensorType, epilogue_runs, get_op
from .lowering import LoweredCall, Lowering
from .shape_functions import ShapeFunction

__all__ = [
    "FORMAT",
    "VERSION",
    "FunctionSpec",
    "FusedFunction",
    "LibrarySpec",
    "StepSpec",
    "parse_library_spec",
]

FORMAT = "graphrt.lib"
VERSION = 1

Name = str
Call = tuple[Callable[..., None], tuple[Name, ...], tuple[Name, ...], bool]
"""A kernel call of a lowered function: the kernel, its input names, its output names
(outputs, then workspace), whether it may be recorded into a device graph."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StepSpec(_Model):
    """One op application: ``outputs = op(inputs, **attrs)``."""

    op: str
    inputs: list[Name]
    outputs: list[Name] = Field(min_length=1)
    attrs: dict[str, Any] = Field(default_factory=dict)


class FunctionSpec(_Model):
    """A fused function: named inputs and outputs, and the steps between them."""

    inputs: list[Name]
    outputs: list[Name] = Field(min_length=1)
    body: list[StepSpec] = Field(min_length=1)


class LibrarySpec(_Model):
    """The whole declarative lib document (versioned)."""

    format: Literal["graphrt.lib"] = "graphrt.lib"
    version: int = VERSION
    functions: dict[str, FunctionSpec] = Field(default_factory=dict)

    @field_validator("version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version != VERSION:
            raise ValueError(f"unsupported lib version {version}; this graphrt reads version "
                             f"{VERSION}")
        return version


def _fail(func: str, where: str, problem: str) -> GraphFormatError:
    return GraphFormatError(f"lib function {describe(func)}{where}: {problem}")


@dataclass(frozen=True)
class _BodyStep:
    op: OpDef
    attrs: Any
    inputs: tuple[Name, ...]
    outputs: tuple[Name, ...]
    label: str  # " step 2 (op 'conv2d')"


class FusedFunction:
    """A checked declarative function, ready to be bound to a node at ``create()``.

    Its :attr:`shape_function` infers the output shapes through the body; it reads the values
    of exactly the function inputs that a data-dependent op (``dynamic_strided_slice``) reads.

    Raises (at construction):
        GraphFormatError: unknown op, bad attributes, wrong arity, a name used before it is
            defined or defined twice, an output never written, a data-dependent op reading the
            values of an intermediate; naming function, step and op.
    """

    def __init__(self, name: str, spec: FunctionSpec) -> None:
        self.name = name
        self.spec = spec
        defined = set()
        for arg in spec.inputs:
            if arg in defined:
                raise _fail(name, "", f"input {describe(arg)} is listed twice")
            defined.add(arg)
        steps = []
        for index, step in enumerate(spec.body):
            label = f" step {index} (op {describe(step.op)})"
            try:
                op = get_op(step.op)
            except OpError as err:
                raise _fail(name, f" step {index}", str(err)) from None
            try:
                attrs = op.attrs.model_validate(step.attrs)
            except ValidationError as err:
                problems = describe_validation_error(
                    err, "attrs", lambda loc: f"attr {'.'.join(map(str, loc)) or '?'}", 3)
                raise _fail(name, label, f"bad attributes: {problems}") from None
            if op.arity is not None and len(step.inputs) != op.arity:
                raise _fail(name, label, f"takes {op.arity} inputs, given {len(step.inputs)}")
            if op.arity is None and not step.inputs:
                raise _fail(name, label, "takes at least one input, given none")
            expected_outputs = op.outputs_for(attrs)
            if len(step.outputs) != expected_outputs:
                raise _fail(name, label, f"makes {expected_outputs} outputs, given "
                            f"{len(step.outputs)} names")
            for arg in step.inputs:
                if arg not in defined:
                    raise _fail(name, label,
                                f"reads {describe(arg)} before anything defines it")
            for out in step.outputs:
                if out in defined:
                    raise _fail(name, label, f"writes {describe(out)}, which is already defined "
                                "(each name is assigned once)")
                defined.add(out)
            steps.append(_BodyStep(op, attrs, tuple(step.inputs), tuple(step.outputs), label))
        for out in spec.outputs:
            if out not in defined or out in spec.inputs:
                raise _fail(name, "", f"output {describe(out)} is never written by a step")
        self.steps = tuple(steps)
        self.shape_function = ShapeFunction(self._output_shapes, self._data_dependence())

    def _data_dependence(self) -> tuple[bool, ...]:
        """Per function input: whether some step's shape function reads its values."""
        flags = dict.fromkeys(self.spec.inputs, False)
        for step in self.steps:
            for arg, needed in zip(step.inputs, step.op.needs_data(len(step.inputs)),
                                   strict=True):
                if not needed:
                    continue
                if arg not in flags:
                    raise _fail(self.name, step.label,
                                f"needs the values of {describe(arg)} on the host to know its "
                                "output shape, but only a function input's values can be read "
                                "there; make it an input of the function")
                flags[arg] = True
        return tuple(flags[arg] for arg in self.spec.inputs)

    def _output_shapes(self, types: Sequence[TensorType],
                       data: Sequence[Any]) -> list[tuple[int, ...]]:
        env = dict(zip(self.spec.inputs, types, strict=True))
        values = dict(zip(self.spec.inputs, data, strict=True))
        for step in self.steps:
            ins = [env[arg] for arg in step.inputs]
            step_data = [values.get(arg) if needed else None for arg, needed in
                         zip(step.inputs, step.op.needs_data(len(ins)), strict=True)]
            env.update(zip(step.outputs, step.op.infer(ins, step.attrs, step_data), strict=True))
        return [env[out].shape for out in self.spec.outputs]

    def lower(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType], *,
              kernels: KernelChain, where: str, fuse: bool = False,
              dynamic: bool = False) -> Lowering:
        """Specialize for a node: infer and check types, prepare a kernel per step (or per
        fused run) through the device's provider chain, and list the intermediates.

        Nothing is allocated: the executor provides the intermediates' memory.

        Args:
            inputs, outputs: the node's entry types, in order (planned shapes when dynamic).
            kernels: the provider chain of the node's device (:func:`graphrt.kernels.chain`).
            where: how errors name the node (``"node 5 'fused_add'"``).
            fuse: let the chain fuse runs of elementwise steps into one kernel and an op with
                the elementwise steps after it (its epilogue), where its providers can.
            dynamic: the node's shapes vary from run to run, up to the planned ones given; the
                lowering then says how to size the intermediates for each run's shapes.

        Raises:
            GraphFormatError: arity or type mismatch with the node, or a step's shape function
                refusing its inputs.
        """
        spec = self.spec
        if len(inputs) != len(spec.inputs) or len(outputs) != len(spec.outputs):
            raise _fail(self.name, f" at {where}", f"takes {len(spec.inputs)} inputs and makes "
                        f"{len(spec.outputs)} outputs, but the node has {len(inputs)} and "
                        f"{len(outputs)}")
        types = self._types((*inputs, *outputs), where)
        for out, expected in zip(spec.outputs, outputs, strict=True):
            if types[out] != expected:
                raise _fail(self.name, f" at {where}", f"output {describe(out)} is "
                            f"{_show(types[out])} but the graph's entry is {_show(expected)}")
        prepared = self._prepare(types, kernels, dynamic, where)
        workspaces = _workspaces(prepared)
        calls = [(p.call, step.inputs, (*step.outputs, *workspace), p.capturable)
                 for step, p, workspace in zip(self.steps, prepared, workspaces, strict=True)]
        if fuse:
            calls = self._fused(calls, types, workspaces, kernels, dynamic)
        slots = {arg: i for i, arg in enumerate((*spec.inputs, *spec.outputs))}
        names: list[Name] = []  # the intermediates, in slot order
        for _, _, outs, _ in calls:
            for out in outs:
                if out not in slots:
                    slots[out] = len(slots)
                    names.append(out)
        lowered = tuple(LoweredCall(kernel, tuple(slots[a] for a in (*ins, *outs)), capturable)
                        for kernel, ins, outs, capturable in calls)
        lifetimes = []
        for name in names:
            used = [i for i, (_, ins, outs, _) in enumerate(calls) if name in ins or name in outs]
            lifetimes.append((used[0], used[-1]))
        resize = None
        if dynamic and names:
            def intermediates(actual: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
                found = self._types(actual, where)
                for workspace in _workspaces(self._prepare(found, kernels, dynamic, where)):
                    found.update(workspace)
                return tuple(found[name] for name in names)

            resize = lru_cache(maxsize=_CACHED_SHAPES)(intermediates)
        for workspace in workspaces:
            types.update(workspace)
        return Lowering(lowered, len(slots) - len(names), tuple(types[n] for n in names),
                        tuple(lifetimes), resize)

    def _types(self, arrays: Sequence[TensorType], where: str) -> dict[Name, TensorType]:
        """Every name's type, given the types of the function's inputs and outputs."""
        spec = self.spec
        types = dict(zip(spec.inputs, arrays[:len(spec.inputs)], strict=True))
        declared = dict(zip(spec.outputs, arrays[len(spec.inputs):], strict=True))
        for step in self.steps:
            types.update(zip(step.outputs, self._infer(step, types, declared, where),
                             strict=True))
        return types

    def _prepare(self, types: dict[Name, TensorType], kernels: KernelChain, dynamic: bool,
                 where: str) -> list[Prepared]:
        """Each step's kernel, prepared by the chain at these types (the reference where no
        other provider has one).

        Raises:
            KernelNotFoundError: the node's device kind runs no kernel for a step's op.
            GraphFormatError: a kernel refuses the step's types (its workspace cannot be
                sized), naming function, step and node.
        """
        found = []
        for step in self.steps:
            try:
                prepared = kernels.prepare(step.op, step.attrs,
                                           [types[a] for a in step.inputs],
                                           [types[a] for a in step.outputs], dynamic=dynamic)
            except KernelNotFoundError as err:
                raise KernelNotFoundError(f"lib function {describe(self.name)}{step.label} at "
                                          f"{where}: {err}") from None
            except OpError as err:
                raise _fail(self.name, f"{step.label} at {where}", str(err)) from None
            assert prepared is not None  # the reference answers every op it supports
            found.append(prepared)
        return found

    def _fused(self, calls: list[Call], types: dict[Name, TensorType],
               workspaces: list[dict[Name, TensorType]], kernels: KernelChain,
               dynamic: bool) -> list[Call]:
        """``calls`` with each op that takes the steps after it as its epilogue, then each
        run of elementwise steps, replaced by one call where the chain has a kernel for it."""
        steps = self.steps
        exported = set(self.spec.outputs)
        runs = epilogue_runs([(s.op.name, s.inputs, s.outputs) for s in steps], exported, types,
                             lambda k: kernels.takes_epilogue(steps[k].op))
        merged: list[tuple[int, int, Call]] = []
        for run in runs:
            step = steps[run.first]
            clip = steps[run.last].attrs if run.clip else None
            epilogue = Epilogue(run.residual is not None, run.relu, None if clip is None else (
                float(clip.a_min), float(clip.a_max)), run.bias is not None)
            prepared = kernels.prepare(step.op, step.attrs, [types[a] for a in step.inputs],
                                       [types[run.output]], epilogue, dynamic=dynamic)
            # the fused kernel takes the workspace planned for the step alone, so it must be
            # the same (a provider whose epilogue needs other scratch leaves the steps apart)
            if prepared is not None and prepared.workspace == tuple(
                    workspaces[run.first].values()):
                extra = tuple(name for name in (run.bias, run.residual) if name is not None)
                merged.append((run.first, run.last, (
                    prepared.call, (*step.inputs, *extra), (run.output, *workspaces[run.first]),
                    prepared.capturable)))
        taken = {k for first, last, _ in merged for k in range(first, last + 1)}
        rest = [(None if k in taken  # what an epilogue took joins no run
                 else s.op.expression(s.attrs, [types[a] for a in s.inputs]),
                 s.inputs, s.outputs) for k, s in enumerate(steps)]
        merged += [(run.first, run.last, (kernel, run.inputs, (run.output,), True))
                   for run, kernel in kernels.fuse(rest, exported, types, dynamic=dynamic)]
        calls = list(calls)
        for first, last, call in sorted(merged, key=lambda m: m[0], reverse=True):
            calls[first : last + 1] = [call]
        return calls

    def _infer(self, step: _BodyStep, types: dict[Name, TensorType],
               declared: dict[Name, TensorType], where: str) -> list[TensorType]:
        in_types = [types[arg] for arg in step.inputs]
        if any(step.op.needs_data(len(in_types))):
            # The values are only known at run time; the graph plans this output's shape.
            if all(out in declared for out in step.outputs):
                return [declared[out] for out in step.outputs]
            raise _fail(self.name, f"{step.label} at {where}", "a data-dependent op may only "
                        "write the function's outputs, whose shapes the graph plans")
        try:
            return step.op.infer(in_types, step.attrs, [None] * len(in_types))
        except OpError as err:
            shown = ", ".join(_show(t) for t in in_types)
            raise _fail(self.name, f"{step.label} at {where}", f"{err} (inputs: {shown})"
                        ) from None


def _workspaces(prepared: Sequence[Prepared]) -> list[dict[Name, TensorType]]:
    """Per step, its kernel's workspace by name: intermediates that live for that one call,
    passed after its outputs."""
    return [{f"\0workspace {index}.{k}": t for k, t in enumerate(p.workspace)}
            for index, p in enumerate(prepared)]


def _show(tensor: TensorType) -> str:
    return f"{tensor.dtype}{list(tensor.shape)}"


_CACHED_SHAPES = 64
"""Run shapes whose intermediate types a dynamic node remembers."""


def parse_library_spec(source: str | bytes | os.PathLike[str] | dict[str, Any]) -> LibrarySpec:
    """Read a declarative lib document from JSON text, bytes, a path or a dict.

    Raises:
        GraphFormatError: not JSON, or not a valid lib document (the message says where).
    """
    data = read_json(source, "lib", GraphFormatError)
    try:
        return LibrarySpec.model_validate(data)
    except ValidationError as err:
        raise GraphFormatError("malformed lib document: "
                               + describe_validation_error(err, "lib")) from None
