"""Graph JSON: pydantic models of the document, dtypes, and the validated normalized graph."""

from .dtypes import MAX_NDIM, DType, dtype_from_code, dtype_of, parse_dtype, shape_problem
from .graph import BUILTINS, COPY, NOP, Entry, Graph, Node, build_graph
from .parse import GraphSource, load_graph, parse_spec
from .spec import Columns, GraphSpec, NodeSpec, ShapeVarSpec
from .symbolic import Dim, Expr, ShapeVar, parse_dim

__all__ = [
    "BUILTINS",
    "COPY",
    "MAX_NDIM",
    "NOP",
    "Columns",
    "DType",
    "Dim",
    "Entry",
    "Expr",
    "Graph",
    "GraphSource",
    "GraphSpec",
    "Node",
    "NodeSpec",
    "ShapeVar",
    "ShapeVarSpec",
    "build_graph",
    "dtype_from_code",
    "dtype_of",
    "load_graph",
    "parse_dim",
    "parse_dtype",
    "parse_spec",
    "shape_problem",
]
