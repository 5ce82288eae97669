"""``save_bundle``: write a graph, its declarative lib and its params as one deployable bundle."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np
import orjson
from pydantic import ValidationError

from .._version import __version__
from ..errors import BundleError, describe, expect_type
from ..files import read_regular
from ..jsondoc import describe_validation_error, read_source
from ..lib import Library, LibrarySource, LibrarySpec, as_library
from ..params import LIST_MAGIC, iter_params, to_host
from ..schema import Graph, GraphSpec, load_graph
from .interface import check_params_fit, device_types, external_kernels, interface
from .manifest import FORMAT, FORMAT_VERSION, Manifest, MemberDigest
from .members import GRAPH, LIB, PARAMS
from .safetensors import BinaryWriter, read_safetensors, write_safetensors
from .writer import ArchiveKind, write_archive

__all__ = ["BundleParts", "GraphDocument", "LibDocument", "ParamsSource", "prepare_bundle",
           "save_bundle", "write_parts"]

GraphDocument = Union[str, bytes, bytearray, "os.PathLike[str]", dict[str, Any], GraphSpec]
"""Graph JSON as text, bytes, a path, a dict or a parsed ``GraphSpec`` (not a built Graph)."""

LibDocument = Union[LibrarySource, str, bytes, "os.PathLike[str]", None]
"""A Library, a mapping of kernels, a lib JSON document (text, bytes, path), or None."""

ParamsSource = Union[Mapping[str, Any], bytes, bytearray, memoryview, str, "os.PathLike[str]",
                     None]
"""Params: name → array, a TVM params blob (bytes), or the path of a params blob or a
safetensors file."""

Array = np.ndarray[Any, Any]
_ZIP_SUFFIXES = (".grb", ".zip")


def _graph_bytes(graph: GraphDocument) -> bytes:
    """The graph JSON to store: the caller's own bytes when there are any."""
    if isinstance(graph, Graph):
        raise BundleError("save_bundle() needs the graph JSON (text, bytes, path or dict), not "
                          "a built graphrt.Graph: pass what you gave graphrt.create()")
    if isinstance(graph, GraphSpec):
        return graph.model_dump_json(exclude_unset=True).encode("utf-8")
    if isinstance(graph, dict):
        return orjson.dumps(graph)
    if isinstance(graph, bytes | bytearray):
        return bytes(graph)
    raw = read_source(graph, "graph", BundleError, name="save_bundle(graph)")
    if isinstance(raw, dict):
        return orjson.dumps(raw)
    return raw.encode("utf-8") if isinstance(raw, str) else raw


def _library(lib: LibDocument) -> Library:
    if lib is None:
        return Library()
    if isinstance(lib, str | bytes | os.PathLike):
        return Library.from_json(lib)
    expect_type(lib, (Library, Mapping), name="save_bundle(lib)",
                expected="a graphrt.Library, a mapping of kernels, a lib JSON document or None")
    return as_library(lib)


def _lib_bytes(library: Library, graph: Graph) -> tuple[bytes, list[str]]:
    """The lib document of the declarative functions the graph uses, and the external names."""
    functions = library.spec().functions
    used = {node.func_name for node in graph.nodes}
    spec = LibrarySpec(functions={name: fn for name, fn in functions.items() if name in used})
    document = orjson.dumps(spec.model_dump(mode="json"), option=orjson.OPT_INDENT_2)
    return document, external_kernels(graph, functions)


def _read_params_file(path: str | os.PathLike[str]) -> dict[str, Array]:
    data = read_regular(path, "params", BundleError)
    if data[:8] == LIST_MAGIC.to_bytes(8, "little"):
        return dict(iter_params(data))
    return read_safetensors(memoryview(data), f"params file {describe(os.fspath(path), 200)}")


def _params(params: ParamsSource) -> dict[str, Array]:
    """The params as host arrays (views where possible; nothing is copied twice)."""
    if params is None:
        return {}
    if isinstance(params, bytes | bytearray | memoryview):
        return dict(iter_params(params))
    if isinstance(params, str | os.PathLike):
        return _read_params_file(params)
    expect_type(params, Mapping, name="save_bundle(params)", expected="a mapping of names to "
                "arrays, a TVM params blob, a path or None")
    for name in params:
        expect_type(name, str, name="save_bundle(params)", expected="param names that are str")
    return {name: to_host(name, value) for name, value in params.items()}


def _manifest(graph: Graph, tensors: Mapping[str, Array], external: list[str],
              metadata: Mapping[str, Any] | None) -> Manifest:
    inputs, params, outputs = interface(graph, set(tensors))
    try:
        manifest = Manifest.model_validate({
            "format": FORMAT, "format_version": FORMAT_VERSION, "graphrt_version": __version__,
            "members": {}, "inputs": inputs, "params": params, "outputs": outputs,
            "device_types": device_types(graph), "external_kernels": external,
            "metadata": dict(metadata or {})})
        manifest.to_json()  # NaN and infinities pass the model but are not JSON
    except ValidationError as err:
        where = ".".join(map(str, err.errors()[0]["loc"]))
        hint = (" (metadata must be a JSON object: str keys; str, number, bool, null, list or "
                "object values)" if where.startswith("metadata") else "")
        problems = describe_validation_error(err, "manifest", limit=1)
        raise BundleError(f"the manifest cannot hold {problems}{hint}") from None
    except ValueError as err:  # after ValidationError, which is one
        raise BundleError(f"metadata must be a JSON object: {err}") from None
    return manifest


