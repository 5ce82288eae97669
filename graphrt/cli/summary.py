"""What ``graphrt inspect`` and ``graphrt validate`` print: the summary of a planned graph (as
text, JSON-ready data or Graphviz DOT) and the section a bundle adds.

Example:
    >>> print("\\n".join(columns([("name", "dtype"), ("x", "float32")])))
      name  dtype
      x     float32
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..bundle import MANIFEST, Bundle
from ..devices import Device
from ..schema import COPY, NOP, Graph
from ..storage import PlacementReport, StoragePlan, placement_report
from .common import lowering_on_host

__all__ = [
    "DEVICE_COLOURS",
    "GraphSummary",
    "TensorInfo",
    "bundle_lines",
    "columns",
    "external_kernels_note",
    "format_dot",
    "format_text",
    "summarize",
    "verified_line",
]

DEVICE_COLOURS = ("#cfe2f3", "#f4cccc", "#d9ead3", "#fff2cc", "#d9d2e9", "#fce5cd", "#d0e0e3",
                  "#ead1dc")
"""DOT fill colour of the 1st, 2nd, ... device (cycling after the last)."""

_SHOWN = 8
"""How many names a list shows before it says how many more there are."""


def columns(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Rows as left-aligned columns (the last column is not padded).

    Example:
        >>> columns([("name", "dtype"), ("x", "float32")])
        ['  name  dtype', '  x     float32']
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            .rstrip() for row in rows]


# --- the summary of a planned graph ----------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """One graph input or output: its name, shape, dtype and the device it was placed on;
    ``param``: an input whose value a bundle carries (a weight), not one a caller sets.

    Example:
        >>> TensorInfo("x", (8, "n"), "float32", "cpu:0").to_dict()["shape"]
        [8, 'n']
    """

    name: str
    shape: tuple[int | str, ...]  # a symbolic dimension as its text ("n")
    dtype: str
    device: str
    param: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready); ``"param": true`` marks a bundle's param."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "device": self.device, **({"param": True} if self.param else {})}


@dataclass(frozen=True)
class GraphSummary:
    """What ``graphrt inspect`` shows: inputs, outputs, node counts, ops and placement.

    Attributes:
        devices: the devices planned for, as text; the first is the fallback.
        inputs: the graph inputs (params included, marked where a bundle carries them), in
            input order.
        outputs: the graph outputs, in output order.
        nodes: node counts: ``total``, ``inputs`` (params included), ``params`` (where a
            bundle has any), ``ops``, ``__copy`` and ``__nop``.
        ops: op nodes per func_name, most used first (ties by name).
        placement: the plan's placement report (storage at the shape bounds).
        shape_vars: each shape variable's ``(min, max)``; empty for a static graph.
    """

    devices: tuple[str, ...]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    nodes: dict[str, int]
    ops: dict[str, int]
    placement: PlacementReport = field(repr=False)
    shape_vars: dict[str, tuple[int, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready), as ``graphrt inspect --json`` prints it."""
        return {"inputs": [t.to_dict() for t in self.inputs],
                "outputs": [t.to_dict() for t in self.outputs],
                "nodes": dict(self.nodes), "ops": dict(self.ops),
                "placement": self.placement.to_dict(),
                "shape_vars": {name: {"min": lo, "max": hi}
                               for name, (lo, hi) in self.shape_vars.items()}}


def _tensor(graph: Graph, plan: StoragePlan, eid: int, name: str,
            param: bool = False) -> TensorInfo:
    entry = graph.entries[eid]
    return TensorInfo(name, entry.shape_text, entry.dtype.name, str(plan.entry_device[eid]),
                      param)


def _node_counts(graph: Graph, params: int) -> dict[str, int]:
    ops = [node for node in graph.nodes if node.op != "null"]
    return {"total": len(graph.nodes), "inputs": len(graph.nodes) - len(ops),
            **({"params": params} if params else {}), "ops": len(ops),
            COPY: sum(node.func_name == COPY for node in ops),
            NOP: sum(node.func_name == NOP for node in ops)}


def _op_counts(graph: Graph) -> dict[str, int]:
    counts = Counter(node.func_name for node in graph.nodes if node.func_name is not None)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def summarize(graph: Graph, plan: StoragePlan,
              params: Collection[str] = frozenset()) -> GraphSummary:
    """Summarize a planned graph for ``graphrt inspect``; ``params``: the inputs a bundle
    carries values for (a graph JSON alone cannot tell them from the inputs a caller sets).

    Example:
        >>> from graphrt.cli import build_parser, plan_source
        >>> source, plan = plan_source(build_parser().parse_args(
        ...     ["inspect", "examples/graphs/duplex.json"]))
        >>> summarize(source.graph, plan).ops
        {'__copy': 2, 'elemwise_add': 2, 'elemwise_sub': 1}
    """
    inputs = tuple(_tensor(graph, plan, graph.nodes[nid].outputs[0], graph.nodes[nid].name,
                           graph.nodes[nid].name in params)
                   for nid in graph.arg_nodes)
    outputs = tuple(_tensor(graph, plan, eid, name)
                    for eid, name in zip(graph.heads, graph.output_names, strict=True))
    return GraphSummary(tuple(str(dev) for dev in plan.devices), inputs, outputs,
                        _node_counts(graph, sum(t.param for t in inputs)), _op_counts(graph),
                        placement_report(graph, plan),
                        {var.name: (var.min, var.max) for var in graph.shape_vars.values()})


