"""Where a convolutional model's time goes, graphrt against ONNX Runtime, layer by layer.

Profiles one model of ``examples/onnx/models.py`` (``--model``, ``--batch``) in graphrt
(``GraphModule.profile``) and times ONNX Runtime's convolutions node by node, in one process,
the two interleaved round by round (``--rounds``; each after a pause of
``onnx_models.SETTLE_S``, one warm-up run, then two timed ones) so that the machine's slow
periods fall on both. ONNX Runtime's nodes are those of its own optimized graph (the NCHWc
convolutions it runs, saved by ``optimized_model_filepath``), each run alone in a session of
one node on its real inputs, less an empty session's time. Its profiler slowed it instead
(MobileNetV2 at batch 1: 6.28 ms a run with ``enable_profiling``, 5.3-5.8 ms without; its
kernel times summed to 5.9-7.4 ms), so the ratios flattered graphrt. Without the pause each
one's pool threads, spinning after its run, held the second core through the other's:
MobileNetV2's 960 -> 320 projection at batch 1 profiled 1117 us in graphrt (333 us in plain
runs). The two run their nodes in different orders
(ResNet's downsampling branch, say), so convolutions are matched by what they compute: the
weight's shape and the data's and output's sizes. Each such layer gets its median times summed
over its occurrences in both, then the totals per kind: the stem and other kxk convolutions,
depthwise ones, 1x1 expansions (more output channels than input) and 1x1 projections (fewer).
ONNX Runtime runs on as many intra-op threads as graphrt (``onnx_models.graphrt_threads``).
Its NCHWc graph pads channels to whole blocks of 16 (24 to 32), so layers are matched with
their channels rounded up to 16 on both sides. Each node is timed alone: the per-kind ratios
say where the gap is, ``peers.py`` what a user waits for. graphrt's profile of a node of tens
of microseconds carries 10-20 us that its plain run does not (MobileNetV2's global average
pool: 4 us called alone, 14 us right after the convolution before it, 27 us profiled), so
the ratios of the smallest layers overstate graphrt's time.

Usage: ``python benchmarks/layer_gap.py [--model mobilenet_v2] [--batch 8] [--rounds 8]
[--quiet]`` (``--quiet``: the totals only).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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


def blocks16(layer: Layer) -> Layer:
    """``layer`` with its channel counts rounded up to 16, as ONNX Runtime's NCHWc graph pads
    them (a depthwise layer's per-group 1 kept)."""
    (o, per_group, *kernel), data, out = layer

    def up(c: int) -> int:
        return -(-c // 16) * 16 if c > 4 else c  # a stem's 3 channels stay NCHW

    depthwise = per_group == 1 and data[1] == o > 1
    return ((up(o), 1 if depthwise else up(per_group), *kernel),
            (data[0], up(data[1]), *data[2:]), (out[0], up(out[1]), *out[2:]))


def ort_conv_nodes(model: Any, feeds: dict[str, Any]
                   ) -> tuple[list[tuple[str, Layer, Callable[[], Callable[[], Any]]]],
                              Callable[[], Any]]:
    """ONNX Runtime's convolutions as it runs them, each ``(name, layer, make)``: ``make()``
    opens a session of the node alone (no graph optimization: the node is already what the
    full session's optimizer made of the model) and returns its run on the inputs the node
    gets in the model; and the run of an empty session (one Relu of one float), whose time is
    each run's overhead. One node's session at a time should be open: each has its own pool,
    whose threads spin after a run, and with every node's session open at once ResNet-50's
    node times summed to 250-330 ms (with a pause of up to 10 ms before each; 86 ms after
    50 ms), against 43 ms for the model."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import helper

    threads = onnx_models.graphrt_threads()
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "optimized.onnx")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.optimized_model_filepath = path
        onnxruntime.InferenceSession(model.SerializeToString(), options,
                                     providers=["CPUExecutionProvider"])
        optimized = onnx.load(path)
    plain = onnxruntime.SessionOptions()
    plain.intra_op_num_threads = threads
    plain.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL

    def session(proto: Any) -> Any:
        return onnxruntime.InferenceSession(proto.SerializeToString(), plain,
                                            providers=["CPUExecutionProvider"])

    params = {tensor.name: tensor for tensor in optimized.graph.initializer}
    every = onnx.ModelProto()
    every.CopyFrom(optimized)
    del every.graph.output[:]
    names = [node.output[0] for node in optimized.graph.node]
    every.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names)
    values = dict(feeds)
    values.update(zip(names, session(every).run(None, feeds), strict=True))
    nodes = []
    for node in optimized.graph.node:
        if node.op_type != "Conv":
            continue
        data = [name for name in node.input if name and name not in params]
        graph = helper.make_graph(
            [node], "node", [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT,
                                                           values[name].shape)
                             for name in data],
            [onnx.ValueInfoProto(name=node.output[0])],
            [params[name] for name in node.input if name in params])
        one = helper.make_model(graph, opset_imports=optimized.opset_import,
                                ir_version=optimized.ir_version)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x, y = values[data[0]].shape, values[node.output[0]].shape
        group = int(attrs.get("group", 1))
        kernel = attrs.get("kernel_shape") or list(params[node.input[1]].dims[2:4])
        layer = ((y[1], x[1] // group, *kernel), tuple(x), tuple(y))
        inputs = {name: values[name] for name in data}
        nodes.append((node.name or node.output[0], layer,
                      lambda proto=one, f=inputs: functools.partial(session(proto).run, None,
                                                                    f)))
    empty = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["a"], ["b"])], "empty",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1])]),
        opset_imports=[helper.make_opsetid("", 13)])
    empty_session, one_float = session(empty), {"a": np.ones(1, np.float32)}
    return nodes, lambda: empty_session.run(None, one_float)


def timed(run: Callable[[], Any]) -> float:
    """Microseconds of ``run``: the median of :data:`_TIMED` calls after a warm-up call."""
    run()
    times = []
    for _ in range(_TIMED):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


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
    nodes, empty = ort_conv_nodes(model, feeds)
    for _ in range(3):
        module(**feeds)
    ours: dict[tuple[int, Layer], list[float]] = {}
    theirs: dict[tuple[str, Layer], list[float]] = {}
    overhead: list[float] = []
    for _ in range(args.rounds):
        module.set_input(**feeds)
        time.sleep(onnx_models.SETTLE_S)  # the other's spinning pool threads leave the cores
        for node in module.profile(repeat=_TIMED).nodes:
            if "conv2d" in node.func_name:
                layer = (node.input_shapes[1], nchw(node.input_shapes[0]),
                         nchw(node.output_shapes[0]))
                ours.setdefault((node.node_id, blocks16(layer)), []).append(node.mean_us)
        time.sleep(onnx_models.SETTLE_S)
        overhead.append(timed(empty))
        for name, layer, make in nodes:
            run = make()
            theirs.setdefault((name, blocks16(layer)), []).append(timed(run))
            del run  # its pool's threads stop with it
    spent = statistics.median(overhead)  # a session's own time, on every node's runs
    theirs = {key: [max(0.0, value - spent) for value in values]
              for key, values in theirs.items()}
    layers: dict[Layer, list[float]] = {}
    for side, times in ((0, ours), (1, theirs)):
        for (_, layer), values in times.items():
            layers.setdefault(layer, [0.0, 0.0, 0, 0])
            layers[layer][side] += statistics.median(values)
            layers[layer][2 + side] += 1
    print(f"{args.model} batch {args.batch}: graphrt (profile) and ONNX Runtime (each node "
          f"alone, less {spent:.0f} us of an empty session), us, medians of {args.rounds} "
          f"interleaved rounds, summed per layer (channels rounded up to 16)")
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
