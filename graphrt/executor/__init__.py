"""The executor: builds a module's steps once at ``create()`` and runs them."""

from .module import GraphModule, create

__all__ = ["GraphModule", "create"]
