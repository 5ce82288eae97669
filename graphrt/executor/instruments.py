"""Instruments: measuring and debugging a run context, as functions over it.

Each runs the context with a hook of its own (:mod:`graphrt.executor.runner`), always one step
after another whatever strategy plain runs use, or times plain runs: per-step profiles
(:mod:`graphrt.executor.profiling`), benchmarks (:mod:`graphrt.executor.benchmark`), a node's
outputs right after it runs, and every node's outputs dumped to a file. ``run()`` knows nothing
of them, as TVM's graph executor knew nothing of its debug executor.
:class:`~graphrt.GraphModule` offers each as a method of the calling thread's context.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..devices import backend_for, copier, cpu
from ..errors import InputError, describe, expect_type
from ..schema import Graph
from .benchmark import BenchmarkResult, check_count, time_calls
from .checks import input_position, position_of
from .context import RunContext
from .profiling import ProfileHook, ProfileReport, profile_report
from .runner import Dumper, StopAfter, with_hook

__all__ = ["benchmark", "debug_get_output", "dump_outputs", "profile", "synchronize", "to_host"]


def profile(context: RunContext, repeat: int = 10, *, warmup: int = 1) -> ProfileReport:
    """Run ``warmup`` + ``repeat`` times and return per-step timings (``run()`` is untouched).

    Each kernel, copy and shape function (with the bytes it copied to the host) is timed:
    wall clock on host devices, CUDA events on cuda.

    Raises:
        InputError: ``repeat`` < 1 or ``warmup`` < 0.
        ExecutionError: as :meth:`run`.

    Example:
        >>> print(mod.profile(repeat=20).table(top=10))  # doctest: +SKIP
    """
    check_count("repeat", repeat, 1)
    check_count("warmup", warmup, 0)
    for _ in range(warmup):
        context.run()
    table = context.bindings.table
    hook = ProfileHook(context.plan, table.nids, repeat)
    hooked = with_hook(hook)
    for r in range(repeat):
        hook.start_run(r)
        context.execute(hooked)
        synchronize(context)
        hook.end_run()
    return profile_report(context.graph, context.plan, list(table.steps), list(table.nids),
                          list(table.kinds), hook, table.views)


def benchmark(context: RunContext, /, repeat: int = 5, number: int = 5,
              min_repeat_ms: float | None = None, end_to_end: bool = False,
              **inputs: Any) -> BenchmarkResult:
    """Time whole runs, waiting for every device to finish (TVM's cuda ``run()`` did not).

    Args:
        repeat: samples to take.
        number: runs per sample (each sample is their mean).
        min_repeat_ms: double ``number`` until one sample takes at least this long.
        end_to_end: also time copying ``inputs`` in and every output out to host memory.
        **inputs: set once before timing (or copied in on every run with ``end_to_end``).

    Example:
        >>> result = mod.benchmark(repeat=10, min_repeat_ms=100)  # doctest: +SKIP
        >>> result.median, result.std  # doctest: +SKIP
    """
    feeds = context.feeds

    def wait() -> None:
        synchronize(context)

    if not end_to_end:
        if inputs:
            feeds.set_inputs(inputs)
        return time_calls(context.run, wait, repeat=repeat, number=number,
                          min_repeat_ms=min_repeat_ms)
    if inputs:
        feeds.set_inputs(inputs)  # checks them, and unbinds zero-copy inputs named here
    moves_in = [feeds.transfer_in(input_position(context.compiled, key), value)
                for key, value in inputs.items()]
    if context.compiled.shapes is not None:
        context.run()  # the outputs take these inputs' shapes
    graph, plan, views = context.graph, context.plan, context.bindings.table.views
    moves_out = []
    for position, eid in enumerate(graph.heads):
        if position not in context.bindings.outputs:
            host = np.empty(views[eid].shape, graph.entries[eid].dtype.numpy)
            moves_out.append((copier(plan.entry_device[eid], cpu(0)), eid, host))

    def end_to_end_call() -> None:
        for move, src, dst in moves_in:
            move(src, dst)
        context.run()
        for move, eid, host in moves_out:
            move(views[eid], host)

    return time_calls(end_to_end_call, wait, repeat=repeat, number=number,
                      min_repeat_ms=min_repeat_ms)


def debug_get_output(context: RunContext, node: int | str, index: int = 0,
                     out: Any = None) -> Any:
    """Output ``index`` of any node, as it is right after that node runs.

    Runs the graph up to and including ``node`` (by id, or by name when the name is
    unique) and returns a copy of its output (or copies it into ``out``), before any later
    node can reuse its storage. Needs no special build.

    Example:
        >>> mod.debug_get_output("conv2d_0")  # doctest: +SKIP
    """
    graph = context.graph
    nid = _node_id(graph, node)
    outputs = graph.nodes[nid].outputs
    check_count("debug_get_output(index=...)", index, 0)
    if not 0 <= index < len(outputs):
        raise InputError(f"{graph.nodes[nid].label} has {len(outputs)} output(s), "
                         f"given index {index}")
    context.execute(with_hook(StopAfter(nid)))
    context.feeds.failure = (nid + 1, f"debug_get_output ran the graph only up to node {nid}")
    eid = outputs[index]
    target = context.feeds.fresh_array(eid) if out is None else out
    context.feeds.read(eid, target, f"output {index} of {graph.nodes[nid].label}")
    return target


def dump_outputs(context: RunContext, path: str | os.PathLike[str]) -> Path:
    """Run once and save every node's outputs, as each node finishes, to an ``.npz`` file.

    Keys are ``"<node name>:<node id>:<output index>"`` (inputs and ``__nop`` views
    included); values are host (numpy) copies.

    Example:
        >>> mod.dump_outputs("outputs.npz")  # doctest: +SKIP
        >>> np.load("outputs.npz")["conv2d_0:12:0"]  # doctest: +SKIP
    """
    expect_type(path, (str, os.PathLike), name="dump_outputs(path)",
                expected="a path (str or os.PathLike)")
    dumper = Dumper(context.graph, lambda eid: to_host(context, eid))
    context.execute(with_hook(dumper))
    dumper.save_until(len(context.graph.nodes))
    target = Path(path)
    with target.open("wb") as handle:
        np.savez(handle, **dumper.arrays)  # type: ignore[arg-type]  # keys never clash
    return target


def to_host(context: RunContext, eid: int) -> np.ndarray[Any, Any]:
    """A host copy of an entry as it is now."""
    view = context.bindings.table.views[eid]
    host = np.empty(view.shape, dtype=context.graph.entries[eid].dtype.numpy)
    copier(context.plan.entry_device[eid], cpu(0))(view, host)
    return host


def synchronize(context: RunContext) -> None:
    """Wait for every device of the context to finish its work."""
    for dev in context.plan.devices:
        backend_for(dev).synchronize()


def _node_id(graph: Graph, node: int | str) -> int:
    if isinstance(node, str):
        matches = [n.nid for n in graph.nodes if n.name == node]
        if len(matches) != 1:
            raise InputError(f"no node is called {describe(node)}" if not matches else
                             f"{len(matches)} nodes are called {describe(node)} (ids "
                             f"{matches[:20]}); "
                             "give the node id")
        return matches[0]
    return position_of(node, len(graph.nodes), "node")
