"""Pydantic models faithful to the graph JSON TVM's graph executor read.

These models check the *form* of the document (keys, types, tags); the meaning (references,
lengths, dtypes) is checked by :mod:`graphrt.schema.graph` when it builds the normalized graph.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from ..errors import describe

__all__ = ["Columns", "GraphSpec", "Int64", "NodeSpec", "ShapeVarSpec"]

Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=2**64 - 1)]
"""Every integer of a graph document fits in 64 bits, signed or unsigned, as JSON parsers read
them (so that no message, plan or array ever meets an integer too long to print); shapes are
held to numpy's tighter limit when the graph is built."""

EntryRef = Annotated[list[Int64], Field(min_length=2, max_length=3)]
"""``[nid, index]`` or ``[nid, index, version]``; version is ignored."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeSpec(_Frozen):
    """One node of the ``nodes`` list."""

    op: Literal["null", "tvm_op"]
    name: StrictStr
    inputs: list[EntryRef] = Field(default_factory=list)
    attrs: dict[StrictStr, StrictStr] | None = None
    attr: dict[StrictStr, StrictStr] | None = None  # legacy spelling of attrs
    control_deps: list[Int64] | None = None

    @property
    def op_attrs(self) -> dict[str, str]:
        """The node's attributes under either spelling (``attrs`` wins)."""
        return dict(self.attrs if self.attrs is not None else self.attr or {})


ListInt = tuple[Literal["list_int"], list[Int64]]
ListStr = tuple[Literal["list_str"], list[StrictStr]]
ListShape = tuple[Literal["list_shape"], list[list[Int64 | StrictStr]]]
"""Shapes; a dimension may be a symbolic expression of declared ``shape_vars`` (graphrt)."""


class Columns(BaseModel):
    """The typed per-entry columns of the top-level ``attrs``.

    Unknown columns are legacy ones (``dtype``, ...); TVM skipped them when tagged ``list_int``
    or ``size_t`` and refused any other tag, and so does graphrt.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    dltype: ListStr
    shape: ListShape
    storage_id: ListInt
    device_index: ListInt | None = None
    storage_scope: ListStr | None = None

    @model_validator(mode="after")
    def _legacy_columns_are_skippable(self) -> Columns:
        for key, value in (self.model_extra or {}).items():
            tag = value[0] if isinstance(value, list | tuple) and len(value) == 2 else None
            if tag not in ("list_int", "size_t"):
                raise ValueError(
                    f"unknown attrs column {key!r}: only 'list_int' or 'size_t' columns can be "
                    f"skipped, given {describe(value, 60)}"
                )
        return self


class ShapeVarSpec(_Frozen):
    """Bounds of one shape variable (a graphrt extension): ``{"max": 64, "min": 1}``."""

    max: StrictInt = Field(ge=0, le=2**63 - 1)
    min: StrictInt = Field(default=0, ge=0, le=2**63 - 1)

    @model_validator(mode="after")
    def _ordered(self) -> ShapeVarSpec:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class GraphSpec(_Frozen):
    """The whole graph document: five required keys, ``metadata`` tolerated, and graphrt's
    optional ``shape_vars`` declaring the bounds of symbolic dimensions."""

    nodes: list[NodeSpec]
    arg_nodes: list[Int64]
    node_row_ptr: list[Int64]
    heads: list[EntryRef]
    attrs: Columns
    metadata: Any = None
    shape_vars: dict[StrictStr, ShapeVarSpec] | None = None
