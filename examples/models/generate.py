"""Write the example models (graph JSON + declarative lib JSON) under examples/models/.

The files are checked in; this script documents how they were made and rewrites them
identically. Usage: ``python examples/models/generate.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class Graph:
    """A tiny graph writer: nodes in order, one output each, sids fresh unless given."""

    def __init__(self, shape_vars: dict[str, dict[str, int]] | None = None,
                 dtype: str = "float32") -> None:
        self.shape_vars = shape_vars
        self.dtype = dtype
        self.nodes: list[dict[str, Any]] = []
        self.shapes: list[list[int | str]] = []
        self.dtypes: list[str] = []
        self.sids: list[int] = []
        self.args: list[int] = []

    def input(self, name: str, shape: list[int | str], dtype: str | None = None) -> int:
        self.nodes.append({"op": "null", "name": name, "inputs": []})
        self.args.append(len(self.nodes) - 1)
        return self._entry(shape, None, dtype)

    def op(self, name: str, func: str, inputs: list[int], shape: list[int | str],
           sid: int | None = None, dtype: str | None = None) -> int:
        self.nodes.append({"op": "tvm_op", "name": name, "inputs": [[i, 0, 0] for i in inputs],
                           "attrs": {"func_name": func, "num_inputs": str(len(inputs)),
                                     "num_outputs": "1", "flatten_data": "0"}})
        return self._entry(shape, sid, dtype)

    def _entry(self, shape: list[int | str], sid: int | None, dtype: str | None) -> int:
        self.shapes.append(shape)
        self.dtypes.append(dtype or self.dtype)
        self.sids.append(len(set(self.sids)) if sid is None else sid)
        return len(self.nodes) - 1

    def json(self, head: int, device_type: int | None = None) -> dict[str, Any]:
        n = len(self.nodes)
        graph: dict[str, Any] = {
            "nodes": self.nodes, "arg_nodes": self.args, "node_row_ptr": list(range(n + 1)),
            "heads": [[head, 0, 0]],
            "attrs": {"dltype": ["list_str", self.dtypes],
                      "shape": ["list_shape", self.shapes],
                      "storage_id": ["list_int", self.sids]}}
        if device_type is not None:
            graph["attrs"]["device_index"] = ["list_int", [device_type] * n]
        if self.shape_vars:
            graph["shape_vars"] = self.shape_vars
        return graph


def step(op: str, inputs: list[str], output: str, **attrs: Any) -> dict[str, Any]:
    return {"op": op, "inputs": inputs, "outputs": [output], "attrs": attrs}


def mlp(batch: int | str = 8) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MLP; ``batch="n"`` makes the batch a shape variable 1 <= n <= 64."""
    g = Graph({"n": {"min": 1, "max": 64}} if isinstance(batch, str) else None)
    x = g.input("x", [batch, 64])
    h = x
    for i, (n_in, n_out) in enumerate([(64, 128), (128, 128)]):
        w = g.input(f"w{i}", [n_out, n_in])
        b = g.input(f"b{i}", [n_out])
        h = g.op(f"fused_dense_relu_{i}", "fused_dense_relu", [h, w, b], [batch, n_out])
    w = g.input("w2", [10, 128])
    b = g.input("b2", [10])
    y = g.op("fused_dense_softmax", "fused_dense_softmax", [h, w, b], [batch, 10])
    lib = {"format": "graphrt.lib", "version": 1, "functions": {
        "fused_dense_relu": {"inputs": ["x", "w", "b"], "outputs": ["y"], "body": [
            step("dense", ["x", "w", "b"], "t"), step("relu", ["t"], "y")]},
        "fused_dense_softmax": {"inputs": ["x", "w", "b"], "outputs": ["y"], "body": [
            step("dense", ["x", "w", "b"], "t"), step("softmax", ["t"], "y", axis=-1)]},
    }}
    return g.json(y), lib


