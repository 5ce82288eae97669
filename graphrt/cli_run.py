"""``graphrt run BUNDLE``: run a bundle once and show (and optionally save) its outputs.

Inputs come from ``--input NAME=FILE.npy`` (read with ``allow_pickle=False``) or, for those not
given, are random of the right shape and dtype. The helpers here (the bundle argument, the
input options, preparing a module) are shared with ``graphrt bench``.

Example:
    >>> from graphrt.cli import main
    >>> main(["run", "examples/bundles/mlp", "--output", "out"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .bundle import Bundle, TensorSpec, load_bundle
from .cli import add_device_option, columns, command, parse_devices
from .errors import InputError
from .executor import GraphModule
from .schema import parse_dtype
from .schema.dtypes import BFLOAT, FLOAT

__all__ = [
    "Prepared",
    "add_bundle_arguments",
    "output_file_names",
    "prepare",
    "random_input",
    "read_inputs",
    "run_command",
    "summary",
]

Array = np.ndarray[Any, Any]
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def add_bundle_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``BUNDLE``, ``--device``, ``--input NAME=FILE.npy`` and ``--seed`` to a subcommand.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_bundle_arguments(parser)
        >>> parser.parse_args(["b.grb", "--input", "x=x.npy"]).inputs
        ['x=x.npy']
    """
    parser.add_argument("bundle", metavar="BUNDLE", help="bundle directory or single file")
    add_device_option(parser)
    parser.add_argument("--input", dest="inputs", action="append", default=[],
                        metavar="NAME=FILE.npy",
                        help="set an input from a .npy file; repeat for several (inputs not "
                             "given are random)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random inputs (default: 0)")


def read_inputs(options: Sequence[str]) -> dict[str, Array]:
    """The arrays of ``--input NAME=FILE.npy`` options (never unpickling anything).

    Raises:
        InputError: an option without ``=``, a name given twice, or a file that is not a
            ``.npy`` array.
    """
    arrays: dict[str, Array] = {}
    for option in options:
        name, equals, path = option.partition("=")
        if not (name and equals and path):
            raise InputError(f"--input takes NAME=FILE.npy, given {option!r}")
        if name in arrays:
            raise InputError(f"--input {name!r} is given twice")
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:
            raise InputError(f"--input {name}: cannot read {path!r} as a .npy array: {err}"
                             ) from None
        if not isinstance(loaded, np.ndarray):
            loaded.close()
            raise InputError(f"--input {name}: {path!r} is an .npz archive; give one .npy "
                             "array per input")
        arrays[name] = loaded
    return arrays


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


def prepare(args: argparse.Namespace) -> Prepared:
    """Load ``args.bundle``, create its module on ``args.devices`` and set every input.

    Raises:
        BundleError, DeviceError, PlacementError: as load_bundle and Bundle.create.
        InputError: an input file that cannot be read, an unknown input name, a shape or dtype
            that does not fit.
    """
    bundle = load_bundle(args.bundle)
    given = read_inputs(args.inputs)
    unknown = sorted(set(given) - set(bundle.graph.input_names))
    if unknown:
        raise InputError(f"--input {unknown[0]!r} is not an input of the bundle (its inputs: "
                         f"{', '.join(spec.name for spec in bundle.inputs) or 'none'})")
    module = bundle.create(*parse_devices(args.devices))
    rng = np.random.default_rng(args.seed)
    values, origins = {}, {}
    graph = bundle.graph
    planned = {name: graph.entries[graph.nodes[nid].outputs[0]].shape
               for nid, name in zip(graph.arg_nodes, graph.input_names, strict=True)}
    for spec in bundle.inputs:
        if spec.name not in given:
            values[spec.name] = random_input(spec, rng, planned[spec.name])
            origins[spec.name] = f"random (seed {args.seed})"
    for option in args.inputs:
        name, _, path = option.partition("=")
        values[name], origins[name] = given[name], f"from {path}"
    for name, value in values.items():
        module.set_input(name, value)
    return Prepared(bundle, module, values, origins)