# --- text ------------------------------------------------------------------------------------


def _tensor_lines(title: str, tensors: Sequence[TensorInfo]) -> list[str]:
    params = sum(t.param for t in tensors)
    lines = [f"{title}: {len(tensors)}" + (f" ({len(tensors) - params} to set, {params} params)"
                                           if params else "")]
    if tensors:
        rows = [("name", "shape", "dtype", "device", *(("",) if params else ()))]
        rows += [(t.name, "[" + ", ".join(map(str, t.shape)) + "]", t.dtype, t.device,
                  *(("param" if t.param else "",) if params else ())) for t in tensors]
        lines += columns(rows)
    return lines


def _node_line(nodes: dict[str, int]) -> str:
    params = f" ({nodes['params']} params)" if nodes.get("params") else ""
    return (f"nodes: {nodes['total']} total, {nodes['inputs']} inputs{params}, {nodes['ops']} "
            f"ops ({nodes[COPY]} {COPY}, {nodes[NOP]} {NOP})")


def _op_lines(ops: dict[str, int]) -> list[str]:
    lines = [f"ops: {len(ops)} func_names"]
    if ops:
        width = max(len(str(count)) for count in ops.values())
        lines += [f"  {count:>{width}}  {name}" for name, count in ops.items()]
    return lines


def format_text(summary: GraphSummary) -> str:
    """The summary as text for humans, as ``graphrt inspect`` prints it.

    Example:
        >>> print(format_text(summary))  # doctest: +SKIP
        inputs: 4
          name  shape  dtype    device
          A     [4]    float32  cuda:0
        ...
    """
    devices = ", ".join([f"{summary.devices[0]} (fallback)", *summary.devices[1:]])
    lines = [*_tensor_lines("inputs", summary.inputs), *_tensor_lines("outputs", summary.outputs),
             _node_line(summary.nodes), *_op_lines(summary.ops)]
    if summary.shape_vars:
        bounds = ", ".join(f"{lo} <= {name} <= {hi}"
                           for name, (lo, hi) in summary.shape_vars.items())
        lines.append(f"shape variables: {bounds} (storage planned at the upper bounds)")
    lines.append(f"placement on {devices}:")
    lines += ["  " + line for line in summary.placement.table().splitlines()]
    return "\n".join(lines)


# --- DOT -------------------------------------------------------------------------------------


