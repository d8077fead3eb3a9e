"""Serving under load: torchwork serve's dynamic batcher against its ceilings and a naive server.

Loopback only, bounded in time. Closed-loop load (each connection sends its next request as soon as the
answer arrives, HTTP/1.1 keep-alive, one item per request) at concurrency 1, 16 and 64 for a fixed time,
from a lean client (raw asyncio protocol, no HTTP library) in its own process. Servers per model, measured
interleaved, round after round:
- ``trivial``: the HTTP ceiling, a POST endpoint that reads the body and answers a constant;
- ``naive``: one forward per request, inline in the handler (same validation and answer encoding);
- ``batched``: ``torchwork serve --no-model-process`` (dynamic batching on a worker thread; ``serve()``'s
  default in Python);
- ``batched-process``: ``torchwork serve`` (the default: the batches run in a model process);
- ``litserve``: LitServe with its batching on (``servers/litserve_server.py``), when ``import litserve`` works;
all but LitServe on the same stack (FastAPI + uvicorn, access log off); and in this process, the model
ceiling of each torchwork mode: ``predict_batch`` throughput at the batch size that server formed. Only the
server being measured runs: the others are stopped (SIGSTOP) meanwhile, and all of them while a model
ceiling is measured.

Models: ``text``, the quickstart's model (``TfidfNGramClassifier`` at its default size, vocabulary and IDF
fitted on the real training tweets) exported by ``torchwork.deploy.export`` and loaded from its artifact as
``torchwork serve DIR`` does, fed real test tweets: HTTP-bound; ``cnn``, a CNN over 28x28 Fashion-MNIST
images from Debian's dataset-fashion-mnist, random weights, with a wide fully connected head: its batch-1
forward takes about 6 ms and batching pays; ``cnn-mid``, the same with a head half as wide (about 2 ms),
whose model ceiling is of the order of the HTTP ceiling; ``transformer``, the quickstart's
``--model transformer`` artifact (MiniLM, ONNX, the tokenizer inside), its variant to deploy: pass the one a
quickstart run wrote with ``--transformer-artifact runs/<run>/artifact``, else one is exported here from the
pretrained MiniLM with an untrained head (speed does not depend on the head's weights), INT8 served.

Prints one JSON object: per model and concurrency the median over rounds of throughput (req/s), p50/p99
latency (ms), errors, server CPU ms per request (its child processes included), mean batch size; for each
torchwork mode, ratios against the goals (concurrency 1: p50 within 1.2x of naive; concurrency 64:
throughput >= 0.8 x min(HTTP ceiling, model ceiling), above naive and LitServe). On a machine whose cores
other processes share, throughput ratios move with their load; the CPU ratio ``cpu_over_parts`` (server
CPU per request / (HTTP CPU per request + model CPU per item)) says what the server itself costs beyond
its two parts.

Run: ``python benchmarks/serve_load.py`` (about 5 minutes) or ``--quick`` (about 2 minutes).

``--v2`` measures instead the Open Inference Protocol's route against ``/predict`` on the text model (JSON and
binary tensors, keys off and on, at concurrency 1 and 64) and a reload under load at concurrency 32
(:func:`bench_protocol`, :func:`bench_reload`).
"""


import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from neighbour import neighbour  # benchmarks/neighbour.py: one core kept busy
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

ROOT = Path(__file__).resolve().parents[1]
FASHION = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
VARIANTS = ("trivial", "naive", "batched", "batched-process")
SERVED = ("batched", "batched-process")  # torchwork serve: batches on a worker thread, or in a model process


# ---------------------------------------------------------------- models (imported lazily: torch)
# Width of the CNNs' dense head. ``cnn``: 5.9 ms per lone image, ~1,100 images/s in batches (the issue's
# "batch-1 forward takes several ms"). ``cnn-mid``: 2.1 ms and ~2,600/s, where the model and HTTP ceilings
# are of the same order, so both halves of the server want a whole core each on this 2-core machine.
CNN_HIDDEN = {"cnn": 4096, "cnn-mid": 2048}


def fashion_cnn(hidden: int) -> Any:
    from torch import nn

    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 49, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def build_text_artifact(folder: Path) -> None:
    """The quickstart's model at its default size, exported (pt2 and ONNX) with its preprocessing.

    The vocabulary and the IDF tables are fitted on the real training tweets; the weights are left at their
    initial values: speed does not depend on them, and training would add a minute.
    """
    import torch

    from torchwork.data import TextPreprocessor, load_dataset
    from torchwork.deploy import export
    from torchwork.recipes.models import TfidfNGramClassifier
    from torchwork.recipes.sentiment import SentimentConfig

    config = SentimentConfig()
    dataset = load_dataset("tweets", seed=0)
    texts = dataset.train.texts
    preprocessor = TextPreprocessor.fit(texts, min_freq=config.min_freq, max_vocab=config.max_vocab,
                                        max_length=config.max_length)
    torch.manual_seed(0)
    model = TfidfNGramClassifier(list(preprocessor.vocab), len(dataset.classes), chars=config.chars)
    model.fit_idf(preprocessor(texts)[0])
    export(model, preprocessor(texts[:8]), folder / "text-artifact", formats=("pt2", "onnx"),
           preprocess=preprocessor, labels=list(dataset.classes), softmax=True, verify_rounds=2)


