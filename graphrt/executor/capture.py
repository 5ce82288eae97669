"""Graph capture: record a run's device work once, then replay it with one launch per segment.

With ``create(..., cuda_graph=True)`` a run context splits its steps into *segments*: maximal
runs of consecutive kernels on one device whose backend records work
(:meth:`graphrt.devices.Backend.capture`: cuda, and sim, which simulates it). Everything else
(kernels on host devices, ``__copy`` nodes, copies into bound outputs) runs step by step
between them, in order. A segment is recorded the second time the context runs with the same
memory and shapes (the first run is a warm-up: cupy compiles its kernels and cuBLAS sets up,
neither of which may happen inside a capture), and replayed from then on.

A recording holds the addresses and shapes it was made with. So recordings are kept per
*signature* (every step's kernel and its arrays' addresses, shapes and strides), at most
:data:`MAX_GRAPHS` of them, least recently used dropped first: binding other memory zero-copy
(``set_input_zero_copy``), or new shapes of a dynamic graph, record once more, and going back
to memory or shapes seen before replays again. Zero-copy inputs are therefore read in place,
not copied into stable buffers: CuPy offers no way to patch a graph's kernel arguments, and a
copy per run would cost what zero-copy saves; a caller that alternates between a few buffers
replays from the cache.

Whether a step is recorded is decided per kernel. Kernels known not to record (a prepared
kernel that is not capturable, host kernels, copies) split the segments where they stand. A
segment whose recording fails all the same (a kernel that waits for the device on the host,
say) runs step by step in that run, the node whose kernel failed runs step by step from then
on, split off like the others, and the next run records the rest anew (one such node found per
run); each is named with its reason in :meth:`CaptureRunner.report` and logged once. Only a
failure no node is to blame for (the device refusing the recording as a whole) gives capture
up for the context. Graphs whose shape functions read
tensor values on the host are not captured at all: their shapes are known only while they
run.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..devices import Backend, Device, Replay, backend_for
from .compiled import CompiledGraph
from .runner import Failure, execute
from .steps import Step, StepTable

__all__ = ["MAX_GRAPHS", "CaptureReport", "CaptureRunner", "capture_runner"]

logger = logging.getLogger("graphrt")

MAX_GRAPHS = 8
"""Recordings a run context keeps (one per signature: memory bound and shapes run with)."""


@dataclass(frozen=True)
class CaptureReport:
    """How a run context uses graph capture (``GraphModule.capture_report()``).

    Attributes:
        enabled: runs replay recordings (False: capture was not asked for, or gave up).
        reason: why runs go step by step, or None.
        captures: recordings made (each also ran its work once).
        replays: runs that launched recordings.
        cached: recordings kept now (at most :data:`MAX_GRAPHS`).
        segments: recorded segments in the latest recording.
        eager_steps: steps of the latest recording that run one by one between them.
        eager_nodes: the nodes of those steps (``__copy`` nodes, host kernels, kernels that
            are not capturable: :attr:`graphrt.kernels.Prepared.capturable`), by name.
        eager_reasons: ``(name, why)`` for each of them.
    """

    enabled: bool
    reason: str | None
    captures: int
    replays: int
    cached: int
    segments: int
    eager_steps: int
    eager_nodes: tuple[str, ...] = ()
    eager_reasons: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _Segment:
    """Consecutive steps, and the device that records them (None: run one by one)."""

    steps: tuple[Step, ...]
    nids: tuple[int, ...]
    kinds: tuple[str, ...]
    device: Device | None


@dataclass(frozen=True)
class _Recording:
    """A run as steps: each recorded segment one step launching its recording (under the id
    of its first node), the steps between as they are (``eager``: their node ids)."""

    steps: tuple[Step, ...]
    nids: tuple[int, ...]
    segments: int
    eager: tuple[tuple[str, int], ...] = ()  # (kind, node id) of the steps run one by one


_WARMED = _Recording((), (), 0)
"""A signature seen once: its next run records."""


class CaptureRunner:
    """Runs a context's steps from recordings (see the module's docstring).

    Args:
        devices_of: per step, from its kind and node id, the device whose backend may record
            it, or None for a step that always runs one by one.
        reason: why nothing is to be recorded at all (the runner then runs step by step).
    """

    def __init__(self, devices_of: Callable[[str, int], Device | None],
                 reason: str | None = None, name_of: Callable[[int], str] = str,
                 why: Callable[[str, int], str] = lambda kind, nid: "") -> None:
        self._static_devices, self._name_of, self._why = devices_of, name_of, why
        self._isolated: dict[int, str] = {}  # node id -> why its recording failed alone
        self._cache: OrderedDict[tuple[Any, ...], _Recording] = OrderedDict()
        self._version = -1
        self._current: _Recording | None = None
        self._signature: tuple[Any, ...] = ()
        self._reason = reason
        self._captures = self._replays = 0
        if reason is not None:
            logger.info("graph capture is off for this graph: %s", reason)

    @property
    def enabled(self) -> bool:
        return self._reason is None

    def _devices_of(self, kind: str, nid: int) -> Device | None:
        return None if nid in self._isolated else self._static_devices(kind, nid)

    def report(self) -> CaptureReport:
        recording = self._current or _WARMED
        eager = [(kind, nid) for kind, nid in dict.fromkeys(recording.eager)]
        return CaptureReport(self.enabled, self._reason, self._captures, self._replays,
                             len(self._cache), recording.segments,
                             len(recording.steps) - recording.segments,
                             tuple(self._name_of(nid) for _, nid in eager),
                             tuple((self._name_of(nid), self._isolated.get(nid)
                                    or self._why(kind, nid)) for kind, nid in eager))

    def run(self, table: StepTable, fail: Failure) -> None:
        """One run of ``table``'s steps: replayed, recorded, or (first time, or when capture
        is off) one by one. Errors are ``fail``'s, as in :func:`execute`."""
        if self._reason is not None:
            execute(table.steps, table.nids, fail)
            return
        if table.version != self._version:
            self._signature = _signature(table.steps)
            self._current = self._cache.get(self._signature)
            self._version = table.version
        recording = self._current
        if recording is None:  # a warm-up run: record the next one
            execute(table.steps, table.nids, fail)
            self._remember(_WARMED)
        elif recording is _WARMED:
            self._remember(self._record(table, fail))
        else:
            self._cache.move_to_end(self._signature)
            self._replays += 1
            execute(recording.steps, recording.nids, fail)

    def _remember(self, recording: _Recording) -> None:
        if self._reason is not None:
            return
        self._current = recording
        self._cache[self._signature] = recording
        self._cache.move_to_end(self._signature)
        while len(self._cache) > MAX_GRAPHS:
            self._cache.popitem(last=False)

    def _record(self, table: StepTable, fail: Failure) -> _Recording:
        """Split the steps into segments and run them, recording the device ones; a segment
        that fails to record has its culprits isolated, and the next run records again."""
        steps: list[Step] = []
        nids: list[int] = []
        eager: list[tuple[str, int]] = []
        recorded, isolated = 0, False
        for segment in _segments(table, self._devices_of):
            replay = None
            if segment.device is None or self._reason is not None:
                execute(segment.steps, segment.nids, fail)
            else:
                replay = self._capture(segment, fail)
                if replay is None:
                    isolated = True
            if replay is None:
                steps.extend(segment.steps)
                nids.extend(segment.nids)
                eager.extend(zip(segment.kinds, segment.nids, strict=True))
            else:
                steps.append((replay.launch, ()))
                nids.append(segment.nids[0])
                recorded += 1
        if isolated and self._reason is None:
            return _WARMED  # the next run records without the isolated steps
        return _Recording(tuple(steps), tuple(nids), recorded, tuple(eager))

    def _capture(self, segment: _Segment, fail: Failure) -> Replay | None:
        """Record and run ``segment``; None if it could not be recorded: it then ran step by
        step, and the node whose kernel failed under recording is isolated (or, when no node
        is to blame, capture is given up for the context)."""
        assert segment.device is not None
        work = functools.partial(execute, segment.steps, segment.nids, fail)
        try:
            replay = backend_for(segment.device).capture(work)
        except Exception as err:  # any failure: run it step by step
            work()  # a kernel's own error raises here, named
            culprit = getattr(err, "node_id", None)
            if culprit in segment.nids:
                self._isolate(culprit, f"its recording failed ({type(err).__name__}: {err})")
            else:
                self._give_up(f"recording nodes {segment.nids[0]}..{segment.nids[-1]} on "
                              f"{segment.device} failed ({type(err).__name__}: {err})")
            return None
        self._captures += replay is not None
        return replay

    def _isolate(self, nid: int, reason: str) -> None:
        self._isolated[nid] = reason
        logger.warning("graph capture: node %s runs step by step between the recordings from "
                       "now on: %s", self._name_of(nid), reason)

    def _give_up(self, reason: str) -> None:
        self._reason = reason
        self._cache.clear()
        self._current = None
        logger.warning("graph capture is off for this run context from now on: %s; its runs "
                       "go node by node", reason)


