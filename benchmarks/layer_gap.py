"""Where a convolutional model's time goes, graphrt against ONNX Runtime, layer by layer.

Profiles one model of ``examples/onnx/models.py`` (``--model``, ``--batch``) in graphrt
(``GraphModule.profile``) and in ONNX Runtime (its own profiler, ``enable_profiling``) in one
process, the two interleaved round by round (``--rounds``, two runs each) so that the
machine's slow periods fall on both, and prints each convolution's median time in both, by
order (the k-th ``conv2d`` node against the k-th ``Conv``), then the totals per kind: the
stem and other kxk convolutions, depthwise ones, 1x1 expansions (more output channels than
input) and 1x1 projections (fewer). ONNX Runtime runs on as many intra-op threads as graphrt
(``onnx_models.ort_session``). The profilers time each node alone, with their own overheads;
the per-kind ratios say where the gap is, ``peers.py`` what a user waits for.

Usage: ``python benchmarks/layer_gap.py [--model mobilenet_v2] [--batch 8] [--rounds 8]
[--quiet]`` (``--quiet``: the totals only).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import onnx_models

import graphrt


def conv_kind(node: Any, weights: dict[str, tuple[int, ...]]) -> str:
    """``kxk``, ``depthwise``, ``expand`` or ``project`` of an ONNX ``Conv`` node."""
    o, per_group, *kernel = weights[node.input[1]]
    groups = next((a.i for a in node.attribute if a.name == "group"), 1)
    if groups > 1 and per_group == 1:
        return "depthwise"
    if any(k != 1 for k in kernel):
        return "kxk"
    return "expand" if o > per_group else "project"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    models = onnx_models.load_models()
    model = getattr(models, args.model)(batch=args.batch)
    feeds = models.sample_inputs(model)
    module = graphrt.from_onnx(model).create("cpu")
    session = onnx_models.ort_session(model, profile=True)
    for _ in range(3):
        module(**feeds)
        session.run(None, feeds)
    ours: dict[int, list[float]] = {}
    for _ in range(args.rounds):
        module.set_input(**feeds)
        convs = [node for node in module.profile(repeat=2).nodes if "conv2d" in node.func_name]
        for k, node in enumerate(convs):
            ours.setdefault(k, []).append(node.mean_us)
        for _ in range(2):
            session.run(None, feeds)
    theirs: dict[str, list[float]] = {}
    trace = Path(session.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    for event in events:
        if (event.get("cat") == "Node" and event["name"].endswith("_kernel_time")
                and "Conv" in event["args"].get("op_name", "")):
            theirs.setdefault(event["name"], []).append(event["dur"])
    weights = {init.name: tuple(init.dims) for init in model.graph.initializer}
    nodes = [node for node in model.graph.node if node.op_type == "Conv"]
    totals: dict[str, list[float]] = {}
    print(f"{args.model} batch {args.batch}: graphrt (profile) and ONNX Runtime (profiler), "
          f"us, medians of {args.rounds} interleaved rounds")
    for k, (node, times) in enumerate(zip(nodes, theirs.values(), strict=True)):
        kind = conv_kind(node, weights)
        mine, other = statistics.median(ours[k]), statistics.median(times[3:] or times)
        total = totals.setdefault(kind, [0.0, 0.0])
        total[0] += mine
        total[1] += other
        if not args.quiet:
            print(f"{k:3d} {kind:9s} {weights[node.input[1]]!s:20s} {mine:9.0f} {other:9.0f} "
                  f"{mine / other:6.2f}")
    for kind, (mine, other) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"{kind:9s} graphrt {mine:9.0f} ORT {other:9.0f} ratio {mine / other:5.2f}")


if __name__ == "__main__":
    main()