def build_transformer_artifact(folder: Path) -> None:
    """MiniLM with a new (untrained) head, exported as the quickstart does: ONNX + INT8, tokenizer bundled."""
    import torch

    from torchwork.data import load_dataset
    from torchwork.deploy import export
    from torchwork.finetune.minilm import MiniLMClassifier
    from torchwork.recipes.transformer_texts import subword_tokenizer

    torch.manual_seed(0)
    dataset = load_dataset("tweets", seed=0)
    tokenizer = subword_tokenizer(64)
    export(MiniLMClassifier(classes=len(dataset.classes)).eval(), tokenizer(list(dataset.train.texts[:8])),
           folder / "transformer-artifact", formats=("onnx",), preprocess=tokenizer, labels=list(dataset.classes),
           softmax=True, quantize="int8", strict=False, input_names=("input_ids", "attention_mask"))


def build(folder: Path, models: list[str]) -> None:
    """The text artifact; CNN weights, and ONNX exports (dynamic batch) for the ``-onnx`` CNNs asked for."""
    import torch

    torch.set_num_threads(1)
    if any(model.startswith("text") for model in models):
        build_text_artifact(folder)
    if "transformer" in models and not (folder / "transformer-artifact").exists():
        build_transformer_artifact(folder)
    for model in {m.removesuffix("-onnx") for m in models} & set(CNN_HIDDEN):
        torch.manual_seed(0)
        torch.save(fashion_cnn(CNN_HIDDEN[model]).state_dict(), folder / f"{model}.pt")
    for model in models:
        if model.startswith("cnn") and model.endswith("-onnx"):
            torch.onnx.export(torch_model(model.removesuffix("-onnx"), folder), (torch.zeros(2, 1, 28, 28),),
                              str(folder / f"{model}.onnx"), dynamo=True, verbose=False,
                              dynamic_shapes=({0: torch.export.Dim("batch", max=4096)},))


def torch_model(model: str, folder: Path) -> Any:
    import torch

    module = fashion_cnn(CNN_HIDDEN[model])
    module.load_state_dict(torch.load(folder / f"{model}.pt", weights_only=True))
    return module.eval()


def predictor(model: str, folder: Path) -> Any:
    """The served predictor. ``text``: the artifact's variant to deploy (its deploy choice, ONNX here on 2
    Dec 2026), as ``torchwork serve DIR`` loads it; ``text-onnx`` its ONNX variant; the CNNs on PyTorch, or
    ONNX Runtime for ``-onnx``."""
    from torchwork.serve import OnnxPredictor, TorchPredictor, predictor_from_artifact

    if model.startswith("text"):
        return predictor_from_artifact(folder / "text-artifact", "onnx" if model.endswith("-onnx") else None)
    if model == "transformer":
        manifest = json.loads((folder / "transformer-artifact" / "manifest.json").read_text())
        return predictor_from_artifact(folder / "transformer-artifact",
                                       "onnx-int8" if "onnx-int8" in manifest["variants"] else None)
    spec = {"item_shape": (1, 28, 28), "labels": [f"class{i}" for i in range(10)]}
    if model.endswith("-onnx"):
        return OnnxPredictor(folder / f"{model}.onnx", name=model, **spec)
    return TorchPredictor(torch_model(model, folder), name=model, **spec)


def items(model: str, n: int = 16) -> list[Any]:
    """Real inputs: test-split tweets for text, Fashion-MNIST test images (scaled to 0..1) for the CNN."""
    if model.startswith("text") or model == "transformer":
        import random

        from torchwork.data import load_dataset

        texts = load_dataset("tweets", seed=0).test.texts
        return random.Random(0).sample(list(texts), n)  # the split lists its rows class by class
    import gzip

    import numpy as np

    if FASHION.exists():
        raw = np.frombuffer(gzip.decompress(FASHION.read_bytes())[16:16 + n * 784], dtype=np.uint8)
    else:  # Debian's dataset-fashion-mnist is missing: noise of the same shape
        raw = np.random.default_rng(0).integers(0, 256, n * 784, dtype=np.uint8)
    images = (raw.reshape(n, 1, 28, 28) / 255.0).round(3)
    return images.tolist()


