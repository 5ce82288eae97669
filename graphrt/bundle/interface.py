"""What a bundle's model takes and gives, derived from its graph, and the checks that every
member agrees with it: the manifest's inputs, params and outputs, the params' shapes and
dtypes, and the kernels the lib leaves to the loading program.

Example:
    >>> from graphrt import load_graph
    >>> graph = load_graph("examples/models/mlp/graph.json")  # doctest: +SKIP
    >>> [spec.name for spec in interface(graph, ["w0"])[1]]  # doctest: +SKIP
    ['w0']
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ..errors import BundleError, describe
from ..schema import BUILTINS, Graph
from .manifest import Manifest, TensorSpec, shape_of
from .members import MANIFEST, PARAMS

__all__ = [
    "check_external_kernels",
    "check_interface",
    "check_params_fit",
    "check_params_listed",
    "device_types",
    "external_kernels",
    "interface",
    "tensor_spec",
]


def tensor_spec(graph: Graph, name: str, eid: int) -> TensorSpec:
    """The manifest description of one graph entry under ``name``."""
    entry = graph.entries[eid]
    return TensorSpec(name=name, shape=shape_of(entry), dtype=entry.dtype.name)


def interface(graph: Graph, param_names: Collection[str]
              ) -> tuple[list[TensorSpec], list[TensorSpec], list[TensorSpec]]:
    """The graph's (inputs, params, outputs) as the manifest lists them.

    Inputs and params are graph inputs in input order; ``param_names`` says which are params.
    """
    inputs = [tensor_spec(graph, graph.nodes[nid].name, graph.nodes[nid].outputs[0])
              for nid in graph.arg_nodes]
    outputs = [tensor_spec(graph, name, eid)
               for name, eid in zip(graph.output_names, graph.heads, strict=True)]
    return ([spec for spec in inputs if spec.name not in param_names],
            [spec for spec in inputs if spec.name in param_names], outputs)


def device_types(graph: Graph) -> list[int]:
    """The DLPack device type codes the graph's entries ask for (empty: it does not say)."""
    return sorted({entry.device_type for entry in graph.entries if entry.device_type is not None})


def external_kernels(graph: Graph, defined: Collection[str]) -> list[str]:
    """The graph's func_names that neither graphrt nor the ``defined`` functions provide."""
    used = {node.func_name for node in graph.nodes if node.func_name is not None}
    return sorted(used - set(BUILTINS) - set(defined))


def _cut(name: str, limit: int = 80) -> str:
    """A tensor name as is, or cut when long (names come from the bundle)."""
    return name if len(name) <= limit else f"{name[:limit]}... ({len(name)} chars)"


def _describe(specs: Sequence[TensorSpec]) -> str:
    shown = ", ".join(f"{_cut(s.name)} {s.dtype}{s.shape}" for s in specs[:10])
    return (shown + (f" and {len(specs) - 10} more" if len(specs) > 10 else "")) or "none"


def check_interface(manifest: Manifest, graph: Graph, where: str) -> None:
    """Check that the manifest's inputs, params and outputs are exactly the graph's.

    Raises:
        BundleError: naming the first tensor that differs.
    """
    expected = interface(graph, {spec.name for spec in manifest.params})
    for kind, listed, actual in zip(("input", "param", "output"),
                                    (manifest.inputs, manifest.params, manifest.outputs),
                                    expected, strict=True):
        if listed == actual:
            continue
        for spec, real in zip(listed, actual, strict=False):
            if spec != real:
                raise BundleError(f"{MANIFEST}: {kind} {describe(spec.name)} is listed as "
                                  f"{spec.dtype}{spec.shape}, but {where} has "
                                  f"{describe(real.name)} {real.dtype}{real.shape} there")
        raise BundleError(f"{MANIFEST} lists {kind}s {_describe(listed)}, but {where} has "
                          f"{_describe(actual)}")


def check_params_fit(graph: Graph, params: Mapping[str, tuple[Sequence[int], str]],
                     where: str) -> None:
    """Check that every param is a graph input of the same shape and dtype.

    Args:
        params: name → (shape, dtype name).
        where: how errors name the params (a member name, or ``"params"``).

    Raises:
        BundleError: naming the param that is not an input or does not fit.
    """
    inputs = {graph.nodes[nid].name: graph.nodes[nid].outputs[0] for nid in graph.arg_nodes}
    for name, (shape, dtype) in params.items():
        if name not in inputs:
            listed = ", ".join(describe(i) for i in list(inputs)[:20]) + (
                " ..." if len(inputs) > 20 else "")
            raise BundleError(f"{where}: param {describe(name)} is not an input of the graph (its "
                              f"inputs are: {listed or 'none'})")
        spec = tensor_spec(graph, name, inputs[name])
        if list(shape) != spec.shape or dtype != spec.dtype:
            raise BundleError(f"{where}: param {describe(name)} is {dtype}{list(shape)}, but the "
                              f"graph's input {describe(name)} is {spec.dtype}{spec.shape}")


def check_params_listed(manifest: Manifest, stored: Collection[str]) -> None:
    """Check that the params file holds exactly the params the manifest lists.

    Raises:
        BundleError: naming a param one lists and the other lacks.
    """
    listed = {spec.name for spec in manifest.params}
    missing, unlisted = sorted(listed - set(stored)), sorted(set(stored) - listed)
    if missing:
        raise BundleError(f"member {PARAMS!r} lacks param {describe(missing[0])}, which {MANIFEST} "
                          "lists")
    if unlisted:
        shown = ", ".join(map(describe, unlisted[:10]))
        raise BundleError(f"member {PARAMS!r} holds params [{shown}] that {MANIFEST} does not "
                          "list")


def check_external_kernels(manifest: Manifest, graph: Graph, defined: Collection[str]) -> None:
    """Check that the manifest lists exactly the func_names no bundle member defines.

    Raises:
        BundleError: a func_name the lib lacks that the manifest does not list, or one listed
            that the graph does not need.
    """
    expected = external_kernels(graph, defined)
    if sorted(manifest.external_kernels) != expected:
        unlisted = sorted(set(expected) - set(manifest.external_kernels))
        if unlisted:
            raise BundleError(f"graph.json uses func_name {describe(unlisted[0])}, which lib.json "
                              f"does not define and {MANIFEST} does not list in "
                              "external_kernels")
        raise BundleError(f"{MANIFEST} lists external_kernels {manifest.external_kernels}, but "
                          f"the graph needs {expected} beyond lib.json")
