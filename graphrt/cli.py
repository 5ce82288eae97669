"""The ``graphrt`` command line: look at a graph or a bundle and check it without running a
kernel; ``run`` and ``bench`` (in :mod:`graphrt.cli_run` and :mod:`graphrt.cli_bench`) execute
a bundle.

Every subcommand is one function registered with :func:`command`; :func:`main` builds the
parser from the registry and dispatches. A new subcommand is one more registered function plus
a function that adds its arguments; the shared options come from :func:`add_graph_argument`
and :func:`add_device_option`.

Example:
    >>> from graphrt.cli import main
    >>> main(["validate", "examples/graphs/simplex.json"])  # doctest: +SKIP
    ok: 6 nodes, 6 entries, 96 bytes on cpu:0
    0
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__
from .bundle import Bundle, is_zip, load_bundle
from .cli_bundle import bundle_lines, verified_line
from .devices import Device
from .devices.base import CPU, KIND_CODES, SIM, host_memory_bytes
from .errors import DeviceError, GraphrtError
from .executor import scratch_needs
from .schema import COPY, NOP, Graph, load_graph
from .storage import (
    PlacementReport,
    StoragePlan,
    check_capacity,
    placement_report,
    plan_storage,
    with_scratch,
)

__all__ = [
    "Command",
    "GraphSummary",
    "Source",
    "TensorInfo",
    "add_device_option",
    "add_graph_argument",
    "build_parser",
    "columns",
    "command",
    "format_dot",
    "format_text",
    "load_graph_source",
    "load_source",
    "main",
    "parse_device",
    "parse_devices",
    "plan_graph",
    "plan_source",
    "summarize",
]

Handler = Callable[[argparse.Namespace], int]
"""A subcommand: takes the parsed arguments, prints its result, returns the exit status."""

Configure = Callable[[argparse.ArgumentParser], None]
"""Adds a subcommand's arguments to its parser."""

DEFAULT_DEVICES = ("cpu",)
DEVICE_COLOURS = ("#cfe2f3", "#f4cccc", "#d9ead3", "#fff2cc", "#d9d2e9", "#fce5cd", "#d0e0e3",
                  "#ead1dc")
"""DOT fill colour of the 1st, 2nd, ... device given (cycling after the last)."""


# --- the subcommand registry -----------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one-line help, argument set-up and handler."""

    name: str
    help: str
    configure: Configure
    handler: Handler


_COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, configure: Configure) -> Callable[[Handler], Handler]:
    """Register the decorated function as the subcommand ``name``.

    Args:
        name: the subcommand as typed (``graphrt NAME ...``).
        help: one line for ``graphrt --help``.
        configure: adds the subcommand's arguments to its parser.

    Raises:
        ValueError: a subcommand of that name is already registered.

    Example:
        >>> @command("hello", "say hello", lambda parser: None)  # doctest: +SKIP
        ... def hello(args: argparse.Namespace) -> int:
        ...     print("hello")
        ...     return 0
    """

    def register(handler: Handler) -> Handler:
        if name in _COMMANDS:
            raise ValueError(f"graphrt subcommand {name!r} is registered twice")
        _COMMANDS[name] = Command(name, help, configure, handler)
        return handler

    return register