def _archive_kind(target: Path, archive: ArchiveKind | None) -> ArchiveKind:
    expect_type(archive, (str, type(None)), name="save_bundle(archive)",
                expected="'directory', 'zip' or None")
    if archive is None:
        return "zip" if target.suffix.lower() in _ZIP_SUFFIXES else "directory"
    if archive not in ("directory", "zip"):
        raise BundleError(f"archive must be 'directory' or 'zip', given {archive!r}")
    return archive


def save_bundle(path: str | os.PathLike[str], graph: GraphDocument, lib: LibDocument = None,
                params: ParamsSource = None, metadata: Mapping[str, Any] | None = None, *,
                archive: ArchiveKind | None = None, overwrite: bool = False) -> Path:
    """Write a deployable bundle: graph JSON, the declarative lib, params and a manifest.

    The graph is checked, every param must be a graph input of the same shape and dtype, and
    the bundle is written atomically (to a temporary name beside ``path``, then renamed).
    Python kernels cannot be saved: the func_names that only they provide are listed in the
    manifest as external kernels, which ``bundle.create(..., lib=...)`` must supply. Only the
    declarative functions the graph uses are stored.

    Args:
        path: the bundle to create: a directory, or a single zip file when ``path`` ends in
            ``.grb`` or ``.zip`` (or as ``archive`` says).
        graph: graph JSON (text, bytes, path, dict).
        lib: a :class:`graphrt.Library`, a mapping of kernels, a lib JSON document, or None.
        params: name → array (numpy, cupy, anything with ``__dlpack__``), a TVM params blob,
            or the path of a TVM params file or a safetensors file. Graph inputs that are not
            params are the bundle's inputs.
        metadata: free-form JSON object stored in the manifest (model name, source, ...).
        archive: ``"directory"`` or ``"zip"``, overriding the choice by suffix.
        overwrite: replace an existing bundle at ``path`` (never anything that is not one).

    Returns:
        The path written.

    Raises:
        GraphFormatError: the graph, the lib or a params blob is malformed.
        BundleError: a param that is not a graph input or does not fit it, metadata that is
            not JSON, ``path`` exists, or the bundle cannot be written.

    Example:
        >>> import graphrt
        >>> graphrt.save_bundle("mlp.grb", "examples/models/mlp/graph.json",  # doctest: +SKIP
        ...                     "examples/models/mlp/lib.json", weights,
        ...                     metadata={"model": "mlp"})
        PosixPath('mlp.grb')
    """
    expect_type(path, (str, os.PathLike), name="save_bundle(path)",
                expected="a path (str or os.PathLike)")
    expect_type(overwrite, bool, name="save_bundle(overwrite)", expected="a bool")
    target = Path(path)
    kind = _archive_kind(target, archive)
    parts = prepare_bundle(graph, lib, params, metadata)
    write_parts(target, kind, parts, overwrite=overwrite)
    return target


@dataclass(frozen=True)
class BundleParts:
    """What a bundle holds, checked and serialized, before it is written anywhere."""

    graph_bytes: bytes
    lib_bytes: bytes
    graph: Graph
    library: Library
    tensors: dict[str, Array]
    manifest: Manifest


def prepare_bundle(graph: GraphDocument, lib: LibDocument = None, params: ParamsSource = None,
                   metadata: Mapping[str, Any] | None = None) -> BundleParts:
    """Check and serialize a bundle's members (what :func:`save_bundle` writes).

    Raises:
        GraphFormatError, BundleError: as :func:`save_bundle`.
    """
    expect_type(metadata, (Mapping, type(None)), name="save_bundle(metadata)",
                expected="a mapping (a JSON object) or None")
    graph_bytes = _graph_bytes(graph)
    built = load_graph(graph_bytes)
    library = _library(lib)
    lib_bytes, external = _lib_bytes(library, built)
    tensors = _params(params)
    check_params_fit(built, {name: (array.shape, str(array.dtype.newbyteorder("=")))
                             for name, array in tensors.items()}, "params")
    manifest = _manifest(built, tensors, external, metadata)
    return BundleParts(graph_bytes, lib_bytes, built, library, tensors, manifest)


def write_parts(target: Path, kind: ArchiveKind, parts: BundleParts, *,
                overwrite: bool = False) -> None:
    """Write prepared members atomically as a directory or zip bundle at ``target``."""
    tensors, manifest = parts.tensors, parts.manifest

    def write_params(stream: BinaryWriter) -> None:
        write_safetensors(stream, tensors, {"format": "graphrt.params"})

    def manifest_bytes(digests: dict[str, MemberDigest]) -> bytes:
        return manifest.model_copy(update={"members": digests}).to_json()

    write_archive(target, kind, [(GRAPH, parts.graph_bytes), (LIB, parts.lib_bytes),
                                 (PARAMS, write_params)], manifest_bytes, overwrite=overwrite)
