"""The standard op set: each op implemented once against the device's array namespace.

Importing this package registers every op in :data:`OPS`.
"""

from . import (  # noqa: F401  (registration)
    activations,
    attention,
    convolution,
    elementwise,
    indexing,
    nn,
    normalization,
    pooling,
    quantize,
    reductions,
    resize,
    transform,
)
from .base import (
    OPS,
    Attrs,
    OpDef,
    OpError,
    TensorType,
    broadcast,
    get_op,
    normalize_axis,
    register_op,
    result_dtype,
)

__all__ = [
    "OPS",
    "Attrs",
    "OpDef",
    "OpError",
    "TensorType",
    "broadcast",
    "get_op",
    "normalize_axis",
    "register_op",
    "result_dtype",
]
