"""``graphrt validate GRAPH_OR_BUNDLE``: check that a graph or a bundle is consistent and can
be placed on the devices, allocating nothing; ``ok: ...`` and status 0, or the error and 1.
Storage ids are checked by liveness as ``create()`` checks them: two entries live at the same
time may not share one (:func:`graphrt.storage.check_storage_ids`).

A bundle is loaded with every check of :func:`graphrt.load_bundle` and its declarative
functions are type-checked against the nodes that use them. A graph JSON file given with
``--lib LIB.json`` is checked against that lib as ``create()`` would check it: every func_name
must be defined, every function must fit its nodes, and its intermediates (scratch) are planned,
counted and checked against the host's memory.

Example:
    >>> from graphrt.cli import main
    >>> main(["validate", "examples/graphs/duplex.json", "--device", "cpu",  # doctest: +SKIP
    ...       "--device", "cuda"])
    ok: 9 nodes, 9 entries, 128 bytes on cpu:0, cuda:0
    0
"""

from __future__ import annotations

import argparse
import sys

from ..schema import Graph
from ..storage import check_storage_ids
from .common import add_graph_argument, add_lib_option, add_placement_options, plan_source
from .summary import external_kernels_note, verified_line

__all__ = ["configure", "functions_checked", "validate_command"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``GRAPH``, the placement options and ``--lib``."""
    add_graph_argument(parser)
    add_placement_options(parser)
    add_lib_option(parser)


def functions_checked(graph: Graph, functions: set[str]) -> int:
    """How many nodes of ``graph`` run one of the declarative ``functions``.

    Example:
        >>> from graphrt import load_graph
        >>> functions_checked(load_graph("examples/graphs/duplex.json"), {"elemwise_add"})
        2
    """
    return sum(node.func_name in functions for node in graph.nodes)


def validate_command(args: argparse.Namespace) -> int:
    """``graphrt validate GRAPH_OR_BUNDLE [placement options] [--lib LIB.json]``.

    Fallbacks are allowed (unless ``--strict-placement``); their count is reported on stderr,
    as are the external kernels a bundle needs.

    Example:
        >>> from graphrt.cli import main
        >>> main(["validate", "examples/graphs/simplex.json"])  # doctest: +SKIP
        ok: 6 nodes, 6 entries, 96 bytes on cpu:0
        0
    """
    source, plan = plan_source(args)
    graph = source.graph
    check_storage_ids(graph)
    if source.bundle is not None:
        print(verified_line(source.bundle))
        note = external_kernels_note(source.bundle)
        if note is not None:
            print(note, file=sys.stderr)
    if source.library is not None:
        checked = functions_checked(graph, set(source.library.spec().functions))
        print(f"ok: lib {args.lib}: every func_name is defined, declarative functions "
              f"type-check on {checked} nodes")
    total = sum(plan.bytes_per_device().values())
    devices = ", ".join(str(dev) for dev in plan.devices)
    print(f"ok: {len(graph.nodes)} nodes, {len(graph.entries)} entries, {total:,} bytes "
          f"on {devices}")
    if plan.fallbacks:
        reasons = "; ".join(sorted({fallback.reason for fallback in plan.fallbacks}))
        print(f"warning: {len(plan.fallbacks)} entries fell back: {reasons} "
              "(graphrt inspect lists them)", file=sys.stderr)
    return 0
