"""What the server runs: the :class:`ServedModel` protocol, and predictors built from a torch module or an ONNX
file (an exported artifact's is :class:`~torchwork.serve.artifact.ArtifactPredictor`).

A predictor turns a list of raw items (strings for a text model, nested lists of numbers for a tensor model)
into one output row per item, preprocessing included. For a classifier (``labels`` set) each row holds the
class probabilities; otherwise it is the model's raw output for that item.

Example:
    >>> import torch
    >>> from torchwork.serve import TorchPredictor
    >>> torch.manual_seed(0) and None
    >>> model = torch.nn.Linear(3, 2)
    >>> predictor = TorchPredictor(model, item_shape=(3,), labels=["no", "yes"], threads=1)
    >>> rows = predictor.predict_batch([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]])
    >>> [round(float(row.sum()), 5) for row in rows]
    [1.0, 1.0]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from torchwork.deploy.runtime import check_row_count, softmax
from torchwork.errors import ConfigError, ExportError
from torchwork.threads import check_threads

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

Kind = Literal["text", "tensor", "image"]
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8")


@runtime_checkable
class ServedModel(Protocol):
    """What the HTTP server needs from a model.

    - ``kind``: ``"text"`` (each item is a string), ``"tensor"`` (each item a nested list of numbers) or
      ``"image"`` (each item an encoded image, decoded by request validation to ``item_shape`` uint8);
    - ``item_shape``: the shape of one item without the batch dimension (``None`` for a free dimension;
      ``()`` for text);
    - ``dtype``: the item's number type for tensor models (``"float32"``, ``"int64"``, ...);
    - ``labels``: class names for a classifier, else ``None``;
    - ``predict_batch(items)``: one output row per item, in order: probabilities over ``labels`` for a
      classifier, the raw output otherwise. It is called from one worker thread at a time.
    """

    kind: Kind
    item_shape: tuple[int | None, ...]
    dtype: str

    @property
    def labels(self) -> Sequence[str] | None: ...  # read only, so a list or a tuple of names both fit

    def predict_batch(self, items: Sequence[Any]) -> Sequence[Any]: ...


def available_cpus() -> int:
    """CPUs this process may run on (the affinity mask and the cgroup's CPU quota, which containers narrow),
    at least 1."""
    from torchwork.threads import usable_cpus

    return usable_cpus()


_configured_threads: int | None = None


def default_threads() -> int:
    """Compute threads for the model: as configured, else every CPU but one, left to the event loop."""
    return _configured_threads or max(1, available_cpus() - 1)


def configure_threads(threads: int | None = None) -> int:
    """Make ``threads`` (default :func:`default_threads`) the compute threads of this process's models, the
    default of :class:`OnnxPredictor`, and return the number. torch gets them (and one inter-op thread) at
    once when it is imported, else when a model is loaded (:func:`threads_to_torch`): a server whose models
    run in model processes never imports torch's 220 MB for them.
    """
    global _configured_threads
    threads = check_threads(threads, "threads") or default_threads()  # 10**5000 was torch's thread count
    _configured_threads = threads
    if "torch" in sys.modules:
        threads_to_torch()
    return threads


def threads_to_torch() -> None:
    """Give torch the compute threads :func:`configure_threads` set, importing it: called before a model is
    loaded in this process. Nothing when none were configured (torch keeps its own)."""
    if _configured_threads is None:
        return
    import torch

    torch.set_num_threads(_configured_threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set, or parallel work already ran in this process: keep what it is


class ModelPredictor:
    """Shared part of :class:`TorchPredictor` and :class:`OnnxPredictor`: preprocessing, grouping, softmax.

    ``preprocess`` maps the list of raw items to the model's positional inputs (a tensor/array or a tuple
    of them). It is required for text; for tensors the default stacks the items into one array of
    ``dtype``. ``output`` says what the model returns for a classifier: ``"logits"`` (softmax applied
    here) or ``"probabilities"``.
    """

    def __init__(self, *, kind: Kind = "tensor", item_shape: Sequence[int | None] | None = None,
                 dtype: str = "float32", labels: Sequence[str] | None = None,
                 preprocess: Callable[[list[Any]], Any] | None = None,
                 output: Literal["logits", "probabilities"] = "logits", name: str = "model") -> None:
        if kind not in ("text", "tensor", "image"):
            raise ConfigError(f"kind={kind!r}: a predictor's kind is 'text', 'tensor' or 'image'.")
        if kind == "image" and (preprocess is None or item_shape is None):
            raise ConfigError("kind='image' needs preprocess=... (decoded images -> the model's inputs) and "
                              "item_shape=(size, size, 3), the decoded image an item becomes.")
        if kind == "text" and preprocess is None:
            raise ConfigError("kind='text' needs preprocess=...: a function from a list of strings to the "
                              "model's inputs, e.g. torchwork.data.text.TextPreprocessor.")
        if kind == "tensor" and item_shape is None:
            raise ConfigError("kind='tensor' needs item_shape=(...): the shape of one input item without the "
                              "batch dimension, e.g. (64,) or (1, 28, 28); use None for a free dimension.")
        if dtype not in FLOAT_DTYPES + INT_DTYPES:
            raise ConfigError(f"dtype={dtype!r} is not supported; use one of {FLOAT_DTYPES + INT_DTYPES}.")
        if output not in ("logits", "probabilities"):
            raise ConfigError(f"output={output!r}: use 'logits' or 'probabilities'.")
        if labels is not None:
            labels = [str(label) for label in labels]
            if not labels or len(set(labels)) != len(labels):
                raise ConfigError(f"labels={labels!r}: a classifier needs distinct, non-empty label names.")
        shape = tuple(item_shape or ())
        if any(d is not None and (not isinstance(d, int) or d < 1) for d in shape):
            raise ConfigError(f"item_shape={shape!r}: each dimension is a positive int or None.")
        self.kind: Kind = kind
        self.item_shape: tuple[int | None, ...] = shape if kind != "text" else ()
        self.dtype = dtype
        self.labels: list[str] | None = labels
        self.output = output
        self.name = name
        self._preprocess = preprocess

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, kind={self.kind!r}, item_shape={self.item_shape!r}, "
                f"dtype={self.dtype!r}, labels={self.labels!r})")

    def example_items(self, n: int = 1) -> list[Any]:
        """Valid dummy items (zeros, a free dimension of length 1, or a short text), for warm-up."""
        if self.kind == "text":
            return ["warm up the model"] * n
        if self.kind == "image":  # a request's image, as validation leaves it: decoded, (size, size, 3) uint8
            import numpy as np

            return [np.zeros(self.item_shape, dtype=np.uint8) for _ in range(n)]

        def zeros(dims: tuple[int | None, ...]) -> Any:
            if not dims:
                return 0
            return [zeros(dims[1:]) for _ in range(dims[0] or 1)]

        return [zeros(self.item_shape) for _ in range(n)]

    def predict_batch(self, items: Sequence[Any]) -> Sequence[Any]:
        """Preprocess ``items``, run the model once (once per item shape if a dimension is free)."""
        import numpy as np

        items = list(items)
        if self.kind == "tensor" and None in self.item_shape:
            groups: dict[tuple[int, ...], list[int]] = {}
            for index, item in enumerate(items):
                groups.setdefault(np.shape(item), []).append(index)
            if len(groups) > 1:
                rows: list[Any] = [None] * len(items)
                for indices in groups.values():
                    for index, row in zip(indices, self._predict_same_shape([items[i] for i in indices])):
                        rows[index] = row
                return rows
        return self._predict_same_shape(items)

    def _predict_same_shape(self, items: list[Any]) -> Any:
        import numpy as np

        if self._preprocess is not None:
            inputs = self._preprocess(items)
        else:
            inputs = np.asarray(items, dtype=numpy_dtype(self.dtype))
        if not isinstance(inputs, (tuple, list)):
            inputs = (inputs,)
        out = self._forward(tuple(inputs))
        check_row_count(out, len(items), self.name)
        if self.labels is not None and self.output == "logits":
            out = softmax(out)
        return out

    def _forward(self, inputs: tuple[Any, ...]) -> np.ndarray:
        raise NotImplementedError


class TorchPredictor(ModelPredictor):
    """Run a torch module (an ``nn.Module`` or ``torch.export``'s ``.module()``) under ``inference_mode``.

    ``threads``: torch intra-op threads to set for the whole process (default: leave them as they are).

    Example:
        >>> import torch
        >>> from torchwork.serve import TorchPredictor
        >>> predictor = TorchPredictor(torch.nn.Linear(4, 2), item_shape=(4,))
        >>> predictor.predict_batch([[1.0, 2.0, 3.0, 4.0]])[0].shape
        (2,)
    """

    def __init__(self, module: torch.nn.Module | Callable[..., Any], *, threads: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if threads is not None:
            configure_threads(threads)
        if hasattr(module, "eval"):
            module.eval()
        self.module = module

    def _forward(self, inputs: tuple[Any, ...]) -> np.ndarray:
        import torch

        tensors = [x if isinstance(x, torch.Tensor) else torch.as_tensor(x) for x in inputs]
        with torch.inference_mode():
            out = self.module(*tensors)
        if isinstance(out, (tuple, list)):
            out = out[0]  # the first output is the prediction; more outputs are the model's own business
        return out.detach().float().numpy() if out.dtype == torch.bfloat16 else out.detach().numpy()


class OnnxPredictor(ModelPredictor):
    """Run an ONNX model with ONNX Runtime on the CPU, inputs fed positionally.

    ``item_shape`` defaults to the first input's shape without its batch dimension (named dimensions become
    free ones); ``threads`` is ONNX Runtime's intra-op thread count (default :func:`default_threads`).

    Example (not run here: it needs an exported file):
        predictor = OnnxPredictor("digits.onnx", labels=[str(d) for d in range(10)])
    """

    def __init__(self, model: str | os.PathLike[str] | bytes, *, threads: int | None = None,
                 **kwargs: Any) -> None:
        from torchwork.deploy.runtime import onnx_session

        try:
            self.session = onnx_session(model, threads or default_threads())
        except ExportError as error:  # a file the caller named: a setting that cannot work
            raise ConfigError(str(error)) from error
        self._inputs = self.session.get_inputs()
        first = self._inputs[0]
        kwargs.setdefault("item_shape", tuple(d if isinstance(d, int) else None for d in first.shape[1:]))
        kwargs.setdefault("dtype", _ONNX_DTYPES.get(first.type, "float32"))
        super().__init__(**kwargs)
        self._input_dtypes = [numpy_dtype(_ONNX_DTYPES.get(i.type, "float32")) for i in self._inputs]
        self._input_names = [i.name for i in self._inputs]

    def _forward(self, inputs: tuple[Any, ...]) -> np.ndarray:
        import numpy as np

        if len(inputs) != len(self._input_names):
            raise ConfigError(f"preprocessing gave {len(inputs)} inputs; the ONNX model takes "
                              f"{len(self._input_names)}: {self._input_names}. Make preprocess= return one "
                              "array per model input, in order.")
        feed = {}
        for name, dtype, value in zip(self._input_names, self._input_dtypes, inputs):
            array = value.numpy() if hasattr(value, "numpy") else value
            feed[name] = np.ascontiguousarray(array, dtype=dtype)
        return self.session.run(None, feed)[0]


_ONNX_DTYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
                "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16",
                "tensor(int8)": "int8", "tensor(uint8)": "uint8"}


def numpy_dtype(dtype: str) -> Any:
    import numpy as np

    return np.float32 if dtype == "bfloat16" else np.dtype(dtype)
