"""Host <-> device copies as strict as cupy's, on the sim device.

``cupy.ndarray.set`` and ``ndarray.get(out=)`` refuse a host array of another shape or dtype (a
0-d param set from a 1-element array failed so on a GPU), so the sim backend refuses every such
pair too; these tests show it does, and that what graphrt really copies (0-d and 1-element
params, non-contiguous inputs and out buffers, ``__copy`` nodes between entries that hold the
same bytes in other shapes) passes and matches cpu.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import GraphBuilder

import graphrt
from graphrt.devices import backend_for, copier

SIM = graphrt.sim(0)
HOST = graphrt.cpu(0)
MODELS = Path(__file__).resolve().parents[2] / "examples" / "onnx" / "models.py"


def on_sim(values: np.ndarray) -> Any:
    backend = backend_for(SIM)
    array = backend.view(backend.allocate(values.nbytes), values.shape, values.dtype)
    array.view(np.ndarray)[...] = values
    return array


# --------------------------------------------------------------------------------------------
# The backend refuses what cupy refuses


@pytest.mark.parametrize(("src_shape", "dst_shape"), [((1,), ()), ((), (1,)), ((2, 3), (6,)),
                                                      ((6,), (3, 2))], ids=str)
def test_upload_download_and_copy_refuse_another_shape(src_shape: tuple[int, ...],
                                                       dst_shape: tuple[int, ...]) -> None:
    host = np.ones(src_shape, "float32")
    differ = re.escape(f"source float32{list(src_shape)} and destination "
                       f"float32{list(dst_shape)} differ")
    with pytest.raises(AssertionError, match=differ):
        copier(HOST, SIM)(host, on_sim(np.zeros(dst_shape, "float32")))
    with pytest.raises(AssertionError, match=differ):
        copier(SIM, HOST)(on_sim(host), np.zeros(dst_shape, "float32"))
    with pytest.raises(AssertionError, match=differ):
        copier(SIM, SIM)(on_sim(host), on_sim(np.zeros(dst_shape, "float32")))
    with pytest.raises(AssertionError, match=differ):
        copier(SIM, graphrt.sim(1))(on_sim(host), on_sim(np.zeros(dst_shape, "float32")))


def test_upload_and_download_refuse_another_dtype() -> None:
    with pytest.raises(AssertionError, match=r"source int32\[3\] and destination float32\[3\]"):
        copier(HOST, SIM)(np.ones(3, "int32"), on_sim(np.zeros(3, "float32")))
    with pytest.raises(AssertionError, match=r"source float32\[3\] and destination float64\[3\]"):
        copier(SIM, HOST)(on_sim(np.ones(3, "float32")), np.zeros(3, "float64"))


def test_the_host_side_must_be_numpy_and_the_device_side_sim() -> None:
    with pytest.raises(AssertionError, match=r"source must be a host numpy\.ndarray"):
        backend_for(SIM).upload(on_sim(np.ones(3, "float32")), on_sim(np.zeros(3, "float32")))
    with pytest.raises(AssertionError, match="destination must be a sim array"):
        backend_for(SIM).upload(np.ones(3, "float32"), np.zeros(3, "float32"))
    with pytest.raises(AssertionError, match=r"destination must be a host numpy\.ndarray"):
        backend_for(SIM).download(on_sim(np.ones(3, "float32")), on_sim(np.zeros(3, "float32")))


def test_a_refused_copy_writes_nothing_and_counts_nothing() -> None:
    target = on_sim(np.zeros((), "float32"))
    graphrt.sim_counters(SIM).reset()
    with pytest.raises(AssertionError):
        copier(HOST, SIM)(np.ones(1, "float32"), target)
    assert float(target) == 0.0
    assert graphrt.sim_counters(SIM).uploads == 0


def test_0d_and_non_contiguous_arrays_copy_both_ways() -> None:
    scalar = on_sim(np.zeros((), "float32"))
    copier(HOST, SIM)(np.array(2.5, "float32"), scalar)
    back = np.zeros((), "float32")
    copier(SIM, HOST)(scalar, back)
    assert back.shape == () and float(back) == 2.5

    values = np.arange(12, dtype="float32").reshape(3, 4)
    transposed = on_sim(np.zeros((4, 3), "float32"))
    copier(HOST, SIM)(values.T, transposed)  # a non-contiguous source
    strided = np.zeros((4, 6), "float32")
    copier(SIM, HOST)(transposed, strided[:, ::2])  # a non-contiguous destination
    np.testing.assert_array_equal(strided[:, ::2], values.T)
    assert not strided[:, 1::2].any()


# --------------------------------------------------------------------------------------------
# Graphs: what the executor copies has the destination's shape


def scale_shift(x: Any, scale: Any, shift: Any, out: Any) -> None:
    """``x * scale + shift``: a scalar scale (0-d) and a 1-element shift, as BERT has."""
    np.multiply(x, scale, out=out)
    np.add(out, shift, out=out)


def scalar_graph(accelerator: int) -> dict[str, Any]:
    """x [4, 3] and the params scale [] and shift [1] on ``accelerator`` (a device type code),
    ``scale_shift`` there, its result copied to the host; outputs: the host copy, the
    accelerator's result and the 0-d param itself."""
    b = GraphBuilder(device_index=True)
    x = b.input("x", [4, 3], dev=accelerator)
    scale = b.input("scale", [], dev=accelerator)
    shift = b.input("shift", [1], dev=accelerator)
    y = b.op("scaled", "scale_shift", [x, scale, shift], shape=[4, 3], dev=accelerator)
    host = b.op("to_host", "__copy", [y], shape=[4, 3], dev=1)
    return b.build([host, y, scale])


