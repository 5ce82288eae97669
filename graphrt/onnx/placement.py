"""Placement of converted steps on device types, and the report of what was decided.

Each step goes to the first of the preferred device types whose kernels implement its
standard op (:func:`graphrt.kernels.supports`: ONNX Runtime's GetCapability), unless the
caller sends its ONNX node (by name) or every node of its ONNX op type elsewhere. Placement
runs before fusion, so fused groups never cross devices; ``emit`` inserts a ``__copy`` node
wherever a value is read on another device than the one it is made on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..devices.base import KIND_CODES
from ..errors import ConversionError
from ..kernels import supports
from ..ops import get_op
from .builder import Builder
from .emit import EmittedNode

__all__ = ["FIRST_IMPLEMENTING", "check_devices", "place_steps", "placement_decisions"]

FIRST_IMPLEMENTING = "first of devices that implements it"


def check_devices(devices: Sequence[str] | None) -> list[str] | None:
    """The preferred device types as a list, checked: known kinds, none twice, not empty.

    Raises:
        ConversionError: naming the device type that is unknown or repeated.
    """
    if devices is None:
        return None
    kinds = [str(d) for d in devices]
    if not kinds:
        raise ConversionError("devices is empty; give at least one device type (\"cpu\")")
    for kind in kinds:
        if kind not in KIND_CODES:
            raise ConversionError(f"devices: unknown device type {kind!r} (known: "
                                  f"{', '.join(KIND_CODES)}); give types, not devices "
                                  "(\"cuda\", not \"cuda:0\")")
    repeated = sorted({k for k in kinds if kinds.count(k) > 1})
    if repeated:
        raise ConversionError(f"devices: {repeated[0]!r} is listed twice")
    return kinds


def _implements(op: str, kind: str) -> bool:
    return supports(kind, get_op(op))


def place_steps(b: Builder, devices: Sequence[str], overrides: Mapping[str, str],
                nodes: Mapping[str, tuple[str, str]]) -> list[str]:
    """Give every step a device type (``step.device``); returns why, one reason per step.

    Args:
        b: the converted model.
        devices: device types in order of preference (checked by :func:`check_devices`).
        overrides: ONNX node name or op type → device type; a node name wins over its op type.
        nodes: every ONNX node's label (``ConvertedStep.source``) → ``(op_type, name)``.

    Raises:
        ConversionError: an override naming no node name or op type of the model, sending
            to a device type not in ``devices``, or to one that does not implement a step's
            op; a step no listed device implements.
    """
    op_types = {op_type for op_type, _ in nodes.values()}
    names = {name for _, name in nodes.values() if name}
    for key, kind in overrides.items():
        if key not in names and key not in op_types:
            raise ConversionError(f"placement: {key!r} is neither a node name nor an op type "
                                  f"of the model (op types: {', '.join(sorted(op_types))})")
        if kind not in devices:
            raise ConversionError(f"placement sends {key!r} to {kind!r}, which is not among "
                                  f"the devices ({', '.join(devices)}); add it to devices=")
    reasons = []
    for step in b.steps:
        op_type, name = nodes.get(step.source, ("", ""))
        if name and name in overrides:
            kind, reason = overrides[name], f"override by node name {name!r}"
        elif op_type in overrides:
            kind, reason = overrides[op_type], f"override by op type {op_type}"
        else:
            found = [k for k in devices if _implements(step.op, k)]
            if not found:
                raise ConversionError(f"{step.source}: op {step.op!r} is implemented on none "
                                      f"of the devices ({', '.join(devices)})")
            kind, reason = found[0], FIRST_IMPLEMENTING
        if not _implements(step.op, kind):
            raise ConversionError(f"{step.source}: placement sends it to {kind!r}, but op "
                                  f"{step.op!r} has no {kind} implementation")
        step.device = kind
        reasons.append(reason)
    return reasons


def placement_decisions(nodes: Sequence[EmittedNode], reasons: Sequence[str]
                        ) -> list[dict[str, Any]]:
    """One decision per emitted op node: ``{node, func_name, device, reason}``.

    A fused node's reason is its steps' distinct reasons in order, joined by ``"; "``
    (usually one); a copy's says which devices it links.
    """
    decisions = []
    for node in nodes:
        if node.copied_from is not None:
            reason = f"copy from {node.copied_from} to {node.device}"
        else:
            reason = "; ".join(dict.fromkeys(reasons[i] for i in node.steps))
        decisions.append({"node": node.node, "func_name": node.func_name,
                          "device": node.device, "reason": reason})
    return decisions