def capture_runner(compiled: CompiledGraph) -> CaptureRunner:
    """The capture runner of one run context of ``compiled`` (``create(..., cuda_graph=True)``)."""
    return CaptureRunner(functools.partial(_recording_device, compiled),
                         _capture_off(compiled), lambda nid: compiled.graph.nodes[nid].name,
                         functools.partial(_why_eager, compiled))


def _recording_device(compiled: CompiledGraph, kind: str, nid: int) -> Device | None:
    """The device that records a step under graph capture, or None (run it alone): a node
    whose prepared kernels are all capturable, on a device that records work."""
    if kind != "op" or nid not in compiled.capturable:
        return None
    dev = compiled.plan.node_device[nid]
    return dev if _records(dev) else None


def _records(dev: Device) -> bool:
    """Whether ``dev``'s backend records work (it overrides :meth:`Backend.capture`)."""
    return type(backend_for(dev)).capture is not Backend.capture


def _why_eager(compiled: CompiledGraph, kind: str, nid: int) -> str:
    """Why a step is not recorded, as :func:`_recording_device` decided."""
    if kind == "copy":
        return "a copy between devices (run by the host, in order)"
    if kind != "op":
        return "a shape function (run on the host)"
    dev = compiled.plan.node_device[nid]
    if not _records(dev):
        return f"it runs on {dev}, whose kernels are plain calls"
    return ("its kernel is not capturable (it calls cuBLAS or cuFFT through CuPy, which "
            "refuses them while a stream captures, or reads values on the host)")


