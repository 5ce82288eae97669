"""ONNX models built with ``onnx.helper`` (no PyTorch): ResNet-18/50, MobileNetV2, a BERT encoder.

Also three small benchmark graphs (``chain``, ``mlp``, ``branches``) for ``benchmarks/peers.py``.

Each builder lays the model out the way exporters write it (batch norms unfolded after every
convolution, ``Shape → Gather → Unsqueeze → Concat → Reshape`` head splits, Gelu through
``Erf``, ...) with seeded random weights scaled so that activations stay of order one (He
initialization for convolutions, ``1/sqrt(fan_in)`` for projections), which keeps a numerical
comparison between two runtimes meaningful. The same seed gives the same weights at every
``dtype`` (float16 weights are the float32 ones rounded).

Usage::

    python examples/onnx/models.py resnet50 -o resnet50.onnx [--batch 1]
    python examples/onnx/models.py resnet18 -o resnet18.onnx [--batch 1]
    python examples/onnx/models.py mobilenet_v2 -o mobilenet_v2.onnx
    python examples/onnx/models.py bert -o bert.onnx [--seq 128 --layers 4 --symbolic]
    python examples/onnx/models.py mlp -o mlp.onnx [--width 1024 --layers 4 --symbolic]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["bert_encoder", "branches", "chain", "check", "mlp", "mobilenet_v2", "resnet18",
           "resnet50", "sample_inputs"]

IR_VERSION = 8  # readable by every onnxruntime that supports opset 17


class _Net:
    """Collects nodes and initializers; weights drawn from one seeded generator."""

    def __init__(self, dtype: str, opset: int, seed: int) -> None:
        if dtype not in ("float32", "float16"):
            raise ValueError(f"dtype must be 'float32' or 'float16', given {dtype!r}")
        self.dtype = np.dtype(dtype)
        self.elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, name: str, value: np.ndarray) -> str:
        """A float initializer in the model's dtype (drawn in float32, then cast)."""
        self.inits.append(numpy_helper.from_array(
            np.asarray(value, np.float32).astype(self.dtype), name))
        return name

    def init(self, name: str, value: np.ndarray) -> str:
        """An initializer kept at its own dtype (int64 indices, shapes)."""
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def constant(self, value: Any, dtype: Any = None) -> str:
        """A ``Constant`` node, the way torch.onnx writes scalars and axes."""
        array = np.asarray(value, dtype=dtype if dtype is not None else self.dtype)
        self.count += 1
        out = f"/Constant_{self.count}_output_0"
        self.nodes.append(helper.make_node("Constant", [], [out], name=f"/Constant_{self.count}",
                                           value=numpy_helper.from_array(array)))
        return out

    def node(self, op: str, inputs: Sequence[str], name: str, **attrs: Any) -> str:
        """One node with one output named after it."""
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        return out

    def unsqueeze(self, x: str, axes: Sequence[int], name: str) -> str:
        if self.opset >= 13:
            return self.node("Unsqueeze", [x, self.constant(list(axes), np.int64)], name)
        return self.node("Unsqueeze", [x], name, axes=list(axes))

    def model(self, name: str, inputs: list[onnx.ValueInfoProto],
              outputs: list[onnx.ValueInfoProto], doc: str,
              metadata: Mapping[str, str] | None = None) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  ir_version=IR_VERSION, producer_name="graphrt-examples",
                                  doc_string=doc)
        for key, value in (metadata or {}).items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
        return model


