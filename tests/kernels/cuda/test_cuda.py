"""The cuda backend on a real GPU (skipped cleanly without one: see conftest)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from bundle_fixtures import BUNDLES

import graphrt
from tests.conftest import EXAMPLE_GRAPHS, example_graph, random_inputs
from tests.executor.test_heterogeneous import EXPECTED

pytestmark = pytest.mark.cuda


@pytest.fixture
def gpu() -> graphrt.Device:
    return graphrt.cuda(0)


@pytest.mark.parametrize("name", EXAMPLE_GRAPHS)
def test_example_runs_exactly_on_cpu_and_cuda(name: str, gpu: graphrt.Device,
                                              elemwise_lib: graphrt.Library) -> None:
    import cupy

    mod = graphrt.create(example_graph(name, gpu), elemwise_lib, graphrt.cpu(0), gpu)
    assert {dev.kind for dev in mod.plan.entry_device} == {"cpu", "cuda"}
    values = random_inputs(mod)
    mod.run(**values)
    # the output is the native array of the device it lives on (simplex's is on the host)
    where = mod.plan.entry_device[mod.graph.heads[0]]
    assert type(mod.get_output(0)) is (cupy.ndarray if where.kind == "cuda" else np.ndarray)
    np.testing.assert_array_equal(mod.get_output(0, out=np.empty(4, "float32")),
                                  EXPECTED[name](values))


def test_cupy_inputs_and_outputs(gpu: graphrt.Device, elemwise_lib: graphrt.Library) -> None:
    import cupy

    mod = graphrt.create(example_graph("duplex", gpu), elemwise_lib, graphrt.cpu(0), gpu)
    values = random_inputs(mod)
    mod.run(**{name: cupy.asarray(value) for name, value in values.items()})
    out = cupy.empty(4, dtype="float32")
    assert mod.get_output(0, out=out) is out
    np.testing.assert_array_equal(out.get(), EXPECTED["duplex"](values))


def test_cuda_kernels_receive_cupy_arrays(gpu: graphrt.Device) -> None:
    import cupy

    def on_gpu(a: Any, b: Any, out: Any) -> None:
        assert all(isinstance(x, cupy.ndarray) and x.device.id == 0 for x in (a, b, out))
        cupy.add(a, b, out=out)

    def on_cpu(a: Any, b: Any, out: Any) -> None:
        assert all(type(x) is np.ndarray for x in (a, b, out))
        np.subtract(a, b, out=out)

    lib = graphrt.Library()
    lib.register("elemwise_add", on_gpu, device="cuda")
    lib.register("elemwise_sub", on_cpu, device="cpu")
    mod = graphrt.create(example_graph("duplex", gpu), lib, graphrt.cpu(0), gpu)
    values = random_inputs(mod)
    mod.run(**values)
    np.testing.assert_array_equal(mod.get_output(0).get(), EXPECTED["duplex"](values))


def test_0d_and_1_element_params_and_strided_arrays_copy_to_and_from_cuda(
        gpu: graphrt.Device) -> None:
    """What the first GPU run found: a 0-d param uploaded from the host (cupy's ``set()``
    demands the destination's exact shape), next to a 1-element one, a non-contiguous input
    and non-contiguous and 0-d out buffers."""
    import cupy

    from tests.devices.test_transfers import scalar_graph

    def scale_shift(x: Any, scale: Any, shift: Any, out: Any) -> None:
        out[...] = x * scale + shift

    mod = graphrt.create(scalar_graph(graphrt.devices.CUDA),
                         graphrt.Library({"scale_shift": scale_shift}), graphrt.cpu(0), gpu)
    mod.load_params({"scale": np.array(0.125, "float32"), "shift": np.array([-1.5], "float32")})
    x = np.arange(12, dtype="float32").reshape(3, 4).T
    mod.set_input("x", x)
    mod.run()
    want = x * np.float32(0.125) - np.float32(1.5)
    np.testing.assert_array_equal(mod.get_output(0), want)
    assert isinstance(mod.get_output(1), cupy.ndarray)
    strided = np.zeros((4, 6), "float32")[:, ::2]
    np.testing.assert_array_equal(mod.get_output(1, out=strided), want)
    scale = mod.get_output(2, out=np.zeros((), "float32"))
    assert scale.shape == () and float(scale) == 0.125


def test_a_bert_encoder_with_0d_params_runs_on_cuda_as_on_cpu(gpu: graphrt.Device) -> None:
    pytest.importorskip("onnx")
    from tests.devices.test_transfers import example_models

    models = example_models()
    model = models.bert_encoder(batch=2, seq=8, layers=1, hidden=16, heads=2, vocab=50,
                                max_positions=16)
    bundle = graphrt.from_onnx(model)
    feeds = models.sample_inputs(model)
    (want,) = bundle.create(graphrt.cpu(0))(**feeds)
    (got,) = bundle.create(gpu)(**feeds)
    np.testing.assert_allclose(got.get(), want, rtol=1e-4, atol=1e-4)


def test_kernel_error_on_cuda_names_the_device(gpu: graphrt.Device) -> None:
    def broken(a: Any, b: Any, out: Any) -> None:
        raise RuntimeError("kernel fault")

    lib = {"elemwise_add": broken, "elemwise_sub": lambda a, b, o: np.subtract(a, b, out=o)}
    mod = graphrt.create(example_graph("simplex", gpu), lib, graphrt.cpu(0), gpu)
    with pytest.raises(graphrt.ExecutionError, match="failed on cuda:0") as info:
        mod.run(**random_inputs(mod))
    assert info.value.device == "cuda:0"


def test_torch_cuda_tensor_through_dlpack(gpu: graphrt.Device,
                                          elemwise_lib: graphrt.Library) -> None:
    torch = pytest.importorskip("torch")
    mod = graphrt.create(example_graph("simplex", gpu), elemwise_lib, graphrt.cpu(0), gpu)
    values = {name: torch.full((4,), float(i), device="cuda") for i, name in enumerate("ABC")}
    mod.run(**values)
    assert mod.get_output(0, out=np.empty(4, "float32")).tolist() == [-1.0] * 4


def _negate_module(gpu: graphrt.Device) -> graphrt.GraphModule:
    from builders import GraphBuilder

    g = GraphBuilder(device_index=True)
    x = g.input("x", [1024], dev=gpu.type_code)
    y = g.op("neg", "neg", [x], shape=[1024], dev=gpu.type_code)
    r = g.op("reshape_nop", "__nop", [y], shape=[32, 32], sids=[1], dev=gpu.type_code)
    return graphrt.create(g.build(heads=[r]),
                          {"neg": lambda a, o: np.negative(a, out=o)}, graphrt.cpu(0), gpu)


def test_zero_copy_cupy_arrays(gpu: graphrt.Device) -> None:
    import cupy

    mod = _negate_module(gpu)
    x = cupy.arange(1024, dtype="float32")
    out = cupy.empty((32, 32), dtype="float32")
    mod.set_input_zero_copy("x", x)
    mod.set_output_zero_copy(0, out)
    mod.run()
    assert mod.get_output(0) is out
    np.testing.assert_array_equal(out.get().reshape(-1), -np.arange(1024, dtype="float32"))
    with pytest.raises(graphrt.InputError, match="zero-copy needs an array on cuda:0"):
        mod.set_input_zero_copy("x", np.zeros(1024, "float32"))


def test_caller_on_its_own_stream(gpu: graphrt.Device) -> None:
    import cupy

    mod = _negate_module(gpu)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:  # the contract: run() queues on the caller's current stream
        for step in range(20):
            x = cupy.full(1024, float(step), dtype="float32")
            out = cupy.empty((32, 32), dtype="float32")
            mod.invoke_with_outputs({"x": x}, [out])
            assert float(out.sum()) == -1024.0 * step  # .sum() queues on the same stream
    stream.synchronize()


def test_call_returns_fresh_cupy_arrays(gpu: graphrt.Device) -> None:
    import cupy

    mod = _negate_module(gpu)
    (first,) = mod(x=cupy.ones(1024, dtype="float32"))
    (second,) = mod(x=cupy.full(1024, 2.0, dtype="float32"))
    assert isinstance(first, cupy.ndarray)
    assert float(first.sum()) == -1024.0 and float(second.sum()) == -2048.0


def test_profile_times_gpu_steps_with_events(gpu: graphrt.Device,
                                             elemwise_lib: graphrt.Library) -> None:
    mod = graphrt.create(example_graph("duplex", gpu), elemwise_lib, graphrt.cpu(0), gpu)
    mod.set_input(**random_inputs(mod))
    report = mod.profile(repeat=3)
    assert {n.device for n in report.nodes} == {"cpu:0", "cuda:0"}
    assert all(t > 0 for n in report.nodes for t in n.times_us)
    result = mod.benchmark(repeat=3, number=5)
    assert result.min > 0


def test_example_models_on_cuda_match_numpy(gpu: graphrt.Device) -> None:
    import sys
    from pathlib import Path

    models = Path(__file__).resolve().parents[3] / "examples" / "models"
    sys.path.insert(0, str(models))
    import reference

    for name in ("mlp", "cnn"):
        lib = graphrt.Library.from_json(models / name / "lib.json")
        mod = graphrt.create(models / name / "graph.json", lib, gpu)
        values = reference.weights(name, mod.get_input_info())
        mod.run(**values)
        out = mod.get_output(0).get()
        np.testing.assert_allclose(out, reference.MODELS[name](values), rtol=1e-4, atol=1e-5)


def test_elementwise_chain_is_one_fused_launch(gpu: graphrt.Device) -> None:
    from builders import GraphBuilder

    from graphrt.kernels.cuda import elementwise as fusion

    lib = graphrt.Library()
    lib.define("chain", {"inputs": ["a", "b"], "outputs": ["y"], "body": [
        {"op": "add", "inputs": ["a", "b"], "outputs": ["t0"]},
        {"op": "multiply", "inputs": ["t0", "a"], "outputs": ["t1"]},
        {"op": "sigmoid", "inputs": ["t1"], "outputs": ["t2"]},
        {"op": "relu", "inputs": ["t2"], "outputs": ["y"]}]})
    g = GraphBuilder(device_index=True)
    a = g.input("a", [64, 32], dev=gpu.type_code)
    b = g.input("b", [32], dev=gpu.type_code)
    y = g.op("f", "chain", [a, b], shape=[64, 32], dev=gpu.type_code)
    before = len(fusion._CACHE)
    mod = graphrt.create(g.build(heads=[y]), lib, gpu)
    assert len(fusion._CACHE) == before + 1  # one kernel for the four steps
    rng = np.random.default_rng(0)
    av, bv = rng.standard_normal((64, 32)), rng.standard_normal(32)
    av, bv = av.astype("float32"), bv.astype("float32")
    mod.run(a=av, b=bv)
    expected = np.maximum(1 / (1 + np.exp(-((av + bv) * av))), 0)
    np.testing.assert_allclose(mod.get_output(0).get(), expected, rtol=1e-6)
    graphrt.create(g.build(heads=[y]), lib, gpu)
    assert len(fusion._CACHE) == before + 1  # cached by signature


def test_dynamic_batch_mlp_on_cuda_allocates_nothing_after_create(
        gpu: graphrt.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphrt.devices.cuda_backend import CudaBackend
    from tests.executor.test_dynamic_shapes import MODELS, batch, mlp_module, reference

    static = graphrt.create(MODELS / "mlp" / "graph.json",
                            graphrt.Library.from_json(MODELS / "mlp" / "lib.json"))
    weights = {k: v for k, v in reference.weights("mlp", static.get_input_info()).items()
               if k != "x"}
    mod = mlp_module("cuda:0", weights)
    calls: list[int] = []
    original = CudaBackend.allocate
    monkeypatch.setattr(CudaBackend, "allocate",
                        lambda self, nbytes: calls.append(nbytes) or original(self, nbytes))
    for n in (1, 7, 64):
        x = batch(n)
        mod.run(x=x)
        out = mod.get_output(0, out=np.empty((n, 10), "float32"))
        np.testing.assert_allclose(out, reference.MODELS["mlp"]({**weights, "x": x}),
                                   rtol=1e-4, atol=1e-5)
    assert calls == []


def test_dynamic_slice_on_cuda_moves_only_begin_end_strides(gpu: graphrt.Device) -> None:
    from tests.executor.test_dynamic_shapes import WINDOW, X, slice_graph, slice_lib

    mod = graphrt.create(slice_graph(gpu.type_code), slice_lib(), graphrt.cpu(0), gpu)
    mod.run(x=X, **WINDOW)
    moved = mod.last_run_transfers().shape_functions
    assert (moved.count, moved.to_host_bytes) == (3, 48)
    out = mod.get_output(0, out=np.empty(mod.get_output(0).shape, "float32"))
    np.testing.assert_allclose(out, np.sqrt(X[100:1100:3, 16:80:2]), rtol=1e-6)


@pytest.mark.parametrize("target", ["mlp", "cnn.grb"])
def test_example_bundles_run_on_cuda_as_on_cpu(gpu: graphrt.Device, target: str) -> None:
    bundle = graphrt.load_bundle(BUNDLES / target)
    rng = np.random.default_rng(0)
    inputs = {spec.name: rng.standard_normal(spec.shape).astype(spec.dtype)
              for spec in bundle.inputs}
    on_cpu = bundle.create(graphrt.cpu(0))(**inputs)[0]
    on_gpu = bundle.create(gpu)
    on_gpu.run(**inputs)
    host = on_gpu.get_output(0, out=np.empty_like(on_cpu))
    np.testing.assert_allclose(host, on_cpu, rtol=1e-4, atol=1e-6)


def test_graphrt_run_and_bench_a_bundle_on_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    from graphrt import cli

    assert cli.main(["run", str(BUNDLES / "cnn.grb"), "--device", "cuda"]) == 0
    assert "on cuda:0" in capsys.readouterr().out
    assert cli.main(["bench", str(BUNDLES / "cnn.grb"), "--device", "cuda", "--repeat", "3",
                     "--number", "2"]) == 0
    assert "host overhead" in capsys.readouterr().out


def test_threads_on_cuda_each_run_on_their_own_stream_with_weights_once(
        gpu: graphrt.Device) -> None:
    import sys
    import threading
    from pathlib import Path

    import cupy

    models = Path(__file__).resolve().parents[3] / "examples" / "models"
    sys.path.insert(0, str(models))
    import reference

    mod = graphrt.create(models / "mlp" / "graph.json",
                         graphrt.Library.from_json(models / "mlp" / "lib.json"), gpu)
    values = reference.weights("mlp", mod.get_input_info())
    weights = {name: value for name, value in values.items() if name != "x"}
    mod.load_params(weights)
    x = values["x"]
    feeds = [np.random.default_rng(t).standard_normal(x.shape).astype(x.dtype)
             for t in range(4)]
    expected = [mod(x=feed)[0].get() for feed in feeds]
    wrong: list[int] = []
    streams: list[Any] = []
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            streams.append(mod.context._scopes[0].stream)
            for _ in range(200):
                got = mod(x=feeds[t])[0].get()
                if not np.allclose(got, expected[t], rtol=1e-5, atol=1e-6):
                    wrong.append(t)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and wrong == []
    assert len({stream.ptr for stream in streams}) == 4
    assert cupy.cuda.Stream.null.ptr not in {stream.ptr for stream in streams}
    assert mod.memory().params[gpu] == sum(w.nbytes for w in weights.values())


# -- graph capture (create(..., cuda_graph=True)) ------------------------------------------------


def _cuda_chain(gpu: graphrt.Device, length: int = 6) -> tuple[dict[str, Any], graphrt.Library]:
    import cupy

    from tests.executor.test_graph_capture import chain_graph

    lib = graphrt.Library()
    lib.register("add_one", lambda x, out: cupy.add(x, 1, out=out), device="cuda")
    lib.register("double", lambda x, out: cupy.multiply(x, 2, out=out), device="cuda")
    return chain_graph(length, dev=gpu.type_code), lib


def test_cuda_graph_records_once_and_replays(gpu: graphrt.Device) -> None:
    from tests.executor.test_graph_capture import chain_reference

    graph, lib = _cuda_chain(gpu)
    mod = graphrt.create(graph, lib, "cpu", gpu, cuda_graph=True)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.standard_normal((4, 3)).astype("float32")
        mod.run(x=x)
        np.testing.assert_allclose(mod.get_output(0, out=np.empty((4, 3), "float32")),
                                   chain_reference(x), rtol=1e-6)
    report = mod.capture_report()
    assert report is not None and report.enabled, report
    assert (report.captures, report.replays, report.segments) == (1, 3, 1)


def test_cuda_graph_rebinds_zero_copy_inputs(gpu: graphrt.Device) -> None:
    import cupy

    from tests.executor.test_graph_capture import chain_reference

    graph, lib = _cuda_chain(gpu)
    mod = graphrt.create(graph, lib, "cpu", gpu, cuda_graph=True)
    buffers = [cupy.full((4, 3), v, dtype="float32") for v in (1.0, 2.0)]
    for array, value in ((buffers[0], 1.0), (buffers[1], 2.0), (buffers[0], 1.0)):
        mod.set_input_zero_copy("x", array)
        for _ in range(3):
            mod.run()
            np.testing.assert_allclose(cupy.asnumpy(mod.get_output(0)),
                                       chain_reference(np.full((4, 3), value, "float32")))
    report = mod.capture_report()
    assert report is not None and report.captures == 2 and report.cached == 2


def test_cuda_graph_follows_the_callers_stream(gpu: graphrt.Device) -> None:
    import cupy

    from tests.executor.test_graph_capture import chain_reference

    graph, lib = _cuda_chain(gpu)
    mod = graphrt.create(graph, lib, "cpu", gpu, cuda_graph=True)
    stream = cupy.cuda.Stream(non_blocking=True)
    x = cupy.arange(12, dtype="float32").reshape(4, 3)
    with stream:
        for _ in range(3):
            mod.set_input("x", x)
            mod.run()
            y = mod.get_output(0).copy()  # queued on the caller's stream, after the run
        stream.synchronize()
    np.testing.assert_allclose(cupy.asnumpy(y), chain_reference(cupy.asnumpy(x)))


def test_cuda_graph_of_a_heterogeneous_graph_matches_the_plain_run(
        gpu: graphrt.Device, elemwise_lib: graphrt.Library) -> None:
    graph = example_graph("duplex", gpu)
    plain = graphrt.create(graph, elemwise_lib, graphrt.cpu(0), gpu)
    mod = graphrt.create(graph, elemwise_lib, graphrt.cpu(0), gpu, cuda_graph=True)
    for seed in range(4):
        values = random_inputs(plain, seed)
        plain.run(**values)
        mod.run(**values)
        np.testing.assert_array_equal(mod.get_output(0, out=np.empty(4, "float32")),
                                      plain.get_output(0, out=np.empty(4, "float32")))
    report = mod.capture_report()
    assert report is not None and report.enabled and report.replays == 2


def test_a_kernel_that_synchronizes_runs_between_the_recordings(gpu: graphrt.Device) -> None:
    import cupy

    lib = graphrt.Library()
    lib.register("add_one", lambda x, out: cupy.add(x, float(x[0, 0].item()), out=out),
                 device="cuda")
    lib.register("double", lambda x, out: cupy.multiply(x, 2, out=out), device="cuda")
    from tests.executor.test_graph_capture import chain_graph

    mod = graphrt.create(chain_graph(2, dev=gpu.type_code), lib, "cpu", gpu, cuda_graph=True)
    x = np.full((4, 3), 3.0, "float32")
    for _ in range(4):  # warm-up, a recording that fails on k0, a recording without it, replay
        mod.run(x=x)
        np.testing.assert_array_equal(mod.get_output(0, out=np.empty((4, 3), "float32")),
                                      (x + 3) * 2)
    report = mod.capture_report()
    assert report is not None and report.enabled and report.replays == 1, report
    assert report.segments == 1 and report.eager_nodes == ("k0",), report
    assert "its recording failed" in report.eager_reasons[0][1]


def test_cuda_graph_of_the_example_cnn_matches_the_plain_run(gpu: graphrt.Device) -> None:
    from tests.conftest import MODELS

    lib = graphrt.Library.from_json(MODELS / "cnn" / "lib.json")
    plain = graphrt.create(MODELS / "cnn" / "graph.json", lib, gpu)
    mod = graphrt.create(MODELS / "cnn" / "graph.json", lib, gpu, cuda_graph=True)
    for seed in range(4):
        values = random_inputs(plain, seed)
        plain.run(**values)
        mod.run(**values)
        np.testing.assert_allclose(mod.get_output(0, out=np.empty(plain.get_output(0).shape,
                                                                  "float32")),
                                   plain.get_output(0).get(), rtol=1e-5, atol=1e-6)
    report = mod.capture_report()
    assert report is not None and report.enabled, report
