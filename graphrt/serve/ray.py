"""Scale out on Ray: Ray Serve replicas behind the same protocol routes, and Ray Data batch
inference. Needs the ``ray`` extra (``pip install 'graphrt[ray]'``); this module is the only
part of graphrt that imports Ray, and only when it is imported.

**Ray Serve.** :func:`deployment` makes a Ray Serve application whose replicas each load the
models once and serve them through :func:`graphrt.serve.create_app`: the Starlette app is the
replica's ASGI ingress, so every route (``/v2/models/{name}/infer``, health, metadata,
``/metrics``...) answers through Ray Serve's HTTP proxy exactly as ``graphrt serve`` answers,
and ``tritonclient`` calls it unchanged. Each replica batches the requests Ray routes to it
(``max_ongoing_requests`` bounds how many that is at once). :func:`run` starts it.

Ray Serve (2.x) runs the ingress app's ASGI lifespan in each replica before it takes traffic,
which starts the batchers and marks the replica ready; the ingress also starts them at its
first request where a Ray version does not run the lifespan. ``/metrics`` through the proxy
is the metrics of whichever replica answered.

**Ray Data.** :class:`Predictor` is a callable class for ``Dataset.map_batches``: each actor
loads the model once and maps batches of rows (numpy columns) to the model's outputs.

Models travel to the workers as paths (every node must be able to read them: a shared file
system, or one machine) or by value: a :class:`~graphrt.Bundle` (one from
:func:`graphrt.from_onnx` included) or the bytes of a ``.grb`` file are shipped with the
deployment, in the bundle format, and verified when a replica loads them.

Example:
    >>> from graphrt.serve.ray import Predictor, run
    >>> url = run(["examples/bundles/mlp"], port=8000)  # doctest: +SKIP
    >>> # tritonclient.http.InferenceServerClient("127.0.0.1:8000") ...
    >>> ds = ray.data.from_numpy(x).map_batches(  # doctest: +SKIP
    ...     Predictor, fn_constructor_kwargs={"model": "/models/classifier.grb"},
    ...     concurrency=2, batch_size=64)
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np
from ray import serve
from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from ..bundle import Bundle, load_bundle
from ..errors import ArgumentError, BundleError, InputError, RequestError, describe
from .app import ServerOptions, create_app
from .models import ServedModel, TensorInfo, load_model

__all__ = ["ModelSource", "Predictor", "deployment", "run"]

ModelSource: TypeAlias = "str | os.PathLike[str] | Bundle | bytes"
"""A model as these functions take it: a bundle directory, a ``.grb``/``.zip`` bundle or an
``.onnx`` file (a path every Ray node can read), a :class:`~graphrt.Bundle` held in memory, or
the bytes of a ``.grb`` file."""

log = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]
_ZIP_MAGIC = b"PK\x03\x04"


# -- models on their way to the workers --------------------------------------------------------

@dataclass(frozen=True)
class _Shipped:
    """A model as it travels to a replica or actor: an absolute path, or a ``.grb``'s bytes."""

    name: str | None
    path: str | None = None
    data: bytes | None = None

    def load(self, device: str, max_batch: int | None, dim_bounds: Mapping[str, int] | None
             ) -> ServedModel:
        """Load it here (in the replica or actor)."""
        if self.path is not None:
            return load_model(self.path, name=self.name, device_spec=device,
                              max_batch=max_batch, dim_bounds=dim_bounds)
        assert self.data is not None
        folder = tempfile.mkdtemp(prefix="graphrt-ray-")
        try:
            file = Path(folder) / "model.grb"
            file.write_bytes(self.data)
            bundle = load_bundle(file)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        try:
            model = load_model(bundle, name=self.name, device_spec=device, max_batch=max_batch)
        finally:
            if os.name == "posix":  # the params stay mapped after the file's name goes
                shutil.rmtree(folder, ignore_errors=True)
        if os.name != "posix":
            weakref.finalize(model, shutil.rmtree, folder, True)
        return model


