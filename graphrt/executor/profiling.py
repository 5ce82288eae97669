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

__all__ = ["Aggregate", "NodeProfile", "ProfileReport", "profile_steps"]


@dataclass(frozen=True)
class NodeProfile:
    """One step's measurements: a kernel call or a copy, with one time per repeat.

    ``starts_us`` are host timestamps (µs since the profile began) at which each call was
    issued; ``times_us`` are their durations: wall clock on host devices, CUDA events on cuda.
    """

    node_id: int
    name: str
    func_name: str
    kind: str  # "op" or "copy"
    device: str  # where it ran (a copy: its destination)
    source: str  # a copy's source device; ``device`` for ops
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    bytes: int  # bytes a copy moves; 0 for ops
    starts_us: tuple[float, ...]
    times_us: tuple[float, ...]

    @property
    def mean_us(self) -> float:
        """Mean time per call, µs."""
        return fmean(self.times_us)

    @property
    def bandwidth_gbps(self) -> float | None:
        """GB/s a copy achieved (None for ops, or a copy too fast to time)."""
        if self.kind != "copy" or self.mean_us <= 0:
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
            if node.kind == "copy":
                args.update(bytes=node.bytes, source=node.source)
            events += [{"name": node.name, "cat": "Copy" if node.kind == "copy" else "Node",
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


def profile_steps(graph: Graph, plan: StoragePlan, steps: Sequence[Step],
                  is_copy: Sequence[bool], repeat: int,
                  on_error: Callable[[int, Exception], Exception],
                  views: Sequence[Any]) -> ProfileReport:
    """Run ``steps`` ``repeat`` times, timing each call, and build the report.

    ``is_copy[i]`` says whether step i moves data (a ``__copy`` node, or a copy into a bound
    output) rather than running a kernel. ``views`` are the entries' arrays, whose shapes (the
    last run's, for a dynamic graph) the report gives.
    """
    devices = [plan.node_device[nid] for _, _, nid in steps]
    timers = [backend_for(dev).step_timer() for dev in devices]
    starts = [[0.0] * repeat for _ in steps]
    times = [[0.0] * repeat for _ in steps]
    runs = []
    clock = time.perf_counter_ns
    origin = clock()
    for r in range(repeat):
        run_start = clock()
        index = -1
        try:
            for index, (fn, args, _) in enumerate(steps):
                timer = timers[index]
                if timer is not None:
                    timer.start(r)
                before = clock()
                fn(*args)
                after = clock()
                if timer is not None:
                    timer.stop(r)
                starts[index][r] = (before - origin) / 1e3
                times[index][r] = (after - before) / 1e3
        except Exception as err:
            raise on_error(steps[index][2], err) from err
        for dev in plan.devices:
            backend_for(dev).synchronize()
        runs.append(((run_start - origin) / 1e3, (clock() - run_start) / 1e3))
    for index, timer in enumerate(timers):
        if timer is not None:
            times[index] = [timer.elapsed_us(r) for r in range(repeat)]
    return ProfileReport(
        tuple(_node_profile(graph, plan, views, step[2], is_copy[i], devices[i], starts[i],
                            times[i]) for i, step in enumerate(steps)),
        tuple(runs), tuple(str(dev) for dev in plan.devices))


def _node_profile(graph: Graph, plan: StoragePlan, views: Sequence[Any], nid: int,
                  is_copy: bool, device: Device, starts: list[float],
                  times: list[float]) -> NodeProfile:
    node = graph.nodes[nid]
    inputs = tuple(tuple(views[eid].shape) for eid in node.inputs)
    outputs = tuple(tuple(views[eid].shape) for eid in node.outputs)
    nbytes = int(views[node.outputs[0]].nbytes) if is_copy else 0
    source = plan.entry_device[node.inputs[0]] if node.func_name == COPY else device
    return NodeProfile(nid, node.name, COPY if is_copy else node.func_name or "",
                       "copy" if is_copy else "op", str(device), str(source), inputs, outputs,
                       nbytes, tuple(starts), tuple(times))
