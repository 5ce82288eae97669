"""The provider chains: which provider prepares what on each device kind, what placement
asks, and how a missing kernel is reported."""

from __future__ import annotations

import numpy as np
import pytest

import graphrt
from graphrt.kernels import NO_EPILOGUE, Epilogue, KernelChain, ReferenceProvider, chain, supports
from graphrt.kernels.cpu import CpuProvider
from graphrt.kernels.cuda import CudaProvider
from graphrt.lib import Library
from graphrt.ops import OPS, TensorType, get_op

F32 = TensorType((2, 8), "float32")


def test_each_kind_has_its_chain_and_the_reference_comes_last() -> None:
    assert [p.name for p in chain("cpu", np).providers] == ["cpu", "reference"]
    assert [p.name for p in chain("sim", np).providers] == ["reference"]
    assert [p.name for p in chain("cuda", np).providers] == ["cuda", "reference"]


def test_sim_runs_only_the_references() -> None:
    softmax = get_op("softmax")
    prepared = chain("sim", np).prepare(softmax, softmax.attrs(), [F32], [F32])
    assert prepared is not None and prepared.provider == "reference"
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    out = np.empty_like(x)
    prepared.call(x, out)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-6)


def test_the_cpu_prepares_its_compiled_kernels_where_they_apply() -> None:
    pytest.importorskip("numba")
    cpu = chain("cpu", np)
    softmax = get_op("softmax")
    assert cpu.prepare(softmax, softmax.attrs(), [F32], [F32]).provider == "cpu"
    # not the last axis: the row kernel does not apply, the reference runs
    along_rows = softmax.attrs(axis=0)
    assert cpu.prepare(softmax, along_rows, [F32], [F32]).provider == "reference"
    # an op the cpu has no kernel for
    relu = get_op("relu")
    assert cpu.prepare(relu, relu.attrs(), [F32], [F32]).provider == "reference"


def test_an_epilogue_no_provider_takes_prepares_nothing() -> None:
    conv = get_op("conv2d")
    types = [TensorType((1, 8, 6, 6), "float32"), TensorType((16, 8, 3, 3), "float32")]
    out = TensorType((1, 16, 4, 4), "float32")
    sim = chain("sim", np)
    assert not sim.takes_epilogue(conv)
    assert sim.prepare(conv, conv.attrs(), types, [out], Epilogue(relu=True)) is None
    assert sim.prepare(conv, conv.attrs(), types, [out], NO_EPILOGUE) is not None
    assert chain("cpu", np).takes_epilogue(conv)


def test_placement_asks_the_chain_which_ops_a_kind_runs() -> None:
    bf16 = get_op("cast_bfloat16")
    assert not supports("cuda", bf16)
    assert supports("cpu", bf16) and supports("sim", bf16)
    assert all(supports(kind, op) for kind in ("cpu", "sim") for op in OPS.values())
    assert not CudaProvider().supports(bf16) and CpuProvider().supports(get_op("conv2d"))


def test_a_function_whose_op_its_device_cannot_run_names_the_function_step_and_node() -> None:
    lib = Library()
    fn = lib.define("to_bf16", {"inputs": ["x"], "outputs": ["y"], "body": [
        {"op": "cast_bfloat16", "inputs": ["x"], "outputs": ["y"],
         "attrs": {"dtype": "bfloat16"}}]})
    no_bf16 = KernelChain("cuda", (ReferenceProvider(CudaProvider.UNSUPPORTED),), np)
    with pytest.raises(graphrt.KernelNotFoundError,
                       match=r"'to_bf16' step 0 \(op 'cast_bfloat16'\) at node 3: no cuda "
                             r"kernel runs op 'cast_bfloat16'"):
        fn.lower([F32], [TensorType((2, 8), "bfloat16")], kernels=no_bf16, where="node 3")
    lowered = fn.lower([F32], [TensorType((2, 8), "bfloat16")], kernels=chain("sim", np),
                       where="node 3")
    assert len(lowered.calls) == 1


def test_a_convolution_too_large_for_its_device_is_refused_before_any_kernel_plans_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A 3x3 convolution over [1, 1, 4, 2**28]: the devices' capacity is checked before the
    kernels are prepared, so it is a PlacementError, not a MemoryError from building the
    direct kernel's per-pixel tables (8 GiB here)."""
    from builders import GraphBuilder

    from graphrt.devices import CpuBackend

    g = GraphBuilder()
    x, w = g.input("x", [1, 1, 4, 2**28]), g.input("w", [1, 1, 3, 3])
    y = g.op("c", "conv", [x, w], shape=[1, 1, 4, 2**28])
    lib = Library()
    lib.define("conv", {"inputs": ["a", "b"], "outputs": ["y"], "body": [
        {"op": "conv2d", "inputs": ["a", "b"], "outputs": ["y"],
         "attrs": {"padding": [1, 1, 1, 1]}}]})
    monkeypatch.setattr(CpuBackend, "capacity", lambda self: 1 << 30)
    with pytest.raises(graphrt.PlacementError, match="beyond 1073741824 bytes"):
        graphrt.create(g.build(heads=[y]), lib, "cpu")


def test_the_cpu_leaves_a_convolution_with_more_output_pixels_than_its_tables_take() -> None:
    from graphrt.kernels.cpu.provider import MAX_DIRECT_PIXELS

    conv = get_op("conv2d")
    wide = MAX_DIRECT_PIXELS + 8
    types = [TensorType((1, 1, 1, wide), "float32"), TensorType((1, 1, 1, 1), "float32")]
    out = TensorType((1, 1, 1, wide), "float32")
    cpu = CpuProvider()
    assert cpu.prepare(conv, conv.attrs(), types, [out], NO_EPILOGUE, dynamic=False,
                       xp=np) is None
    assert not cpu.crew


def test_on_cuda_matrix_products_are_not_recorded_and_convolutions_wait_for_cudnn() -> None:
    """cuda's reference multiplies matrices through CuPy, which refuses cuBLAS under stream
    capture: those steps run between recorded stretches. Without cuDNN's frontend the
    convolution is the reference's too (with it, tests/kernels/cuda/test_cudnn_conv.py)."""
    from graphrt.kernels.cuda.cudnn_conv import cudnn_module

    cuda = chain("cuda", np)
    x, w = TensorType((1, 2, 5, 5), "float32"), TensorType((3, 2, 3, 3), "float32")
    conv = get_op("conv2d")
    out = conv.infer([x, w], conv.attrs(), [None, None])
    if cudnn_module() is None:
        prepared = cuda.prepare(conv, conv.attrs(), [x, w], out)
        assert prepared is not None and prepared.provider == "reference"
        assert not prepared.capturable
        assert cuda.prepare(conv, conv.attrs(), [x, w], out, Epilogue(relu=True)) is None
    a, b = TensorType((4, 8), "float32"), TensorType((6, 8), "float32")
    dense = get_op("dense")
    dense_out = dense.infer([a, b], dense.attrs(), [None, None])
    prepared = cuda.prepare(dense, dense.attrs(), [a, b], dense_out)
    assert prepared is not None and not prepared.capturable
    relu = get_op("relu")
    prepared = cuda.prepare(relu, relu.attrs(), [a], [a])
    assert prepared is not None and prepared.capturable