def summary(array: Array) -> str:
    """A short summary of an output's values: min, mean and max (or counts for booleans).

    Example:
        >>> summary(np.array([1.0, 2.0, 6.0]))
        'min 1  mean 3  max 6'
    """
    if array.size == 0:
        return "empty"
    if array.dtype == np.bool_:
        return f"{int(array.sum())} of {array.size} true"
    values = array.astype(np.float64)
    finite = np.isfinite(values)
    text = ""
    if not finite.all():
        text = f"{int((~finite).sum())} not finite  "
        values = values[finite]
        if values.size == 0:
            return text.strip()
    return (text + f"min {values.min():.6g}  mean {values.mean():.6g}  "
            f"max {values.max():.6g}")


def output_file_names(names: Sequence[str]) -> list[str]:
    """A distinct, safe ``.npy`` file name for each output name.

    Output names come from the bundle's graph, so they are never trusted as paths: anything
    but letters, digits, ``_``, ``.`` and ``-`` becomes ``_``, leading dots are dropped, and
    names equal but for case get a suffix.

    Example:
        >>> output_file_names(["conv:0", "../../evil", "Conv:0"])
        ['conv_0.npy', 'evil.npy', 'Conv_0_1.npy']
    """
    used: set[str] = set()
    files = []
    for i, name in enumerate(names):
        stem = _UNSAFE.sub("_", name).lstrip("._")[:100] or f"output{i}"
        candidate, k = stem, 1
        while candidate.lower() in used:
            candidate, k = f"{stem}_{k}", k + 1
        used.add(candidate.lower())
        files.append(f"{candidate}.npy")
    return files


def _fetch_outputs(module: GraphModule) -> list[tuple[str, Array]]:
    """Every output copied to a host array (at the shape the run gave it)."""
    outputs = []
    for index, name in enumerate(module.graph.output_names):
        on_device = module.get_output(index)
        host = np.empty(on_device.shape, dtype=on_device.dtype)
        outputs.append((name, module.get_output(index, out=host)))
    return outputs


def _configure_run(parser: argparse.ArgumentParser) -> None:
    add_bundle_arguments(parser)
    parser.add_argument("--output", metavar="DIR",
                        help="write each output to DIR/<name>.npy (DIR is created)")


@command("run", "run a bundle once (random inputs unless given) and summarize its outputs",
         _configure_run)
def run_command(args: argparse.Namespace) -> int:
    """``graphrt run BUNDLE [--device ...] [--input NAME=FILE.npy ...] [--output DIR]``.

    Example:
        >>> main(["run", "examples/bundles/mlp", "--device", "sim"])  # doctest: +SKIP
        0
    """
    prepared = prepare(args)
    module, bundle = prepared.module, prepared.bundle
    folder = None if args.output is None else Path(args.output)
    if folder is not None:  # before running, so a folder that cannot be made fails fast
        folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    module.run()
    elapsed = time.perf_counter() - start
    outputs = _fetch_outputs(module)
    model = bundle.metadata.get("model")
    devices = ", ".join(str(dev) for dev in module.devices)
    print(f"bundle {bundle.path}{f' (model {model})' if model else ''} on {devices}")
    print(f"inputs: {len(prepared.values)}")
    if prepared.values:
        print("\n".join(columns([("name", "shape", "dtype", "source")] + [
            (name, str(list(value.shape)), str(value.dtype), prepared.origins[name])
            for name, value in prepared.values.items()])))
    print(f"outputs: {len(outputs)}")
    print("\n".join(columns([("name", "shape", "dtype", "values")] + [
        (name, str(list(value.shape)), str(value.dtype), summary(value))
        for name, value in outputs])))
    print(f"ran in {elapsed * 1e3:.3f} ms (one run, the first)")
    if folder is not None:
        for (_, value), file_name in zip(outputs, output_file_names([n for n, _ in outputs]),
                                         strict=True):
            np.save(folder / file_name, value, allow_pickle=False)
            print(f"wrote {folder / file_name}")
    return 0
