"""The Open Inference Protocol (KServe v2) REST API as an ASGI app, on Starlette.

Routes (each model route also under ``/v2/models/{name}/versions/1/...``)::

    GET  /v2/health/live              200 while the process serves
    GET  /v2/health/ready             200 once every model is loaded, 503 while shutting down
    GET  /v2                          server metadata (name, version, extensions)
    GET  /v2/models/{name}            model metadata (inputs/outputs; symbolic dims as -1)
    GET  /v2/models/{name}/ready      200 when the model can take requests
    GET  /v2/models/{name}/config     Triton's model configuration (max_batch_size, dims, ...)
    GET  /v2/models[/{name}]/stats    Triton's statistics (counts and times, runs by batch size)
    POST /v2/models/{name}/infer      inference: JSON tensors or the binary tensor extension
    POST /v2/repository/index         the models and their state
    GET  /metrics                     Prometheus text format

Every error is ``{"error": message}`` with a 4xx status for what the client got wrong (400 bad
request, 404 unknown model or route, 405 method, 413 body too large, 415 encoding), 503 when
the queue is full or the server is shutting down, 504 when a request timed out, and 500 when
a kernel raised (naming the node). The app keeps serving after each.

Example:
    >>> from graphrt.serve import create_app, load_model
    >>> app = create_app([load_model("examples/bundles/mlp")])  # doctest: +SKIP
    >>> # uvicorn.run(app, host="127.0.0.1", port=8000), or as a Ray Serve ingress
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .._version import __version__
from ..errors import ExecutionError, GraphrtError, InputError, RequestError, abridge, describe
from .batcher import Batcher
from .codec import decode_request, encode_response
from .metrics import Metrics
from .models import ServedModel

__all__ = ["EXTENSIONS", "GraphrtApp", "ServerOptions", "create_app"]

log = logging.getLogger(__name__)

EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics",
              "model_repository(index)"]
"""The protocol extensions the server implements (``GET /v2``)."""
_OFFLOAD_BYTES = 64 * 1024
"""Bodies (and JSON outputs) above this size are decoded (encoded) on a worker thread, so that
the event loop never spends milliseconds parsing numbers."""


@dataclass(frozen=True)
class ServerOptions:
    """How the server batches, queues and limits requests.

    Attributes:
        max_batch: the most samples one run stacks (default: each model's batch bound;
            1 turns stacking off).
        max_delay_ms: how long a batch may wait to fill after its oldest request arrived
            (0: it runs with whatever waited while the workers were busy).
        max_queue: the most requests waiting per model; more get 503.
        workers: runs at once per model (threads, each with its own run context).
        timeout_s: the longest a request may wait and run (its own ``parameters.timeout``
            may shorten it); then 504. None: no limit.
        max_body_bytes: the largest request body, after decompression; larger gets 413.
    """

    max_batch: int | None = None
    max_delay_ms: float = 0.0
    max_queue: int = 1024
    workers: int = 1
    timeout_s: float | None = 60.0
    max_body_bytes: int = 64 * 1024 * 1024


class GraphrtApp:
    """The models, their batchers and the metrics behind the routes.

    Attributes:
        models: the served models by name.
        batchers: each model's queue and workers.
        metrics: the Prometheus metrics.
        options: the options it was made with.
        ready: whether the server takes requests (False before startup and while shutting
            down).
        grpc_port: the port of the gRPC API once it listens, else None.
    """

    def __init__(self, models: Sequence[ServedModel], options: ServerOptions) -> None:
        self.models = _by_name(models)
        self.options = options
        self.metrics = Metrics()
        self.batchers = {name: Batcher(model, max_batch=options.max_batch,
                                       max_delay_s=options.max_delay_ms / 1000,
                                       max_queue=options.max_queue, workers=options.workers,
                                       metrics=self.metrics)
                         for name, model in self.models.items()}
        self.ready = False
        self.grpc_port: int | None = None

    def model(self, request: Request) -> ServedModel:
        """The model a route names, checking the version.

        Raises:
            RequestError: (404) no model of that name or version.
        """
        name = request.path_params["name"]
        model = self.models.get(name)
        if model is None:
            raise RequestError(404, f"unknown model {describe(name)} (served: "
                                    f"{', '.join(self.models) or 'none'})")
        version = request.path_params.get("version")
        if version is not None and version != "1":
            raise RequestError(404, f"model {describe(name)} has no version "
                                    f"{describe(version)} (its versions: 1)")
        return model

    async def startup(self) -> None:
        """Start every batcher; the server is ready."""
        for batcher in self.batchers.values():
            batcher.start()
        self.ready = True

    async def shutdown(self) -> None:
        """Not ready any more; finish what is queued and running."""
        self.ready = False
        for batcher in self.batchers.values():
            await batcher.close()


def _by_name(models: Sequence[ServedModel]) -> dict[str, ServedModel]:
    by_name: dict[str, ServedModel] = {}
    for model in models:
        if model.name in by_name:
            raise GraphrtError(f"two models are named {model.name!r}; give each its own name")
        by_name[model.name] = model
    return by_name


def _json(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json({"error": abridge(message)}, status)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise RequestError(400, f"Content-Length is not a number: {describe(declared)}")
        if int(declared) > limit:
            raise RequestError(413, f"the request body is {int(declared)} bytes, more than "
                                    f"the server's limit of {limit}")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise RequestError(413, f"the request body is more than the server's limit of "
                                    f"{limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise RequestError(415, f"Content-Encoding {describe(encoding)} is not supported "
                                f"(gzip, deflate or identity)")
    inflater = zlib.decompressobj(31 if encoding == "gzip" else 15)
    try:
        plain = inflater.decompress(body, limit + 1)
    except zlib.error as err:
        raise RequestError(400, f"the {encoding} body does not decompress: {err}") from None
    if len(plain) > limit or inflater.unconsumed_tail:
        raise RequestError(413, f"the request body decompresses to more than the server's "
                                f"limit of {limit} bytes")
    if not inflater.eof:
        raise RequestError(400, f"the {encoding} body is truncated")
    return plain


def _header_length(request: Request) -> int | None:
    text = request.headers.get("inference-header-content-length")
    if text is None:
        return None
    if not text.strip().isdigit():
        raise RequestError(400, f"Inference-Header-Content-Length is not a non-negative "
                                f"integer: {describe(text)}")
    return int(text)


def create_app(models: Sequence[ServedModel], options: ServerOptions | None = None, *,
               grpc_address: str | None = None) -> Starlette:
    """The protocol's routes over ``models``, as a Starlette (ASGI) app.

    Run it with uvicorn (:func:`graphrt.serve.serve` does), mount it in another ASGI app, or
    use it as a Ray Serve ingress (:mod:`graphrt.serve.ray`). ``app.state.graphrt`` is the
    :class:`GraphrtApp` behind it. With ``grpc_address`` (``"host:port"``), the app's
    lifespan also serves the protocol's gRPC API there, over the same models and queues.

    Raises:
        GraphrtError: two models with the same name.

    Example:
        >>> app = create_app([load_model("examples/bundles/mlp")])  # doctest: +SKIP
    """
    state = GraphrtApp(models, options or ServerOptions())

    async def live(request: Request) -> Response:
        return _json({"live": True})

    async def ready(request: Request) -> Response:
        if not state.ready:
            return _error(503, "the server is not ready (starting or shutting down)")
        return _json({"ready": True})

    async def server_metadata(request: Request) -> Response:
        return _json({"name": "graphrt", "version": __version__, "extensions": EXTENSIONS})

    async def model_metadata(request: Request) -> Response:
        return _json(state.model(request).metadata())

    async def model_ready(request: Request) -> Response:
        model = state.model(request)
        if not state.ready:
            return _error(503, f"model {model.name!r} is not ready (the server is starting "
                               f"or shutting down)")
        return _json({"name": model.name, "ready": True})

    async def model_config(request: Request) -> Response:
        return _json(state.model(request).config(int(state.options.max_delay_ms * 1000)))

    async def repository_index(request: Request) -> Response:
        return _json([{"name": name, "version": "1", "state": "READY" if state.ready
                       else "UNAVAILABLE"} for name in state.models])

    async def statistics(request: Request) -> Response:
        names = [state.model(request).name] if "name" in request.path_params else \
            list(state.models)
        return _json({"model_stats": [state.metrics.statistics[name].describe(name)
                                      for name in names]})

    async def metrics(request: Request) -> Response:
        body, content_type = state.metrics.exposition()
        return Response(body, media_type=content_type)

    async def infer(request: Request) -> Response:
        started = time.monotonic()
        label = request.path_params["name"]
        status = 500
        try:
            model = state.model(request)
            response = await _infer(state, model, request)
            status = response.status_code
            return response
        except RequestError as err:
            status = err.status
            return _error(err.status, str(err))
        except InputError as err:
            status = 400
            return _error(400, str(err))
        except ExecutionError as err:
            log.warning("infer %r: %s", label, err)
            return _error(500, str(err))
        except Exception as err:
            log.exception("infer %r failed", label)
            return _error(500, f"internal error: {type(err).__name__}: {err}")
        finally:
            if label in state.models:
                state.metrics.answered(label, status, time.monotonic() - started)

    model_routes = [("", model_metadata, "GET"), ("/ready", model_ready, "GET"),
                    ("/config", model_config, "GET"), ("/stats", statistics, "GET"),
                    ("/infer", infer, "POST")]
    routes = [Route("/v2/health/live", live), Route("/v2/health/ready", ready),
              Route("/v2", server_metadata), Route("/v2/models/stats", statistics),
              Route("/v2/repository/index", repository_index, methods=["POST"]),
              Route("/metrics", metrics)]
    for suffix, endpoint, method in model_routes:
        routes.append(Route(f"/v2/models/{{name}}{suffix}", endpoint, methods=[method]))
        routes.append(Route(f"/v2/models/{{name}}/versions/{{version}}{suffix}", endpoint,
                            methods=[method]))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await state.startup()
        grpc_server = None
        if grpc_address is not None:
            from .grpc import start_grpc  # needs graphrt[grpc]

            grpc_server = await start_grpc(state, grpc_address)
        try:
            yield
        finally:
            state.ready = False
            if grpc_server is not None:
                await grpc_server.stop(grace=5.0)
            await state.shutdown()
            log.info("shut down: every request received was answered")

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        if status == 404:
            return _error(404, f"no route {request.method} {request.url.path} (the protocol's "
                               f"routes are under /v2)")
        return _error(status, f"{request.method} {request.url.path}: "
                              f"{getattr(exc, 'detail', exc)}")

    async def request_error(request: Request, exc: Exception) -> Response:
        return _error(getattr(exc, "status", 400), str(exc))

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, RequestError: request_error})
    app.state.graphrt = state
    return app


async def _infer(state: GraphrtApp, model: ServedModel, request: Request) -> Response:
    if not state.ready:
        raise RequestError(503, "the server is not ready (starting or shutting down)")
    body = await _read_body(request, state.options.max_body_bytes)
    header_length = _header_length(request)
    started = time.monotonic()
    if len(body) > _OFFLOAD_BYTES:
        decoded = await anyio.to_thread.run_sync(decode_request, model, body, header_length)
    else:
        decoded = decode_request(model, body, header_length)
    decoding = time.monotonic() - started
    timeouts = [t for t in (decoded.timeout_s, state.options.timeout_s) if t is not None]
    results = await state.batchers[model.name].submit(decoded.inputs,
                                                      min(timeouts) if timeouts else None)
    started = time.monotonic()
    text_elements = sum(results[o.name].size for o in decoded.outputs if not o.binary)
    if text_elements * 12 > _OFFLOAD_BYTES:
        body, headers = await anyio.to_thread.run_sync(encode_response, model, decoded,
                                                       results)
    else:
        body, headers = encode_response(model, decoded, results)
    state.metrics.coded(model.name, decoding, time.monotonic() - started)
    return Response(body, 200, headers=headers)
