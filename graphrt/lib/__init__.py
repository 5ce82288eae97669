"""Kernel libraries: ``func_name`` (and device type) → kernel."""

from .library import Kernel, Library, LibrarySource, as_library

__all__ = ["Kernel", "Library", "LibrarySource", "as_library"]
