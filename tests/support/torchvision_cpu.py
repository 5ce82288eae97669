"""torchvision beside a CPU-only torch, for tests that export its models.

PyPI's torchvision wheels are CUDA builds whose C++ ops do not load beside the CPU torch
(``operator torchvision::nms does not exist``). Defining the two op schemas torchvision's
Python code registers fake kernels for (``nms``, ``qnms``) and ``roi_align``, with CPU kernels
written in PyTorch, lets ``import torchvision`` succeed and its detection models run and export:
torchvision's ONNX symbolics turn these ops into ``NonMaxSuppression`` and ``RoiAlign``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

_LIBRARY: Any = None


def _nms(dets: Any, scores: Any, iou_threshold: float) -> Any:
    """Greedy NMS over ``[x1, y1, x2, y2]`` boxes, highest score first (torchvision's)."""
    import torch

    order = torch.argsort(scores, descending=True, stable=True)
    x1, y1, x2, y2 = dets.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    keep: list[int] = []
    suppressed = torch.zeros(dets.shape[0], dtype=torch.bool)
    for index in order.tolist():
        if suppressed[index]:
            continue
        keep.append(index)
        width = (torch.minimum(x2, x2[index]) - torch.maximum(x1, x1[index])).clamp(min=0)
        height = (torch.minimum(y2, y2[index]) - torch.maximum(y1, y1[index])).clamp(min=0)
        inter = width * height
        iou = inter / (area + area[index] - inter)
        suppressed |= iou > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _roi_align(input: Any, rois: Any, spatial_scale: float, pooled_height: int,
               pooled_width: int, sampling_ratio: int, aligned: bool) -> Any:
    """torchvision's own RoIAlign written in PyTorch (what it compiles with torch.compile)."""
    from torchvision.ops.roi_align import _roi_align as roi_align

    return roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                     aligned)


def _has_ops() -> bool:
    return True


def load() -> ModuleType:
    """``import torchvision``, defining the ops its CUDA build's library would have.

    Raises:
        ImportError: torch or torchvision is not installed.
    """
    global _LIBRARY
    import torch

    try:
        import torchvision
        import torchvision.extension

        if torchvision.extension._has_ops() or _LIBRARY is not None:
            return torchvision
    except RuntimeError:
        pass  # the ops are missing: define them, then import again
    if _LIBRARY is None:
        library = torch.library.Library("torchvision", "DEF")
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("roi_align(Tensor input, Tensor rois, float spatial_scale, "
                       "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, "
                       "bool aligned) -> Tensor")
        library.impl("nms", _nms, "CPU")
        library.impl("qnms", _nms, "CPU")
        library.impl("roi_align", _roi_align, "CPU")
        _LIBRARY = library
    import sys

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # a failed import left half-initialized modules
    import torchvision
    import torchvision.extension

    # the ops exist now (in Python): let torchvision's checks pass
    torchvision.extension._has_ops = _has_ops
    return torchvision
