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
from collections.abc import Callable, Iterable, Sequence, Sized
from pathlib import Path
from typing import Any

from torchwork.deploy import progress
from torchwork.deploy.contents import load_preprocess
from torchwork.deploy.manifest import FORMATS, PREFERENCE, Manifest, read_manifest, variant_format
from torchwork.deploy.tensors import as_input_tuple, check_inputs, flatten_outputs
from torchwork.deploy.trust import check_pt2_pickle_free, safe_member
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
        return [torch.from_numpy(np.asarray(o)) for o in session.run(None, feed)]

    return run


def load_pt2(path: Path) -> Any:
    """``torch.export.load`` of an archive checked first to need no pickle."""
    import torch

    check_pt2_pickle_free(path)
    try:
        return torch.export.load(str(path))
    except Exception as error:
        raise ExportError(f"{path}: torch.export.load failed ({type(error).__name__}: {error}). The file is "
                          "damaged or was written by another torch version: re-export the model.") from error


def open_runner(path: Path, fmt: str, threads: int | None = None) -> Runner:
    """A callable ``inputs -> list of output tensors`` for one model file."""
    import torch

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


# ----------------------------------------------------------------------------------------- a loaded artifact
class LoadedArtifact:
    """An artifact loaded to run: raw inputs -> outputs through its preprocessing, model variant and
    postprocessing (what :func:`load_artifact` returns).

    ``artifact(raw)`` returns the output tensor (softmax applied when the manifest says so), or a tuple when
    the model has several outputs; ``artifact.classify(raw)`` returns ``[{"label", "score"}]``;
    ``artifact.rows(inputs)`` is what the server runs: checked model inputs of any batch size (met in the
    exported static batch size if it has one) -> the first output's rows as a float array.
    """

    def __init__(self, directory: Path, manifest: Manifest, variant: str, runner: Runner, preprocess: Any) -> None:
        self.directory, self.manifest, self.variant = directory, manifest, variant
        self.run_model, self.preprocess = runner, preprocess
        self.softmax = manifest.postprocess.softmax
        self.labels: list[str] | None = manifest.postprocess.labels
        self.static_batch = manifest.static_batch

    def __repr__(self) -> str:
        return f"LoadedArtifact({str(self.directory)!r}, variant={self.variant!r})"

    def inputs_for(self, raw: Any) -> tuple[Any, ...]:
        """The model inputs for raw inputs: preprocessed, then checked against the manifest schema."""
        if self.preprocess is not None:
            raw = self.preprocess(raw)
        return check_inputs(as_input_tuple(raw, "inputs"), self.manifest.inputs)

    def __call__(self, raw: Any) -> Any:
        return self.run(self.inputs_for(raw))

    def run(self, inputs: Sequence[Any]) -> Any:
        """Model inputs (already checked, e.g. by :meth:`inputs_for`) -> outputs, postprocessing included."""
        outputs = self._postprocess(self.run_model(inputs))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def rows(self, inputs: Sequence[Any]) -> Any:
        """Model inputs of any batch size -> the first output, postprocessed, as a float numpy array."""
        import torch

        tensors = check_inputs(as_input_tuple(inputs, "inputs"), self.manifest.inputs, any_batch=True)
        first = self._postprocess(run_in_chunks(self.run_model, tensors, self.static_batch))[0]
        check_row_count(first, int(tensors[0].shape[0]), f"artifact {self.directory} [{self.variant}]")
        return (first.float() if first.dtype == torch.bfloat16 else first).detach().numpy()

    def _postprocess(self, outputs: list[Any]) -> list[Any]:
        import torch

        if self.softmax:
            outputs = [torch.from_numpy(softmax(outputs[0].float().numpy()).astype("float32")), *outputs[1:]]
        return outputs

    def classify(self, raw: Any) -> list[dict[str, Any]]:
        """Top-1 label (a name when the artifact has labels) and its score for each input row."""
        import torch

        outputs = self(raw)
        scores = outputs[0] if isinstance(outputs, tuple) else outputs
        if not self.softmax:
            scores = torch.from_numpy(softmax(scores.float().numpy()))
        best, index = scores.max(dim=-1)
        return [{"label": self.labels[i] if self.labels else i, "score": round(float(s), 6)}
                for s, i in zip(best.tolist(), index.tolist())]


def load_artifact(directory: str | os.PathLike[str], variant: str | None = None, *, threads: int | None = None,
                  trust: Iterable[str] = ()) -> LoadedArtifact:
    """Load an artifact as a callable ``raw inputs -> outputs`` (preprocessing and postprocessing included).

    ``variant`` picks the model file (``"onnx"``, ``"pt2"``, ``"onnx-int8"``, ``"torchscript"``); by default
    the one the artifact marks to deploy, else ONNX, then pt2. Every file's checksum is checked first.

    Example:
        >>> predict = load_artifact("artifacts/digits")          # doctest: +SKIP
        >>> predict(torch.rand(2, 64)).shape                     # doctest: +SKIP
        torch.Size([2, 10])
    """
    root = Path(directory)
    manifest = read_manifest(root)
    available = list(manifest.variants)  # refused formats never enter the artifact
    if variant is None:
        marked = manifest.deploy
        ordered = [marked] if marked in available else [n for n in PREFERENCE if n in available]
        if not ordered:
            raise ExportError(f"artifact {root} holds no variant that passed its export checks "
                              f"(refused: {manifest.refused}).")
        variant = ordered[0]
    elif variant not in available:
        refused = manifest.refused.get(variant)
        raise ConfigError(f"artifact {root} has no {variant!r} variant"
                          + (f" (refused at export: {refused})" if refused else "") + f"; it has {available}.")
    runner = variant_runner(root, manifest, variant, threads)
    return LoadedArtifact(root, manifest, variant, runner, load_preprocess(root, manifest, trust))


def variant_runner(root: Path, manifest: Manifest, variant: str, threads: int | None = None) -> Runner:
    """The runner of one variant of an artifact: its model file, and the float fallback it records
    (:mod:`torchwork.deploy.fallback`) when it has one."""
    from torchwork.deploy.fallback import fallback_runner  # it imports this module

    entry = manifest.variants[variant]
    runner = open_runner(safe_member(root, entry.file, f"variant {variant!r}"), variant_format(variant), threads)
    if entry.fallback is None:
        return runner
    other = entry.fallback["variant"]
    problem = ("is itself" if other == variant else "the artifact does not hold" if other not in manifest.variants
               else "needs a dynamic batch size" if manifest.static_batch else None)
    if problem:
        raise ExportError(f"artifact {root}: variant {variant!r} falls back to {other!r}, which {problem}; "
                          "export it again.")
    exact = open_runner(safe_member(root, manifest.variants[other].file, f"variant {other!r}"),
                        variant_format(other), threads)
    return fallback_runner(runner, exact, float(entry.fallback["margin"]))
