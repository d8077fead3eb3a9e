"""An artifact loaded to run: its variant's runner (with the float fallback it records) between the
bundled preprocessing and postprocessing. :mod:`torchwork.deploy.runtime` opens model files;
:mod:`torchwork.deploy.fallback` wraps an INT8 runner with its float fallback; this module composes them,
so that neither of those two needs the other.

Example:
    >>> load_artifact("no/such/artifact")
    Traceback (most recent call last):
    ...
    torchwork.errors.ExportError: no/such/artifact is not a directory. An artifact is the directory written by `torchwork export` / torchwork.deploy.export().
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from torchwork.arguments import name_list
from torchwork.deploy.contents import load_preprocess
from torchwork.deploy.fallback import fallback_runner
from torchwork.deploy.manifest import PREFERENCE, Manifest, read_manifest, variant_format
from torchwork.deploy.runtime import Runner, check_row_count, open_runner, run_in_chunks, softmax
from torchwork.deploy.tensors import as_input_tuple, check_inputs
from torchwork.deploy.trust import may_load, package_trust, refuse_untrusted, safe_member, trust_needed
from torchwork.errors import ConfigError, ExportError
from torchwork.threads import check_threads


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

    ``variant`` picks the model file (``"onnx"``, ``"pt2"``, ``"onnx-int8"``, ``"torchscript"``,
    ``"pt2-aoti"``); by default the one the artifact marks to deploy, else ONNX, then pt2
    (:func:`default_variant`). Every file's checksum is checked first. A variant that runs as code loads
    when named, or when ``trust`` holds its word: ``"torchscript"`` for a TorchScript program, ``"native"``
    for a ``pt2-aoti`` native library; the artifact's own ``deploy`` field never makes it the default.
    ``trust`` also names module prefixes allowed for the preprocessor class.

    Example:
        >>> predict = load_artifact("artifacts/digits")          # doctest: +SKIP
        >>> predict(torch.rand(2, 64)).shape                     # doctest: +SKIP
        torch.Size([2, 10])
    """
    threads = check_threads(threads, "threads")  # before anything is read: 10**5000 reached ONNX Runtime
    root, trust = Path(directory), name_list(trust, "trust") or ()  # "native" is one word, not six letters
    manifest = read_manifest(root)
    available = list(manifest.variants)  # refused formats never enter the artifact
    if variant is None:
        variant = default_variant(manifest, trust)
        if variant is None:
            raise _nothing_to_load(root, manifest)
        marked = manifest.deploy
        if marked in available and marked != variant:  # marked to deploy, but it runs as code
            word = trust_needed(variant_format(marked))
            warnings.warn(f"artifact {root} marks {marked!r} to deploy, which runs as code; loading {variant!r} "
                          f"instead. Name it (load_artifact(dir, {marked!r}), --variant {marked}) or trust it "
                          f"(trust=({word!r},)) to load it.", UserWarning, stacklevel=2)
    elif variant not in available:
        refused = manifest.refused.get(variant)
        raise ConfigError(f"artifact {root} has no {variant!r} variant"
                          + (f" (refused at export: {refused})" if refused else "") + f"; it has {available}.")
    preprocess = load_preprocess(root, manifest, package_trust(trust))
    # named by the caller, or chosen among what its trust allows: either way, consented to
    runner = variant_runner(root, manifest, variant, threads, trusted=True, preprocess=preprocess)
    return LoadedArtifact(root, manifest, variant, runner, preprocess)


def default_variant(manifest: Manifest, trust: Iterable[str] = ()) -> str | None:
    """The variant :func:`load_artifact` loads when none is named: the one the manifest marks to deploy,
    else the first of :data:`~torchwork.deploy.manifest.PREFERENCE` the artifact holds; never one that runs
    as code unless ``trust`` holds its word (the manifest is untrusted data: it cannot consent for the
    caller). None when no variant may load so.

    Example:
        >>> from torchwork.deploy.manifest import Manifest, Variant
        >>> variants = {"torchscript": Variant("model.torchscript.pt", "torchscript"),
        ...             "onnx": Variant("model.onnx", "onnx")}
        >>> manifest = Manifest(1, [], [], variants, {}, deploy="torchscript")
        >>> default_variant(manifest), default_variant(manifest, trust=("torchscript",))
        ('onnx', 'torchscript')
    """
    trust = tuple(trust)
    allowed = [name for name in manifest.variants if may_load(variant_format(name), trust)]
    if manifest.deploy in allowed:
        return manifest.deploy
    return next((name for name in PREFERENCE if name in allowed), None)


