"""Fixtures of the serving tests: the models on disk, the same models in this process, and
``graphrt serve`` processes started on 127.0.0.1 (one shared, one with tight limits)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_harness import BOUND, SERVED, ServerProcess, start_server, write_models


@pytest.fixture(scope="session")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_models(tmp_path_factory.mktemp("served-models"))


@pytest.fixture(scope="session")
def local(model_files: dict[str, Path]) -> dict[str, Any]:
    """Every served model loaded in this process, for the expected results."""
    from graphrt.serve import load_model

    return {name: load_model(path, name=name, dim_bounds={"batch": BOUND}, warm_up=False)
            for name, path in model_files.items()}


@pytest.fixture(scope="session")
def server(model_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ServerProcess]:
    """The shared server: five models, dynamic batching on, HTTP and gRPC."""
    log = tmp_path_factory.mktemp("server") / "serve.log"
    process = start_server({name: model_files[name] for name in SERVED}, log, grpc=True)
    yield process
    status = process.stop()
    assert status == 0, process.log_text()


@pytest.fixture(scope="module")
def tight(model_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[ServerProcess]:
    """A server with a 1 MiB body limit, a queue of 2 and no batching, serving the slow
    model and the MLP."""
    log = tmp_path_factory.mktemp("tight") / "serve.log"
    process = start_server({"slow": model_files["slow"], "mlp": model_files["mlp"]}, log,
                           "--max-body-mib", "1", "--max-queue", "2", "--max-batch", "1")
    yield process
    status = process.stop()
    assert status == 0, process.log_text()
