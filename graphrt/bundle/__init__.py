"""Bundles: a compiled model as one deployable unit that loading never executes.

A bundle is a directory, or the same members in one zip file: ``graph.json``, ``lib.json``
(declarative functions of standard ops), ``params.safetensors`` and ``manifest.json``
(versions, every member's SHA-256, the model's inputs, params and outputs, device types,
external kernels and free-form metadata). The format is described in ``docs/bundle-format.md``.

Example:
    >>> import graphrt
    >>> graphrt.save_bundle("mlp.grb", graph_json, lib, weights)  # doctest: +SKIP
    >>> bundle = graphrt.load_bundle("mlp.grb")  # doctest: +SKIP
    >>> mod = bundle.create(graphrt.cpu(0))  # doctest: +SKIP
"""

from .archive import is_zip, open_archive
from .bundle import Bundle, bundle_from_parts, load_bundle
from .manifest import FORMAT_VERSION, Manifest, MemberDigest, TensorSpec, parse_manifest
from .members import GRAPH, LIB, MANIFEST, MEMBERS, PARAMS, BundleLimits
from .safetensors import read_safetensors, write_safetensors
from .save import BundleParts, prepare_bundle, save_bundle

__all__ = [
    "FORMAT_VERSION",
    "GRAPH",
    "LIB",
    "MANIFEST",
    "MEMBERS",
    "PARAMS",
    "Bundle",
    "BundleLimits",
    "BundleParts",
    "Manifest",
    "MemberDigest",
    "TensorSpec",
    "bundle_from_parts",
    "is_zip",
    "load_bundle",
    "open_archive",
    "parse_manifest",
    "prepare_bundle",
    "read_safetensors",
    "save_bundle",
    "write_safetensors",
]
