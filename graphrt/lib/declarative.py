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

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import GraphFormatError, describe
from ..jsondoc import describe_validation_error, read_json
from .cpu_fusion import fused_runs
from .epilogues import EpilogueRun, epilogue_runs
from .fusion import compile_run, elementwise_runs, kernel_source
from .lowering import LoweredCall, Lowering
from .ops import OpDef, OpError, TensorType, get_op
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
Call = tuple[Callable[..., None], tuple[Name, ...], tuple[Name, ...]]
"""A kernel call of a lowered function: the kernel, its input names, its output names
(outputs, then workspace)."""


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
class _Step:
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
            steps.append(_Step(op, attrs, tuple(step.inputs), tuple(step.outputs), label))
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

    def lower(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType], *, xp: Any,
              where: str, fuse: bool = False, dynamic: bool = False) -> Lowering:
        """Specialize for a node: infer and check types, and list the calls and intermediates.

        Nothing is allocated: the executor provides the intermediates' memory.

        Args:
            inputs, outputs: the node's entry types, in order (planned shapes when dynamic).
            xp: the array namespace of the node's device (numpy or cupy).
            where: how errors name the node (``"node 5 'fused_add'"``).
            fuse: fuse runs of elementwise steps into one compiled kernel (a cupy
                ElementwiseKernel on cuda; a numba loop on cpu, static shapes only).
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
        workspaces = self._workspaces(types, xp)
        calls = self._calls(types, workspaces, xp=xp,
                            fuse=fuse and not (dynamic and xp is np))  # cpu: static only
        slots = {arg: i for i, arg in enumerate((*spec.inputs, *spec.outputs))}
        names: list[Name] = []  # the intermediates, in slot order
        for _, _, outs in calls:
            for out in outs:
                if out not in slots:
                    slots[out] = len(slots)
                    names.append(out)
        lowered = tuple(LoweredCall(kernel, tuple(slots[a] for a in (*ins, *outs)))
                        for kernel, ins, outs in calls)
        lifetimes = []
        for name in names:
            used = [i for i, (_, ins, outs) in enumerate(calls) if name in ins or name in outs]
            lifetimes.append((used[0], used[-1]))
        resize = None
        if dynamic and names:
            def intermediates(actual: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
                found = self._types(actual, where)
                for workspace in self._workspaces(found, xp):
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

    def _workspaces(self, types: dict[Name, TensorType], xp: Any
                    ) -> list[dict[Name, TensorType]]:
        """Per step, the workspace its op declares (:data:`graphrt.lib.ops.base.Workspace`) by
        name: intermediates that live for that one call, passed after its outputs."""
        found = []
        for index, step in enumerate(self.steps):
            declare = step.op.workspace
            arrays = declare(xp, [types[a] for a in step.inputs], step.attrs) if declare else []
            found.append({f"\0workspace {index}.{k}": t for k, t in enumerate(arrays)})
        return found

    def _calls(self, types: dict[Name, TensorType], workspaces: list[dict[Name, TensorType]],
               *, fuse: bool, xp: Any) -> list[Call]:
        """The kernel calls a lowered function makes: one per step, or per fused elementwise
        run, or per op with its epilogue (cpu), each a positional kernel over its input and
        output names (outputs followed by the step's workspace)."""
        calls = [(step.op.positional(xp, step.attrs, len(step.inputs)), step.inputs,
                  (*step.outputs, *workspace))
                 for step, workspace in zip(self.steps, workspaces, strict=True)]
        if not fuse:
            return calls
        info = [(step.op.elementwise, step.inputs, step.outputs) for step in self.steps]
        if xp is np:  # cpu: epilogues, then each elementwise run one numba loop
            merged = self._epilogues(types, workspaces, xp)
            taken = {k for first, last, _ in merged for k in range(first, last + 1)}
            rest = [(None if k in taken else e, ins, outs) for k, (e, ins, outs) in
                    enumerate(info)]  # what an epilogue took joins no run
            merged += [(run.first, run.last, (kernel, run.inputs, (run.output,)))
                       for run, kernel in fused_runs(rest, set(self.spec.outputs), types)]
            for first, last, call in sorted(merged, key=lambda m: m[0], reverse=True):
                calls[first : last + 1] = [call]
            return calls
        for run in reversed(elementwise_runs(info, set(self.spec.outputs))):
            try:
                source = kernel_source(run, info, types)
            except ValueError:  # a dtype CUDA code cannot name: leave these steps unfused
                continue
            calls[run.first : run.last + 1] = [
                (compile_run(xp, source), run.inputs, (run.output,))]
        return calls

    def _epilogues(self, types: dict[Name, TensorType],
                   workspaces: list[dict[Name, TensorType]], xp: Any
                   ) -> list[tuple[int, int, Call]]:
        """Steps that run as one op with its epilogue (:mod:`graphrt.lib.epilogues`): per
        run, its first and last step and the call replacing them. An op that can take one
        but has none after it runs through the same factory with an empty epilogue, which
        prepares its call at these types once, here, instead of on every call."""
        steps = self.steps
        runs = epilogue_runs([(s.op.name, s.inputs, s.outputs) for s in steps],
                             set(self.spec.outputs), types,
                             lambda k: steps[k].op.epilogue is not None)
        taken = {k for run in runs for k in range(run.first, run.last + 1)}
        runs += [EpilogueRun(k, k, None, False, step.outputs[0]) for k, step in enumerate(steps)
                 if step.op.epilogue is not None and len(step.outputs) == 1 and k not in taken]
        found = []
        for run in runs:
            step = steps[run.first]
            factory = step.op.epilogue
            assert factory is not None
            kernel = factory(xp, step.attrs, [types[a] for a in step.inputs],
                             run.residual is not None, run.relu)
            if kernel is not None:
                extra = () if run.residual is None else (run.residual,)
                found.append((run.first, run.last, (kernel, (*step.inputs, *extra),
                                                    (run.output, *workspaces[run.first]))))
        return found

    def _infer(self, step: _Step, types: dict[Name, TensorType],
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