# ---------------------------------------------------------------- servers (child processes)
def run_server(variant: str, model: str, folder: Path, max_batch_size: int, max_wait_ms: float,
               http: str = "httptools", model_nice: int = 10, keys: bool = False) -> None:
    import uvicorn

    from torchwork.serve import ServeConfig, configure_threads, serve
    from torchwork.serve.keys import KeyCheck, KeyRing
    from torchwork.serve.server import bind

    threads = configure_threads()
    config = ServeConfig(port=0, max_batch_size=max_batch_size, max_wait_ms=max_wait_ms, threads=threads, http=http)
    check = KeyCheck(KeyRing.from_lines([BENCH_KEY])) if keys else None
    if variant == "batched":
        serve(predictor(model, folder), config, name=model, keys=check)
        return
    if variant == "batched-process":
        from torchwork.serve import ModelProcess

        serve(predictor(model, folder), config, ModelProcess(predictor, model, folder, threads=threads,
                                                             nice=model_nice), name=model, keys=check)
        return
    from fastapi import FastAPI, Request, Response
    from pydantic import ValidationError

    from torchwork.serve.encoding import prediction_encoder
    from torchwork.serve.heap import settle_heap
    from torchwork.serve.schemas import Limits, error_body, request_model, validation_message

    app = FastAPI()
    if variant == "trivial":
        constant = b'{"predictions": [{"output": 0}]}'

        async def trivial(request: Request) -> Response:
            await request.body()
            return Response(constant, media_type="application/json")

        app.add_api_route("/predict", trivial, methods=["POST"])
    else:
        model_predictor = predictor(model, folder)
        schema = request_model(model_predictor.kind, model_predictor.item_shape, model_predictor.dtype, Limits())
        encode = prediction_encoder(model_predictor.labels)

        async def naive(request: Request) -> Response:
            try:
                inputs = schema.model_validate_json(await request.body()).inputs
            except ValidationError as error:
                return Response(error_body(validation_message(error)), 422, media_type="application/json")
            status, body = encode(model_predictor.predict_batch(inputs))  # blocks the loop: that's naive
            return Response(body, status, media_type="application/json")

        app.add_api_route("/predict", naive, methods=["POST"])
        model_predictor.predict_batch(model_predictor.example_items(1))
    settle_heap()  # the collector tuned as in torchwork serve: the comparison is about batching, not GC
    sock = bind("127.0.0.1", 0)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, server_header=False, http=http,
                                  loop="asyncio")).run(sockets=[sock])


