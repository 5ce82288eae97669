"""The example models written as straight numpy, and their deterministic weights.

Used by ``examples/run_models.py`` (to check graphrt's results) and by
``benchmarks/cnn.py`` (as the baseline). Convolution is im2col + one matmul, the way one
would write it by hand in numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def weights(model: str, input_info: dict[str, dict[str, Any]], seed: int = 0) -> dict[str, Array]:
    """Deterministic weights (and input) for every input of the model's graph."""
    rng = np.random.default_rng(seed)
    values = {}
    for name, shape in input_info["shape"].items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        scale = np.sqrt(2.0 / fan_in) if ("w" in name and len(shape) > 1) else 0.1
        values[name] = (rng.standard_normal(shape) * scale).astype("float32")
    return values


def conv2d_relu(x: Array, w: Array, b: Array) -> Array:
    n, c, h, width = x.shape
    o, _, kh, kw = w.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * width, c * kh * kw)
    out = cols @ w.reshape(o, -1).T + b
    return np.maximum(out.reshape(n, h, width, o).transpose(0, 3, 1, 2), 0)


def max_pool2d(x: Array) -> Array:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def dense(x: Array, w: Array, b: Array) -> Array:
    return x @ w.T + b


def softmax(x: Array) -> Array:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mlp(v: dict[str, Array]) -> Array:
    h = np.maximum(dense(v["x"], v["w0"], v["b0"]), 0)
    h = np.maximum(dense(h, v["w1"], v["b1"]), 0)
    return softmax(dense(h, v["w2"], v["b2"]))


def cnn(v: dict[str, Array]) -> Array:
    h = max_pool2d(conv2d_relu(v["data"], v["conv0_weight"], v["conv0_bias"]))
    h = max_pool2d(conv2d_relu(h, v["conv1_weight"], v["conv1_bias"]))
    return softmax(dense(h.reshape(h.shape[0], -1), v["dense_weight"], v["dense_bias"]))


MODELS = {"mlp": mlp, "cnn": cnn}
