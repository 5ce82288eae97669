"""What ``graphrt run`` and ``graphrt bench`` share: the bundle and input arguments, and a
bundle's module created on the devices asked for with every input set.

Inputs come from ``--input NAME=FILE.npy`` (read with ``allow_pickle=False``) or, for those not
given, are random of the right shape and dtype.

Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_bundle_arguments(parser)
    >>> parser.parse_args(["b.grb", "--input", "x=x.npy", "--seed", "3"]).inputs
    [('x', 'x.npy')]
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..bundle import Bundle, TensorSpec
from ..errors import InputError
from ..executor import GraphModule
from ..schema import parse_dtype
from ..schema.dtypes import BFLOAT, FLOAT
from .common import (
    add_placement_options,
    open_bundle,
    pairs_to_dict,
    parse_count,
    placement_of,
    read_npy,
)

__all__ = [
    "Prepared",
    "add_bundle_arguments",
    "input_argument",
    "prepare",
    "random_input",
    "read_inputs",
    "seed_argument",
]

Array = np.ndarray[Any, Any]


def input_argument(text: str) -> tuple[str, str]:
    """argparse type of ``--input NAME=FILE.npy``: (name, path).

    Example:
        >>> input_argument("x=data/x.npy")
        ('x', 'data/x.npy')
    """
    name, equals, path = text.partition("=")
    if not (name and equals and path):
        raise argparse.ArgumentTypeError(f"expected NAME=FILE.npy, given {text!r}")
    return name, path


def seed_argument(text: str) -> int:
    """argparse type of ``--seed``: a non-negative integer in ASCII digits.

    Example:
        >>> seed_argument("7")
        7
    """
    value = parse_count(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, given {text!r}")
    return value


def add_bundle_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``BUNDLE``, the placement options, ``--input NAME=FILE.npy`` and ``--seed``."""
    parser.add_argument("bundle", metavar="BUNDLE", help="bundle directory or single file")
    add_placement_options(parser)
    parser.add_argument("--input", dest="inputs", action="append", default=[],
                        type=input_argument, metavar="NAME=FILE.npy",
                        help="set an input from a .npy file; repeat for several (inputs not "
                             "given are random)")
    parser.add_argument("--seed", type=seed_argument, default=0,
                        help="seed of the random inputs (default: 0)")


def read_inputs(files: Mapping[str, str]) -> dict[str, Array]:
    """The arrays of ``--input`` options, by name (never unpickling anything).

    Raises:
        InputError: a file that is not a regular file holding one plain ``.npy`` array whose
            header matches its size (see :func:`~graphrt.cli.common.read_npy`).
    """
    return {name: read_npy(path, f"--input {name}") for name, path in files.items()}


def random_input(spec: TensorSpec, rng: np.random.Generator,
                 bound: tuple[int, ...] | None = None) -> Array:
    """A random array for an input: standard normal for floats, integers in [0, 10), or
    booleans. A symbolic dimension (``"n"``) takes its value from ``bound``, the input's
    planned shape (every shape variable at its upper bound).

    Example:
        >>> spec = TensorSpec(name="x", shape=["n", 3], dtype="int8")
        >>> random_input(spec, np.random.default_rng(0), bound=(8, 3)).shape
        (8, 3)
    """
    shape = tuple(dim if isinstance(dim, int) else (bound or ())[axis]
                  for axis, dim in enumerate(spec.shape))
    dtype = parse_dtype(spec.dtype)
    if dtype.name == "bool":
        return rng.random(shape) < 0.5
    if dtype.code in (FLOAT, BFLOAT):
        return rng.standard_normal(shape).astype(dtype.numpy)
    return rng.integers(0, 10, shape).astype(dtype.numpy)


@dataclass(frozen=True)
class Prepared:
    """A bundle's module with every input set, and where each input came from.

    Attributes:
        bundle: the loaded bundle.
        module: the module created on the devices asked for.
        values: the inputs set, by name (given or random).
        origins: for each input, ``"from FILE"`` or ``"random (seed N)"``.
    """

    bundle: Bundle
    module: GraphModule
    values: Mapping[str, Array]
    origins: Mapping[str, str]


def _planned_shapes(bundle: Bundle) -> dict[str, tuple[int, ...]]:
    graph = bundle.graph
    return {name: graph.entries[graph.nodes[nid].outputs[0]].shape
            for nid, name in zip(graph.arg_nodes, graph.input_names, strict=True)}


def prepare(args: argparse.Namespace) -> Prepared:
    """Load ``args.bundle``, create its module as the placement options ask and set every
    input.

    Raises:
        UsageError: an input or a device type given twice.
        BundleError, DeviceError, PlacementError: as load_bundle and Bundle.create.
        InputError: an input file that cannot be read, an unknown input name, a shape or dtype
            that does not fit.
    """
    files: dict[str, str] = pairs_to_dict(args.inputs, "--input")
    placement = placement_of(args)
    bundle = open_bundle(args.bundle)
    unknown = sorted(set(files) - set(bundle.graph.input_names))
    if unknown:
        raise InputError(f"--input {unknown[0]!r} is not an input of the bundle (its inputs: "
                         f"{', '.join(spec.name for spec in bundle.inputs) or 'none'})")
    given = read_inputs(files)
    module = bundle.create(*placement.devices, **placement.create_options())
    rng = np.random.default_rng(args.seed)
    values, origins = {}, {}
    planned = _planned_shapes(bundle)
    for spec in bundle.inputs:
        if spec.name not in given:
            values[spec.name] = random_input(spec, rng, planned[spec.name])
            origins[spec.name] = f"random (seed {args.seed})"
    for name, path in files.items():
        values[name], origins[name] = given[name], f"from {path}"
    for name, value in values.items():
        module.set_input(name, value)
    return Prepared(bundle, module, values, origins)
