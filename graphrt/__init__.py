"""graphrt: a heterogeneous graph-executor runtime for TVM-format model graphs.

Example:
    >>> import numpy as np, graphrt
    >>> lib = graphrt.Library()
    >>> _ = lib.register("elemwise_add", lambda a, b, out: np.add(a, b, out=out))
    >>> _ = lib.register("elemwise_sub", lambda a, b, out: np.subtract(a, b, out=out))
    >>> mod = graphrt.create("examples/graphs/simplex.json", lib,  # doctest: +SKIP
    ...                      graphrt.cpu(0), graphrt.sim(0))
    >>> mod.run(A=np.ones(4, "float32"), B=np.ones(4, "float32"),  # doctest: +SKIP
    ...         C=np.ones(4, "float32"))
    >>> mod.get_output(0, out=np.empty(4, "float32"))  # doctest: +SKIP
    array([1., 1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .devices import Device, cpu, cuda, device, sim, sim_counters
from .errors import (
    ArgumentError,
    BundleError,
    ConversionError,
    DeviceError,
    ExecutionError,
    GraphFormatError,
    GraphrtError,
    InputError,
    KernelNotFoundError,
    PlacementError,
    RequestError,
)

if TYPE_CHECKING:
    from .bundle import Bundle, BundleLimits, load_bundle, save_bundle
    from .executor import GraphModule, MemoryReport, TransferLog, TransferStats, create
    from .lib import Library
    from .onnx import from_onnx
    from .params import load_params, save_params
    from .schema import Graph, load_graph

# Imported on first use, so that ``import graphrt`` (every CLI call, every test process) does
# not pay for pydantic models, the op set and the bundle code it may never touch.
_LAZY = {
    "Bundle": ".bundle", "BundleLimits": ".bundle", "load_bundle": ".bundle",
    "save_bundle": ".bundle", "GraphModule": ".executor", "MemoryReport": ".executor",
    "TransferLog": ".executor", "TransferStats": ".executor", "create": ".executor",
    "Library": ".lib", "load_params": ".params", "save_params": ".params", "Graph": ".schema",
    "load_graph": ".schema", "from_onnx": ".onnx",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'graphrt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ArgumentError",
    "Bundle",
    "BundleError",
    "BundleLimits",
    "ConversionError",
    "Device",
    "DeviceError",
    "ExecutionError",
    "Graph",
    "GraphFormatError",
    "GraphModule",
    "GraphrtError",
    "InputError",
    "KernelNotFoundError",
    "Library",
    "MemoryReport",
    "PlacementError",
    "RequestError",
    "TransferLog",
    "TransferStats",
    "__version__",
    "cpu",
    "create",
    "cuda",
    "device",
    "from_onnx",
    "load_bundle",
    "load_graph",
    "load_params",
    "save_bundle",
    "save_params",
    "sim",
    "sim_counters",
]
