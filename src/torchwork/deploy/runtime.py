"""The runtime of a loaded artifact: one place that opens a model file and runs it, for ``verify``, for
``load_artifact`` and for ``torchwork serve``.

Here and only here: ONNX Runtime's session options (:func:`onnx_session`), the softmax of a classifier
(:func:`softmax`), a static batch size met by padding (:func:`run_in_chunks`: the last chunk is filled up
with copies of its first row, whose outputs are dropped) and the check that a model returned one row per
item (:func:`check_row_count`).

Example:
    >>> import numpy as np
    >>> softmax(np.array([[0.0, 0.0], [1000.0, 0.0]])).tolist()
    [[0.5, 0.5], [1.0, 0.0]]
    >>> check_row_count([1, 2], 3, "the model")
    Traceback (most recent call last):
    ...
    torchwork.errors.ModelOutputError: the model returned 2 rows for 3 items; a model must return one output row per input item, in order
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence, Sized
from pathlib import Path
from typing import Any

from torchwork.deploy import progress
from torchwork.deploy.aoti import aoti_runner
from torchwork.deploy.manifest import FORMATS
from torchwork.deploy.pt2_program import check_pt2_program
from torchwork.deploy.tensors import flatten_outputs
from torchwork.deploy.trust import check_pt2_pickle_free, may_load, refuse_untrusted
from torchwork.errors import ConfigError, ExportError, ModelOutputError

Runner = Callable[[Sequence[Any]], list[Any]]
CHUNK = 256  # rows per run when the model takes any batch size


# ----------------------------------------------------------------------------------------- the rules
def softmax(logits: Any) -> Any:
    """Probabilities over the last axis, in float64 (a row of huge logits stays finite)."""
    import numpy as np

    x = np.asarray(logits, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        x = x - x.max(axis=-1, keepdims=True)
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)


def check_row_count(rows: Sized, count: int, who: str = "the model") -> None:
    """Raise :class:`~torchwork.errors.ModelOutputError` unless ``rows`` holds one row per item."""
    if len(rows) != count:
        raise ModelOutputError(f"{who} returned {len(rows)} rows for {count} items; a model must return one "
                               "output row per input item, in order")


def run_in_chunks(run: Runner, inputs: tuple[Any, ...], static_batch: int | None = None,
                  chunk: int = CHUNK) -> list[Any]:
    """Run ``inputs`` in chunks of rows and join each output along dim 0.

    A model exported with a static batch size gets chunks of exactly that size: the last one is filled up
    with copies of its first row, and the outputs of those copies are dropped.
    """
    import torch

    rows = int(inputs[0].shape[0])
    size = static_batch or chunk
    if static_batch is None and rows <= size:
        return list(run(inputs))
    parts = []
    for start in range(0, rows, size):
        part = tuple(t[start:start + size] for t in inputs)
        real = int(part[0].shape[0])
        if static_batch is not None and real < size:
            part = tuple(torch.cat([t, t[:1].expand(size - real, *t.shape[1:])]) for t in part)
        parts.append([out[:real] for out in run(part)])
        progress.rows(start + real)
    return parts[0] if len(parts) == 1 else [torch.cat([p[i] for p in parts]) for i in range(len(parts[0]))]


# ----------------------------------------------------------------------------------------- model files
# ONNX Runtime's CPU SkipLayerNormalization kernel is slow: on the fine-tuned MiniLM (batch 32, 2 threads,
# ONNX Runtime's profiler) it took 21-25% of the INT8 graph's time where Add + LayerNormalization take about
# 5%; without the fusion the INT8 graph ran 1.2x and the float graph 1.1x faster (README, "INT8 of the
# transformer").
DISABLED_FUSIONS = ("SkipLayerNormFusion",)


def onnx_session(source: str | os.PathLike[str] | bytes, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session: ``threads`` intra-op threads (default: ONNX Runtime's), one inter-op
    thread, sequential execution, warnings off, :data:`DISABLED_FUSIONS` off.
    :class:`~torchwork.errors.ExportError` if it cannot load."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    where = "the given bytes" if isinstance(source, bytes) else os.fspath(source)
    try:
        return ort.InferenceSession(source if isinstance(source, bytes) else where, options,
                                    providers=["CPUExecutionProvider"], disabled_optimizers=list(DISABLED_FUSIONS))
    except Exception as error:  # onnxruntime raises its own untyped errors
        raise ExportError(f"ONNX Runtime could not load {where}: {type(error).__name__}: {error}. The file is "
                          "damaged or incomplete: export the model again (torchwork export, or "
                          "torch.onnx.export).") from error


# ONNX Runtime's CPU arena keeps the most a session ever held until the session is closed. MiniLM's float
# and INT8 sessions run over batches of 256 rows of 12 to 64 tokens kept +1,339 MB resident, +76 MB with the
# arena shrunk at the end of each run (6 Dec 2026). Runs of more rows than this (the parity checks,
# calibration) shrink it when they end; smaller ones (the timed runs, a server's batches) keep it, for speed.
SHRINK_ABOVE_ROWS = 64


def run_options(rows: int) -> Any:
    """ONNX Runtime ``RunOptions`` for a run of ``rows`` rows: None (the defaults) up to
    :data:`SHRINK_ABOVE_ROWS`, else options that shrink the session's CPU arena when the run ends."""
    if rows <= SHRINK_ABOVE_ROWS:
        return None
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def feed_rows(feed: Mapping[str, Any]) -> int:
    """The rows of a feed: its first input's leading dimension (0 for a scalar or an empty feed)."""
    first = next(iter(feed.values()), None)
    shape = getattr(first, "shape", ())
    return int(shape[0]) if len(shape) else 0


