"""Inter-op parallelism: independent nodes of a cpu graph run at once on a small thread pool.

At ``create()``, :func:`plan_parallel` works out which nodes depend on which (a node waits for
the nodes writing the entries it reads), groups them in *waves* (a node's wave is one more than
the latest wave it reads from), and splits every wave whose nodes are worth running at once
over ``threads`` *lanes* (longest first, by the multiply-adds of their matmuls and
convolutions). Lane 0 is the calling thread; the others run on a shared pool. numpy releases
the GIL inside BLAS and large ufuncs, so only big work gains: with ``inter_op_threads=None``
a graph runs in parallel only where :data:`AUTO_PARALLEL` allows (it does not: numpy's
OpenBLAS serializes concurrent calls) and the lanes save enough multiply-adds (see
:data:`MIN_WAVE_SAVING` and :data:`MIN_GRAPH_SHARE`).

Memory hazards are planned away rather than waited for:

- storage ids were assigned by liveness for the sequential order, so two nodes of one wave may
  share one. :func:`plan_parallel` gives an entry a storage id of its own wherever it would
  overlap, in wave time, another entry of its storage id (the graph it returns has those ids);
- lowered functions' intermediates share one scratch arena per device: each lane gets its own
  arena (:attr:`ParallelPlan.lane_of` says which a node uses).

While lanes run, BLAS is held to ``max(1, cores // threads)`` threads (threadpoolctl), once
per stretch of parallel waves, so the two levels of threads never oversubscribe the cores.
Hooked runs (profile, dumps, ``debug_get_output``) stay sequential.

Example:
    >>> resolve_threads(0, cores=8), resolve_threads(3, cores=2)
    (1, 3)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from math import isqrt, prod
from typing import Any

from ..kernels.cpu.blas_threads import blas_held
from ..kernels.cpu.crew import available_cores
from ..lib import FusedFunction, OpError, TensorType
from ..schema import Graph
from ..storage import StoragePlan
from .runner import Failure
from .steps import AliasGroups, Step, StepTable

__all__ = ["AUTO_PARALLEL", "MAX_THREADS", "MIN_GRAPH_SHARE", "MIN_WAVE_SAVING", "ParallelPlan",
           "ParallelRunner", "function_flops", "plan_parallel",
           "resolve_threads"]

MAX_THREADS = 64
"""The most lanes ``create(inter_op_threads=...)`` accepts."""

AUTO_THREADS = 4
"""Lanes an automatic plan uses at most (fewer on fewer cores)."""

AUTO_PARALLEL = False
"""Whether ``inter_op_threads=None`` may run a graph in parallel at all (then where the
estimate says so). Off: numpy's OpenBLAS (scipy-openblas 0.3.31, pthreads) serializes sgemm
calls made from two threads at once, so lanes of one-thread BLAS lose to one thread with
threaded BLAS on a quiet machine (docs/performance.md, "Inter-op parallelism", has the
figures)."""

MIN_WAVE_SAVING = 20_000_000
"""Multiply-adds x 2 (flops) a wave's lanes must save (its total less its longest lane) to run
in parallel under ``inter_op_threads=None``: about 0.3 ms of one core's sgemm."""

MIN_GRAPH_SHARE = 0.10
"""Under ``inter_op_threads=None``, the parallel waves must save at least this share of the
graph's matmul and convolution flops, or the whole graph runs sequentially."""

_GEMM_OPS = frozenset({"matmul", "batch_matmul", "dense", "einsum", "attention"})
_CONV_OPS = frozenset({"conv", "conv2d"})
_CONV_TRANSPOSE_OPS = frozenset({"conv_transpose", "conv2d_transpose"})


def resolve_threads(requested: int | None, *, cores: int | None = None) -> int:
    """Lanes for ``create(inter_op_threads=requested)``: 1 means sequential.

    None (automatic) takes ``min(cores, 4)`` where :data:`AUTO_PARALLEL` allows it, else 1
    (``cores`` defaults to this process's
    :func:`~graphrt.kernels.cpu.crew.available_cores`); 0 and 1 are sequential;
    any other number is taken as given.

    Example:
        >>> resolve_threads(2, cores=16), resolve_threads(1, cores=16)
        (2, 1)
    """
    if requested is None:
        count = available_cores() if cores is None else cores
        return max(1, min(count, AUTO_THREADS)) if AUTO_PARALLEL else 1
    return max(1, requested)


