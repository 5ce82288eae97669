"""Tensors an ONNX model stores in files of its own (external data): read from the model's
folder only, and only as far as each tensor's shape and dtype need."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx
from onnx import TensorProto, helper

import graphrt
from graphrt.onnx import model as model_module

WEIGHT = np.arange(4, dtype=np.float32)


def model_with_external(location: str, length: int | None = None, offset: int = 0) -> Any:
    """y = x + w, w a [4] float32 initializer whose data lives in ``location``."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset)}
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)


def run(bundle: graphrt.Bundle) -> np.ndarray:
    (y,) = bundle.create("cpu")(x=np.zeros(4, np.float32))
    return np.asarray(y)


def test_a_model_file_reads_its_tensors_from_its_folder(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(WEIGHT.tobytes())
    onnx.save(model_with_external("w.bin"), tmp_path / "m.onnx")
    np.testing.assert_array_equal(run(graphrt.from_onnx(tmp_path / "m.onnx")), WEIGHT)


def test_an_upload_naming_external_data_is_refused_reading_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes or a ModelProto have no folder: a file the process can read (secret.bin in
    the current directory) is never returned as a tensor."""
    (tmp_path / "secret.bin").write_bytes(b"SECRETS!" * 2)
    monkeypatch.chdir(tmp_path)
    model = model_with_external("secret.bin")
    for given in (model, model.SerializeToString()):
        with pytest.raises(graphrt.ConversionError,
                           match=r"tensor 'w' stores its data in 'secret.bin', but a model "
                                 r"given as bytes or a ModelProto has no folder"):
            graphrt.from_onnx(given)


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "sub/../../outside.bin"])
def test_a_file_outside_the_models_folder_is_refused(tmp_path: Path, location: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(WEIGHT.tobytes())
    onnx.save(model_with_external(location), folder / "m.onnx")
    with pytest.raises(graphrt.ConversionError, match="not a file inside the model's folder"):
        graphrt.from_onnx(folder / "m.onnx")


def test_a_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(WEIGHT.tobytes())
    os.symlink(tmp_path / "outside.bin", folder / "w.bin")
    onnx.save(model_with_external("w.bin"), folder / "m.onnx")
    with pytest.raises(graphrt.ConversionError, match="not a file inside the model's folder"):
        graphrt.from_onnx(folder / "m.onnx")


def test_only_the_tensors_bytes_are_read_from_a_larger_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A [4] float32 tensor backed by a much larger file reads its 16 bytes at its offset."""
    with open(tmp_path / "big.bin", "wb") as file:
        file.write(b"\0" * 8 + WEIGHT.tobytes())
        file.truncate(64 << 20)  # sparse: 64 MiB that must not be read
    onnx.save(model_with_external("big.bin", offset=8), tmp_path / "m.onnx")
    reads: list[int] = []
    real_open = model_module.open_regular

    class Counting:
        def __init__(self, file: Any) -> None:
            self.file = file

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def seek(self, offset: int) -> int:
            return int(self.file.seek(offset))

        def read(self, size: int = -1) -> bytes:
            reads.append(size)
            return bytes(self.file.read(size))

    monkeypatch.setattr(model_module, "open_regular",
                        lambda *args, **kwargs: Counting(real_open(*args, **kwargs)))
    bundle = graphrt.from_onnx(tmp_path / "m.onnx")
    monkeypatch.undo()
    np.testing.assert_array_equal(run(bundle), WEIGHT)
    assert reads == [16]


def test_short_files_and_lengths_that_disagree_are_refused(tmp_path: Path) -> None:
    (tmp_path / "short.bin").write_bytes(WEIGHT.tobytes()[:10])
    onnx.save(model_with_external("short.bin"), tmp_path / "a.onnx")
    with pytest.raises(graphrt.ConversionError, match="holds 10 bytes there, the tensor needs 16"):
        graphrt.from_onnx(tmp_path / "a.onnx")
    (tmp_path / "w.bin").write_bytes(WEIGHT.tobytes())
    onnx.save(model_with_external("w.bin", length=12), tmp_path / "b.onnx")
    with pytest.raises(graphrt.ConversionError, match="its length 12 is not the 16 bytes"):
        graphrt.from_onnx(tmp_path / "b.onnx")
    onnx.save(model_with_external("missing.bin"), tmp_path / "c.onnx")
    with pytest.raises(graphrt.ConversionError, match=r"missing\.bin"):
        graphrt.from_onnx(tmp_path / "c.onnx")