def _nothing_to_load(root: Path, manifest: Manifest) -> ExportError:
    """Why no variant loads by default: none passed export, or every one runs as code (the first refused)."""
    gated = list(manifest.variants)
    if not gated:
        return ExportError(f"artifact {root} holds no variant that passed its export checks "
                           f"(refused: {manifest.refused}).")
    return refuse_untrusted(gated[0], variant_format(gated[0]), root)


# The float fallback runs a few rows of a batch, right after the INT8 graph's call, whose ONNX Runtime threads
# are still spinning. With threads of its own it competes with them: on the fine-tuned MiniLM (2 threads, batch
# 64, 2 cores) the fallback's rows took 1.7x as long as alone and the INT8 calls after them 1.1x; with one
# thread, neither (benchmarks/deploy_fallback.py); a lone unsure row took 14.5 ms instead of 19.9 ms. Its rows
# are too few to gain from more.
FALLBACK_THREADS = 1


def variant_runner(root: Path, manifest: Manifest, variant: str, threads: int | None = None,
                   trusted: bool = False, preprocess: Any = None) -> Runner:
    """The runner of one variant of an artifact: its model file, and the float fallback it records
    (:mod:`torchwork.deploy.fallback`) when it has one. Each model file runs once first (:func:`probe`), so
    that one that does not fit the manifest is refused here, not at a request. ``trusted``: the caller
    consents to this variant's file running as code (see :func:`torchwork.deploy.trust.may_load`); the
    fallback the manifest names gets no such consent."""
    entry = manifest.variants[variant]
    runner = open_runner(safe_member(root, entry.file, f"variant {variant!r}"), variant_format(variant), threads,
                         trusted)
    probes = probe_inputs(root, manifest, preprocess)
    shapes = probe(root, manifest, variant, runner, probes)
    if entry.fallback is None:
        return runner
    other = entry.fallback["variant"]
    problem = ("is itself" if other == variant else "the artifact does not hold" if other not in manifest.variants
               else "needs a dynamic batch size" if manifest.static_batch else None)
    if problem:
        raise ExportError(f"artifact {root}: variant {variant!r} falls back to {other!r}, which {problem}; "
                          "export it again.")
    exact = open_runner(safe_member(root, manifest.variants[other].file, f"variant {other!r}"),
                        variant_format(other), FALLBACK_THREADS)
    exact_shapes = probe(root, manifest, other, exact, probes)
    if exact_shapes != shapes:
        raise ExportError(f"artifact {root}: variant {variant!r} falls back to {other!r} "
                          f"({manifest.variants[other].file}), whose outputs per item {exact_shapes} differ from "
                          f"its own {shapes}; the two files are not one model: export the artifact again.")
    mask, padded = padded_inputs(root, manifest, entry.fallback.get("padding_mask"))
    return fallback_runner(runner, exact, float(entry.fallback["margin"]), mask, padded)


def padded_inputs(root: Path, manifest: Manifest, mask_name: str | None) -> tuple[int | None, tuple[int, ...]]:
    """The index of the fallback's padding mask among the inputs and of the inputs that share its length axis
    (a dynamic axis 1); ``(None, ())`` when there is nothing to cut (no mask named, or a fixed length)."""
    if mask_name is None:
        return None, ()
    names = [spec.name for spec in manifest.inputs]
    index = names.index(mask_name) if mask_name in names else None
    if index is None or len(manifest.inputs[index].shape) != 2:
        raise ExportError(f"artifact {root}: the float fallback's padding mask {mask_name!r} is not a 2-D input "
                          f"of the model (its inputs: {names}); export the artifact again.")
    length = manifest.inputs[index].shape[1]
    if not isinstance(length, str):
        return None, ()
    return index, tuple(i for i, spec in enumerate(manifest.inputs) if len(spec.shape) >= 2 and spec.shape[1] == length)


