"""LitServe serving the same model as ``serve_load.py``'s servers, with LitServe's own batching on.

Started by ``serve_load.py`` as a child process when ``import litserve`` works; not part of torchwork,
and not a benchmark of its own (``make bench`` runs ``benchmarks/*.py`` only).
Same request validation (the pydantic model ``torchwork serve`` builds) and the same answer encoding as
the other servers, so the comparison is about the serving stack. LitServe runs the model in its own
inference worker process and answers through one API server process (``num_api_servers=1``).

Install it without touching the project's pins, e.g.
``pip install --target /tmp/litserve --no-deps litserve==0.2.19 pyzmq==27.3.0`` and run the benchmark with
``PYTHONPATH=/tmp/litserve``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import litserve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # serve_load.py


class ModelAPI(litserve.LitAPI):
    """One item per request in, ``{"predictions": [prediction]}`` out."""

    def __init__(self, model: str, folder: str, max_batch_size: int, batch_timeout: float) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout)
        self.model, self.folder = model, folder

    def setup(self, device: Any) -> None:
        from serve_load import predictor

        from torchwork.serve import configure_threads
        from torchwork.serve.encoding import prediction_encoder
        from torchwork.serve.schemas import Limits, request_model

        configure_threads()
        self.predictor = predictor(self.model, Path(self.folder))
        self.schema = request_model(self.predictor.kind, self.predictor.item_shape, self.predictor.dtype,
                                    Limits())
        self.encode = prediction_encoder(self.predictor.labels)
        self.predictor.predict_batch(self.predictor.example_items(1))

    # No annotations on these two: LitServe reads them to choose the request and response types.
    def decode_request(self, request, **kwargs):
        return self.schema.model_validate(request).inputs[0]

    def batch(self, inputs: list[Any]) -> list[Any]:
        return inputs

    def predict(self, items: list[Any], **kwargs: Any) -> list[Any]:
        return list(self.predictor.predict_batch(items))

    def unbatch(self, output: list[Any]) -> list[Any]:
        return output

    def encode_response(self, output, **kwargs):
        status, body = self.encode([output])
        return json.loads(body)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--folder", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    args = parser.parse_args()
    api = ModelAPI(args.model, args.folder, args.max_batch_size, args.max_wait_ms / 1000)
    server = litserve.LitServer(api, accelerator="cpu", workers_per_device=1, timeout=30)
    print(f"listening on http://127.0.0.1:{args.port}", flush=True)
    server.run(host="127.0.0.1", port=args.port, num_api_servers=1, generate_client_file=False,
               log_level="warning")


if __name__ == "__main__":
    main()
