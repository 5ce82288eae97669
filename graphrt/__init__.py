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

from ._version import __version__
from .bundle import Bundle, BundleLimits, load_bundle, save_bundle
from .devices import Device, cpu, cuda, device, sim, sim_counters
from .errors import (
    BundleError,
    DeviceError,
    ExecutionError,
    GraphFormatError,
    GraphrtError,
    InputError,
    KernelNotFoundError,
    PlacementError,
)
from .executor import GraphModule, MemoryReport, TransferLog, TransferStats, create
from .lib import Library
from .params import load_params, save_params
from .schema import Graph, load_graph

__all__ = [
    "Bundle",
    "BundleError",
    "BundleLimits",
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
    "TransferLog",
    "TransferStats",
    "__version__",
    "cpu",
    "create",
    "cuda",
    "device",
    "load_bundle",
    "load_graph",
    "load_params",
    "save_bundle",
    "save_params",
    "sim",
    "sim_counters",
]
