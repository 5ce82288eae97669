"""Storage planning: the device-tagged pool a graph needs (pure; allocates nothing)."""

from .plan import Fallback, PoolEntry, StoragePlan, plan_storage

__all__ = ["Fallback", "PoolEntry", "StoragePlan", "plan_storage"]
