"""The ONNX frontend's own behavior: loading, opsets, errors, bundles, symbolic dims, backend,
and the ``graphrt convert`` command. Op semantics are tested per family in test_onnx_*.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_harness import run_cli

import graphrt

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import graphrt.onnx.backend as backend  # noqa: E402
from graphrt.onnx.symbolic import sample_points  # noqa: E402


def tiny_model(dims: list[Any] | None = None, opset: int = 17) -> Any:
    """y = relu(x + w), x of shape ``dims`` (default [2, 3])."""
    dims = dims or [2, 3]
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"], name="add"),
         helper.make_node("Relu", ["t"], ["y"], name="relu")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
        [helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, -5.0, 2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             producer_name="tests", producer_version="1.0")


def expected(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.maximum(x + np.array([1.0, -5.0, 2.0], "float32"), 0)


def test_from_onnx_makes_a_runnable_bundle_with_the_source_recorded(tmp_path: Path) -> None:
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), path)
    bundle = graphrt.from_onnx(path)
    assert bundle.kind == "memory"
    x = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    (y,) = bundle.create("cpu")(x=x)
    np.testing.assert_allclose(y, expected(x))
    source = bundle.metadata["source"]
    assert isinstance(source, dict)
    assert source["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert source["opset_imports"] == {"": 17}
    assert source["producer"] == "tests 1.0"
    memory = bundle.metadata["memory"]
    assert isinstance(memory, dict) and memory["planned_bytes"] >= memory["lower_bound_bytes"]


@pytest.mark.parametrize("form", ["path", "bytes", "proto"])
def test_every_model_form_converts_the_same(tmp_path: Path, form: str) -> None:
    model = tiny_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    given = {"path": str(path), "bytes": path.read_bytes(), "proto": model}[form]
    assert graphrt.from_onnx(given).graph.entries == graphrt.from_onnx(path).graph.entries


def test_saved_bundle_has_the_same_digest_and_runs_without_onnx(tmp_path: Path) -> None:
    bundle = graphrt.from_onnx(tiny_model())
    written = bundle.save(tmp_path / "tiny.grb")
    assert graphrt.load_bundle(written).digest == bundle.digest
    script = (
        "import sys; sys.modules['onnx'] = None\n"
        "import numpy as np, graphrt\n"
        f"mod = graphrt.load_bundle({str(written)!r}).create('cpu')\n"
        "print(mod(x=np.ones((2, 3), 'float32'))[0].tolist())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == [[2.0, 0.0, 3.0], [2.0, 0.0, 3.0]]


def test_an_output_is_found_by_its_onnx_name() -> None:
    mod = graphrt.from_onnx(tiny_model()).create("cpu")
    mod.run(x=np.ones((2, 3), "float32"))
    np.testing.assert_array_equal(mod.get_output("y"), expected(np.ones((2, 3), "float32")))


def test_every_unsupported_op_is_listed_at_once() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="fine"),
         helper.make_node("StringNormalizer", ["s"], ["b"], name="strings"),
         helper.make_node("Frobnicate", ["a"], ["c"], name="custom", domain="com.example")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
              helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("b", TensorProto.STRING, [2]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    with pytest.raises(graphrt.ConversionError) as caught:
        graphrt.from_onnx(model)
    message = str(caught.value)
    assert "2 unsupported" in message
    assert "StringNormalizer (opset 17) at node 1 'strings'" in message
    assert "com.example.Frobnicate" in message and "'custom'" in message
    assert "Relu" not in message


def test_an_opset_newer_than_known_is_refused_with_the_range() -> None:
    with pytest.raises(graphrt.ConversionError, match=r"opset 99 .* opsets 7 to \d+"):
        graphrt.from_onnx(tiny_model(opset=99))


def test_an_opset_older_than_7_is_upgraded_by_onnx_and_recorded() -> None:
    bundle = graphrt.from_onnx(tiny_model(opset=6))
    source = bundle.metadata["source"]
    assert isinstance(source, dict) and source["upgraded_from_opset"] == 6
    x = np.ones((2, 3), "float32")
    np.testing.assert_allclose(bundle.create("cpu")(x=x)[0], expected(x))


def test_a_converter_takes_the_model_opset_not_another_versions() -> None:
    from graphrt.onnx.model import OnnxNode
    from graphrt.onnx.registry import CONVERTERS, Converter, check_supported, converter

    @converter("TestOnlyOp", since=13)
    def new_semantics(b: Any, n: Any) -> list[str]:  # pragma: no cover
        return []

    try:
        node = OnnxNode("TestOnlyOp", "n", ("x",), ("y",), {}, 11, 0)
        with pytest.raises(graphrt.ConversionError, match=r"opset 11.*supported at opsets 13"):
            check_supported([node])
        with pytest.raises(ValueError, match="overlap"):
            converter("TestOnlyOp", since=15)(new_semantics)
        assert isinstance(CONVERTERS["TestOnlyOp"][0], Converter)
    finally:
        del CONVERTERS["TestOnlyOp"]


@pytest.mark.parametrize("model, match", [
    (b"not a model at all", "not an ONNX model|no graph"),
    ("/nonexistent/model.onnx", "no such file"),
])
def test_what_is_not_a_model_is_a_conversion_error(model: Any, match: str) -> None:
    with pytest.raises(graphrt.ConversionError, match=match):
        graphrt.from_onnx(model)


def test_what_is_not_a_path_bytes_or_model_is_an_argument_error() -> None:
    with pytest.raises(graphrt.ArgumentError, match=r"from_onnx\(model\): expected a path, "
                       r"bytes or an onnx\.ModelProto, given 12"):
        graphrt.from_onnx(12)  # type: ignore[arg-type]


def test_a_graph_the_checker_refuses_is_a_conversion_error() -> None:
    model = tiny_model()
    model.graph.node[1].input[0] = "undefined"
    with pytest.raises(graphrt.ConversionError, match="checker refuses"):
        graphrt.from_onnx(model)


def test_a_symbolic_dim_without_a_size_names_it_and_the_option() -> None:
    with pytest.raises(graphrt.ConversionError,
                       match=r"'x': dimension 0 is symbolic \('batch'\).*dim_bounds"):
        graphrt.from_onnx(tiny_model(["batch", 3]))
    with pytest.raises(graphrt.ConversionError, match="no graph input has that symbolic"):
        graphrt.from_onnx(tiny_model(["batch", 3]), dim_bounds={"seq": 4})
    with pytest.raises(graphrt.ConversionError, match="positive int"):
        graphrt.from_onnx(tiny_model(["batch", 3]), dim_bounds={"batch": 0})


def test_a_bounded_symbolic_dim_runs_at_every_size_up_to_its_bound() -> None:
    bundle = graphrt.from_onnx(tiny_model(["batch", 3]), dim_bounds={"batch": 16})
    graph = json.loads(bundle.documents["graph.json"])
    assert graph["shape_vars"] == {"batch": {"min": 1, "max": 16}}
    assert ["batch", 3] in graph["attrs"]["shape"][1]
    mod = bundle.create("cpu")
    for batch in (1, 5, 16):
        x = np.random.default_rng(batch).standard_normal((batch, 3)).astype("float32")
        np.testing.assert_allclose(mod(x=x)[0], expected(x))
    with pytest.raises(graphrt.InputError, match="batch"):
        mod(x=np.ones((17, 3), "float32"))


def test_shapes_fix_a_symbolic_input() -> None:
    bundle = graphrt.from_onnx(tiny_model(["batch", 3]), shapes={"x": [4, 3]})
    assert not bundle.graph.is_dynamic
    with pytest.raises(graphrt.ConversionError, match="'nope' is not a graph input"):
        graphrt.from_onnx(tiny_model(), shapes={"nope": [1]})


def test_sample_points_vary_one_variable_at_a_time_then_check() -> None:
    assert sample_points({}) == [{}]
    assert sample_points({"n": 1}) == [{"n": 1}]
    assert sample_points({"n": 2}) == [{"n": 2}, {"n": 1}]
    assert sample_points({"m": 4, "n": 8}) == [
        {"m": 4, "n": 8}, {"m": 3, "n": 8}, {"m": 4, "n": 7}, {"m": 2, "n": 6}]


def test_backend_runs_lists_and_dicts_and_reports_devices() -> None:
    x = np.array([[-1.0, 0.5, 3.0]] * 2, "float32")
    rep = backend.prepare(tiny_model(), "CPU")
    np.testing.assert_allclose(rep.run([x])[0], expected(x))
    np.testing.assert_allclose(rep.run({"x": x})[0], expected(x))
    assert backend.supports_device("CPU")
    assert backend.supports_device("SIM")
    with pytest.raises(graphrt.ConversionError, match="no value given for input"):
        rep.run({})


def test_backend_specializes_symbolic_inputs_per_shape() -> None:
    rep = backend.prepare(tiny_model(["batch", 3]))
    for batch in (1, 3):
        x = np.ones((batch, 3), "float32")
        np.testing.assert_allclose(rep.run([x])[0], expected(x))


def test_backend_runs_on_sim() -> None:
    x = np.ones((2, 3), "float32")
    np.testing.assert_allclose(backend.run_model(tiny_model(), [x], "SIM")[0], expected(x))


def test_convert_command_writes_a_bundle_and_reports_memory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(["batch", 3]), model)
    status, out, err = run_cli(capsys, "convert", str(model), "-o", str(tmp_path / "t.grb"),
                               "--dim", "batch=8")
    assert status == 0, err
    assert f"wrote {tmp_path / 't.grb'}" in out and "activation memory: planned" in out
    mod = graphrt.load_bundle(tmp_path / "t.grb").create("cpu")
    np.testing.assert_allclose(mod(x=np.ones((8, 3), "float32"))[0],
                               expected(np.ones((8, 3), "float32")))
    status, out, err = run_cli(capsys, "convert", str(model), "-o", str(tmp_path / "u.grb"))
    assert status == 1 and "symbolic ('batch')" in err and "Traceback" not in err
    status, out, err = run_cli(capsys, "convert", str(model), "-o", str(tmp_path / "p.grb"),
                               "--dim", "batch=8", "--devices", "sim,cpu", "--place", "Relu=cpu")
    assert status == 0, err
    assert "placement:" in out and "override by op type Relu" in out and "__copy" in out


def test_the_convert_command_speaks_in_its_own_flags(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its errors name the command's options (--dim, --shape, --overwrite), not Python's;
    --shape fixes an input's shape as shapes= does."""
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(["batch", 3]), model)
    status, _, err = run_cli(capsys, "convert", str(model), "-o", str(tmp_path / "u.grb"))
    assert status == 1 and "--dim batch=64 or --shape x=D0,D1,..." in err
    status, _, err = run_cli(capsys, "convert", str(model), "-o", str(tmp_path / "s.grb"),
                             "--shape", "x=5,3")
    assert status == 0, err
    bundle = graphrt.load_bundle(tmp_path / "s.grb")
    assert not bundle.graph.is_dynamic and bundle.graph.entries[0].shape == (5, 3)
    status, _, err = run_cli(capsys, "convert", str(model), "-o", str(tmp_path / "s.grb"),
                             "--shape", "x=5,3")
    assert status == 1 and "--overwrite" in err
    for option, value, said in (("--shape", "x=5,three", "expected NAME=D0,D1,..."),
                                ("--dim", "batch=0", "NAME=BOUND (the largest size")):
        with pytest.raises(SystemExit) as usage:  # argparse: status 2 and the usage
            run_cli(capsys, "convert", str(model), "-o", str(tmp_path / "b.grb"), option, value)
        assert usage.value.code == 2 and said in capsys.readouterr().err