def litserve_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("litserve") is not None


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    def __init__(self, variant: str, model: str, folder: Path, max_batch_size: int, max_wait_ms: float,
                 http: str = "httptools", model_nice: int = 10, keys: bool = False) -> None:
        self.variant = variant
        paths = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        options = ["--model", model, "--folder", str(folder), "--max-batch-size", str(max_batch_size),
                   "--max-wait-ms", str(max_wait_ms)]
        if variant == "litserve":  # LitServe wants its port up front
            command = [str(Path(__file__).parent / "servers" / "litserve_server.py"), "--port", str(free_port())]
        else:
            command = [__file__, "--serve", variant, "--http", http, "--model-nice", str(model_nice),
                       *(["--keys"] if keys else [])]
        self.process = subprocess.Popen([sys.executable, *command, *options], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=env, start_new_session=True)

    def wait(self) -> None:
        match = None
        while match is None:  # torchwork serve says "warming up" first, then the address once ready
            line = self.process.stdout.readline().decode()
            if not line:
                raise RuntimeError(f"{self.variant} server did not start")
            match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        self.port = int(match.group(1))
        ready_path = {"batched": "/readyz", "batched-process": "/readyz", "litserve": "/health"}.get(self.variant)
        if ready_path:
            deadline = time.monotonic() + 60
            while get(self.port, ready_path)[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.variant} server never became ready")
                time.sleep(0.05)

    def cpu_seconds(self) -> float:
        """CPU of the server and its child processes (LitServe runs its model in one)."""
        import psutil

        total = 0.0
        parent = psutil.Process(self.process.pid)
        for process in [parent, *parent.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def pause(self, paused: bool) -> None:
        """Stop (SIGSTOP) or continue the server's whole process group. Servers not being measured are
        stopped: an idle LitServe polls, about 0.13 vCPU here, which the measured server would lose."""
        os.killpg(self.process.pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def stop(self) -> None:
        self.pause(False)
        os.killpg(self.process.pid, signal.SIGTERM)  # the whole group: LitServe's workers too
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def get(port: int, path: str) -> tuple[int, str]:
    import http.client

    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    except OSError:
        return 0, ""


def batch_totals(port: int) -> tuple[float, float]:
    text = get(port, "/metrics")[1]
    values = dict(re.findall(r"^(torchwork_batch_size_(?:sum|count)) (\S+)$", text, re.M))
    return float(values.get("torchwork_batch_size_sum", 0)), float(values.get("torchwork_batch_size_count", 0))


# ---------------------------------------------------------------- the load generator (child process)
def run_client(port: int, bodies: list[bytes], concurrency: int, seconds: float, warmup: float,
               raw: bool = False, routes: int = 1) -> dict[str, Any]:
    """Closed loop over ``concurrency`` keep-alive connections; asyncio protocols, no HTTP library.
    ``raw``: ``bodies`` are whole HTTP requests (another route, other headers), else ``/predict`` bodies.
    ``routes`` > 1: ``bodies`` are that many routes' requests in turn (route k at k, k + routes, ...); each
    connection sends them in turn, so every route meets the same moment of the machine, and each route's
    latencies are counted apart (``by_route``)."""
    requests = bodies if raw else [
        b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body) for body in bodies]
    per_route: list[list[float]] = [[] for _ in range(routes)]
    loop = asyncio.new_event_loop()
    start = time.perf_counter()
    measure_from, end = start + warmup, start + warmup + seconds
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    lost = [0]
    answered = [0]  # every answer, warm-up included
    open_connections = [concurrency]
    finished = loop.create_future()

    def closed() -> None:
        open_connections[0] -= 1
        if open_connections[0] == 0 and not finished.done():
            finished.set_result(None)

    class Client(asyncio.Protocol):
        def __init__(self, index: int) -> None:
            self.index, self.buffer, self.sent, self.done = index, b"", 0.0, False

        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.fire()

        def fire(self) -> None:
            self.sent = time.perf_counter()
            if self.sent >= end:
                self.done = True
                self.transport.close()
                return
            self.transport.write(requests[self.index % len(requests)])
            self.index += 1

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            match = re.search(rb"(?:^|\r\n)content-length: *(\d+)", self.buffer[:head_end], re.I)
            total = head_end + 4 + int(match.group(1) if match else 0)
            if len(self.buffer) < total:
                return
            status = int(self.buffer[9:12])
            self.buffer = self.buffer[total:]
            now = time.perf_counter()
            answered[0] += 1
            if self.sent >= measure_from and now <= end:
                latencies.append(now - self.sent)
                per_route[(self.index - 1) % len(requests) % routes].append(now - self.sent)
                statuses[status] += 1
            self.fire()

        def connection_lost(self, exc: Exception | None) -> None:
            if not self.done:
                lost[0] += 1
            closed()

    async def main() -> None:
        for i in range(concurrency):
            try:
                await loop.create_connection(lambda i=i: Client(i), "127.0.0.1", port)
            except OSError:
                lost[0] += 1
                closed()
        await asyncio.wait_for(finished, timeout=warmup + seconds + 30)

    loop.run_until_complete(main())
    loop.close()
    latencies.sort()

    def percentile(q: float) -> float | None:
        return round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else None

    out = {"throughput": round(len(latencies) / seconds, 1), "p50_ms": percentile(0.5),
           "p99_ms": percentile(0.99), "requests": len(latencies), "answered": answered[0],
           "errors": sum(n for s, n in statuses.items() if s != 200) + lost[0]}
    if routes > 1:
        out["by_route"] = [{"requests": len(times), "p50_ms": round(1000 * statistics.median(times), 4) if times
                            else None, "mean_ms": round(1000 * statistics.fmean(times), 4) if times else None}
                           for times in per_route]
    return out


def load(port: int, body_file: Path, concurrency: int, seconds: float, warmup: float,
         raw: bool = False, routes: int = 1) -> dict[str, Any]:
    out = subprocess.run(load_command(port, body_file, concurrency, seconds, warmup, raw, routes),
                         capture_output=True, text=True, timeout=seconds + warmup + 60)
    if out.returncode != 0:
        raise RuntimeError(f"load generator failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def load_command(port: int, body_file: Path, concurrency: int, seconds: float, warmup: float,
                 raw: bool = False, routes: int = 1) -> list[str]:
    return [sys.executable, __file__, "--client", "--port", str(port), "--bodies", str(body_file),
            "--concurrency", str(concurrency), "--seconds", str(seconds), "--warmup", str(warmup),
            *(["--raw"] if raw else []), *(["--routes", str(routes)] if routes > 1 else [])]


# ---------------------------------------------------------------- model ceiling (this process)
def model_ceiling(model_predictor: Any, example: list[Any], batch_size: int, seconds: float) -> dict[str, float]:
    """Items per second through ``predict_batch`` at ``batch_size``, and CPU milliseconds per item."""
    batch = [example[i % len(example)] for i in range(batch_size)]
    model_predictor.predict_batch(batch)
    done, started, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds:
        model_predictor.predict_batch(batch)
        done += batch_size
    return {"batch_size": batch_size, "throughput": round(done / (time.perf_counter() - started), 1),
            "cpu_ms_per_item": round(1000 * (time.process_time() - cpu) / done, 4)}


def bench_model(model: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    from torchwork.serve import configure_threads

    configure_threads()  # the same thread count as the servers
    examples = items(model)
    body_file = folder / f"{model}-bodies.json"
    body_file.write_text(json.dumps([json.dumps({"inputs": [item]}) for item in examples]))
    variants = (*VARIANTS, "litserve") if args.litserve else VARIANTS
    servers = {v: Server(v, model, folder, args.max_batch_size, args.max_wait_ms, args.http, args.model_nice)
               for v in variants}
    model_predictor = predictor(model, folder)
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {
        c: {v: [] for v in (*variants, *(f"ceiling-{s}" for s in SERVED))} for c in args.concurrency}
    try:
        for server in servers.values():
            server.wait()
        for round_index in range(args.rounds):
            for c in args.concurrency:
                turn = round_index % len(variants)
                order = variants[turn:] + variants[:turn]  # rotate who goes first
                for variant in order:
                    for name, server in servers.items():
                        server.pause(name != variant)  # only the measured server runs
                    port = servers[variant].port
                    before = batch_totals(port) if variant in SERVED else None
                    cpu_before = servers[variant].cpu_seconds()
                    result = load(port, body_file, c, args.seconds, args.warmup)
                    # CPU per request holds up better than req/s when other processes share the cores
                    result["server_cpu_ms_per_request"] = round(
                        1000 * (servers[variant].cpu_seconds() - cpu_before) / max(1, result["answered"]), 3)
                    if before is not None:
                        after = batch_totals(port)
                        result["mean_batch_size"] = round((after[0] - before[0]) / max(1, after[1] - before[1]), 2)
                    if variant in SERVED:  # the ceiling at the batch size this server formed
                        servers[variant].pause(True)
                        formed = max(1, round(result["mean_batch_size"]))
                        runs[c][f"ceiling-{variant}"].append(model_ceiling(model_predictor, examples, formed,
                                                                           args.ceiling_seconds))
                    runs[c][variant].append(result)
    finally:
        for server in servers.values():
            server.stop()
    return summarize(runs)


def summarize(runs: dict[int, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c, by_variant in runs.items():
        row: dict[str, Any] = {}
        for variant in (v for v in by_variant if not v.startswith("ceiling-")):
            rows = by_variant[variant]
            row[variant] = {"throughput": _median_of(rows, "throughput"), "p50_ms": _median_of(rows, "p50_ms"),
                            "p99_ms": _median_of(rows, "p99_ms"), "errors": sum(r["errors"] for r in rows),
                            "server_cpu_ms_per_request": _median_of(rows, "server_cpu_ms_per_request")}
        row["ratios"] = {}
        for variant in (v for v in SERVED if v in row):
            served = row[variant]
            served["mean_batch_size"] = _median_of(by_variant[variant], "mean_batch_size")
            served["model_ceiling"] = model = {key: _median_of(by_variant[f"ceiling-{variant}"], key)
                                               for key in ("throughput", "batch_size", "cpu_ms_per_item")}
            ceiling = min(row["trivial"]["throughput"], model["throughput"])
            row["ratios"][variant] = {
                "p50_over_naive_p50": _ratio(served["p50_ms"], row["naive"]["p50_ms"]),
                "over_min_ceiling": _ratio(served["throughput"], ceiling),
                "over_naive_throughput": _ratio(served["throughput"], row["naive"]["throughput"]),
                "over_litserve_throughput": _ratio(served["throughput"], row.get("litserve", {}).get("throughput")),
                # When the HTTP half and the model half must share one core (a neighbour holds the other),
                # they cannot overlap: the most a server can do is 1 / (1/HTTP + 1/model), which is below
                # min(ceilings) by the factor model / (HTTP + model).
                "over_shared_core_bound": _ratio(served["throughput"], _shared_bound(row["trivial"]["throughput"],
                                                                                     model["throughput"])),
                # CPU is what other processes cannot blur: the server's CPU per request against the sum of
                # its parts (the trivial server's per request + the model's per item at that batch size)
                "cpu_over_parts": _ratio(served["server_cpu_ms_per_request"],
                                         (row["trivial"]["server_cpu_ms_per_request"] or 0)
                                         + (model["cpu_ms_per_item"] or 0)),
            }
        out[f"c{c}"] = row
    return out


def _shared_bound(http: float | None, model: float | None) -> float | None:
    """Requests per second when each request's HTTP work and model work run one after the other."""
    return round(1 / (1 / http + 1 / model), 1) if http and model else None


def _median(values: list[Any]) -> float | None:
    """The median of the values that were measured (None: not measured), to 3 decimals."""
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def _median_of(rows: list[dict[str, Any]], key: str) -> float | None:
    """The median of ``key`` over the runs that measured it."""
    return _median([row.get(key) for row in rows])


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, shorter runs (about 40 s)")
    parser.add_argument("--rounds", type=int, help="default 3 (--v2: 16: its ratios within a few percent need many pairs)")
    parser.add_argument("--seconds", type=float, help="measured seconds per run; default 1.2 (--v2: 2, as its "
                                                      "ratios within a few percent need longer runs)")
    parser.add_argument("--warmup", type=float, default=0.3)
    parser.add_argument("--ceiling-seconds", type=float, default=0.4)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--models", nargs="+", default=["text", "cnn", "cnn-mid"],
                        choices=["text", *CNN_HIDDEN, "text-onnx", *(f"{m}-onnx" for m in CNN_HIDDEN),
                                 "transformer"],
                        help="which models (the -onnx ones run on ONNX Runtime); default: text cnn cnn-mid")
    parser.add_argument("--transformer-artifact", type=Path,
                        help="the artifact of a quickstart --model transformer run (default: export one here)")
    parser.add_argument("--max-batch-size", type=int, default=32, help="torchwork serve's default (32)")
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--no-litserve", dest="litserve", action="store_false",
                        help="skip LitServe even when it is importable")
    # internal: child processes
    parser.add_argument("--model-nice", type=int, default=10,
                        help="torchwork serve's model process niceness (its --model-nice; default 10)")
    parser.add_argument("--http", choices=["h11", "httptools"], default="httptools",
                        help="the HTTP parser of every server but LitServe (torchwork serve's --http)")
    parser.add_argument("--serve", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--v2", action="store_true",
                        help="instead: the Open Inference Protocol's route against /predict (JSON and binary "
                             "tensors, keys on and off), and a reload under load (about 5 minutes)")
    parser.add_argument("--neighbour", action="store_true",
                        help="beside a CPU-bound process on one core (benchmarks/neighbour.py) for the whole run, "
                             "as on a busy machine")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--routes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--keys", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bodies", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rounds, seconds = (16, 2.0) if args.v2 else (3, 1.2)
    args.rounds, args.seconds = args.rounds or rounds, args.seconds or seconds
    if args.client:
        bodies = [b.encode() for b in json.loads(Path(args.bodies).read_text())]
        bodies = [b.encode("latin-1") for b in json.loads(Path(args.bodies).read_text())] if args.raw else bodies
        print(json.dumps(run_client(args.port, bodies, args.concurrency[0], args.seconds, args.warmup, args.raw,
                                    args.routes)))
        return
    if args.serve:
        run_server(args.serve, args.model, Path(args.folder), args.max_batch_size, args.max_wait_ms, args.http,
                   args.model_nice, args.keys)
        return
    if args.v2:
        sys.path.insert(0, str(ROOT / "src"))
        if args.quick:
            args.rounds, args.seconds, args.warmup = 1, 1.0, 0.25
        bench_protocol(args)
        return
    args.litserve = args.litserve and litserve_installed()
    if args.quick:
        args.rounds, args.seconds, args.warmup, args.ceiling_seconds = 1, 1.0, 0.25, 0.3
    sys.path.insert(0, str(ROOT / "src"))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        folder = Path(tmp)
        if args.transformer_artifact:
            (folder / "transformer-artifact").symlink_to(args.transformer_artifact.resolve())
        build(folder, args.models)
        with neighbour() if args.neighbour else contextlib.nullcontext():  # the ceilings are measured beside it too
            results = {model: bench_model(model, folder, args) for model in args.models}
    from torchwork.serve.predictor import default_threads

    record({
        "benchmark": "serve_load",
        "setup": {"cpus": os.cpu_count(), "model_threads": default_threads(), "rounds": args.rounds,
                  "seconds_per_run": args.seconds, "max_batch_size": args.max_batch_size,
                  "max_wait_ms": args.max_wait_ms, "http": f"uvicorn ({args.http}, asyncio loop), FastAPI",
                  "client": "raw asyncio HTTP/1.1 keep-alive, closed loop, 1 item per request, own process",
                  "litserve": _litserve_setup(args.litserve),
                  "neighbour": "one CPU-bound process on one core, the whole run" if args.neighbour else None},
        "models": results,
        "goals": goals(results),
        "seconds": round(time.perf_counter() - started, 1),
    }, indent=1)


def _litserve_setup(measured: bool) -> str:
    if not measured:
        return "not installed (or --no-litserve): not measured"
    from importlib.metadata import version

    return (f"litserve {version('litserve')}: max_batch_size and batch_timeout as above, one inference worker "
            "process, one API server process, same validation and encoding")


def goals(results: dict[str, Any]) -> dict[str, Any]:
    """Each goal of the issue, per model and per way of serving (``batched``: thread, ``batched-process``)."""
    out: dict[str, Any] = {}
    for model, rows in results.items():
        c1, c64 = rows.get("c1"), rows.get("c64")
        out[model] = {}
        for variant in SERVED:
            r1 = c1["ratios"].get(variant) if c1 else None
            r64 = c64["ratios"].get(variant) if c64 else None
            out[model][variant] = {
                "c1_latency_within_1.2x_naive": None if not r1 else (r1["p50_over_naive_p50"] or 9) <= 1.2,
                "c64_throughput_at_least_0.8x_ceiling": None if not r64 else (r64["over_min_ceiling"] or 0) >= 0.8,
                "c64_above_naive": None if not r64 else (r64["over_naive_throughput"] or 0) > 1,
                "c64_above_litserve": None if not r64 or r64["over_litserve_throughput"] is None
                else r64["over_litserve_throughput"] > 1,
                "zero_errors": all(row[variant]["errors"] == 0 for row in rows.values() if variant in row),
            }
    return out


# ---------------------------------------------------------------- the Open Inference Protocol's route
BENCH_KEY = "bench-key-0123456789abcdef"
MIXED = ["predict", "v2-json", "v2-binary"]  # sent in turn on one connection at concurrency 1


def v2_requests(model: str, examples: list[Any], binary: bool, key: str | None) -> list[bytes]:
    """Whole HTTP requests for ``/v2/models/MODEL/infer``, one item each, as tritonclient sends them (binary:
    the BYTES element length-prefixed after the JSON header, outputs asked for binary, and no Content-Type
    header, as ``tritonclient.http`` sends none) or as JSON."""
    import struct

    auth = f"Authorization: Bearer {key}\r\n".encode() if key else b""
    requests = []
    for text in examples:
        if binary:
            raw = struct.pack("<I", len(text.encode())) + text.encode()
            header = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                             "parameters": {"binary_data_size": len(raw)}}],
                                 "parameters": {"binary_data_output": True}}).encode()
            body = header + raw
            extra = b"Inference-Header-Content-Length: %d\r\n" % len(header)
        else:
            body = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [text]}]}).encode()
            extra = b"Content-Type: application/json\r\n"
        requests.append(b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%sContent-Length: %d\r\n\r\n%s"
                        % (model.encode(), extra, auth, len(body), body))
    return requests


