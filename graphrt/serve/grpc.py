"""The Open Inference Protocol's gRPC API (``inference.GRPCInferenceService``), over the same
models, queues and metrics as the HTTP app.

The messages are the protocol's own, as ``tritonclient`` ships them generated
(``tritonclient.grpc.service_pb2``), so there is no protoc step here; the server is grpcio's
asyncio server, started on the HTTP server's event loop by the app's lifespan
(``graphrt serve --grpc-port``). Needs ``graphrt[grpc]``.

Example:
    >>> import tritonclient.grpc as grpcclient  # doctest: +SKIP
    >>> client = grpcclient.InferenceServerClient("127.0.0.1:8001")  # doctest: +SKIP
    >>> client.is_server_ready()  # doctest: +SKIP
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from grpc import aio
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from .._version import __version__
from ..errors import ExecutionError, GraphrtError, InputError, RequestError, abridge, describe
from .app import EXTENSIONS, GraphrtApp
from .codec import check_tensor, requested_outputs, tensor_from_bytes, tensor_from_data
from .models import ServedModel

__all__ = ["InferenceService", "start_grpc"]

_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND,
          413: grpc.StatusCode.RESOURCE_EXHAUSTED, 415: grpc.StatusCode.INVALID_ARGUMENT,
          500: grpc.StatusCode.INTERNAL, 503: grpc.StatusCode.UNAVAILABLE,
          504: grpc.StatusCode.DEADLINE_EXCEEDED}

_CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
             "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
             "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
             "FP32": "fp32_contents", "FP64": "fp64_contents"}
"""Which typed field of ``InferTensorContents`` carries each datatype (FP16 and BF16 have
none: they travel as raw contents)."""


class InferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """The protocol's RPCs over a :class:`~graphrt.serve.GraphrtApp`'s models and queues."""

    def __init__(self, state: GraphrtApp) -> None:
        self.state = state

    def _model(self, name: str, version: str) -> ServedModel:
        model = self.state.models.get(name)
        if model is None:
            raise RequestError(404, f"unknown model {describe(name)} (served: "
                                    f"{', '.join(self.state.models) or 'none'})")
        if version not in ("", "1"):
            raise RequestError(404, f"model {describe(name)} has no version "
                                    f"{describe(version)} (its versions: 1)")
        return model

    async def ServerLive(self, request: Any, context: aio.ServicerContext) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: aio.ServicerContext) -> Any:
        return service_pb2.ServerReadyResponse(ready=self.state.ready)

    async def ModelReady(self, request: Any, context: aio.ServicerContext) -> Any:
        return await _answer(context, lambda: service_pb2.ModelReadyResponse(
            ready=bool(self._model(request.name, request.version)) and self.state.ready))

    async def ServerMetadata(self, request: Any, context: aio.ServicerContext) -> Any:
        return service_pb2.ServerMetadataResponse(name="graphrt", version=__version__,
                                                  extensions=EXTENSIONS)

    async def ModelMetadata(self, request: Any, context: aio.ServicerContext) -> Any:
        def metadata() -> Any:
            described = self._model(request.name, request.version).metadata()
            tensor = service_pb2.ModelMetadataResponse.TensorMetadata
            return service_pb2.ModelMetadataResponse(
                name=described["name"], versions=described["versions"],
                platform=described["platform"],
                inputs=[tensor(**entry) for entry in described["inputs"]],
                outputs=[tensor(**entry) for entry in described["outputs"]])
        return await _answer(context, metadata)

    async def ModelConfig(self, request: Any, context: aio.ServicerContext) -> Any:
        def config() -> Any:
            described = self._model(request.name, request.version).config(
                int(self.state.options.max_delay_ms * 1000))
            return service_pb2.ModelConfigResponse(
                config=json_format.ParseDict(described, model_config_pb2.ModelConfig()))
        return await _answer(context, config)

    async def ModelStatistics(self, request: Any, context: aio.ServicerContext) -> Any:
        def statistics() -> Any:
            names = [self._model(request.name, request.version).name] if request.name else \
                list(self.state.models)
            described = {"model_stats": [self.state.metrics.statistics[name].describe(name)
                                         for name in names]}
            return json_format.ParseDict(described, service_pb2.ModelStatisticsResponse())
        return await _answer(context, statistics)

    async def RepositoryIndex(self, request: Any, context: aio.ServicerContext) -> Any:
        state = "READY" if self.state.ready else "UNAVAILABLE"
        return service_pb2.RepositoryIndexResponse(models=[
            service_pb2.RepositoryIndexResponse.ModelIndex(name=name, version="1", state=state)
            for name in self.state.models])

    async def ModelInfer(self, request: Any, context: aio.ServicerContext) -> Any:
        started = time.monotonic()
        label = request.model_name
        status = 500
        try:
            model = self._model(request.model_name, request.model_version)
            if not self.state.ready:
                raise RequestError(503, "the server is not ready (starting or shutting down)")
            decoding = time.monotonic()
            inputs, timeout = _decode(model, request)
            decoding = time.monotonic() - decoding
            remaining = context.time_remaining()
            timeouts = [t for t in (timeout, self.state.options.timeout_s, remaining)
                        if t is not None]
            outputs = requested_outputs(model, [o.name for o in request.outputs], True)
            results = await self.state.batchers[model.name].submit(
                inputs, min(timeouts) if timeouts else None)
            encoding = time.monotonic()
            response = service_pb2.ModelInferResponse(model_name=model.name, model_version="1",
                                                      id=request.id)
            for output in outputs:
                value = np.ascontiguousarray(results[output.name])
                info = next(o for o in model.outputs if o.name == output.name)
                response.outputs.add(name=output.name, datatype=info.datatype,
                                     shape=list(value.shape))
                response.raw_output_contents.append(
                    value.astype(value.dtype.newbyteorder("<"), copy=False).tobytes())
            self.state.metrics.coded(model.name, decoding, time.monotonic() - encoding)
            status = 200
            return response
        except RequestError as err:
            status = err.status
            await context.abort(_CODES.get(err.status, grpc.StatusCode.UNKNOWN),
                                abridge(str(err)))
        except InputError as err:
            status = 400
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, abridge(str(err)))
        except ExecutionError as err:
            await context.abort(grpc.StatusCode.INTERNAL, abridge(str(err)))
        finally:
            if label in self.state.models:
                self.state.metrics.answered(label, status, time.monotonic() - started)


async def _answer(context: aio.ServicerContext, make: Callable[[], Any]) -> Any:
    try:
        return make()
    except RequestError as err:
        await context.abort(_CODES.get(err.status, grpc.StatusCode.UNKNOWN), abridge(str(err)))


def _decode(model: ServedModel, request: Any) -> tuple[dict[str, np.ndarray[Any, Any]],
                                                       float | None]:
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise RequestError(400, f"{len(raw)} raw_input_contents for {len(request.inputs)} "
                                f"inputs: give every input's contents raw, or none")
    inputs: dict[str, np.ndarray[Any, Any]] = {}
    names: list[str] = []
    for position, tensor in enumerate(request.inputs):
        shape = list(tensor.shape)
        if any(not 0 <= dim < 2**62 for dim in shape):
            raise RequestError(400, f"input {describe(tensor.name)}: the shape {shape} has a "
                                    f"negative or impossibly large dimension")
        info = check_tensor(model, tensor.name, tensor.datatype, shape)
        if raw:
            inputs[info.name] = tensor_from_bytes(info, raw[position], shape)
        else:
            field = _CONTENTS.get(info.datatype)
            if field is None:
                raise RequestError(400, f"input {describe(info.name)}: {info.datatype} has no "
                                        f"typed contents field; send it in raw_input_contents")
            inputs[info.name] = tensor_from_data(info, list(getattr(tensor.contents, field)),
                                                 shape)
        names.append(info.name)
    model.check_complete(names)
    timeout = request.parameters.get("timeout")
    seconds = timeout.int64_param / 1e6 if timeout is not None and timeout.int64_param > 0 \
        else None
    return inputs, seconds


async def start_grpc(state: GraphrtApp, address: str) -> aio.Server:
    """Start the gRPC API on ``address`` (``"host:port"``; port 0 picks a free one, recorded
    in ``state.grpc_port``) on the running event loop.

    Raises:
        GraphrtError: the address cannot be bound.
    """
    limit = state.options.max_body_bytes
    server = aio.server(options=[("grpc.max_receive_message_length", limit),
                                 ("grpc.max_send_message_length", -1)])
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceService(state), server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as err:
        raise GraphrtError(f"gRPC: cannot listen on {address}: {err}") from None
    if not port:
        raise GraphrtError(f"gRPC: cannot listen on {address} (is the port in use?)")
    await server.start()
    state.grpc_port = port
    return server

