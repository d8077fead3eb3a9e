"""The artifact format: the file names, and ``manifest.json`` as a typed, validated :class:`Manifest`.

An artifact is one directory (every file but the manifest is listed in it with its size and SHA-256)::

    manifest.json            schema (input/output names, dtypes, shapes with dynamic dims and their bounds),
                             versions, variants, refusals, advice, postprocessing, the variant to deploy
    model.pt2                torch.export program (torch.export.save), also the eager reference
    model.onnx (+ .data)     ONNX graph (torch.onnx.export(dynamo=True)) and its external weights
    model.int8.onnx          ONNX Runtime dynamic INT8 quantization of model.onnx (optional)
    model.torchscript.pt     legacy TorchScript (optional, deprecated)
    model.aoti.pt2           the program compiled ahead of time by AOTInductor: a native library (optional)
    cpp/                     the C++ runner's sources, a CMake project (optional, ``export --cpp``)
    weights.safetensors      the eager state_dict (no pickle)
    examples.safetensors     the example inputs the export was made with
    example_outputs.safetensors  what eager and each variant returned for them (``torchwork env check
                             --artifact`` replays them on another machine)
    samples.json / samples.safetensors   held-out raw inputs (and targets) for ``verify``
    preprocess/              the preprocessor's own files (``Class.save(dir)`` / ``Class.load(dir)``)
    parity.json              the checks run at export (every variant at several batch sizes / lengths)
    verify.json              the verification report at export time, when held-out samples were given

The manifest is data from disk: :meth:`Manifest.from_json` checks every field's type and refuses a missing
required field or an unknown one with what is wrong and what to do; the rest of torchwork reads the typed
fields, never the raw dict. The trust checks (checksums, paths, imports) are in :mod:`torchwork.deploy.trust`.

Example:
    >>> manifest = Manifest.from_json({"torchwork_artifact": 1, "files": {"model.onnx": {"bytes": 1, "sha256": "0"}},
    ...     "inputs": [{"name": "x", "dtype": "float32", "shape": ["batch", 4]}],
    ...     "outputs": [{"name": "output", "dtype": "float32", "shape": ["batch", 2]}],
    ...     "variants": {"onnx": {"file": "model.onnx", "extra_files": [], "format": "onnx"}}})
    >>> manifest.inputs[0].shape, manifest.static_batch, manifest.postprocess.labels
    (['batch', 4], None, None)
    >>> Manifest.from_json({**manifest.to_json(), "colour": "red"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.ExportError: manifest.json: unknown field 'colour' ...
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchwork.deploy.trust import MANIFEST, check_file_table, check_inside, safe_member
from torchwork.errors import ExportError
from torchwork.paths import MAX_MANIFEST_BYTES as MAX_MANIFEST_BYTES  # deploy's public name for the bound

FORMAT_VERSION = 1
WEIGHTS = "weights.safetensors"
EXAMPLES = "examples.safetensors"
EXAMPLE_OUTPUTS = "example_outputs.safetensors"
SAMPLES_JSON = "samples.json"
SAMPLES_TENSORS = "samples.safetensors"
PREPROCESS_DIR = "preprocess"
PARITY = "parity.json"
VERIFY = "verify.json"

# variant name -> model file
VARIANT_FILES: dict[str, str] = {
    "pt2": "model.pt2",
    "onnx": "model.onnx",
    "onnx-int8": "model.int8.onnx",
    "torchscript": "model.torchscript.pt",
    "pt2-aoti": "model.aoti.pt2",
}
FORMATS = ("pt2", "onnx", "torchscript", "pt2-aoti")
# load_artifact's choice when the manifest marks no variant to deploy.
PREFERENCE = ("onnx", "pt2", "onnx-int8", "torchscript", "pt2-aoti")

__all__ = ["EXAMPLES", "EXAMPLE_OUTPUTS", "FORMATS", "FORMAT_VERSION", "MANIFEST", "PARITY", "PREFERENCE",
           "PREPROCESS_DIR", "SAMPLES_JSON", "SAMPLES_TENSORS", "VARIANT_FILES", "VERIFY", "WEIGHTS", "Manifest",
           "Postprocess", "PreprocessEntry", "SamplesEntry", "TensorSpec", "Variant", "read_manifest",
           "variant_format"]


def variant_format(name: str) -> str:
    """The file format of a variant (``"onnx-int8"`` is an ONNX file)."""
    return "onnx" if name.startswith("onnx") else name


class _Record:
    """from_json / to_json for a flat dataclass of JSON values; ``_where`` names it in errors."""

    _where = "an entry"

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Any:
        where = where or cls._where
        if not isinstance(data, dict):
            raise _damaged(f"{where} is a {type(data).__name__}, not an object")
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        keys = {_json_key(name): name for name in fields}
        unknown = sorted(set(data) - set(keys))
        if unknown:
            raise ExportError(f"{MANIFEST}: unknown field {unknown[0]!r} in {where}; this torchwork reads format "
                              f"version {FORMAT_VERSION}, whose fields are {sorted(keys)}. Was it written by "
                              "another torchwork version? Re-export the model with this one.")
        values = {}
        for key, name in keys.items():
            spec = fields[name]
            if key not in data:
                if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                    raise _damaged(f"{where} has no {key!r} field")
                continue
            values[name] = cls._check(name, data[key], where)
        return cls(**values)

    @classmethod
    def _check(cls, name: str, value: Any, where: str) -> Any:
        return value

    def to_json(self) -> dict[str, Any]:
        out = {}
        for spec in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, spec.name)
            if spec.metadata.get("omit_none") and value is None:
                continue
            out[_json_key(spec.name)] = value.to_json() if isinstance(value, _Record) else value
        return out


def _json_key(name: str) -> str:
    return {"class_spec": "class", "format_version": "torchwork_artifact"}.get(name, name)


def _damaged(what: str) -> ExportError:
    return ExportError(f"{MANIFEST}: {what}; the manifest is damaged: re-export the model.")


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _damaged(f"{what} is {value!r}, not a {names}")
    return value


@dataclass
class TensorSpec(_Record):
    """One model input or output: its name, dtype (``"float32"``, ``"int64"``...) and shape; a string in the
    shape names a dynamic dimension (``"batch"``, ``"length"``), a number is fixed. ``bounds`` gives a dynamic
    dimension exported only up to a bound its ``[min, max]`` (``{"length": [1, 256]}``, ``max_length=256``).

    Example:
        >>> TensorSpec("idx", "int64", ["batch", "length"], {"length": [1, 256]}).limits()
        {1: (1, 256)}
    """

    name: str
    dtype: str
    shape: list[int | str]
    bounds: dict[str, list[int]] | None = field(default=None, metadata={"omit_none": True})
    _where = "an input or output"

    @classmethod
    def _check(cls, name: str, value: Any, where: str) -> Any:
        if name == "shape":
            for dim in _expect(value, list, f"{where}'s shape"):
                _expect(dim, (int, str), f"a dimension of {where}'s shape")
            return list(value)
        if name == "bounds":
            for dim, pair in _expect(value, dict, f"{where}'s bounds").items():
                ints = isinstance(pair, list) and len(pair) == 2 and all(
                    isinstance(n, int) and not isinstance(n, bool) for n in pair)
                if not ints or not 0 <= pair[0] <= pair[1]:
                    raise _damaged(f"{where}'s bounds of {dim!r} are {pair!r}, not [min, max] with 0 <= min <= max")
            return value
        return _expect(value, str, f"{where}'s {name}")

    def limits(self) -> dict[int, tuple[int, int]]:
        """``{axis: (min, max)}`` of the dynamic dimensions that have bounds."""
        bounds = self.bounds or {}
        return {axis: (bounds[dim][0], bounds[dim][1]) for axis, dim in enumerate(self.shape)
                if isinstance(dim, str) and dim in bounds}


@dataclass
class Variant(_Record):
    """One model file that passed its checks: its file, extra files (ONNX external data), format, and what
    the export recorded (ONNX opset, TorchScript method, the INT8 quantization)."""

    file: str
    format: str
    extra_files: list[str] = field(default_factory=list)
    opset: int | None = field(default=None, metadata={"omit_none": True})
    method: str | None = field(default=None, metadata={"omit_none": True})
    quantization: dict[str, Any] | None = field(default=None, metadata={"omit_none": True})
    # {"variant": "onnx", "margin": m, ...}: rows whose top-2 probability margin is <= m are answered by that
    # variant instead (torchwork.deploy.fallback); "padding_mask": the input they are cut to their longest by
    fallback: dict[str, Any] | None = field(default=None, metadata={"omit_none": True})
    _where = "a variant"

    @classmethod
    def _check(cls, name: str, value: Any, where: str) -> Any:
        kinds: dict[str, Any] = {"file": str, "format": str, "extra_files": list, "opset": int, "method": str,
                                 "quantization": dict, "fallback": dict}
        value = _expect(value, kinds[name], f"{where}'s {name}")
        if name == "extra_files":
            for item in value:
                _expect(item, str, f"an extra file of {where}")
        if name == "fallback":
            _expect(value.get("variant"), str, f"{where}'s fallback variant")
            margin = _expect(value.get("margin"), (int, float), f"{where}'s fallback margin")
            if isinstance(margin, bool) or not 0 <= margin <= 1:  # also refuses NaN
                raise ExportError(f"{MANIFEST}: {where}'s fallback margin {margin!r} must be a probability "
                                  "margin in [0, 1]; export the artifact again.")
            if "padding_mask" in value:
                _expect(value["padding_mask"], str, f"{where}'s fallback padding mask")
        return value

    @property
    def files(self) -> list[str]:
        """The model file and its extra files."""
        return [self.file, *self.extra_files]


@dataclass
class PreprocessEntry(_Record):
    """The bundled preprocessor: its ``"module:Class"`` (imported only inside ``torchwork.`` or a trusted
    prefix), its folder, and the prefix a user must trust when the class is not torchwork's."""

    class_spec: Any
    dir: Any = PREPROCESS_DIR
    trust_needed: str | None = field(default=None, metadata={"omit_none": True})
    _where = "the preprocess entry"


