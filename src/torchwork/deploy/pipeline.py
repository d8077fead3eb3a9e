"""Export a model to an artifact directory that cannot silently disagree with it.

Every format is exported in eval mode (the model's own modes are restored afterwards), then loaded back
from disk and run against eager at several batch sizes (1 and many) and, for token ids, several lengths.
A format whose outputs or accepted shapes differ is refused with the reason: by default ``export`` raises
:class:`~torchwork.errors.ExportError` and writes nothing; with ``strict=False`` it writes the artifact
without that format and the report says ``"ok": false``. The directory is built beside ``out_dir`` and
renamed into place, so an export that fails at any point leaves nothing half-written.

Example:
    >>> import tempfile, torch
    >>> from torchwork.deploy import export
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    >>> report = export(model, torch.randn(2, 4), tempfile.mkdtemp() + "/a", formats=("pt2",))
    >>> report["ok"], report["variants"]
    (True, ['pt2'])
"""

from __future__ import annotations

import copy
import dataclasses
import os
import platform
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchwork.arguments import check_flag
from torchwork.deploy import progress
from torchwork.deploy.contents import save_samples
from torchwork.deploy.formats import (
    TORCHSCRIPT_DEPRECATED,
    input_names_of,
)
from torchwork.deploy.manifest import (
    EXAMPLE_OUTPUTS,
    EXAMPLES,
    FORMAT_VERSION,
    MANIFEST,
    PARITY,
    PREPROCESS_DIR,
    VERIFY,
    WEIGHTS,
    Manifest,
    Postprocess,
    PreprocessEntry,
    TensorSpec,
    Variant,
    variant_format,
)
from torchwork.deploy.outputs import check_outputs, select_output
from torchwork.deploy.parity import make_probes
from torchwork.deploy.parity_inputs import length_ordered
from torchwork.deploy.plan import ExportPlan, parse_formats  # noqa: F401 (parse_formats: its old import path)
from torchwork.deploy.runtime import open_runner
from torchwork.deploy.tensors import as_input_tuple, check_inputs, dtype_name, flatten_outputs, save_tensors
from torchwork.deploy.trust import CODE_TRUST, class_spec, file_table, resolve_class
from torchwork.deploy.variants import Checked, export_variants, remove_variant
from torchwork.errors import ConfigError, ExportError
from torchwork.files import current_umask, fsync_dir, write_json

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from torchwork.deploy.plan import ExportKeywords

PROBE_POOL = 512  # held-out rows used to build probes


def dynamic_spec(args: Sequence[Any], dynamic_batch: bool, dynamic_length: bool | None) -> list[dict[int, str]]:
    """Dynamic dims per input: dim 0 is the batch; dim 1 of integer 2-D+ inputs (token ids) the length."""
    import torch

    spec = []
    for tensor in args:
        entry: dict[int, str] = {}
        if dynamic_batch and tensor.ndim >= 1:
            entry[0] = "batch"
        is_ids = tensor.ndim >= 2 and not (tensor.dtype.is_floating_point or tensor.dtype.is_complex
                                           or tensor.dtype == torch.bool)
        if (dynamic_length is None and is_ids) or (dynamic_length and tensor.ndim >= 2):
            entry[1] = "length"
        spec.append(entry)
    if dynamic_length and not any(1 in e for e in spec):
        raise ConfigError("dynamic_length=True (or max_length=), but no input has a dim 1 (a (batch, length) "
                          "tensor of token ids).")
    return spec


def widen(args: tuple[Any, ...], dynamic: Sequence[dict[int, str]]) -> tuple[Any, ...]:
    """Batch and length of at least 2: torch.export specializes dims whose example size is 0 or 1."""
    import torch

    if any(e.get(0) == "batch" for e in dynamic) and args[0].shape[0] < 2:
        args = tuple(torch.cat([t, t]) if 0 in e else t for t, e in zip(args, dynamic))
    for index, entry in enumerate(dynamic):
        if entry.get(1) == "length" and args[index].shape[1] < 2:
            tensor = args[index]
            pad = tensor.new_zeros((tensor.shape[0], 2 - tensor.shape[1], *tensor.shape[2:]))
            args = (*args[:index], torch.cat([tensor, pad], dim=1), *args[index + 1:])
    return args


