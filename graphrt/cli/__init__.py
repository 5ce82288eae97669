"""The ``graphrt`` command line: inspect and validate a graph or a bundle without running a
kernel, run and time a bundle, and write one.

One module per command (:mod:`~graphrt.cli.inspect`, :mod:`~graphrt.cli.validate`,
:mod:`~graphrt.cli.run`, :mod:`~graphrt.cli.bench`, :mod:`~graphrt.cli.bundle`), listed in one
table, :data:`~graphrt.cli.commands.COMMANDS`; :func:`main` builds the parser from it and
dispatches. Shared pieces: :mod:`~graphrt.cli.common` (the graph argument, the placement
options, loading and planning), :mod:`~graphrt.cli.summary` (what inspect prints) and
:mod:`~graphrt.cli.prepare` (a bundle's module with its inputs set, for run and bench). A new
command is one module with a ``configure`` and a handler, plus one row in the table.

Example:
    >>> from graphrt.cli import main
    >>> main(["validate", "examples/graphs/simplex.json"])  # doctest: +SKIP
    ok: 6 nodes, 6 entries, 96 bytes on cpu:0
    0
"""

from .commands import COMMANDS, Command, build_parser, main
from .common import (
    Placement,
    Source,
    UsageError,
    add_graph_argument,
    add_lib_option,
    add_placement_options,
    load_source,
    parse_device,
    parse_devices,
    placement_of,
    plan_source,
)
from .summary import GraphSummary, TensorInfo, columns, format_dot, format_text, summarize

__all__ = [
    "COMMANDS",
    "Command",
    "GraphSummary",
    "Placement",
    "Source",
    "TensorInfo",
    "UsageError",
    "add_graph_argument",
    "add_lib_option",
    "add_placement_options",
    "build_parser",
    "columns",
    "format_dot",
    "format_text",
    "load_source",
    "main",
    "parse_device",
    "parse_devices",
    "placement_of",
    "plan_source",
    "summarize",
]
