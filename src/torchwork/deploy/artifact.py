"""The artifact format: one directory that runs a model, checks it, and cannot silently disagree with it.

An artifact is untrusted data: reading one never unpickles anything and never imports a module outside
the ``torchwork.`` namespace (plus prefixes the caller passes in ``trust``).

Layout (every file but the manifest is listed in it with its size and SHA-256)::

    manifest.json            schema (input/output names, dtypes, shapes with dynamic dims), versions,
                             variants, refusals, advice, postprocessing, the variant to deploy
    model.pt2                torch.export program (torch.export.save), also the eager reference
    model.onnx (+ .data)     ONNX graph (torch.onnx.export(dynamo=True)) and its external weights
    model.int8.onnx          ONNX Runtime dynamic INT8 quantization of model.onnx (optional)
    model.torchscript.pt     legacy TorchScript (optional, deprecated)
    weights.safetensors      the eager state_dict (no pickle)
    examples.safetensors     the example inputs the export was made with
    example_outputs.safetensors  what eager and each variant returned for them (``torchwork env check
                             --artifact`` replays them on another machine)
    samples.json / samples.safetensors   held-out raw inputs (and targets) for ``verify``
    preprocess/              the preprocessor's own files (``Class.save(dir)`` / ``Class.load(dir)``)
    parity.json              the checks run at export (every variant at several batch sizes / lengths)
    verify.json              the verification report at export time, when held-out samples were given

Example:
    >>> import tempfile, torch
    >>> from torchwork.deploy import export, load_artifact
    >>> model = torch.nn.Linear(4, 2)
    >>> out = tempfile.mkdtemp() + "/artifact"
    >>> _ = export(model, torch.randn(3, 4), out, formats=("pt2",))   # doctest: +SKIP
    >>> load_artifact(out)(torch.randn(5, 4)).shape                      # doctest: +SKIP
    torch.Size([5, 2])
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import re
import warnings
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError, ExportError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "weights.safetensors"
EXAMPLES = "examples.safetensors"
EXAMPLE_OUTPUTS = "example_outputs.safetensors"
SAMPLES_JSON = "samples.json"
SAMPLES_TENSORS = "samples.safetensors"
PREPROCESS_DIR = "preprocess"
PARITY = "parity.json"
VERIFY = "verify.json"

# variant name -> (format, model file)
VARIANT_FILES: dict[str, str] = {
    "pt2": "model.pt2",
    "onnx": "model.onnx",
    "onnx-int8": "model.int8.onnx",
    "torchscript": "model.torchscript.pt",
}
FORMATS = ("pt2", "onnx", "torchscript")
# load_artifact's choice when the manifest marks no variant to deploy.
PREFERENCE = ("onnx", "pt2", "onnx-int8", "torchscript")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ----------------------------------------------------------------------------------------- small helpers
def sha256_of(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_table(root: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` for every file under ``root`` except the manifest."""
    table = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            table[path.relative_to(root).as_posix()] = {"bytes": path.stat().st_size, "sha256": sha256_of(path)}
    return table


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def flatten_outputs(outputs: Any, where: str = "the model") -> list[Any]:
    """A tensor, or (nested) tuples / lists of tensors -> a flat list of tensors, in order."""
    import torch

    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, (tuple, list)):
        return [t for item in outputs for t in flatten_outputs(item, where)]
    raise ConfigError(f"{where} returned a {type(outputs).__name__}; export supports a tensor or a tuple / "
                      "list of tensors as outputs. Return a tuple (e.g. (logits, probabilities)) instead.")


def as_input_tuple(inputs: Any, what: str = "example_inputs") -> tuple[Any, ...]:
    """A tensor / numpy array or a tuple / list of them -> a tuple of CPU tensors."""
    import numpy as np
    import torch

    items = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if not items:
        raise ConfigError(f"{what} is empty: pass a tensor or a tuple of tensors (the model's inputs).")
    converted = []
    for index, item in enumerate(items):
        if isinstance(item, np.ndarray):
            item = torch.from_numpy(np.ascontiguousarray(item))
        if not isinstance(item, torch.Tensor):
            raise ConfigError(f"{what}[{index}] is a {type(item).__name__}; export needs tensors (a tensor or a "
                              "tuple of tensors, one per argument of forward()).")
        converted.append(item.detach().cpu())
    return tuple(converted)


