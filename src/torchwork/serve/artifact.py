"""Serve an artifact written by ``torchwork.deploy.export``: its manifest says what a request item is.

``torchwork serve ARTIFACT_DIR`` loads the artifact with :func:`torchwork.deploy.load_artifact` (every file's
checksum checked, the variant the manifest marks to deploy unless it runs as code, its bundled preprocessing
and postprocessing) and wraps it in a :class:`~torchwork.serve.predictor.ServedModel`:

- an artifact whose preprocessor is :class:`torchwork.data.image_decode.ImagePreprocessor` is an **image**
  artifact: each item is an encoded image (:mod:`torchwork.serve.images`);
- an artifact with another preprocessor (``manifest.preprocess``, e.g. ``torchwork.data.text:TextPreprocessor``)
  is a **text** artifact: each item is a raw string, preprocessed on the server exactly as in
  ``load_artifact(dir)(texts)``;
- an artifact without one is a **tensor** artifact with a single input: each item is a nested list of
  numbers of the input's shape without its batch dimension (``manifest.inputs[0].shape[1:]``; a named
  dimension is free, a number is fixed and checked by the request schema, so another shape gets a 422
  naming the field) and its dtype;
- ``manifest.postprocess.labels`` makes it a classifier: each prediction is the label and the
  probability of every label (softmax applied by the artifact when ``postprocess.softmax`` says so, else
  here); without labels each prediction is the first output's row for that item.

A model exported with a static batch size runs in chunks of exactly that size, as everywhere an artifact
runs (:func:`torchwork.deploy.runtime.run_in_chunks`), so requests of any size are answered. A text model
exported with a static length gets its token ids cut to it by the preprocessor and padded with its padding
id.

An artifact is untrusted data: nothing is unpickled, a preprocessor class outside ``torchwork.`` is
refused (serve your own with ``--factory module:function``), and a variant that runs as code (TorchScript,
a ``pt2-aoti`` native library) is served only when ``--variant`` names it: the manifest's ``deploy`` field,
part of the artifact, cannot choose it.

Example:
    >>> from torchwork.serve import predictor_from_artifact          # doctest: +SKIP
    >>> predictor = predictor_from_artifact("runs/.../artifact")       # doctest: +SKIP
    >>> predictor.kind, predictor.labels                              # doctest: +SKIP
    ('text', ['negative', 'neutral', 'positive'])
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from torchwork.errors import ConfigError, ExportError
from torchwork.serve.predictor import FLOAT_DTYPES, INT_DTYPES, ModelPredictor, default_threads

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from torchwork.deploy.loaded import LoadedArtifact
    from torchwork.deploy.manifest import TensorSpec

_PROBE_TEXTS = ["probe", "a longer probe text, with punctuation!"]


class ArtifactPredictor(ModelPredictor):
    """A loaded artifact (``torchwork.deploy.load_artifact(dir)``) as a server predictor.

    ``kind``, ``item_shape``, ``dtype`` and ``labels`` come from the artifact's manifest (see the module
    docstring); ``variant`` is the model file that runs (``"onnx-int8"``, ``"onnx"``, ``"pt2"``, ...).
    """

    def __init__(self, artifact: LoadedArtifact, name: str | None = None) -> None:
        manifest = artifact.manifest
        self.artifact = artifact
        self.variant: str = artifact.variant
        self._schema: list[TensorSpec] = manifest.inputs
        self.static_batch: int | None = artifact.static_batch
        self.compile_decision: dict[str, Any] | None = None  # torchwork.deploy.compiled's, when asked
        labels = artifact.labels
        width = manifest.outputs[0].shape[-1] if manifest.outputs and manifest.outputs[0].shape else None
        if labels is not None and isinstance(width, int) and width != len(labels):
            raise ConfigError(f"artifact {artifact.directory}: its model answers {width} values per item but the "
                              f"manifest names {len(labels)} labels; export it again with one label per output")
        output: Literal["logits", "probabilities"] = \
            "probabilities" if artifact.softmax or labels is None else "logits"
        name = name or f"{Path(artifact.directory).name} [{artifact.variant}]"
        if getattr(artifact.preprocess, "kind", None) == "image":  # items: images decoded by validation
            size = int(artifact.preprocess.size)
            super().__init__(kind="image", item_shape=(size, size, 3), dtype="uint8", labels=labels,
                             preprocess=artifact.preprocess, output=output, name=name)
        elif artifact.preprocess is not None:
            # Static dims after the batch (a token-id length fixed at export) are met by cutting and padding.
            # A dynamic length exported with a bound (max_length=N) is cut to that bound the same way.
            self._max_length = min([*(s.shape[1] for s in self._schema
                                      if len(s.shape) > 1 and isinstance(s.shape[1], int)),
                                    *(high for s in self._schema for axis, (_, high) in s.limits().items()
                                      if axis == 1)], default=None)
            super().__init__(kind="text", preprocess=self._text_inputs, labels=labels, output=output, name=name)
            self._check_text_preprocessor()
        else:
            spec = self._tensor_spec(artifact)
            self.input_name: str = spec.name  # what the Open Inference Protocol's routes call the input
            shape = tuple(d if isinstance(d, int) else None for d in spec.shape[1:])
            # The longest a free dimension may be: its export bound (max_length=N), so a longer request is
            # refused as invalid (422) rather than failing in the model.
            self.max_free_dim: int | None = min((high for axis, (_, high) in spec.limits().items() if axis >= 1),
                                                default=None)
            super().__init__(kind="tensor", item_shape=shape, dtype=spec.dtype, labels=labels, output=output,
                             name=name)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, variant={self.variant!r}, static_batch={self.static_batch!r})"

    # ------------------------------------------------------------------ inputs
    @staticmethod
    def _tensor_spec(artifact: LoadedArtifact) -> TensorSpec:
        schema = artifact.manifest.inputs
        where = f"artifact {artifact.directory}"
        if len(schema) != 1:
            raise ConfigError(
                f"{where}: the model takes {len(schema)} inputs {[s.name for s in schema]} and the artifact "
                "bundles no preprocessing, but an HTTP item is one nested list of numbers. Export it with a "
                "preprocess= object that builds those inputs from one raw item, or serve your own predictor "
                "with --factory module:function.")
        spec = schema[0]
        if not spec.shape:
            raise ConfigError(f"{where}: the input {spec.name!r} is a scalar with no batch dimension; export "
                              "the model with a batch dimension (dynamic_batch=True) to serve it.")
        if spec.dtype not in FLOAT_DTYPES + INT_DTYPES:
            raise ConfigError(f"{where}: the input {spec.name!r} is {spec.dtype}; the server takes items "
                              f"of {', '.join(FLOAT_DTYPES + INT_DTYPES)}. Serve it with --factory "
                              "module:function and convert the items there.")
        return spec

    def _text_inputs(self, texts: list[str]) -> tuple[Any, ...]:
        """Raw texts -> the model's inputs, through the artifact's own preprocessor."""
        import torch

        from torchwork.deploy.tensors import as_input_tuple

        preprocess = self.artifact.preprocess
        raw = preprocess(texts) if self._max_length is None else preprocess(texts, max_length=self._max_length)
        tensors = list(as_input_tuple(raw, "the preprocessor's output"))
        pad = getattr(preprocess, "pad_id", 0)
        for index, (tensor, spec) in enumerate(zip(tensors, self._schema)):
            widths = [(0, 0)] * tensor.ndim
            for axis in range(1, min(tensor.ndim, len(spec.shape))):
                size = spec.shape[axis]
                if isinstance(size, int) and tensor.shape[axis] < size:
                    widths[axis] = (0, size - tensor.shape[axis])
            if any(after for _, after in widths):
                flat = [w for pair in reversed(widths) for w in pair]  # F.pad lists the last axis first
                value = pad if not tensor.dtype.is_floating_point else 0.0
                tensors[index] = torch.nn.functional.pad(tensor, flat, value=value)
        return tuple(tensors)

    def _check_text_preprocessor(self) -> None:
        """Fail at startup, not at the first request, when the preprocessor does not take strings."""
        from torchwork.deploy.tensors import check_inputs

        entry = self.artifact.manifest.preprocess
        try:
            check_inputs(self._text_inputs(list(_PROBE_TEXTS)), self._schema, any_batch=True)
        except Exception as error:
            raise ConfigError(
                f"artifact {self.artifact.directory}: its preprocessor {entry.class_spec if entry else None} does not turn a list "
                f"of strings into the model's inputs ({type(error).__name__}: {error}). torchwork serve sends "
                "raw texts to an artifact's preprocessor; serve other raw inputs with --factory "
                "module:function.") from error

    # ------------------------------------------------------------------ the model
    def _forward(self, inputs: tuple[Any, ...]) -> np.ndarray:
        return self.artifact.rows(inputs)


class DeclaredPredictor(ModelPredictor):
    """A text artifact as the server declares it, read from its manifest alone: what an item is, the labels,
    the variant; no model and no tokenizer, so :meth:`predict_batch` refuses. The server holds this when
    the model runs in a model process and its preprocessor carries a ``tokenizer.json`` (see
    :func:`tokenizer_in`): the vocabulary, up to 64 MiB of it and many times that parsed, is then loaded
    once, in the model process, and every request runs there (``runs_in_model_process``).
    """

    runs_in_model_process = True

    def __init__(self, folder: Path, variant: str | None = None) -> None:
        from torchwork.deploy.loaded import default_variant
        from torchwork.deploy.manifest import read_manifest

        manifest = read_manifest(folder, check_files=False)  # the model process checks every file
        labels = manifest.postprocess.labels if manifest.postprocess is not None else None
        # the one the model process loads (load_artifact's default); a name only, when none may load by default
        self.variant = variant or default_variant(manifest) or next(iter(manifest.variants), "onnx")
        super().__init__(kind="text", preprocess=self._elsewhere, labels=labels,
                         output="probabilities", name=f"{folder.name} [{self.variant}]")

    def _elsewhere(self, texts: list[str]) -> Any:
        raise ConfigError(f"{self.name} runs in its model process only (its tokenizer is loaded there): send "
                          "the items to the model process")

    def predict_batch(self, items: Any) -> Any:
        return self._elsewhere(list(items))


def tokenizer_in(directory: str | os.PathLike[str]) -> bool:
    """Whether an artifact's bundled preprocessor carries a ``tokenizer.json`` (a subword vocabulary).

    Example:
        >>> import tempfile
        >>> tokenizer_in(tempfile.mkdtemp())
        False
    """
    from torchwork.deploy.manifest import PREPROCESS_DIR, read_manifest
    from torchwork.deploy.wordpiece import TOKENIZER_FILE

    folder = Path(directory)
    try:
        manifest = read_manifest(folder, check_files=False)
    except Exception:  # not an artifact (a factory's folder, say): the loader says what is wrong
        return False
    if manifest.preprocess is None:
        return False
    return (folder / str(manifest.preprocess.dir or PREPROCESS_DIR) / TOKENIZER_FILE).is_file()


def predictor_from_artifact(directory: str | os.PathLike[str], variant: str | None = None, *,
                            threads: int | None = None, compile: str = "off") -> ArtifactPredictor:
    """The predictor of an artifact folder written by ``torchwork.deploy.export``.

    ``variant`` picks the model file (default: the one the manifest marks to deploy, else ONNX, then pt2;
    never a variant that runs as code, TorchScript or ``pt2-aoti``, unless named here: see
    :func:`torchwork.deploy.loaded.default_variant`);
    ``threads`` is ONNX Runtime's compute threads (default: as configured for the server); ``compile``
    (``"off"``, ``"on"`` or ``"auto"``) compiles the pt2 program (:mod:`torchwork.deploy.compiled`). Raises
    :class:`~torchwork.errors.ExportError` when the folder is not a complete, unmodified artifact.
    """
    try:
        from torchwork.deploy.loaded import load_artifact
        from torchwork.deploy.manifest import read_manifest
        from torchwork.deploy.trust import in_torchwork
    except ImportError as error:  # pragma: no cover - a broken install
        raise ConfigError(f"serving an artifact needs torchwork.deploy, which cannot be imported here "
                          f"({error}); use --factory module:function to serve your own predictor.") from None
    folder = Path(directory)
    manifest = read_manifest(folder, check_files=False)  # load_artifact checks every file below
    spec = manifest.preprocess.class_spec if manifest.preprocess else None
    if spec is not None and not in_torchwork(spec):
        raise ExportError(f"artifact {folder}: its preprocessor class {spec!r} is outside the torchwork "
                          "namespace. An artifact is untrusted data, so torchwork serve imports only torchwork "
                          "classes. If you trust it, serve it with --factory module:function returning "
                          "torchwork.serve.ArtifactPredictor(torchwork.deploy.load_artifact(dir, trust=(...,))).")
    loaded = load_artifact(folder, variant, threads=threads or default_threads())
    decision = None
    if compile != "off":
        from torchwork.deploy.compiled import compile_artifact

        decision = compile_artifact(loaded, compile)
        print(f"torchwork serve: compile={compile} for {folder}: {decision['reason']}", file=sys.stderr, flush=True)
    predictor = ArtifactPredictor(loaded)
    predictor.compile_decision = decision
    return predictor

