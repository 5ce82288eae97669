"""A small builder of graph JSON dicts for tests."""

from __future__ import annotations

from typing import Any

Ref = int | tuple[int, int]
Shape = list[int] | list[int | str]


class GraphBuilder:
    """Build TVM-format graph dicts node by node; storage ids default to fresh ones."""

    def __init__(self, *, device_index: bool = False) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.entries: list[tuple[str, Shape, int, int]] = []
        self.arg_nodes: list[int] = []
        self.device_index = device_index
        self._next_sid = 0

    def _sid(self, sid: int | None) -> int:
        if sid is None:
            sid = self._next_sid
        self._next_sid = max(self._next_sid, sid + 1)
        return sid

    def input(self, name: str, shape: Shape, dtype: str = "float32", *,
              sid: int | None = None, dev: int = 1) -> int:
        self.nodes.append({"op": "null", "name": name, "inputs": []})
        self.entries.append((dtype, shape, self._sid(sid), dev))
        self.arg_nodes.append(len(self.nodes) - 1)
        return len(self.nodes) - 1

    def op(self, name: str, func: str, inputs: list[Ref],
           outputs: list[tuple[Shape, str]] | None = None, *, shape: Shape | None = None,
           dtype: str = "float32", sids: list[int | None] | None = None, dev: int = 1,
           flatten: bool = False) -> int:
        outs = outputs if outputs is not None else [(shape or [], dtype)]
        sids = sids or [None] * len(outs)
        refs = [[ref, 0, 0] if isinstance(ref, int) else [ref[0], ref[1], 0] for ref in inputs]
        self.nodes.append({"op": "tvm_op", "name": name, "inputs": refs, "attrs": {
            "func_name": func, "num_inputs": str(len(inputs)), "num_outputs": str(len(outs)),
            "flatten_data": "1" if flatten else "0"}})
        for (out_shape, out_dtype), sid in zip(outs, sids, strict=True):
            self.entries.append((out_dtype, out_shape, self._sid(sid), dev))
        return len(self.nodes) - 1

    def build(self, heads: list[Ref],
              shape_vars: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
        row_ptr = [0]
        for node in self.nodes:
            row_ptr.append(row_ptr[-1] + int(node.get("attrs", {}).get("num_outputs", 1)))
        attrs: dict[str, Any] = {
            "dltype": ["list_str", [e[0] for e in self.entries]],
            "shape": ["list_shape", [e[1] for e in self.entries]],
            "storage_id": ["list_int", [e[2] for e in self.entries]],
        }
        if self.device_index:
            attrs["device_index"] = ["list_int", [e[3] for e in self.entries]]
        graph = {"nodes": self.nodes, "arg_nodes": self.arg_nodes, "node_row_ptr": row_ptr,
                 "heads": [[h, 0, 0] if isinstance(h, int) else [h[0], h[1], 0] for h in heads],
                 "attrs": attrs}
        if shape_vars is not None:
            graph["shape_vars"] = shape_vars
        return graph
