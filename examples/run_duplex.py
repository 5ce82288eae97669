"""Run TVM's heterogeneous "duplex" test graph: accelerator → host → accelerator.

The graph computes ``A + B - C + D``: the additions on the accelerator, the subtraction on the
host, with a ``__copy`` node each way. It runs on cpu + cuda when a GPU is present, else on
cpu + sim (graphrt's simulated accelerator). Usage: ``python examples/run_duplex.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

import graphrt

GRAPH = Path(__file__).resolve().parent / "graphs" / "duplex.json"


def pick_accelerator() -> graphrt.Device:
    try:
        return graphrt.cuda(0)
    except graphrt.DeviceError as why:
        print(f"no GPU ({why}); using the simulated accelerator")
        return graphrt.sim(0)


def main() -> None:
    accelerator = pick_accelerator()
    graph = orjson.loads(GRAPH.read_bytes())
    # The file was compiled for CUDA (device type 2). Like TVM's own test, point those entries
    # at whichever accelerator we run on.
    codes = graph["attrs"]["device_index"][1]
    graph["attrs"]["device_index"][1] = [accelerator.type_code if c == 2 else c for c in codes]

    lib = graphrt.Library()
    lib.register("elemwise_add", lambda a, b, out: np.add(a, b, out=out))
    lib.register("elemwise_sub", lambda a, b, out: np.subtract(a, b, out=out))
    mod = graphrt.create(graph, lib, graphrt.cpu(0), accelerator)

    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(4).astype("float32") for name in "ABCD"}
    mod.run(**inputs)
    result = mod.get_output(0, out=np.empty(4, dtype="float32"))
    expected = inputs["A"] + inputs["B"] - inputs["C"] + inputs["D"]

    print(f"module: {mod}")
    print(f"A + B - C + D = {result}")
    print(f"matches numpy exactly: {bool(np.array_equal(result, expected))}")
    print("placement:")
    for node in mod.graph.nodes:
        for eid in node.outputs:
            entry = mod.graph.entries[eid]
            print(f"  entry {eid} {node.name:<20} sid {entry.sid}  on {mod.plan.entry_device[eid]}")
    for dev, nbytes in mod.plan.bytes_per_device().items():
        print(f"storage on {dev}: {nbytes} bytes")
    if accelerator.kind == "sim":
        print(f"sim copies: {graphrt.sim_counters(accelerator)}")


if __name__ == "__main__":
    main()