def _capture_off(compiled: CompiledGraph) -> str | None:
    """Why this graph records nothing under ``cuda_graph=True``, or None."""
    shapes = compiled.shapes
    if shapes is not None and shapes.nodes:
        return ("its shape functions read tensor values on the host, so later shapes are "
                "known only while it runs")
    if not any(_recording_device(compiled, "op", p.nid) for p in compiled.programs
               if not p.is_copy):
        return ("none of its kernels can be recorded: none runs on a device that records "
                "work (cpu kernels are plain calls), or their prepared kernels are not "
                "capturable")
    return None


def _segments(table: StepTable, devices_of: Callable[[str, int], Device | None]
              ) -> list[_Segment]:
    """Maximal runs of steps recorded on one device, and the steps between them."""
    segments: list[_Segment] = []
    steps: list[Step] = []
    nids: list[int] = []
    kinds: list[str] = []
    current: Device | None = None
    for step, nid, kind in zip(table.steps, table.nids, table.kinds, strict=True):
        device = devices_of(kind, nid)
        if steps and device != current:
            segments.append(_Segment(tuple(steps), tuple(nids), tuple(kinds), current))
            steps, nids, kinds = [], [], []
        current = device
        steps.append(step)
        nids.append(nid)
        kinds.append(kind)
    if steps:
        segments.append(_Segment(tuple(steps), tuple(nids), tuple(kinds), current))
    return segments


def _signature(steps: Sequence[Step]) -> tuple[Any, ...]:
    """What a recording of ``steps`` depends on: each kernel, and its arrays' addresses,
    shapes, strides and dtypes (lowered functions' calls included)."""
    return tuple((id(fn), _arrays(args)) for fn, args in steps)


def _arrays(args: Sequence[Any]) -> tuple[Any, ...]:
    found: list[Any] = []
    for arg in args:
        if isinstance(arg, tuple | list):
            found.append(_arrays(arg))
        elif hasattr(arg, "strides"):
            face = getattr(arg, "__cuda_array_interface__", None) or arg.__array_interface__
            found.append((face["data"][0], arg.shape, arg.strides, arg.dtype.str))
        else:
            found.append(id(arg))
    return tuple(found)
