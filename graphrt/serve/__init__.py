"""Serve models over the Open Inference Protocol (KServe v2, Triton's HTTP API) with dynamic
batching, Prometheus metrics and graceful shutdown; scale out on Ray (:mod:`graphrt.serve.ray`).

Needs the ``serve`` extra (Starlette, uvicorn, prometheus-client):
``pip install 'graphrt[serve]'``. ``graphrt serve MODEL...`` is the command line.

Example:
    >>> from graphrt.serve import Server, load_model
    >>> model = load_model("examples/bundles/mlp")  # doctest: +SKIP
    >>> with Server([model]) as server:  # doctest: +SKIP
    ...     print(server.url)  # tritonclient.http.InferenceServerClient(url[7:])
"""

from __future__ import annotations

from ..errors import GraphrtError

try:
    from .app import GraphrtApp, ServerOptions, create_app
    from .batcher import Batcher
    from .metrics import Metrics
    from .server import Server, serve
except ModuleNotFoundError as err:  # the serve extra is not installed
    missing = (err.name or "").partition(".")[0]
    if missing not in ("starlette", "uvicorn", "prometheus_client", "anyio"):
        raise
    raise GraphrtError(f"graphrt.serve needs {missing}, which is not installed: "
                       f"pip install 'graphrt[serve]'") from err
from .models import BatchAxis, ServedModel, TensorInfo, load_model

__all__ = ["BatchAxis", "Batcher", "GraphrtApp", "Metrics", "ServedModel", "Server",
           "ServerOptions", "TensorInfo", "create_app", "load_model", "serve"]