def build_parser() -> argparse.ArgumentParser:
    """The ``graphrt`` argument parser, with one subparser per registered subcommand.

    Example:
        >>> args = build_parser().parse_args(["validate", "g.json", "--device", "sim"])
        >>> args.command, args.graph, args.devices
        ('validate', 'g.json', ['sim'])
    """
    parser = argparse.ArgumentParser(
        prog="graphrt", description="Inspect, check, run and time TVM-format model graphs "
                                    "and graphrt bundles.")
    parser.add_argument("--version", action="version", version=f"graphrt {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in _COMMANDS.values():
        sub = subparsers.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(sub)
        sub.set_defaults(handler=cmd.handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``graphrt`` command line; returns the exit status.

    A :class:`graphrt.GraphrtError` (or an ``OSError``, such as an output folder that cannot
    be written) is printed to stderr as ``ErrorType: message`` and gives status 1. Usage
    errors exit with status 2 through ``SystemExit``, as argparse does.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` when None.

    Example:
        >>> main(["validate", "missing.json"])  # doctest: +SKIP
        1
    """
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except (GraphrtError, OSError) as err:
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return 1


# --- shared arguments: the graph and the devices ---------------------------------------------


def add_graph_argument(parser: argparse.ArgumentParser) -> None:
    """Add the positional ``GRAPH`` argument (a graph JSON file or a bundle) to a subcommand.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_graph_argument(parser)
        >>> parser.parse_args(["g.json"]).graph
        'g.json'
    """
    parser.add_argument("graph", metavar="GRAPH",
                        help="graph JSON file, or a bundle (directory or single file)")


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """Add the repeatable ``--device KIND[:N]`` option (default ``cpu``) to a subcommand.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_device_option(parser)
        >>> parser.parse_args(["--device", "cpu", "--device", "cuda:1"]).devices
        ['cpu', 'cuda:1']
    """
    parser.add_argument(
        "--device", dest="devices", action="append", metavar="KIND[:N]",
        help="a device to place the graph on: cpu, cuda or sim, with an optional ordinal; "
             "repeat for several, the first being the fallback (default: cpu)")


def parse_device(text: str) -> Device:
    """Read ``KIND[:N]`` as a device without checking that it exists (nothing is allocated).

    Raises:
        DeviceError: an unknown kind or an ordinal that is not a non-negative integer.

    Example:
        >>> parse_device("cuda:1")
        graphrt.device('cuda:1')
    """
    kind, colon, ordinal = text.strip().lower().partition(":")
    if kind not in KIND_CODES:
        raise DeviceError(f"unknown device kind {kind!r} in --device {text!r} "
                          f"(known: {', '.join(KIND_CODES)}; written KIND or KIND:N)")
    if colon and not (ordinal.isascii() and ordinal.isdigit()):
        raise DeviceError(f"device ordinal in --device {text!r} must be a non-negative integer "
                          f"(written KIND or KIND:N, e.g. {kind}:0)")
    return Device(KIND_CODES[kind], int(ordinal or 0))


def parse_devices(texts: Sequence[str] | None) -> tuple[Device, ...]:
    """The devices of the ``--device`` options, in order; just ``cpu:0`` when none was given.

    Example:
        >>> parse_devices(["cpu", "sim:1"])
        (graphrt.device('cpu:0'), graphrt.device('sim:1'))
    """
    return tuple(parse_device(text) for text in (texts or DEFAULT_DEVICES))


@dataclass(frozen=True)
class Source:
    """What a subcommand was given: a graph, and the bundle it came from (None for JSON)."""

    graph: Graph
    bundle: Bundle | None = None


def load_source(path: str) -> Source:
    """Load a graph JSON file, or a bundle (a directory or a zip file), verifying it.

    Raises:
        GraphFormatError: a graph file that cannot be read or is not a valid graph.
        BundleError: a bundle that fails any check.

    Example:
        >>> load_source("examples/bundles/mlp").bundle.metadata["model"]  # doctest: +SKIP
        'mlp'
    """
    where = Path(path)
    if where.is_dir() or is_zip(where):
        bundle = load_bundle(where)
        return Source(bundle.graph, bundle)
    return Source(load_graph(where))


def load_graph_source(path: str) -> Graph:
    """Load the graph a subcommand was given: a graph JSON file, or a bundle's graph.

    Raises:
        GraphFormatError, BundleError: as :func:`load_source`.

    Example:
        >>> load_graph_source("examples/graphs/simplex.json").input_names  # doctest: +SKIP
        ('A', 'B', 'C')
    """
    return load_source(path).graph


def _host_capacity(devices: Sequence[Device]) -> dict[Device, int | None]:
    """What host-memory devices can hold; other devices are not asked (they may be absent)."""
    host = host_memory_bytes()
    return {dev: host for dev in devices if dev.type_code in (CPU, SIM)}


def plan_source(args: argparse.Namespace) -> tuple[Source, StoragePlan]:
    """Load ``args.graph`` (a graph or a bundle) and plan it over ``args.devices``.

    Raises:
        GraphFormatError, BundleError, DeviceError, PlacementError.

    Example:
        >>> args = build_parser().parse_args(["inspect", "examples/bundles/mlp"])
        >>> source, plan = plan_source(args)  # doctest: +SKIP
    """
    devices = parse_devices(args.devices)
    source = load_source(args.graph)
    plan = plan_storage(source.graph, devices, strict=False)
    if source.bundle is not None:  # its lib is known: plan the intermediates too
        plan = with_scratch(plan, scratch_needs(source.bundle.compile_on_host().programs))
    check_capacity(source.graph, plan, _host_capacity(devices))
    return source, plan


def plan_graph(args: argparse.Namespace) -> tuple[Graph, StoragePlan]:
    """Load ``args.graph`` and plan its storage over ``args.devices`` (fallbacks allowed).

    Nothing is allocated and no GPU is needed: a cuda device is planned for, not opened.
    Storage on cpu and sim is checked against the host's memory.

    Raises:
        GraphFormatError, BundleError, DeviceError, PlacementError.

    Example:
        >>> args = build_parser().parse_args(["inspect", "examples/graphs/duplex.json"])
        >>> graph, plan = plan_graph(args)  # doctest: +SKIP
        >>> len(plan.fallbacks)  # doctest: +SKIP
        6
    """
    source, plan = plan_source(args)
    return source.graph, plan


# --- the summary of a planned graph ----------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """One graph input or output: its name, shape, dtype and the device it was placed on."""

    name: str
    shape: tuple[int | str, ...]  # a symbolic dimension as its text ("n")
    dtype: str
    device: str

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "device": self.device}


@dataclass(frozen=True)
class GraphSummary:
    """What ``graphrt inspect`` shows: inputs, outputs, node counts, ops and placement.

    Attributes:
        devices: the devices planned for, as text; the first is the fallback.
        inputs: the graph inputs (params included), in input order.
        outputs: the graph outputs, in output order.
        nodes: node counts: ``total``, ``inputs``, ``ops``, ``__copy`` and ``__nop``.
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


def _tensor(graph: Graph, plan: StoragePlan, eid: int, name: str) -> TensorInfo:
    entry = graph.entries[eid]
    return TensorInfo(name, entry.shape_text, entry.dtype.name, str(plan.entry_device[eid]))


def _node_counts(graph: Graph) -> dict[str, int]:
    ops = [node for node in graph.nodes if node.op != "null"]
    return {"total": len(graph.nodes), "inputs": len(graph.nodes) - len(ops), "ops": len(ops),
            COPY: sum(node.func_name == COPY for node in ops),
            NOP: sum(node.func_name == NOP for node in ops)}


def _op_counts(graph: Graph) -> dict[str, int]:
    counts = Counter(node.func_name for node in graph.nodes if node.func_name is not None)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def summarize(graph: Graph, plan: StoragePlan) -> GraphSummary:
    """Summarize a planned graph for ``graphrt inspect``.

    Example:
        >>> graph, plan = plan_graph(build_parser().parse_args(  # doctest: +SKIP
        ...     ["inspect", "examples/graphs/duplex.json"]))
        >>> summarize(graph, plan).ops  # doctest: +SKIP
        {'__copy': 2, 'elemwise_add': 2, 'elemwise_sub': 1}
    """
    inputs = tuple(_tensor(graph, plan, graph.nodes[nid].outputs[0], graph.nodes[nid].name)
                   for nid in graph.arg_nodes)
    outputs = tuple(_tensor(graph, plan, eid, name)
                    for eid, name in zip(graph.heads, graph.output_names, strict=True))
    return GraphSummary(tuple(str(dev) for dev in plan.devices), inputs, outputs,
                        _node_counts(graph), _op_counts(graph), placement_report(graph, plan),
                        {var.name: (var.min, var.max) for var in graph.shape_vars.values()})


# --- text output -----------------------------------------------------------------------------


def columns(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Rows as left-aligned columns (the last column is not padded).

    Example:
        >>> columns([("name", "dtype"), ("x", "float32")])
        ['  name  dtype', '  x     float32']
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            .rstrip() for row in rows]


def _tensor_lines(title: str, tensors: Sequence[TensorInfo]) -> list[str]:
    lines = [f"{title}: {len(tensors)}"]
    if tensors:
        rows = [("name", "shape", "dtype", "device")]
        rows += [(t.name, "[" + ", ".join(map(str, t.shape)) + "]", t.dtype, t.device)
                 for t in tensors]
        lines += columns(rows)
    return lines


def _node_line(nodes: dict[str, int]) -> str:
    return (f"nodes: {nodes['total']} total, {nodes['inputs']} inputs, {nodes['ops']} ops "
            f"({nodes[COPY]} {COPY}, {nodes[NOP]} {NOP})")


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


# --- DOT output ------------------------------------------------------------------------------


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


# --- subcommands -----------------------------------------------------------------------------


def _configure_inspect(parser: argparse.ArgumentParser) -> None:
    add_graph_argument(parser)
    add_device_option(parser)
    formats = parser.add_mutually_exclusive_group()
    formats.add_argument("--json", dest="format", action="store_const", const="json",
                         help="print the summary as one JSON object")
    formats.add_argument("--dot", dest="format", action="store_const", const="dot",
                         help="print the graph as Graphviz DOT, coloured by device")
    parser.set_defaults(format="text")


@command("inspect", "show a graph's or a bundle's inputs, outputs, ops and placement (plans "
         "only; runs nothing)", _configure_inspect)
def inspect_command(args: argparse.Namespace) -> int:
    """``graphrt inspect GRAPH_OR_BUNDLE [--device KIND[:N] ...] [--json | --dot]``.

    A bundle adds its section first (versions, digest, members, params, metadata); with
    ``--json`` it is the ``bundle`` key.

    Example:
        >>> main(["inspect", "examples/graphs/duplex.json", "--json"])  # doctest: +SKIP
        0
    """
    source, plan = plan_source(args)
    if args.format == "dot":
        print(format_dot(source.graph, plan))
        return 0
    summary = summarize(source.graph, plan)
    if args.format == "json":
        data = summary.to_dict()
        if source.bundle is not None:
            data = {"bundle": source.bundle.describe(), **data}
        # json rather than orjson: it prints integers of any size.
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        lines = [] if source.bundle is None else bundle_lines(source.bundle)
        print("\n".join([*lines, format_text(summary)]))
    return 0


def _configure_validate(parser: argparse.ArgumentParser) -> None:
    add_graph_argument(parser)
    add_device_option(parser)


@command("validate", "check that a graph or a bundle is consistent and can be placed on the "
         "devices (a bundle: every member verified, the lib type-checked)", _configure_validate)
def validate_command(args: argparse.Namespace) -> int:
    """``graphrt validate GRAPH_OR_BUNDLE [--device KIND[:N] ...]``: ``ok: ...`` and 0, or the
    error and 1.

    A bundle is loaded with every check of :func:`graphrt.load_bundle` and its declarative
    functions are type-checked against the nodes that use it. Fallbacks are allowed; their
    count is reported on stderr, as are the external kernels a bundle needs.

    Example:
        >>> main(["validate", "examples/graphs/duplex.json", "--device", "cpu",  # doctest: +SKIP
        ...       "--device", "cuda"])
        ok: 9 nodes, 9 entries, 128 bytes on cpu:0, cuda:0
        0
    """
    source, plan = plan_source(args)
    graph = source.graph
    if source.bundle is not None:
        print(verified_line(source.bundle))
        if source.bundle.external_kernels:
            print(f"note: the bundle needs external kernels "
                  f"{', '.join(source.bundle.external_kernels)}, which the program that loads "
                  "it must supply (bundle.create(..., lib=...))", file=sys.stderr)
    total = sum(plan.bytes_per_device().values())
    devices = ", ".join(str(dev) for dev in plan.devices)
    print(f"ok: {len(graph.nodes)} nodes, {len(graph.entries)} entries, {total:,} bytes "
          f"on {devices}")
    if plan.fallbacks:
        reasons = "; ".join(sorted({fallback.reason for fallback in plan.fallbacks}))
        print(f"warning: {len(plan.fallbacks)} entries fell back: {reasons} "
              "(graphrt inspect lists them)", file=sys.stderr)
    return 0


# The subcommands that execute bundles live in modules of their own, which register themselves
# through command() above; importing them last lets them import from this module.
from . import cli_bench, cli_run  # noqa: E402, F401
