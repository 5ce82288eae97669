"""``load_bundle`` and ``Bundle``: a verified bundle, ready to create modules from.

Loading never executes anything from the bundle: the graph and the lib are JSON (the lib's
functions are sequences of graphrt's standard ops), the params are safetensors (bytes with a
JSON header). The order is: list the members and refuse unsafe ones, parse the manifest, check
every member's size and SHA-256 against it, and only then parse the graph, the lib and the
params header, and check that they agree with each other and with the manifest.

This package sits above the executor (``Bundle.create`` builds a module); nothing below
imports it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np
from pydantic import JsonValue

from ..devices import Device, cpu
from ..errors import ArgumentError, BundleError, GraphrtError, KernelNotFoundError, describe
from ..executor import CompiledGraph, GraphModule, compile_graph, create
from ..lib import Library, LibrarySource
from ..schema import Graph, load_graph
from .archive import ArchiveReader, open_archive
from .interface import (
    check_external_kernels,
    check_interface,
    check_params_fit,
    check_params_listed,
)
from .manifest import Manifest, MemberDigest, TensorSpec, parse_manifest
from .members import GRAPH, LIB, MANIFEST, PARAMS, BundleLimits
from .safetensors import read_safetensors_header, tensor_view, write_safetensors
from .save import BundleParts, _archive_kind, write_parts
from .writer import ArchiveKind, HashingWriter

__all__ = ["Bundle", "bundle_from_parts", "load_bundle"]

Array = np.ndarray[Any, Any]
T = TypeVar("T")
_CREATE_OPTIONS = ("strict_placement", "device_map", "require_inputs", "inter_op_threads",
                   "cuda_graph", "threads")
"""The keyword options of :func:`graphrt.create` that :meth:`Bundle.create` passes on."""


@dataclass(frozen=True, eq=False)
class Bundle:
    """A loaded, verified bundle: its graph, declarative lib, params and manifest.

    The params are read-only arrays mapped from the bundle file; :meth:`create` copies them
    into each module it makes, so one bundle can create any number of modules.

    Attributes:
        path: where the bundle was loaded from.
        kind: ``"directory"``, ``"zip"``, or ``"memory"`` for a bundle made in this process
            (by :func:`graphrt.from_onnx`) and not yet saved.
        manifest: the parsed ``manifest.json``.
        digest: SHA-256 of ``manifest.json``, which pins every member (it lists their
            checksums): the bundle's identity.
        graph: the checked graph.
        lib: the declarative functions of ``lib.json``.
        params: name → read-only array, in graph input order.

    Example:
        >>> import graphrt
        >>> bundle = graphrt.load_bundle("examples/bundles/mlp")  # doctest: +SKIP
        >>> mod = bundle.create(graphrt.cpu(0))  # doctest: +SKIP
        >>> (probs,) = mod(x=x)  # doctest: +SKIP
    """

    path: Path
    kind: str
    manifest: Manifest
    digest: str
    graph: Graph
    lib: Library
    params: Mapping[str, Array]
    documents: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    """The verified bytes of ``graph.json`` and ``lib.json``, as read or made."""

    @property
    def metadata(self) -> Mapping[str, JsonValue]:
        """The free-form metadata saved with the bundle (model name, source, ...)."""
        return MappingProxyType(self.manifest.metadata)

    @property
    def inputs(self) -> list[TensorSpec]:
        """The inputs a caller sets (graph inputs that are not params)."""
        return list(self.manifest.inputs)

    @property
    def outputs(self) -> list[TensorSpec]:
        """The graph outputs, in order."""
        return list(self.manifest.outputs)

    @property
    def external_kernels(self) -> list[str]:
        """func_names the loading program must supply (``create(..., lib=...)``)."""
        return list(self.manifest.external_kernels)

    def create(self, *devices: Device | str, lib: LibrarySource | None = None,
               **options: Any) -> GraphModule:
        """A module of this bundle's graph on ``devices``, with its params loaded.

        Args:
            *devices: as :func:`graphrt.create` (``devices[0]`` is the fallback).
            lib: kernels to add to the bundle's lib (a Library or a mapping): the external
                kernels the bundle needs, or replacements (a Python kernel wins over a
                declarative function of the same name).
            **options: passed to :func:`graphrt.create` (``strict_placement=True``, ...).

        Raises:
            ArgumentError: ``lib`` is not a Library or a mapping of names to kernels, or an
                unknown option.
            BundleError: a kernel the bundle needs was not supplied (naming it and the node;
                the :class:`KernelNotFoundError` is chained).
            PlacementError, DeviceError: as :func:`graphrt.create`.

        Example:
            >>> mod = bundle.create(graphrt.cpu(0), lib={"my_op": my_op})  # doctest: +SKIP
        """
        unknown = sorted(set(options) - set(_CREATE_OPTIONS))
        if unknown:
            raise ArgumentError(f"Bundle.create: unknown option {describe(unknown[0])}; the "
                                f"options are {', '.join(_CREATE_OPTIONS)}")
        library = self.lib if lib is None else self.lib.merged(lib)
        try:
            module = create(self.graph, library, *devices, **options)
        except KernelNotFoundError as err:
            raise BundleError(
                f"bundle {self.path}: {err}. A bundle holds no Python code: pass the kernels it "
                f"needs with bundle.create(..., lib={{name: kernel}}) (its external kernels: "
                f"{', '.join(self.external_kernels) or 'none'})") from err
        module.load_params(self.params)
        return module

    def save(self, path: str | os.PathLike[str], *, archive: ArchiveKind | None = None,
             overwrite: bool = False) -> Path:
        """Write this bundle (a directory, or a zip when ``path`` ends in ``.grb``/``.zip``).

        Example:
            >>> graphrt.from_onnx("model.onnx").save("model.grb")  # doctest: +SKIP
            PosixPath('model.grb')
        """
        if not isinstance(path, str | os.PathLike):
            raise ArgumentError(f"Bundle.save(path): expected a path (str or os.PathLike), "
                                f"given {describe(path)}")
        target = Path(path)
        parts = BundleParts(self.documents[GRAPH], self.documents[LIB], self.graph, self.lib,
                            dict(self.params), self.manifest)
        write_parts(target, _archive_kind(target, archive), parts, overwrite=overwrite)
        return target

    def compile_on_host(self) -> CompiledGraph:
        """The bundle compiled for the host, allocating nothing: every declarative function
        type-checked and lowered for the nodes that use it, its scratch planned. External
        kernels are code the loading program supplies, so stand-ins take their place.

        Raises:
            BundleError: a function that does not fit a node that uses it, naming ``lib.json``.
        """
        stand_ins = {name: _supplied_later for name in self.external_kernels}
        return _parse(LIB, lambda: compile_graph(self.graph, self.lib.merged(stand_ins),
                                                 (cpu(0),)))

    def check_functions(self) -> int:
        """Type-check the lib against the graph as ``create()`` would, without creating.

        Every node whose func_name the lib defines declaratively has that function's types
        inferred for its inputs and compared with its outputs, on the host (the graph's own
        storage is not allocated). External kernels are code the loading program supplies, so
        they are not checked here.

        Returns:
            The number of nodes checked.

        Raises:
            BundleError: a function that does not fit a node that uses it, naming ``lib.json``,
                the function, the step and the node.

        Example:
            >>> load_bundle("examples/bundles/mlp").check_functions()  # doctest: +SKIP
            3
        """
        self.compile_on_host()
        functions = self.lib.spec().functions
        return sum(node.func_name in functions for node in self.graph.nodes)

    def describe(self) -> dict[str, Any]:
        """The bundle as plain data (what ``graphrt inspect --json`` prints under ``bundle``).

        Example:
            >>> load_bundle("examples/bundles/cnn.grb").describe()["kind"]  # doctest: +SKIP
            'zip'
        """
        manifest = self.manifest
        return {
            "path": str(self.path), "kind": self.kind, "digest": self.digest,
            "format_version": manifest.format_version,
            "graphrt_version": manifest.graphrt_version,
            "members": {name: digest.model_dump() for name, digest in manifest.members.items()},
            "params": {"count": len(self.params),
                       "bytes": sum(array.nbytes for array in self.params.values())},
            "device_types": list(manifest.device_types),
            "external_kernels": list(manifest.external_kernels),
            "metadata": dict(manifest.metadata),
        }

    def __repr__(self) -> str:
        return (f"<Bundle {self.path} ({self.kind}): {len(self.manifest.inputs)} inputs, "
                f"{len(self.params)} params, {len(self.manifest.outputs)} outputs>")


def _supplied_later(*arrays: Any) -> None:
    """Stands in for an external kernel while the lib is checked (never called)."""


def _check_members(manifest: Manifest, archive: ArchiveReader) -> None:
    """The manifest lists every other member with the size the archive has."""
    for name in (GRAPH, LIB, PARAMS):
        listed = manifest.members.get(name)
        if listed is None:
            raise BundleError(f"member {name!r} is not listed in {MANIFEST}, so it cannot be "
                              "verified")
        size = archive.members[name].size
        if listed.size != size:
            raise BundleError(f"member {name!r} is {size:,} bytes but {MANIFEST} says "
                              f"{listed.size:,} (truncated or modified)")
    extra = sorted(set(manifest.members) - {GRAPH, LIB, PARAMS})
    if extra:
        raise BundleError(f"{MANIFEST} lists member {extra[0]!r}, which this bundle format "
                          "does not have")


def _verify(manifest: Manifest, name: str, sha256: str) -> None:
    expected = manifest.members[name].sha256
    if sha256 != expected:
        raise BundleError(f"member {name!r} fails its checksum: sha256 is {sha256}, "
                          f"{MANIFEST} says {expected} (modified or corrupted)")


def _parse(name: str, parse: Callable[[], T]) -> T:
    """Run a parser on a verified member, naming the member in any error."""
    try:
        return parse()
    except BundleError:
        raise
    except GraphrtError as err:
        raise BundleError(f"member {name!r}: {err}") from err


def load_bundle(path: str | os.PathLike[str], *, limits: BundleLimits | None = None) -> Bundle:
    """Load and verify a bundle (a directory or a single zip file); nothing in it is executed.

    Every member's size and SHA-256 are checked against the manifest before anything is
    parsed. The params are mapped (``mmap``), not read: each array is a read-only view of the
    file, so a large bundle is not held in memory twice. Don't modify a bundle in place while
    it is loaded (``save_bundle`` replaces files by renaming, which is safe).

    Args:
        path: the bundle directory or file.
        limits: size limits per member and in total (:class:`BundleLimits`).

    Raises:
        BundleError: naming the member and what is wrong with it: unsafe or unexpected
            members, a missing one, sizes over the limits, a checksum mismatch, an unsupported
            format version, a malformed graph, lib or params file, an op the standard set
            lacks, params or a manifest that disagree with the graph.

    Example:
        >>> import graphrt
        >>> bundle = graphrt.load_bundle("examples/bundles/cnn.grb")  # doctest: +SKIP
        >>> bundle.metadata["model"]  # doctest: +SKIP
        'cnn'
    """
    with open_archive(path, limits) as archive:
        raw_manifest = archive.read(MANIFEST)
        manifest = parse_manifest(raw_manifest)
        _check_members(manifest, archive)
        documents = {name: archive.read(name) for name in (GRAPH, LIB)}
        for name, content in documents.items():
            _verify(manifest, name, hashlib.sha256(content).hexdigest())
        _verify(manifest, PARAMS, archive.digest(PARAMS))
        mapped = archive.map(PARAMS)
        kind = archive.kind
    # Everything below reads verified bytes only.
    graph = _parse(GRAPH, lambda: load_graph(documents[GRAPH]))
    lib = _parse(LIB, lambda: Library.from_json(documents[LIB]))
    tensors, _ = read_safetensors_header(mapped, PARAMS)
    check_interface(manifest, graph, GRAPH)
    check_params_fit(graph, {name: (info.shape, info.dtype.name)
                             for name, info in tensors.items()}, PARAMS)
    check_params_listed(manifest, tensors)
    check_external_kernels(manifest, graph, lib.spec().functions)
    params = {spec.name: tensor_view(mapped, tensors[spec.name]) for spec in manifest.params}
    return Bundle(Path(path), kind, manifest, hashlib.sha256(raw_manifest).hexdigest(), graph,
                  lib, MappingProxyType(params), MappingProxyType(documents))


class _Discard:
    def write(self, data: bytes | memoryview, /) -> int:
        return memoryview(data).nbytes


def bundle_from_parts(parts: BundleParts, label: str = "<memory>") -> Bundle:
    """A bundle held in memory: the members :func:`prepare_bundle` checked, with the manifest
    (and so the digest) that saving them would write.

    Example:
        >>> from graphrt.bundle.save import prepare_bundle
        >>> parts = prepare_bundle("examples/models/mlp/graph.json",
        ...                        "examples/models/mlp/lib.json")
        >>> bundle_from_parts(parts).kind
        'memory'
    """
    params = HashingWriter(_Discard())  # type: ignore[arg-type]
    write_safetensors(params, parts.tensors, {"format": "graphrt.params"})
    digests = {GRAPH: _digest(parts.graph_bytes), LIB: _digest(parts.lib_bytes),
               PARAMS: params.digest()}
    manifest = parts.manifest.model_copy(update={"members": digests})
    raw_manifest = manifest.to_json()
    tensors = {name: array.view() for name, array in parts.tensors.items()}
    for array in tensors.values():
        array.flags.writeable = False
    return Bundle(Path(label), "memory", manifest, hashlib.sha256(raw_manifest).hexdigest(),
                  parts.graph, parts.library, MappingProxyType(tensors),
                  MappingProxyType({GRAPH: parts.graph_bytes, LIB: parts.lib_bytes}))


def _digest(content: bytes) -> MemberDigest:
    return MemberDigest(size=len(content), sha256=hashlib.sha256(content).hexdigest())