def _dot_quote(text: str) -> str:
    """``text`` as a DOT double-quoted string, shown verbatim in a label."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n")
    return f'"{escaped}"'


def _dot_attrs(attrs: dict[str, str]) -> str:
    """DOT attributes; values are already quoted where they need it."""
    return "[" + ", ".join(f"{key}={value}" for key, value in attrs.items()) + "]"


def _dot_node(graph: Graph, plan: StoragePlan, nid: int, colours: dict[Device, str],
              heads: frozenset[int]) -> str:
    node = graph.nodes[nid]
    label = node.name if node.func_name is None else f"{node.name}\n{node.func_name}"
    shape = "ellipse" if node.op == "null" else "cds" if node.func_name == COPY else "box"
    device = plan.node_device[nid]
    attrs = {"label": _dot_quote(label), "shape": shape, "fillcolor": f'"{colours[device]}"',
             "tooltip": _dot_quote(f"node {nid} on {device}")}
    if node.func_name == NOP:
        attrs["style"] = '"filled,dashed"'
    if nid in heads:
        attrs["peripheries"] = "2"
    return f"  n{nid} {_dot_attrs(attrs)};"


def _dot_edges(graph: Graph, nid: int) -> list[str]:
    node = graph.nodes[nid]
    lines = []
    for eid in node.inputs:
        entry = graph.entries[eid]
        producer = graph.nodes[entry.nid]
        labels = [f"out {entry.index}"] if len(producer.outputs) > 1 else []
        attrs: dict[str, str] = {}
        if COPY in (producer.func_name, node.func_name):
            labels.append(f"{entry.nbytes:,} B")
            attrs.update(color='"red"', style='"bold"', fontcolor='"red"')
        if labels:
            attrs["label"] = _dot_quote("\n".join(labels))
        suffix = f" {_dot_attrs(attrs)}" if attrs else ""
        lines.append(f"  n{entry.nid} -> n{nid}{suffix};")
    return lines


def _dot_legend(devices: Sequence[Device], colours: dict[Device, str]) -> list[str]:
    lines = ["  subgraph cluster_legend {", '    label="devices";', '    style="dashed";']
    for i, dev in enumerate(devices):
        text = f"{dev} (fallback)" if i == 0 else str(dev)
        attrs = {"label": _dot_quote(text), "shape": "box", "fillcolor": f'"{colours[dev]}"'}
        lines.append(f"    legend{i} {_dot_attrs(attrs)};")
    if len(devices) > 1:  # keep the devices in the order given, side by side
        chain = " -> ".join(f"legend{i}" for i in range(len(devices)))
        lines += [f"    {{ rank=same; {chain} [style=invis]; }}"]
    return [*lines, "  }"]


def format_dot(graph: Graph, plan: StoragePlan) -> str:
    """The graph as a Graphviz DOT digraph, nodes filled by the device they run on.

    Inputs are ellipses, ops boxes (``__nop`` dashed), ``__copy`` nodes ``cds`` shapes, graph
    outputs doubly outlined. Edges into and out of ``__copy`` nodes are red and bold, labelled
    with the bytes moved; an edge from a node with several outputs names the output index.
    A legend cluster gives each device's colour.

    Example:
        >>> print(format_dot(graph, plan))  # doctest: +SKIP
        digraph graphrt {
        ...
    """
    colours = {dev: DEVICE_COLOURS[i % len(DEVICE_COLOURS)] for i, dev in enumerate(plan.devices)}
    lines = ["digraph graphrt {", '  graph [fontname="Helvetica"];',
             '  node [style="filled", fontname="Helvetica"];',
             '  edge [fontname="Helvetica", fontsize=10];']
    heads = frozenset(graph.entries[eid].nid for eid in graph.heads)
    lines += [_dot_node(graph, plan, nid, colours, heads) for nid in range(len(graph.nodes))]
    for nid in range(len(graph.nodes)):
        lines += _dot_edges(graph, nid)
    lines += _dot_legend(plan.devices, colours)
    return "\n".join([*lines, "}"])


# --- what a bundle adds ----------------------------------------------------------------------


def _names(names: list[str]) -> str:
    if not names:
        return "none"
    more = f", ... ({len(names) - _SHOWN} more)" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def bundle_lines(bundle: Bundle) -> list[str]:
    """The bundle section of ``graphrt inspect``: where it is, its versions and digest, its
    members, params, the inputs a caller sets, external kernels and metadata.

    Example:
        >>> from graphrt import load_bundle
        >>> print("\\n".join(bundle_lines(load_bundle("examples/bundles/mlp"))))  # doctest: +SKIP
        bundle: examples/bundles/mlp (directory, format 1.0, written by graphrt 0.1.0)
        ...
    """
    manifest = bundle.manifest
    described = bundle.describe()
    lines = [f"bundle: {bundle.path} ({bundle.kind}, format {manifest.format_version}, written "
             f"by graphrt {manifest.graphrt_version})",
             f"  digest: sha256:{bundle.digest} (of {MANIFEST}, which pins every member)",
             "  members:"]
    width = max(len(name) for name in manifest.members)
    lines += [f"    {name:<{width}}  {digest.size:>12,} bytes  sha256:{digest.sha256[:16]}"
              for name, digest in manifest.members.items()]
    params = described["params"]
    lines += [f"  params: {params['count']} tensors, {params['bytes']:,} bytes "
              f"({_names(list(bundle.params))})",
              f"  inputs to set: {_names([spec.name for spec in bundle.inputs])}",
              f"  external kernels: {_names(bundle.external_kernels)}"
              + (" (the loading program supplies them)" if bundle.external_kernels else "")]
    lines.append(f"  metadata: {'none' if not manifest.metadata else ''}".rstrip())
    lines += [f"    {key}: {value if isinstance(value, str) else json.dumps(value)}"
              for key, value in manifest.metadata.items()]
    return lines


def verified_line(bundle: Bundle) -> str:
    """Type-check the bundle's lib against its graph, and say what ``load_bundle`` verified.

    Raises:
        BundleError: a declarative function does not fit a node that uses it.
    """
    with lowering_on_host():
        checked = bundle.check_functions()
    return (f"ok: bundle {bundle.path}: {len(bundle.manifest.members) + 1} members verified "
            f"(sha256), {len(bundle.params)} params fit the graph, declarative functions "
            f"type-check on {checked} nodes")


def external_kernels_note(bundle: Bundle) -> str | None:
    """The note (for stderr) that a bundle needs kernels it cannot hold; None if it needs none.

    Example:
        >>> from graphrt import load_bundle
        >>> external_kernels_note(load_bundle("examples/bundles/mlp")) is None  # doctest: +SKIP
        True
    """
    if not bundle.external_kernels:
        return None
    return (f"note: the bundle needs external kernels {', '.join(bundle.external_kernels)}, "
            "which the program that loads it must supply (bundle.create(..., lib=...))")