@dataclass
class Postprocess(_Record):
    """What the artifact does after the model: softmax over the first output, class names."""

    softmax: bool = False
    labels: list[str] | None = None
    _where = "the postprocess entry"

    @classmethod
    def _check(cls, name: str, value: Any, where: str) -> Any:
        if name == "softmax":
            return bool(_expect(value, bool, f"{where}'s softmax"))
        if value is not None:
            for label in _expect(value, list, f"{where}'s labels"):
                _expect(label, str, f"a label of {where}")
        return value


@dataclass
class SamplesEntry(_Record):
    """Held-out raw inputs bundled at export: texts (``samples.json``) or tensors (``samples.safetensors``)."""

    file: Any
    kind: str
    count: int
    targets: bool
    inputs: int | None = field(default=None, metadata={"omit_none": True})
    _where = "the samples entry"


_TOP_LEVEL_KINDS: dict[str, Any] = {
    "created_utc": str, "versions": dict, "environment": dict, "model": dict, "refused": dict, "deploy": str,
    "weights": str, "examples": str, "advice": list, "reports": dict, "example_outputs": dict, "files": dict}


@dataclass
class Manifest(_Record):
    """``manifest.json``, typed. Read one with :func:`read_manifest`; ``to_json()`` gives what is written."""

    format_version: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    variants: dict[str, Variant]
    files: dict[str, dict[str, Any]]
    created_utc: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] | None = None
    model: dict[str, Any] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    deploy: str | None = None
    weights: str = WEIGHTS
    examples: str = EXAMPLES
    samples: SamplesEntry | None = None
    preprocess: PreprocessEntry | None = None
    postprocess: Postprocess = field(default_factory=Postprocess)
    advice: list[str] = field(default_factory=list)
    reports: dict[str, str] = field(default_factory=dict)
    example_outputs: dict[str, Any] | None = field(default=None, metadata={"omit_none": True})
    _where = MANIFEST

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Manifest:
        if not isinstance(data, dict) or "torchwork_artifact" not in data:
            raise ExportError(f"{MANIFEST} is not a torchwork artifact manifest (no 'torchwork_artifact' key).")
        version = data["torchwork_artifact"]
        if version != FORMAT_VERSION:
            raise ExportError(f"format version {version!r}, but this torchwork reads version {FORMAT_VERSION}. "
                              "Re-export it with this torchwork version.")
        return super().from_json(data, where)

    @classmethod
    def _check(cls, name: str, value: Any, where: str) -> Any:
        if name in ("inputs", "outputs"):
            return [TensorSpec.from_json(spec, f"{name}[{i}]")
                    for i, spec in enumerate(_expect(value, list, f"the {name!r} entry"))]
        if name == "variants":
            variants = {}
            for key, entry in _expect(value, dict, "the 'variants' entry").items():
                if key not in VARIANT_FILES:
                    raise ExportError(f"unknown variant {key!r} in {MANIFEST}; this torchwork knows "
                                      f"{sorted(VARIANT_FILES)}. Re-export the model with this torchwork version.")
                variants[key] = Variant.from_json(entry, f"variant {key!r}")
            return variants
        nested: dict[str, type[_Record]] = {"samples": SamplesEntry, "preprocess": PreprocessEntry,
                                            "postprocess": Postprocess}
        if name in nested:
            if value is None or (name == "preprocess" and not value):
                return None if name != "postprocess" else Postprocess()
            return nested[name].from_json(value)
        if value is None and name not in ("files", "format_version"):
            return None
        return _expect(value, _TOP_LEVEL_KINDS.get(name, int), f"the {name!r} entry")

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["inputs"] = [spec.to_json() for spec in self.inputs]
        out["outputs"] = [spec.to_json() for spec in self.outputs]
        out["variants"] = {name: variant.to_json() for name, variant in self.variants.items()}
        return out

    @property
    def static_batch(self) -> int | None:
        """The batch size the model was exported with when dim 0 of its first input is fixed, else None."""
        shape = self.inputs[0].shape if self.inputs else []
        return shape[0] if shape and isinstance(shape[0], int) else None

    def variant_bytes(self, name: str) -> int:
        """The bytes of a variant's files."""
        return sum(int(self.files[f]["bytes"]) for f in self.variants[name].files)

    def check(self, root: Path) -> None:
        """Every listed file is a regular file inside ``root`` (by name and resolved), and every variant's files
        are listed in the file table."""
        for relative in self.files:
            safe_member(root, relative, "the file table")
        for name, variant in self.variants.items():
            for relative in variant.files:
                safe_member(root, relative, f"variant {name!r}")
                if relative not in self.files:
                    raise ExportError(f"artifact {root}: variant {name!r} uses {relative!r}, which the manifest's "
                                      "file table does not list; the manifest is damaged: re-export the model.")


