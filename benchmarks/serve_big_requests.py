"""One client's maximum-size requests beside light ones: does a large request stall everyone else?

A real ``torchwork serve`` process serves the quickstart's text model (``TfidfNGramClassifier`` at its
default size, exported with its preprocessing: ``serve_load.build_text_artifact``). Measured, each over a
keep-alive connection at a steady 100 requests/s: ``/healthz`` and a light ``POST /predict`` (one real test
tweet), first with nothing else running, then while another process sends maximum-size requests back to back
(64 items of 10,000 characters each, real tweets joined: the server's default --max-items and
--max-text-length). Both modes: batches in a model process (the default) and on a thread
(``--no-model-process``).

Each latency counts from the time the request was due, not from when it could be sent (as wrk2 does): a
probe stuck behind a stalled server delays the probes after it, and those delays count. Timing back-to-back
requests instead hides a stall: the one request that waited 1.6 s is one sample among thousands of fast
ones (measured so on the previous code: /healthz p50 6 ms in the process mode, against 1,000+ ms here).

Goals (the issue): loaded ``/healthz`` p50 under 10 ms, and a light request's loaded p50 under 2x its
unloaded p50. Prints one JSON object: per mode, p50 and p90 in ms of each, the big requests' count and p50,
and whether each goal is met.

Run: ``python benchmarks/serve_big_requests.py`` (about a minute); ``--src DIR`` serves another checkout's
``src`` (an A/B against older code); ``--modes process`` for one mode.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def texts() -> tuple[str, list[str]]:
    """A light request's tweet, and 64 texts of 10,000 characters made of real tweets."""
    import random

    from torchwork.data import load_dataset

    tweets = list(load_dataset("tweets", seed=0).test.texts)
    random.Random(0).shuffle(tweets)
    long = " ".join(tweets)
    big = [(long[i * 997:] + long)[:10_000] for i in range(64)]
    return tweets[0], big


def start(artifact: Path, src: Path, mode: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, "-m", "torchwork.cli", "serve", str(artifact), "--port", "0",
               *(["--no-model-process"] if mode == "thread" else [])]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    while True:  # the newer server says "warming up" first; both print the address
        line = process.stdout.readline().decode()
        if not line:
            raise RuntimeError("the server did not start")
        if "listening on http://127.0.0.1:" in line:
            port = int(line.split("listening on http://127.0.0.1:")[1].split()[0])
            break
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if request(http.client.HTTPConnection("127.0.0.1", port, timeout=10), "GET", "/readyz") == 200:
                return process, port
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server never became ready")


def request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None) -> int:
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status


def timings(port: int, method: str, path: str, body: bytes | None, seconds: float, every_s: float = 0.01
            ) -> list[float]:
    """Milliseconds from when each request was due (one every ``every_s``) to its answer, on one keep-alive
    connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    request(conn, method, path, body)  # connect, untimed
    times: list[float] = []
    due = time.perf_counter()
    end = due + seconds
    while time.perf_counter() < end:
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        status = request(conn, method, path, body)
        times.append((time.perf_counter() - due) * 1000)
        if status != 200:
            raise RuntimeError(f"{method} {path} answered {status}")
        due += every_s
    now = time.perf_counter()
    while due < end:  # due but never sent, the server being stuck: they waited at least this long
        times.append((now - due) * 1000)
        due += every_s
    conn.close()
    return times


def big_client(port: int, body: bytes, stop: Any, count: Any, latencies: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while not stop.is_set():
        started = time.perf_counter()
        if request(conn, "POST", "/predict", body) != 200:
            raise RuntimeError("a big request failed")
        latencies.append((time.perf_counter() - started) * 1000)
        count.value += 1


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"p50_ms": round(statistics.median(ordered), 2), "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
            "n": len(ordered)}


def measure(artifact: Path, src: Path, mode: str, light: bytes, big: bytes, seconds: float, every_s: float
            ) -> dict[str, Any]:
    process, port = start(artifact, src, mode)
    try:
        result: dict[str, Any] = {"unloaded": {}, "loaded": {}}
        for name, path, body in (("healthz", "/healthz", None), ("light", "/predict", light)):
            result["unloaded"][name] = summary(timings(port, "GET" if body is None else "POST", path, body,
                                                       seconds, every_s))
        context = multiprocessing.get_context("spawn")
        stop, count, latencies = context.Event(), context.Value("i", 0), context.Manager().list()
        client = context.Process(target=big_client, args=(port, big, stop, count, latencies), daemon=True)
        client.start()
        while count.value < 1:  # the big requests are flowing
            time.sleep(0.05)
        for name, path, body in (("healthz", "/healthz", None), ("light", "/predict", light)):
            result["loaded"][name] = summary(timings(port, "GET" if body is None else "POST", path, body,
                                                     seconds, every_s))
        stop.set()
        client.join(120)
        result["big"] = {"requests": count.value, **summary(list(latencies))}
        healthz, light_loaded = result["loaded"]["healthz"]["p50_ms"], result["loaded"]["light"]["p50_ms"]
        ratio = light_loaded / result["unloaded"]["light"]["p50_ms"]
        result["light_loaded_over_unloaded"] = round(ratio, 2)
        result["goals"] = {"healthz_p50_under_10ms": healthz < 10, "light_p50_under_2x": ratio < 2}
        return result
    finally:
        process.terminate()
        process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the torchwork source to serve")
    parser.add_argument("--modes", nargs="+", default=["process", "thread"], choices=["process", "thread"])
    parser.add_argument("--seconds", type=float, default=6.0, help="time per measurement (default: 6)")
    parser.add_argument("--every-ms", type=float, default=10.0,
                        help="one probe request every this many ms (default: 10; a transformer needs more)")
    parser.add_argument("--artifact", type=Path, default=None,
                        help="serve this artifact (e.g. a quickstart run's transformer) instead of the n-gram one")
    args = parser.parse_args()
    from serve_load import build_text_artifact

    light_text, big_texts = texts()
    light = json.dumps({"inputs": [light_text]}).encode()
    big = json.dumps({"inputs": big_texts}).encode()
    with tempfile.TemporaryDirectory() as folder:
        if args.artifact is None:
            build_text_artifact(Path(folder))
        artifact = args.artifact or Path(folder) / "text-artifact"
        results = {mode: measure(artifact, args.src.resolve(), mode, light, big, args.seconds,
                                 args.every_ms / 1000) for mode in args.modes}
    record({"src": str(args.src), "artifact": str(args.artifact or "n-gram"), "every_ms": args.every_ms, "cpus": os.cpu_count(), "big_request_bytes": len(big),
                      "modes": results}, indent=1)


if __name__ == "__main__":
    main()
