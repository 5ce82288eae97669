"""Where a convolutional model's time goes, graphrt against ONNX Runtime, layer by layer.

Profiles one model of ``examples/onnx/models.py`` (``--model``, ``--batch``) in graphrt
(``GraphModule.profile``) and in ONNX Runtime (its own profiler, ``enable_profiling``) in one
process, the two interleaved round by round (``--rounds``; each after a pause of
``onnx_models.SETTLE_S``, one warm-up run, then two timed ones) so that the machine's slow
periods fall on both. Without the pause each one's pool threads, spinning after its run, held
the second core through the other's: MobileNetV2's 960 -> 320 projection at batch 1 profiled
1117 us in graphrt (333 us in plain runs). The two run their nodes in different orders
(ResNet's downsampling branch, say), so convolutions are matched by what they compute: the
weight's shape and the data's and output's sizes. Each such layer gets its median times summed
over its occurrences in both, then the totals per kind: the stem and other kxk convolutions,
depthwise ones, 1x1 expansions (more output channels than input) and 1x1 projections (fewer).
ONNX Runtime runs on as many intra-op threads as graphrt (``onnx_models.ort_session``). The
profilers time each node alone, with their own overheads: the per-kind ratios say where the
gap is, ``peers.py`` what a user waits for.

Usage: ``python benchmarks/layer_gap.py [--model mobilenet_v2] [--batch 8] [--rounds 8]
[--quiet]`` (``--quiet``: the totals only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import onnx_models

import graphrt

_TIMED = 2
"""Runs each contender times per round, after one warm-up run of its own (the first run
after the pause ran up to a third longer in ONNX Runtime)."""

Layer = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""A convolution as matched: its weight's shape (OIHW), the data's and the output's ``N, C,
H, W``."""


def nchw(shape: Sequence[int]) -> tuple[int, ...]:
    """A data or output shape as ``N, C, H, W`` (graphrt's blocked ``N, C/8, H, W, 8`` too)."""
    return tuple(shape) if len(shape) == 4 else (shape[0], shape[1] * shape[4], *shape[2:4])


def conv_kind(layer: Layer) -> str:
    """``kxk``, ``depthwise``, ``expand`` or ``project``."""
    (o, per_group, *kernel), data, _ = layer
    if per_group == 1 and data[1] == o > 1:
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
    ours: dict[tuple[int, Layer], list[float]] = {}
    for _ in range(args.rounds):
        module.set_input(**feeds)
        time.sleep(onnx_models.SETTLE_S)  # the other's spinning pool threads leave the cores
        for node in module.profile(repeat=_TIMED).nodes:
            if "conv2d" in node.func_name:
                layer = (node.input_shapes[1], nchw(node.input_shapes[0]),
                         nchw(node.output_shapes[0]))
                ours.setdefault((node.node_id, layer), []).append(node.mean_us)
        time.sleep(onnx_models.SETTLE_S)
        for _ in range(1 + _TIMED):  # as profile(): a warm-up run (dropped below), then two
            session.run(None, feeds)
    trace = Path(session.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    theirs: dict[tuple[str, Layer], list[float]] = {}
    for event in events:
        info = event.get("args", {})
        if (event.get("cat") == "Node" and event["name"].endswith("_kernel_time")
                and "Conv" in info.get("op_name", "")):
            (data, weight, *_), (out,) = ([next(iter(t.values())) for t in info[key]]
                                         for key in ("input_type_shape", "output_type_shape"))
            layer = (tuple(weight), nchw(data), nchw(out))
            theirs.setdefault((event["name"], layer), []).append(event["dur"])
    layers: dict[Layer, list[float]] = {}
    for side, times in ((0, ours), (1, theirs)):
        for (_, layer), values in times.items():
            layers.setdefault(layer, [0.0, 0.0, 0, 0])
            if side:  # the 3 runs before the rounds, then each round's warm-up run
                values = [v for i, v in enumerate(values[3:]) if i % (1 + _TIMED)]
            layers[layer][side] += statistics.median(values)
            layers[layer][2 + side] += 1
    print(f"{args.model} batch {args.batch}: graphrt (profile) and ONNX Runtime (profiler), "
          f"us, medians of {args.rounds} interleaved rounds, summed per layer")
    totals: dict[str, list[float]] = {}
    for layer, (mine, other, count, count_other) in sorted(layers.items(),
                                                           key=lambda kv: -kv[1][0]):
        kind = conv_kind(layer)
        total = totals.setdefault(kind, [0.0, 0.0])
        total[0] += mine
        total[1] += other
        if not args.quiet:
            print(f"{kind:9s} w {layer[0]!s:20s} {layer[1][2]}x{layer[1][3]} -> "
                  f"{layer[2][2]}x{layer[2][3]} x{count}{'' if count == count_other else '?'} "
                  f"{mine:9.0f} {other:9.0f} {mine / other if other else float('nan'):6.2f}")
    for kind, (mine, other) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"{kind:9s} graphrt {mine:9.0f} ORT {other:9.0f} ratio {mine / other:5.2f}")


if __name__ == "__main__":
    main()