def read_manifest(directory: str | os.PathLike[str], check_files: bool = True) -> Manifest:
    """Read and validate ``manifest.json``; with ``check_files``, check every file's size and SHA-256.

    Raises :class:`~torchwork.errors.ExportError` naming what is damaged and what to do.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ExportError(f"{root} is not a directory. An artifact is the directory written by "
                          "`torchwork export` / torchwork.deploy.export().")
    path = root / MANIFEST
    check_inside(root, path, MANIFEST)
    if not path.is_file():
        raise ExportError(f"artifact {root}: {MANIFEST} is missing, so this is not a (complete) torchwork "
                          "artifact. Re-export the model; an interrupted export never leaves a partial directory.")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise ExportError(f"artifact {root}: {MANIFEST} holds {path.stat().st_size} bytes, over the "
                          f"{MAX_MANIFEST_BYTES} a manifest can need; it is damaged or forged: re-export the model.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:  # bad JSON or UTF-8, a 5000-digit number, absurd nesting
        raise ExportError(f"artifact {root}: {MANIFEST} is not valid JSON ({str(error)[:200]}). The file is "
                          "damaged: re-export the model or restore the directory from a copy.") from None
    try:
        manifest = Manifest.from_json(data)
    except ExportError as error:
        raise ExportError(f"artifact {root}: {error}") from None
    manifest.check(root)
    if check_files:
        check_file_table(root, manifest.files)
    return manifest
