"""Writing the converted steps as an ordinary bundle: graph JSON in TVM's format, a
declarative lib (one function per fused group, identical ones shared) and the params.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from ..devices.base import KIND_CODES
from ..schema import COPY
from ..storage import StorageAssignment, assign_storage_ids
from .builder import Builder, ConvertedStep

__all__ = ["Emitted", "EmittedNode", "emit"]

Array = np.ndarray[Any, Any]

# TVM prefixes the ops of its nn namespace in fused function names (fused_nn_conv2d_add).
_NN_OPS = {
    "conv2d", "conv2d_transpose", "dense", "batch_matmul", "relu", "leaky_relu", "softmax",
    "log_softmax", "max_pool2d", "avg_pool2d", "global_avg_pool2d", "global_max_pool2d",
    "batch_norm", "layer_norm", "bias_add", "pad", "prelu", "lrn", "instance_norm",
    "group_norm", "conv", "conv_transpose", "max_pool", "avg_pool", "lp_pool", "depth_to_space",
    "space_to_depth",
}
_MAX_NAME = 80


@dataclass(frozen=True)
class EmittedNode:
    """One op node of the emitted graph, for the placement report.

    Attributes:
        node: the node's name; func_name: the function it calls (``__copy`` for a copy).
        device: the device type it runs on (a copy: the one it copies to).
        steps: the step indices it computes (empty for a copy).
        copied_from: for a copy, the device type it copies from.
    """

    node: str
    func_name: str
    device: str
    steps: tuple[int, ...] = ()
    copied_from: str | None = None


@dataclass(frozen=True)
class Emitted:
    """The documents of a converted model and what planning found.

    Attributes:
        graph: graph JSON as a dict.
        lib: lib JSON as a dict.
        params: param name → array.
        pool_bytes, lower_bound_bytes, naive_bytes: the storage planned for every entry
            (inputs, params and outputs included, each in a slot of its own), the peak of
            simultaneously live bytes (no plan can use less), one buffer per entry.
        nodes: every op node (fused groups and copies), in execution order.
    """

    graph: dict[str, Any]
    lib: dict[str, Any]
    params: dict[str, Array]
    pool_bytes: int
    lower_bound_bytes: int
    naive_bytes: int
    nodes: tuple[EmittedNode, ...] = ()


def _op_name(step: ConvertedStep) -> str:
    """How TVM names the op in a fused function: ``nn_conv2d``, ``sum``, ``argmax``."""
    if step.op == "reduce" and isinstance(step.attrs.get("kind"), str):
        return str(step.attrs["kind"])
    if step.op == "arg_reduce" and isinstance(step.attrs.get("kind"), str):
        return f"arg{step.attrs['kind']}"
    return f"nn_{step.op}" if step.op in _NN_OPS else step.op


def _func_base(steps: Sequence[ConvertedStep]) -> str:
    parts = [_op_name(s) for s in steps]
    name = "fused_" + "_".join(parts)
    if len(name) > _MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[:_MAX_NAME - 9]}_{digest}"
    return name


def _json_value(value: Any) -> Any:
    """``value`` as JSON can hold it: a non-finite float becomes ``"inf"``, ``"-inf"`` or
    ``"nan"``, which the ops' attribute models read back as floats (JSON has no such numbers,
    and orjson would write them as null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    return value


def _function(steps: Sequence[ConvertedStep], inputs: Sequence[str], outputs: Sequence[str]
              ) -> dict[str, Any]:
    """A function document with positional names (in0, t0, out0): equal bodies compare equal."""
    rename = {name: f"in{i}" for i, name in enumerate(inputs)}
    rename.update({name: f"out{i}" for i, name in enumerate(outputs)})
    body = []
    for step in steps:
        outs = []
        for name in step.outputs:
            if name not in rename:
                rename[name] = f"t{len(rename) - len(inputs) - len(outputs)}"
            outs.append(rename[name])
        body.append({"op": step.op, "inputs": [rename[n] for n in step.inputs],
                     "outputs": outs, "attrs": _json_value(step.attrs)})
    return {"inputs": [rename[n] for n in inputs], "outputs": [rename[n] for n in outputs],
            "body": body}