def _ship(model: object, name: str | None, where: str) -> _Shipped:
    if isinstance(model, Bundle):
        with tempfile.TemporaryDirectory(prefix="graphrt-ray-") as folder:
            file = model.save(Path(folder) / "model.grb")
            data = file.read_bytes()
        return _Shipped(name, data=data)
    if isinstance(model, bytes | bytearray | memoryview):
        data = bytes(model)
        if not data.startswith(_ZIP_MAGIC):
            raise ArgumentError(f"{where}: bytes must be a .grb bundle file's content (a zip "
                                f"archive), given {len(data)} bytes starting {data[:8]!r}")
        return _Shipped(name, data=data)
    if isinstance(model, str | os.PathLike):
        path = Path(model).absolute()
        if not path.exists():
            raise BundleError(f"{where}: no model at {path} (a bundle directory, a .grb/.zip "
                              f"bundle or an .onnx file)")
        return _Shipped(name, path=str(path))
    raise ArgumentError(f"{where}: expected a path (str or os.PathLike), a graphrt.Bundle or a "
                        f".grb file's bytes, given {type(model).__name__} {describe(model)}")


def _as_list(models: ModelSource | Sequence[ModelSource], where: str) -> list[object]:
    if isinstance(models, str | os.PathLike | Bundle | bytes | bytearray | memoryview):
        return [models]
    if not isinstance(models, Sequence):
        raise ArgumentError(f"{where}: expected a model or a sequence of models, given "
                            f"{type(models).__name__} {describe(models)}")
    if not models:
        raise ArgumentError(f"{where}: no models given")
    return list(models)


def _names(names: Sequence[str | None] | None, count: int, where: str) -> list[str | None]:
    if names is None:
        return [None] * count
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ArgumentError(f"{where}(names=...): expected a sequence of names (one per model, "
                            f"None for the default), given {describe(names)}")
    if len(names) != count:
        raise ArgumentError(f"{where}(names=...): {len(names)} names for {count} models (give "
                            f"one per model, None for the default)")
    for name in names:
        if name is not None and (not isinstance(name, str) or not name):
            raise ArgumentError(f"{where}(names=...): expected names (non-empty str) or None, "
                                f"given {describe(name)}")
    given = [name for name in names if name is not None]
    repeated = sorted({name for name in given if given.count(name) > 1})
    if repeated:
        raise ArgumentError(f"{where}(names=...): two models are named {repeated[0]!r}; give "
                            f"each its own name")
    return list(names)


def _check_common(device: object, dim_bounds: object, where: str) -> None:
    if not isinstance(device, str) or not device:
        raise ArgumentError(f"{where}(device=...): expected a device as text ('cpu', "
                            f"'cuda:0', ...), given {describe(device)}")
    if dim_bounds is not None and (
            not isinstance(dim_bounds, Mapping) or
            not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                    and v > 0 for k, v in dim_bounds.items())):
        raise ArgumentError(f"{where}(dim_bounds=...): expected a mapping of symbolic "
                            f"dimension names to positive ints, given {describe(dim_bounds)}")


# -- Ray Serve ---------------------------------------------------------------------------------

class _ReplicaIngress:
    """The replica's ASGI app: the protocol's Starlette app, started at its first request
    unless the server ran its lifespan first (Ray Serve does; then the lifespan also shuts it
    down)."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self._started = False

    def add_exception_handler(self, kind: Any, handler: Any) -> None:
        """Ray Serve adds its own exception handlers to the ingress app."""
        self.app.add_exception_handler(kind, handler)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            self._started = True  # the lifespan starts and stops the app
        elif not self._started:
            self._started = True
            log.warning("the ASGI server ran no lifespan: graphrt's batchers start at the first "
                        "request, and queued requests are not drained at shutdown")
            await self.app.state.graphrt.startup()
        await self.app(scope, receive, send)


def _replica_class(shipped: Sequence[_Shipped], device: str, options: ServerOptions,
                   dim_bounds: Mapping[str, int] | None) -> type:
    def build() -> _ReplicaIngress:  # runs in each replica, once
        models = [source.load(device, options.max_batch, dim_bounds) for source in shipped]
        return _ReplicaIngress(create_app(models, options))

    class GraphrtReplica:
        """One Ray Serve replica: graphrt's protocol app over its own copy of the models."""

    ingress: type = serve.ingress(build)(GraphrtReplica)
    return ingress


