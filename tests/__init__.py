"""graphrt's tests, in folders that mirror the packages (ops, kernels/cpu, executor, onnx, ...).

``tests`` and its folders are packages, so a test module is ``tests.<folder>.<name>`` and only
the repository root goes on ``sys.path`` (pytest's default "prepend" import mode): ``tests/onnx``
can never stand in for the real ``onnx``. The shared helpers (``builders``, ``ops_harness``, ...)
live in ``tests/support``, which ``pythonpath`` in pyproject.toml puts on ``sys.path``.
"""
