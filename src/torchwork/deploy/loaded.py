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
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from torchwork.deploy.aoti import NATIVE_TRUST, needs_native_trust
from torchwork.deploy.contents import load_preprocess
from torchwork.deploy.fallback import fallback_runner
from torchwork.deploy.manifest import PREFERENCE, Manifest, read_manifest, variant_format
from torchwork.deploy.runtime import Runner, check_row_count, open_runner, run_in_chunks, softmax
from torchwork.deploy.tensors import as_input_tuple, check_inputs
from torchwork.deploy.trust import safe_member
from torchwork.errors import ConfigError, ExportError


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
    ``"pt2-aoti"``); by default the one the artifact marks to deploy, else ONNX, then pt2. Every file's
    checksum is checked first. A ``pt2-aoti`` variant (a native library) loads when named or with
    ``trust=("native",)``.

    Example:
        >>> predict = load_artifact("artifacts/digits")          # doctest: +SKIP
        >>> predict(torch.rand(2, 64)).shape                     # doctest: +SKIP
        torch.Size([2, 10])
    """
    root, trust = Path(directory), tuple(trust)
    manifest = read_manifest(root)
    available = list(manifest.variants)  # refused formats never enter the artifact
    trust_native = variant is not None or NATIVE_TRUST in trust  # named by the caller, or trusted
    if variant is None:
        marked = manifest.deploy
        ordered = [marked] if marked in available else [n for n in PREFERENCE if n in available]
        if NATIVE_TRUST not in trust:  # a native library is the default only when trusted
            ordered = [n for n in ordered if not needs_native_trust(n)] or [
                n for n in PREFERENCE if n in available and not needs_native_trust(n)] or ordered
        if not ordered:
            raise ExportError(f"artifact {root} holds no variant that passed its export checks "
                              f"(refused: {manifest.refused}).")
        variant = ordered[0]
    elif variant not in available:
        refused = manifest.refused.get(variant)
        raise ConfigError(f"artifact {root} has no {variant!r} variant"
                          + (f" (refused at export: {refused})" if refused else "") + f"; it has {available}.")
    runner = variant_runner(root, manifest, variant, threads, trust_native)
    packages = tuple(t for t in trust if t != NATIVE_TRUST)
    return LoadedArtifact(root, manifest, variant, runner, load_preprocess(root, manifest, packages))


def variant_runner(root: Path, manifest: Manifest, variant: str, threads: int | None = None,
                   trust_native: bool = False) -> Runner:
    """The runner of one variant of an artifact: its model file, and the float fallback it records
    (:mod:`torchwork.deploy.fallback`) when it has one."""
    entry = manifest.variants[variant]
    runner = open_runner(safe_member(root, entry.file, f"variant {variant!r}"), variant_format(variant), threads,
                         trust_native)
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