def predict_requests(examples: list[Any], key: str | None) -> list[bytes]:
    auth = f"Authorization: Bearer {key}\r\n".encode() if key else b""
    out = []
    for text in examples:
        body = json.dumps({"inputs": [text]}).encode()
        out.append(b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%s"
                   b"Content-Length: %d\r\n\r\n%s" % (auth, len(body), body))
    return out


def bench_protocol(args: argparse.Namespace) -> None:
    """``--v2``: on the quickstart's text model (HTTP-bound, so the protocol's own cost shows), served by
    ``torchwork serve`` (model process) with keys off and on, interleaved round after round at concurrency 1
    and 64: ``/predict`` against ``/v2/.../infer`` with JSON and with binary tensors; then a reload under load."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="serve-v2-") as tmp:
        folder = Path(tmp)
        build(folder, ["text"])
        examples = items("text")
        requests = {"predict": predict_requests(examples, None),
                    "v2-json": v2_requests("text", examples, False, None),
                    "v2-binary": v2_requests("text", examples, True, None),
                    "predict-keys": predict_requests(examples, BENCH_KEY),
                    "v2-binary-keys": v2_requests("text", examples, True, BENCH_KEY)}
        routes: dict[str, Path] = {}
        for name, requests_of_route in requests.items():
            routes[name] = folder / f"{name}.json"
            routes[name].write_text(json.dumps([r.decode("latin-1") for r in requests_of_route]))
        # At concurrency 1, the three routes of one server in turn on one connection: each request of one
        # meets the machine as the others' next to it do, which separate runs a few seconds apart cannot
        # promise on a shared machine (their speed moved by up to 40% from run to run here).
        mixed = folder / "mixed.json"
        mixed.write_text(json.dumps([r.decode("latin-1") for group in zip(*(requests[name] for name in MIXED))
                                     for r in group]))
        mixed_runs: list[dict[str, Any]] = []
        servers = {"off": Server("batched-process", "text", folder, args.max_batch_size, args.max_wait_ms, args.http,
                                 args.model_nice),
                   "keys": Server("batched-process", "text", folder, args.max_batch_size, args.max_wait_ms,
                                  args.http, args.model_nice, keys=True)}
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {f"c{c}": {r: [] for r in routes} for c in (1, 64)}
        try:
            for server in servers.values():
                server.wait()
            for round_index in range(args.rounds):
                for c in (1, 64):
                    names = list(routes)
                    turn = round_index % len(names)
                    for name in names[turn:] + names[:turn]:
                        which = "keys" if name.endswith("-keys") else "off"
                        for other, server in servers.items():
                            server.pause(other != which)
                        cpu_before = servers[which].cpu_seconds()
                        row = load(servers[which].port, routes[name], c, args.seconds, args.warmup, raw=True)
                        row["server_cpu_us"] = round(1e6 * (servers[which].cpu_seconds() - cpu_before)
                                                     / max(row["answered"], 1), 1)
                        runs[f"c{c}"][name].append(row)
                for other, server in servers.items():
                    server.pause(other != "off")
                mixed_runs.append(load(servers["off"].port, mixed, 1, args.seconds, args.warmup, raw=True,
                                       routes=len(MIXED)))
        finally:
            for server in servers.values():
                server.stop()
        reload = bench_reload(folder, examples, args)

    def paired(by_route: dict[str, list[dict[str, Any]]], route: str, base: str, key: str) -> Any:
        """The median over rounds of each round's ratio: the two runs of a round are minutes closer in
        time than the medians of all rounds, so a neighbour's load moves both alike."""
        return _median([_ratio(a.get(key), b.get(key)) for a, b in zip(by_route[route], by_route[base])])

    table = {c: {name: {"throughput": _median_of(rows, "throughput"), "p50_ms": _median_of(rows, "p50_ms"),
                        "p99_ms": _median_of(rows, "p99_ms"), "server_cpu_us": _median_of(rows, "server_cpu_us"),
                        "errors": sum(r["errors"] for r in rows)}
                 for name, rows in by_route.items()} for c, by_route in runs.items()}
    def mixed_ratio(route: str, key: str, invert: bool = False) -> Any:
        """The median over rounds of route's figure over /predict's in the same mixed run (``invert``:
        /predict's over route's)."""
        top, bottom = MIXED.index(route), MIXED.index("predict")
        if invert:
            top, bottom = bottom, top
        return _median([_ratio(run["by_route"][top][key], run["by_route"][bottom][key]) for run in mixed_runs])

    ratios = {c: {"v2_json_over_predict_throughput": paired(r, "v2-json", "predict", "throughput"),
                  "v2_binary_over_predict_throughput": paired(r, "v2-binary", "predict", "throughput"),
                  "v2_binary_over_predict_p50": paired(r, "v2-binary", "predict", "p50_ms"),
                  "v2_json_over_predict_p50": paired(r, "v2-json", "predict", "p50_ms"),
                  "v2_json_over_predict_server_cpu": paired(r, "v2-json", "predict", "server_cpu_us"),
                  "v2_binary_over_predict_server_cpu": paired(r, "v2-binary", "predict", "server_cpu_us"),
                  "keys_on_over_off_v2_binary_throughput": paired(r, "v2-binary-keys", "v2-binary", "throughput"),
                  "keys_on_over_off_predict_throughput": paired(r, "predict-keys", "predict", "throughput")}
              for c, r in runs.items()}
    # Concurrency 1 from the mixed runs (throughput in turn on one connection: the inverse of mean latency).
    ratios["c1"].update({"v2_json_over_predict_throughput": mixed_ratio("v2-json", "mean_ms", invert=True),
                         "v2_binary_over_predict_throughput": mixed_ratio("v2-binary", "mean_ms", invert=True),
                         "v2_json_over_predict_p50": mixed_ratio("v2-json", "p50_ms"),
                         "v2_binary_over_predict_p50": mixed_ratio("v2-binary", "p50_ms")})
    goals = {"v2_throughput_at_least_0.9x_predict": all(
                 (r["v2_binary_over_predict_throughput"] or 0) >= 0.9 and (r["v2_json_over_predict_throughput"] or 0)
                 >= 0.9 for r in ratios.values()),
             "v2_c1_p50_at_most_1.1x_predict": (ratios["c1"]["v2_binary_over_predict_p50"] or 9) <= 1.1
             and (ratios["c1"]["v2_json_over_predict_p50"] or 9) <= 1.1,
             "keys_on_at_least_0.97x_off": all((r["keys_on_over_off_v2_binary_throughput"] or 0) >= 0.97
                                               for r in ratios.values()),
             "reload_zero_failed": reload["during"]["errors"] == 0,
             "reload_p99_within_2x": (reload["p99_during_over_before"] or 9) <= 2.0}
    record({"benchmark": "serve_load --v2", "setup": {
        "cpus": os.cpu_count(), "rounds": args.rounds, "seconds_per_run": args.seconds, "model": "text (quickstart "
        "TF-IDF n-gram, pt2 artifact), one real test tweet per request", "server": "torchwork serve, model process",
        "client": "raw asyncio HTTP/1.1 keep-alive, closed loop, own process"},
        "routes": table, "mixed_c1": {"routes": MIXED, "runs": [run["by_route"] for run in mixed_runs]},
        "ratios": ratios, "reload": reload, "goals": goals,
        "seconds": round(time.perf_counter() - started, 1)}, indent=1)


