"""If, Loop and Scan: branches and bodies converted in the enclosing scope, conditions known at
conversion resolved there, conditions computed at run time kept exact (both branches selected
with ``where``; a loop's iterations masked, its scan outputs compressed to those that ran);
compared with ONNX Runtime on cpu and sim, and a ``torch.jit.script`` model with a
data-dependent ``if`` and ``break`` exported by PyTorch when torch is installed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphrt  # noqa: E402
from graphrt.onnx.convert import convert_model  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _value(name: str, elem: int, shape: list[Any]) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any],
           inits: list[Any] | None = None, opset: int = 17) -> Any:
    graph = helper.make_graph(nodes, "control_flow", inputs, outputs, inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _check(model: Any, feeds: list[dict[str, Any]]) -> None:
    bundle = graphrt.from_onnx(model)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    modules = {device: bundle.create(device) for device in ("cpu", "sim")}
    for feed in feeds:
        want = session.run(None, feed)
        for device, module in modules.items():
            for got, expected in zip(module(**feed), want, strict=True):
                np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6, atol=1e-6,
                                           err_msg=device)


def _ops(model: Any) -> set[str]:
    lib = convert_model(model).emitted.lib
    return {step["op"] for function in lib["functions"].values() for step in function["body"]}


def _branches() -> tuple[Any, Any]:
    then = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                             [_value("t", F, [3])])
    other = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["e"])], "else", [],
                              [_value("e", F, [3])])
    return then, other


def _inits() -> list[Any]:
    return [numpy_helper.from_array(np.array(v, np.float32), k)
            for k, v in {"one": 1.0, "two": 2.0, "zero": 0.0}.items()]


def test_if_on_a_run_time_condition_selects_the_branch_taken() -> None:
    then, other = _branches()
    model = _model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                    helper.make_node("Greater", ["s", "zero"], ["c"]),
                    helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                   [_value("x", F, [3])], [_value("y", F, [3])], _inits())
    assert "where" in _ops(model)
    _check(model, [{"x": np.array([1, 2, 3], np.float32)},
                   {"x": np.array([-1, -2, 0], np.float32)}])


def test_if_on_a_condition_known_at_conversion_is_its_branch() -> None:
    then, other = _branches()
    flag = numpy_helper.from_array(np.array(False), "flag")
    model = _model([helper.make_node("If", ["flag"], ["y"], then_branch=then,
                                     else_branch=other)],
                   [_value("x", F, [3])], [_value("y", F, [3])], [*_inits(), flag])
    assert "where" not in _ops(model) and "multiply" not in _ops(model)
    _check(model, [{"x": np.array([1, 2, 3], np.float32)}])


def test_if_branches_of_other_shapes_need_a_condition_known_at_conversion() -> None:
    then = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                             [_value("t", F, [3])])
    other = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["e"], keepdims=1)],
                              "else", [], [_value("e", F, [1])])
    model = _model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                    helper.make_node("Greater", ["s", "zero"], ["c"]),
                    helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                   [_value("x", F, [3])], [_value("y", F, ["n"])], _inits())
    with pytest.raises(graphrt.ConversionError, match="one shape and dtype"):
        graphrt.from_onnx(model)


def _counting_loop(trips: int) -> Any:
    """y doubles while its sum stays under a limit, at most ``trips`` times; each iteration's
    y is a scan output (so the number that ran shows in its length)."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["y_in", "two"], ["y_out"]),
         helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["go"]),
         helper.make_node("Identity", ["y_out"], ["seen"])],
        "body", [_value("i", I64, []), _value("c", B, []), _value("y_in", F, [2])],
        [_value("go", B, []), _value("y_out", F, [2]), _value("seen", F, [2])])
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "m"),
             numpy_helper.from_array(np.array(True), "start"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(50.0, np.float32), "limit")]
    return _model([helper.make_node("Loop", ["m", "start", "x"], ["y", "all"], body=body)],
                  [_value("x", F, [2])], [_value("y", F, [2]), _value("all", F, ["k", 2])],
                  inits)


def test_a_loop_that_breaks_on_its_data_runs_exactly_as_far() -> None:
    model = _counting_loop(6)
    assert {"compress", "where"} <= _ops(model)
    # 0, 1, 3 and all 6 iterations kept, as the data decides
    _check(model, [{"x": np.array(v, np.float32)} for v in ([30, 30], [10, 10], [1, 2],
                                                             [0.01, 0.01])])


def test_a_loop_too_long_to_unroll_or_without_a_count_is_refused_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from graphrt.onnx.converters import control_flow

    monkeypatch.setattr(control_flow, "MAX_UNROLLED_NODES", 200)  # the same check, sooner
    with pytest.raises(graphrt.ConversionError, match="more than the 200 graphrt unrolls"):
        graphrt.from_onnx(_counting_loop(10**9))
    model = _counting_loop(3)
    del model.graph.node[0].input[0]  # no M: a while loop, whose scan outputs nothing bounds
    model.graph.node[0].input.insert(0, "")
    with pytest.raises(graphrt.ConversionError,
                       match=r"no trip count \(M\).*its scan outputs .* have no size"):
        graphrt.from_onnx(model)


