"""Bundles: save → load → run round trips, the manifest, params sources, external kernels,
atomic and deterministic writing."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bundle_fixtures import model_parts, read_members, save_model

import graphrt
from graphrt.bundle import PARAMS, open_archive
from graphrt.schema import parse_spec
from tests.conftest import EXAMPLES, strict_add, strict_sub

KINDS = ["directory", "zip"]


def direct_outputs(name: str) -> tuple[np.ndarray, ...]:
    """The model run without a bundle: graph + lib files, params set by hand."""
    graph, lib, params, inputs = model_parts(name)
    mod = graphrt.create(graph, graphrt.Library.from_json(lib))
    mod.load_params(params)
    return mod(**inputs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_round_trip_gives_identical_outputs(tmp_path: Path, name: str, kind: str) -> None:
    path = save_model(tmp_path, name, kind)
    bundle = graphrt.load_bundle(path)
    assert bundle.kind == kind
    outputs = bundle.create(graphrt.cpu(0))(**model_parts(name)[3])
    expected = direct_outputs(name)
    assert len(outputs) == len(expected) == 1
    assert outputs[0].dtype == expected[0].dtype
    assert np.array_equal(outputs[0], expected[0])


@pytest.mark.parametrize("kind", KINDS)
def test_one_bundle_creates_many_modules_on_several_devices(tmp_path: Path, kind: str) -> None:
    bundle = graphrt.load_bundle(save_model(tmp_path, "mlp", kind))
    inputs = model_parts("mlp")[3]
    on_cpu = bundle.create("cpu")(**inputs)[0]
    on_sim = bundle.create(graphrt.sim(0))(**inputs)[0]
    # sim runs the ops' references, cpu its compiled softmax: equal within rounding
    np.testing.assert_allclose(on_cpu, np.asarray(on_sim), rtol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_params_are_read_only_aligned_views_of_the_file(tmp_path: Path, kind: str) -> None:
    path = save_model(tmp_path, "cnn", kind)
    bundle = graphrt.load_bundle(path)
    params = model_parts("cnn")[2]
    assert list(bundle.params) == list(params)  # graph input order
    for name, array in bundle.params.items():
        assert np.array_equal(array, params[name])
        assert not array.flags.writeable and array.flags.aligned
        assert array.base is not None  # a view, not a copy
    with open_archive(path) as archive:
        assert archive.members[PARAMS].offset % 64 == 0  # mapped at an aligned offset
    with pytest.raises(TypeError):
        bundle.params["conv0_bias"] = np.zeros(8)  # type: ignore[index]


def test_manifest_describes_the_model(tmp_path: Path) -> None:
    bundle = graphrt.load_bundle(save_model(tmp_path, "mlp"))
    manifest = bundle.manifest
    assert manifest.format == "graphrt.bundle" and manifest.format_version == "1.0"
    assert manifest.graphrt_version == graphrt.__version__
    assert [(s.name, s.shape, s.dtype) for s in bundle.inputs] == [("x", [8, 64], "float32")]
    assert [s.name for s in manifest.params] == ["w0", "b0", "w1", "b1", "w2", "b2"]
    assert [(s.name, s.shape) for s in bundle.outputs] == [("fused_dense_softmax", [8, 10])]
    assert manifest.device_types == [] and bundle.external_kernels == []
    assert dict(bundle.metadata) == {"model": "mlp"}
    assert set(manifest.members) == {"graph.json", "lib.json", "params.safetensors"}
    described = bundle.describe()
    assert described["params"] == {"count": 6, "bytes": sum(
        a.nbytes for a in bundle.params.values())}
    assert len(described["digest"]) == 64 and described["kind"] == "directory"
    text = (tmp_path / "mlp" / "manifest.json").read_text()
    assert '"shape": [8, 64]' in text  # shapes on one line, for people reading it


def test_device_types_come_from_the_graph(tmp_path: Path) -> None:
    lib = {"elemwise_add": strict_add, "elemwise_sub": strict_sub}
    path = graphrt.save_bundle(tmp_path / "duplex", EXAMPLES / "duplex.json", lib)
    bundle = graphrt.load_bundle(path)
    assert bundle.manifest.device_types == [1, 2]
    assert [s.name for s in bundle.inputs] == ["A", "B", "C", "D"] and not bundle.params


@pytest.mark.parametrize("source", ["mapping", "blob", "blob file", "safetensors file"])
def test_params_from_a_mapping_a_tvm_blob_or_a_file(tmp_path: Path, source: str) -> None:
    graph, lib, params, _ = model_parts("mlp")
    given: Any = params
    if source == "blob":
        given = graphrt.save_params(params)
    elif source == "blob file":
        given = tmp_path / "params.bin"
        given.write_bytes(graphrt.save_params(params))
    elif source == "safetensors file":
        given = tmp_path / "first" / "params.safetensors"
        graphrt.save_bundle(tmp_path / "first", graph, lib, params)
    bundle = graphrt.load_bundle(graphrt.save_bundle(tmp_path / "mlp", graph, lib, given))
    assert {k: v.tolist() for k, v in bundle.params.items()} == {
        k: v.tolist() for k, v in params.items()}


@pytest.mark.parametrize("form", ["text", "bytes", "dict", "spec"])
def test_graph_given_in_any_json_form(tmp_path: Path, form: str) -> None:
    graph_path, lib, params, inputs = model_parts("mlp")
    text = graph_path.read_text()
    graph: Any = {"text": text, "bytes": text.encode(), "dict": json.loads(text),
                  "spec": parse_spec(text)}[form]
    bundle = graphrt.load_bundle(graphrt.save_bundle(tmp_path / "b", graph, lib, params))
    assert np.array_equal(bundle.create()(**inputs)[0], direct_outputs("mlp")[0])


def test_a_built_graph_is_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(graphrt.BundleError, match=r"not a built graphrt\.Graph"):
        graphrt.save_bundle(tmp_path / "b", graphrt.load_graph(model_parts("mlp")[0]))


def test_only_the_functions_the_graph_uses_are_stored(tmp_path: Path) -> None:
    graph, lib_path, params, _ = model_parts("mlp")
    lib = graphrt.Library.from_json(lib_path)
    lib.define("unused", {"inputs": ["x"], "outputs": ["y"],
                          "body": [{"op": "relu", "inputs": ["x"], "outputs": ["y"]}]})
    bundle = graphrt.load_bundle(graphrt.save_bundle(tmp_path / "b", graph, lib, params))
    assert "unused" not in bundle.lib and "fused_dense_relu" in bundle.lib


# --- Python kernels: external, supplied by the loading program --------------------------------


def simplex_bundle(tmp_path: Path) -> graphrt.Bundle:
    lib = graphrt.Library({"elemwise_add": strict_add, "elemwise_sub": strict_sub})
    return graphrt.load_bundle(graphrt.save_bundle(tmp_path / "s.grb", EXAMPLES / "simplex.json",
                                                   lib))


def test_python_kernels_become_external_kernels(tmp_path: Path) -> None:
    bundle = simplex_bundle(tmp_path)
    assert bundle.external_kernels == ["elemwise_add", "elemwise_sub"]
    assert len(bundle.lib) == 0


def test_a_missing_external_kernel_is_a_bundle_error_at_create(tmp_path: Path) -> None:
    bundle = simplex_bundle(tmp_path)
    with pytest.raises(graphrt.BundleError) as caught:
        bundle.create(graphrt.cpu(0), lib={"elemwise_add": strict_add})
    message = str(caught.value)
    assert "'elemwise_sub'" in message and "node 5 'elemwise_sub'" in message
    assert "lib=" in message
    assert isinstance(caught.value.__cause__, graphrt.KernelNotFoundError)


@pytest.mark.parametrize("as_library", [False, True])
def test_external_kernels_supplied_at_create(tmp_path: Path, as_library: bool) -> None:
    kernels = {"elemwise_add": strict_add, "elemwise_sub": strict_sub}
    extra: Any = graphrt.Library(kernels) if as_library else kernels
    mod = simplex_bundle(tmp_path).create(graphrt.cpu(0), graphrt.sim(0), lib=extra)
    a, b, c = (np.full(4, v, "float32") for v in (1, 2, 5))
    (y,) = mod(A=a, B=b, C=c)
    assert np.array_equal(np.asarray(y), a + b - c)


def test_options_pass_through_to_create(tmp_path: Path) -> None:
    bundle = simplex_bundle(tmp_path)
    kernels = {"elemwise_add": strict_add, "elemwise_sub": strict_sub}
    with pytest.raises(graphrt.PlacementError):
        bundle.create(graphrt.cpu(0), lib=kernels, strict_placement=True)


# --- save: checks, atomicity, determinism ----------------------------------------------------


@pytest.mark.parametrize(("change", "expected"), [
    (lambda p: p.update(w9=np.zeros(3, "float32")), "param 'w9' is not an input"),
    (lambda p: p.update(b0=np.zeros(127, "float32")), r"param 'b0' is float32\[127\].*\[128\]"),
    (lambda p: p.update(b0=np.zeros(128, "float64")), r"param 'b0' is float64\[128\]"),
])
def test_params_that_do_not_fit_the_graph_are_refused(tmp_path: Path, change: Any,
                                                      expected: str) -> None:
    graph, lib, params, _ = model_parts("mlp")
    change(params)
    with pytest.raises(graphrt.BundleError, match=expected):
        graphrt.save_bundle(tmp_path / "b", graph, lib, params)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("metadata", [{"when": object()}, {"a": {1: 2}}, {"a": float("nan")},
                                      {"a": [float("inf")]}])
def test_metadata_must_be_json(tmp_path: Path, metadata: dict[str, Any]) -> None:
    graph, lib, params, _ = model_parts("mlp")
    with pytest.raises(graphrt.BundleError, match="metadata must be a JSON object"):
        graphrt.save_bundle(tmp_path / "b", graph, lib, params, metadata)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_save_leaves_nothing(tmp_path: Path, kind: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(stream: Any, tensors: Any, metadata: Any = None) -> int:
        stream.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("graphrt.bundle.save.write_safetensors", fail)
    target = tmp_path / ("m.grb" if kind == "zip" else "m")
    graph, lib, params, _ = model_parts("mlp")
    with pytest.raises(graphrt.BundleError, match="No space left"):
        graphrt.save_bundle(target, graph, lib, params)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", KINDS)
def test_existing_bundles_are_replaced_only_when_asked(tmp_path: Path, kind: str) -> None:
    path = save_model(tmp_path, "mlp", kind)
    before = read_members(path)
    graph, lib, params, _ = model_parts("mlp")
    with pytest.raises(graphrt.BundleError, match="already exists"):
        graphrt.save_bundle(path, graph, lib, params)
    assert read_members(path) == before
    graphrt.save_bundle(path, graph, lib, params, {"v": 2}, overwrite=True)
    assert graphrt.load_bundle(path).metadata["v"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_overwrite_never_replaces_something_that_is_not_a_bundle(tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    graph, lib, params, _ = model_parts("mlp")
    with pytest.raises(graphrt.BundleError, match="not a bundle"):
        graphrt.save_bundle(precious, graph, lib, params, overwrite=True)
    assert (precious / "notes.txt").read_text() == "keep me"


def test_zip_bundles_are_deterministic_and_stored(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = save_model(tmp_path / "a", "cnn", "zip")
    second = save_model(tmp_path / "b", "cnn", "zip")
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as archive:
        assert archive.testzip() is None
        assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_STORED}
        assert sorted(archive.namelist()) == ["graph.json", "lib.json", "manifest.json",
                                              "params.safetensors"]


def test_archive_kind_follows_the_suffix_or_the_argument(tmp_path: Path) -> None:
    graph, lib, params, _ = model_parts("mlp")
    assert graphrt.save_bundle(tmp_path / "a.zip", graph, lib, params).is_file()
    assert graphrt.save_bundle(tmp_path / "b.grb", graph, lib, params).is_file()
    assert graphrt.save_bundle(tmp_path / "c", graph, lib, params).is_dir()
    assert graphrt.save_bundle(tmp_path / "d", graph, lib, params, archive="zip").is_file()
    with pytest.raises(graphrt.BundleError, match="archive must be"):
        graphrt.save_bundle(tmp_path / "e", graph, lib, params, archive="tar")  # type: ignore[arg-type]


def test_limits_are_checked_when_made() -> None:
    with pytest.raises(ValueError, match=r"BundleLimits\.params"):
        graphrt.BundleLimits(params=-1)