def deployment(models: ModelSource | Sequence[ModelSource], *,
               names: Sequence[str | None] | None = None, device: str = "cpu",
               options: ServerOptions | None = None,
               dim_bounds: Mapping[str, int] | None = None,
               num_replicas: int | Literal["auto"] | None = None,
               autoscaling_config: Mapping[str, Any] | None = None,
               ray_actor_options: Mapping[str, Any] | None = None,
               max_ongoing_requests: int | None = None,
               name: str = "graphrt") -> serve.Application:
    """A Ray Serve application serving ``models`` over the Open Inference Protocol.

    Every replica loads the models once (at start, warmed up) and answers the routes of
    :func:`graphrt.serve.create_app` through Ray Serve's HTTP proxy, batching the requests Ray
    routes to it. Run it with :func:`run`, or with ``serve.run(app, route_prefix=...)``.

    Args:
        models: one model or several (:data:`ModelSource`): paths every node can read, or
            bundles (in memory, or a ``.grb``'s bytes) shipped with the application.
        names: the name clients use for each model (None: the bundle's ``model`` metadata,
            else the file's stem, else ``"model"``), one per model.
        device: where each replica runs them (``"cpu"``, ``"cuda"``): a ``cuda`` device gets
            one GPU per replica unless ``ray_actor_options`` says how many; Ray shows each
            replica only its own GPUs, so ``"cuda"`` (``cuda:0``) is the replica's first.
        options: batching, queue and limits in each replica (:class:`ServerOptions`).
        dim_bounds: for ``.onnx`` files, symbolic dimension → the largest size to plan for.
        num_replicas: how many replicas (default 1), or ``"auto"`` for Ray's autoscaling
            defaults.
        autoscaling_config: Ray Serve's autoscaling (``{"min_replicas": 1, "max_replicas":
            4, ...}``) instead of ``num_replicas``.
        ray_actor_options: each replica's resources (``{"num_cpus": 2}``, ``{"num_gpus":
            1}``, ...).
        max_ongoing_requests: the most requests Ray sends one replica at once (Ray's default
            is 5): these are what its batcher can stack.
        name: the deployment's name.

    Raises:
        ArgumentError: an argument of the wrong kind, names that do not fit the models, or
            both ``num_replicas`` and ``autoscaling_config``.
        BundleError: a model path that does not exist here.

    Example:
        >>> from ray import serve
        >>> app = deployment(["examples/bundles/mlp"], num_replicas=2)  # doctest: +SKIP
        >>> serve.run(app, name="graphrt", route_prefix="/")  # doctest: +SKIP
    """
    where = "graphrt.serve.ray.deployment"
    listed = _as_list(models, f"{where}(models=...)")
    given_names = _names(names, len(listed), where)
    _check_common(device, dim_bounds, where)
    if options is not None and not isinstance(options, ServerOptions):
        raise ArgumentError(f"{where}(options=...): expected graphrt.serve.ServerOptions, "
                            f"given {describe(options)}")
    if num_replicas is not None and num_replicas != "auto" and (
            not isinstance(num_replicas, int) or isinstance(num_replicas, bool)
            or num_replicas < 1):
        raise ArgumentError(f"{where}(num_replicas=...): expected a positive int or 'auto', "
                            f"given {describe(num_replicas)}")
    if autoscaling_config is not None:
        if not isinstance(autoscaling_config, Mapping):
            raise ArgumentError(f"{where}(autoscaling_config=...): expected a mapping (Ray "
                                f"Serve's AutoscalingConfig fields), given "
                                f"{describe(autoscaling_config)}")
        if num_replicas not in (None, "auto"):
            raise ArgumentError(f"{where}: give num_replicas or autoscaling_config, not both "
                                f"(autoscaling sets the number of replicas)")
    if ray_actor_options is not None and not isinstance(ray_actor_options, Mapping):
        raise ArgumentError(f"{where}(ray_actor_options=...): expected a mapping ({{'num_gpus':"
                            f" 1}}, ...), given {describe(ray_actor_options)}")
    if max_ongoing_requests is not None and (not isinstance(max_ongoing_requests, int)
                                             or max_ongoing_requests < 1):
        raise ArgumentError(f"{where}(max_ongoing_requests=...): expected a positive int, "
                            f"given {describe(max_ongoing_requests)}")
    if not isinstance(name, str) or not name or "#" in name:
        raise ArgumentError(f"{where}(name=...): expected a non-empty name without '#', given "
                            f"{describe(name)}")
    shipped = [_ship(model, model_name, f"{where}(models[{i}])")
               for i, (model, model_name) in enumerate(zip(listed, given_names, strict=True))]
    actor_options = dict(ray_actor_options or {})
    if device.startswith("cuda") and "num_gpus" not in actor_options:
        actor_options["num_gpus"] = 1
    settings: dict[str, Any] = {"name": name, "ray_actor_options": actor_options}
    if autoscaling_config is not None:
        settings["autoscaling_config"] = dict(autoscaling_config)
    if num_replicas is not None:
        settings["num_replicas"] = num_replicas
    if max_ongoing_requests is not None:
        settings["max_ongoing_requests"] = max_ongoing_requests
    replica = _replica_class(shipped, device, options or ServerOptions(),
                             dict(dim_bounds) if dim_bounds else None)
    try:
        app: serve.Application = serve.deployment(**settings)(replica).bind()
    except (TypeError, ValueError) as err:  # Ray refused a setting (autoscaling fields, ...)
        raise ArgumentError(f"{where}: Ray Serve refused the deployment's settings: "
                            f"{err}") from err
    return app