def test_the_docs_table_of_supported_ops_is_generated_from_the_code() -> None:
    from graphrt.onnx.optable import update

    docs = Path(__file__).resolve().parents[2] / "docs" / "onnx.md"
    text = docs.read_text()
    assert update(text) == text, "run: python -m graphrt.onnx.optable docs/onnx.md"


def test_a_function_reading_two_symbolic_values_sees_both_at_the_run_shapes() -> None:
    # Each input's new shape is bound as it is set; the step reading both (take + add, fused)
    # must be prepared once both are, not for a mix of the old and the new shape.
    rng = np.random.default_rng(0)
    w, p = (rng.standard_normal((n, 8)).astype("float32") for n in (100, 50))
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "ids"], ["h"]),
         helper.make_node("Gather", ["p", "pos"], ["q"]),
         helper.make_node("Add", ["h", "q"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("pos", TensorProto.INT64, [1, "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(p, "p")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = graphrt.from_onnx(model, dim_bounds={"batch": 4, "seq": 16}).create("cpu")
    for batch, seq in ((2, 5), (4, 16), (1, 3)):
        ids = rng.integers(0, 100, (batch, seq))
        pos = np.arange(seq)[None]
        np.testing.assert_allclose(mod(ids=ids, pos=pos)[0], w[ids] + p[pos])


def test_a_constant_cut_to_a_symbolic_length_follows_it_at_run_time() -> None:
    # As torch exports position embeddings: table[:seq] with seq = Shape(x)[1], added to x.
    table = np.random.default_rng(1).standard_normal((32, 4)).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["shape"]),
         helper.make_node("Gather", ["shape", "one"], ["seq"]),
         helper.make_node("Unsqueeze", ["seq", "zero"], ["end"]),
         helper.make_node("Slice", ["table", "start", "end", "zero"], ["rows"]),
         helper.make_node("Add", ["x", "rows"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        [onnx.numpy_helper.from_array(table, "table"),
         helper.make_tensor("one", TensorProto.INT64, [], [1]),
         helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
         helper.make_tensor("start", TensorProto.INT64, [1], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    bundle = graphrt.from_onnx(model, dim_bounds={"batch": 2, "seq": 32})
    ops = [step["op"] for f in json.loads(bundle.documents["lib.json"])["functions"].values()
           for step in f["body"]]
    assert "slice_like" in ops
    mod = bundle.create("cpu")
    for batch, seq in ((1, 5), (2, 32), (2, 17)):
        x = np.ones((batch, seq, 4), "float32")
        np.testing.assert_allclose(mod(x=x)[0], x + table[:seq])


def test_non_finite_float_attributes_survive_the_lib_json() -> None:
    import orjson

    from graphrt.bundle import bundle_from_parts, prepare_bundle
    from graphrt.onnx.builder import Builder, TensorType
    from graphrt.onnx.emit import emit

    b = Builder()
    x = b.input("x", TensorType((3,), "float32"))
    (y,) = b.op("clip", [x], {"a_min": float("-inf"), "a_max": 2.0})
    (z,) = b.op("leaky_relu", [y], {"alpha": float("nan")})
    emitted = emit(b, [y, z], [[0], [1]], ["y", "z"])
    assert b'"-inf"' in orjson.dumps(emitted.lib) and b'"nan"' in orjson.dumps(emitted.lib)
    bundle = bundle_from_parts(prepare_bundle(emitted.graph, orjson.dumps(emitted.lib)))
    y_out, z_out = bundle.create("cpu")(x=np.array([-1e30, 0.0, 5.0], "float32"))
    np.testing.assert_array_equal(y_out, np.array([-1e30, 0.0, 2.0], "float32"))
    assert np.isnan(z_out[0]) and z_out[2] == 2.0  # negative inputs times a NaN slope


@pytest.mark.parametrize("options, match", [
    ({"shapes": {"x": ["a", 3]}}, r"shapes\['x'\] must be a list of non-negative ints"),
    ({"shapes": {"x": 5}}, r"shapes\['x'\] must be a list"),
    ({"constants": {"x": "abc"}}, r"constants\['x'\] cannot be a float32"),
    ({"constants": {"x": [[1, 2], [3]]}}, r"constants\['x'\] cannot be a float32"),
    ({"dim_bounds": 5}, "dim_bounds must be a mapping"),
    ({"shapes": [1, 3]}, "shapes must be a mapping"),
])
def test_bad_options_are_conversion_errors(options: dict[str, Any], match: str) -> None:
    with pytest.raises(graphrt.ConversionError, match=match):
        graphrt.from_onnx(tiny_model(), **options)
