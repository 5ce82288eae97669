"""Planning the fusion of elementwise runs (pure; the cupy kernel itself needs a GPU)."""

from __future__ import annotations

from graphrt.kernels.cuda.elementwise import kernel_source
from graphrt.ops import ElementwiseRun, TensorType, elementwise_runs

F32 = TensorType((4, 3), "float32")


def test_a_chain_of_elementwise_steps_is_one_run() -> None:
    steps = [("in0 + in1", ("a", "b"), ("t0",)),
             ("in0 * in1", ("t0", "a"), ("t1",)),
             ("in0 > 0 ? in0 : 0", ("t1",), ("y",))]
    runs = elementwise_runs(steps, exported={"y"})
    assert runs == [ElementwiseRun(0, 2, ("a", "b"), "y")]
    in_params, out_params, body = kernel_source(runs[0], steps, dict.fromkeys(
        ["a", "b", "t0", "t1", "y"], F32))
    assert (in_params, out_params) == ("float32 x0, float32 x1", "float32 y")
    assert body.splitlines() == ["float t0 = (float)(x0 + x1);",
                                 "float t1 = (float)(t0 * x0);",
                                 "y = (float)(t1 > 0 ? t1 : 0);"]


def test_runs_stop_at_non_elementwise_steps_and_exported_intermediates() -> None:
    steps = [("in0 + in1", ("a", "b"), ("t0",)),
             ("-in0", ("t0",), ("t1",)),
             (None, ("t1", "w"), ("t2",)),          # e.g. dense
             ("in0 + in1", ("t2", "c"), ("t3",)),
             ("in0 * in0", ("t3",), ("t4",)),        # t3 is also a function output
             ("in0 - in1", ("t4", "t2"), ("y",))]
    runs = elementwise_runs(steps, exported={"t3", "y"})
    assert runs == [ElementwiseRun(0, 1, ("a", "b"), "t1"),
                    ElementwiseRun(4, 5, ("t3", "t2"), "y")]


def test_an_intermediate_used_after_the_run_ends_it() -> None:
    steps = [("in0 + in1", ("a", "b"), ("t0",)),
             ("-in0", ("t0",), ("t1",)),
             (None, ("t0", "t1"), ("y",))]          # t0 is read outside the run
    assert elementwise_runs(steps, exported={"y"}) == []  # a run of one is not worth fusing


def test_mixed_dtypes_are_named_in_c() -> None:
    steps = [("in0 > in1", ("a", "b"), ("m",)), ("in0 ? in1 : in2", ("m", "a", "b"), ("y",))]
    types = {"a": TensorType((3,), "float64"), "b": TensorType((3,), "float64"),
             "m": TensorType((3,), "bool"), "y": TensorType((3,), "float64")}
    (run,) = elementwise_runs(steps, exported={"y"})
    assert kernel_source(run, steps, types) == (
        "float64 x0, float64 x1", "float64 y",
        "bool t0 = (bool)(x0 > x1);\ny = (double)(t0 ? x0 : x1);")


def test_a_name_read_twice_by_one_step_is_one_input() -> None:
    steps = [("in0 * in1", ("x", "x"), ("t",)), ("in0 - in1", ("t", "m"), ("y",))]
    assert elementwise_runs(steps, exported={"y"}) == [ElementwiseRun(0, 1, ("x", "m"), "y")]


def test_float16_runs_compute_in_float_and_round_once_on_store() -> None:
    steps = [("in0 + in1", ("a", "b"), ("t0",)), ("erf(in0)", ("t0",), ("y",))]
    half = TensorType((3,), "float16")
    (run,) = elementwise_runs(steps, exported={"y"})
    assert kernel_source(run, steps, dict.fromkeys(["a", "b", "t0", "y"], half)) == (
        "float16 x0, float16 x1", "float16 y",
        "float t0 = (float)(((float)x0) + ((float)x1));\ny = (float16)(erf(t0));")
