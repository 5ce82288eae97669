"""``graphrt serve MODEL...``: serve bundles and ONNX models over the Open Inference Protocol.

Each ``MODEL`` is a bundle (directory, ``.grb``/``.zip``) or an ``.onnx`` file (converted at
start-up, with ``--dim NAME=BOUND`` for its symbolic dimensions). Clients written for Triton or
KServe (``tritonclient``, KServe's SDK, curl) call it unchanged. Needs ``graphrt[serve]``.

Example:
    >>> parser = argparse.ArgumentParser()
    >>> configure(parser)
    >>> args = parser.parse_args(["examples/bundles/mlp", "--max-batch", "32"])
    >>> args.port, args.max_batch, args.max_delay_ms
    (8000, 32, 0.0)
"""

from __future__ import annotations

import argparse
import logging
import sys

from .common import (
    UsageError,
    device_argument,
    dim_bound,
    milliseconds_argument,
    pairs_to_dict,
    parse_count,
    positive_argument,
)

__all__ = ["configure", "serve_command"]


def _port(text: str) -> int:
    value = parse_count(text)
    if value is None or value > 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port (0-65535), given {text!r}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``MODEL...`` and the server's options."""
    parser.add_argument("models", nargs="+", metavar="MODEL",
                        help="a bundle (directory, .grb or .zip) or an .onnx file")
    parser.add_argument("--name", action="append", default=[], metavar="NAME",
                        help="the name clients use for the MODEL in the same position "
                             "(default: the bundle's 'model' metadata, else the file name)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default 127.0.0.1: this machine only; "
                             "0.0.0.0 for every interface)")
    parser.add_argument("--port", type=_port, default=8000, help="HTTP port (default 8000)")
    parser.add_argument("--grpc-port", type=_port, metavar="PORT",
                        help="also serve the protocol's gRPC API on PORT (needs graphrt[grpc])")
    parser.add_argument("--device", type=device_argument, default=None, metavar="KIND[:N]",
                        help="where the models run (default cpu)")
    parser.add_argument("--max-batch", type=positive_argument, metavar="N",
                        help="the most samples one run stacks (default: each model's batch "
                             "bound; 1 turns dynamic batching off)")
    parser.add_argument("--max-delay-ms", type=milliseconds_argument, default=0.0, metavar="MS",
                        help="how long a batch may wait to fill after its oldest request "
                             "(default 0: it takes what queued while the workers were busy)")
    parser.add_argument("--workers", type=positive_argument, default=1, metavar="N",
                        help="runs at once per model, each on its own thread and run context "
                             "(default 1; the kernels already use every core)")
    parser.add_argument("--max-queue", type=positive_argument, default=1024, metavar="N",
                        help="requests waiting per model before the server answers 503 "
                             "(default 1024)")
    parser.add_argument("--timeout-s", type=float, default=60.0, metavar="S",
                        help="the longest a request may wait and run, then 504 (default 60)")
    parser.add_argument("--max-body-mib", type=positive_argument, default=64, metavar="MIB",
                        help="the largest request body, decompressed (default 64 MiB)")
    parser.add_argument("--dim", action="append", default=[], type=dim_bound,
                        metavar="NAME=BOUND", help="for .onnx models: the largest size of a "
                        "symbolic dimension (repeat for several)")
    parser.add_argument("--log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"])


def serve_command(args: argparse.Namespace) -> int:
    """``graphrt serve MODEL... [--name NAME ...] [--host H] [--port P] [--grpc-port P]
    [--device D] [--max-batch N] [--max-delay-ms MS] [--workers N] [--max-queue N]
    [--timeout-s S] [--max-body-mib MIB] [--dim NAME=BOUND ...]``."""
    from ..serve import ServerOptions, load_model, serve  # needs graphrt[serve]

    if len(args.name) > len(args.models):
        raise UsageError(f"{len(args.name)} --name options for {len(args.models)} models")
    if args.timeout_s <= 0:
        raise UsageError(f"--timeout-s must be positive, given {args.timeout_s}")
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bounds = pairs_to_dict(args.dim, "--dim") or None
    names = args.name + [None] * (len(args.models) - len(args.name))
    models = [load_model(source, name=name, device_spec=args.device or "cpu",
                         max_batch=args.max_batch, dim_bounds=bounds)
              for source, name in zip(args.models, names, strict=True)]
    options = ServerOptions(max_batch=args.max_batch, max_delay_ms=args.max_delay_ms,
                            max_queue=args.max_queue, workers=args.workers,
                            timeout_s=args.timeout_s,
                            max_body_bytes=args.max_body_mib * 1024 * 1024)
    for model in models:
        batch = (f"dynamic batching up to {model.batch.limit}" if model.batch and
                 (args.max_batch or 2) > 1 else "no batching")
        print(f"graphrt serve: {model.name!r} on {model.device}, inputs "
              f"{', '.join(i.name for i in model.inputs)}; {batch}", file=sys.stderr)
    serve(models, host=args.host, port=args.port, grpc_port=args.grpc_port, options=options,
          log_level=args.log_level)
    return 0
