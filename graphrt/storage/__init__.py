"""Storage planning: the device-tagged pool a graph needs (pure; allocates nothing)."""

from .plan import Fallback, PoolEntry, StoragePlan, check_capacity, plan_storage, with_scratch
from .report import (
    CopyInfo,
    DeviceUsage,
    FallbackInfo,
    PlacementReport,
    RemapInfo,
    placement_report,
)
from .scratch import ScratchNeed, ScratchPlan, plan_scratch

__all__ = [
    "CopyInfo",
    "DeviceUsage",
    "Fallback",
    "FallbackInfo",
    "PlacementReport",
    "PoolEntry",
    "RemapInfo",
    "ScratchNeed",
    "ScratchPlan",
    "StoragePlan",
    "check_capacity",
    "placement_report",
    "plan_scratch",
    "plan_storage",
    "with_scratch",
]