# ----------------------------------------------------------------------------------------- checked at load
def probe_inputs(root: Path, manifest: Manifest, preprocess: Any = None) -> list[tuple[Any, ...]]:
    """What each model file of an artifact runs on when it loads: the example inputs the export recorded
    (checked against the manifest's inputs) and, when the preprocessor offers them (``extreme_inputs()``, a
    tokenizer's longest row of its largest id), its extreme inputs, met to the manifest's fixed dims."""
    from torchwork.deploy.contents import load_examples

    try:
        examples = check_inputs(load_examples(root, manifest), manifest.inputs)
    except ConfigError as error:
        raise ExportError(f"artifact {root}: {manifest.examples} does not fit the manifest's inputs ({error}); "
                          "it is damaged: export the model again.") from None
    probes = [examples]
    extreme = getattr(preprocess, "extreme_inputs", None)
    if callable(extreme):
        probes.append(_fit_fixed_dims(as_input_tuple(extreme(), "extreme_inputs()"), manifest))
    return probes


def _fit_fixed_dims(tensors: tuple[Any, ...], manifest: Manifest) -> tuple[Any, ...]:
    """Tensors cut (never padded) to the manifest's fixed lengths, repeated to a static batch size."""
    fitted = []
    for tensor, spec in zip(tensors, manifest.inputs):
        for axis, size in list(enumerate(spec.shape))[1:tensor.ndim]:
            if isinstance(size, int) and tensor.shape[axis] > size:
                tensor = tensor.narrow(axis, 0, size)
        if spec.shape and isinstance(spec.shape[0], int) and tensor.ndim:
            tensor = tensor[:1].expand(spec.shape[0], *tensor.shape[1:])
        fitted.append(tensor)
    return tuple(fitted)


def probe(root: Path, manifest: Manifest, variant: str, runner: Runner,
          probes: Sequence[tuple[Any, ...]]) -> list[tuple[int, ...]]:
    """Run ``runner`` on each of ``probes``; the output shapes of the first (past the batch dimension). An
    :class:`~torchwork.errors.ExportError` naming the file when it fails or, for a classifier, when it answers
    another number of rows than it was given or another number of values per item than there are labels."""
    file = manifest.variants[variant].file
    found: list[tuple[int, ...]] = []
    for index, inputs in enumerate(probes):
        what = ("example inputs" if index == 0 else
                "preprocessor's extreme inputs (its largest token id, max_length tokens long)")
        try:
            outputs = runner(inputs)
        except Exception as error:  # a model file that cannot run the manifest's inputs: any runtime's error
            reason = " ".join(str(error).split())[:300]
            raise ExportError(f"artifact {root}: variant {variant!r} ({file}) fails on the artifact's {what} "
                              f"({type(error).__name__}: {reason}); the model file does not fit the manifest's "
                              f"inputs {[(s.name, s.shape) for s in manifest.inputs]} or its preprocessor: export "
                              "the model again.") from None
        if manifest.postprocess.labels is not None:
            _check_classifier(root, manifest, f"variant {variant!r} ({file})", inputs, outputs, what)
        if index == 0:
            found = [tuple(int(d) for d in o.shape[1:]) for o in outputs]
    return found


def _check_classifier(root: Path, manifest: Manifest, who: str, inputs: tuple[Any, ...], outputs: list[Any],
                      what: str) -> None:
    labels = manifest.postprocess.labels or []
    rows = int(inputs[0].shape[0]) if inputs and inputs[0].ndim else 1
    first = outputs[0] if outputs else None
    if first is None or first.ndim != 2 or int(first.shape[0]) != rows:
        got = "no output" if first is None else f"an output of shape {tuple(first.shape)}"
        raise ExportError(f"artifact {root}: {who} answers {got} for {rows} row(s) of its {what}; a classifier "
                          "answers one row of scores per item: export the model again.")
    if int(first.shape[1]) != len(labels):
        raise ExportError(f"artifact {root}: {who} answers {int(first.shape[1])} values per item for the "
                          f"{len(labels)} labels the manifest names; the model file and the labels do not belong "
                          "together: export the model again.")
