"""Reading graph JSON from text, bytes, a dict or a file, with errors in graphrt's terms."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Union

import orjson
from pydantic import ValidationError

from ..errors import GraphFormatError
from .graph import Graph, build_graph
from .spec import GraphSpec

__all__ = ["GraphSource", "load_graph", "parse_spec"]

GraphSource = Union[str, bytes, bytearray, memoryview, "os.PathLike[str]", dict[str, Any],
                    GraphSpec, Graph]
"""Anything :func:`load_graph` accepts: JSON text or bytes, a path, a dict, a parsed graph."""


def _read(source: str | bytes | bytearray | memoryview | os.PathLike[str]) -> bytes | str:
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)
    if isinstance(source, str) and source.lstrip().startswith(("{", "[")):
        return source
    if not isinstance(source, str | os.PathLike):
        raise GraphFormatError(f"a graph is JSON text, bytes, a path or a dict, given "
                               f"{type(source).__name__}")
    path = Path(source)
    try:
        return path.read_bytes()
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) else str(err)
        hint = " (a str is read as a path unless it starts with '{')" if isinstance(
            source, str) else ""
        raise GraphFormatError(f"cannot read graph file {str(path)[:200]!r}: {reason}{hint}"
                               ) from None


def _where(loc: tuple[int | str, ...], data: object) -> str:
    """Turn a pydantic error location into words: node id and name, column and entry."""
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        nid = loc[1]
        name = None
        if isinstance(data, dict) and isinstance(data.get("nodes"), list):
            node = data["nodes"][nid]
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                name = node["name"]
        rest = ".".join(str(part) for part in loc[2:])
        label = f"node {nid}" + (f" {name!r}" if name is not None else "")
        return f"{label} field {rest!r}" if rest else label
    if len(loc) >= 4 and loc[0] == "attrs" and loc[2] == 1 and isinstance(loc[3], int):
        dim = f" dimension {loc[4]}" if len(loc) >= 5 else ""
        return f"attrs column {loc[1]!r} entry {loc[3]}{dim}"
    return ".".join(str(part) for part in loc) or "graph"


def _format_validation_error(err: ValidationError, data: object) -> GraphFormatError:
    problems = []
    for item in err.errors()[:5]:
        loc = tuple(part for part in item["loc"] if not str(part).startswith(("tuple[", "list[")))
        given = item.get("input")
        shown = "" if isinstance(given, dict | list) else f" (given {str(given)[:60]!r})"
        problems.append(f"{_where(loc, data)}: {item['msg']}{shown}")
    more = err.error_count() - len(problems)
    suffix = f"; and {more} more problem(s)" if more > 0 else ""
    return GraphFormatError("malformed graph JSON: " + "; ".join(problems) + suffix)


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
    data: object = source
    if not isinstance(source, dict):
        try:
            data = orjson.loads(_read(source))
        except orjson.JSONDecodeError as err:
            raise GraphFormatError(f"graph is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise GraphFormatError(f"graph JSON must be an object, given {type(data).__name__}")
    try:
        return GraphSpec.model_validate(data)
    except ValidationError as err:
        raise _format_validation_error(err, data) from None


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
