"""ONNX ImageDecoder: each image format and pixel format decoded at conversion as ONNX's
reference implementation decodes it, a graph input frozen per image by the ONNX backend, and
the errors a bad image, a missing value or a missing Pillow get."""

from __future__ import annotations

import io
import sys
from typing import Any

import numpy as np
import pytest

import graphrt
from graphrt.errors import ConversionError

onnx = pytest.importorskip("onnx")
Image = pytest.importorskip("PIL.Image")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from PIL import features  # noqa: E402

import graphrt.onnx.backend as backend  # noqa: E402
from graphrt.onnx import builder  # noqa: E402

FORMATS = {"bmp": "BMP", "jpeg": "JPEG", "jpeg2k": "JPEG2000", "png": "PNG", "pnm": "PPM",
           "tiff": "TIFF", "webp": "WEBP"}
NEEDS = {"jpeg": "jpg", "jpeg2k": "jpg_2000", "webp": "webp"}


def encoded(kind: str, width: int = 12, height: int = 7, mode: str = "RGB") -> np.ndarray:
    """A small picture with every pixel different, encoded as ``kind``, as uint8 bytes."""
    rows, cols = np.mgrid[0:height, 0:width]
    pixels = np.stack([rows * 30 % 256, cols * 20 % 256, (rows + cols) * 9 % 256], axis=-1)
    picture = Image.fromarray(pixels.astype(np.uint8), "RGB").convert(mode)
    out = io.BytesIO()
    picture.save(out, FORMATS[kind])
    return np.frombuffer(out.getvalue(), np.uint8).copy()


def model(data: np.ndarray | None = None, pixel_format: str | None = None,
          length: int | str = "n") -> Any:
    """An ImageDecoder of an initializer holding ``data``, or of graph input ``data`` of
    ``length`` bytes."""
    attrs = {} if pixel_format is None else {"pixel_format": pixel_format}
    node = helper.make_node("ImageDecoder", ["data"], ["image"], name="my_decoder", **attrs)
    inputs = [] if data is not None else [
        helper.make_tensor_value_info("data", TensorProto.UINT8, [length])]
    inits = [] if data is None else [numpy_helper.from_array(data, "data")]
    graph = helper.make_graph(
        [node], "g", inputs,
        [helper.make_tensor_value_info("image", TensorProto.UINT8, ["h", "w", "c"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def reference(data: np.ndarray, pixel_format: str) -> np.ndarray:
    (out,) = ReferenceEvaluator(model(pixel_format=pixel_format)).run(None, {"data": data})
    return np.asarray(out)


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_each_format_decodes_as_the_reference_does(kind: str, pixel_format: str) -> None:
    if kind in NEEDS and not features.check(NEEDS[kind]):
        pytest.skip(f"this Pillow has no {kind} codec")
    data = encoded(kind)
    want = reference(data, pixel_format)
    (got,) = graphrt.from_onnx(model(data, pixel_format)).create("cpu")()
    assert got.dtype == np.uint8 and got.shape == (7, 12, 1 if pixel_format == "Grayscale"
                                                   else 3)
    np.testing.assert_array_equal(got, want)
    frozen = graphrt.from_onnx(model(pixel_format=pixel_format), constants={"data": data})
    np.testing.assert_array_equal(np.array(frozen.create("sim")()[0]), want)


def test_a_grayscale_or_transparent_image_still_decodes_to_three_channels() -> None:
    for mode in ("L", "RGBA", "P"):
        data = encoded("png", mode=mode)
        (got,) = graphrt.from_onnx(model(data)).create("cpu")()
        want = np.asarray(Image.open(io.BytesIO(data.tobytes())).convert("RGB"))
        np.testing.assert_array_equal(got, want)


def test_the_onnx_backend_freezes_the_image_input_per_image() -> None:
    rep = backend.prepare(model(pixel_format="BGR"))
    for width, height in ((12, 7), (5, 9), (12, 7)):
        data = encoded("png", width, height)
        (got,) = rep.run([data])
        assert got.shape == (height, width, 3)
        np.testing.assert_array_equal(got, reference(data, "BGR"))


@pytest.mark.parametrize("options", [{"dim_bounds": {"n": 1000}}, {"shapes": {"data": [300]}}])
def test_an_image_input_without_a_value_says_why_and_how_to_give_it(options: Any) -> None:
    with pytest.raises(ConversionError) as caught:
        graphrt.from_onnx(model(), **options)
    message = str(caught.value)
    assert "my_decoder" in message and "decoded size" in message
    assert "constants={'data': ...}" in message


@pytest.mark.parametrize("data", [np.frombuffer(b"not an image at all", np.uint8),
                                  np.zeros(0, np.uint8), encoded("png")[:60]])
def test_bytes_that_are_no_image_are_a_conversion_error_naming_the_node(data: np.ndarray
                                                                       ) -> None:
    with pytest.raises(ConversionError, match=r"my_decoder.*cannot decode the image"):
        graphrt.from_onnx(model(data))


def test_an_unknown_pixel_format_is_a_conversion_error() -> None:
    with pytest.raises(ConversionError, match=r"my_decoder.*pixel_format 'CMYK'"):
        graphrt.from_onnx(model(encoded("png"), "CMYK"))


def test_an_image_larger_than_a_folded_constant_may_be_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builder, "FOLD_LIMIT", 100)
    with pytest.raises(ConversionError, match=r"my_decoder.*the decoded image would be a "
                                              r"constant of shape \[7, 12, 3\]"):
        graphrt.from_onnx(model(encoded("png")))


def test_without_pillow_the_error_says_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(ConversionError, match=r"my_decoder.*pip install pillow"):
        graphrt.from_onnx(model(encoded("png")))
