"""What the ``graphrt`` commands share: the graph argument, the placement options (devices,
device map, strict placement), loading a graph or a bundle, and planning it without allocating.

A command line that cannot mean anything (a device that does not parse, an option given twice)
is a :class:`UsageError`, or an :class:`argparse.ArgumentTypeError` where argparse reads the
value: both exit with status 2 and the usage, as argparse's own errors do.

Example:
    >>> parser = argparse.ArgumentParser()
    >>> add_graph_argument(parser)
    >>> add_placement_options(parser)
    >>> args = parser.parse_args(["g.json", "--device", "cpu", "--device-map", "cuda=sim:0"])
    >>> placement_of(args).devices
    (graphrt.device('cpu:0'), graphrt.device('sim:0'))
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from tokenize import TokenError
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy_format

from ..bundle import MANIFEST, MEMBERS, Bundle, is_zip, load_bundle
from ..devices import CPU, SIM, Device, cpu, host_memory_limit, parse_device_map
from ..devices.base import KIND_CODES
from ..errors import BundleError, DeviceError, GraphrtError, InputError, describe
from ..executor import compile_graph, scratch_needs
from ..files import open_regular
from ..lib import Library
from ..schema import Graph, load_graph, shape_problem
from ..storage import StoragePlan, check_capacity, plan_storage, with_scratch

__all__ = [
    "DEFAULT_DEVICES",
    "Placement",
    "Source",
    "UsageError",
    "add_graph_argument",
    "add_lib_option",
    "add_placement_options",
    "device_argument",
    "device_map_argument",
    "host_capacity",
    "is_bundle_path",
    "load_source",
    "lowering_on_host",
    "open_bundle",
    "pairs_to_dict",
    "parse_count",
    "parse_device",
    "parse_devices",
    "placement_of",
    "plan_source",
    "read_npy",
    "read_npy_stream",
]

DEFAULT_DEVICES = ("cpu",)
_COUNT = re.compile(r"[0-9]{1,18}", re.ASCII)
"""A count typed on the command line: ASCII digits only (``int()`` also takes Arabic-Indic and
full-width digits, ``" 3"`` and ``"1_0"``), small enough for any size."""
_ZIP_MAGIC = b"PK\x03\x04"
Array = np.ndarray[Any, Any]


class UsageError(Exception):
    """A command line that cannot mean anything; ``main`` prints it with the command's usage
    and exits with status 2 (it is not a :class:`graphrt.GraphrtError`: nothing was wrong
    with the graph, the bundle or the devices)."""


# --- numbers and arrays ----------------------------------------------------------------------


def parse_count(text: str) -> int | None:
    """A non-negative integer written in ASCII digits (at most 18), or None.

    Example:
        >>> parse_count("12"), parse_count("١٢"), parse_count("-1"), parse_count("9" * 40)
        (12, None, None, None)
    """
    return int(text) if _COUNT.fullmatch(text) else None


_DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{0,12})?|\.[0-9]{1,12}", re.ASCII)
"""A number of milliseconds in ASCII digits (``float()`` takes any Unicode digit, "inf", "1_0")."""


def positive_argument(text: str) -> int:
    """argparse type of a count that must be at least 1.

    Example:
        >>> positive_argument("3")
        3
    """
    value = parse_count(text)
    if not value:
        raise argparse.ArgumentTypeError(f"must be a positive integer, given {text!r}")
    return value


def milliseconds_argument(text: str) -> float:
    """argparse type of a duration in milliseconds (ASCII digits, finite, >= 0).

    Example:
        >>> milliseconds_argument("2.5")
        2.5
    """
    value = float(text) if _DECIMAL.fullmatch(text) else -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of milliseconds >= 0, "
                                         f"given {text!r}")
    return value


def dim_bound(text: str) -> tuple[str, int]:
    """argparse type of ``--dim NAME=BOUND`` (a symbolic dimension and its largest size).

    Example:
        >>> dim_bound("batch=64")
        ('batch', 64)
    """
    name, equals, value = text.partition("=")
    bound = parse_count(value.strip())
    if not (name.strip() and equals and bound):
        raise argparse.ArgumentTypeError(f"expected NAME=BOUND (the largest size, a positive "
                                         f"integer), given {text!r}")
    return name.strip(), bound


def read_npy(path: str, label: str) -> Array:
    """One ``.npy`` array from a regular file, checked before any data is read.

    Raises:
        InputError: a FIFO or device, an unreadable or malformed file, an object (pickle)
            dtype, a shape numpy cannot hold, or a size that does not match the header;
            the message starts with ``label`` and names the file.

    Example:
        >>> read_npy("x.npy", "--input x").shape  # doctest: +SKIP
        (8, 64)
    """
    shown = describe(path, 200)
    with open_regular(path, ".npy", InputError, prefix=f"{label}: cannot read {shown}") as file:
        if file.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC:
            raise InputError(f"{label}: {shown} is an .npz archive; give one .npy array per "
                             "input")
        file.seek(0)
        size = os.fstat(file.fileno()).st_size
        return read_npy_stream(file, size, f"{label}: cannot read {shown}", InputError)


def read_npy_stream(stream: IO[bytes], size: int, prefix: str,
                    error: type[GraphrtError]) -> Array:
    """One ``.npy`` array of ``size`` bytes from ``stream`` (a file, a ``.npz`` member).

    The header is read with numpy's own parser (no pickle, no code), then its dtype (no
    object), its shape (:func:`graphrt.schema.shape_problem`) and the byte count it promises
    are checked against ``size`` before the data is read, so a tiny file claiming a huge
    shape allocates nothing.

    Raises:
        error: ``"<prefix>: ..."`` saying what is wrong.
    """
    try:
        version = npy_format.read_magic(stream)
        if version == (1, 0):
            header = npy_format.read_array_header_1_0(stream)
        elif version == (2, 0):
            header = npy_format.read_array_header_2_0(stream)
        else:
            raise ValueError(f".npy format version {version} is not supported (1.0 or 2.0)")
        shape, fortran, dtype = header
        data_start = stream.tell()
    except (ValueError, OSError, EOFError, SyntaxError, TypeError, TokenError) as err:
        # numpy's legacy header filter tokenizes the header: a cut one is a TokenError
        raise error(f"{prefix}: not a .npy array ({str(err)[:200]})") from None
    if dtype.hasobject:
        raise error(f"{prefix}: it holds Python objects (dtype "
                    f"{describe(str(dtype))}), which would need pickle; only plain arrays are "
                    "read")
    problem = shape_problem(shape, dtype.itemsize)
    if problem is not None:
        raise error(f"{prefix}: {problem}")
    nbytes = prod(shape) * dtype.itemsize
    if size - data_start != nbytes:
        raise error(f"{prefix}: it holds {max(size - data_start, 0):,} bytes of "
                    f"data but its header promises {nbytes:,} ({dtype}{list(shape)})")
    buffer = bytearray(nbytes)
    try:
        count = stream.readinto(buffer) if nbytes else 0  # type: ignore[attr-defined]
    except (OSError, ValueError, EOFError) as err:
        raise error(f"{prefix}: {str(err)[:200]}") from None
    if count != nbytes:
        raise error(f"{prefix}: truncated, {count:,} of {nbytes:,} bytes of data")
    array = np.frombuffer(buffer, dtype=dtype)
    return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)


# --- devices ---------------------------------------------------------------------------------


def parse_device(text: str, option: str = "--device") -> Device:
    """Read ``KIND[:N]`` as a device without checking that it exists (nothing is allocated).

    Args:
        text: the device as typed.
        option: the option it was given with, for the message.

    Raises:
        DeviceError: an unknown kind or an ordinal that is not a non-negative integer.

    Example:
        >>> parse_device("cuda:1")
        graphrt.device('cuda:1')
    """
    kind, colon, ordinal = text.strip().lower().partition(":")
    if kind not in KIND_CODES:
        raise DeviceError(f"unknown device kind {kind!r} in {option} {text!r} "
                          f"(known: {', '.join(KIND_CODES)}; written KIND or KIND:N)")
    number = parse_count(ordinal) if colon else 0
    if number is None:
        raise DeviceError(f"device ordinal in {option} {describe(text)} must be a non-negative "
                          f"integer (written KIND or KIND:N, e.g. {kind}:0)")
    return Device(KIND_CODES[kind], number)


def parse_devices(texts: Sequence[str] | None) -> tuple[Device, ...]:
    """The devices of ``--device`` options, in order; just ``cpu:0`` when none was given.

    Example:
        >>> parse_devices(["cpu", "sim:1"])
        (graphrt.device('cpu:0'), graphrt.device('sim:1'))
    """
    return tuple(parse_device(text) for text in (texts or DEFAULT_DEVICES))


def device_argument(text: str) -> Device:
    """argparse type of ``--device``: a bad device is a usage error (status 2).

    Example:
        >>> device_argument("sim:1")
        graphrt.device('sim:1')
    """
    try:
        return parse_device(text)
    except DeviceError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def device_map_argument(text: str) -> tuple[int, Device]:
    """argparse type of ``--device-map KIND=DEVICE``: (device type code, device).

    ``KIND`` is a device kind (``cuda``) or a DLPack type code (``2``); ``DEVICE`` is
    ``KIND[:N]``, not opened.

    Example:
        >>> device_map_argument("cuda=sim:0")
        (2, graphrt.device('sim:0'))
    """
    kind, equals, target = text.partition("=")
    kind = kind.strip()
    if not (kind and equals and target.strip()):
        raise argparse.ArgumentTypeError(f"expected KIND=DEVICE (e.g. cuda=sim:0), given "
                                         f"{text!r}")
    code = parse_count(kind)
    key: str | int = kind if code is None else code
    try:
        ((code, dev),) = parse_device_map({key: parse_device(target, "--device-map")}).items()
    except DeviceError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return code, dev


def pairs_to_dict(pairs: Sequence[tuple[Any, Any]], option: str) -> dict[Any, Any]:
    """Repeated ``KEY=VALUE`` options as a dict, refusing a key given twice.

    Raises:
        UsageError: a key given twice.

    Example:
        >>> pairs_to_dict([("a", "1"), ("b", "2")], "--metadata")
        {'a': '1', 'b': '2'}
    """
    result: dict[Any, Any] = {}
    for key, value in pairs:
        if key in result:
            raise UsageError(f"{option} {key!r} is given twice")
        result[key] = value
    return result


def add_placement_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--device KIND[:N]`` (repeatable, default ``cpu``), ``--device-map KIND=DEVICE``
    (repeatable) and ``--strict-placement`` to a command.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_placement_options(parser)
        >>> parser.parse_args(["--device", "cpu", "--device", "cuda:1"]).devices
        [graphrt.device('cpu:0'), graphrt.device('cuda:1')]
    """
    parser.add_argument(
        "--device", dest="devices", action="append", type=device_argument, metavar="KIND[:N]",
        help="a device to place the graph on: cpu, cuda or sim, with an optional ordinal; "
             "repeat for several, the first being the fallback (default: cpu)")
    parser.add_argument(
        "--device-map", dest="device_map", action="append", default=[],
        type=device_map_argument, metavar="KIND=DEVICE",
        help="place what the graph puts on device kind KIND (cpu, cuda, sim or a type code) on "
             "DEVICE instead, e.g. cuda=sim:0; DEVICE joins the devices after the --device "
             "ones if it is not among them; repeatable")
    parser.add_argument(
        "--strict-placement", action="store_true",
        help="refuse to fall back: an entry on a device kind that was not given is an error")


