"""Storage planning: the device-tagged pool a graph needs, and the liveness analysis that
assigns storage ids and checks the ones a graph brings (pure; allocates nothing)."""

from .liveness import (
    BEFORE_RUN,
    StorageAssignment,
    alias_roots,
    assign_storage_ids,
    check_storage_ids,
    live_ranges,
    plan_storage_ids,
)
from .plan import (
    Fallback,
    Placement,
    PoolEntry,
    StoragePlan,
    assign_storage,
    check_capacity,
    place,
    plan_storage,
    with_scratch,
)
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
    "BEFORE_RUN",
    "CopyInfo",
    "DeviceUsage",
    "Fallback",
    "FallbackInfo",
    "Placement",
    "PlacementReport",
    "PoolEntry",
    "RemapInfo",
    "ScratchNeed",
    "ScratchPlan",
    "StorageAssignment",
    "StoragePlan",
    "alias_roots",
    "assign_storage",
    "assign_storage_ids",
    "check_capacity",
    "check_storage_ids",
    "live_ranges",
    "place",
    "placement_report",
    "plan_scratch",
    "plan_storage",
    "plan_storage_ids",
    "with_scratch",
]
