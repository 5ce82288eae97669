"""Storage planning: the device-tagged pool a graph needs (pure; allocates nothing)."""

from .plan import Fallback, PoolEntry, StoragePlan, plan_storage
from .report import CopyInfo, DeviceUsage, FallbackInfo, PlacementReport, placement_report

__all__ = [
    "CopyInfo",
    "DeviceUsage",
    "Fallback",
    "FallbackInfo",
    "PlacementReport",
    "PoolEntry",
    "StoragePlan",
    "placement_report",
    "plan_storage",
]
