"""Control flow: ``If``, ``Loop``, ``Scan`` and ``SequenceMap``, resolved while converting.

A subgraph is converted into the same builder, in a scope that sees the outer graph's values,
so what reaches the graph is ordinary steps:

- ``If`` with a condition known at conversion becomes its taken branch. With a condition
  computed at run time, both branches run and each output is selected with ``where`` (as XLA
  lowers a small conditional): they must give the same shapes and dtypes.
- ``Loop`` with a trip count known at conversion (a constant, a size of the model's shapes or
  a value graphrt folded) is unrolled once per iteration. A condition the body computes at run
  time keeps the loop exact: each iteration's state is kept only while every condition so far
  held (``where``), and the scan outputs of the iterations that ran are chosen with
  ``compress``, whose length is then data dependent.
- A ``Loop`` with no trip count (a ``while``), a trip count computed at run time, or more
  iterations than unrolling may make runs at run time instead: its body becomes the nested
  program of one ``loop`` step (:mod:`graphrt.ops.control_flow`), which reads the body's
  outside values and constants as inputs. Its carried values must keep their shapes and dtypes
  from iteration to iteration and it may have no scan outputs, whose size nothing bounds. The
  body converts once; over symbolic dimensions, conversions at other sizes must give the same
  body (checked like every other step's attributes).
- ``Scan`` is unrolled over its scan axis, whose length must be known (not a symbolic
  dimension), in either direction, with its outputs stacked on their axes.
- ``SequenceMap`` runs its body once per element.

Unrolling is bounded: a loop that would make more than :data:`MAX_UNROLLED_NODES` nodes is a
:class:`~graphrt.errors.ConversionError` naming the node.

Example:
    >>> from onnx import TensorProto, helper
    >>> body = helper.make_graph(
    ...     [helper.make_node("Add", ["x", "one"], ["y"])], "body", [],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> branch = helper.make_graph(
    ...     [helper.make_node("Sub", ["x", "one"], ["z"])], "other", [],
    ...     [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    >>> graph = helper.make_graph(
    ...     [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
    ...      helper.make_node("Greater", ["s", "zero"], ["c"]),
    ...      helper.make_node("If", ["c"], ["out"], then_branch=body, else_branch=branch)],
    ...     "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    ...     [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
    ...     [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
    ...      helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    >>> import graphrt, numpy as np
    >>> module = graphrt.from_onnx(model).create("cpu")
    >>> module(x=np.array([1.0, 2.0], np.float32))[0].tolist()
    [2.0, 3.0]
    >>> module(x=np.array([-1.0, -2.0], np.float32))[0].tolist()
    [-2.0, -3.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ...errors import ConversionError, GraphrtError
from ..builder import Builder, TensorType
from ..model import OnnxNode, _attribute, to_array
from ..registry import converter, find_converter

__all__ = ["MAX_UNROLLED_NODES", "convert_subgraph"]

MAX_UNROLLED_NODES = 20_000
"""The most ONNX nodes the unrolled iterations of one Loop or Scan may convert."""


def _nodes(b: Builder, graph: Any, parent: OnnxNode) -> list[OnnxNode]:
    nodes = []
    for index, node in enumerate(graph.node):
        name = f"{parent.name}/{node.name or f'{node.op_type} #{index}'}"
        domain = node.domain if node.domain != "ai.onnx" else ""
        attrs = {a.name: _attribute(a, f"{parent.label} subgraph node {name!r}")
                 for a in node.attribute}
        opset = b.opsets.get(domain, 0) if b.opsets else parent.opset if not domain else 0
        nodes.append(OnnxNode(node.op_type if not domain else f"{domain}.{node.op_type}",
                              name, tuple(node.input), tuple(node.output), attrs, opset,
                              parent.index))
    return nodes


def convert_subgraph(b: Builder, graph: Any, bound: Mapping[str, str],
                     parent: OnnxNode) -> list[str]:
    """Convert subgraph ``graph`` of node ``parent`` into ``b``: its inputs are the values in
    ``bound`` (by the subgraph's input names), and it reads the enclosing scopes' values by
    name. Returns the builder values of its outputs, in order.

    Raises:
        ConversionError: an op without a converter, a value no scope defines, or a failing
            converter, naming the subgraph node.
    """
    outer, source = b.names, b.source
    scope = dict(outer)
    scope.update(bound)
    for tensor in graph.initializer:
        scope[tensor.name] = b.constant(to_array(tensor, f"{parent.label} subgraph "
                                                         f"initializer {tensor.name!r}"))
    try:
        for node in _nodes(b, graph, parent):
            conv = find_converter(node)
            where = f"{parent.label}: subgraph node {node.name!r} ({node.op_type})"
            if conv is None:
                raise ConversionError(f"{where} (opset {node.opset}) has no converter")
            missing = [name for name in node.inputs if name and name not in scope]
            if missing:
                raise ConversionError(f"{where} reads {missing[0]!r}, which no scope defines")
            view = replace(node, inputs=tuple(scope[name] if name else "" for name in
                                              node.inputs))
            b.names, b.source = scope, where
            try:
                outs = conv.fn(b, view)
            except GraphrtError:
                raise
            except Exception as err:  # a converter bug must still name the node
                raise ConversionError(f"{where}: conversion failed: {type(err).__name__}: "
                                      f"{err}") from err
            for k, name in enumerate(node.outputs):
                if name:
                    if k >= len(outs):
                        raise ConversionError(f"{where}: output {k} ({name!r}) is not supported")
                    scope[name] = outs[k]
        missing = [o.name for o in graph.output if o.name not in scope]
        if missing:
            raise ConversionError(f"{parent.label}: subgraph output {missing[0]!r} is never "
                                  "computed")
        return [scope[o.name] for o in graph.output]
    finally:
        b.names, b.source = outer, source


def _constant_flag(b: Builder, name: str | None) -> bool | None:
    """A boolean input's value when known at conversion, True when omitted, else None."""
    if not name:
        return True
    if not b.is_constant(name):
        return None
    return bool(np.asarray(b.constant_value(name)).reshape(-1)[0])


def _scalar(b: Builder, name: str) -> str:
    """A one-element boolean value as a 0-d one (so ``where`` keeps the branches' shapes)."""
    if b.shape(name) == ():
        return name
    return b.op("reshape", [name], {"newshape": []})[0]


def _select(b: Builder, n: OnnxNode, cond: str, chosen: str, other: str) -> str:
    """``chosen`` where ``cond`` holds, else ``other``: tensors of one type, or sequences of
    them element by element."""
    if chosen in b.sequences or other in b.sequences:
        items, others = b.sequence_items(chosen), b.sequence_items(other)
        if len(items) != len(others):  # the length must be known: freeze the condition
            b.constant_value(cond, f"the condition, which decides whether a sequence holds "
                             f"{len(items)} or {len(others)} tensors,")
            raise n.fail(f"the branches give sequences of {len(items)} and {len(others)} "
                         "tensors")
        return b.sequence([_select(b, n, cond, x, y) for x, y in zip(items, others,
                                                                       strict=True)])
    if b.type(chosen) != b.type(other):
        shown = [f"{b.dtype(v)}{list(b.shape(v))}" for v in (chosen, other)]
        raise n.fail(f"the branches give {shown[0]} and {shown[1]}; with a condition computed "
                     "at run time both run, so they must give one shape and dtype")
    return b.op("where", [cond, chosen, other])[0]


@converter("If", since=1)
def _if(b: Builder, n: OnnxNode) -> list[str]:
    flag = _constant_flag(b, n.inputs[0])
    if flag is not None:
        return convert_subgraph(b, n.attr("then_branch" if flag else "else_branch"), {}, n)
    cond = _scalar(b, n.inputs[0])
    chosen = convert_subgraph(b, n.attr("then_branch"), {}, n)
    other = convert_subgraph(b, n.attr("else_branch"), {}, n)
    if len(chosen) != len(other):
        raise n.fail(f"the branches give {len(chosen)} and {len(other)} outputs")
    return [_select(b, n, cond, x, y) for x, y in zip(chosen, other, strict=True)]


def _known_false(b: Builder, name: str) -> bool:
    """Whether boolean ``name`` is False whatever the data: a constant False, or a logical
    ``and`` (or a reshape or cast of one) with such an operand."""
    flag = _constant_flag(b, name)
    if flag is not None:
        return not flag
    step = next((s for s in reversed(b.steps) if name in s.outputs), None)
    if step is None:
        return False
    if step.op == "logical_and":
        return any(_known_false(b, value) for value in step.inputs)
    if step.op in ("reshape", "cast", "squeeze", "expand_dims") and (
            b.dtype(step.inputs[0]) == "bool"):
        return _known_false(b, step.inputs[0])
    return False


def _trip_count(b: Builder, n: OnnxNode) -> int | None:
    name = n.input(0)
    if name is None:
        return None
    value = b.constant_value(name, "the trip count M (graphrt unrolls a Loop at conversion)")
    return max(int(np.asarray(value).reshape(-1)[0]), 0)


class _TooLong(ConversionError):
    """Unrolling a loop would make more than :data:`MAX_UNROLLED_NODES` nodes."""


def _check_unroll(n: OnnxNode, iterations: int, body: Any) -> None:
    nodes = iterations * max(len(body.node), 1)
    if nodes > MAX_UNROLLED_NODES:
        raise _TooLong(f"{n.label}: unrolling {iterations} iterations of a {len(body.node)}-node "
                       f"body makes {nodes:,} nodes, more than the {MAX_UNROLLED_NODES:,} graphrt "
                       "unrolls")


def _outer_reads(graph: Any) -> set[str]:
    """The values ``graph`` (and the subgraphs of its nodes) read from enclosing scopes."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        reads.update(name for name in node.input if name and name not in defined)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                reads.update(_outer_reads(sub) - defined)
        defined.update(node.output)
    return reads


def _runtime_loop(b: Builder, n: OnnxNode, body: Any, why: str) -> list[str]:
    """The Loop as one ``loop`` step whose body is a nested program (see the module
    docstring); ``why`` says why it is not unrolled, for the errors."""
    carried = list(n.inputs[2:])
    n_carried = len(carried)
    if len(body.output) > 1 + n_carried:
        raise n.fail(f"{why}, so it runs at run time, where its scan outputs (body outputs "
                     f"past the {n_carried} carried values) have no size graphrt can plan")
    if any(value in b.sequences for value in carried):
        raise n.fail(f"{why}, so it runs at run time, where graphrt carries tensors only, not "
                     "sequences")
    sub = Builder(opsets=b.opsets)
    types = [TensorType((), "int64"), TensorType((), "bool"), *(b.type(v) for v in carried)]
    outside = sorted(name for name in _outer_reads(body) if name in b.names)
    closure = [b.names[name] for name in outside]
    if any(value in b.sequences for value in closure):
        raise n.fail(f"{why}, so it runs at run time, where its body cannot read a sequence "
                     "from outside")
    slot_inputs = [sub.input(f"%loop{k}", t) for k, t in enumerate(types)]
    sub.names = {}
    for name, value in zip(outside, closure, strict=True):
        sub.names[name] = (sub.constant(b.constants[value]) if b.is_constant(value) else
                           sub.input(f"%outside{len(slot_inputs)}", b.type(value)))
        if not b.is_constant(value):
            slot_inputs.append(sub.names[name])
    names = [i.name for i in body.input]
    if len(names) != 2 + n_carried:
        raise n.fail(f"the body takes {len(names)} inputs; a Loop with {n_carried} carried "
                     f"values needs {2 + n_carried}")
    outs = convert_subgraph(sub, body, dict(zip(names, slot_inputs, strict=False)), n)
    if sub.data_vars or sub.shape_vars:
        raise n.fail(f"{why}, so it runs at run time, where its body may not use ops whose "
                     "output shapes follow their data")
    for k, (value, start) in enumerate(zip(outs[1:], slot_inputs[2:], strict=False)):
        if sub.type(value) != sub.type(start):
            given, kept = sub.type(value), sub.type(start)
            raise n.fail(f"{why}, so it runs at run time, where carried value {k} must keep its "
                         f"type, but the body turns {kept.dtype}{list(kept.shape)} into "
                         f"{given.dtype}{list(given.shape)}")
    cond_type = sub.type(outs[0])
    if cond_type.dtype != "bool" or any(d != 1 for d in cond_type.shape):
        raise n.fail(f"the body's condition is {cond_type.dtype}{list(cond_type.shape)}, not "
                     "one bool")
    used = {v for step in sub.steps for v in step.inputs} | set(outs)
    constants = [name for name in sub.constants if name in used]
    slot = {value: k for k, value in enumerate([*slot_inputs, *constants])}
    steps = []
    for step in sub.steps:
        for out in step.outputs:
            slot[out] = len(slot)
        steps.append({"op": step.op, "inputs": [slot[v] for v in step.inputs],
                      "outputs": [slot[v] for v in step.outputs], "attrs": step.attrs})
    trips = n.input(0) or b.constant(np.array(np.iinfo(np.int64).max))
    cond = n.input(1) or b.constant(np.array(True))
    outer_constants = [b.constant(sub.constants[name]) for name in constants]
    inputs = [trips, cond, *carried, *(v for v in closure if not b.is_constant(v)),
              *outer_constants]
    return b.op("loop", inputs, {"body": steps, "n_carried": n_carried, "n_slots": len(slot),
                                 "results": [slot[v] for v in outs]})


def _unrolled_or_runtime(b: Builder, n: OnnxNode, body: Any) -> list[str]:
    """The Loop unrolled; where it turns out too long, at run time."""
    mark = (len(b.steps), dict(b.data_vars), dict(b.var_ranges))
    try:
        return _unrolled(b, n, body)
    except _TooLong as err:
        del b.steps[mark[0]:]  # the partial unrolling: nothing reads it
        b.data_vars, b.var_ranges = mark[1], mark[2]
        try:
            return _runtime_loop(b, n, body, "the Loop runs more iterations than graphrt "
                                 "unrolls")
        except ConversionError:
            raise err from None


def _stack(b: Builder, parts: Sequence[str], axis: int = 0) -> str:
    """``parts`` stacked along a new ``axis``."""
    if not parts:
        raise ConversionError(f"{b.source}: nothing to stack")
    expanded = [b.op("expand_dims", [p], {"axis": axis})[0] for p in parts]
    if len(expanded) == 1:
        return expanded[0]
    return b.op("concatenate", expanded, {"axis": axis})[0]


@converter("Loop", since=1)
def _loop(b: Builder, n: OnnxNode) -> list[str]:
    body = n.attr("body")
    count = n.input(0)
    if count is not None and not b.is_constant(count):
        try:
            return _runtime_loop(b, n, body, "the Loop's trip count M is computed at run time")
        except ConversionError as err:  # unrolling needs M: the backend freezes it
            detail = str(err).removeprefix(f"{n.label}: ")
            b.constant_value(count, f"the trip count M (to unroll the Loop: {detail})")
            raise
    if count is None and _constant_flag(b, n.input(1)) is not False:
        return _runtime_loop(b, n, body, "the Loop has no trip count (M), so only its "
                             "condition ends it")
    return _unrolled_or_runtime(b, n, body)


def _unrolled(b: Builder, n: OnnxNode, body: Any) -> list[str]:
    trips = _trip_count(b, n)
    carried = [name for name in n.inputs[2:]]
    n_state = len(carried)
    n_scan = len(body.output) - 1 - n_state
    if len(body.input) != 2 + n_state or n_scan < 0:
        raise n.fail(f"the body takes {len(body.input)} inputs and gives {len(body.output)} "
                     f"outputs; a Loop with {n_state} carried values needs {2 + n_state} and at "
                     f"least {1 + n_state}")
    flag = _constant_flag(b, n.input(1))
    if trips is None:  # no M and a condition known False
        trips = 0
    names = [i.name for i in body.input]
    # ``live`` feeds the next iteration; ``kept`` is what the loop gives, frozen once a
    # run-time condition fails. Feeding the unfrozen values on keeps counters the body carries
    # constant, so the iteration that ends the loop is still known at conversion.
    live, kept = list(carried), list(carried)
    stopped = flag is False
    # None while every iteration so far is known to have run; else the run-time condition
    active = None if flag is not None else _scalar(b, n.inputs[1])
    steps: list[list[str]] = [[] for _ in range(n_scan)]
    ran: list[str] = []  # per masked iteration, whether it ran
    for i in range(trips):
        if stopped:
            break
        _check_unroll(n, i + 1, body)  # TorchScript gives a `for` with a break M = 2**63 - 1
        cond_in = b.constant(np.array(True)) if active is None else active
        bound = {names[0]: b.constant(np.array(i, np.int64)), names[1]: cond_in,
                 **dict(zip(names[2:], live, strict=True))}
        outs = convert_subgraph(b, body, bound, n)
        cond_out, live, scans = outs[0], outs[1:1 + n_state], outs[1 + n_state:]
        for k, value in enumerate(scans):
            steps[k].append(value)
        if active is None:
            kept = list(live)
            known = _constant_flag(b, cond_out)
            if known is False:
                stopped = True
            elif known is None:
                active = _scalar(b, cond_out)
            continue
        kept = [_select(b, n, active, x, y) for x, y in zip(live, kept, strict=True)]
        ran.append(active)
        if _known_false(b, cond_out):  # the body's own counter ended the loop
            stopped = True
            continue
        active = b.op("logical_and", [active, _scalar(b, cond_out)])[0]
    state = kept
    outputs = list(state)
    for k, parts in enumerate(steps):
        if not parts:
            raise n.fail(f"scan output {k} of a Loop that runs no iteration has no shape "
                         "graphrt can know at conversion")
        stacked = _stack(b, parts)
        if ran:
            statics = len(parts) - len(ran)
            mask_parts = [b.constant(np.ones(statics, bool))] if statics else []
            mask_parts += [b.op("expand_dims", [r], {"axis": 0})[0] for r in ran]
            mask = mask_parts[0] if len(mask_parts) == 1 else b.op(
                "concatenate", mask_parts, {"axis": 0})[0]
            stacked = b.op("compress", [stacked, mask], {"axis": 0})[0]
        outputs.append(stacked)
    return outputs


def _scan(since: int) -> Any:
    def convert(b: Builder, n: OnnxNode) -> list[str]:
        body = n.attr("body")
        n_scan_in = int(n.attr("num_scan_inputs"))
        inputs = list(n.inputs)
        if since < 9:  # opset 8: sequence_lens first, and a batch axis on everything
            if inputs and inputs[0]:
                raise n.fail("Scan-8's sequence_lens is not supported; every sequence runs to "
                             "its full length")
            inputs = inputs[1:]
            return _scan8(b, n, body, inputs, n_scan_in)
        return _scan_unrolled(b, n, body, inputs, n_scan_in)

    return convert


def _ints(n: OnnxNode, key: str, count: int, default: int = 0) -> list[int]:
    values = [int(v) for v in n.attr(key, [default] * count)]
    if len(values) != count:
        raise n.fail(f"{key} has {len(values)} values, expected {count}")
    return values


def _scan_unrolled(b: Builder, n: OnnxNode, body: Any, inputs: Sequence[str],
                   n_scan_in: int) -> list[str]:
    n_state = len(inputs) - n_scan_in
    n_scan_out = len(body.output) - n_state
    if n_state < 0 or n_scan_out < 0 or len(body.input) != len(inputs):
        raise n.fail(f"the body takes {len(body.input)} inputs and gives {len(body.output)} "
                     f"outputs for {len(inputs)} inputs with {n_scan_in} scanned")
    scans = inputs[n_state:]
    in_axes = _ints(n, "scan_input_axes", n_scan_in)
    in_dirs = _ints(n, "scan_input_directions", n_scan_in)
    out_axes = _ints(n, "scan_output_axes", n_scan_out)
    out_dirs = _ints(n, "scan_output_directions", n_scan_out)
    axes = []
    lengths = set()
    for name, axis in zip(scans, in_axes, strict=True):
        shape = b.shape(name)
        axis = axis % len(shape) if -len(shape) <= axis < len(shape) else -1
        if axis < 0:
            raise n.fail(f"scan_input_axes {in_axes} is out of range for shape {list(shape)}")
        if type(shape[axis]) is not int:  # a traced size: it follows a symbolic dimension
            raise n.fail(f"the scan axis of {name!r} is symbolic ({shape[axis]} at its bound); "
                         "graphrt unrolls a Scan at conversion, so its length must be fixed")
        axes.append(axis)
        lengths.add(int(shape[axis]))
    if len(lengths) > 1:
        raise n.fail(f"the scan inputs have lengths {sorted(lengths)} on their scan axes")
    length = lengths.pop() if lengths else 0
    _check_unroll(n, length, body)
    names = [i.name for i in body.input]
    state = list(inputs[:n_state])
    parts: list[list[str]] = [[] for _ in range(n_scan_out)]
    for t in range(length):
        slices = []
        for name, axis, direction in zip(scans, axes, in_dirs, strict=True):
            at = b.constant(np.array(length - 1 - t if direction else t, np.int64))
            slices.append(b.op("take", [name, at], {"axis": axis, "mode": "raise"})[0])
        outs = convert_subgraph(b, body, dict(zip(names, [*state, *slices], strict=True)), n)
        state = outs[:n_state]
        for k, value in enumerate(outs[n_state:]):
            parts[k].append(value)
    outputs = list(state)
    for k in range(n_scan_out):
        if not parts[k]:
            raise n.fail("a Scan over length 0 has scan outputs of no shape graphrt can know")
        ordered = parts[k][::-1] if out_dirs[k] else parts[k]
        rank = len(b.shape(ordered[0])) + 1
        axis = out_axes[k] % rank if -rank <= out_axes[k] < rank else -1
        if axis < 0:
            raise n.fail(f"scan_output_axes {out_axes} is out of range for rank {rank}")
        outputs.append(_stack(b, ordered, axis))
    return outputs


def _scan8(b: Builder, n: OnnxNode, body: Any, inputs: Sequence[str],
           n_scan_in: int) -> list[str]:
    """Scan-8: every input has a batch axis 0 and scan axis 1; the body runs per batch."""
    batches = {int(b.shape(name)[0]) for name in inputs}
    if len(batches) != 1:
        raise n.fail(f"the inputs' batch sizes differ: {sorted(batches)}")
    results: list[list[str]] = []
    for index in range(batches.pop()):
        at = b.constant(np.array(index, np.int64))
        row = [b.op("take", [name, at], {"axis": 0, "mode": "raise"})[0] for name in inputs]
        plain = replace(n, attrs={**n.attrs, "scan_input_axes": [0] * n_scan_in,
                                  "scan_input_directions": n.attr("directions",
                                                                  [0] * n_scan_in)})
        results.append(_scan_unrolled(b, plain, body, row, n_scan_in))
    return [_stack(b, [r[k] for r in results]) for k in range(len(results[0]))] if results \
        else []


for _since, _until in ((8, 8), (9, None)):
    converter("Scan", since=_since, until=_until)(_scan(_since))


@converter("SequenceMap", since=17)
def _sequence_map(b: Builder, n: OnnxNode) -> list[str]:
    body = n.attr("body")
    given = [name for name in n.inputs if name]
    lengths = {len(b.sequence_items(name)) for name in given if name in b.sequences}
    if n.inputs[0] not in b.sequences:
        raise n.fail("the first input of SequenceMap must be a sequence")
    if len(lengths) != 1:
        raise n.fail(f"the input sequences have lengths {sorted(lengths)}")
    length = lengths.pop()
    _check_unroll(n, length, body)
    names = [i.name for i in body.input]
    columns: list[list[str]] = [[] for _ in body.output]
    for i in range(length):
        args = [b.sequence_items(name)[i] if name in b.sequences else name for name in given]
        for k, value in enumerate(convert_subgraph(b, body, dict(zip(names, args,
                                                                      strict=True)), n)):
            columns[k].append(value)
    return [b.sequence(items) for items in columns]