def cnn() -> tuple[dict[str, Any], dict[str, Any]]:
    g = Graph()
    h = g.input("data", [4, 3, 32, 32])
    size, channels = 32, 3
    for i, out_channels in enumerate([8, 16]):
        w = g.input(f"conv{i}_weight", [out_channels, channels, 3, 3])
        b = g.input(f"conv{i}_bias", [out_channels])
        h = g.op(f"fused_conv2d_relu_{i}", "fused_conv2d_relu", [h, w, b],
                 [4, out_channels, size, size])
        size, channels = size // 2, out_channels
        h = g.op(f"fused_max_pool2d_{i}", "fused_max_pool2d", [h], [4, channels, size, size])
    flat = g.op("reshape_nop", "__nop", [h], [4, channels * size * size], sid=g.sids[h])
    w = g.input("dense_weight", [10, channels * size * size])
    b = g.input("dense_bias", [10])
    y = g.op("fused_dense_softmax", "fused_dense_softmax", [flat, w, b], [4, 10])
    lib = {"format": "graphrt.lib", "version": 1, "functions": {
        "fused_conv2d_relu": {"inputs": ["data", "weight", "bias"], "outputs": ["y"], "body": [
            step("conv2d", ["data", "weight", "bias"], "t", padding=[1, 1, 1, 1]),
            step("relu", ["t"], "y")]},
        "fused_max_pool2d": {"inputs": ["data"], "outputs": ["y"], "body": [
            step("max_pool2d", ["data"], "y", pool_size=[2, 2], strides=[2, 2])]},
        "fused_dense_softmax": {"inputs": ["x", "w", "b"], "outputs": ["y"], "body": [
            step("dense", ["x", "w", "b"], "t"), step("softmax", ["t"], "y", axis=-1)]},
    }}
    return g.json(y), lib


def dynamic_slice() -> tuple[dict[str, Any], dict[str, Any]]:
    """A window of a large accelerator tensor chosen by tensors computed on the accelerator.

    ``end = start + size`` is computed on the device; ``dynamic_strided_slice`` then cuts
    ``x[start:end:step]``, whose shape only the values of start/end/step decide. Its shape
    function reads those three small tensors on the host, never ``x``.
    """
    g = Graph({"rows": {"max": 4096}, "cols": {"max": 256}})
    x = g.input("x", [4096, 256])
    start = g.input("start", [2], dtype="int64")
    size = g.input("size", [2], dtype="int64")
    stride = g.input("step", [2], dtype="int64")
    end = g.op("window_end", "fused_add_int", [start, size], [2], dtype="int64")
    window = g.op("window", "fused_dynamic_slice", [x, start, end, stride], ["rows", "cols"])
    y = g.op("scaled", "fused_scale", [window], ["rows", "cols"])
    lib = {"format": "graphrt.lib", "version": 1, "functions": {
        "fused_add_int": {"inputs": ["a", "b"], "outputs": ["y"], "body": [
            step("add", ["a", "b"], "y")]},
        "fused_dynamic_slice": {"inputs": ["x", "begin", "end", "strides"], "outputs": ["y"],
                                "body": [step("dynamic_strided_slice",
                                               ["x", "begin", "end", "strides"], "y")]},
        "fused_scale": {"inputs": ["x"], "outputs": ["y"], "body": [
            step("relu", ["x"], "t"), step("sqrt", ["t"], "y")]},
    }}
    return g.json(y, device_type=2), lib


def write(name: str, graph: dict[str, Any], lib: dict[str, Any]) -> None:
    folder = HERE / name
    folder.mkdir(exist_ok=True)
    (folder / "graph.json").write_text(json.dumps(graph, indent=1) + "\n")
    (folder / "lib.json").write_text(json.dumps(lib, indent=1) + "\n")


if __name__ == "__main__":
    write("mlp", *mlp())
    write("mlp_dynamic", *mlp("n"))
    write("dynamic_slice", *dynamic_slice())
    write("cnn", *cnn())