def _param_name(value: str, taken: set[str]) -> str:
    base = value if not value.startswith("%") else "p" + value[1:].split(":")[0]
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def emit(b: Builder, outputs: Sequence[str], groups: Sequence[Sequence[int]],
         output_names: Sequence[str], devices: Sequence[str] | None = None) -> Emitted:
    """Build the graph, lib and params documents.

    Args:
        b: the converted model (every step's ``device`` set when ``devices`` is given).
        outputs: builder values of the graph outputs, in order.
        groups: step indices of each fused node, in execution order; a group's steps share
            one device.
        output_names: the ONNX names of the outputs: a node making one output is named after
            it, so ``get_output("y")`` finds ONNX output ``y``.
        devices: device types in order of preference; a step's device is looked up here and
            written as its DLPack code in the ``device_index`` column when more than one is
            given (None or one: no column, everything on the fallback device). A value read
            on another device than the one it lives on goes through a ``__copy`` node; a
            graph input lives on the device of its first reader, a param on its reader's
            device (one param per device that reads it).

    Storage ids come from :func:`graphrt.storage.assign_storage_ids`: per device, inputs,
    params and outputs pinned, other entries reusing freed slots by best fit.
    """
    kinds = list(devices or ["cpu"])
    dev_index = {name: i for i, name in enumerate(kinds)}
    nodes: list[dict[str, Any]] = []
    entry_of: dict[tuple[str, int], tuple[int, int]] = {}  # (value, device) → (node, output)
    home: dict[str, int] = {}  # value → the device it is made on
    types: list[tuple[list[int], str]] = []
    shape_column: list[list[int | str]] = []
    device_of: list[int] = []
    taken: set[str] = set()
    params: dict[str, Array] = {}
    report: list[EmittedNode] = []

    def group_device(group: Sequence[int]) -> int:
        return dev_index.get(b.steps[group[0]].device or "", 0) if group else 0

    def add_entry(value: str, device: int) -> None:
        tensor = b.types[value]
        types.append((list(tensor.shape), tensor.dtype))
        shape_column.append(list(b.symbolic_dims.get(value, tensor.shape)))
        device_of.append(device)

    def null_node(value: str, name: str, device: int) -> None:
        entry_of[value, device] = (len(nodes), 0)
        nodes.append({"op": "null", "name": name, "inputs": []})
        add_entry(value, device)

    suffix: dict[str, int] = {}  # per base name, the suffixes below this are all taken

    def unique(name: str) -> str:
        base, k = name, suffix.get(name, 1)
        while name in taken:  # base, then base_k, base_k+1, ... (resumed, so it stays linear)
            name, k = f"{base}_{k}", k + 1
        suffix[base] = k
        taken.add(name)
        return name

    first_reader: dict[str, int] = {}
    consumers: dict[str, int] = {}
    for index, group in enumerate(groups):
        for step_index in group:
            for value in b.steps[step_index].inputs:
                consumers[value] = max(consumers.get(value, -1), index)
                first_reader.setdefault(value, group_device(group))
    for name in b.inputs:
        taken.add(name)
        home[name] = first_reader.get(name, 0)
        null_node(name, name, home[name])

    head_values = set(outputs)
    head_names = {v: n for v, n in zip(outputs, output_names, strict=True) if v not in taken}
    functions: dict[str, dict[str, Any]] = {}
    by_body: dict[bytes, str] = {}
    counts: dict[str, int] = {}

    def locate(value: str, device: int) -> tuple[int, int]:
        """The entry of ``value`` on ``device``: a param made there, or a ``__copy``."""
        found = entry_of.get((value, device))
        if found is not None:
            return found
        if value in b.constants:  # a param on each device that reads it
            param = _param_name(value, taken)
            params[param] = b.constants[value]
            null_node(value, param, device)
            return entry_of[value, device]
        source = home[value]
        src_node = nodes[entry_of[value, source][0]]["name"]
        name = unique(f"{COPY}_{src_node}_to_{kinds[device]}")
        entry_of[value, device] = (len(nodes), 0)
        nodes.append({"op": "tvm_op", "name": name,
                      "inputs": [[*entry_of[value, source], 0]],
                      "attrs": {"func_name": COPY, "num_inputs": "1", "num_outputs": "1",
                                "flatten_data": "0"}})
        add_entry(value, device)
        report.append(EmittedNode(name, COPY, kinds[device], copied_from=kinds[source]))
        return entry_of[value, device]

    for index, group in enumerate(groups):
        steps = [b.steps[i] for i in group]
        device = group_device(group)
        made = {out for step in steps for out in step.outputs}
        ins = list(dict.fromkeys(value for step in steps for value in step.inputs
                                 if value not in made))  # in order of first use, once each
        outs = [out for step in steps for out in step.outputs
                if out in head_values or consumers.get(out, -1) > index]
        if not outs:  # a group whose results nothing reads (e.g. an unused optional output)
            outs = [steps[-1].outputs[0]]
        in_entries = [locate(value, device) for value in ins]
        function = _function(steps, ins, outs)
        key = orjson.dumps(function, option=orjson.OPT_SORT_KEYS)
        func_name = by_body.get(key)
        if func_name is None:
            base = _func_base(steps)
            n = counts.get(base, 0)
            counts[base] = n + 1
            func_name = base if n == 0 else f"{base}_{n}"
            by_body[key] = func_name
            functions[func_name] = function
        node_id = len(nodes)
        named = [head_names[v] for v in outs if v in head_names]
        node_name = named[0] if len(outs) == 1 and named else func_name
        if node_name in taken:
            node_name = f"{node_name}_{node_id}"
        taken.add(node_name)
        nodes.append({"op": "tvm_op", "name": node_name,
                      "inputs": [[*entry, 0] for entry in in_entries],
                      "attrs": {"func_name": func_name, "num_inputs": str(len(ins)),
                                "num_outputs": str(len(outs)), "flatten_data": "0"}})
        report.append(EmittedNode(node_name, func_name, kinds[device], tuple(group)))
        for k, value in enumerate(outs):
            entry_of[value, device] = (node_id, k)
            home[value] = device
            add_entry(value, device)

    heads = []
    for value in outputs:
        if value not in home:  # an output that is a constant
            home[value] = 0
            locate(value, 0)
        heads.append([*entry_of[value, home[value]], 0])

    graph = {
        "nodes": nodes,
        "arg_nodes": [i for i, node in enumerate(nodes) if node["op"] == "null"],
        "node_row_ptr": _row_ptr(nodes),
        "heads": heads,
    }
    plan = _plan_storage(graph, types, device_of)
    attrs: dict[str, Any] = {
        "dltype": ["list_str", [dtype for _, dtype in types]],
        "shape": ["list_shape", shape_column],
        "storage_id": ["list_int", list(plan.storage_ids)],
    }
    if len(kinds) > 1:
        attrs["device_index"] = ["list_int", [KIND_CODES[kinds[d]] for d in device_of]]
    graph["attrs"] = attrs
    if b.shape_vars:
        graph["shape_vars"] = {name: {"min": lo, "max": hi}
                               for name, (lo, hi) in b.shape_vars.items()}
    return Emitted(graph, {"format": "graphrt.lib", "version": 1, "functions": functions},
                   params, plan.pool_bytes, plan.lower_bound_bytes, plan.naive_bytes,
                   tuple(report))