def _schema(names: Sequence[str], tensors: Sequence[Any], dims: Sequence[dict[int, str]],
            bounds: Mapping[str, tuple[int, int]]) -> list[TensorSpec]:
    specs = []
    for name, tensor, entry in zip(names, tensors, dims):
        bounded = {dim: list(bounds[dim]) for dim in entry.values() if dim in bounds}
        specs.append(TensorSpec(name, dtype_name(tensor.dtype), [entry.get(i, s) for i, s in enumerate(tensor.shape)],
                                bounded or None))
    return specs


def _check_example_length(args: Sequence[Any], dynamic: Sequence[dict[int, str]], max_length: int | None) -> None:
    if max_length is None:
        return
    longer = [t.shape[1] for t, e in zip(args, dynamic) if e.get(1) == "length" and t.shape[1] > max_length]
    if longer:
        raise ConfigError(f"the example inputs are {longer[0]} long along dim 1 (the length), over max_length="
                          f"{max_length}: pass shorter example inputs, or the bound the model really has.")


def _output_dims(probes: Sequence[Any], outputs: Sequence[Any]) -> list[dict[int, str]]:
    """Name the output dims that follow the probes' batch size or length."""
    runs = [(p, o) for p, o in zip(probes, outputs) if not isinstance(o, BaseException)]
    if not runs:
        return []
    dims: list[dict[int, str]] = []
    for index, first in enumerate(runs[0][1]):
        entry = {}
        for axis in range(first.ndim):
            sizes = [o[index].shape[axis] for _, o in runs]
            if len(set(sizes)) > 1:
                batch = [p.inputs[0].shape[0] for p, _ in runs]
                entry[axis] = "batch" if sizes == batch else "length" if all(
                    any(t.ndim > 1 and t.shape[1] == s for t in p.inputs) for (p, _), s in zip(runs, sizes)) \
                    else f"dim{axis}"
        dims.append(entry)
    return dims


def _versions() -> dict[str, str]:
    import importlib.metadata as metadata

    import torch

    from torchwork import __version__

    versions = {"torchwork": __version__, "torch": torch.__version__, "python": platform.python_version()}
    for package in ("onnx", "onnxruntime", "onnxscript", "numpy", "safetensors"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return versions


def _environment() -> dict[str, Any]:
    from torchwork.env.report import compact_snapshot

    return compact_snapshot()


def _record_example_outputs(tmp: Path, module: Any, args: tuple[Any, ...], variants: dict[str, Variant],
                            threads: int | None, atol: float, rtol: float) -> dict[str, Any]:
    """What eager and every variant return for the example inputs here, for ``torchwork env check --artifact``."""
    import torch

    with torch.no_grad():
        recorded = {f"eager.output_{i}": t for i, t in enumerate(flatten_outputs(module(*args)))}
    for name, variant in variants.items():
        outputs = open_runner(tmp / variant.file, variant_format(name), threads, trusted=True)(args)
        recorded.update({f"{name}.output_{i}": t for i, t in enumerate(outputs)})
    save_tensors(tmp / EXAMPLE_OUTPUTS, recorded)
    return {"file": EXAMPLE_OUTPUTS, "inputs": EXAMPLES, "variants": ["eager", *variants], "atol": atol,
            "rtol": rtol}


def _prepare_out_dir(out_dir: str | os.PathLike[str], overwrite: bool) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} exists and is not a directory; choose another output path.")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(f"{out} already exists and is not empty. Choose a new directory, or pass "
                              "overwrite=True (--overwrite) to replace it (only after the new export succeeds).")
        _check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def _check_replaceable(out: Path) -> None:
    """``--overwrite`` replaces a torchwork artifact and nothing else: a valid artifact manifest (a web app's
    own manifest.json passed the mere file check, and the folder was deleted, its code with it) whose file
    table lists every file there; never the working directory or a folder above it."""
    from torchwork.deploy.manifest import read_manifest

    if out.resolve() in (Path.cwd(), *Path.cwd().parents):
        raise ConfigError(f"{out} is the working directory or holds it; refusing to replace it. Give the "
                          "artifact's own folder (-o artifacts/NAME).")
    if not (out / MANIFEST).is_file():
        raise ConfigError(f"{out} is not a torchwork artifact (no {MANIFEST}); refusing to replace it.")
    try:
        listed = set(read_manifest(out, check_files=False).files)  # a damaged artifact may be replaced
    except (ExportError, ConfigError) as error:
        raise ConfigError(f"{out} is not a torchwork artifact (its {MANIFEST}: {str(error).splitlines()[0]}); "
                          "refusing to replace it.") from None
    extra = sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                   if p.name != MANIFEST and not p.is_dir() and p.relative_to(out).as_posix() not in listed)
    if extra:
        raise ConfigError(f"{out} holds {len(extra)} file(s) its artifact does not list ({', '.join(extra[:3])}"
                          f"{', ...' if len(extra) > 3 else ''}); refusing to replace them. Move them out, or "
                          "export into another folder.")


