"""The executor: builds a module's steps once at ``create()`` and runs them."""

from .dynamic import TransferLog, TransferStats
from .memory import MemoryReport
from .module import GraphModule, create

__all__ = ["GraphModule", "MemoryReport", "TransferLog", "TransferStats", "create"]
