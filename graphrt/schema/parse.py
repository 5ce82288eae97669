"""Reading graph JSON from text, bytes, a dict or a file, with errors in graphrt's terms."""

from __future__ import annotations

import os
from typing import Any, Union

from pydantic import ValidationError

from ..errors import GraphFormatError, describe
from ..jsondoc import describe_validation_error, loc_part, read_json
from .graph import Graph, build_graph
from .spec import GraphSpec

__all__ = ["GraphSource", "load_graph", "parse_spec"]

GraphSource = Union[str, bytes, bytearray, memoryview, "os.PathLike[str]", dict[str, Any],
                    GraphSpec, Graph]
"""Anything :func:`load_graph` accepts: JSON text or bytes, a path, a dict, a parsed graph."""


def _where(loc: tuple[int | str, ...], data: object) -> str:
    """Turn a pydantic error location into words: node id and name, column and entry."""
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        nid = loc[1]
        name = None
        if isinstance(data, dict) and isinstance(data.get("nodes"), list):
            node = data["nodes"][nid]
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                name = node["name"]
        rest = ".".join(map(loc_part, loc[2:]))
        label = f"node {nid}" + (f" {describe(name)}" if name is not None else "")
        return f"{label} field {rest!r}" if rest else label
    if len(loc) >= 4 and loc[0] == "attrs" and loc[2] == 1 and isinstance(loc[3], int):
        dim = f" dimension {loc[4]}" if len(loc) >= 5 else ""
        return f"attrs column {describe(loc[1])} entry {loc[3]}{dim}"
    return ".".join(map(loc_part, loc)) or "graph"


def parse_spec(source: GraphSource) -> GraphSpec:
    """Parse graph JSON into its pydantic model, checking its form only.

    Args:
        source: JSON text (``str`` starting with ``{``), bytes, a path (``str`` or
            ``os.PathLike``), an already-decoded ``dict``, or a ``GraphSpec``.

    Raises:
        GraphFormatError: invalid JSON, a missing or unknown key, a value of the wrong type.
    """
    if isinstance(source, GraphSpec):
        return source
    if isinstance(source, Graph):
        raise GraphFormatError("parse_spec() takes graph JSON, not an already built Graph")
    data = read_json(source, "graph", GraphFormatError, name="load_graph(source)")
    if not isinstance(data, dict):
        raise GraphFormatError(f"graph JSON must be an object, given {type(data).__name__}")
    try:
        return GraphSpec.model_validate(data)
    except ValidationError as err:
        raise GraphFormatError("malformed graph JSON: " + describe_validation_error(
            err, "graph", lambda loc: _where(loc, data))) from None


def load_graph(source: GraphSource) -> Graph:
    """Parse and check graph JSON into a normalized, immutable :class:`Graph`.

    Example:
        >>> graph = load_graph("examples/graphs/simplex.json")  # doctest: +SKIP
        >>> graph.input_names  # doctest: +SKIP
        ('A', 'B', 'C')
    """
    if isinstance(source, Graph):
        return source
    return build_graph(parse_spec(source))
