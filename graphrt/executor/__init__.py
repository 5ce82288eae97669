"""The executor: a compiled graph made once at ``create()``, run contexts that hold what a run
mutates, and ``GraphModule``, the TVM-style facade giving each thread its own context.

- ``compiled.py``: :class:`CompiledGraph` (immutable: graph, plan, node programs, shape
  program, params) and :func:`compile_graph`, a line of passes.
- ``param_store.py``: the params, held once and published copy-on-write.
- ``context.py``: :class:`RunContext` (activations, scratch, staging, stream) and the run,
  its strategy picked once; ``memory.py``: its slots and the memory report.
- ``feeds.py``: a context's inputs and outputs; ``bindings.py``: its zero-copy bindings;
  ``checks.py``: the checks of what callers pass them.
- ``instruments.py``: profile, benchmark, debug outputs and dumps, as functions over a context.
- ``runner.py``: the one loop every run goes through, with hooks.
- ``capture.py``: graph capture, device work recorded once and replayed (``cuda_graph``).
- ``module.py``: :class:`GraphModule` and :func:`create`.
"""

from .benchmark import BenchmarkResult
from .capture import CaptureReport
from .compiled import CompiledGraph, compile_graph, scratch_needs
from .context import RunContext
from .memory import MemoryReport
from .module import GraphModule, create
from .transfers import TransferLog, TransferStats

__all__ = ["BenchmarkResult", "CaptureReport", "CompiledGraph", "GraphModule", "MemoryReport",
           "RunContext", "TransferLog", "TransferStats", "compile_graph", "create", "scratch_needs"]
