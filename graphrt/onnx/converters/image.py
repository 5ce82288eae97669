"""ONNX converter: ``ImageDecoder`` (opset 20), decoded at conversion.

An encoded image (a 1-D uint8 tensor: BMP, JPEG, JPEG 2000, PNG, PNM, TIFF, WebP) becomes an
``[H, W, C]`` uint8 tensor (``C`` = 3 for ``RGB`` and ``BGR``, 1 for ``Grayscale``). Its size
is known only by decoding it, and graphrt plans memory before a run, so the image must be a
constant when the model is converted: an initializer, or a graph input frozen with
``from_onnx(model, constants={name: numpy.frombuffer(data, numpy.uint8)})`` (the ONNX
backend freezes it per distinct value). The decoded image is then a constant, decoded with
Pillow as ONNX's reference implementation does (an optional dependency: ``pip install
pillow``, or ``graphrt[onnx]``).

Example:
    >>> import numpy as np
    >>> from onnx import TensorProto, helper
    >>> import graphrt
    >>> ppm = b"P6 3 2 255 " + bytes([255, 0, 0] * 6)     # a red 3 x 2 picture (PPM)
    >>> node = helper.make_node("ImageDecoder", ["data"], ["image"], pixel_format="BGR")
    >>> graph = helper.make_graph(
    ...     [node], "g", [helper.make_tensor_value_info("data", TensorProto.UINT8, [None])],
    ...     [helper.make_tensor_value_info("image", TensorProto.UINT8, [None, None, 3])])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    >>> data = np.frombuffer(ppm, np.uint8)
    >>> bundle = graphrt.from_onnx(model, constants={"data": data})
    >>> (image,) = bundle.create(graphrt.cpu(0))()
    >>> image.shape, image[0, 0].tolist()
    ((2, 3, 3), [0, 0, 255])
"""

from __future__ import annotations

import importlib
import io
from typing import Any

import numpy as np

from ..builder import Builder
from ..model import OnnxNode
from ..registry import converter

__all__: list[str] = []

_CHANNELS = {"RGB": 3, "BGR": 3, "Grayscale": 1}


def _pillow(n: OnnxNode) -> Any:
    """The ``PIL.Image`` module, or a :class:`ConversionError` saying how to install it."""
    try:
        return importlib.import_module("PIL.Image")  # optional: imported only when used
    except ImportError:
        raise n.fail("decoding an image needs Pillow: pip install pillow") from None


@converter("ImageDecoder", since=20)
def _image_decoder(b: Builder, n: OnnxNode) -> list[str]:
    pixel_format = n.attr("pixel_format", "RGB")
    if not isinstance(pixel_format, str) or pixel_format not in _CHANNELS:
        raise n.fail(f"pixel_format {pixel_format!r:.60} is not one of {', '.join(_CHANNELS)}")
    x = n.input(0)
    if x is None:
        raise n.fail("input 0 (the encoded image) is required")
    if b.dtype(x) != "uint8" or len(b.shape(x)) != 1:
        raise n.fail(f"the encoded image must be a 1-D uint8 tensor, given "
                     f"{b.dtype(x)}{list(b.shape(x))}")
    encoded = b.constant_value(x, "the encoded image (graphrt plans memory before a run, and "
                                  "the decoded size is known only by decoding it; give the "
                                  "file's bytes as numpy.frombuffer(data, numpy.uint8))")
    image_module = _pillow(n)
    try:
        image = image_module.open(io.BytesIO(np.ascontiguousarray(encoded).tobytes()))
        width, height = image.size
    except Exception as err:  # Pillow raises UnidentifiedImageError, ValueError, ...
        raise n.fail(f"cannot decode the image ({encoded.size} bytes): {err}") from None

    def decode() -> np.ndarray[Any, Any]:
        try:
            if pixel_format == "Grayscale":
                return np.asarray(image.convert("L"))[:, :, None]
            rgb = np.asarray(image.convert("RGB"))
            return rgb[:, :, ::-1] if pixel_format == "BGR" else rgb
        except Exception as err:  # a truncated or corrupt body
            raise n.fail(f"cannot decode the image ({encoded.size} bytes): {err}") from None

    return [b.computed((height, width, _CHANNELS[pixel_format]), "uint8", "the decoded image",
                       decode)]