def run_session(session: Any, outputs: Sequence[str] | None, feed: Mapping[str, Any]) -> list[Any]:
    """``session.run(outputs, feed)`` with the :func:`run_options` its rows call for."""
    return session.run(outputs, dict(feed), run_options(feed_rows(feed)))


def torch_runner(module: Any) -> Runner:
    """Model inputs -> the flat list of output tensors of a torch module, without gradients."""
    import torch

    def run(inputs: Sequence[Any]) -> list[Any]:
        with torch.no_grad():
            return flatten_outputs(module(*inputs))

    return run


def onnx_runner(path: Path, threads: int | None = None) -> Runner:
    """Model inputs (tensors, fed positionally) -> the output tensors of an ONNX file."""
    import numpy as np
    import torch

    session = onnx_session(path, threads)
    names = [i.name for i in session.get_inputs()]

    def run(inputs: Sequence[Any]) -> list[Any]:
        if len(inputs) != len(names):
            raise ExportError(f"the ONNX graph takes {len(names)} inputs {names}, got {len(inputs)}.")
        feed = {n: np.ascontiguousarray(t.detach().cpu().numpy()) for n, t in zip(names, inputs)}
        return [torch.from_numpy(np.asarray(o)) for o in run_session(session, None, feed)]

    return run


def load_pt2(path: Path) -> Any:
    """``torch.export.load`` of an archive checked first to need no pickle and to hold a program that runs
    nothing but a model's operators (:mod:`torchwork.deploy.pt2_program`)."""
    import torch

    check_pt2_pickle_free(path)
    check_pt2_program(path)
    try:
        return torch.export.load(str(path))
    except Exception as error:
        raise ExportError(f"{path}: torch.export.load failed ({type(error).__name__}: {error}). The file is "
                          "damaged or was written by another torch version: re-export the model.") from error


def open_runner(path: Path, fmt: str, threads: int | None = None, trusted: bool = False) -> Runner:
    """A callable ``inputs -> list of output tensors`` for one model file. A format that runs as code (a
    native ``pt2-aoti`` library, a TorchScript program: :data:`torchwork.deploy.trust.CODE_TRUST`) opens
    only when ``trusted``: the caller named the variant, trusts its format, or exported the file itself."""
    import torch

    if not may_load(fmt, named=trusted):
        raise refuse_untrusted(fmt, fmt, path.parent)
    if fmt == "pt2-aoti":
        return aoti_runner(path)
    if fmt == "onnx":
        return onnx_runner(path, threads)
    if fmt == "pt2":
        return torch_runner(load_pt2(path).module())
    if fmt == "torchscript":
        try:
            with warnings.catch_warnings():  # its deprecation was said plainly at export
                warnings.simplefilter("ignore", DeprecationWarning)
                module = torch.jit.load(str(path), map_location="cpu")
        except Exception as error:
            raise ExportError(f"{path}: torch.jit.load failed ({error}); re-export the model.") from error
        return torch_runner(module.eval())
    raise ConfigError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}.")