def _row_ptr(nodes: Sequence[dict[str, Any]]) -> list[int]:
    row_ptr = [0]
    for node in nodes:
        row_ptr.append(row_ptr[-1] + int(node.get("attrs", {}).get("num_outputs", 1)))
    return row_ptr


def _plan_storage(graph: dict[str, Any], types: Sequence[tuple[list[int], str]],
                  device_of: Sequence[int]) -> StorageAssignment[int]:
    """Storage ids by liveness over node ids (inputs and params before node 0, outputs after
    the last node), per device; inputs, params and outputs pinned."""
    nodes, row_ptr = graph["nodes"], graph["node_row_ptr"]
    n_entries = row_ptr[-1]
    defined_at = [0] * n_entries
    for nid, node in enumerate(nodes):
        for eid in range(row_ptr[nid], row_ptr[nid + 1]):
            defined_at[eid] = -1 if node["op"] == "null" else nid
    last_use = list(defined_at)
    for nid, node in enumerate(nodes):
        for src, k, _ in node["inputs"]:
            eid = row_ptr[src] + k
            last_use[eid] = max(last_use[eid], nid)
    pinned = {row_ptr[nid] for nid, node in enumerate(nodes) if node["op"] == "null"}
    for src, k, _ in graph["heads"]:
        pinned.add(row_ptr[src] + k)
        last_use[row_ptr[src] + k] = len(nodes)
    sizes = [int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
             for shape, dtype in types]
    return assign_storage_ids(sizes, device_of, defined_at, last_use, pinned)