@dataclass(frozen=True)
class Placement:
    """Where the command line asks to place a graph.

    Attributes:
        devices: the ``--device`` devices, then the mapped devices not among them; the first
            is the fallback.
        device_map: device type code -> device (``--device-map``).
        strict: ``--strict-placement``.
    """

    devices: tuple[Device, ...]
    device_map: Mapping[int, Device] = field(default_factory=dict)
    strict: bool = False

    def create_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`graphrt.create` (and ``Bundle.create``)."""
        return {"strict_placement": self.strict, "device_map": dict(self.device_map)}


def placement_of(args: argparse.Namespace) -> Placement:
    """The placement the parsed placement options ask for.

    Raises:
        UsageError: a device type mapped twice.
    """
    given = tuple(args.devices) if args.devices else parse_devices(None)
    remap: dict[int, Device] = pairs_to_dict(args.device_map, "--device-map of device type")
    added = tuple(dict.fromkeys(dev for dev in remap.values() if dev not in given))
    return Placement(given + added, remap, bool(args.strict_placement))


def host_capacity(devices: Sequence[Device]) -> dict[Device, int | None]:
    """What host-memory devices can hold (what this process may still allocate); other devices
    are not asked (they may be absent).

    Example:
        >>> list(host_capacity([cpu(0), Device(2, 0)]))
        [graphrt.device('cpu:0')]
    """
    host = host_memory_limit()
    return {dev: host for dev in devices if dev.type_code in (CPU, SIM)}


# --- graphs, bundles and libs ----------------------------------------------------------------


def add_graph_argument(parser: argparse.ArgumentParser) -> None:
    """Add the positional ``GRAPH`` argument (a graph JSON file or a bundle) to a command.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_graph_argument(parser)
        >>> parser.parse_args(["g.json"]).graph
        'g.json'
    """
    parser.add_argument("graph", metavar="GRAPH",
                        help="graph JSON file, or a bundle (directory or single file)")


def add_lib_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--lib LIB.json``: the declarative lib of a graph JSON file (a bundle has its own).

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_lib_option(parser)
        >>> parser.parse_args(["--lib", "lib.json"]).lib
        'lib.json'
    """
    parser.add_argument(
        "--lib", metavar="LIB.json",
        help="for a graph JSON file: its declarative lib; every func_name must be defined, "
             "every function type-checks against its nodes, and its intermediates (scratch) "
             "are planned and counted")


