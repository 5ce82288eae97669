"""``graphrt run BUNDLE``: run a bundle once and show (and optionally save) its outputs.

Example:
    >>> from graphrt.cli import main
    >>> main(["run", "examples/bundles/mlp", "--output", "out"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..executor import GraphModule
from .prepare import add_bundle_arguments, prepare
from .summary import columns

__all__ = ["configure", "output_file_names", "run_command", "value_summary"]

Array = np.ndarray[Any, Any]
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def value_summary(array: Array) -> str:
    """A short summary of an output's values: min, mean and max (or counts for booleans).

    Example:
        >>> value_summary(np.array([1.0, 2.0, 6.0]))
        'min 1  mean 3  max 6'
        >>> value_summary(np.array([True, False, True]))
        '2 of 3 true'
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


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the bundle arguments (``BUNDLE``, placement, ``--input``, ``--seed``) and
    ``--output DIR``."""
    add_bundle_arguments(parser)
    parser.add_argument("--output", metavar="DIR",
                        help="write each output to DIR/<name>.npy (DIR is created)")


def run_command(args: argparse.Namespace) -> int:
    """``graphrt run BUNDLE [placement options] [--input NAME=FILE.npy ...] [--output DIR]``.

    Example:
        >>> from graphrt.cli import main
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
        (name, str(list(value.shape)), str(value.dtype), value_summary(value))
        for name, value in outputs])))
    print(f"ran in {elapsed * 1e3:.3f} ms (one run, the first)")
    if folder is not None:
        for (_, value), file_name in zip(outputs, output_file_names([n for n, _ in outputs]),
                                         strict=True):
            np.save(folder / file_name, value, allow_pickle=False)
            print(f"wrote {folder / file_name}")
    return 0