def remove_abandoned(out: Path) -> list[Path]:
    """Remove what an export into ``out`` that was killed (SIGKILL, a power cut) left beside it: its temp
    folder (``.NAME.export-PID-...``) or the artifact it was replacing (``.NAME.old-PID-...``), once process
    PID is gone; the removed paths. A running export's folders (its process alive) are left alone.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / ".model.export-999999999-x1").mkdir(); (root / ".model.export-1-x2").mkdir()
        >>> [p.name for p in remove_abandoned(root / "model")], sorted(p.name for p in root.iterdir())
        (['.model.export-999999999-x1'], ['.model.export-1-x2'])
    """
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(export|old)-(\d+)-")
    removed = []
    for entry in (out.parent.iterdir() if out.parent.is_dir() else ()):
        found = pattern.match(entry.name)
        if found is None or not entry.is_dir() or entry.is_symlink() or _alive(int(found.group(2))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts: it may be exporting)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0
    return True


def _commit(tmp: Path, out: Path) -> None:
    """fsync every file, then rename the finished directory into place (replacing an old artifact)."""
    umask = current_umask()
    for path in tmp.rglob("*"):
        if path.is_file():
            path.chmod(0o666 & ~umask)  # mkstemp / mkdtemp create private files; an artifact is for sharing
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        else:
            path.chmod(0o777 & ~umask)
    tmp.chmod(0o777 & ~umask)
    for directory in [*[p for p in tmp.rglob("*") if p.is_dir()], tmp]:
        fsync_dir(directory)
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}-{time.time_ns()}"
        os.replace(out, old)
    os.replace(tmp, out)
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _save_preprocess(preprocess: Any, tmp: Path, samples: Any) -> PreprocessEntry:
    """Save the preprocessor, reload it the way load_artifact will, and check that both agree."""
    import torch

    save = getattr(preprocess, "save", None)
    if not callable(save) or not callable(getattr(type(preprocess), "load", None)):
        raise ConfigError(f"preprocess must have save(directory) and a classmethod load(directory); "
                          f"{type(preprocess).__name__} does not.")
    spec = class_spec(preprocess)
    module = spec.split(":")[0]
    if "<locals>" in spec or module == "__main__":
        raise ConfigError(f"preprocess class {spec} cannot be imported by name; define it in a module.")
    directory = tmp / PREPROCESS_DIR
    directory.mkdir()
    save(directory)
    reloaded = resolve_class(spec, trust=(module.split(".")[0],)).load(directory)
    if samples is not None:
        subset = samples[:64] if isinstance(samples, (list, tuple)) else samples
        first = as_input_tuple(preprocess(subset), "preprocess(samples)")
        second = as_input_tuple(reloaded(subset), "preprocess(samples)")
        if len(first) != len(second) or not all(torch.equal(a, b) for a, b in zip(first, second)):
            raise ExportError(f"the preprocessor {spec} does not round-trip: after save() and load() it turns the "
                              "same samples into different tensors, so the artifact would disagree with training. "
                              "Make save() write every setting that __call__ uses.")
    outside = not (module == "torchwork" or module.startswith("torchwork."))
    return PreprocessEntry(spec, PREPROCESS_DIR, trust_needed=module.split(".")[0] if outside else None)


