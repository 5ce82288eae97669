"""Transformers exported the way users export them: ``torch.onnx.export`` (the dynamo
exporter and the TorchScript one) with a dynamic batch *and* a dynamic sequence length,
converted once with bounds on both, then run at several (batch, sequence) pairs within them
and matched against ONNX Runtime. The models are built from small configs with random
weights; nothing is downloaded. Skips cleanly without torch, transformers and onnxscript."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

import graphrt  # noqa: E402

BATCH, SEQ = 4, 32
"""The bounds the converted models plan for."""


def _model(kind: str) -> Any:
    t = transformers
    if kind == "bert":
        return t.BertModel(t.BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64))
    if kind == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4,
                                              n_positions=64))
    if kind == "llama":
        return t.LlamaForCausalLM(t.LlamaConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    if kind == "t5":
        return t.T5EncoderModel(t.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64,
                                           num_layers=2, num_heads=4))
    return t.DistilBertModel(t.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=4,
                                                hidden_dim=64, max_position_embeddings=64))


class _FirstOutput(torch.nn.Module):
    """``model(input_ids, attention_mask)[0]`` (hidden states or logits), without a cache."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        takes = inspect.signature(self.model.forward).parameters
        kwargs = {"use_cache": False} if "use_cache" in takes else {}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)[0]


def _export(kind: str, exporter: str, path: Path) -> None:
    torch.manual_seed(0)
    model = _FirstOutput(_model(kind).eval())
    ids = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    names = {"input_names": ["input_ids", "attention_mask"], "output_names": ["out"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            batch, seq = torch.export.Dim("batch", max=BATCH), torch.export.Dim("seq", max=SEQ)
            torch.onnx.export(model, (ids, mask), path, dynamo=True, **names,
                              dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                              "attention_mask": {0: batch, 1: seq}})
        else:  # the TorchScript exporter, which builds masks with Range from the sizes
            axes = {0: "batch", 1: "seq"}
            torch.onnx.export(model, (ids, mask), path, dynamo=False, opset_version=17,
                              **names, dynamic_axes={"input_ids": axes, "attention_mask": axes,
                                                     "out": axes})


# T5 is not exported by the dynamo exporter (torch fails to decompose its attention's view)
@pytest.mark.parametrize("kind, exporter", [
    *((kind, "dynamo") for kind in ("bert", "gpt2", "llama", "distilbert")),
    *((kind, "torchscript") for kind in ("bert", "gpt2", "llama", "distilbert", "t5"))])
def test_a_transformer_with_dynamic_batch_and_sequence_converts_once(kind: str, exporter: str,
                                                                      tmp_path: Path) -> None:
    path = tmp_path / f"{kind}.onnx"
    _export(kind, exporter, path)
    bundle = graphrt.from_onnx(path, dim_bounds={"batch": BATCH, "seq": SEQ})
    assert set(bundle.graph.shape_vars) == {"batch", "seq"}
    module = bundle.create("cpu")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, seq in [(1, 1), (1, 7), (2, 16), (3, 23), (BATCH, SEQ)]:
        ids = rng.integers(0, 100, (batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        mask[0, seq // 2:] = 0  # a padded row: the mask must reach the attention
        (want,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
        (got,) = module(input_ids=ids, attention_mask=mask)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"{kind} at batch={batch}, seq={seq}")