@dataclass(frozen=True)
class ParallelPlan:
    """How a run goes when nodes run at once.

    Attributes:
        threads: lanes (the calling thread and ``threads - 1`` pool threads).
        blas_threads: BLAS threads while lanes run.
        segments: the run, in order: each is ``(parallel, waves)``, a wave being one tuple of
            program indexes per lane (a sequential segment has one wave of one lane).
        lane_of: per program index, the lane that runs it (whose scratch arena it uses).
        flops: the graph's matmul and convolution flops, and those the lanes save.
    """

    threads: int
    blas_threads: int
    segments: tuple[tuple[bool, tuple[tuple[tuple[int, ...], ...], ...]], ...]
    lane_of: tuple[int, ...]
    flops: tuple[int, int]


def plan_parallel(graph: Graph, plan: StoragePlan, programs: Sequence[Any],
                  count_flops: Callable[[], Sequence[int]], threads: int, *, auto: bool,
                  cores: int | None = None) -> tuple[ParallelPlan, Graph] | None:
    """Plan a parallel run, or None where it is not worth it (or not possible).

    Args:
        graph, plan: the graph and its storage plan.
        programs: the node programs (:class:`~graphrt.executor.compiled.NodeProgram`), in order.
        count_flops: per program, its matmul and convolution flops (0 where unknown); called
            only for a graph with nodes that could run at once.
        threads: lanes (:func:`resolve_threads`); below 2 there is no plan.
        cores: the threads the module may use (``create(threads=...)``; default: every core
            this process may run on), shared out to the lanes' BLAS.
        auto: keep only waves that save :data:`MIN_WAVE_SAVING` flops, and give up unless they
            save :data:`MIN_GRAPH_SHARE` of the graph's; otherwise every wave of two nodes or
            more runs in parallel.

    Returns:
        The plan, and the graph with the storage ids a parallel run needs.
    """
    if threads < 2 or graph.is_dynamic or any(dev.kind != "cpu" for dev in plan.devices):
        return None
    roots = AliasGroups(graph).root
    level = _levels(graph, programs, roots)
    waves: dict[int, list[int]] = {}
    for index, number in enumerate(level):
        waves.setdefault(number, []).append(index)
    if all(len(wave) < 2 for wave in waves.values()):
        return None
    flops = count_flops()
    segments: list[tuple[bool, list[tuple[tuple[int, ...], ...]]]] = []
    lane_of = [0] * len(programs)
    saved = 0
    for wave in (waves[k] for k in sorted(waves)):
        lanes = _split(wave, flops, threads)
        gain = sum(flops[i] for i in wave) - max(sum(flops[i] for i in lane) for lane in lanes)
        parallel = len(wave) > 1 and (gain >= MIN_WAVE_SAVING if auto else True)
        if parallel:
            saved += gain
            for lane_index, lane in enumerate(lanes):
                for i in lane:
                    lane_of[i] = lane_index
        else:
            lanes = (tuple(wave),)
        if segments and segments[-1][0] == parallel:
            segments[-1][1].append(lanes)
        else:
            segments.append((parallel, [lanes]))
    total = sum(flops)
    if not any(parallel for parallel, _ in segments) or (
            auto and saved < MIN_GRAPH_SHARE * total):
        return None
    merged = tuple((parallel, tuple(lanes) if parallel else
                    ((tuple(i for wave in lanes for i in wave[0]),),))
                   for parallel, lanes in segments)
    blas = max(1, (available_cores() if cores is None else cores) // threads)
    return (ParallelPlan(threads, blas, merged, tuple(lane_of), (total, saved)),
            _private_storage(graph, programs, roots, level))


def _levels(graph: Graph, programs: Sequence[Any], roots: Sequence[int]) -> list[int]:
    """Each program's wave: one more than the latest wave of a program it reads from."""
    producer: dict[int, int] = {}
    level: list[int] = []
    for index, program in enumerate(programs):
        n_inputs = 1 if program.is_copy else len(graph.nodes[program.nid].inputs)
        reads = program.eids[:n_inputs]
        level.append(1 + max((level[producer[roots[e]]] for e in reads
                              if roots[e] in producer), default=-1))
        for eid in program.eids[n_inputs:]:
            producer[roots[eid]] = index
    return level


def _split(wave: Sequence[int], flops: Sequence[int], threads: int
           ) -> tuple[tuple[int, ...], ...]:
    """A wave's programs over at most ``threads`` lanes, longest first onto the least loaded
    lane (ties by position, so the plan is deterministic); lanes keep program order."""
    count = min(threads, len(wave))
    lanes: list[list[int]] = [[] for _ in range(count)]
    load = [0] * count
    for i in sorted(wave, key=lambda i: (-flops[i], i)):
        lane = min(range(count), key=lambda k: (load[k], k))
        lanes[lane].append(i)
        load[lane] += max(flops[i], 1)
    return tuple(tuple(sorted(lane)) for lane in lanes)


def _private_storage(graph: Graph, programs: Sequence[Any], roots: Sequence[int],
                     level: Sequence[int]) -> Graph:
    """The graph with a storage id of its own for every alias group that would overlap, in
    wave time, another group of its storage id (the groups sharing one stay ordered in both
    node order and wave order)."""
    forever = len(programs) + 1
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    for index, program in enumerate(programs):
        n_inputs = 1 if program.is_copy else len(graph.nodes[program.nid].inputs)
        for eid in program.eids[:n_inputs]:
            end[roots[eid]] = max(end.get(roots[eid], -1), level[index])
        for eid in program.eids[n_inputs:]:
            start.setdefault(roots[eid], level[index])
    for eid in graph.heads:
        end[roots[eid]] = forever
    kept: dict[int, list[tuple[int, int]]] = {}  # sid -> the wave intervals keeping it
    moved: dict[int, int] = {}  # alias root -> its new storage id
    next_sid = 1 + max((e.sid for e in graph.entries), default=-1)
    for root in sorted(start, key=lambda r: (graph.entries[r].nid, r)):
        first = start[root]
        last = max(end.get(root, first), first)
        intervals = kept.setdefault(graph.entries[root].sid, [])
        if any(not (b < first or last < a) for a, b in intervals):
            moved[root] = next_sid
            next_sid += 1
        else:
            intervals.append((first, last))
    if not moved:
        return graph
    entries = tuple(replace(entry, sid=moved[roots[entry.eid]])
                    if roots[entry.eid] in moved else entry for entry in graph.entries)
    return replace(graph, entries=entries)


def function_flops(function: FusedFunction, inputs: Sequence[TensorType],
                   outputs: Sequence[TensorType]) -> int:
    """The flops (2 per multiply-add) of a declarative function's matmuls and convolutions at
    one node's types; 0 for what cannot be inferred here.

    Example:
        >>> from graphrt.lib import Library, TensorType
        >>> fn = Library().define("mm", {"inputs": ["a", "b"], "outputs": ["y"], "body": [
        ...     {"op": "matmul", "inputs": ["a", "b"], "outputs": ["y"]}]})
        >>> t = TensorType((64, 64), "float32")
        >>> function_flops(fn, [t, t], [t])
        524288
    """
    types: dict[str, TensorType] = dict(zip(function.spec.inputs, inputs, strict=True))
    types.update(zip(function.spec.outputs, outputs, strict=True))
    total = 0
    for step in function.steps:
        ins = [types.get(arg) for arg in step.inputs]
        known = [t for t in ins if t is not None]
        if len(known) != len(ins) or any(step.op.needs_data(len(ins))):
            continue
        try:
            outs = step.op.infer(known, step.attrs, [None] * len(known))
        except OpError:
            continue
        types.update(zip(step.outputs, outs, strict=False))
        total += _op_flops(step.op.name, known, outs)
    return total


def _op_flops(op: str, ins: Sequence[TensorType], outs: Sequence[TensorType]) -> int:
    if len(ins) < 2 or not outs:
        return 0
    a, b, out = prod(ins[0].shape), prod(ins[1].shape), prod(outs[0].shape)
    if op in _CONV_OPS and ins[1].shape and ins[1].shape[0]:
        return 2 * out * (b // ins[1].shape[0])
    if op in _CONV_TRANSPOSE_OPS and ins[1].shape and ins[1].shape[0]:
        return 2 * a * (b // ins[1].shape[0])
    if op in _GEMM_OPS and out:
        return 2 * out * isqrt(a * b // out)  # A[M,K] B[K,N] out[M,N]: a*b/out = K*K
    return 0


# -- running -----------------------------------------------------------------------------------

_POOL_LOCK = threading.Lock()
_POOL: list[ThreadPoolExecutor] = []


def _pool() -> ThreadPoolExecutor:
    """The process's pool of lane threads (threads start when first needed)."""
    if not _POOL:
        with _POOL_LOCK:
            if not _POOL:
                _POOL.append(ThreadPoolExecutor(MAX_THREADS - 1,
                                                thread_name_prefix="graphrt-inter-op"))
    return _POOL[0]


def _run_lane(steps: Sequence[Step], lane: tuple[int, ...]) -> tuple[int, Exception] | None:
    """Run one lane's steps; the first failure (program index, error) instead of raising."""
    index = -1
    try:
        for index in lane:
            fn, args = steps[index]
            fn(*args)
    except Exception as err:
        return index, err
    return None


class ParallelRunner:
    """Runs a context's steps by a :class:`ParallelPlan` (the steps after the programs', the
    copies into bound outputs, run last on the calling thread).

    A failed run tells ``fail`` the lowest node id whose outputs it may not have written.
    """

    def __init__(self, plan: ParallelPlan, nids: Sequence[int]) -> None:
        self.plan = plan
        self._programs = len(plan.lane_of)
        later: list[int] = []
        lowest = len(nids) and max(nids) + 1
        for _, waves in reversed(plan.segments):
            for wave in reversed(waves):
                lowest = min([lowest, *(nids[i] for lane in wave for i in lane)])
                later.append(lowest)
        self._unfinished_from = tuple(reversed(later))  # per wave, in run order

    def run(self, table: StepTable, fail: Failure) -> None:
        """Run every step; raise what ``fail`` makes of the first failure (in node order among
        the failures of the wave where it happened)."""
        steps, nids = table.steps, table.nids
        position = 0
        for parallel, waves in self.plan.segments:
            with blas_held(self.plan.blas_threads, lanes=True) if parallel else nullcontext():
                for wave in waves:
                    failed = self._wave(steps, wave) if parallel else _run_lane(steps, wave[0])
                    if failed is not None:
                        index, err = failed
                        error = fail(nids[index], err, self._unfinished_from[position])
                        if error is err:
                            raise err
                        raise error from err
                    position += 1
        tail = tuple(range(self._programs, len(steps)))
        if tail:
            failed = _run_lane(steps, tail)
            if failed is not None:
                error = fail(nids[failed[0]], failed[1], nids[failed[0]])
                if error is failed[1]:
                    raise error
                raise error from failed[1]

    @staticmethod
    def _wave(steps: Sequence[Step], wave: tuple[tuple[int, ...], ...]
              ) -> tuple[int, Exception] | None:
        pool = _pool()
        futures = [pool.submit(_run_lane, steps, lane) for lane in wave[1:]]
        failures = [_run_lane(steps, wave[0]), *(future.result() for future in futures)]
        found = [failure for failure in failures if failure is not None]
        return min(found, key=lambda failure: failure[0]) if found else None


def describe_plan(plan: ParallelPlan, nids: Sequence[int]) -> str:
    """One line per segment: its waves' lanes as node ids (for logs and tests)."""
    lines = []
    for parallel, waves in plan.segments:
        shown = " | ".join("/".join(",".join(str(nids[i]) for i in lane) for lane in wave)
                           for wave in waves)
        lines.append(f"{'parallel' if parallel else 'sequential'}: {shown}")
    return "\n".join(lines)

