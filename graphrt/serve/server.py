"""Running the app: :func:`serve` in the foreground (``graphrt serve``), :class:`Server` in a
background thread (a notebook, a test, a benchmark).

Both use uvicorn. On SIGINT/SIGTERM (foreground) or :meth:`Server.stop`, the server marks
itself not ready, stops accepting connections (uvicorn closes idle ones too, so a client sees
the refusal rather than a 503), finishes the requests already received (up to
``graceful_s``), then stops its workers.

Example:
    >>> from graphrt.serve import Server, load_model
    >>> with Server([load_model("examples/bundles/mlp")], port=0) as server:  # doctest: +SKIP
    ...     print(server.url)
    http://127.0.0.1:40123
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import uvicorn

from ..errors import GraphrtError
from .app import ServerOptions, create_app
from .models import ServedModel

__all__ = ["Server", "serve"]

log = logging.getLogger(__name__)


def _config(models: Sequence[ServedModel], host: str, port: int, grpc_port: int | None,
            options: ServerOptions | None, graceful_s: float, log_level: str
            ) -> uvicorn.Config:
    grpc_address = None if grpc_port is None else f"{host}:{grpc_port}"
    return uvicorn.Config(create_app(models, options, grpc_address=grpc_address),
                          host=host, port=port,
                          log_level=log_level, timeout_graceful_shutdown=max(1, round(graceful_s)),
                          access_log=False, lifespan="on")


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, with the app marked not ready as soon as shutdown begins (before the
    requests in flight are drained), so that load balancers stop sending here."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state = getattr(getattr(self.config.app, "state", None), "graphrt", None)
        if state is not None:
            state.ready = False
        await super().shutdown(sockets)


def _ignore(sig: int, frame: object) -> None:
    """A signal handled already (the server drained and stopped)."""


def serve(models: Sequence[ServedModel], *, host: str = "127.0.0.1", port: int = 8000,
          grpc_port: int | None = None, options: ServerOptions | None = None,
          graceful_s: float = 30.0, log_level: str = "info") -> None:
    """Serve ``models`` over the Open Inference Protocol until SIGINT or SIGTERM, then finish
    the requests in flight and return (call it from the main thread).

    Args:
        models: the models (:func:`graphrt.serve.load_model`).
        host: the address to listen on (127.0.0.1: this machine only).
        port: the TCP port.
        grpc_port: also serve the protocol's gRPC API on this port (needs graphrt[grpc]).
        options: batching, queue and limits (:class:`ServerOptions`).
        graceful_s: how long shutdown waits for requests in flight.
        log_level: uvicorn's log level.

    Example:
        >>> serve([load_model("examples/bundles/mlp")], port=8000)  # doctest: +SKIP
    """
    server = _Uvicorn(_config(models, host, port, grpc_port, options, graceful_s,
                                    log_level))
    # uvicorn raises the signal that stopped it again once it has drained, to end the process
    # with it; a signal answered by a drained shutdown is a clean exit (status 0) here.
    settled = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run()
    finally:
        for sig, handler in settled.items():
            signal.signal(sig, handler)
    if not server.started:
        raise GraphrtError(f"the server did not start on {host}:{port} (is the port in use? "
                           f"see the log above)")


class Server:
    """A server running in a background thread of this process.

    Args:
        models, host, grpc_port, options, graceful_s, log_level: as :func:`serve`.
        port: the TCP port; 0 picks a free one (read it back from :attr:`port`).

    Attributes:
        url: ``http://host:port`` once started.

    Example:
        >>> with Server([load_model("examples/bundles/mlp")], port=0) as server:  # doctest: +SKIP
        ...     print(server.url)
    """

    def __init__(self, models: Sequence[ServedModel], *, host: str = "127.0.0.1",
                 port: int = 0, grpc_port: int | None = None,
                 options: ServerOptions | None = None, graceful_s: float = 30.0,
                 log_level: str = "warning") -> None:
        self.host = host
        self._server = _Uvicorn(_config(models, host, port, grpc_port, options,
                                              graceful_s, log_level))
        self._thread: threading.Thread | None = None
        self.port = port

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> Server:
        """Start serving; return once the server accepts connections.

        Raises:
            GraphrtError: it did not start (the port is in use, ...).
        """
        server = self._server
        thread = threading.Thread(target=server.run, name="graphrt-serve", daemon=True)
        thread.start()
        self._thread = thread
        waited = 0.0
        while not server.started and thread.is_alive() and waited < timeout_s:
            thread.join(0.01)
            waited += 0.01
        if not server.started:
            self.stop()
            raise GraphrtError(f"the server did not start on {self.host}:{self.port} within "
                               f"{timeout_s:g} s (is the port in use?)")
        sockets = [sock for listener in server.servers for sock in listener.sockets]
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop: finish the requests in flight, then return."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state: Any = "running" if self._thread is not None else "stopped"
        return f"<graphrt.serve.Server {self.url} {state}>"
