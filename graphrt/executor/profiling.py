"""Profiling a module's steps, and the report it returns (no printing from library code)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

import orjson

from ..devices import Device, backend_for
from ..schema import COPY, Graph
from ..storage import StoragePlan
from .steps import Step

__all__ = ["Aggregate", "NodeProfile", "ProfileHook", "ProfileReport", "profile_report"]


@dataclass(frozen=True)
class NodeProfile:
    """One step's measurements: a kernel call or a copy, with one time per repeat.

    ``starts_us`` are host timestamps (µs since the profile began) at which each call was
    issued; ``times_us`` are their durations: wall clock on host devices, CUDA events on cuda.
    """

    node_id: int
    name: str
    func_name: str
    kind: str  # "op", "copy" or "shape" (a shape function run on the host before its node)
    device: str  # where it ran (a copy: its destination)
    source: str  # a copy's source device (a shape function's: what it read); else ``device``
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    bytes: int  # bytes a copy moves, or a shape function copies to the host; 0 for ops
    starts_us: tuple[float, ...]
    times_us: tuple[float, ...]

    @property
    def mean_us(self) -> float:
        """Mean time per call, µs."""
        return fmean(self.times_us)

    @property
    def bandwidth_gbps(self) -> float | None:
        """GB/s a copy achieved (None for ops, or a copy too fast to time)."""
        if self.kind == "op" or not self.bytes or self.mean_us <= 0:
            return None
        return self.bytes / (self.mean_us * 1e3)


@dataclass(frozen=True)
class Aggregate:
    """Time summed over the calls of one func_name or one device."""

    calls: int
    total_us: float
    mean_us: float
    percent: float


@dataclass(frozen=True)
class ProfileReport:
    """What :meth:`GraphModule.profile` measured.

    Example:
        >>> report = mod.profile(repeat=10)  # doctest: +SKIP
        >>> print(report.table(top=10))  # doctest: +SKIP
        >>> report.save_chrome_trace("trace.json")  # doctest: +SKIP
    """

    nodes: tuple[NodeProfile, ...]
    runs: tuple[tuple[float, float], ...]  # (start µs, duration µs) of each repeat
    devices: tuple[str, ...]

    @property
    def total_us(self) -> float:
        """Mean over repeats of the summed step times, µs."""
        return sum(node.mean_us for node in self.nodes)

    def _aggregate(self, key: Callable[[NodeProfile], str]) -> dict[str, Aggregate]:
        groups: dict[str, list[NodeProfile]] = {}
        for node in self.nodes:
            groups.setdefault(key(node), []).append(node)
        total = self.total_us or 1.0
        rows = {name: (len(nodes), sum(n.mean_us for n in nodes)) for name, nodes in groups.items()}
        return {name: Aggregate(calls, spent, spent / calls, 100.0 * spent / total)
                for name, (calls, spent) in sorted(rows.items(), key=lambda kv: -kv[1][1])}

    def by_func_name(self) -> dict[str, Aggregate]:
        """Time per func_name (copies under ``__copy``), most expensive first."""
        return self._aggregate(lambda node: node.func_name)

    def by_device(self) -> dict[str, Aggregate]:
        """Time per device, most expensive first."""
        return self._aggregate(lambda node: node.device)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return {
            "total_us": self.total_us,
            "runs": [{"start_us": start, "duration_us": dur} for start, dur in self.runs],
            "nodes": [{**asdict(node), "mean_us": node.mean_us,
                       "bandwidth_gbps": node.bandwidth_gbps} for node in self.nodes],
            "by_func_name": {k: asdict(v) for k, v in self.by_func_name().items()},
            "by_device": {k: asdict(v) for k, v in self.by_device().items()},
        }

    def table(self, top: int | None = None) -> str:
        """Per-node times (slowest first, ``top`` of them) and the aggregates, as text."""
        nodes = sorted(self.nodes, key=lambda n: -n.mean_us)[:top]
        total = self.total_us or 1.0
        lines = [f"{'node':>5} {'name':<32} {'func_name':<28} {'device':<7} {'mean us':>10} "
                 f"{'%':>6}  shapes"]
        for n in nodes:
            shapes = f"{_shapes(n.input_shapes)} -> {_shapes(n.output_shapes)}"
            if n.bandwidth_gbps is not None:
                shapes += (f"  {n.source} -> {n.device}: {n.bytes:,} B at "
                           f"{n.bandwidth_gbps:.2f} GB/s")
            lines.append(f"{n.node_id:>5} {n.name[:32]:<32} {n.func_name[:28]:<28} "
                         f"{n.device:<7} {n.mean_us:>10.2f} {100 * n.mean_us / total:>6.1f}  "
                         f"{shapes}")
        for title, rows in (("func_name", self.by_func_name()), ("device", self.by_device())):
            lines.append("")
            lines.append(f"{'by ' + title:<40} {'calls':>6} {'total us':>12} {'%':>6}")
            lines += [f"{name[:40]:<40} {a.calls:>6} {a.total_us:>12.2f} {a.percent:>6.1f}"
                      for name, a in rows.items()]
        lines.append(f"\ntotal {self.total_us:.2f} us per run over {len(self.runs)} repeats")
        return "\n".join(lines)

    def chrome_trace(self) -> list[dict[str, Any]]:
        """The report as Chrome trace events (the format ONNX Runtime's profiler writes).

        One complete (``"ph": "X"``) ``model_run`` event per repeat on track 0, and one per
        node call on the track of its device (tracks are named by metadata events).
        """
        pid = os.getpid()
        tids = {device: i + 1 for i, device in enumerate(self.devices)}
        events: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "run"}}]
        events += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": device}} for device, tid in tids.items()]
        events += [{"name": "model_run", "cat": "Session", "ph": "X", "ts": start, "dur": dur,
                    "pid": pid, "tid": 0, "args": {"repeat": r}}
                   for r, (start, dur) in enumerate(self.runs)]
        for node in self.nodes:
            args: dict[str, Any] = {"op_name": node.func_name, "device": node.device,
                                    "node_id": node.node_id,
                                    "input_shapes": [list(s) for s in node.input_shapes],
                                    "output_shapes": [list(s) for s in node.output_shapes]}
            if node.kind != "op":
                args.update(bytes=node.bytes, source=node.source)
            category = {"copy": "Copy", "shape": "ShapeFunction"}.get(node.kind, "Node")
            events += [{"name": node.name, "cat": category,
                        "ph": "X", "ts": start, "dur": dur, "pid": pid,
                        "tid": tids[node.device], "args": args}
                       for start, dur in zip(node.starts_us, node.times_us, strict=True)]
        return events

    def save_chrome_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`chrome_trace` as JSON to ``path`` (opens in Perfetto and chrome://tracing)."""
        target = Path(path)
        target.write_bytes(orjson.dumps(self.chrome_trace()))
        return target


def _shapes(shapes: tuple[tuple[int, ...], ...]) -> str:
    return ",".join("x".join(map(str, s)) or "scalar" for s in shapes)


class ProfileHook:
    """A runner hook that times every step of ``repeat`` runs (host clock, and device events
    where the device's work is asynchronous).

    Args:
        plan: the storage plan (where each step's node runs).
        nids: the node of each step the runs will make.
        repeat: how many runs will be timed.
    """

    def __init__(self, plan: StoragePlan, nids: Sequence[int], repeat: int) -> None:
        self.devices = [plan.node_device[nid] for nid in nids]
        self._timers = [backend_for(dev).step_timer() for dev in self.devices]
        self.starts = [[0.0] * repeat for _ in nids]
        self.times = [[0.0] * repeat for _ in nids]
        self.runs: list[tuple[float, float]] = []
        self.repeat = 0
        self._origin = time.perf_counter_ns()
        self._before = 0
        self._run_start = 0

    def start_run(self, repeat: int) -> None:
        self.repeat = repeat
        self._run_start = time.perf_counter_ns()

    def end_run(self) -> None:
        """Call once the devices have been synchronized after a run."""
        now = time.perf_counter_ns()
        self.runs.append(((self._run_start - self._origin) / 1e3,
                          (now - self._run_start) / 1e3))

    def before(self, index: int, nid: int) -> bool:
        timer = self._timers[index]
        if timer is not None:
            timer.start(self.repeat)
        self._before = time.perf_counter_ns()
        return True

    def after(self, index: int, nid: int) -> None:
        after = time.perf_counter_ns()
        timer = self._timers[index]
        if timer is not None:
            timer.stop(self.repeat)
        self.starts[index][self.repeat] = (self._before - self._origin) / 1e3
        self.times[index][self.repeat] = (after - self._before) / 1e3

    def device_times(self) -> list[list[float]]:
        """Per step, its times: device events where it had a timer, else the host clock."""
        return [[timer.elapsed_us(r) for r in range(len(self.runs))] if timer is not None
                else times for timer, times in zip(self._timers, self.times, strict=True)]


def profile_report(graph: Graph, plan: StoragePlan, steps: Sequence[Step],
                   nids: Sequence[int], kinds: Sequence[str], hook: ProfileHook,
                   views: Sequence[Any]) -> ProfileReport:
    """The report of the runs ``hook`` timed. ``kinds[i]`` says what step i is (``"op"``,
    ``"copy"`` or ``"shape"``: a shape function with the copies it made to the host);
    ``views`` are the entries' arrays, whose shapes (the last run's) the report gives."""
    times = hook.device_times()
    return ProfileReport(
        tuple(_node_profile(graph, plan, views, step, nids[i], kinds[i], hook.devices[i],
                            hook.starts[i], times[i]) for i, step in enumerate(steps)),
        tuple(hook.runs), tuple(str(dev) for dev in plan.devices))


def _node_profile(graph: Graph, plan: StoragePlan, views: Sequence[Any], step: Step,
                  nid: int, kind: str, device: Device, starts: list[float],
                  times: list[float]) -> NodeProfile:
    node = graph.nodes[nid]
    inputs = tuple(tuple(views[eid].shape) for eid in node.inputs)
    outputs = tuple(tuple(views[eid].shape) for eid in node.outputs)
    name, func_name, source = node.name, node.func_name or "", device
    nbytes = 0
    if kind == "copy":
        nbytes, func_name = int(views[node.outputs[0]].nbytes), COPY
        if node.func_name == COPY:
            source = plan.entry_device[node.inputs[0]]
    elif kind == "shape":  # a ShapeStage: what its shape function copied to the host
        moved = getattr(step[0], "moved", [])
        nbytes = sum(n for _, _, n in moved)
        source = moved[0][0] if moved else device
        name = f"{node.name} [shape function]"
    return NodeProfile(nid, name, func_name, kind, str(device), str(source), inputs, outputs,
                       nbytes, tuple(starts), tuple(times))
