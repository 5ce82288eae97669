"""Loading a bundle with large params: mapped (graphrt) against reading the file into memory.

Writes a bundle whose one param is ``--mib`` MiB of float32, then, each in a fresh process
(after one read to warm the page cache, so both find the file in memory):

- ``load_bundle``: ``graphrt.load_bundle(path).create()``: the members are hashed in 1 MiB
  chunks, the params are mapped, and ``create()`` copies them into the module once;
- ``read``: the baseline of reading the file into memory: ``read_bytes()``, the same sha256,
  the same safetensors parse (over the bytes), ``create()`` and ``load_params()``.

It prints the wall time of each and the peak of its private (anonymous) and file-backed
resident memory, sampled every millisecond from ``/proc/self/status`` (Linux). Mapped file
pages are the OS page cache, shared between processes and dropped under memory pressure;
anonymous memory is the process's own. Usage:
``python benchmarks/bundle_load.py [--mib 1024] [--archive directory|zip] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import graphrt
from graphrt.bundle import PARAMS
from graphrt.bundle.safetensors import read_safetensors

COLUMNS = 1024


def model(rows: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``y = sum(w, axis=0) + x`` with ``w`` float32[rows, 1024] (the param) and ``x`` [1024]."""
    graph = {
        "nodes": [{"op": "null", "name": "w", "inputs": []},
                  {"op": "null", "name": "x", "inputs": []},
                  {"op": "tvm_op", "name": "y", "inputs": [[0, 0, 0], [1, 0, 0]], "attrs": {
                      "func_name": "sum_add", "num_inputs": "2", "num_outputs": "1",
                      "flatten_data": "0"}}],
        "arg_nodes": [0, 1], "node_row_ptr": [0, 1, 2, 3], "heads": [[2, 0, 0]],
        "attrs": {"dltype": ["list_str", ["float32"] * 3],
                  "shape": ["list_shape", [[rows, COLUMNS], [COLUMNS], [COLUMNS]]],
                  "storage_id": ["list_int", [0, 1, 2]]}}
    lib = {"functions": {"sum_add": {"inputs": ["w", "x"], "outputs": ["y"], "body": [
        {"op": "sum", "inputs": ["w"], "outputs": ["s"], "attrs": {"axis": [0]}},
        {"op": "add", "inputs": ["s", "x"], "outputs": ["y"]}]}}}
    return graph, lib


class MemorySampler:
    """Peaks of RssAnon and RssFile (bytes), sampled in a thread while it is active."""

    def __init__(self) -> None:
        self.peak = {"RssAnon": 0, "RssFile": 0}
        self.start = dict(self._read())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _read() -> dict[str, int]:
        found = {}
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                found[key] = int(value.split()[0]) * 1024
        return found

    def _sample(self) -> None:
        while not self._stop.is_set():
            for key, value in self._read().items():
                self.peak[key] = max(self.peak[key], value)
            time.sleep(0.001)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for key, value in self._read().items():
            self.peak[key] = max(self.peak[key], value)


def load_mapped(path: Path) -> graphrt.GraphModule:
    return graphrt.load_bundle(path).create()


def load_read(path: Path) -> graphrt.GraphModule:
    """What a loader that reads the params file into memory does (directory bundles)."""
    data = (path / PARAMS).read_bytes()
    expected = json.loads((path / "manifest.json").read_bytes())["members"][PARAMS]["sha256"]
    if hashlib.sha256(data).hexdigest() != expected:
        raise SystemExit("checksum mismatch")
    params = read_safetensors(memoryview(data), PARAMS)
    module = graphrt.create(path / "graph.json", graphrt.Library.from_json(path / "lib.json"))
    module.load_params(params)
    return module


def child(approach: str, path: Path) -> None:
    """Run one approach in this (fresh) process and print its figures as JSON."""
    with MemorySampler() as memory:
        start = time.perf_counter()
        module = (load_mapped if approach == "load_bundle" else load_read)(path)
        seconds = time.perf_counter() - start
    weight = module.get_input("w")
    assert weight[0, 0] == 0.0 and weight[-1, -1] == 1.0, "params not loaded"
    print(json.dumps({"seconds": seconds, **{key: memory.peak[key] - memory.start.get(key, 0)
                                              for key in memory.peak}}))


def build(folder: Path, mib: int, archive: str) -> Path:
    rows = mib * (1 << 20) // (4 * COLUMNS)
    weight = np.zeros((rows, COLUMNS), dtype="float32")
    weight[-1, -1] = 1.0
    graph, lib = model(rows)
    target = folder / ("big.grb" if archive == "zip" else "big")
    return graphrt.save_bundle(target, graph, graphrt.Library.from_json(lib), {"w": weight})


def measure(approach: str, path: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--child", approach, str(path)],
                          capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="size of the param (MiB)")
    parser.add_argument("--archive", choices=("directory", "zip"), default="directory")
    parser.add_argument("--repeat", type=int, default=3, help="processes per approach")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return
    # Beside this script rather than in /tmp, which may be a tmpfs (RAM, not a file system).
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent) as tmp:
        path = build(Path(tmp), args.mib, args.archive)
        hashlib.sha256(path.read_bytes() if path.is_file() else (path / PARAMS).read_bytes())
        approaches = ["load_bundle"] + (["read"] if args.archive == "directory" else [])
        results = {name: [measure(name, path) for _ in range(args.repeat)]
                   for name in approaches}
    mib = float(1 << 20)
    print(f"params: {args.mib} MiB of float32 in a {args.archive} bundle; median of "
          f"{args.repeat} fresh processes each")
    print(f"{'approach':<12} {'seconds':>8} {'peak private MiB':>17} {'peak mapped MiB':>16}")
    medians = {}
    for name, runs in results.items():
        medians[name] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        row = medians[name]
        print(f"{name:<12} {row['seconds']:>8.3f} {row['RssAnon'] / mib:>17.0f} "
              f"{row['RssFile'] / mib:>16.0f}")
    if "read" in medians:
        ours, base = medians["load_bundle"], medians["read"]
        print(f"read / load_bundle: time {base['seconds'] / ours['seconds']:.2f}x, peak private "
              f"memory {base['RssAnon'] / max(ours['RssAnon'], 1):.2f}x")


if __name__ == "__main__":
    main()