def bench_reload(folder: Path, examples: list[Any], args: argparse.Namespace, concurrency: int = 32,
                 seconds: float = 4.0, during_seconds: float = 14.0) -> dict[str, Any]:
    """A model folder served by ``torchwork serve --enable-model-control``: a run at concurrency 32 before,
    then a longer one (``during_seconds``, to cover the whole swap) with ``POST
    /v2/repository/models/text/load`` (the next version) sent 0.5 s into it."""
    import http.client
    import shutil

    models = folder / "models"
    shutil.copytree(folder / "text-artifact", models / "text" / "1")
    paths = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    server = subprocess.Popen([sys.executable, "-m", "torchwork.cli", "serve", str(models), "--port", "0",
                               "--enable-model-control", "--max-batch-size", str(args.max_batch_size)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        match = None
        while match is None:
            line = server.stdout.readline().decode()
            if not line:
                raise RuntimeError("the model folder server did not start")
            match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        port = int(match.group(1))
        requests = folder / "reload.json"
        requests.write_text(json.dumps([r.decode("latin-1") for r in v2_requests("text", examples, True, None)]))
        before = load(port, requests, concurrency, seconds, args.warmup, raw=True)
        shutil.copytree(folder / "text-artifact", models / "text" / "2")
        client = subprocess.Popen(load_command(port, requests, concurrency, during_seconds, args.warmup, raw=True),
                                  stdout=subprocess.PIPE, text=True)
        time.sleep(args.warmup + 0.5)
        swap_started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/v2/repository/models/text/load", b"{}", {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        swap_seconds = time.perf_counter() - swap_started
        during = json.loads(client.communicate(timeout=during_seconds + 60)[0])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    return {"concurrency": concurrency, "seconds_before": seconds, "seconds_during": during_seconds,
            "load_status": response.status,
            "version_after": answer.get("version"), "swap_seconds": round(swap_seconds, 2),
            "before": before, "during": during,
            "p99_during_over_before": _ratio(during["p99_ms"], before["p99_ms"])}


if __name__ == "__main__":
    main()
