"""``graphrt bundle GRAPH -o OUT``: write a bundle from a graph JSON file, its declarative lib
and its params, then load it back (every check of :func:`graphrt.load_bundle`) and show it.

The params may be a TVM params blob, a ``.safetensors`` file or a ``.npz`` archive (read with
``allow_pickle=False``); graph inputs that are not params are the bundle's inputs. ``OUT`` is a
directory, or a single file when it ends in ``.grb`` or ``.zip``.

Example:
    >>> from graphrt.cli import main
    >>> main(["bundle", "examples/models/mlp/graph.json",  # doctest: +SKIP
    ...       "--lib", "examples/models/mlp/lib.json",
    ...       "--params", "examples/bundles/mlp/params.safetensors", "-o", "mlp.grb"])
    wrote mlp.grb
    bundle: mlp.grb (zip, format 1.0, written by graphrt 0.1.0)
    ...
    0
"""

from __future__ import annotations

import argparse
import struct
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..bundle import load_bundle, save_bundle
from ..errors import BundleError, describe
from ..files import open_regular
from .common import pairs_to_dict, read_npy_stream
from .summary import bundle_lines, external_kernels_note

__all__ = ["bundle_command", "configure", "metadata_argument", "read_params"]

Array = np.ndarray[Any, Any]


def metadata_argument(text: str) -> tuple[str, str]:
    """argparse type of ``--metadata KEY=VALUE``: (key, value), the value kept as text.

    Example:
        >>> metadata_argument("source=onnx model zoo, v2")
        ('source', 'onnx model zoo, v2')
    """
    key, equals, value = text.partition("=")
    if not (key.strip() and equals):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, given {text!r}")
    return key.strip(), value


def read_params(path: str | None) -> Path | dict[str, Array] | None:
    """What ``save_bundle`` takes as params: the path of a TVM params blob or a safetensors
    file as it is (``save_bundle`` tells them apart by their first bytes), or the arrays of a
    ``.npz`` archive by name.

    Raises:
        BundleError: a ``.npz`` file that cannot be read (a FIFO, a device, a corrupt zip), or
            whose arrays hold pickled objects or claim more data than they have.

    Example:
        >>> read_params("weights.safetensors")
        PosixPath('weights.safetensors')
    """
    if path is None:
        return None
    where = Path(path)
    if where.suffix.lower() != ".npz":
        return where
    with open_regular(where, "params", BundleError) as file:
        if not zipfile.is_zipfile(file):
            raise BundleError(f"cannot read params file {describe(path)}: it is not a .npz "
                              "archive of named arrays (a .npy array is one unnamed array)")
        try:
            with zipfile.ZipFile(file) as archive:
                return {info.filename.removesuffix(".npy"): _npz_member(archive, info, path)
                        for info in archive.infolist()}
        except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError,
                ValueError, NotImplementedError, RuntimeError, struct.error) as err:
            raise BundleError(f"cannot read params file {describe(path)} as a .npz archive: "
                              f"{str(err)[:200]}") from None


def _npz_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> Array:
    """One array of a ``.npz`` archive, read as :func:`~graphrt.cli.common.read_npy_stream`
    reads any ``.npy`` (checked before its data is inflated)."""
    prefix = f"cannot read params file {describe(path)}, array {describe(info.filename)}"
    if not info.filename.endswith(".npy"):
        raise BundleError(f"{prefix}: a .npz archive holds only .npy members")
    with archive.open(info) as stream:
        return read_npy_stream(stream, info.file_size, prefix, BundleError)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``GRAPH``, ``--lib``, ``--params``, ``-o/--output``, ``--metadata`` and
    ``--overwrite``."""
    parser.add_argument("graph", metavar="GRAPH", help="graph JSON file")
    parser.add_argument(
        "--lib", metavar="LIB.json",
        help="its declarative lib; func_names it does not define are external kernels, which "
             "the program that loads the bundle supplies")
    parser.add_argument(
        "--params", metavar="PARAMS",
        help="the params: a TVM params blob, a .safetensors file or a .npz archive; graph "
             "inputs that are not params are the bundle's inputs")
    parser.add_argument(
        "-o", "--output", required=True, metavar="OUT",
        help="the bundle to write: a directory, or a single file when OUT ends in .grb or "
             ".zip")
    parser.add_argument(
        "--metadata", action="append", default=[], type=metadata_argument,
        metavar="KEY=VALUE", help="free-form metadata for the manifest (a text value); "
                                  "repeat for several keys")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing bundle at OUT (never anything else)")


def bundle_command(args: argparse.Namespace) -> int:
    """``graphrt bundle GRAPH [--lib LIB.json] [--params PARAMS] -o OUT [--metadata KEY=VALUE
    ...] [--overwrite]``.

    Example:
        >>> from graphrt.cli import main
        >>> main(["bundle", "examples/graphs/simplex.json", "-o", "s.grb"])  # doctest: +SKIP
        0
    """
    metadata = pairs_to_dict(args.metadata, "--metadata")
    lib = None if args.lib is None else Path(args.lib)
    written = save_bundle(Path(args.output), Path(args.graph), lib, read_params(args.params),
                          metadata, overwrite=args.overwrite)
    bundle = load_bundle(written)  # what was written loads, every check passing
    print(f"wrote {written}")
    print("\n".join(bundle_lines(bundle)))
    note = external_kernels_note(bundle)
    if note is not None:
        print(note, file=sys.stderr)
    return 0