def run(models: ModelSource | Sequence[ModelSource], *,
        names: Sequence[str | None] | None = None, device: str = "cpu",
        options: ServerOptions | None = None, dim_bounds: Mapping[str, int] | None = None,
        num_replicas: int | Literal["auto"] | None = None,
        autoscaling_config: Mapping[str, Any] | None = None,
        ray_actor_options: Mapping[str, Any] | None = None,
        max_ongoing_requests: int | None = None, name: str = "graphrt",
        route_prefix: str = "/", host: str = "127.0.0.1", port: int = 8000,
        blocking: bool = False) -> str:
    """Deploy ``models`` on Ray Serve (:func:`deployment`) and return the base URL.

    Starts Ray (a local instance unless ``ray.init`` connected to a cluster) and Serve's HTTP
    proxy on ``host:port`` if they are not running; a Serve instance already running keeps
    its own host and port (Ray's rule). The routes are under ``route_prefix``:
    ``{url}/v2/models/{name}/infer``. Stop it with ``serve.delete(name)`` or
    ``serve.shutdown()``.

    Args:
        models, names, device, options, dim_bounds, num_replicas, autoscaling_config,
            ray_actor_options, max_ongoing_requests: as :func:`deployment`.
        name: the application's (and the deployment's) name.
        route_prefix: where the routes start (``"/"``, ``"/mlp"``, ...).
        host: where Serve's HTTP proxy listens (``"0.0.0.0"``: every interface).
        port: the proxy's TCP port.
        blocking: serve until Ctrl-C instead of returning.

    Raises:
        ArgumentError, BundleError: as :func:`deployment`, or a bad prefix, host or port.
        RuntimeError: (Ray's) a replica failed to start: its error is in the message.

    Example:
        >>> url = run("examples/bundles/mlp", num_replicas=2, port=8000)  # doctest: +SKIP
        >>> url  # doctest: +SKIP
        'http://127.0.0.1:8000'
    """
    where = "graphrt.serve.ray.run"
    if not isinstance(route_prefix, str) or not route_prefix.startswith("/"):
        raise ArgumentError(f"{where}(route_prefix=...): expected a path starting with '/', "
                            f"given {describe(route_prefix)}")
    if not isinstance(host, str) or not host:
        raise ArgumentError(f"{where}(host=...): expected an address, given {describe(host)}")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ArgumentError(f"{where}(port=...): expected a TCP port (1-65535), given "
                            f"{describe(port)}")
    app = deployment(models, names=names, device=device, options=options,
                     dim_bounds=dim_bounds, num_replicas=num_replicas,
                     autoscaling_config=autoscaling_config,
                     ray_actor_options=ray_actor_options,
                     max_ongoing_requests=max_ongoing_requests, name=name)
    serve.start(http_options={"host": host, "port": port})
    serve.run(app, name=name, route_prefix=route_prefix, blocking=blocking)
    return f"http://{host}:{port}{route_prefix.rstrip('/')}"


# -- Ray Data ----------------------------------------------------------------------------------

