"""``graphrt convert MODEL.onnx -o OUT``: convert an ONNX model into a bundle and show it.

The bundle is an ordinary one (graph JSON, a declarative lib, params); running it needs no
``onnx``. ``OUT`` is a directory, or a single file when it ends in ``.grb`` or ``.zip``.

Example:
    >>> from graphrt.cli import main
    >>> main(["convert", "model.onnx", "-o", "model.grb"])  # doctest: +SKIP
    wrote model.grb
    ...
    0
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..bundle import load_bundle
from .common import UsageError, dim_bound, pairs_to_dict, parse_count
from .summary import bundle_lines, columns

__all__ = ["configure", "convert_command"]


def _input_shape(text: str) -> tuple[str, list[int]]:
    name, equals, value = text.partition("=")
    dims = [parse_count(part.strip()) for part in value.split(",")] if value else []
    if not (name.strip() and equals and dims and all(d is not None for d in dims)):
        raise argparse.ArgumentTypeError(f"expected NAME=D0,D1,... (the input's shape, "
                                         f"non-negative integers), given {text!r}")
    return name.strip(), [int(d) for d in dims if d is not None]


def _placement(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not (key.strip() and equals and value.strip()):
        raise argparse.ArgumentTypeError(f"expected OP_OR_NODE=DEVICE, given {text!r}")
    return key.strip(), value.strip()


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``MODEL``, ``-o/--output``, ``--dim``, ``--shape``, ``--no-fuse``,
    ``--no-channels-last``, ``--devices``, ``--place`` and ``--overwrite``."""
    parser.add_argument("model", metavar="MODEL", help="the ONNX model file")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="the bundle to write: a directory, or a single file when OUT "
                             "ends in .grb or .zip")
    parser.add_argument("--dim", action="append", default=[], type=dim_bound,
                        metavar="NAME=BOUND", help="the largest size of a symbolic input "
                        "dimension, which stays symbolic: memory is planned for it (repeat "
                        "for several)")
    parser.add_argument("--shape", action="append", default=[], type=_input_shape,
                        metavar="NAME=D0,D1,...", help="fix an input's shape, overriding "
                        "what the model declares (repeat for several)")
    parser.add_argument("--no-fuse", action="store_true",
                        help="one node per standard op (for debugging)")
    parser.add_argument("--no-channels-last", action="store_true",
                        help="keep cuda's convolutions NCHW (by default the tensors between "
                             "them are NHWC, as cuDNN's tensor cores read them)")
    parser.add_argument("--devices", metavar="TYPES",
                        help="device types in order of preference, e.g. cuda,cpu")
    parser.add_argument("--place", action="append", default=[], type=_placement,
                        metavar="OP_OR_NODE=DEVICE",
                        help="send an ONNX op type or node name to a device type")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing bundle at OUT (never anything else)")


def convert_command(args: argparse.Namespace) -> int:
    """``graphrt convert MODEL -o OUT [--dim NAME=BOUND ...] [--shape NAME=D0,D1,... ...]
    [--no-fuse] [--no-channels-last] [--devices TYPES] [--place OP=DEVICE ...]
    [--overwrite]``."""
    from ..onnx import from_onnx  # needs the optional onnx package

    devices = None
    if args.devices:
        devices = [part.strip() for part in args.devices.split(",") if part.strip()]
        if not devices:
            raise UsageError("--devices needs at least one device type")
    bundle = from_onnx(Path(args.model), dim_bounds=pairs_to_dict(args.dim, "--dim") or None,
                       shapes=pairs_to_dict(args.shape, "--shape") or None,
                       fuse=not args.no_fuse, devices=devices,
                       placement=pairs_to_dict(args.place, "--place") or None,
                       channels_last=not args.no_channels_last)
    written = bundle.save(Path(args.output), overwrite=args.overwrite)
    memory = bundle.metadata.get("memory")
    print(f"wrote {written}")
    print("\n".join(bundle_lines(load_bundle(written))))
    decisions = bundle.metadata.get("placement")
    if isinstance(decisions, list):
        print("placement:")
        print("\n".join(columns([[str(d.get("node")), str(d.get("device")), str(d.get("reason"))]
                                for d in decisions if isinstance(d, dict)])))
    if isinstance(memory, dict):
        planned = int(memory["planned_bytes"])  # type: ignore[arg-type]
        bound = int(memory["lower_bound_bytes"])  # type: ignore[arg-type]
        naive = int(memory["one_buffer_per_entry_bytes"])  # type: ignore[arg-type]
        print(f"activation memory: planned {planned:,} bytes; lower bound {bound:,} "
              f"({planned / bound if bound else 1:.2f}x); one buffer per entry {naive:,}")
    return 0
