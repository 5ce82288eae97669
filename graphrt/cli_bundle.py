"""What ``graphrt inspect`` and ``graphrt validate`` add when they are given a bundle.

Example:
    >>> from graphrt import load_bundle
    >>> print("\\n".join(bundle_lines(load_bundle("examples/bundles/mlp"))))  # doctest: +SKIP
    bundle: examples/bundles/mlp (directory, format 1.0, written by graphrt 0.1.0)
    ...
"""

from __future__ import annotations

import json

from .bundle import MANIFEST, Bundle

__all__ = ["bundle_lines", "verified_line"]

_SHOWN = 8
"""How many names a list shows before it says how many more there are."""


def _names(names: list[str]) -> str:
    if not names:
        return "none"
    more = f", ... ({len(names) - _SHOWN} more)" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def bundle_lines(bundle: Bundle) -> list[str]:
    """The bundle section of ``graphrt inspect``: where it is, its versions and digest, its
    members, params, the inputs a caller sets, external kernels and metadata."""
    manifest = bundle.manifest
    described = bundle.describe()
    lines = [f"bundle: {bundle.path} ({bundle.kind}, format {manifest.format_version}, written "
             f"by graphrt {manifest.graphrt_version})",
             f"  digest: sha256:{bundle.digest} (of {MANIFEST}, which pins every member)",
             "  members:"]
    width = max(len(name) for name in manifest.members)
    lines += [f"    {name:<{width}}  {digest.size:>12,} bytes  sha256:{digest.sha256[:16]}"
              for name, digest in manifest.members.items()]
    params = described["params"]
    lines += [f"  params: {params['count']} tensors, {params['bytes']:,} bytes "
              f"({_names(list(bundle.params))})",
              f"  inputs to set: {_names([spec.name for spec in bundle.inputs])}",
              f"  external kernels: {_names(bundle.external_kernels)}"
              + (" (the loading program supplies them)" if bundle.external_kernels else "")]
    lines.append(f"  metadata: {'none' if not manifest.metadata else ''}".rstrip())
    lines += [f"    {key}: {value if isinstance(value, str) else json.dumps(value)}"
              for key, value in manifest.metadata.items()]
    return lines


def verified_line(bundle: Bundle) -> str:
    """Type-check the bundle's lib against its graph, and say what ``load_bundle`` verified.

    Raises:
        BundleError: a declarative function does not fit a node that uses it.
    """
    checked = bundle.check_functions()
    return (f"ok: bundle {bundle.path}: {len(bundle.manifest.members) + 1} members verified "
            f"(sha256), {len(bundle.params)} params fit the graph, declarative functions "
            f"type-check on {checked} nodes")