def safe_member(root: Path, relative: Any, what: str) -> Path:
    """``root / relative`` after checking that an (untrusted) manifest entry stays inside ``root``."""
    if not isinstance(relative, str) or not relative or relative.startswith(("/", "\\")) or ".." in Path(
            relative).parts:
        raise ExportError(f"artifact {root}: {what} names the path {relative!r}, which is not a plain relative "
                          "path inside the artifact. The manifest is damaged or forged: re-export the model.")
    return root / relative


# ----------------------------------------------------------------------------------------- the manifest
def read_manifest(directory: str | os.PathLike[str], check_files: bool = True) -> dict[str, Any]:
    """Read and validate ``manifest.json``; with ``check_files``, check every file's size and SHA-256.

    Raises :class:`~torchwork.errors.ExportError` naming what is damaged and what to do.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ExportError(f"{root} is not a directory. An artifact is the directory written by "
                          "`torchwork export` / torchwork.deploy.export().")
    path = root / MANIFEST
    if not path.is_file():
        raise ExportError(f"artifact {root}: {MANIFEST} is missing, so this is not a (complete) torchwork "
                          "artifact. Re-export the model; an interrupted export never leaves a partial directory.")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExportError(f"artifact {root}: {MANIFEST} is not valid JSON ({error}). The file is damaged: "
                          "re-export the model or restore the directory from a copy.") from error
    if not isinstance(manifest, dict) or "torchwork_artifact" not in manifest:
        raise ExportError(f"artifact {root}: {MANIFEST} is not a torchwork artifact manifest (no "
                          "'torchwork_artifact' key).")
    version = manifest["torchwork_artifact"]
    if version != FORMAT_VERSION:
        raise ExportError(f"artifact {root}: format version {version!r}, but this torchwork reads version "
                          f"{FORMAT_VERSION}. Re-export it with this torchwork version.")
    for key, kind in (("inputs", list), ("outputs", list), ("variants", dict), ("files", dict)):
        if not isinstance(manifest.get(key), kind):
            raise ExportError(f"artifact {root}: {MANIFEST} has no valid {key!r} entry ({kind.__name__}); the "
                              "manifest is damaged: re-export the model.")
    for name, variant in manifest["variants"].items():
        if name not in VARIANT_FILES or not isinstance(variant, dict):
            raise ExportError(f"artifact {root}: unknown variant {name!r} in {MANIFEST}; known: "
                              f"{sorted(VARIANT_FILES)}.")
        for relative in [variant.get("file"), *variant.get("extra_files", [])]:
            safe_member(root, relative, f"variant {name!r}")
            if relative not in manifest["files"]:
                raise ExportError(f"artifact {root}: variant {name!r} uses {relative!r}, which the manifest's "
                                  "file table does not list; the manifest is damaged: re-export the model.")
    if check_files:
        check_file_table(root, manifest["files"])
    return manifest


def check_file_table(root: Path, files: Mapping[str, Any]) -> None:
    """Every listed file exists with the recorded size and SHA-256."""
    problems = []
    for relative, meta in files.items():
        path = safe_member(root, relative, "the file table")
        if not isinstance(meta, dict):
            problems.append(f"{relative}: no size / checksum recorded")
        elif not path.is_file():
            problems.append(f"{relative}: missing")
        elif path.stat().st_size != meta.get("bytes"):
            problems.append(f"{relative}: {path.stat().st_size} bytes, expected {meta.get('bytes')} "
                            "(truncated or replaced)")
        elif sha256_of(path) != meta.get("sha256"):
            problems.append(f"{relative}: SHA-256 differs from the manifest (the file changed after export)")
    if problems:
        raise ExportError(f"artifact {root} is damaged: " + "; ".join(problems)
                          + ". Re-export the model, or restore the directory from a copy.")


# ----------------------------------------------------------------------------------------- preprocessing
def class_spec(obj: Any) -> str:
    """``"module:Class"`` for an object's class."""
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_class(spec: Any, trust: Iterable[str] = ()) -> type:
    """Import ``"module:Class"`` only when the module is ``torchwork`` (or under a trusted prefix).

    The manifest of an artifact is untrusted data: naming ``os:system`` there must not import anything.
    """
    allowed = ("torchwork", *trust)
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ExportError(f"preprocessor class {spec!r} is not of the form 'module:Class'.")
    module_name, class_name = spec.split(":")
    parts = module_name.split(".")
    if not all(_IDENTIFIER.match(p) for p in parts) or not _IDENTIFIER.match(class_name):
        raise ExportError(f"preprocessor class {spec!r} is not a plain 'package.module:Class' name.")
    if not any(module_name == prefix or module_name.startswith(prefix + ".") for prefix in allowed):
        raise ExportError(
            f"the artifact names the preprocessor class {spec!r}, outside the torchwork namespace. An artifact "
            "is untrusted data, so load_artifact imports only torchwork classes. If you wrote that class and "
            f"trust this artifact, pass trust=({parts[0]!r},).")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ExportError(f"cannot import {module_name!r} for the preprocessor {spec!r}: {error}. Install the "
                          "torchwork version the artifact was made with (see manifest 'versions').") from error
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type) or not any(cls.__module__ == p or cls.__module__.startswith(p + ".")
                                            for p in allowed):
        raise ExportError(f"{spec!r} is not a class defined in an allowed namespace {allowed}.")
    if not callable(getattr(cls, "load", None)):
        raise ExportError(f"preprocessor class {spec!r} has no load(directory) classmethod.")
    return cls