def is_bundle_path(path: str | Path) -> bool:
    """Whether ``path`` is to be read as a bundle: a directory or a zip file.

    Example:
        >>> is_bundle_path("examples/graphs/duplex.json")
        False
    """
    where = Path(path)
    return where.is_dir() or is_zip(where)


def open_bundle(path: str | Path) -> Bundle:
    """:func:`graphrt.load_bundle`, saying plainly that a directory without a manifest is not
    a bundle (rather than naming the first of its files that a bundle cannot hold).

    Raises:
        BundleError: as load_bundle.

    Example:
        >>> open_bundle("examples/bundles/mlp").metadata["model"]  # doctest: +SKIP
        'mlp'
    """
    where = Path(path)
    if where.is_dir() and not (where / MANIFEST).is_file():
        raise BundleError(f"not a bundle: no {MANIFEST} in {where} (a bundle directory holds "
                          f"{', '.join(MEMBERS)})")
    return load_bundle(where)


@contextmanager
def lowering_on_host() -> Iterator[None]:
    """Quiet graphrt's log while a graph is compiled on the host only to check its lib: that
    compilation falls back for every accelerator entry, which says nothing about the plan the
    command reports (whose fallbacks the command reports itself)."""
    logger = logging.getLogger("graphrt")

    def drop(record: logging.LogRecord) -> bool:
        return False

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


