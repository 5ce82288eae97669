"""The compiled kernels' vector width: 16-wide tiles where numba targets AVX-512
(``kernel_parts.WIDE``), 8-wide ones on AVX2. The rest of the suite runs the tiles of this
machine's target; on an AVX-512 machine this also runs the AVX2 tiles, in a process whose
numba targets the CPU without AVX-512 (``NUMBA_CPU_FEATURES``, which also keys numba's
disk cache, so neither process loads the other's kernels)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[3]

_NARROW_CHECK = """
import sys
import numpy as np
import onnxruntime as ort
import graphrt
from graphrt.devices.frozen import freeze
from graphrt.kernels import Epilogue
from graphrt.kernels.cpu import kernel_parts, product_kernels, direct_conv
from graphrt.kernels.cpu.dense import dense_call
from graphrt.ops import TensorType, get_op

assert not kernel_parts.WIDE and product_kernels.PAIR == direct_conv.PAIR == 1
rng = np.random.default_rng(0)
for m, k, n in ((29, 64, 101), (64, 33, 96)):
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    residual = rng.standard_normal((m, n)).astype(np.float32)
    freeze(w); freeze(b)
    types = [TensorType(a.shape, "float32") for a in (x, w, b)]
    prepared = dense_call("dense", get_op("dense").attrs(), types,
                          TensorType((m, n), "float32"), Epilogue(residual=True, relu=True),
                          lambda *a: None)
    out = np.empty((m, n), np.float32)
    prepared.call(x, w, b, residual, out)
    want = np.maximum(x @ w.T + b + residual, 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
sys.path.insert(0, sys.argv[1])
import models
model = models.resnet18(image=32, classes=10, width=16)  # 16 to 128 channels
feeds = models.sample_inputs(model)
got = graphrt.from_onnx(model).create(graphrt.cpu(0))(**feeds)[0]
want = ort.InferenceSession(model.SerializeToString(),
                            providers=["CPUExecutionProvider"]).run(None, feeds)[0]
np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3)
print("narrow ok")
"""


def test_the_width_follows_the_target_and_the_avx2_tiles_match_too() -> None:
    from numba.core import codegen

    from graphrt.kernels.cpu import direct_conv, kernel_parts, product_kernels

    features = codegen.get_host_cpu_features().split(",")
    wide = "+avx512f" in features
    assert wide is kernel_parts.WIDE
    assert product_kernels.PAIR == direct_conv.PAIR == (2 if wide else 1)
    if not wide:
        pytest.skip("numba targets no AVX-512 here: the whole suite ran the AVX2 tiles")
    pytest.importorskip("onnxruntime")
    narrow = ",".join("-" + f[1:] if f.startswith("+avx512") else f for f in features)
    env = {**os.environ, "NUMBA_CPU_FEATURES": narrow}
    done = subprocess.run([sys.executable, "-c", _NARROW_CHECK, str(ROOT / "examples" / "onnx")],
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "narrow ok" in done.stdout
