"""Kernel libraries: ``func_name`` (and device type) → kernel or declarative function."""

from ..devices.frozen import derived, freeze, is_frozen
from ..ops import OPS, OpDef, OpError, TensorType, get_op
from .declarative import FunctionSpec, FusedFunction, LibrarySpec, StepSpec
from .library import Kernel, Library, LibrarySource, as_library
from .lowering import LoweredCall, Lowering, Resize
from .shape_functions import ShapeFunction, ShapeFunctionFn

__all__ = [
    "OPS",
    "FunctionSpec",
    "FusedFunction",
    "Kernel",
    "Library",
    "LibrarySource",
    "LibrarySpec",
    "LoweredCall",
    "Lowering",
    "OpDef",
    "OpError",
    "Resize",
    "ShapeFunction",
    "ShapeFunctionFn",
    "StepSpec",
    "TensorType",
    "as_library",
    "derived",
    "freeze",
    "get_op",
    "is_frozen",
]