def _while_loop(count: str | None, trips: int = 0) -> Any:
    """y = y * scale + x (x an outer activation, scale a constant) while sum(y) < limit, and
    a counter carried beside it; ``count``: no M (``None``), a graph input, or a constant."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["y_in", "scale"], ["scaled"]),
         helper.make_node("Add", ["scaled", "x"], ["y_out"]),
         helper.make_node("Add", ["k_in", "one"], ["k_out"]),
         helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["go"]),
         helper.make_node("Identity", ["i"], ["last_out"])],  # carries the iteration number
        "body", [_value("i", I64, []), _value("c", B, []), _value("y_in", F, [2, 3]),
                 _value("k_in", I64, []), _value("last_in", I64, [])],
        [_value("go", B, []), _value("y_out", F, [2, 3]), _value("k_out", I64, []),
         _value("last_out", I64, [])],
        [numpy_helper.from_array(np.array(1, np.int64), "one")])
    inits = [numpy_helper.from_array(np.array(True), "start"),
             numpy_helper.from_array(np.array(1.5, np.float32), "scale"),
             numpy_helper.from_array(np.array(1000.0, np.float32), "limit"),
             numpy_helper.from_array(np.array(0, np.int64), "zero")]
    inputs = [_value("x", F, [2, 3]), _value("y0", F, [2, 3])]
    if count == "constant":
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "m"))
    elif count == "input":
        inputs.append(_value("m", I64, []))
    return _model([helper.make_node("Loop", ["m" if count else "", "start", "y0", "zero",
                                             "zero"], ["y", "k", "last"], body=body)],
                  inputs, [_value("y", F, [2, 3]), _value("k", I64, []),
                           _value("last", I64, [])], inits)


def _feeds(**extra: Any) -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    return [{"x": rng.uniform(0, scale, (2, 3)).astype(np.float32),
             "y0": rng.uniform(0, 1, (2, 3)).astype(np.float32), **extra}
            for scale in (0.1, 1.0, 40.0, 500.0)]


def test_a_while_loop_without_a_trip_count_runs_at_run_time() -> None:
    model = _while_loop(None)
    assert "loop" in _ops(model)
    _check(model, _feeds())


def test_a_loop_whose_trip_count_is_an_input_runs_at_run_time() -> None:
    model = _while_loop("input")
    assert "loop" in _ops(model)
    for trips in (0, 1, 3, 40):
        _check(model, _feeds(m=np.array(trips, np.int64)))


def test_a_loop_too_long_to_unroll_without_scan_outputs_runs_at_run_time(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from graphrt.onnx.converters import control_flow

    monkeypatch.setattr(control_flow, "MAX_UNROLLED_NODES", 50)
    model = _while_loop("constant", 10**6)
    assert "loop" in _ops(model)
    _check(model, _feeds())
    path = tmp_path / "loop.graphrt"  # the body is declarative: it saves and loads
    graphrt.from_onnx(model).save(path)
    feed = _feeds()[1]
    y, k, last = graphrt.load_bundle(path).create("cpu")(**feed)
    want_y, want_k, want_last = graphrt.from_onnx(model).create("cpu")(**feed)
    np.testing.assert_array_equal(y, want_y)
    assert int(k) == int(want_k) == int(last) + 1 == int(want_last) + 1 > 1


def test_a_run_time_loop_whose_state_changes_shape_is_refused_by_name() -> None:
    body = helper.make_graph(
        [helper.make_node("Concat", ["y_in", "y_in"], ["y_out"], axis=0),
         helper.make_node("Identity", ["c"], ["go"])],
        "body", [_value("i", I64, []), _value("c", B, []), _value("y_in", F, [2])],
        [_value("go", B, []), _value("y_out", F, [4])])
    model = _model([helper.make_node("Loop", ["m", "", "y0"], ["y"], body=body)],
                   [_value("y0", F, [2]), _value("m", I64, [])], [_value("y", F, ["n"])])
    with pytest.raises(graphrt.ConversionError,
                       match=r"'Loop #0'.*carried value 0 must keep its type, but the body "
                             r"turns float32\[2\] into float32\[4\]"):
        graphrt.from_onnx(model)


@pytest.mark.parametrize("directions", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_scan_in_every_direction_with_its_outputs_stacked(directions: tuple[int, int]) -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "row"], ["prod"])],
        "body", [_value("acc_in", F, [3]), _value("row", F, [3])],
        [_value("acc_out", F, [3]), _value("prod", F, [3])])
    model = _model([helper.make_node("Scan", ["init", "xs"], ["acc", "prods"], body=body,
                                     num_scan_inputs=1, scan_input_axes=[1],
                                     scan_input_directions=[directions[0]],
                                     scan_output_axes=[1],
                                     scan_output_directions=[directions[1]])],
                   [_value("init", F, [3]), _value("xs", F, [3, 4])],
                   [_value("acc", F, [3]), _value("prods", F, [3, 4])])
    rng = np.random.default_rng(sum(directions))
    _check(model, [{"init": rng.standard_normal(3).astype(np.float32),
                    "xs": rng.standard_normal((3, 4)).astype(np.float32)}])


def test_a_scripted_torch_model_with_a_data_dependent_if_and_loop(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")

    class Gate(torch.nn.Module):
        def forward(self, x):  # TorchScript reads an unannotated x as a Tensor
            if bool(x.sum() > 0):  # noqa: SIM108 (a branch, which TorchScript exports as If)
                y = x * 2.0
            else:
                y = x - 1.0
            for _ in range(5):
                if bool(y.abs().sum() > 40.0):
                    break
                y = y * 1.5 + 1.0
            return y

    scripted = torch.jit.script(Gate())
    path = tmp_path / "gate.onnx"
    x = torch.ones(4)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(scripted, (x,), path, input_names=["x"], output_names=["y"],
                          dynamo=False, opset_version=17)
    model = onnx.load(path)
    assert {"If", "Loop"} <= {node.op_type for node in model.graph.node}
    bundle = graphrt.from_onnx(model)
    for device in ("cpu", "sim"):
        module = bundle.create(device)
        for values in ([1, 2, 3, 4], [-1, -2, -3, -4], [0.1, 0, 0, 0], [20, 20, 1, 1]):
            given = torch.tensor(values, dtype=torch.float32)
            (got,) = module(x=given.numpy())
            np.testing.assert_allclose(np.asarray(got), scripted(given).numpy(), rtol=1e-6,
                                       err_msg=f"{device} {values}")


def test_a_run_time_loop_over_a_symbolic_batch_runs_at_every_batch() -> None:
    model = _while_loop(None)
    for value_info in [*model.graph.input, model.graph.output[0]]:
        value_info.type.tensor_type.shape.dim[0].dim_param = "batch"
    module = graphrt.from_onnx(model, dim_bounds={"batch": 4}).create("cpu")
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for batch in (1, 2, 3, 4):
        feed = {"x": rng.uniform(0, 40, (batch, 3)).astype(np.float32),
                "y0": rng.uniform(0, 1, (batch, 3)).astype(np.float32)}
        for got, expected in zip(module(**feed), session.run(None, feed), strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_a_run_time_loop_whose_body_depends_on_a_symbolic_size_is_refused_by_name() -> None:
    """The body is converted once, at the bounds: one whose steps would differ at another
    batch (a reshape to the carried value's own shape) cannot stay symbolic."""
    body = helper.make_graph(
        [helper.make_node("Shape", ["y_in"], ["shape"]),
         helper.make_node("Reshape", ["y_in", "flat"], ["f"]),
         helper.make_node("Reshape", ["f", "shape"], ["y_out"]),
         helper.make_node("Identity", ["c"], ["go"])],
        "body", [_value("i", I64, []), _value("c", B, []), _value("y_in", F, ["batch", 3])],
        [_value("go", B, []), _value("y_out", F, ["batch", 3])],
        [numpy_helper.from_array(np.array([-1], np.int64), "flat")])
    model = _model([helper.make_node("Loop", ["", "start", "y0"], ["y"], body=body)],
                   [_value("y0", F, ["batch", 3])], [_value("y", F, ["batch", 3])],
                   [numpy_helper.from_array(np.array(True), "start")])
    with pytest.raises(graphrt.ConversionError,
                       match=r"'Loop #0'.*attribute 'body' of op 'loop'.*changes with the "
                             r"symbolic dimensions"):
        graphrt.from_onnx(model, dim_bounds={"batch": 4})


@pytest.mark.parametrize("step, message", [
    ({"op": "add", "inputs": (2,), "outputs": (4,)}, r"step 0 \('add'\) has 1 inputs"),
    ({"op": "add", "inputs": (2, 3), "outputs": (4, 5)}, r"and 2 outputs; the op takes 2"),
    ({"op": "no_such_op", "inputs": (2,), "outputs": (4,)}, r"step 0 \('no_such_op'\).*unknown"),
    ({"op": "add", "inputs": (2, 9), "outputs": (4,)}, r"reads slot 9 before it is set"),
    ({"op": "cast", "inputs": (2,), "outputs": (4,), "attrs": {"dtype": 3}},
     r"step 0 \('cast'\)"),
])
def test_a_loop_body_a_bundle_gets_wrong_is_an_op_error(step: dict[str, Any],
                                                        message: str) -> None:
    """A bundle's loop body is checked when the graph is built, never at the first run."""
    from graphrt.ops import OpError, TensorType, get_op

    op = get_op("loop")
    attrs = op.attrs(n_carried=1, n_slots=6, results=(1, 4), body=(step,))
    types = [TensorType((), "int64"), TensorType((), "bool"), TensorType((2,), "float32"),
             TensorType((2,), "float32")]
    with pytest.raises(OpError, match=message):
        op.infer(types, attrs, [None] * 4)