@dataclass(frozen=True)
class Source:
    """What a command was given: a graph, the bundle it came from (None for a JSON file), and
    the lib given with ``--lib`` (None when none was)."""

    graph: Graph
    bundle: Bundle | None = None
    library: Library | None = None

    def scratch_plan(self, plan: StoragePlan) -> StoragePlan:
        """``plan`` with the intermediates of the lib's functions laid out, the lib being
        checked against the graph on the way (lowered on the host: nothing is allocated and
        no GPU is needed); ``plan`` itself when no lib is known.

        Raises:
            BundleError: a bundle's function that does not fit a node.
            KernelNotFoundError, GraphFormatError: a ``--lib`` that lacks a func_name the
                graph uses, or whose function does not fit a node.
        """
        with lowering_on_host():
            if self.bundle is not None:
                compiled = self.bundle.compile_on_host()
            elif self.library is not None:
                compiled = compile_graph(self.graph, self.library, (cpu(0),))
            else:
                return plan
        return with_scratch(plan, scratch_needs(compiled.programs))


def load_source(path: str, lib: str | None = None) -> Source:
    """Load a graph JSON file (with its ``--lib``), or a bundle (a directory or a zip file),
    verifying it.

    Raises:
        UsageError: a lib given with a bundle.
        GraphFormatError: a graph or lib file that cannot be read or is not valid.
        BundleError: a bundle that fails any check.

    Example:
        >>> load_source("examples/bundles/mlp").bundle.metadata["model"]  # doctest: +SKIP
        'mlp'
    """
    if is_bundle_path(path):
        if lib is not None:
            raise UsageError(f"--lib is for a graph JSON file; {path} is a bundle, which holds "
                             "its own lib")
        bundle = open_bundle(path)
        return Source(bundle.graph, bundle)
    graph = load_graph(Path(path))
    return Source(graph, library=None if lib is None else Library.from_json(Path(lib)))


def plan_source(args: argparse.Namespace) -> tuple[Source, StoragePlan]:
    """Load ``args.graph`` (a graph or a bundle) and plan it as the placement options ask,
    allocating nothing: a cuda device is planned for, not opened. A bundle's lib, or the
    ``--lib`` of a graph, is checked and its scratch planned; storage on cpu and sim is
    checked against the host's memory.

    Raises:
        UsageError: as :func:`placement_of` and :func:`load_source`.
        GraphFormatError, BundleError, PlacementError, KernelNotFoundError.

    Example:
        >>> from graphrt.cli import build_parser
        >>> args = build_parser().parse_args(["inspect", "examples/graphs/duplex.json"])
        >>> source, plan = plan_source(args)
        >>> len(plan.fallbacks)
        6
    """
    placement = placement_of(args)
    source = load_source(args.graph, getattr(args, "lib", None))
    plan = plan_storage(source.graph, placement.devices, strict=placement.strict,
                        device_map=placement.device_map)
    plan = source.scratch_plan(plan)
    check_capacity(source.graph, plan, host_capacity(plan.devices))
    return source, plan
