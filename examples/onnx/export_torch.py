"""Export a PyTorch model with ``torch.onnx.export``, convert it with graphrt, and check it.

The model has a dynamic batch axis (``torch.export.Dim``), which graphrt keeps symbolic up to
the bound given; the outputs are compared with PyTorch's on a batch below the bound.

Needs ``torch`` and ``onnxscript`` (the default exporter, ``dynamo=True``, is written with it),
plus ``torchvision`` for ``resnet18`` (a release built for the installed torch: see
docs/onnx.md). Usage::

    python examples/onnx/export_torch.py mlp -o mlp.onnx
    python examples/onnx/export_torch.py resnet18 -o resnet18.onnx
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

import graphrt

BOUND = 8
"""The largest batch the converted model plans memory for."""


def model_and_input(name: str) -> tuple[Any, Any]:
    """A small model with random weights (nothing is downloaded) and an input for it."""
    import torch

    torch.manual_seed(0)
    if name == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 10))
        return model.eval(), torch.randn(2, 64)
    if name == "resnet18":
        import torchvision

        return torchvision.models.resnet18(weights=None).eval(), torch.randn(2, 3, 64, 64)
    raise ValueError(f"unknown model {name!r} (mlp, resnet18)")


def export(name: str, path: Path) -> tuple[Any, Any]:
    """Write ``name`` as ONNX to ``path`` with a dynamic batch; returns the model and input."""
    import torch

    model, x = model_and_input(name)
    batch = torch.export.Dim("batch", max=BOUND)
    torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"],
                      dynamic_shapes=({0: batch},))
    return model, x


def check(name: str, path: Path) -> graphrt.Bundle:
    """Export, convert and compare graphrt's outputs with PyTorch's at batch 2."""
    import torch

    model, x = export(name, path)
    bundle = graphrt.from_onnx(path, dim_bounds={"batch": BOUND})
    (y,) = bundle.create("cpu")(x=x.numpy())
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    return bundle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=["mlp", "resnet18"])
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    bundle = check(args.model, args.output)
    print(f"{args.output}: exported, converted (batch up to {BOUND}) and matches PyTorch; "
          f"{len(bundle.graph.nodes)} graph nodes")


if __name__ == "__main__":
    main()
