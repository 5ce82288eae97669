"""Reading JSON documents (graphs, libs, manifests) and describing pydantic errors, one way.

Every document graphrt reads accepts the same sources: a ``str`` whose first non-blank
character is ``{`` or ``[`` is JSON text, any other ``str`` or ``os.PathLike`` is a path,
bytes are JSON, a dict is already decoded. Every validation error is told the same way: where
(a dotted location, or the caller's words for it), what is wrong, and the value given.

Example:
    >>> from graphrt.errors import GraphFormatError
    >>> read_json('{"a": 1}', "lib", GraphFormatError)
    {'a': 1}
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import ValidationError

from .errors import GraphrtError, argument_error, describe
from .files import read_regular

__all__ = ["JsonSource", "describe_validation_error", "is_json_text", "loc_part", "read_json",
           "read_source"]

JsonSource = str | bytes | bytearray | memoryview | os.PathLike[str] | dict[str, Any]
"""JSON text, bytes, a path, or an already-decoded object."""


def is_json_text(source: object) -> bool:
    """Whether ``source`` is a ``str`` holding JSON text rather than a path."""
    return isinstance(source, str) and source.lstrip().startswith(("{", "["))


def read_source(source: object, what: str, error: type[GraphrtError], *,
                name: str | None = None) -> str | bytes | dict[str, Any]:
    """The undecoded document (or the dict given): text and bytes as they are, a path read
    (only a regular file: a FIFO or a device is refused, see :mod:`graphrt.files`).

    Args:
        name: how a wrong type names the argument (``"load_graph(source)"``); ``what`` by
            default.

    Raises:
        ArgumentError: the source is of another type.
        error: the file cannot be read.
    """
    if isinstance(source, dict) or is_json_text(source):
        return source  # type: ignore[return-value]  # narrowed by the two checks
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source)
    if not isinstance(source, str | os.PathLike):
        argument_error(name or what, f"a {what} as JSON text, bytes, a path or a dict", source)
    try:
        return read_regular(source, what, error)
    except GraphrtError as err:
        if not isinstance(source, str):
            raise
        raise error(f"{err} (a str is read as a path unless it starts with '{{')") from None


def read_json(source: object, what: str, error: type[GraphrtError], *,
              name: str | None = None) -> Any:
    """Decode a JSON document from any :data:`JsonSource`.

    Raises:
        ArgumentError: a source of another type (``name`` says which argument).
        error: unreadable, or not valid JSON (naming ``what``).
    """
    raw = read_source(source, what, error, name=name)
    if isinstance(raw, dict):
        return raw
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise error(f"{what} is not valid JSON: {err}") from None


def loc_part(part: object) -> str:
    """One part of a pydantic error location as text, safe whatever the document held."""
    return part[:60] if isinstance(part, str) else describe(part, 60)


def describe_validation_error(err: ValidationError, what: str,
                              where: Callable[[tuple[int | str, ...]], str] | None = None,
                              limit: int = 5) -> str:
    """``"<where>: <problem> (given ...); ..."`` for the first ``limit`` problems, and how many
    more there are (callers put what the document is in front).

    Args:
        what: the document, named where a problem is the document itself.
        where: words for a location (node id and name, column and entry); by default the
            location dotted.
    """
    problems = []
    for item in err.errors(include_url=False, include_context=False)[:limit]:
        loc = tuple(part for part in item["loc"]
                    if not (isinstance(part, str) and part.startswith(("tuple[", "list["))))
        place = (where(loc) if where is not None else ".".join(map(loc_part, loc)))[:120] \
            or what
        given = item.get("input")
        text = given if isinstance(given, str) else describe(given, 60)
        shown = "" if isinstance(given, dict | list) else f" (given {text[:60]!r})"
        problems.append(f"{place}: {item['msg'][:300]}{shown}")
    more = err.error_count() - len(problems)
    suffix = f"; and {more} more problem(s)" if more > 0 else ""
    return "; ".join(problems) + suffix