class Predictor:
    """Batch inference with ``Dataset.map_batches``: each actor loads the model once, then maps
    batches (Ray's default ``"numpy"`` format: a dict of columns, each an array of shape
    ``[rows, ...]``) to the model's outputs, one column per output.

    How rows meet the model's inputs (each input reads the column of its name, or the one
    ``input_columns`` gives; a single-input model also reads a batch's only column besides
    ``keep_columns``, such as ``ray.data.from_numpy``'s ``"data"``):

    - A row with one dimension less than the input is one sample. With a batch axis (a
      symbolic first dimension, ``[batch, 64]``) rows run stacked, in chunks of at most the
      model's batch bound (or ``max_batch``). Without one, the input's fixed first dimension
      B is taken as a batch of B samples (``[8, 64]``: rows of 64 values, 8 at a time), and
      the last chunk is filled up by repeating its last row, whose outputs are dropped: this
      assumes the model treats the samples of its first dimension independently, as
      inference graphs do; give rows of the full shape otherwise. Each output gets one row
      per input row (every output's first dimension must then be the batch too).
    - A row with the input's full rank is one whole run (``[8, 64]`` rows of a ``[8, 64]``
      model): each output row is that run's whole output (shape ``[rows, 8, 10]``).

    Columns are cast to the input's dtype where numpy casts safely or within a kind
    (float64 data to a float32 input); other dtypes are refused.

    The returned batch holds the output columns (named as the outputs, or as
    ``output_columns`` renames them) and the input columns listed in ``keep_columns`` (an id,
    a label), unchanged; Ray's ``map_batches`` drops every other column.

    Args:
        model: the model (:data:`ModelSource`): a path every node can read (use an absolute
            path: Ray's workers may run elsewhere), a :class:`~graphrt.Bundle` (Ray pickles
            it to the actors) or a ``.grb``'s bytes.
        name: a name for the model in messages and logs.
        device: where it runs; ``"cuda"`` wants ``num_gpus=1`` in ``map_batches``.
        input_columns: model input → the column it reads.
        output_columns: model output → the column it is written to.
        keep_columns: input columns passed through to the result.
        max_batch: the most rows one run stacks (default: the model's batch bound).
        dim_bounds: for an ``.onnx`` file, symbolic dimension → the largest size.

    Attributes:
        model: the loaded model (:class:`~graphrt.serve.ServedModel`).

    Raises:
        ArgumentError: arguments of the wrong kind, or column mappings naming no input or
            output of the model.
        BundleError, ConversionError: the model does not load.

    Example:
        >>> ds = ray.data.from_items(  # doctest: +SKIP
        ...     [{"id": i, "input": x[i]} for i in range(200)])
        >>> out = ds.map_batches(  # doctest: +SKIP
        ...     Predictor, fn_constructor_kwargs={"model": "/models/mlp.onnx",
        ...                                       "dim_bounds": {"batch": 64},
        ...                                       "keep_columns": ["id"]},
        ...     concurrency=2, batch_size=64)
        >>> out.take(1)[0].keys()  # doctest: +SKIP
        dict_keys(['output', 'id'])
    """

    def __init__(self, model: ModelSource, *, name: str | None = None, device: str = "cpu",
                 input_columns: Mapping[str, str] | None = None,
                 output_columns: Mapping[str, str] | None = None,
                 keep_columns: Sequence[str] = (), max_batch: int | None = None,
                 dim_bounds: Mapping[str, int] | None = None) -> None:
        where = "graphrt.serve.ray.Predictor"
        _check_common(device, dim_bounds, where)
        if name is not None and (not isinstance(name, str) or not name):
            raise ArgumentError(f"{where}(name=...): expected a non-empty str or None, given "
                                f"{describe(name)}")
        if max_batch is not None and (not isinstance(max_batch, int) or max_batch < 1):
            raise ArgumentError(f"{where}(max_batch=...): expected a positive int, given "
                                f"{describe(max_batch)}")
        if isinstance(keep_columns, str) or not isinstance(keep_columns, Sequence) or \
                not all(isinstance(column, str) for column in keep_columns):
            raise ArgumentError(f"{where}(keep_columns=...): expected a sequence of column "
                                f"names, given {describe(keep_columns)}")
        if isinstance(model, Bundle):
            self.model = load_model(model, name=name, max_batch=max_batch, device_spec=device)
        else:
            self.model = _ship(model, name, f"{where}(model=...)").load(device, max_batch,
                                                                         dim_bounds)
        self.input_columns = self._mapping(input_columns, self.model.input_names,
                                           "input_columns", "input")
        renamed = self._mapping(output_columns, self.model.output_names, "output_columns",
                                "output")
        self.output_columns = renamed
        self.keep_columns = tuple(keep_columns)
        clash = sorted(set(self.keep_columns) & set(renamed.values()))
        if clash:
            raise ArgumentError(f"{where}(keep_columns=...): column {clash[0]!r} is also an "
                                f"output column; rename the output with output_columns")
        self._explicit_inputs = input_columns is not None

    def _mapping(self, given: Mapping[str, str] | None, names: Sequence[str], label: str,
                 kind: str) -> dict[str, str]:
        where = f"graphrt.serve.ray.Predictor({label}=...)"
        if given is None:
            return {name: name for name in names}
        if not isinstance(given, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in given.items()):
            raise ArgumentError(f"{where}: expected a mapping of model {kind} names to column "
                                f"names, given {describe(given)}")
        unknown = [key for key in given if key not in names]
        if unknown:
            raise ArgumentError(f"{where}: model {self.model.name!r} has no {kind} "
                                f"{unknown[0]!r} (its {kind}s: {', '.join(names)})")
        columns = {name: given.get(name, name) for name in names}
        values = list(columns.values())
        repeated = sorted({column for column in values if values.count(column) > 1})
        if repeated:
            raise ArgumentError(f"{where}: two {kind}s map to column {repeated[0]!r}")
        return columns

    # -- one batch ------------------------------------------------------------------------------

    def __call__(self, batch: Mapping[str, Array]) -> dict[str, Array]:
        """Run one batch of rows; return the output columns and ``keep_columns``.

        Raises:
            ArgumentError: the batch is not a dict of numpy columns (``batch_format``
                other than ``"numpy"``).
            InputError: a column the model needs is missing, or its rows do not fit the
                input (naming the column, the row shape and what the model takes).
            ExecutionError: a kernel raised.
        """
        if not isinstance(batch, Mapping):
            raise ArgumentError(f"graphrt.serve.ray.Predictor: expected a batch as a dict of "
                                f"numpy columns (map_batches' batch_format='numpy', the "
                                f"default), given {type(batch).__name__}")
        columns = {info.name: self._column(batch, info) for info in self.model.inputs}
        rows = {len(column) for column in columns.values()}
        if len(rows) > 1:
            raise InputError(f"model {self.model.name!r}: the input columns hold different "
                             f"numbers of rows ({sorted(rows)})")
        whole = [column.ndim == len(info.shape) + 1
                 for info, column in zip(self.model.inputs, columns.values(), strict=True)]
        if all(whole):
            outputs = self._by_row(columns)
        elif not any(whole):
            outputs = self._as_samples(columns)
        else:
            raise InputError(f"model {self.model.name!r}: some input columns hold whole inputs "
                             f"and some hold samples; "
                             f"{self._expected(columns)}")
        result = {self.output_columns[name]: value for name, value in outputs.items()}
        for column in self.keep_columns:
            if column not in batch:
                raise InputError(f"keep_columns: the batch has no column {column!r} (its "
                                 f"columns: {', '.join(batch)})")
            result[column] = np.asarray(batch[column])
        return result

    def _column(self, batch: Mapping[str, Array], info: TensorInfo) -> Array:
        column_name = self.input_columns[info.name]
        if column_name not in batch:
            others = [column for column in batch if column not in self.keep_columns]
            if not self._explicit_inputs and len(self.model.inputs) == 1 and len(others) == 1:
                column_name = others[0]
            else:
                raise InputError(f"model {self.model.name!r} reads input {info.name!r} from "
                                 f"column {column_name!r}, which the batch lacks (its "
                                 f"columns: {', '.join(batch) or 'none'}); map it with "
                                 f"input_columns={{{info.name!r}: COLUMN}}")
        column = batch[column_name]
        if isinstance(column, np.ndarray) and column.dtype == object:
            try:  # a column of per-row arrays (Ray's variable-shaped tensors)
                column = np.stack([np.asarray(row) for row in column])
            except ValueError:
                raise InputError(f"column {column_name!r}: its rows have different shapes; "
                                 f"input {info.name!r} takes {self._row_shapes(info)}") \
                    from None
        column = np.asarray(column)
        if column.dtype != info.dtype:
            if not np.can_cast(column.dtype, info.dtype, "same_kind"):
                raise InputError(f"column {column_name!r}: {column.dtype} values cannot be "
                                 f"cast to input {info.name!r}'s {info.dtype_name}")
            column = column.astype(info.dtype)
        if column.ndim not in (len(info.shape) + 1, len(info.shape)) or column.ndim == 0:
            raise InputError(f"column {column_name!r}: rows of shape {list(column.shape[1:])} "
                             f"do not fit input {info.name!r}; it takes "
                             f"{self._row_shapes(info)}")
        return column

    def _row_shapes(self, info: TensorInfo) -> str:
        shape = info.protocol_shape()
        text = f"rows of shape {shape} (whole inputs)"
        if len(shape) > 1:
            text = f"rows of shape {shape[1:]} (samples) or {text}"
        return text

    def _expected(self, columns: Mapping[str, Array]) -> str:
        return "; ".join(f"input {name!r} takes {self._row_shapes(info)}, given rows of "
                         f"{list(column.shape[1:])}"
                         for (name, column), info in zip(columns.items(), self.model.inputs,
                                                         strict=True))

    def _check(self, inputs: Mapping[str, Array]) -> None:
        for info in self.model.inputs:
            try:
                self.model.check_shape(info, inputs[info.name].shape)
            except RequestError as err:
                raise InputError(f"model {self.model.name!r}: column "
                                 f"{self.input_columns[info.name]!r}: {err}") from None

    def _by_row(self, columns: Mapping[str, Array]) -> dict[str, Array]:
        count = len(next(iter(columns.values())))
        runs: list[dict[str, Array]] = []
        for row in range(count):
            inputs = {name: column[row] for name, column in columns.items()}
            self._check(inputs)
            runs.append(self.model.run(inputs))
        return {info.name: _stack([run[info.name] for run in runs], info)
                for info in self.model.outputs}

    def _as_samples(self, columns: Mapping[str, Array]) -> dict[str, Array]:
        model = self.model
        count = len(next(iter(columns.values())))
        if model.batch is not None:
            step, fixed = model.batch.limit, False
        else:
            leads = {info.shape[0] for info in (*model.inputs, *model.outputs)
                     if info.shape}
            lead = next(iter(leads)) if len(leads) == 1 else None
            if not isinstance(lead, int) or any(not info.shape for info in model.outputs):
                raise InputError(f"model {model.name!r} has no batch dimension (its inputs' "
                                 f"and outputs' first dimensions differ): give rows of whole "
                                 f"inputs; {self._expected(columns)}")
            step, fixed = lead, True
        pieces: dict[str, list[Array]] = {info.name: [] for info in model.outputs}
        for start in range(0, count, step):
            inputs = {name: column[start:start + step] for name, column in columns.items()}
            taken = len(next(iter(inputs.values())))
            if fixed and taken < step:
                inputs = {name: np.concatenate([chunk, np.repeat(chunk[-1:], step - taken,
                                                                 axis=0)])
                          for name, chunk in inputs.items()}
            self._check(inputs)
            for name, value in model.run(inputs).items():
                pieces[name].append(value[:taken])
        return {info.name: np.concatenate(pieces[info.name]) if pieces[info.name]
                else _empty(info, whole=False)
                for info in model.outputs}


def _stack(values: Sequence[Array], info: TensorInfo) -> Array:
    if not values:
        return _empty(info, whole=True)
    if len({value.shape for value in values}) == 1:
        return np.stack(values)
    ragged = np.empty(len(values), dtype=object)  # Ray's variable-shaped tensor column
    for i, value in enumerate(values):
        ragged[i] = value
    return ragged


def _empty(info: TensorInfo, whole: bool) -> Array:
    """No rows of output ``info``: shape ``[0, ...]`` (symbolic dimensions as 0)."""
    shape = info.shape if whole else info.shape[1:]
    return np.empty([0, *(dim if isinstance(dim, int) else 0 for dim in shape)], info.dtype)
