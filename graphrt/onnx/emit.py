"""Writing the converted steps as an ordinary bundle: graph JSON in TVM's format, a
declarative lib (one function per fused group, identical ones shared) and the params.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from ..devices.base import KIND_NAMES
try:  # TEMP until storage.liveness lands
    from ..storage import assign_storage_ids  # type: ignore[attr-defined]
except ImportError:
    from types import SimpleNamespace

    def assign_storage_ids(sizes, devices, defined_at, last_use, pinned):  # type: ignore
        return SimpleNamespace(storage_ids=list(range(len(sizes))), pool_bytes=sum(sizes),
                               lower_bound_bytes=0, naive_bytes=sum(sizes))
from .builder import Builder, Step

__all__ = ["Emitted", "emit"]

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
class Emitted:
    """The documents of a converted model and what planning found.

    Attributes:
        graph: graph JSON as a dict.
        lib: lib JSON as a dict.
        params: param name → array.
        pool_bytes, lower_bound_bytes, naive_bytes: the activation storage planned, the peak of
            simultaneously live bytes (no plan can use less), one buffer per entry.
    """

    graph: dict[str, Any]
    lib: dict[str, Any]
    params: dict[str, Array]
    pool_bytes: int
    lower_bound_bytes: int
    naive_bytes: int


def _func_base(steps: Sequence[Step]) -> str:
    parts = [f"nn_{s.op}" if s.op in _NN_OPS else s.op for s in steps]
    name = "fused_" + "_".join(parts)
    if len(name) > _MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[:_MAX_NAME - 9]}_{digest}"
    return name


def _function(steps: Sequence[Step], inputs: Sequence[str], outputs: Sequence[str]
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
                     "outputs": outs, "attrs": step.attrs})
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
        b: the converted model.
        outputs: builder values of the graph outputs, in order.
        groups: step indices of each fused node, in execution order.
        output_names: the ONNX names of the outputs: a node making one output is named after
            it, so ``get_output("y")`` finds ONNX output ``y``.
        devices: device types in the order their ``device_index`` is written; None writes no
            ``device_index`` column (everything on the fallback device).
    """
    nodes: list[dict[str, Any]] = []
    entry_of: dict[str, tuple[int, int]] = {}  # value → (node id, output index)
    types: list[tuple[list[int], str]] = []
    shape_column: list[list[int | str]] = []
    device_of: list[int] = []
    defined_at: list[int] = []
    taken: set[str] = set()
    params: dict[str, Array] = {}
    dev_index = {name: i for i, name in enumerate(devices or ())}

    def null_node(value: str, name: str, device: int) -> None:
        entry_of[value] = (len(nodes), 0)
        nodes.append({"op": "null", "name": name, "inputs": []})
        tensor = b.types[value]
        types.append((list(tensor.shape), tensor.dtype))
        shape_column.append(list(b.symbolic_dims.get(value, tensor.shape)))
        device_of.append(device)
        defined_at.append(-1)

    for name in b.inputs:
        taken.add(name)
        null_node(name, name, 0)

    consumers: dict[str, int] = {}
    for index, group in enumerate(groups):
        for step_index in group:
            for value in b.steps[step_index].inputs:
                consumers[value] = max(consumers.get(value, -1), index)
    head_values = set(outputs)
    head_names = {v: n for v, n in zip(outputs, output_names, strict=True) if v not in taken}
    functions: dict[str, dict[str, Any]] = {}
    by_body: dict[bytes, str] = {}
    counts: dict[str, int] = {}

    for index, group in enumerate(groups):
        steps = [b.steps[i] for i in group]
        made = {out for step in steps for out in step.outputs}
        ins: list[str] = []
        for step in steps:
            for value in step.inputs:
                if value not in made and value not in ins:
                    ins.append(value)
        outs = [out for step in steps for out in step.outputs
                if out in head_values or consumers.get(out, -1) > index]
        if not outs:  # a group whose results nothing reads (e.g. an unused optional output)
            outs = [steps[-1].outputs[0]]
        device = dev_index.get(steps[0].device or "", 0)
        for value in ins:
            if value not in entry_of:
                param = _param_name(value, taken)
                params[param] = b.constants[value]
                null_node(value, param, device)
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
                      "inputs": [[*entry_of[v], 0] for v in ins],
                      "attrs": {"func_name": func_name, "num_inputs": str(len(ins)),
                                "num_outputs": str(len(outs)), "flatten_data": "0"}})
        for k, value in enumerate(outs):
            entry_of[value] = (node_id, k)
            tensor = b.types[value]
            types.append((list(tensor.shape), tensor.dtype))
            shape_column.append(list(b.symbolic_dims.get(value, tensor.shape)))
            device_of.append(device)
            defined_at.append(index)

    for value in outputs:
        if value not in entry_of:  # an output that is a constant
            param = _param_name(value, taken)
            params[param] = b.constants[value]
            null_node(value, param, 0)

    row_ptr = [0]
    for node in nodes:
        row_ptr.append(row_ptr[-1] + int(node.get("attrs", {}).get("num_outputs", 1)))
    eid = {value: row_ptr[nid] + k for value, (nid, k) in entry_of.items()}
    n_entries = row_ptr[-1]
    last_use = list(defined_at)
    for index, group in enumerate(groups):
        for step_index in group:
            for value in b.steps[step_index].inputs:
                if value in eid:
                    last_use[eid[value]] = max(last_use[eid[value]], index)
    pinned = [defined_at[e] < 0 for e in range(n_entries)]
    for value in outputs:
        pinned[eid[value]] = True
    sizes = [int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
             for shape, dtype in types]
    plan = assign_storage_ids(sizes, device_of, defined_at, last_use, pinned)
    attrs: dict[str, Any] = {
        "dltype": ["list_str", [dtype for _, dtype in types]],
        "shape": ["list_shape", shape_column],
        "storage_id": ["list_int", list(plan.storage_ids)],
    }
    if devices is not None and len(devices) > 1:
        codes = {kind: code for code, kind in KIND_NAMES.items()}
        attrs["device_index"] = ["list_int", [codes[devices[d]] for d in device_of]]
    graph = {
        "nodes": nodes,
        "arg_nodes": [i for i, node in enumerate(nodes) if node["op"] == "null"],
        "node_row_ptr": row_ptr,
        "heads": [[*entry_of[v], 0] for v in outputs],
        "attrs": attrs,
    }
    if b.shape_vars:
        graph["shape_vars"] = {name: {"min": lo, "max": hi}
                               for name, (lo, hi) in b.shape_vars.items()}
    return Emitted(graph, {"format": "graphrt.lib", "version": 1, "functions": functions},
                   params, plan.pool_bytes, plan.lower_bound_bytes, plan.naive_bytes)