def _conv_bn(net: _Net, x: str, prefix: str, c_in: int, c_out: int, kernel: int,
             stride: int = 1, group: int = 1, gamma: float = 1.0) -> str:
    """Conv (no bias, He init) then an unfolded BatchNormalization, as torchvision exports."""
    fan_in = c_in // group * kernel * kernel
    w = net.rng.standard_normal((c_out, c_in // group, kernel, kernel)) * math.sqrt(2 / fan_in)
    conv = net.node("Conv", [x, net.weight(f"{prefix}.conv.weight", w)], f"{prefix}/Conv",
                    kernel_shape=[kernel, kernel], strides=[stride, stride],
                    pads=[kernel // 2] * 4, group=group, dilations=[1, 1])
    scale = gamma * net.rng.uniform(0.8, 1.2, c_out)
    bias = net.rng.normal(0.0, 0.1, c_out)
    mean = net.rng.normal(0.0, 0.1, c_out)
    var = net.rng.uniform(0.8, 1.2, c_out)
    names = [net.weight(f"{prefix}.bn.{k}", v) for k, v in
             (("weight", scale), ("bias", bias), ("running_mean", mean), ("running_var", var))]
    return net.node("BatchNormalization", [conv, *names], f"{prefix}/BatchNormalization",
                    epsilon=1e-5, momentum=0.9)


def _image_io(net: _Net, batch: int | str, image: int, classes: int
              ) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    return ([helper.make_tensor_value_info("input", net.elem, [batch, 3, image, image])],
            [helper.make_tensor_value_info("logits", net.elem, [batch, classes])])


def _classifier(net: _Net, x: str, features: int, classes: int) -> None:
    pooled = net.node("GlobalAveragePool", [x], "/GlobalAveragePool")
    flat = net.node("Flatten", [pooled], "/Flatten", axis=1)
    w = net.rng.standard_normal((classes, features)) / math.sqrt(features)
    b = net.rng.normal(0.0, 0.01, classes)
    net.nodes.append(helper.make_node(
        "Gemm", [flat, net.weight("fc.weight", w), net.weight("fc.bias", b)], ["logits"],
        name="/fc/Gemm", alpha=1.0, beta=1.0, transB=1))


def _bottleneck(net: _Net, x: str, p: str, c_in: int, width: int, stride: int) -> str:
    """ResNet-50's block: 1x1 reduce, 3x3 (carrying the stride), 1x1 expand to 4x width."""
    h = net.node("Relu", [_conv_bn(net, x, f"{p}/conv1", c_in, width, 1)], f"{p}/relu/Relu")
    h = net.node("Relu", [_conv_bn(net, h, f"{p}/conv2", width, width, 3, stride)],
                 f"{p}/relu_1/Relu")
    # A small last gamma keeps the residual sum from doubling its variance per block.
    h = _conv_bn(net, h, f"{p}/conv3", width, width * 4, 1, gamma=0.3)
    return _residual(net, x, h, p, c_in, width * 4, stride)


def _basic_block(net: _Net, x: str, p: str, c_in: int, width: int, stride: int) -> str:
    """ResNet-18's block: two 3x3 convolutions, the first carrying the stride."""
    h = net.node("Relu", [_conv_bn(net, x, f"{p}/conv1", c_in, width, 3, stride)],
                 f"{p}/relu/Relu")
    h = _conv_bn(net, h, f"{p}/conv2", width, width, 3, gamma=0.3)
    return _residual(net, x, h, p, c_in, width, stride)


def _residual(net: _Net, x: str, h: str, p: str, c_in: int, c_out: int, stride: int) -> str:
    """``relu(h + shortcut)``, the shortcut a 1x1 projection where the shape changes."""
    short = x
    if stride != 1 or c_in != c_out:
        short = _conv_bn(net, x, f"{p}/downsample", c_in, c_out, 1, stride)
    return net.node("Relu", [net.node("Add", [h, short], f"{p}/Add")], f"{p}/relu_2/Relu")


def _resnet(name: str, doc: str, block: Callable[..., str], depths: Sequence[int],
            expansion: int, batch: int, dtype: str, opset: int, image: int, classes: int,
            symbolic: bool, seed: int, width: int) -> onnx.ModelProto:
    """torchvision's ResNet layout: 7x7 stride-2 stem, 3x3 max pool, four stages of
    ``block`` (stride 2 in the first block of stages 2-4), global average pool, Gemm."""
    if opset < 9:
        raise ValueError(f"{name} needs opset >= 9, given {opset}")
    net = _Net(dtype, opset, seed)
    x = _conv_bn(net, "input", "/conv1", 3, width, 7, stride=2)
    x = net.node("Relu", [x], "/relu/Relu")
    x = net.node("MaxPool", [x], "/maxpool/MaxPool", kernel_shape=[3, 3], strides=[2, 2],
                 pads=[1, 1, 1, 1])
    c_in = width
    for stage, blocks in enumerate(depths, start=1):
        stage_width = width << (stage - 1)
        for i in range(blocks):
            stride = 2 if i == 0 and stage > 1 else 1
            x = block(net, x, f"/layer{stage}/layer{stage}.{i}", c_in, stage_width, stride)
            c_in = stage_width * expansion
    _classifier(net, x, c_in, classes)
    inputs, outputs = _image_io(net, "batch" if symbolic else batch, image, classes)
    return net.model(name, inputs, outputs, doc)


def resnet50(batch: int = 1, dtype: str = "float32", opset: int = 13, image: int = 224,
             classes: int = 1000, symbolic: bool = False, seed: int = 0,
             width: int = 64) -> onnx.ModelProto:
    """ResNet-50 v1.5: 7x7 stem, max pool, bottlenecks [3, 4, 6, 3] (stride in the 3x3),
    projection shortcuts, a BatchNormalization after every convolution, global average pool,
    Gemm to ``classes``.

    Input ``input`` [batch, 3, image, image] (the batch named ``"batch"`` when ``symbolic``),
    output ``logits`` [batch, classes]. ``width`` is the first stage's (64 in torchvision; a
    smaller one makes a small model of the same layout). Opsets 9 and later.
    """
    return _resnet("resnet50", "ResNet-50 v1.5, random weights", _bottleneck, (3, 4, 6, 3), 4,
                   batch, dtype, opset, image, classes, symbolic, seed, width)


def resnet18(batch: int = 1, dtype: str = "float32", opset: int = 13, image: int = 224,
             classes: int = 1000, symbolic: bool = False, seed: int = 0,
             width: int = 64) -> onnx.ModelProto:
    """ResNet-18 as torchvision lays it out: 7x7 stem, max pool, basic blocks [2, 2, 2, 2] of
    two 3x3 convolutions each (stride 2 in the first of stages 2-4), projection shortcuts
    where the shape changes, a BatchNormalization after every convolution, global average pool,
    Gemm to ``classes``.

    Input ``input`` [batch, 3, image, image], output ``logits`` [batch, classes]; ``width``
    and ``symbolic`` as in :func:`resnet50`. Opsets 9 and later.

    >>> model = resnet18(image=32, classes=10, width=8)
    >>> sum(node.op_type == "Conv" for node in model.graph.node)
    20
    """
    return _resnet("resnet18", "ResNet-18, random weights", _basic_block, (2, 2, 2, 2), 1,
                   batch, dtype, opset, image, classes, symbolic, seed, width)


def mobilenet_v2(batch: int = 1, dtype: str = "float32", opset: int = 13, image: int = 224,
                 classes: int = 1000, symbolic: bool = False, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0): inverted residuals with depthwise 3x3 convolutions
    (``group`` = channels), ReLU6 as ``Clip(0, 6)``, linear 1x1 projections, residual adds,
    a 1x1 convolution to 1280, global average pool, Gemm to ``classes``.

    Input ``input`` [batch, 3, image, image], output ``logits``. Opsets 9 and later (``Clip``
    takes min/max as inputs from opset 11, as attributes before).
    """
    if opset < 9:
        raise ValueError(f"mobilenet_v2 needs opset >= 9, given {opset}")
    net = _Net(dtype, opset, seed)
    bounds = ([net.constant(0.0), net.constant(6.0)] if opset >= 11 else [])

    def relu6(x: str, name: str) -> str:
        if opset >= 11:
            return net.node("Clip", [x, *bounds], name)
        return net.node("Clip", [x], name, min=0.0, max=6.0)

    x = relu6(_conv_bn(net, "input", "/features.0", 3, 32, 3, stride=2), "/features.0/Clip")
    c_in, layer = 32, 1
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]
    for t, c, n, s in settings:
        for i in range(n):
            p, stride, hidden = f"/features.{layer}", s if i == 0 else 1, c_in * t
            h = x
            if t != 1:
                h = relu6(_conv_bn(net, h, f"{p}/expand", c_in, hidden, 1), f"{p}/expand/Clip")
            h = relu6(_conv_bn(net, h, f"{p}/dw", hidden, hidden, 3, stride, group=hidden),
                      f"{p}/dw/Clip")
            h = _conv_bn(net, h, f"{p}/project", hidden, c, 1, gamma=0.5)
            x = net.node("Add", [x, h], f"{p}/Add") if stride == 1 and c_in == c else h
            c_in, layer = c, layer + 1
    x = relu6(_conv_bn(net, x, f"/features.{layer}", c_in, 1280, 1), f"/features.{layer}/Clip")
    _classifier(net, x, 1280, classes)
    inputs, outputs = _image_io(net, "batch" if symbolic else batch, image, classes)
    return net.model("mobilenet_v2", inputs, outputs, "MobileNetV2 1.0, random weights")


def _layer_norm(net: _Net, x: str, prefix: str, hidden: int, eps: float = 1e-12) -> str:
    gamma = net.weight(f"{prefix}.weight", 1.0 + net.rng.normal(0.0, 0.1, hidden))
    beta = net.weight(f"{prefix}.bias", net.rng.normal(0.0, 0.1, hidden))
    if net.opset >= 17:
        return net.node("LayerNormalization", [x, gamma, beta], f"{prefix}/LayerNormalization",
                        axis=-1, epsilon=eps)
    # torch.onnx before opset 17: the decomposed form.
    mean = net.node("ReduceMean", [x], f"{prefix}/ReduceMean", axes=[-1], keepdims=1)
    d = net.node("Sub", [x, mean], f"{prefix}/Sub")
    sq = net.node("Pow", [d, net.constant(2.0)], f"{prefix}/Pow")
    var = net.node("ReduceMean", [sq], f"{prefix}/ReduceMean_1", axes=[-1], keepdims=1)
    std = net.node("Sqrt", [net.node("Add", [var, net.constant(eps)], f"{prefix}/Add")],
                   f"{prefix}/Sqrt")
    normed = net.node("Div", [d, std], f"{prefix}/Div")
    return net.node("Add", [net.node("Mul", [normed, gamma], f"{prefix}/Mul"), beta],
                    f"{prefix}/Add_1")


def _dims(net: _Net, x: str, axes: Sequence[int], prefix: str) -> list[str]:
    """``x.size(axis)`` as torch.onnx exports it: Shape → Gather → Unsqueeze, per axis."""
    shape = net.node("Shape", [x], f"{prefix}/Shape")
    out = []
    for k, axis in enumerate(axes):
        dim = net.node("Gather", [shape, net.constant(axis, np.int64)], f"{prefix}/Gather_{k}",
                       axis=0)
        out.append(net.unsqueeze(dim, [0], f"{prefix}/Unsqueeze_{k}"))
    return out


def _linear(net: _Net, x: str, prefix: str, n_in: int, n_out: int, std: float) -> str:
    w = net.weight(f"{prefix}.weight", net.rng.standard_normal((n_in, n_out)) * std)
    b = net.weight(f"{prefix}.bias", net.rng.normal(0.0, 0.02, n_out))
    return net.node("Add", [b, net.node("MatMul", [x, w], f"{prefix}/MatMul")], f"{prefix}/Add")


def _attention(net: _Net, x: str, mask: str, prefix: str, hidden: int, heads: int) -> str:
    d = hidden // heads
    std = 1 / math.sqrt(hidden)

    def split(name: str, perm: Sequence[int]) -> str:
        y = _linear(net, x, f"{prefix}/{name}", hidden, hidden, std)
        dims = _dims(net, y, (0, 1), f"{prefix}/{name}")
        shape = net.node("Concat", [*dims, net.constant([heads], np.int64),
                                    net.constant([d], np.int64)], f"{prefix}/{name}/Concat",
                         axis=0)
        y = net.node("Reshape", [y, shape], f"{prefix}/{name}/Reshape")
        return net.node("Transpose", [y], f"{prefix}/{name}/Transpose", perm=list(perm))

    q = split("query", (0, 2, 1, 3))
    k = split("key", (0, 2, 1, 3))
    k = net.node("Transpose", [k], f"{prefix}/key/Transpose_1", perm=[0, 1, 3, 2])
    v = split("value", (0, 2, 1, 3))
    scores = net.node("MatMul", [q, k], f"{prefix}/MatMul")
    scores = net.node("Div", [scores, net.constant(math.sqrt(d))], f"{prefix}/Div")
    scores = net.node("Add", [scores, mask], f"{prefix}/Add")
    probs = net.node("Softmax", [scores], f"{prefix}/Softmax", axis=-1)
    ctx = net.node("MatMul", [probs, v], f"{prefix}/MatMul_1")
    ctx = net.node("Transpose", [ctx], f"{prefix}/Transpose", perm=[0, 2, 1, 3])
    dims = _dims(net, ctx, (0, 1), f"{prefix}/context")
    shape = net.node("Concat", [*dims, net.constant([hidden], np.int64)],
                     f"{prefix}/context/Concat", axis=0)
    ctx = net.node("Reshape", [ctx, shape], f"{prefix}/context/Reshape")
    out = _linear(net, ctx, f"{prefix}/output/dense", hidden, hidden, std)
    return _layer_norm(net, net.node("Add", [out, x], f"{prefix}/output/Add"),
                       f"{prefix}/output/LayerNorm", hidden)


def _feed_forward(net: _Net, x: str, prefix: str, hidden: int, inner: int) -> str:
    h = _linear(net, x, f"{prefix}/intermediate/dense", hidden, inner, 1 / math.sqrt(hidden))
    # Gelu as torch exports it: x * 0.5 * (1 + erf(x / sqrt(2))).
    e = net.node("Erf", [net.node("Div", [h, net.constant(math.sqrt(2.0))],
                                  f"{prefix}/intermediate/Div")], f"{prefix}/intermediate/Erf")
    e = net.node("Add", [e, net.constant(1.0)], f"{prefix}/intermediate/Add_1")
    g = net.node("Mul", [h, e], f"{prefix}/intermediate/Mul")
    g = net.node("Mul", [g, net.constant(0.5)], f"{prefix}/intermediate/Mul_1")
    out = _linear(net, g, f"{prefix}/output/dense", inner, hidden, 1 / math.sqrt(inner))
    return _layer_norm(net, net.node("Add", [out, x], f"{prefix}/output/Add"),
                       f"{prefix}/output/LayerNorm", hidden)


def bert_encoder(batch: int = 1, seq: int = 128, layers: int = 4, hidden: int = 256,
                 heads: int = 4, dtype: str = "float32", opset: int = 17,
                 symbolic: bool | Sequence[str] = False, mask: str = "binary",
                 vocab: int = 30522,
                 max_positions: int = 512, seed: int = 0) -> onnx.ModelProto:
    """A BERT-style encoder laid out as torch.onnx exports it.

    Token embedding (``Gather``) plus position embedding (the ``position_ids`` buffer sliced to
    the sequence length, then ``Gather``), LayerNorm (the ``LayerNormalization`` op from opset
    17, the ReduceMean/Sub/Pow/Sqrt/Div form before), then ``layers`` blocks of self-attention
    (MatMul+Add projections, heads split by ``Shape → Gather → Unsqueeze → Concat → Reshape``
    and ``Transpose``, Q·Kᵀ divided by sqrt(d), the mask added, Softmax, the context MatMul)
    and a Gelu (``Erf``) feed-forward, each with a residual Add and LayerNorm.

    Inputs ``input_ids`` int64 [batch, seq] and, with ``mask="binary"``, ``attention_mask``
    [batch, seq] of 1 (attend) / 0 (padding) in the model's dtype, turned into ``(1 - m) *
    -10000`` in the graph; with ``mask="additive"``, ``attention_bias`` [batch, 1, 1, seq] added
    to the scores as is. ``symbolic=True`` names the dimensions ``"batch"`` and ``"seq"``;
    ``symbolic=["batch"]`` names only the batch.
    Output ``last_hidden_state`` [batch, seq, hidden]. Opsets 11 and later.
    """
    if opset < 11:
        raise ValueError(f"bert_encoder needs opset >= 11, given {opset}")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    if mask not in ("binary", "additive"):
        raise ValueError(f"mask must be 'binary' or 'additive', given {mask!r}")
    net = _Net(dtype, opset, seed)
    names = ("batch", "seq") if symbolic is True else tuple(symbolic or ())
    b_dim: int | str = "batch" if "batch" in names else batch
    s_dim: int | str = "seq" if "seq" in names else seq

    words = net.weight("embeddings.word_embeddings.weight",
                       net.rng.standard_normal((vocab, hidden)))
    x = net.node("Gather", [words, "input_ids"], "/embeddings/word_embeddings/Gather", axis=0)
    (length,) = _dims(net, "input_ids", (1,), "/embeddings")
    positions = net.init("embeddings.position_ids",
                         np.arange(max_positions, dtype=np.int64)[None])
    ids = net.node("Slice", [positions, net.constant([0], np.int64), length,
                             net.constant([1], np.int64), net.constant([1], np.int64)],
                   "/embeddings/Slice")
    table = net.weight("embeddings.position_embeddings.weight",
                       net.rng.standard_normal((max_positions, hidden)))
    pos = net.node("Gather", [table, ids], "/embeddings/position_embeddings/Gather", axis=0)
    x = net.node("Add", [x, pos], "/embeddings/Add")
    x = _layer_norm(net, x, "/embeddings/LayerNorm", hidden)

    if mask == "binary":
        m = net.unsqueeze(net.unsqueeze("attention_mask", [1], "/Unsqueeze"), [2],
                          "/Unsqueeze_1")
        m = net.node("Sub", [net.constant(1.0), m], "/Sub")
        bias = net.node("Mul", [m, net.constant(-10000.0)], "/Mul")
        mask_input = helper.make_tensor_value_info("attention_mask", net.elem, [b_dim, s_dim])
    else:
        bias = "attention_bias"
        mask_input = helper.make_tensor_value_info("attention_bias", net.elem,
                                                   [b_dim, 1, 1, s_dim])
    for i in range(layers):
        p = f"/encoder/layer.{i}"
        x = _attention(net, x, bias, f"{p}/attention", hidden, heads)
        x = _feed_forward(net, x, p, hidden, 4 * hidden)
    net.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/Identity"))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [b_dim, s_dim]),
              mask_input]
    outputs = [helper.make_tensor_value_info("last_hidden_state", net.elem,
                                             [b_dim, s_dim, hidden])]
    return net.model("bert_encoder", inputs, outputs,
                     f"BERT-style encoder, {layers} layers, hidden {hidden}, random weights",
                     {"vocab_size": str(vocab)})


def chain(nodes: int = 1000, width: int = 16, batch: int = 1, seed: int = 0
          ) -> onnx.ModelProto:
    """``nodes`` tiny elementwise ops in a row, alternately ``Add`` and ``Mul`` with a constant
    initializer each (offsets of order 0.1, factors in [0.95, 1.05]): a dispatch benchmark.

    Input ``input`` [batch, width], output ``output`` of the same shape, float32.

    >>> [node.op_type for node in chain(nodes=3).graph.node]
    ['Add', 'Mul', 'Add']
    """
    net = _Net("float32", 13, seed)
    x = "input"
    for i in range(nodes):
        op, c = (("Add", net.rng.normal(0.0, 0.1, width)) if i % 2 == 0 else
                 ("Mul", net.rng.uniform(0.95, 1.05, width)))
        out = "output" if i == nodes - 1 else f"/{op}_{i}_output_0"
        net.nodes.append(helper.make_node(op, [x, net.weight(f"c{i}", c)], [out],
                                          name=f"/{op}_{i}"))
        x = out
    io = [helper.make_tensor_value_info(name, net.elem, [batch, width])
          for name in ("input", "output")]
    return net.model("chain", io[:1], io[1:], f"{nodes}-node Add/Mul chain, random constants")


def mlp(batch: int | str = 1, width: int = 1024, layers: int = 4, seed: int = 0
        ) -> onnx.ModelProto:
    """``layers`` fully connected layers of ``width`` as torch.onnx exports ``nn.Linear``
    (``Gemm`` with ``transB=1``), a ``Relu`` between them, float32, He-initialized.

    Input ``input`` [batch, width], output ``output`` [batch, width] (``batch`` a name keeps
    it symbolic).

    >>> [node.op_type for node in mlp(width=8, layers=2).graph.node]
    ['Gemm', 'Relu', 'Gemm']
    """
    net = _Net("float32", 13, seed)
    x = "input"
    for i in range(layers):
        w = net.weight(f"fc{i}.weight", net.rng.standard_normal((width, width))
                       * math.sqrt(2 / width))
        b = net.weight(f"fc{i}.bias", net.rng.normal(0.0, 0.01, width))
        last = i == layers - 1
        out = "output" if last else f"/fc{i}/Gemm_output_0"
        net.nodes.append(helper.make_node("Gemm", [x, w, b], [out], name=f"/fc{i}/Gemm",
                                          alpha=1.0, beta=1.0, transB=1))
        x = out if last else net.node("Relu", [out], f"/relu{i}/Relu")
    io = [helper.make_tensor_value_info(name, net.elem, [batch, width])
          for name in ("input", "output")]
    return net.model("mlp", io[:1], io[1:], f"MLP {layers}x{width}, random weights")


def branches(size: int = 512, count: int = 8, depth: int = 2, seed: int = 0
             ) -> onnx.ModelProto:
    """``count`` independent chains of ``depth`` ``MatMul``s by [size, size] weights, all
    reading the one input and added up by one ``Sum``: inter-op parallelism.

    Input ``input`` [size, size], output ``output`` [size, size], float32.

    >>> [node.op_type for node in branches(size=4, count=2, depth=1).graph.node]
    ['MatMul', 'MatMul', 'Sum']
    """
    net = _Net("float32", 13, seed)
    heads = []
    for b in range(count):
        x = "input"
        for d in range(depth):
            w = net.weight(f"branch{b}.{d}.weight",
                           net.rng.standard_normal((size, size)) / math.sqrt(size))
            x = net.node("MatMul", [x, w], f"/branch{b}/MatMul_{d}")
        heads.append(x)
    net.nodes.append(helper.make_node("Sum", heads, ["output"], name="/Sum"))
    io = [helper.make_tensor_value_info(name, net.elem, [size, size])
          for name in ("input", "output")]
    return net.model("branches", io[:1], io[1:],
                     f"{count} branches of {depth} {size}x{size} MatMuls, random weights")


def sample_inputs(model: onnx.ModelProto, sizes: Mapping[str, int] | None = None,
                  seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for one of these models; ``sizes`` gives its symbolic dimensions.

    Token ids fall below the model's vocabulary; a binary mask ends each row but the first in
    some padding (an additive one holds 0 or -10000 there); images are standard normal.
    """
    rng = np.random.default_rng(seed)
    sizes = dict(sizes or {})
    meta = {p.key: p.value for p in model.metadata_props}
    initializers = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tensor = vi.type.tensor_type
        shape = []
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            elif dim.dim_param in sizes:
                shape.append(int(sizes[dim.dim_param]))
            else:
                raise ValueError(f"input {vi.name!r}: give the size of {dim.dim_param!r}")
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if vi.name == "input_ids":
            feeds[vi.name] = rng.integers(0, int(meta.get("vocab_size", 2)), shape,
                                          dtype=np.int64)
        elif vi.name in ("attention_mask", "attention_bias"):
            keep = np.ones((shape[0], shape[-1]), np.float32)
            for row in range(1, shape[0]):
                keep[row, shape[-1] - rng.integers(1, max(2, shape[-1] // 2)):] = 0.0
            value = keep if vi.name == "attention_mask" else (
                (1.0 - keep) * -10000.0).reshape(shape)
            feeds[vi.name] = value.astype(dtype)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def check(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """``onnx.checker`` (full check, shape inference included), then ONNX Runtime's outputs."""
    import onnxruntime

    onnx.checker.check_model(model, full_check=True)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return [np.asarray(y) for y in session.run(None, dict(feeds))]


BUILDERS: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet18": resnet18, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2,
    "bert": bert_encoder, "mlp": mlp}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(BUILDERS))
    parser.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    parser.add_argument("--opset", type=int, default=None,
                        help="default 13 for the CNNs, 17 for bert")
    parser.add_argument("--symbolic", action="store_true",
                        help="symbolic dimensions ('batch', and 'seq' for bert)")
    parser.add_argument("--image", type=int, default=224, help="CNN input resolution")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024, help="the MLP's width")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true",
                        help="run onnx.checker and ONNX Runtime on the model before writing")
    args = parser.parse_args(argv)
    common: dict[str, Any] = {"batch": args.batch, "dtype": args.dtype,
                              "symbolic": args.symbolic, "seed": args.seed}
    if args.opset is not None:
        common["opset"] = args.opset
    if args.model == "bert":
        model = bert_encoder(seq=args.seq, layers=args.layers, hidden=args.hidden,
                             heads=args.heads, **common)
    elif args.model == "mlp":
        model = mlp(batch="batch" if args.symbolic else args.batch, width=args.width,
                    layers=args.layers, seed=args.seed)
    else:
        model = BUILDERS[args.model](image=args.image, **common)
    if args.check:
        sizes = {"batch": args.batch, "seq": args.seq}
        (y, *_) = check(model, sample_inputs(model, sizes))
        print(f"onnx.checker: ok; ONNX Runtime output {y.shape}, max |y| = "
              f"{float(np.abs(y.astype(np.float32)).max()):.4g}")
    onnx.save(model, args.output)
    print(f"wrote {args.output}: {args.model}, {len(model.graph.node)} nodes, "
          f"{sum(int(np.prod(t.dims)) for t in model.graph.initializer):,} weights, "
          f"opset {model.opset_import[0].version}, {args.dtype}")


if __name__ == "__main__":
    main()
