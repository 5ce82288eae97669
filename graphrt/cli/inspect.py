"""``graphrt inspect GRAPH_OR_BUNDLE``: a graph's or a bundle's inputs, outputs, ops and
placement, as text, JSON or Graphviz DOT. It plans only: nothing is allocated or run.

Example:
    >>> from graphrt.cli import main
    >>> main(["inspect", "examples/graphs/duplex.json", "--json"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import json

from .common import add_graph_argument, add_lib_option, add_placement_options, plan_source
from .summary import bundle_lines, format_dot, format_text, summarize

__all__ = ["configure", "inspect_command"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``GRAPH``, the placement options, ``--lib`` and ``--json | --dot``."""
    add_graph_argument(parser)
    add_placement_options(parser)
    add_lib_option(parser)
    formats = parser.add_mutually_exclusive_group()
    formats.add_argument("--json", dest="format", action="store_const", const="json",
                         help="print the summary as one JSON object")
    formats.add_argument("--dot", dest="format", action="store_const", const="dot",
                         help="print the graph as Graphviz DOT, coloured by device")
    parser.set_defaults(format="text")


def inspect_command(args: argparse.Namespace) -> int:
    """``graphrt inspect GRAPH_OR_BUNDLE [placement options] [--lib LIB.json] [--json | --dot]``.

    A bundle adds its section first (versions, digest, members, params, metadata); with
    ``--json`` it is the ``bundle`` key.

    Example:
        >>> from graphrt.cli import main
        >>> main(["inspect", "examples/graphs/duplex.json", "--dot"])  # doctest: +SKIP
        digraph graphrt {
        ...
        0
    """
    source, plan = plan_source(args)
    if args.format == "dot":
        print(format_dot(source.graph, plan))
        return 0
    summary = summarize(source.graph, plan,
                        () if source.bundle is None else set(source.bundle.params))
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
