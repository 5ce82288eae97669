"""Drop-in replacements for TVM's Python runtime modules.

- :mod:`graphrt.contrib.graph_executor`: ``tvm.contrib.graph_executor`` (``create``,
  ``GraphModule``, ``NDArray``) over :func:`graphrt.create`. Code written for TVM's graph
  executor runs by changing its import to ``from graphrt.contrib import graph_executor`` and
  giving it a graphrt lib instead of TVM's compiled ``.so`` (see ``docs/migration-from-tvm.md``).

Example:
    >>> from graphrt.contrib import graph_executor
    >>> graph_executor.cpu(0)
    graphrt.device('cpu:0')
"""

from __future__ import annotations

from . import graph_executor

__all__ = ["graph_executor"]