def test_0d_and_1_element_params_and_a_non_contiguous_input_on_sim_match_cpu() -> None:
    lib = graphrt.Library({"scale_shift": scale_shift})
    params = {"scale": np.array(0.125, "float32"), "shift": np.array([-1.5], "float32")}
    x = np.arange(12, dtype="float32").reshape(3, 4).T  # non-contiguous
    results = []
    for accelerator in (graphrt.devices.CPU, graphrt.devices.SIM):
        mod = graphrt.create(scalar_graph(accelerator), lib, HOST, SIM)
        mod.load_params(params)  # publish_params: a 0-d and a 1-element upload
        mod.set_input("x", x)
        mod.run()
        outs = [np.zeros((4, 6), "float32")[:, ::2], np.zeros((4, 3), "float32"),
                np.zeros((), "float32")]
        for index, out in enumerate(outs):  # downloads into a strided and a 0-d buffer
            assert mod.get_output(index, out=out) is out
        results.append(outs)
    want = x * np.float32(0.125) - np.float32(1.5)
    for outs in results:
        np.testing.assert_array_equal(outs[0], want)
        np.testing.assert_array_equal(outs[1], want)
        assert outs[2].shape == () and float(outs[2]) == 0.125


def test_a_0d_param_shared_between_modules_reads_back_as_0d() -> None:
    lib = graphrt.Library({"scale_shift": scale_shift})
    params = {"scale": np.array(3.0, "float32"), "shift": np.array([1.0], "float32")}
    first = graphrt.create(scalar_graph(graphrt.devices.SIM), lib, HOST, SIM)
    first.load_params(params)
    second = graphrt.create(scalar_graph(graphrt.devices.SIM), lib, HOST, SIM)
    second.share_params(first, graphrt.save_params(params))
    second.set_input("x", np.ones((4, 3), "float32"))
    second.run()
    np.testing.assert_array_equal(second.get_output(0), np.full((4, 3), 4.0, "float32"))
    scale = second.get_input("scale", out=np.zeros((), "float32"))
    assert scale.shape == () and float(scale) == 3.0


def negate(x: Any, out: Any) -> None:
    np.negative(x, out=out)


@pytest.mark.parametrize(("outer", "inner"), [([], [1]), ([1], []), ([2, 3], [6]),
                                              ([6], [3, 2])], ids=str)
def test_a_copy_between_entries_of_other_shapes_moves_the_bytes(outer: list[int],
                                                                inner: list[int]) -> None:
    """A ``__copy`` may reshape (its entries hold the same bytes): the copy sees both flat."""
    b = GraphBuilder(device_index=True)
    x = b.input("x", outer, dev=1)
    there = b.op("to_sim", "__copy", [x], shape=inner, dev=graphrt.devices.SIM)
    y = b.op("neg", "neg", [there], shape=inner, dev=graphrt.devices.SIM)
    back = b.op("to_host", "__copy", [y], shape=outer, dev=1)
    mod = graphrt.create(b.build([back]), graphrt.Library({"neg": negate}), HOST, SIM)
    values = np.arange(1, 1 + int(np.prod(outer)), dtype="float32").reshape(outer)
    (got,) = mod(x=values)
    np.testing.assert_array_equal(got, -values)


def example_models() -> Any:
    """``examples/onnx/models.py`` as a module (loaded once)."""
    name = "onnx_example_models"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, MODELS)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_a_bert_encoder_with_0d_params_on_sim_matches_cpu() -> None:
    """The GPU run's failing model: a BERT-style encoder whose scalar constants are 0-d params
    (the attention scale, LayerNorm's exponent and epsilon)."""
    pytest.importorskip("onnx")
    models = example_models()
    model = models.bert_encoder(batch=2, seq=8, layers=1, hidden=16, heads=2, vocab=50,
                                max_positions=16)
    bundle = graphrt.from_onnx(model)
    assert any(np.asarray(value).ndim == 0 for value in bundle.params.values())
    feeds = models.sample_inputs(model)
    (want,) = bundle.create(HOST)(**feeds)
    (got,) = bundle.create(SIM)(**feeds)
    np.testing.assert_allclose(np.asarray(got.view(np.ndarray)), want, rtol=1e-5, atol=1e-5)


def test_the_host_slots_of_copy_nodes_are_the_devices_host_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The host ends of ``__copy`` nodes (x going up, the result coming down) come from the
    accelerator's ``allocate_host`` (pinned on cuda, so the copies run at the bus's speed);
    a host slot no copy touches is plain host memory."""
    sim_backend = type(backend_for(SIM))
    asked: list[int] = []

    def allocate_host(self: Any, nbytes: int) -> np.ndarray:
        asked.append(nbytes)
        return np.zeros(nbytes, np.uint8)

    monkeypatch.setattr(sim_backend, "allocate_host", allocate_host)
    b = GraphBuilder(device_index=True)
    x = b.input("x", [256], dev=1)
    there = b.op("to_sim", "__copy", [x], shape=[256], dev=graphrt.devices.SIM)
    y = b.op("neg", "neg", [there], shape=[256], dev=graphrt.devices.SIM)
    back = b.op("to_host", "__copy", [y], shape=[256], dev=1)
    host_only = b.op("neg_host", "neg", [back], shape=[256], dev=1)
    mod = graphrt.create(b.build([back, host_only]), graphrt.Library({"neg": negate}), HOST, SIM)
    assert sorted(asked) == [1024, 1024], asked  # x's slot and the result's, not neg_host's
    values = np.arange(256, dtype="float32")
    got, twice = mod(x=values)
    np.testing.assert_array_equal(got, -values)
    np.testing.assert_array_equal(twice, values)