def load_preprocess(root: Path, manifest: Mapping[str, Any], trust: Iterable[str] = ()) -> Any:
    """The artifact's preprocessor (``Class.load(root / "preprocess")``), or None when it has none."""
    entry = manifest.get("preprocess")
    if not entry:
        return None
    if not isinstance(entry, dict):
        raise ExportError(f"artifact {root}: the manifest's 'preprocess' entry is damaged.")
    cls = resolve_class(entry.get("class"), trust)
    directory = safe_member(root, entry.get("dir", PREPROCESS_DIR), "the preprocess entry")
    try:
        return cls.load(directory)
    except Exception as error:
        raise ExportError(f"artifact {root}: {entry.get('class')}.load({directory}) failed: "
                          f"{type(error).__name__}: {error}. The preprocess files are damaged or were written "
                          "by another version: re-export the model.") from error


# ----------------------------------------------------------------------------------------- tensors on disk
def save_tensors(path: Path, tensors: Mapping[str, Any]) -> None:
    from safetensors.torch import save_file

    # clone(): safetensors refuses tensors that share memory (tied weights); loading re-ties them anyway.
    save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, str(path))


def load_tensors(path: Path) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise ExportError(f"{path} is not a readable safetensors file ({error}). Re-export the model.") from error


def load_weights(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The eager ``state_dict`` stored in an artifact (safetensors: no pickle involved).

    Example:
        >>> model.load_state_dict(load_weights("artifact"))   # doctest: +SKIP
    """
    root = Path(directory)
    manifest = read_manifest(root)
    return load_tensors(safe_member(root, manifest.get("weights", WEIGHTS), "the weights entry"))


def load_examples(root: Path, manifest: Mapping[str, Any]) -> tuple[Any, ...]:
    tensors = load_tensors(safe_member(root, manifest.get("examples", EXAMPLES), "the examples entry"))
    return tuple(tensors[f"input_{i}"] for i in range(len(manifest["inputs"])))


def save_samples(root: Path, samples: Any, targets: Any) -> dict[str, Any]:
    """Write held-out raw inputs (texts or tensors) and their targets; returns the manifest entry."""
    import torch

    from torchwork.files import write_json

    target_list = None
    if targets is not None:
        target_list = [int(t) for t in (targets.tolist() if hasattr(targets, "tolist") else targets)]
    if isinstance(samples, (list, tuple)) and samples and all(isinstance(s, str) for s in samples):
        if target_list is not None and len(target_list) != len(samples):
            raise ConfigError(f"{len(samples)} samples but {len(target_list)} targets.")
        write_json(root / SAMPLES_JSON, {"texts": list(samples), "targets": target_list})
        return {"file": SAMPLES_JSON, "kind": "texts", "count": len(samples), "targets": target_list is not None}
    tensors = as_input_tuple(samples, "samples")
    count = tensors[0].shape[0] if tensors[0].ndim else 1
    if target_list is not None and len(target_list) != count:
        raise ConfigError(f"{count} samples but {len(target_list)} targets.")
    named = {f"input_{i}": t for i, t in enumerate(tensors)}
    if target_list is not None:
        named["targets"] = torch.tensor(target_list, dtype=torch.long)
    save_tensors(root / SAMPLES_TENSORS, named)
    return {"file": SAMPLES_TENSORS, "kind": "tensors", "inputs": len(tensors), "count": count,
            "targets": target_list is not None}


def load_samples(root: Path, manifest: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """``(raw inputs, targets or None)`` bundled at export, or None when the artifact has none."""
    import torch

    entry = manifest.get("samples")
    if not entry:
        return None
    path = safe_member(root, entry.get("file"), "the samples entry")
    if entry.get("kind") == "texts":
        data = json.loads(path.read_text(encoding="utf-8"))
        targets = data.get("targets")
        return list(data["texts"]), (torch.tensor(targets) if targets is not None else None)
    tensors = load_tensors(path)
    inputs = tuple(tensors[f"input_{i}"] for i in range(int(entry.get("inputs", 1))))
    return (inputs[0] if len(inputs) == 1 else inputs), tensors.get("targets")


# ----------------------------------------------------------------------------------------- pt2 safety
def check_pt2_pickle_free(path: Path) -> None:
    """Refuse a .pt2 archive that would make torch.export.load unpickle something.

    torch.export.load unpickles weights / constants flagged ``use_pickle``, custom / opaque objects, legacy
    archives, and falls back to ``weights_only=False`` for sample inputs. A plain exported model has none of
    these, so an archive that has them is refused instead of loaded.
    """
    import torch
    from torch.export.pt2_archive import constants as pt2

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise ExportError(f"{path} is not a readable .pt2 archive ({error}). Re-export the model.") from error
    with archive:
        names = archive.namelist()
        if not any(n.endswith("/" + pt2.ARCHIVE_FORMAT_PATH) or n == pt2.ARCHIVE_FORMAT_PATH for n in names):
            raise ExportError(f"{path} is not a current-format .pt2 archive (no {pt2.ARCHIVE_FORMAT_PATH}); "
                              "older archives load through pickle, so it is refused. Re-export the model.")
        for name in names:
            inner = name.split("/", 1)[1] if "/" in name else name
            if inner.startswith((pt2.WEIGHTS_DIR, pt2.CONSTANTS_DIR)) and inner.endswith(".pt"):
                raise ExportError(f"{path}: {name} is a pickled (legacy) weights file; refused.")
            if inner.startswith((pt2.WEIGHTS_DIR, pt2.CONSTANTS_DIR)) and inner.endswith("_config.json"):
                config = json.loads(archive.read(name)).get("config", {})
                for fqn, meta in config.items():
                    pickled = meta.get("use_pickle") or not str(meta.get("path_name", "")).startswith(
                        (pt2.WEIGHT_FILENAME_PREFIX, pt2.TENSOR_CONSTANT_FILENAME_PREFIX))
                    if pickled:
                        raise ExportError(f"{path}: {fqn!r} is stored as a pickled object; loading it would run "
                                          "pickle on untrusted data, so the archive is refused.")
            if inner.startswith(pt2.SAMPLE_INPUTS_DIR) and inner.endswith(".pt"):
                try:
                    torch.load(io.BytesIO(archive.read(name)), weights_only=True)
                except Exception as error:
                    raise ExportError(f"{path}: the sample inputs ({name}) need full pickle to load; refused."
                                      ) from error


# ----------------------------------------------------------------------------------------- runners
Runner = Callable[[Sequence[Any]], list[Any]]


def torch_runner(module: Any) -> Runner:
    import torch

    def run(inputs: Sequence[Any]) -> list[Any]:
        with torch.no_grad():
            return flatten_outputs(module(*inputs))

    return run


def onnx_runner(path: Path, threads: int | None = None) -> Runner:
    import numpy as np
    import onnxruntime as ort
    import torch

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(inputs: Sequence[Any]) -> list[Any]:
        if len(inputs) != len(names):
            raise ExportError(f"the ONNX graph takes {len(names)} inputs {names}, got {len(inputs)}.")
        feed = {n: np.ascontiguousarray(t.detach().cpu().numpy()) for n, t in zip(names, inputs)}
        return [torch.from_numpy(np.asarray(o)) for o in session.run(None, feed)]

    return run


def load_pt2(path: Path) -> Any:
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
        try:
            return onnx_runner(path, threads)
        except ExportError:
            raise
        except Exception as error:
            raise ExportError(f"{path}: ONNX Runtime cannot load it ({type(error).__name__}: {error}). The file "
                              "is damaged: re-export the model.") from error
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


def variant_format(name: str) -> str:
    return "onnx" if name.startswith("onnx") else name


def variant_bytes(manifest: Mapping[str, Any], name: str) -> int:
    variant = manifest["variants"][name]
    return sum(int(manifest["files"][f]["bytes"]) for f in [variant["file"], *variant.get("extra_files", [])])


# ----------------------------------------------------------------------------------------- load_artifact
class Predictor:
    """Raw inputs -> outputs through the artifact's preprocessing, model variant and postprocessing.

    ``predictor(raw)`` returns the output tensor (softmax applied when the artifact says so), or a tuple
    when the model has several outputs. ``predictor.classify(raw)`` returns ``[{"label", "score"}]``.
    """

    def __init__(self, directory: Path, manifest: dict[str, Any], variant: str, runner: Runner,
                 preprocess: Any) -> None:
        self.directory, self.manifest, self.variant = directory, manifest, variant
        self.run_model, self.preprocess = runner, preprocess
        post = manifest.get("postprocess") or {}
        self.softmax = bool(post.get("softmax"))
        self.labels: list[str] | None = post.get("labels")

    def __repr__(self) -> str:
        return f"Predictor({str(self.directory)!r}, variant={self.variant!r})"

    def inputs_for(self, raw: Any) -> tuple[Any, ...]:
        """The model inputs for raw inputs: preprocessed, then checked against the manifest schema."""
        if self.preprocess is not None:
            raw = self.preprocess(raw)
        return check_inputs(as_input_tuple(raw, "inputs"), self.manifest["inputs"])

    def __call__(self, raw: Any) -> Any:
        return self.run(self.inputs_for(raw))

    def run(self, inputs: Sequence[Any]) -> Any:
        """Model inputs (already checked, e.g. by :meth:`inputs_for`) -> outputs, postprocessing included."""
        import torch

        outputs = self.run_model(inputs)
        if self.softmax:
            outputs[0] = torch.softmax(outputs[0].float(), dim=-1)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def classify(self, raw: Any) -> list[dict[str, Any]]:
        """Top-1 label (a name when the artifact has labels) and its score for each input row."""
        import torch

        outputs = self(raw)
        scores = outputs[0] if isinstance(outputs, tuple) else outputs
        if not self.softmax:
            scores = torch.softmax(scores.float(), dim=-1)
        best, index = scores.max(dim=-1)
        return [{"label": self.labels[i] if self.labels else i, "score": round(float(s), 6)}
                for s, i in zip(best.tolist(), index.tolist())]


def check_inputs(inputs: tuple[Any, ...], schema: Sequence[Mapping[str, Any]],
                 any_batch: bool = False) -> tuple[Any, ...]:
    """Check count, dtype and static dims against the manifest; convert within float / within int kinds.

    ``any_batch``: accept any size along dim 0 (data sets, which are fed in the model's batch size later).
    """
    import torch

    if len(inputs) != len(schema):
        names = [s["name"] for s in schema]
        raise ConfigError(f"the model takes {len(schema)} input(s) {names}, got {len(inputs)}.")
    checked = []
    for tensor, spec in zip(inputs, schema):
        want = getattr(torch, spec["dtype"])
        if tensor.dtype != want:
            if tensor.dtype.is_floating_point == want.is_floating_point and tensor.dtype != torch.bool:
                tensor = tensor.to(want)
            else:
                raise ConfigError(f"input {spec['name']!r} must be {spec['dtype']}, got {dtype_name(tensor.dtype)}.")
        shape = spec["shape"]
        bad = len(shape) != tensor.ndim or any(isinstance(d, int) and d != s and not (any_batch and axis == 0)
                                               for axis, (d, s) in enumerate(zip(shape, tensor.shape)))
        if bad:
            raise ConfigError(f"input {spec['name']!r} must have shape {shape} (names are dynamic dims), got "
                              f"{list(tensor.shape)}.")
        checked.append(tensor)
    return tuple(checked)


def load_artifact(directory: str | os.PathLike[str], variant: str | None = None, *, threads: int | None = None,
                  trust: Iterable[str] = ()) -> Predictor:
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
    available = list(manifest["variants"])  # refused formats never enter the artifact
    if variant is None:
        marked = manifest.get("deploy")
        ordered = [marked] if marked in available else [n for n in PREFERENCE if n in available]
        if not ordered:
            raise ExportError(f"artifact {root} holds no variant that passed its export checks "
                              f"(refused: {manifest.get('refused')}).")
        variant = ordered[0]
    elif variant not in available:
        refused = (manifest.get("refused") or {}).get(variant)
        raise ConfigError(f"artifact {root} has no {variant!r} variant"
                          + (f" (refused at export: {refused})" if refused else "") + f"; it has {available}.")
    path = safe_member(root, manifest["variants"][variant]["file"], f"variant {variant!r}")
    runner = open_runner(path, variant_format(variant), threads)
    return Predictor(root, manifest, variant, runner, load_preprocess(root, manifest, trust))
