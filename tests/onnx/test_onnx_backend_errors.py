"""ONNX's backend API over graphrt says what is wrong with graphrt's own errors: a model that
cannot be read or checked, an unknown option, inputs of the wrong kind or shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper

import graphrt
import graphrt.onnx.backend as backend


def relu_model(dims: list[Any]) -> Any:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("model", [b"\x00garbage\xff", None, 5])
def test_prepare_refuses_what_is_no_model_with_a_graphrt_error(model: Any) -> None:
    with pytest.raises(graphrt.GraphrtError):
        backend.prepare(model)
    with pytest.raises(graphrt.GraphrtError):
        backend.run_model(model, [np.zeros(2, np.float32)])


def test_prepare_refuses_a_missing_path_and_a_model_the_checker_refuses(tmp_path: Path) -> None:
    with pytest.raises(graphrt.ConversionError, match="no such file"):
        backend.prepare(str(tmp_path / "missing.onnx"))
    broken = relu_model([2])
    broken.graph.node[0].input[0] = "nowhere"  # reads a value nothing makes
    with pytest.raises(graphrt.ConversionError, match="the ONNX checker refuses the model"):
        backend.prepare(broken)


def test_an_unknown_option_is_an_argument_error() -> None:
    with pytest.raises(graphrt.ArgumentError, match=r"prepare\(\.\.\., bogus=\.\.\.\): "
                                                    r"expected one of the options"):
        backend.prepare(relu_model([2]), bogus=1)
    rep = backend.prepare(relu_model([2]), fuse=False)
    np.testing.assert_array_equal(rep.run([np.array([-1, 2], np.float32)])[0], [0, 2])


def test_run_refuses_inputs_of_the_wrong_kind_and_says_which() -> None:
    rep = backend.prepare(relu_model([2]))
    for given in (None, 5, "x"):
        with pytest.raises(graphrt.ArgumentError, match=r"run\(inputs\)"):
            rep.run(given)
    with pytest.raises(graphrt.InputError, match="input 'x': not an array"):
        rep.run([[[1.0], [1.0, 2.0]]])  # ragged
    with pytest.raises(graphrt.InputError, match="the model has no input 'z'"):
        rep.run({"z": np.zeros(2, np.float32)})


def test_a_symbolic_model_checks_rank_and_fixed_sizes_before_specializing() -> None:
    rep = backend.prepare(relu_model(["batch", 3]))
    np.testing.assert_array_equal(rep.run([np.ones((4, 3), np.float32)])[0], np.ones((4, 3)))
    for shape in ((3,), (), (2, 3, 1), (2, 4)):
        with pytest.raises(graphrt.InputError,
                           match=r"input 'x': the model declares shape \[batch, 3\]"):
            rep.run([np.ones(shape, np.float32)])


def sized_model(node: Any, inits: list[Any], dims: list[Any], out_rank: int) -> Any:
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       [f"o{i}" for i in range(out_rank)])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


I64 = TensorProto.INT64
SIZED = {
    "a negative input dimension": (
        sized_model(helper.make_node("Relu", ["x"], ["y"]), [], [-1, 3], 2),
        r"graph input 'x' has shape \[-1, 3\], with a negative dimension"),
    "an input of 2**82 bytes": (
        sized_model(helper.make_node("Relu", ["x"], ["y"]), [], [2**40, 2**40], 2),
        r"graph input 'x' has shape \[1099511627776, 1099511627776\] float32: "
        r"4,835,703,278,458,516,698,824,704 bytes, more than the"),
    "Pad to 2**62": (
        sized_model(helper.make_node("Pad", ["x", "p"], ["y"]),
                    [helper.make_tensor("p", I64, [2], [0, 2**62])], [2], 1),
        r"node 0 'Pad #0' \(Pad\): output 0 of op 'pad' would have shape \[4611686018427387906\]"),
    "Tile by 2**62": (
        sized_model(helper.make_node("Tile", ["x", "r"], ["y"]),
                    [helper.make_tensor("r", I64, [1], [2**62])], [2], 1),
        r"\(Tile\): output 0 of op 'tile' would have shape \[9223372036854775808\]"),
    "Resize by 1e9": (
        sized_model(helper.make_node("Resize", ["x", "", "s"], ["y"]),
                    [helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 1e9, 1e9])],
                    [1, 1, 2, 2], 4),
        r"\(Resize\): output 0 of op 'resize' would have shape \[1, 1, 2000000000, 2000000000\]"),
}


@pytest.mark.parametrize("case", sorted(SIZED))
def test_a_size_no_device_holds_or_a_negative_dimension_is_a_conversion_error(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, message = SIZED[case]
    with pytest.raises(graphrt.ConversionError, match=message):
        graphrt.from_onnx(model)
    import onnx

    from graphrt.cli import main

    onnx.save(model, tmp_path / "m.onnx")  # the command line says so, with no traceback
    assert main(["convert", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.grb")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ConversionError: ") and "Traceback" not in err


def test_an_output_the_process_cannot_hold_is_a_placement_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rep downloads each device output for the caller; a host that cannot hold it is a
    PlacementError naming the output (was: a bare MemoryError, found by the fuzz suite)."""
    from graphrt.devices.cpu_backend import CpuBackend

    rep = backend.prepare(relu_model([2, 3]), "SIM")
    x = np.ones((2, 3), np.float32)
    allocate = CpuBackend.allocate

    def refuse_outputs(self: CpuBackend, nbytes: int) -> Any:
        if nbytes == x.nbytes:
            raise MemoryError("no room")
        return allocate(self, nbytes)

    monkeypatch.setattr(CpuBackend, "allocate", refuse_outputs)
    with pytest.raises(graphrt.PlacementError, match=r"cannot allocate 24 bytes on cpu:0 for "
                       r"output 0 \(MemoryError: no room\)"):
        rep.run([x])
    monkeypatch.setattr(CpuBackend, "allocate", allocate)
    np.testing.assert_array_equal(rep.run([x])[0], x)  # and the rep still runs
