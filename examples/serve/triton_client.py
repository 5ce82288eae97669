"""A client written for Triton Inference Server, in the style of Triton's own examples
(``simple_http_infer_client.py``): only ``tritonclient`` calls, nothing graphrt-specific. It
runs unchanged against ``graphrt serve``; only the URL and the model name differ.

It checks the server and the model, reads the model's metadata and configuration, makes random
inputs of the declared shapes (a symbolic dimension, -1, becomes ``--batch``), runs inference
synchronously and asynchronously, checks that both answers agree, and prints the statistics.

Usage::

    python examples/serve/triton_client.py -u localhost:8000 -m mlp
    python examples/serve/triton_client.py -u localhost:8001 -i grpc -m mlp
"""

from __future__ import annotations

import argparse
import queue
import sys
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, triton_to_np_dtype


def _tensors(metadata: Any, protocol: str) -> tuple[list[dict[str, Any]], list[str]]:
    if protocol == "grpc":
        def entry(tensor: Any) -> dict[str, Any]:
            return {"name": tensor.name, "datatype": tensor.datatype,
                    "shape": list(tensor.shape)}
        return ([entry(t) for t in metadata.inputs], [t.name for t in metadata.outputs])
    return metadata["inputs"], [t["name"] for t in metadata["outputs"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-u", "--url", default="localhost:8000", help="the server's host:port")
    parser.add_argument("-i", "--protocol", default="http", choices=["http", "grpc"])
    parser.add_argument("-m", "--model-name", required=True)
    parser.add_argument("-b", "--batch", type=int, default=2,
                        help="the size of symbolic (-1) dimensions")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    client_module: Any = grpcclient if args.protocol == "grpc" else httpclient
    try:
        client = client_module.InferenceServerClient(url=args.url, verbose=args.verbose)
    except Exception as err:
        print(f"channel creation failed: {err}")
        return 1
    if not (client.is_server_live() and client.is_server_ready()):
        print("FAILED: the server is not live and ready")
        return 1
    if not client.is_model_ready(args.model_name):
        print(f"FAILED: model {args.model_name} is not ready")
        return 1
    metadata = client.get_model_metadata(args.model_name)
    config = client.get_model_config(args.model_name)
    max_batch = (config.config.max_batch_size if args.protocol == "grpc"
                 else config["max_batch_size"])
    inputs_meta, outputs = _tensors(metadata, args.protocol)
    print(f"model {args.model_name}: max_batch_size {max_batch}, inputs "
          f"{[(t['name'], t['datatype'], t['shape']) for t in inputs_meta]}")

    rng = np.random.default_rng(0)
    inputs = []
    for tensor in inputs_meta:
        shape = [args.batch if dim == -1 else dim for dim in tensor["shape"]]
        dtype = triton_to_np_dtype(tensor["datatype"])
        if np.issubdtype(dtype, np.integer):
            data = rng.integers(0, 10, shape).astype(dtype)
        else:
            data = rng.standard_normal(shape).astype(dtype)
        infer_input = client_module.InferInput(tensor["name"], shape, tensor["datatype"])
        infer_input.set_data_from_numpy(data)
        inputs.append(infer_input)
    requested = [client_module.InferRequestedOutput(name) for name in outputs]

    try:
        result = client.infer(args.model_name, inputs, outputs=requested, request_id="1")
        if args.protocol == "grpc":
            answers: queue.Queue[Any] = queue.Queue()
            client.async_infer(args.model_name, inputs,
                               lambda result, error: answers.put((result, error)),
                               outputs=requested, request_id="2")
            later, error = answers.get(timeout=60)
            if error is not None:
                raise error
        else:
            later = client.async_infer(args.model_name, inputs, outputs=requested,
                                       request_id="2").get_result()
    except InferenceServerException as err:
        print(f"FAILED: inference: {err}")
        return 1
    for name in outputs:
        first, second = result.as_numpy(name), later.as_numpy(name)
        if first is None or not np.array_equal(first, second):
            print(f"FAILED: output {name} differs between the two requests")
            return 1
        print(f"output {name}: shape {list(first.shape)}, dtype {first.dtype}, "
              f"mean {float(np.mean(first)):.6g}")
    statistics = client.get_inference_statistics(args.model_name)
    stats = (statistics.model_stats[0] if args.protocol == "grpc"
             else statistics["model_stats"][0])
    count = (stats.inference_count if args.protocol == "grpc" else stats["inference_count"])
    print(f"inference_count {count}")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
