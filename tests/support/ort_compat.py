"""The ONNX IR version the installed ONNX Runtime reads, for tests that hand it models.

onnx writes its newest IR version by default (``onnx.IR_VERSION``), which an older onnxruntime
refuses ("Unsupported model IR version: 14, max supported IR version: 13"). Every test that gives
ONNX Runtime a model builds it with :func:`ort_ir_version` or passes it through :func:`for_ort`.

Example:
    >>> model = for_ort(helper.make_model(graph))  # doctest: +SKIP
    >>> model.ir_version <= ort_ir_version()  # doctest: +SKIP
    True
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["for_ort", "ort_ir_version", "ort_reads_opset"]

_OLDEST = 3
"""The oldest IR version with opset imports (what the probe's model needs)."""


@functools.cache
def ort_ir_version() -> int:
    """The IR version to write for ONNX Runtime: the least of what onnx writes by default and
    the highest the installed onnxruntime loads (probed once, with a one-node model, from the
    newest version down; onnx's own when onnxruntime is not installed)."""
    import onnx
    from onnx import TensorProto, helper

    try:
        import onnxruntime
    except ImportError:
        return int(onnx.IR_VERSION)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    for version in range(int(onnx.IR_VERSION), _OLDEST, -1):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=version)
        try:
            onnxruntime.InferenceSession(model.SerializeToString(),
                                         providers=["CPUExecutionProvider"])
        except Exception:  # onnxruntime's Fail: "Unsupported model IR version"
            continue
        return version
    return _OLDEST


def for_ort(model: Any) -> Any:
    """``model`` (an ``onnx.ModelProto``, changed in place) with its IR version lowered to
    :func:`ort_ir_version` where it is higher; a lower one, set on purpose, is kept."""
    model.ir_version = min(int(model.ir_version), ort_ir_version())
    return model


@functools.cache
def ort_reads_opset(opset: int) -> bool:
    """Whether the installed onnxruntime loads a model importing ai.onnx ``opset`` (an older
    one refuses an opset newer than its release: ORT 1.30 stops at 26); False without it."""
    import onnx
    from onnx import TensorProto, helper

    try:
        import onnxruntime
    except ImportError:
        return False
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=min(int(onnx.IR_VERSION), ort_ir_version()))
    try:
        onnxruntime.InferenceSession(model.SerializeToString(),
                                     providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime's Fail: "Opset 27 is under development"
        return False
    return True
