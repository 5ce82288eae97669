"""The small example CNN on cpu: graphrt against straight numpy, and against ONNX Runtime.

graphrt runs ``examples/models/cnn`` from its JSON (graph + declarative lib). The baseline is
the same computation written as straight numpy (``examples/models/reference.py``: im2col +
matmul convolutions). When ``onnxruntime`` and ``onnx`` are installed, the same model is built
as ONNX (Conv, Relu, MaxPool, Reshape, Gemm, Softmax) and timed too. All timed in one process,
interleaved; medians.

Usage: ``python benchmarks/cnn.py [--repeat 30]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import graphrt

MODELS = Path(__file__).resolve().parents[1] / "examples" / "models"
sys.path.insert(0, str(MODELS))

import reference  # noqa: E402


def onnx_session(values: dict[str, Any]) -> Callable[[], Any] | None:
    try:
        import onnx  # noqa: F401  (helper and numpy_helper below need it)
        import onnxruntime
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    nodes = []
    h = "data"
    for i in range(2):
        nodes += [
            helper.make_node("Conv", [h, f"conv{i}_weight", f"conv{i}_bias"], [f"c{i}"],
                             pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
            helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=[2, 2],
                             strides=[2, 2])]
        h = f"p{i}"
    nodes += [helper.make_node("Flatten", [h], ["flat"], axis=1),
              helper.make_node("Gemm", ["flat", "dense_weight", "dense_bias"], ["logits"],
                               transB=1),
              helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    inits = [numpy_helper.from_array(v, name) for name, v in values.items() if name != "data"]
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, values["data"].shape)],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    feed = {"data": values["data"]}
    expected = reference.cnn(values)
    np.testing.assert_allclose(session.run(None, feed)[0], expected, rtol=1e-4, atol=1e-5)
    return lambda: session.run(None, feed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    lib = graphrt.Library.from_json(MODELS / "cnn" / "lib.json")
    mod = graphrt.create(MODELS / "cnn" / "graph.json", lib, graphrt.cpu(0))
    values = reference.weights("cnn", mod.get_input_info())
    mod.set_input(**values)
    mod.run()
    np.testing.assert_allclose(mod.get_output(0), reference.cnn(values), rtol=1e-4, atol=1e-5)

    contenders: dict[str, Callable[[], Any]] = {
        "graphrt run()": mod.run, "straight numpy": lambda: reference.cnn(values)}
    ort = onnx_session(values)
    if ort is not None:
        contenders["ONNX Runtime"] = ort
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.repeat):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    shape = values["data"].shape
    print(f"example CNN, input {shape}, cpu, median of {args.repeat} runs")
    for name, seconds in medians.items():
        ratio = seconds / medians["graphrt run()"]
        print(f"  {name:<15}: {seconds * 1e3:8.3f} ms   ({ratio:.2f}x graphrt's time)")
    if ort is None:
        print("  ONNX Runtime   : not installed (pip install onnxruntime onnx to compare)")


if __name__ == "__main__":
    main()
