"""The converter table: ONNX (op type, opset range) → a function that emits standard ops.

A converter is registered for the opset versions whose semantics it implements::

    @converter("Clip", since=11)         # min/max are inputs from opset 11
    def clip(b: Builder, n: OnnxNode) -> list[str]: ...

and :func:`find_converter` picks the one whose range holds the model's opset, so an old model
never runs with a newer version's semantics (or the reverse). Before anything is built,
:func:`check_supported` lists every node no converter takes, all at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

from ..errors import ConversionError
from .builder import Builder
from .model import MAX_OPSET, MIN_OPSET, OnnxNode, require_onnx

__all__ = ["CONVERTERS", "Converter", "check_supported", "converter", "find_converter",
           "supported_table"]

ConvertFn = Callable[[Builder, OnnxNode], list[str]]
"""``fn(builder, node)``: the builder value of each of the node's outputs, in order (a
converter may return fewer than the node lists when the rest are optional)."""


@dataclass(frozen=True)
class Converter:
    """A converter for ``op_type`` at default-domain opsets ``since`` to ``until``."""

    op_type: str
    since: int
    until: int | None
    fn: ConvertFn

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)


CONVERTERS: dict[str, list[Converter]] = {}


def converter(*op_types: str, since: int = MIN_OPSET, until: int | None = None
              ) -> Callable[[ConvertFn], ConvertFn]:
    """Register the decorated function for ``op_types`` at opsets ``since..until``."""

    def register(fn: ConvertFn) -> ConvertFn:
        for op_type in op_types:
            entries = CONVERTERS.setdefault(op_type, [])
            for other in entries:
                lo, hi = max(other.since, since), min(other.until or 10**6, until or 10**6)
                if lo <= hi:
                    raise ValueError(f"converters for {op_type} overlap at opsets {lo}..{hi}")
            entries.append(Converter(op_type, since, until, fn))
        return fn

    return register


def find_converter(node: OnnxNode) -> Converter | None:
    """The converter for ``node`` at its opset, or None."""
    for entry in CONVERTERS.get(node.op_type, ()):
        if entry.covers(node.opset):
            return entry
    return None


def check_supported(nodes: Iterable[OnnxNode]) -> None:
    """Raise one :class:`ConversionError` listing every (op, opset, node) no converter takes."""
    missing = [node for node in nodes if find_converter(node) is None]
    if not missing:
        return
    lines = []
    for node in missing[:50]:
        known = CONVERTERS.get(node.op_type)
        why = ("not supported" if not known else "supported at opsets "
               + ", ".join(f"{c.since}..{c.until or MAX_OPSET}" for c in known))
        lines.append(f"  {node.op_type} (opset {node.opset}) at node {node.index} "
                     f"{node.name!r}: {why}")
    more = f"\n  ... and {len(missing) - 50} more" if len(missing) > 50 else ""
    kinds = sorted({(n.op_type, n.opset) for n in missing})
    raise ConversionError(f"the model uses {len(kinds)} unsupported (op, opset) pair(s) in "
                          f"{len(missing)} node(s):\n" + "\n".join(lines) + more)


@cache
def _newest_opset(domain: str) -> int:
    """The newest opset of ``domain`` the installed onnx knows (its newest op version)."""
    schemas = require_onnx().defs.get_all_schemas_with_history()
    return int(max(schema.since_version for schema in schemas if schema.domain == domain))


def supported_table() -> list[tuple[str, int, int]]:
    """``(op_type, first opset, last opset)`` of every converter, sorted by op type: opsets of
    the default domain, or of the op's own (``ai.onnx.ml.TreeEnsemble``: ``ai.onnx.ml``'s)."""
    rows = []
    for op_type, entries in CONVERTERS.items():
        domain = op_type.rpartition(".")[0]
        for entry in entries:
            if domain:
                rows.append((op_type, entry.since, entry.until or _newest_opset(domain)))
            else:
                rows.append((op_type, max(entry.since, MIN_OPSET), entry.until or MAX_OPSET))
    return sorted(rows)