def export(model: Any, example_inputs: Any, out_dir: str | os.PathLike[str], plan: ExportPlan | None = None, *,
           overwrite: bool = False, **keywords: Unpack[ExportKeywords]) -> dict[str, Any]:
    """Export ``model`` to the artifact directory ``out_dir`` and check every format against eager.

    Args:
        model: the eager ``nn.Module`` (any mode; exported in eval mode, its modes restored afterwards).
        example_inputs: a tensor or a tuple of tensors, the arguments of ``forward``.
        out_dir: the artifact directory to create.
        plan: an :class:`~torchwork.deploy.plan.ExportPlan` holding every setting below, checked when it is
            built; or give the settings as flat keywords (``formats=("onnx",), quantize="int8"``, typed by
            :class:`~torchwork.deploy.plan.ExportKeywords`), not both.
        overwrite: replace an existing artifact at ``out_dir`` (after the new one is complete).
        formats: any of ``"pt2"``, ``"onnx"``, ``"torchscript"`` (legacy, deprecated), ``"pt2-aoti"``
            (AOTInductor: compiled ahead of time to a native library, see :mod:`torchwork.deploy.aoti`).
        dynamic_batch: dim 0 of every input is dynamic.
        preprocess: an object with ``save(directory)`` whose class has ``load(directory)`` and turns raw
            inputs into the model's inputs (e.g. texts -> (ids, lengths)); bundled in the artifact.
        dynamic_length: dim 1 is dynamic (default: for integer inputs of 2+ dims, i.e. token ids).
        max_length: dim 1 (the length) is dynamic from 1 up to this bound only (a GPT's ``block_size``):
            exported as ``Dim("length", min=1, max=max_length)``, checked at length 1, the example's and the
            bound, recorded in the manifest (``bounds``); longer inputs are refused when the artifact runs.
        output: the one output to export when ``forward`` returns several that are not all tensors (a
            language model's ``(logits, loss)``, a dict): its index (``output=0``) or key (``"logits"``).
        labels, softmax: postprocessing (class names; apply softmax to the first output).
        samples, targets: real held-out raw inputs and labels. They are bundled for ``verify``, give the
            probes real rows, and make ``export`` run ``verify`` and mark the variant to deploy.
        sample_outputs: the eager model's outputs on ``samples`` when already computed (e.g. the test split's
            evaluation), so that ``verify`` does not run eager over them again (see ``verify``'s
            ``reference_outputs``).
        quantize: ``"int8"`` adds ONNX Runtime dynamic INT8 of the ONNX variant (``quantize_ops``;
            ``quantize_per_channel``: a weight scale per output channel; ``quantize_smoothing``: SmoothQuant's
            alpha, see :mod:`torchwork.deploy.smoothing`, with scales from ``calibration``;
            ``quantize_attention_mask``: a transformer's 2-D padding-mask input, whose attention is then fused
            for ONNX Runtime and quantized whole, see :mod:`torchwork.deploy.fusion`;
            ``quantize_fallback_agreement``: a classifier's INT8 answers the rows it is unsure of with the
            float ONNX variant, the margin chosen so that this share of the ``calibration`` rows get float's
            answer, see :mod:`torchwork.deploy.fallback`; ``quantize_fallback_margin``: that margin instead of
            choosing one, e.g. the one a resumed run chose before; ``quantize_activations``: ``"static"``
            fixes the activation scales from ``calibration`` so that a row's answer does not depend on the
            rows batched with it, see :mod:`torchwork.deploy.static_scales`; ``"dynamic"``: ONNX Runtime's,
            per batch; ``quantize_reduce_range``: 7-bit weights (default), see :mod:`torchwork.deploy.quantize`).
        calibration: real raw inputs (through ``preprocess``) whose activations set the smoothing scales:
            training or validation rows, never the held-out ``samples`` that verify the result.
        torchscript_method: ``"trace"`` or ``"script"``.
        cpp: add the C++ runner's sources (``cpp/``, a CMake project) to the artifact; needs ``"pt2-aoti"``
            or ``"torchscript"`` in ``formats`` (see :mod:`torchwork.deploy.cpp_runner`).
        strict: raise when any format is refused (default); False writes the rest and reports ``ok: false``.
        atol, rtol: parity tolerance; batch_sizes, lengths: the probes; tolerance: accuracy a quantized
            variant may lose; verify_rounds, threads: timing of the export-time verification.
        deploy: the variant to deploy when it passes verification, instead of the one timing picks (a
            resumed run keeps the choice it made); otherwise the usual choice.

    Returns the export report (also in the artifact: parity.json, verify.json).
    """
    from torch import nn

    if not isinstance(model, nn.Module):
        raise ConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    plan = ExportPlan.of(plan, keywords)  # every setting checked before any work starts
    if "torchscript" in plan.formats:
        warnings.warn(TORCHSCRIPT_DEPRECATED, FutureWarning, stacklevel=2)
    args = as_input_tuple(example_inputs)
    out = _prepare_out_dir(out_dir, check_flag(overwrite, "overwrite"))  # "no" replaced the artifact

    on_cpu = all(t.device.type == "cpu" for t in [*model.parameters(), *model.buffers()])
    module = model if on_cpu else copy.deepcopy(model).cpu()
    modes = [m.training for m in module.modules()]
    module.eval()
    runs, choice = module, plan.output
    if choice is not None:  # what is exported and checked: the model (its shallow copy) keeping that output
        names = list(plan.input_names or input_names_of(module, len(args)))
        plan = dataclasses.replace(plan, input_names=names)
        runs = select_output(module, choice, names)
    remove_abandoned(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-{os.getpid()}-", dir=out.parent))
    try:
        with progress.showing_progress("export"):
            report = _export_into(tmp, out, runs, args, plan)
        _commit(tmp, out)
        return report
    finally:
        for submodule, mode in zip(module.modules(), modes):
            submodule.training = mode
        shutil.rmtree(tmp, ignore_errors=True)


def _export_into(tmp: Path, out: Path, module: Any, args: tuple[Any, ...], plan: ExportPlan) -> dict[str, Any]:
    import torch

    dynamic = dynamic_spec(args, plan.dynamic_batch, True if plan.max_length else plan.dynamic_length)
    args = widen(args, dynamic)
    _check_example_length(args, dynamic, plan.max_length)
    with torch.no_grad():
        raw_outputs = module(*args)
    check_outputs(raw_outputs)
    example_outputs = flatten_outputs(raw_outputs)
    names, out_names = _checked_names(module, args, example_outputs, plan)
    input_schema = _schema(names, args, dynamic, plan.dim_bounds)
    preprocess_entry = _save_preprocess(plan.preprocess, tmp, plan.samples) if plan.preprocess is not None else None
    probes, eager_outputs = _probes_and_eager(module, args, dynamic, plan, input_schema)
    # checked here, before any format is exported: rows that do not fit fail the export at once
    calibration = (_calibration_feeds(plan, names, input_schema) if plan.quantize and (
        plan.quantize_smoothing or plan.quantize_fallback_agreement or plan.quantize_activations == "static")
        else [])
    checked = export_variants(tmp, module, args, plan, names, out_names, dynamic, probes, eager_outputs, calibration)
    variants, refused = checked.variants, checked.refused
    labels = plan.labels
    manifest = Manifest(
        format_version=FORMAT_VERSION, inputs=input_schema,
        outputs=_schema(out_names, example_outputs, _output_dims(probes, eager_outputs) or [{}] * len(out_names),
                        plan.dim_bounds),
        variants=variants, files={}, created_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        versions=_versions(), environment=_environment(),
        model={"class": f"{type(module).__module__}.{type(module).__qualname__}",
               "parameters": sum(p.numel() for p in module.parameters()),
               **({"output": plan.output} if plan.output is not None else {})},
        refused=refused, preprocess=preprocess_entry,
        postprocess=Postprocess(bool(plan.softmax), list(labels) if labels is not None else None),
        advice=list(dict.fromkeys(checked.advice)), reports={"parity": PARITY})
    save_tensors(tmp / WEIGHTS, {k: v for k, v in module.state_dict().items() if isinstance(v, torch.Tensor)})
    save_tensors(tmp / EXAMPLES, {f"input_{i}": t for i, t in enumerate(args)})
    if plan.samples is not None:
        manifest.samples = save_samples(tmp, plan.samples, plan.targets)
    write_json(tmp / PARITY, checked.parity)
    if plan.cpp:
        from torchwork.deploy.cpp_runner import add_cpp_folder

        add_cpp_folder(tmp)
    verification = None
    if variants and plan.samples is not None:
        verification = _verify_in_place(tmp, out, module, plan, manifest, variants, refused)
    _refuse_or_warn(out, checked, plan.strict)
    manifest.example_outputs = _record_example_outputs(tmp, module, args, variants, plan.threads, plan.atol,
                                                       plan.rtol)
    _write_manifest(tmp, manifest)
    return {"ok": not refused, "artifact": str(out), "variants": list(variants), "refused": refused,
            "deploy": manifest.deploy, "advice": manifest.advice, "parity": checked.parity,
            "verify": verification}


def _checked_names(module: Any, args: tuple[Any, ...], example_outputs: Sequence[Any],
                   plan: ExportPlan) -> tuple[list[str], list[str]]:
    """The input and output names, checked against the model's inputs and outputs (and its labels)."""
    names = list(plan.input_names or input_names_of(module, len(args)))
    one = [plan.output] if isinstance(plan.output, str) else ["output"]  # a chosen key names its output
    out_names = list(plan.output_names or (one if len(example_outputs) == 1
                                           else [f"output_{i}" for i in range(len(example_outputs))]))
    if len(names) != len(args) or len(out_names) != len(example_outputs):
        raise ConfigError(f"{len(names)} input names for {len(args)} inputs, {len(out_names)} output names for "
                          f"{len(example_outputs)} outputs.")
    if plan.quantize_attention_mask is not None and plan.quantize_attention_mask not in names:
        raise ConfigError(f"quantize_attention_mask={plan.quantize_attention_mask!r} is not one of the model's "
                          f"inputs {names}: name the 2-D padding-mask input (see input_names).")
    labels = plan.labels
    if labels is not None and (example_outputs[0].ndim != 2 or example_outputs[0].shape[1] != len(labels)):
        raise ConfigError(f"{len(labels)} labels, but the first output has shape {list(example_outputs[0].shape)} "
                          "(expected (batch, number of labels)).")
    return names, out_names


def _probes_and_eager(module: Any, args: tuple[Any, ...], dynamic: Sequence[dict[int, str]], plan: ExportPlan,
                      input_schema: Any) -> tuple[list[Any], list[Any]]:
    """The probes (real rows when held-out samples are given, else the example inputs) at several batch sizes
    and lengths, and what eager returns for each (or the error it raised)."""
    import torch

    pool = args
    if plan.samples is not None:
        pool = _model_inputs(plan.samples[:PROBE_POOL], plan.preprocess, input_schema, "samples")
    base_length = next((pool[i].shape[1] for i, e in enumerate(dynamic) if 1 in e), None)
    lengths = plan.lengths
    if lengths is None and base_length is not None:  # up to a bound: the shortest, the example's, the bound
        lengths = ((1, base_length, plan.max_length) if plan.max_length else
                   (max(1, base_length // 2), base_length, 2 * base_length + 1))
    sizes = list(plan.batch_sizes) if plan.dynamic_batch else [int(args[0].shape[0])]
    probes = make_probes(pool, dynamic, sizes, lengths or ())
    eager_outputs: list[Any] = []
    for probe in probes:
        try:
            with torch.no_grad():
                eager_outputs.append(flatten_outputs(module(*probe.inputs)))
        except Exception as error:
            eager_outputs.append(error)
    return probes, eager_outputs


def _verify_in_place(tmp: Path, out: Path, module: Any, plan: ExportPlan, manifest: Manifest,
                     variants: dict[str, Variant], refused: dict[str, str]) -> dict[str, Any]:
    """verify() on the artifact being built: a variant that fails on the held-out samples is removed and
    refused; the manifest names the variant to deploy."""
    _write_manifest(tmp, manifest)
    from torchwork.deploy.verification import verify

    trust = tuple(CODE_TRUST.values())  # its own freshly written files: native library, TorchScript
    if manifest.preprocess and manifest.preprocess.trust_needed:
        trust += (manifest.preprocess.trust_needed,)
    verification = verify(tmp, model=module, threads=plan.threads, rounds=plan.verify_rounds, atol=plan.atol,
                          rtol=plan.rtol, tolerance=plan.tolerance, trust=trust,
                          reference_outputs=plan.sample_outputs)
    verification["artifact"] = str(out)
    broken = [row["problem"] for row in verification["variants"].values() if row.get("non_finite_rows")]
    for name, row in verification["variants"].items():
        if name in variants and (broken or not row["ok"]):  # a diverged model: every variant matches its NaN
            refused[name] = f"failed verification on the held-out samples: {(broken or [row.get('problem')])[0]}"
            del variants[name]
            remove_variant(tmp, name)
    manifest.deploy = verification["deploy"] if verification["deploy"] in variants else None
    if plan.deploy in variants:
        manifest.deploy = verification["deploy"] = plan.deploy
    write_json(tmp / VERIFY, verification)
    manifest.reports["verify"] = VERIFY
    return verification


def _refuse_or_warn(out: Path, checked: Checked, strict: bool) -> None:
    """Raise when no variant is left (or, strict, when any was refused); warn of the refused ones otherwise."""
    variants, refused = checked.variants, checked.refused
    if not variants or (strict and refused):
        reasons = "\n".join(f"  - {name}: {reason}" for name, reason in refused.items())
        hint = "" if not variants else "\nPass strict=False (--allow-failed) to write the artifact without them."
        refusal = ExportError(f"refused to write {out}: no silently wrong artifact.\n{reasons}{hint}")
        refusal.report = {"ok": False, "refused": refused, "parity": checked.parity}
        raise refusal
    if refused:
        warnings.warn(f"artifact {out} written without {sorted(refused)}: " + "; ".join(
            f"{k}: {v}" for k, v in refused.items()), stacklevel=4)


def _write_manifest(tmp: Path, manifest: Manifest) -> None:
    """The file table of everything written so far, then the manifest (validated as a reader will)."""
    manifest.files = file_table(tmp)
    data = manifest.to_json()
    Manifest.from_json(data)  # what is written reads back: a field added here must be added to Manifest too
    write_json(tmp / MANIFEST, data)


CALIBRATION_BATCH = 64


def _model_inputs(raw: Any, preprocess: Any, input_schema: Any, what: str) -> tuple[Any, ...]:
    """Raw rows (through ``preprocess``, when there is one) as the model's checked input tensors."""
    inputs = preprocess(raw) if preprocess is not None else raw
    try:
        return check_inputs(as_input_tuple(inputs, what), input_schema, any_batch=True)
    except ConfigError as error:
        raise ConfigError(f"{what}{' through preprocess' if preprocess is not None else ''} do not fit the "
                          f"example inputs: {error}") from error


def _calibration_feeds(plan: ExportPlan, names: Sequence[str], input_schema: Any) -> list[dict[str, Any]]:
    """The calibration rows as ONNX feeds, in batches of :data:`CALIBRATION_BATCH`, each padded on its own;
    rows of varied sizes (texts) are batched shortest first, so that a batch is padded to its own longest
    row (what the rows measure does not depend on their order)."""
    raw = plan.calibration
    ordered = (length_ordered(raw, plan.preprocess, input_schema, CALIBRATION_BATCH)
               if plan.preprocess is not None else None)
    batches = ordered.chunks if ordered is not None else (
        _model_inputs(raw[start:start + CALIBRATION_BATCH], plan.preprocess, input_schema, "calibration")
        for start in range(0, len(raw), CALIBRATION_BATCH))
    return [{name: tensor.numpy() for name, tensor in zip(names, batch)} for batch in batches]
