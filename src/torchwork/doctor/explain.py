"""Explain a PyTorch error: paste a traceback or a message, get the cause and the fix.

Each error *family* has a stable id, the regexes that recognise its messages (every variant we know,
taken from PyTorch's source and from public issue reports), the usual cause, the fix, and, where one
exists, the id of the doctor check that catches the same mistake before it becomes an exception.

Example:
    >>> from torchwork.doctor.explain import explain_text
    >>> [e.family for e in explain_text("RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x784 and 512x10)")]
    ['matmul-shape']
    >>> print(explain_text("mat1 and mat2 shapes cannot be multiplied (64x784 and 512x10)")[0].detail)
    The layer expects 512 input features but received 784 (batch of 64). Set in_features=784 in that layer, or fix the reshape/flatten before it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Detail = Callable[["re.Match[str]"], str | None]


@dataclasses.dataclass(frozen=True)
class Family:
    """One family of PyTorch error messages.

    A pattern is a regex, or ``(regex, context)``: then it counts only when ``context`` also matches the
    text or its traceback (the frames say whether ``expected scalar type Long`` came from a loss's target).
    ``variants`` are ``(context, cause, fix)``: the first whose context matches replaces the default cause
    and fix (the same warning means another thing under a GradScaler).
    """

    id: str
    title: str
    patterns: tuple[str | tuple[str, str], ...]
    cause: str
    fix: str
    check: str | None = None  # the doctor check that reports the same mistake
    detail: Detail | None = None  # a sentence built from the message itself (shapes, devices, keys)
    variants: tuple[tuple[str, str, str], ...] = ()
    # (cause, fix) read from the message itself, replacing the family's (the entry a checkpoint wraps)
    case: Callable[[re.Match[str]], tuple[str, str] | None] | None = None

    def compiled(self) -> tuple[tuple[re.Pattern[str], re.Pattern[str] | None], ...]:
        return _compiled(self)


@dataclasses.dataclass
class Explanation:
    """A family recognised in a text: where (the matching line), why, and what to do."""

    family: str
    title: str
    check: str | None
    matched: str
    cause: str
    fix: str
    detail: str | None = None
    location: str | None = None  # the last frame of the user's code in a pasted traceback
    read: tuple[str, ...] = ()  # the words of the text the explanation rests on (message, then frames)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def format(self) -> str:
        lines = [f"[{self.family}] {self.title}", f"  matched: {self.matched}"]
        if self.read:
            lines.append("  read:    " + " + ".join(repr(words) for words in self.read))
        if self.location:
            lines.append(f"  at:      {self.location} (your code's last line in the traceback)")
        if self.detail:
            lines.append(f"  here:    {self.detail}")
        lines.append(f"  cause:   {self.cause}")
        lines.append(f"  fix:     {self.fix}")
        if self.check:
            lines.append(f"  `torchwork doctor SCRIPT` reports this as [{self.check}] with your file:line.")
        return "\n".join(lines)


_COMPILED: dict[str, tuple[tuple[re.Pattern[str], re.Pattern[str] | None], ...]] = {}
_FLAGS = re.IGNORECASE | re.MULTILINE


def _compiled(family: Family) -> tuple[tuple[re.Pattern[str], re.Pattern[str] | None], ...]:
    patterns = _COMPILED.get(family.id)
    if patterns is None:
        patterns = _COMPILED[family.id] = tuple(
            (re.compile(p, _FLAGS), None) if isinstance(p, str) else (re.compile(p[0], _FLAGS), re.compile(p[1], _FLAGS))
            for p in family.patterns)
    return patterns


# ------------------------------------------------------------------------------------------ details
def _matmul_detail(m: re.Match[str]) -> str | None:
    if m.re.groups < 4:
        return None
    rows, got, expected = (int(m.group(i)) for i in (1, 2, 3))
    if got == expected:
        return None
    return (f"The layer expects {expected} input features but received {got} (batch of {rows}). Set "
            f"in_features={got} in that layer, or fix the reshape/flatten before it.")


def _channels_detail(m: re.Match[str]) -> str | None:
    shape = [int(v) for v in re.findall(r"\d+", m.group("shape") or "")]
    want = int(m.group("want"))
    if len(shape) >= 3 and want in shape[2:]:
        where = shape.index(want, 2)
        order = ", ".join(str(d) for d in [0, where] + [d for d in range(1, len(shape)) if d != where])
        return (f"The input {shape} has {want} (the channels the layer wants) at dimension {where}, not 1: the "
                f"channels are not where the convolution reads them. Move them to dimension 1 before the layer: "
                f"x.permute({order}) (for NHWC images x.permute(0, 3, 1, 2)).")
    return (f"The convolution was built for {m.group('want')} input channels and received "
            f"{m.group('got')}. Set in_channels={m.group('got')}, or convert the images (e.g. grayscale "
            "vs RGB, or channels-last data that needs .permute(0, 3, 1, 2)).")


def _device_detail(m: re.Match[str]) -> str | None:
    groups = {k: v for k, v in m.groupdict().items() if v}
    for first, second in (("a", "b"), ("c", "d")):
        if first in groups and second in groups:
            return f"Two devices met in one operation: {groups[first]} and {groups[second]}."
    return None


_POSITION_KEY = re.compile(r"pos(?:ition)?(?:al)?_?(?:embed|emb|encoding)|position_ids|\bwpe\b|"
                           r"relative_position|absolute_pos", re.IGNORECASE)


def _size_mismatch_detail(m: re.Match[str]) -> str | None:
    if _POSITION_KEY.search(m.group("key")):
        return (f"`{m.group('key')}` is a position embedding: [{m.group('saved')}] in the checkpoint, "
                f"[{m.group('model')}] in the model, so the model was built for another input size (image "
                "size or patch grid, or sequence length). Build the model at the checkpoint's size, or resize "
                "the embedding before loading: interpolate the position grid to the new size (bicubic over the "
                "2-D grid for images, keeping class/extra tokens as they are), then load.")
    return (f"`{m.group('key')}` is [{m.group('saved')}] in the checkpoint but [{m.group('model')}] in the "
            "model: the checkpoint was trained with another size (often another number of classes).")


_KEY_LIST = r'{} key\(s\) in state_dict:\s*((?:"[^"]*"[,.\s]*)+)'


def _keys(text: str, which: str) -> list[str]:
    found = re.search(_KEY_LIST.format(which), text)
    return re.findall(r'"([^"]*)"', found.group(1)) if found else []


def _prefix_detail(m: re.Match[str]) -> str | None:
    """Match the missing keys against the unexpected ones: which wrapper prefix, or none at all."""
    from torchwork.prefixes import describe_prefix, match_prefixes

    text = re.sub(r"\s*\n\s*", "", m.string)  # keys wrapped across lines as pasted
    missing, unexpected = _keys(text, "Missing"), _keys(text, "Unexpected")
    wrapped = _wrapped_checkpoint(unexpected)
    if wrapped is not None:
        entries, load = wrapped
        return (f"The unexpected keys ({', '.join(repr(k) for k in entries[:5])}) are the entries of a training "
                f"checkpoint (epoch, optimizer state...), not parameter names: the file holds more than the "
                f"weights. Load that entry: checkpoint = torch.load(path, weights_only=True); {load}.")
    if not missing or not unexpected:
        return None
    ckpt_prefix, model_prefix, count = match_prefixes(missing, unexpected)
    if count and ckpt_prefix and not model_prefix:
        return (f"The checkpoint's keys start with '{ckpt_prefix}' (saved from {describe_prefix(ckpt_prefix)}); "
                f"without it they match the model. Strip it: {{k.removeprefix({ckpt_prefix!r}): v for k, v in "
                "state_dict.items()} (or torch.nn.modules.utils.consume_prefix_in_state_dict_if_present).")
    if count and model_prefix and not ckpt_prefix:
        inner = ".".join(["model"] + [p for p in model_prefix.split(".") if p])
        return (f"The model's keys start with '{model_prefix}' ({describe_prefix(model_prefix)}) but the "
                f"checkpoint's do not: load into {inner} instead, or load before wrapping.")
    shared = _common_prefix(missing + unexpected)
    if shared:
        return (f"Both lists carry the prefix '{shared}', so it is not the problem: the layer names themselves "
                f"differ (e.g. model {missing[0]!r} vs checkpoint {unexpected[0]!r}): the checkpoint comes from "
                "another architecture or version of the model. Build the matching architecture.")
    return None


_WEIGHTS_ENTRY = re.compile(r"state_dict|model|net|weights|params|ema", re.IGNORECASE)


def _wrapped_checkpoint(unexpected: list[str]) -> tuple[list[str], str] | None:
    """The top-level entries of a checkpoint dict loaded as if it were the state dict, and the load to write
    instead; None when the unexpected keys are parameter names. Entries have no dot (parameter names of a
    model do, past its top level); one of them must name a known checkpoint entry."""
    if not unexpected or any("." in k for k in unexpected) or not any(_CHECKPOINT_ENTRIES.match(k)
                                                                       for k in unexpected):
        return None
    weights = next((k for k in unexpected if _WEIGHTS_ENTRY.search(k)
                    and not re.search(r"optim|sched|scaler|version|hparams|hyper", k, re.IGNORECASE)), None)
    if weights is None:
        return unexpected, "the entry that holds the weights"
    load = f"model.load_state_dict(checkpoint[{weights!r}])"
    if any("lightning" in k.lower() for k in unexpected):
        load = (f"model.load_state_dict({{k.removeprefix('model.'): v for k, v in checkpoint[{weights!r}].items()}}) "
                "(a PyTorch Lightning checkpoint: its keys carry the LightningModule's attribute, often 'model.')")
    return unexpected, load


def _state_dict_case(m: re.Match[str]) -> tuple[str, str] | None:
    """A checkpoint that wraps the state dict (``{"state_dict": ..., "epoch": ...}``): its own cause and fix."""
    wrapped = _wrapped_checkpoint(_keys(re.sub(r"\s*\n\s*", "", m.string), "Unexpected"))
    if wrapped is None:
        return None
    entries, load = wrapped
    return ("The file is a training checkpoint: a dict that wraps the state dict with other entries "
            f"({', '.join(repr(k) for k in entries[:5])}), so load_state_dict read those entries as parameter "
            "names and found none of the model's.",
            f"Load the entry that holds the weights: checkpoint = torch.load(path, map_location='cpu', "
            f"weights_only=True); {load}. Do not switch to strict=False: it would load nothing.")


def _common_prefix(keys: list[str]) -> str:
    first = keys[0].split(".")[0] + "."
    return first if all(k.startswith(first) for k in keys) and first in ("module.", "_orig_mod.", "model.") else ""


def _unused_parameters_detail(m: re.Match[str]) -> str | None:
    names = re.search(r"Parameters which did not receive grad for rank \d+: ([\w.,\s]+?)(?:\n|$|Parameter indices)",
                      m.string)
    if names:
        listed = [n.strip() for n in names.group(1).split(",") if n.strip()]
        layers = sorted({n.rsplit(".", 1)[0] for n in listed if "." in n})
        return (f"No gradient reached {', '.join(listed[:6])}: the layer(s) {', '.join(layers[:4]) or listed[0]} "
                "took no part in the loss. Delete them from __init__ or use them in forward().")
    indices = re.search(r"Parameter indices which did not receive grad for rank \d+: ([\d\s]+)", m.string)
    if indices:
        return (f"Parameters {' '.join(indices.group(1).split())} (indices into list(model.parameters())) got no "
                "gradient: print [n for i, (n, _) in enumerate(model.named_parameters()) if i in {...}] to name "
                "the unused layer, then delete it or use it in forward().")
    return None


def _target_oob_detail(m: re.Match[str]) -> str | None:
    value = m.groupdict().get("t")
    if value is None:
        return None
    if value.startswith("-"):
        return (f"A target is {value}: negative labels are only allowed as ignore_index (default -100). "
                "Check the label encoding.")
    return (f"A target is {value}, so the model needs at least {int(value) + 1} output classes (labels "
            "run 0..C-1). Either the last layer is too small or the labels start at 1.")


def _dtype_detail(m: re.Match[str]) -> str | None:
    groups = [g for g in m.groups() if g]
    if len(groups) == 2 and groups[0].lower() == "long":
        return (f"The operation wanted int64 (Long) and got {groups[1]}: an index or label tensor of another integer "
                "type. Convert it with .long(), not .float().")
    return None


def _batchnorm_detail(m: re.Match[str]) -> str | None:
    shape = [int(v) for v in re.findall(r"\d+", m.groupdict().get("shape") or "")]
    if len(shape) > 2 and shape[0] == 1 and all(d == 1 for d in shape[2:]):
        return (f"The input is {shape}: one sample whose feature map was pooled to 1x1 (a BatchNorm after global "
                "pooling, such as an ASPP image-pooling branch), so each channel holds one value: every device "
                "needs at least 2 samples per step, whatever the image size.")
    if shape and shape[0] == 1:
        return f"The input is {shape}: a batch of one sample (on this device) reached BatchNorm in training mode."
    return None


def _shapes_detail(m: re.Match[str]) -> str | None:
    return f"Tensor a has {m.group(1)} at dimension {m.group(3)}, tensor b has {m.group(2)}."


# ------------------------------------------------------------------------------------------ the table
_LOSS_FRAMES = r"nll_loss|cross_entropy|CrossEntropyLoss|NLLLoss|'target'"
# a traceback frame inside a validation/evaluation function of the user's (", line 12, in validate")
_EVAL_FRAME = r", line \d+, in (?:\w+_)?(?:valid\w*|val|evaluat\w*|eval)(?:_\w+)?\s*$"
_NUMPY_REDUCTION = r"_wrapreduction|fromnumeric\.py|numpy[/\\]_?core[/\\]_methods\.py|\bnp\.(?:sum|mean|average|std|var)\("
_DATA_PARALLEL = r"parallel_apply|data_parallel\.py|DataParallel|replicas?\b"
_CHECKPOINT_ENTRIES = re.compile(r"^(?:epoch|iter\w*|step|global_step|best\w*|loss|optim\w*|sched\w*|lr\w*|scaler|"
                                 r"args|config|arch|amp|\w*state_dict\w*|model\w*|net\w*|network|weights|params)$",
                                 re.IGNORECASE)
_CUBLAS_FAILED = r"CUBLAS_STATUS_(?:ALLOC|EXECUTION)_FAILED|cublas runtime error : resource allocation failed"
# an embedding lookup in the frames or the kernel's assertion: by layer name (GPT-2's wte), ids or the kernel
# (a model called on token ids: the frames of a transformer show the call, not the lookup)
_EMBEDDING_FRAMES = (r"embedding|\bwte\b|\bembed_tokens\b|\binput_ids\b|\btoken_ids\b|srcIndex < srcSelectDimSize|"
                     r"indexSelect(?:Large|Small)Index|index out of range in self")
_AMP = r"GradScaler|scaler\.|\bamp\b|autocast|fp16|float16|Gradient overflow|mixed precision"
_DEVICE_FIX = ("Move the model once (model.to(device)) and every batch inside the loop "
               "(x, y = x.to(device), y.to(device)); create new tensors with device=x.device; register "
               "constant tensors in a module with self.register_buffer(...) so that .to() moves them; "
               "a plain Python list of layers is not moved: use nn.ModuleList.")

FAMILIES: tuple[Family, ...] = (
    # --------------------------------------------------------------- autograd
    Family(
        "no-grad-fn", "backward() on a tensor that is not connected to any parameter",
        (r"element \d+ of tensors does not require grad and does not have a grad_fn",),
        "The loss has no autograd history: it was computed under torch.no_grad()/inference_mode, from "
        ".detach()/.data/.item()/.numpy() values or torch.tensor(...) copies, or no parameter requires grad.",
        "Find where the chain breaks and keep the computation in tensors from the model output to the loss. "
        "Do not set loss.requires_grad = True: that only silences the error, the loss becomes a new leaf and "
        "the model still gets no gradient, so it never learns.",
        check="broken-graph"),
    Family(
        "inplace-modified", "a tensor needed by backward was changed in place",
        (r"one of the variables needed for gradient computation has been modified by an inplace operation",),
        "An in-place operation (x += ..., x[...] = ..., relu_(), ReLU(inplace=True), an optimizer.step() "
        "between forward and backward) overwrote a tensor that autograd had saved to compute gradients.",
        "Use the out-of-place form (x = x + ..., torch.relu(x), inplace=False), or .clone() the tensor "
        "before changing it. If optimizer.step() ran between forward and backward (e.g. GAN updates), "
        "finish every backward() before stepping, or recompute the forward pass.",
        check="inplace-saved"),
    Family(
        "inplace-leaf", "in-place update of a leaf tensor that requires grad",
        (r"a leaf Variable that requires grad (?:is being|has been) used in an in-place operation",),
        "A parameter (or another leaf with requires_grad=True) was updated in place while autograd was "
        "recording, typically a hand-written update like `w -= lr * w.grad`.",
        "Do manual updates under `with torch.no_grad():` (or use torch.optim); to initialise a parameter "
        "use torch.nn.init functions or `with torch.no_grad(): w.copy_(...)`.",
        check="inplace-leaf"),
    Family(
        "backward-twice", "backward through a graph whose buffers were already freed",
        (r"Trying to backward through the graph a second time",),
        "backward() frees the saved tensors of the graph. A second backward through the same graph fails: "
        "usually a tensor computed in an earlier iteration (a hidden state, a running loss sum, a cached "
        "output) is reused in this iteration's graph.",
        "Detach state carried across iterations (hidden = hidden.detach(), total += loss.item()), "
        "recompute the forward pass, or pass retain_graph=True only when you truly need two backward "
        "passes through the same graph.",
        check=None),
    Family(
        "backward-nonscalar", "backward() on a tensor with more than one element",
        (r"grad can be implicitly created only for scalar outputs",),
        "backward() without an argument needs a single number; the loss still has a batch dimension "
        "(reduction='none', or a missing .mean()).",
        "Reduce the loss to a scalar (loss.mean(), or the loss's default reduction), or pass "
        "gradient=torch.ones_like(loss) if you really want a vector-Jacobian product.",
        check=None),
    Family(
        "nan-in-backward", "anomaly detection found NaN in a gradient",
        (r"Function '?(\w+)'? returned nan values in its \d+(?:st|nd|rd|th) output",),
        "A backward function produced NaN: typically sqrt/log/pow at 0 or below, division by zero, or "
        "values already infinite in the forward pass.",
        "Guard the operation (x.clamp_min(eps).sqrt(), torch.log(x + eps), torch.where before dividing), "
        "lower the learning rate, and check the inputs for NaN/Inf.",
        check="non-finite-loss"),
    Family(
        "numpy-requires-grad", ".numpy() on a tensor that is part of the autograd graph",
        (r"Can't call numpy\(\) on Tensor that requires grad",),
        "NumPy cannot track gradients, so PyTorch refuses to hand out a graph tensor.",
        "Use t.detach().cpu().numpy() for logging or metrics; keep the loss computation in torch.",
        check=None),
    # --------------------------------------------------------------- devices
    Family(
        "device-mismatch", "tensors on different devices in one operation",
        (r"Expected all tensors to be on the same device, but (?:found at least two devices, "
         r"(?P<a>[\w:]+) and (?P<b>[\w:]+)|got \w+ is on (?P<c>[\w:]+), different from other tensors on "
         r"(?P<d>[\w:]+))?",
         r"Tensor on device (?P<a>[\w:]+) is not on the expected device (?P<b>[\w:]+)!",
         r"Input type \((?:torch\.cuda\.\w+\) and weight type \(torch\.\w+|torch\.\w+\) and weight type "
         r"\(torch\.cuda\.\w+)\) should be the same",
         r"Input and parameter tensors are not at the same device",
         r"Expected object of device type \w+ but got device type \w+",
         r"indices should be either on cpu or on the same device as the indexed tensor",
         r"Placeholder storage has not been allocated on MPS device",
         r"module must have its parameters and buffers on device \S+ \(device_ids\[0\]\)"),
        "Some tensors of one operation live on different devices (e.g. the model on the GPU and the batch "
        "on the CPU, a tensor created inside forward() without device=, or layers kept in a plain list).",
        _DEVICE_FIX, check="device-mismatch", detail=_device_detail),
    Family(
        "cuda-not-available", "CUDA requested but not usable",
        (r"Torch not compiled with CUDA enabled", r"Found no NVIDIA driver on your system",
         r"CUDA driver version is insufficient for CUDA runtime version", r"No CUDA GPUs are available"),
        "The code asks for a CUDA device, but this PyTorch build is CPU-only, the NVIDIA driver is missing, "
        "or it is older than the CUDA version of the build.",
        "Pick the device at run time: device = 'cuda' if torch.cuda.is_available() else 'cpu'. To use the "
        "GPU, install the CUDA build matching your driver (pip index https://download.pytorch.org/whl/cuXXX) "
        "and check `nvidia-smi`.", check=None),
    Family(
        "cuda-deserialize", "loading a GPU checkpoint on a machine without CUDA",
        (r"Attempting to deserialize object on a CUDA device but torch\.cuda\.is_available\(\) is False",),
        "The checkpoint's tensors were saved on a GPU and torch.load tries to put them back there.",
        "torch.load(path, map_location='cpu', weights_only=True), then model.to(device).", check=None),
    Family(
        "cuda-fork", "CUDA used in a forked subprocess",
        (r"Cannot re-initialize CUDA in forked subprocess",),
        "CUDA was initialised in the parent process, then a process was forked (multiprocessing or "
        "DataLoader workers) and the child touched CUDA.",
        "Keep CUDA out of Dataset.__getitem__ and worker code (return CPU tensors, move batches in the main "
        "loop), or use the spawn start method: torch.multiprocessing.set_start_method('spawn').", check=None),
    # --------------------------------------------------------------- memory
    Family(
        "cublas-after-embedding", "a cuBLAS failure right after an embedding: usually an index out of range",
        ((_CUBLAS_FAILED, _EMBEDDING_FRAMES),),
        "An embedding received an index >= num_embeddings (or negative). On a GPU the lookup does not stop "
        "there: the out-of-range read corrupts what follows and the next cuBLAS call (the Linear after the "
        "embedding) fails, so the error names cuBLAS and memory, not the index.",
        "Run the same batch on the CPU, or with CUDA_LAUNCH_BLOCKING=1, to see the real error (index out of "
        "range in self) and its line; check ids.max() < num_embeddings (vocabulary size including special and "
        "padding tokens: after adding tokens call model.resize_token_embeddings(len(tokenizer))) and "
        "ids.min() >= 0. It is not a memory problem: a smaller batch will not fix it.",
        check=None),
    Family(
        "cublas-alloc-failed", "cuBLAS could not allocate: an out-of-range index before it, or a full GPU",
        (r"CUBLAS_STATUS_ALLOC_FAILED", r"cublas runtime error : resource allocation failed"),
        "cuBLAS failed to allocate while creating its handle for the first matrix multiply. Two causes give "
        "this text: most often an earlier kernel read out of bounds (an embedding given a token id >= "
        "num_embeddings, a label >= the number of classes), which leaves the GPU in an error state that "
        "cuBLAS reports as an allocation failure; otherwise the GPU really is full.",
        "Run the same batch on the CPU (or with CUDA_LAUNCH_BLOCKING=1): `IndexError: index out of range in "
        "self` there means an id >= num_embeddings: check ids.max() < num_embeddings (after adding tokens, "
        "model.resize_token_embeddings(len(tokenizer))) and labels.max() < num_classes. Only if the CPU run "
        "passes is it memory: lower the batch size, free other processes on the GPU (nvidia-smi).",
        check=None),
    Family(
        "cuda-oom", "GPU out of memory",
        (r"CUDA out of memory", r"OutOfMemoryError", r"MPS backend out of memory",
         r"CUDA error: out of memory"),
        "The GPU has no room for the next allocation: batch too large, activations kept alive across "
        "iterations (total_loss += loss instead of loss.item()), evaluation without torch.no_grad(), or "
        "another process holding the GPU.",
        "Lower the batch size (keep the effective size with gradient accumulation), use mixed precision "
        "(bf16/fp16), evaluate under torch.inference_mode(), accumulate metrics with .item(), try "
        "activation checkpointing; for fragmentation set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
        check=None,
        variants=((_EVAL_FRAME,
                   "The memory ran out inside a validation/evaluation function: almost always evaluation that "
                   "records autograd graphs (no torch.no_grad()), so every batch keeps its activations while the "
                   "metrics are computed, often with a larger evaluation batch than training's.",
                   "Evaluate under `with torch.no_grad():` (or torch.inference_mode(), or decorate the function "
                   "with @torch.no_grad()) after model.eval(); accumulate metrics with .item(); then lower the "
                   "evaluation batch size if it still does not fit."),)),
    Family(
        "cpu-oom", "host memory allocation failed",
        (r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)",
         r"can't allocate memory: you tried to allocate \d+ bytes"),
        "A single tensor larger than the free RAM was requested: usually a wrong shape (e.g. an outer "
        "product by broadcasting (N,1) with (N,)), or a whole dataset materialised at once.",
        "Check the shapes of the tensors on that line; load data lazily in a Dataset; lower the batch "
        "size.", check=None),
    # --------------------------------------------------------------- CUDA runtime
    Family(
        "cuda-device-assert", "a CUDA kernel failed an assertion or accessed memory out of bounds",
        (r"device-side assert triggered", r"an illegal memory access was encountered",
         r"Assertion `t >= 0 && t < n_classes` failed", r"Assertion `srcIndex < srcSelectDimSize` failed"),
        "A kernel found an invalid index: most often a class label >= the number of outputs (or negative), "
        "or a token id >= the embedding size. CUDA errors are reported asynchronously, so the traceback "
        "may point at a later line.",
        "Run once on the CPU (or with CUDA_LAUNCH_BLOCKING=1) to get the exact error and line; check "
        "labels.min() >= 0 and labels.max() < num_classes, and token ids < num_embeddings. The CUDA "
        "context is unusable afterwards: restart the process.", check=None),
    Family(
        "cuda-no-kernel-image", "this PyTorch build has no kernels for the GPU",
        (r"no kernel image is available for execution on the device",
         r"is not compatible with the current PyTorch installation"),
        "The installed wheel was compiled for other GPU architectures (sm_XX) than this GPU's.",
        "Install a build that supports your GPU's compute capability (a newer CUDA wheel for new GPUs, an "
        "older one for old GPUs); check torch.cuda.get_arch_list().", check=None),
    Family(
        "cuda-library-error", "cuDNN / cuBLAS failed",
        (r"CUDNN_STATUS_\w+", r"CUBLAS_STATUS_(?!ALLOC_FAILED)\w+", r"cuDNN error:"),
        "cuDNN/cuBLAS could not initialise or run: mostly out of GPU memory in disguise, a driver/library "
        "mismatch, or an unsupported configuration for that kernel.",
        "Retry with a smaller batch; run with CUDA_LAUNCH_BLOCKING=1 to find the op; check that the "
        "driver supports the CUDA version of the build; torch.backends.cudnn.enabled = False to confirm.",
        check=None),
    # --------------------------------------------------------------- shapes
    Family(
        "matmul-shape", "a Linear/matmul received the wrong number of features",
        (r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)",
         r"size mismatch, m1: \[(\d+) x (\d+)\], m2: \[(\d+) x (\d+)\]",
         r"mat1 dim 1 must match mat2 dim 0",
         r"Expected size for first two dimensions of batch2 tensor to be"),
        "The input's last dimension is not the layer's in_features: the flatten size after the "
        "convolutions was computed wrong, the input was not flattened, or the data has another width.",
        "Print x.shape just before the layer; set in_features to the real size (or use nn.LazyLinear), "
        "and flatten with x.flatten(1) so the batch dimension is kept.",
        detail=_matmul_detail),
    Family(
        "rnn-input-size", "an RNN/LSTM/GRU received the wrong feature size",
        (r"input\.size\(-1\) must be equal to input_size\. Expected (\d+), got (\d+)",),
        "The last dimension of the sequence is not the input_size the RNN was built with (or the batch and "
        "time dimensions are swapped: batch_first defaults to False).",
        "Set input_size to the feature size, and batch_first=True if your tensors are (batch, time, "
        "features).", check=None),
    Family(
        "conv-channels", "a convolution received the wrong number of channels",
        (r"(?:Given groups=\d+, weight of size \[[\d, ]+\], )?expected input\[(?P<shape>[\d, ]+)\] to have "
         r"(?P<want>\d+) channels, but got (?P<got>\d+) channels instead",),
        "The input's channel dimension does not match the layer's in_channels: grayscale vs RGB images, "
        "images in channels-last (N, H, W, C) layout, or a wrong in_channels after a previous layer.",
        "Match in_channels to the data, convert images consistently (.convert('RGB')), and permute "
        "NHWC data to NCHW with x.permute(0, 3, 1, 2).", detail=_channels_detail),
    Family(
        "conv-input-rank", "a convolution received a tensor of the wrong rank",
        (r"Expected \dD \(unbatched\) or \dD \(batched\) input to conv\dd, but got input of size",
         r"Expected \d-dimensional input for \d-dimensional weight"),
        "Conv2d wants (N, C, H, W) (or (C, H, W) unbatched): a single image lost its channel or batch "
        "dimension, or the data is flattened.",
        "Add the missing dimensions (x.unsqueeze(0) for the batch, x.unsqueeze(1) for one channel), or "
        "stop flattening before the convolutions.", check=None),
    Family(
        "conv-too-small", "the input is smaller than the convolution/pooling kernel",
        (r"Kernel size can't be greater than actual input size", r"Output size is too small"),
        "After the previous layers the spatial size is smaller than the kernel: images too small for the "
        "architecture, or too many stride/pooling stages.",
        "Resize inputs to the size the model was designed for, or remove a pooling stage / use padding; "
        "print x.shape between layers to see where it shrinks.", check=None),
    Family(
        "broadcast-mismatch", "element-wise op on tensors whose shapes do not broadcast",
        (r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
         r"dimension (\d+)",),
        "Two tensors combined element-wise have different sizes in a dimension where neither is 1.",
        "Print both shapes; reshape/unsqueeze so they line up, or fix the layer that produced the wrong "
        "size (often a target of shape (N, 1) vs predictions (N,) or a wrong number of outputs).",
        detail=_shapes_detail),
    Family(
        "expand-mismatch", "expand() to an incompatible size",
        (r"The expanded size of the tensor \(\d+\) must match the existing size \(\d+\) at non-singleton "
         r"dimension \d+",),
        "expand/expand_as/broadcast_to can only stretch dimensions of size 1.",
        "Make the source dimension 1 first (unsqueeze) or use repeat for real copies; check the shapes.",
        check=None),
    Family(
        "cat-size-mismatch", "torch.cat/stack of tensors with different sizes",
        (r"Sizes of tensors must match except in dimension \d+",),
        "All tensors given to torch.cat must have the same size in every dimension except the one "
        "being concatenated.",
        "Print the shapes; pad/crop to a common size, or concatenate along another dimension.", check=None),
    Family(
        "view-noncontiguous", ".view() on a non-contiguous tensor",
        (r"view size is not compatible with input tensor's size and stride",),
        "view() needs memory laid out compatibly; after transpose/permute/slicing it is not.",
        "Use .reshape(...) (copies only when needed), or .contiguous().view(...).", check=None),
    Family(
        "reshape-invalid", "reshape/view to a size with a different number of elements",
        (r"shape '\[[-\d, ]*\]' is invalid for input of size \d+",),
        "The requested shape does not hold the same number of elements, typically a hard-coded feature "
        "size (e.g. 784) that does not match the data, or a last batch of another size with a hard-coded "
        "batch dimension.",
        "Keep the batch dimension free: x.reshape(x.size(0), -1) or x.flatten(1); compute feature sizes "
        "from the data.", check=None),
    # --------------------------------------------------------------- losses and targets
    Family(
        "class-target-dtype", "class-index targets are floats",
        (r"expected target dtype to be Long or Byte, but got \w+",
         r"expected scalar type Long but found (?:Float|Double|Half)",
         r"Expected object of scalar type Long but got scalar type \w+ for argument #\d+ '?target'?",
         (r"expected scalar type Long but found (?:Int|Short|Byte|Char)", _LOSS_FRAMES),
         r"\"nll_loss\w*\" not implemented for '(?:Float|Double|Int|Short|Half)'"),
        "CrossEntropyLoss/NLLLoss with targets of shape (N,) want int64 (Long) class indices, but the labels "
        "have another dtype: float (converted from a float NumPy array) or int32 (Int, e.g. np.int32 labels, "
        "torch.IntTensor, or labels built on Windows where NumPy's default integer is 32-bit).",
        "Convert the labels once: y = y.long() (or torch.as_tensor(labels, dtype=torch.long)). Float "
        "targets are only for class probabilities of shape (N, C).", check=None),
    Family(
        "float-target-dtype", "integer targets given to a loss that needs floats",
        (r"result type Float can't be cast to the desired output type (?:Long|Int|Byte)",
         r"Found dtype (?:Long|Int|Double) but expected Float",
         r"expected scalar type Float but found Long"),
        "BCEWithLogitsLoss/BCELoss/MSELoss compute with floating-point targets, but the labels are integers.",
        "Convert the targets: y = y.float() (and give them the prediction's shape: y.view_as(logits)).",
        check=None,
        variants=((r"Found dtype Double",
                   "The target (or a label, a weight) is float64, NumPy's default float, while the model and its "
                   "output are float32: the loss's backward pass refuses to mix them.",
                   "Make the targets float32 once, where they are built: y = y.float(), "
                   "torch.as_tensor(y, dtype=torch.float32), or array.astype(np.float32) in the Dataset "
                   "(torch.from_numpy keeps float64)."),)),
    Family(
        "onehot-target", "one-hot or integer matrix targets for cross-entropy",
        (r"Expected floating point type for target with class probabilities, got \w+",
         r"0D or 1D target tensor expected, multi-target not supported"),
        "CrossEntropyLoss received (N, C) integer targets: one-hot labels, or a label tensor with an "
        "extra dimension.",
        "Pass class indices of shape (N,): y.argmax(dim=1) for one-hot labels or y.squeeze(1) for (N, 1); "
        "or pass y.float() if they really are probabilities.", check=None),
    Family(
        "target-out-of-bounds", "a class label outside [0, num_classes)",
        (r"Target (?P<t>-?\d+) is out of bounds", r"Assertion `cur_target >= 0 && cur_target < n_classes`"),
        "A label is >= the number of model outputs or negative: the last layer has too few outputs, labels "
        "start at 1, or a placeholder like -1 marks unlabelled samples.",
        "Make the output layer size = number of classes; map labels to 0..C-1; use ignore_index for the "
        "placeholder.", detail=_target_oob_detail),
    Family(
        "index-out-of-range", "an index (e.g. a token id) outside the embedding/tensor",
        (r"index out of range in self", r"index -?\d+ is out of bounds for dimension \d+ with size \d+"),
        "An Embedding received an id >= num_embeddings (vocabulary grew, padding/unknown ids not counted) "
        "or an indexing op went past the end.",
        "Set num_embeddings = max id + 1 (len(vocab) including special tokens); check ids.max().",
        check=None),
    Family(
        "loss-broadcast", "loss input and target shapes differ and broadcast silently",
        (r"Using a target size \(torch\.Size\(\[[\d, ]*\]\)\) that is different to the input size",),
        "MSELoss/L1Loss got predictions of shape (N, 1) and targets of shape (N,) (or similar); broadcasting "
        "turns them into an (N, N) matrix and the loss is wrong without any error.",
        "Make the shapes equal: loss_fn(pred.squeeze(-1), y) or loss_fn(pred, y.view_as(pred)).",
        check=None),
    Family(
        "loss-target-shape", "predictions and targets have incompatible shapes",
        (r"Expected input batch_size \((\d+)\) to match target batch_size \((\d+)\)",
         r"Expected target size \[[\d, ]*\], got \[[\d, ]*\]"),
        "The model output and the targets do not line up: a flatten that folded the batch into the "
        "features (x.view(-1, k) with a wrong k), targets from another batch, or (N, C, d) outputs whose "
        "class dimension is not dimension 1.",
        "Flatten with x.flatten(1) / x.view(x.size(0), -1), take inputs and targets from the same batch, "
        "and for sequence/pixel outputs move the class dimension to dim 1 (logits.permute(0, 2, 1)).",
        check=None),
    Family(
        "bce-input-range", "BCELoss received values outside [0, 1]",
        (r"all elements of input should be between 0 and 1",),
        "BCELoss needs probabilities, but it received raw logits.",
        "Use nn.BCEWithLogitsLoss on the logits (numerically stable), or apply torch.sigmoid first.",
        check=None),
    # --------------------------------------------------------------- dtypes
    Family(
        "dtype-mismatch", "tensors of different dtypes in one operation",
        (r"mat1 and mat2 must have the same dtype", r"expected m1 and m2 to have the same dtype",
         r"Input type \((?!torch\.cuda)[\w:.]+\) and (?:weight|bias) type \((?!torch\.cuda)[\w:.]+\) should be the same",
         r"expected scalar type (\w+) but found (\w+)", r"expected mat1 and mat2 to have the same dtype"),
        "The input's dtype differs from the weights': NumPy arrays are float64 by default and the model "
        "float32, or half-precision inputs reach a float32 model outside autocast.",
        "Convert data once, in the Dataset: torch.as_tensor(x, dtype=torch.float32) (or .float()); for "
        "mixed precision use torch.autocast instead of calling .half() on inputs.", check=None,
        detail=_dtype_detail),
    Family(
        "dtype-not-implemented", "an operation is not implemented for this dtype on this device",
        (r"\"\w+\" not implemented for '(?:Half|BFloat16|Long|Int|Bool|Byte|Char)'",
         r"could not infer output dtype\. Input dtype must be either a floating point or complex dtype"),
        "The op has no kernel for that dtype here: integer tensors given to mean/softmax, or half "
        "precision on a device that lacks the kernel.",
        "Convert first (x.float()); for mixed precision on CPU prefer bfloat16 with torch.autocast.",
        check=None),
    Family(
        "scalar-conversion", "converting a multi-element tensor to a Python number",
        (r"a Tensor with \d+ elements cannot be converted to Scalar",
         r"only one element tensors can be converted to Python scalars"),
        ".item(), float() or int() need exactly one element; the tensor still has a batch dimension.",
        "Reduce first (t.mean().item()), or use t.tolist() for all values.", check=None),
    Family(
        "bool-ambiguous", "if/and/or on a tensor with several values",
        (r"Boolean value of Tensor with more than one value is ambiguous",),
        "Python needs one True/False but the tensor has several elements.",
        "Use (t > 0).any() / .all(), or compare a reduced value; for element-wise logic use torch.where "
        "or & and |.", check=None),
    Family(
        "numpy-device", ".numpy() on a GPU tensor",
        (r"can't convert \S+ device type tensor to numpy",),
        "NumPy arrays live in host memory; the tensor is on another device.",
        "t.detach().cpu().numpy().", check=None,
        variants=((_NUMPY_REDUCTION,
                   "A NumPy reduction (np.mean, np.sum...) was given a list of GPU tensors, typically the losses "
                   "of an epoch collected with losses.append(loss): NumPy converts each element to an array and "
                   "cannot read GPU memory.",
                   "Reduce in torch instead: torch.stack(losses).mean().item(), or collect plain numbers in the "
                   "first place: losses.append(loss.item()); then np.mean(losses) works."),)),
    # --------------------------------------------------------------- state dicts and checkpoints
    Family(
        "state-dict-size", "a checkpoint tensor has another shape than the model's",
        (r"size mismatch for (?P<key>[\w.]+): copying a param with shape torch\.Size\(\[(?P<saved>[\d, ]*)\]\) "
         r"from checkpoint, the shape in current model is torch\.Size\(\[(?P<model>[\d, ]*)\]\)",),
        "The model was built with other sizes than the checkpoint: usually another number of classes in "
        "the head, another vocabulary size, or another architecture variant.",
        "Build the model with the checkpoint's sizes; to fine-tune for new classes, drop the head's keys "
        "from the state dict, load with strict=False, and check that the returned missing_keys are exactly "
        "the head.", check="state-dict-mismatch", detail=_size_mismatch_detail),
    Family(
        "state-dict-keys", "missing or unexpected keys when loading a state dict",
        (r"Error\(s\) in loading state_dict for \w+:\s*(?:Missing|Unexpected) key\(s\)",
         r"(?:Missing|Unexpected) key\(s\) in state_dict:"),
        "The checkpoint's parameter names do not match the model's: a 'module.' prefix from DataParallel/"
        "DDP, an '_orig_mod.' prefix from torch.compile, a checkpoint that wraps the weights "
        "(e.g. {'model': ..., 'optimizer': ...}), or a different architecture.",
        "Compare the key lists; strip prefixes with torch.nn.modules.utils."
        "consume_prefix_in_state_dict_if_present(sd, 'module.'); load checkpoint['model'] when the file "
        "holds more than the weights. Use strict=False only for an intended partial load, and check its "
        "return value.", check="state-dict-mismatch", detail=_prefix_detail, case=_state_dict_case),
    Family(
        "weights-only-load", "torch.load(weights_only=True) refused a pickled object",
        (r"Weights only load failed", r"Unsupported global: GLOBAL [\w.]+"),
        "Since PyTorch 2.6 torch.load only unpickles tensors and plain containers by default; the file "
        "contains another Python object (a whole model, a custom class, NumPy scalars).",
        "Save state dicts (torch.save(model.state_dict(), path)) and plain data instead of objects. For "
        "a file you trust, allow the specific class with torch.serialization.add_safe_globals([...]); "
        "never use weights_only=False on files from others: unpickling runs arbitrary code.", check=None),
    Family(
        "checkpoint-corrupt", "a checkpoint file is truncated or not a PyTorch file",
        (r"PytorchStreamReader failed reading zip archive", r"failed finding central directory",
         r"invalid load key, '.*'", r"unexpected EOF, expected \d+ more bytes"),
        "The file is incomplete (the save was interrupted or a download/copy failed), or it is not a "
        "torch.save file (e.g. a Git LFS pointer or an HTML page).",
        "Re-save or re-download it; write checkpoints atomically (save to a temporary file, then "
        "os.replace) so an interrupted save never leaves a half file.", check=None),
    # --------------------------------------------------------------- data loading
    Family(
        "dataloader-worker-died", "a DataLoader worker process died",
        (r"DataLoader worker \(pids?\(?s?\)? [\d, ]+\) (?:exited unexpectedly|is killed by signal)",),
        "A worker process was killed: out of RAM (the OOM killer), a segfault in a C extension, or "
        "insufficient shared memory in a container.",
        "Run with num_workers=0 to see the real error; lower num_workers or the batch size; in Docker "
        "raise --shm-size (or use --ipc=host); avoid holding large Python lists in the Dataset (use NumPy "
        "arrays).", check=None),
    Family(
        "dataloader-shm", "shared memory exhausted by DataLoader workers",
        (r"Unexpected bus error encountered in worker", r"insufficient shared memory \(shm\)",
         r"out of shared memory"),
        "Worker processes pass batches through /dev/shm, which is small in Docker (64 MB by default).",
        "Run the container with --shm-size=8g or --ipc=host, or lower num_workers / batch size.",
        check=None),
    Family(
        "dataloader-worker-error", "an exception inside a DataLoader worker",
        (r"Caught \w+ in DataLoader worker process \d+",),
        "Your Dataset's __getitem__ (or collate_fn / transform) raised in a worker; the original "
        "traceback is printed below this line.",
        "Read the 'Original Traceback' part for the real error in your Dataset; reproduce with "
        "num_workers=0 to debug it in the main process.", check=None),
    Family(
        "collate-unequal-size", "samples of different sizes in one batch",
        (r"stack expects each tensor to be equal size, but got \[[\d, ]*\] at entry \d+ and \[[\d, ]*\] at "
         r"entry \d+",),
        "The default collate stacks samples, so every sample must have the same shape: images of "
        "different sizes, or sequences of different lengths.",
        "Resize/crop images to a fixed size in the transform; pad sequences in a collate_fn "
        "(torch.nn.utils.rnn.pad_sequence).", check=None),
    Family(
        "collate-type", "a Dataset returned objects the default collate cannot batch",
        (r"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found",),
        "__getitem__ returned something like a PIL image, a string path or None.",
        "Convert in __getitem__ (e.g. torchvision.transforms.ToTensor()/v2.ToImage for images), filter out "
        "None samples, or write a collate_fn.", check=None),
    Family(
        "pickle-local", "a local function or lambda cannot be sent to worker processes",
        (r"Can't (?:pickle|get) local object", r"Can't pickle <function <lambda>",
         r"attribute lookup <lambda> on \S+ failed"),
        "With the spawn start method (Windows, macOS) DataLoader workers receive the dataset, transforms "
        "and collate_fn by pickling; lambdas and functions defined inside other functions cannot be "
        "pickled.",
        "Define collate_fn/transforms at module level (or use functools.partial of a module-level "
        "function), and guard the script with `if __name__ == '__main__':`.", check=None),
    # --------------------------------------------------------------- distributed
    Family(
        "nccl-error", "an NCCL communication error",
        (r"NCCL error in: \S+", r"nccl(?:System|UnhandledCuda|Internal|InvalidUsage|Remote)Error",
         r"NCCL (?:WARN|Error)"),
        "Ranks could not communicate: network interface or firewall problems, GPUs not visible to each "
        "other, mismatched NCCL/driver versions, or one rank crashed.",
        "Rerun with NCCL_DEBUG=INFO to see which call fails; set NCCL_SOCKET_IFNAME to the right network "
        "interface; try NCCL_P2P_DISABLE=1 / NCCL_IB_DISABLE=1 to isolate the transport; make sure every "
        "rank runs the same code and versions.", check=None),
    Family(
        "nccl-timeout", "a collective operation timed out",
        (r"Watchdog caught collective operation timeout", r"collective operation timeout"),
        "One rank did not join a collective (all_reduce, barrier...) in time: it crashed, was much "
        "slower (e.g. rank 0 evaluating or saving alone), or the ranks run different code paths.",
        "Make every rank execute the same collectives in the same order; do rank-0-only work outside "
        "collectives and follow it with a barrier; raise the timeout in init_process_group(timeout=...) "
        "only for known long steps.", check=None),
    Family(
        "ddp-unused-parameters", "DDP found parameters that did not receive a gradient",
        (r"Expected to have finished reduction in the prior iteration before starting a new one",
         r"parameters that were not used in producing (?:the )?loss"),
        "Some parameters of the DDP model took no part in the loss this step (most often a layer defined in "
        "__init__ and never called in forward(), or an unused head, branch or output), so DDP waits for "
        "gradients that never come.",
        "Find the layer that forward() never uses (run with TORCH_DISTRIBUTED_DEBUG=INFO to get the parameter "
        "names, or `torchwork doctor` on one process) and delete it or use it; freeze it (requires_grad_(False)) "
        "if it must stay. Only when parameters are unused on purpose in some steps pass "
        "find_unused_parameters=True to DistributedDataParallel (slower).", check="broken-graph",
        detail=_unused_parameters_detail),
    Family(
        "dist-not-initialized", "torch.distributed used before init_process_group",
        (r"Default process group has not been initialized",),
        "A collective or DDP was used in a process that never called torch.distributed.init_process_group.",
        "Launch with torchrun and call init_process_group(backend='nccl' or 'gloo') first; guard "
        "distributed-only code with torch.distributed.is_initialized().", check=None),
    # --------------------------------------------------------------- installation
    Family(
        "omp-duplicate", "two OpenMP runtimes loaded in one process",
        (r"OMP: Error #15: Initializing \S+, but found \S+ already initialized",
         r"multiple copies of the OpenMP runtime have been linked into the program"),
        "Two libraries ship their own OpenMP runtime (typically a pip torch and conda's MKL/numpy, or "
        "another package bundling libiomp5md.dll/libomp.dylib) and both were loaded.",
        "Install torch and numpy/MKL from one source (all conda, or all pip in a fresh venv), or remove "
        "the duplicate runtime. KMP_DUPLICATE_LIB_OK=TRUE only hides it and may give wrong results.",
        check=None),
    Family(
        "dll-load-failed", "torch's native libraries failed to load (Windows)",
        (r"DLL load failed(?: while importing _C)?:", r"\[WinError (?:126|127|1114)\]",
         r"Error loading \"[^\"]*torch\\lib\\[^\"]+\.dll\" or one of its dependencies"),
        "A DLL that torch needs (c10.dll, fbgemm.dll, libiomp5md.dll, or the MSVC runtime) is missing "
        "or an incompatible copy was found first on PATH.",
        "Install the latest Microsoft Visual C++ Redistributable (x64), reinstall torch in a fresh "
        "virtual environment with a supported 64-bit Python, and remove other folders with torch or "
        "CUDA DLLs from PATH.", check=None),
    Family(
        "shared-library-missing", "torch's native libraries failed to load (Linux/macOS)",
        (r"lib[\w\-.]+\.so[\d.]*: cannot open shared object file", r"undefined symbol: \w+",
         r"Library not loaded: @rpath/lib\w+\.dylib"),
        "A shared library torch or an extension links against is missing, or an extension was built "
        "for another torch version (undefined symbol).",
        "Reinstall torch with pip/conda in a clean environment; rebuild C++/CUDA extensions against the "
        "installed torch; do not mix CUDA libraries from the system with a wheel's bundled ones.",
        check=None),
    # --------------------------------------------------------------- export
    Family(
        "torchscript-compile", "TorchScript cannot compile this Python code",
        (r"torch\.jit\.frontend\.\w+Error", r"Compiled functions can't take variable number of arguments",
         r"aren't supported:\s*\n\s*File", r"Module '\w+' has no attribute '\w+'",
         r"Python builtin <[^>]+> is currently not supported in Torchscript",
         r"Tried to access nonexistent attribute or method"),
        "torch.jit.script supports a subset of Python: no *args/**kwargs, imports, NumPy, or attributes "
        "that are not set in __init__ with a fixed type.",
        "Prefer torch.export / torch.onnx.export(dynamo=True) for deployment; otherwise rewrite the "
        "marked line with torch operations and typed attributes, or exclude helper methods with "
        "@torch.jit.ignore / @torch.jit.unused.", check=None),
    Family(
        "torchscript-trace", "tracing cannot capture this model faithfully",
        (r"Encountering a (?:dict|list) at the output of the tracer",
         r"Converting a tensor to a Python \w+ might cause the trace to be incorrect",
         r"TracerWarning"),
        "torch.jit.trace records one execution: Python control flow on tensor values, or Python values "
        "derived from tensors, are frozen to this example input.",
        "Remove data-dependent Python branching (use torch.where), return tuples, or export with "
        "torch.export which reports data-dependent control flow explicitly.", check=None),
    Family(
        "onnx-unsupported-operator", "the ONNX exporter has no conversion for an operator",
        (r"Exporting the operator '?[\w:.]+'? to ONNX opset version \d+ is not supported",
         r"UnsupportedOperatorError", r"No ONNX function found for",
         r"Unsupported: ONNX export of (?:operator )?[\w:.]+", r"Only output_size=\[1, 1\] is supported"),
        "The model uses an operation that has no ONNX equivalent in that opset (or in any opset).",
        "Try a newer opset_version and the dynamo exporter (torch.onnx.export(..., dynamo=True)); "
        "otherwise replace the op with supported ones, or register a custom translation.", check=None,
        variants=((r"adaptive\w*[ _]pool\w*, input size not accessible",
                   "The exporter writes adaptive pooling as a plain pooling whose kernel it computes from the "
                   "input's height and width, and here they are unknown: dynamic_axes (or dynamic_shapes) makes "
                   "the spatial sizes dynamic.",
                   "Keep height and width fixed in the export (dynamic_axes only for the batch dimension) and "
                   "resize inputs to that size; or pool to 1x1 (exported as GlobalAveragePool, any size), e.g. "
                   "x.mean(dim=(2, 3), keepdim=True); or export with torch.onnx.export(..., dynamo=True)."),
                  (r"adaptive pooling, since output_size is not constant",
                   "The output size given to adaptive pooling is computed from a tensor's shape at run time "
                   "(e.g. x.shape[2] // 2 while the height is dynamic), so the exporter sees a value, not a "
                   "constant, and cannot choose a kernel.",
                   "Pass a constant output size (nn.AdaptiveAvgPool2d((7, 7)) built in __init__), keep the input "
                   "size fixed in the export, or export with torch.onnx.export(..., dynamo=True)."),
                  (r"Only output_size=\[1, 1\] is supported",
                   "An old exporter (PyTorch < 1.2) writes adaptive pooling only as global pooling (output 1x1).",
                   "Upgrade PyTorch (newer exporters handle an output size that divides the input), or replace the "
                   "layer by nn.AvgPool2d with the kernel_size and stride your fixed input size needs "
                   "(stride = input // output, kernel = input - (output - 1) * stride)."),
                  (r"adaptive_(?:avg|max)_pool\w*|adaptive pooling",
                   "The exporter writes adaptive pooling as a plain pooling with a fixed kernel, which exists only "
                   "when the output size divides the input size; here it does not (e.g. a 7x7 map pooled to 3x3).",
                   "Make the sizes divide: pool to an output size that divides the feature map, or resize the "
                   "input so that it does; or replace nn.AdaptiveAvgPool2d by nn.AvgPool2d with the kernel_size "
                   "and stride your fixed input size needs; or export with torch.onnx.export(..., dynamo=True)."),)),
    Family(
        "onnx-export-failed", "torch.export could not capture the model for ONNX",
        (r"Failed to export the model with torch\.export", r"GuardOnDataDependentSymNode",
         r"Could not guard on data-dependent expression"),
        "Step 1 of the ONNX export traces the model with torch.export, which rejects Python control "
        "flow that depends on tensor values (if x.sum() > 0) and other untraceable code.",
        "Replace data-dependent branches with torch.where or torch.cond, keep shapes static or declare "
        "dynamic_shapes, and read the 'The following call raised this error' lines for your source line.",
        check=None),
    # --------------------------------------------------------------- optimizer
    Family(
        "optimizer-empty", "an optimizer was given no parameters",
        (r"optimizer got an empty parameter list",),
        "The parameter iterator was empty: model.parameters() was already consumed (a generator can be "
        "iterated once), the model has no registered parameters (layers in a plain list), or every "
        "parameter was filtered out as frozen.",
        "Pass list(model.parameters()), register layers with nn.ModuleList/nn.ModuleDict, and check the "
        "requires_grad filter.", check=None),
    # --------------------------------------------------------------- context-dependent causes
    Family(
        "scheduler-before-optimizer", "lr_scheduler.step() ran before any optimizer.step()",
        (r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`",
         r"Seems like `optimizer\.step\(\)` has been overridden after learning rate scheduler initialization"),
        "The scheduler stepped before the optimizer ever did: the calls are in the wrong order (scheduler.step() "
        "at the top of the loop or before training), so the first value of the schedule is skipped.",
        "Call optimizer.step() first, then scheduler.step() (once per epoch or per batch, as the scheduler "
        "expects).",
        variants=((_AMP,
                   "With mixed precision this warning is expected and harmless: GradScaler skips optimizer.step() "
                   "while its initial scale (65536) overflows the fp16 gradients, so in the first iteration(s) the "
                   "scheduler steps without an optimizer step. Your order of calls is right.",
                   "Nothing to fix. To silence it, step the scheduler only when the optimizer stepped: "
                   "scale = scaler.get_scale(); scaler.step(optimizer); scaler.update(); "
                   "if scaler.get_scale() >= scale: scheduler.step()."),)),
    Family(
        "amp-fp16-parameters", "GradScaler asked to unscale gradients of float16 parameters",
        (r"Attempting to unscale FP16 gradients",),
        "The parameters themselves are float16 (model.half(), weights loaded with torch_dtype=torch.float16, "
        "or one layer cast to half), so their gradients are fp16. GradScaler is for float32 parameters trained "
        "under autocast: it unscales fp32 gradients, and fp16 updates lose small steps.",
        "Keep the trainable parameters in float32 (model.float(), or cast only the trainable ones, e.g. LoRA "
        "adapters, to float32) and run the forward pass under torch.autocast(device_type, dtype=torch.float16); "
        "or train in bfloat16 without a GradScaler.", check="amp-scale-collapse"),
    Family(
        "deterministic-algorithm", "an operation has no deterministic implementation in deterministic mode",
        (r"does not have a deterministic implementation, but you set 'torch\.use_deterministic_algorithms\(True\)'",
         r"Deterministic behavior was enabled with either `?torch\.use_deterministic_algorithms\(True\)"),
        "torch.use_deterministic_algorithms(True) is on and this operation (typically a CUDA scatter/index_add/"
        "histc/interpolate backward) has only a nondeterministic kernel, so PyTorch refuses to run it.",
        "Use the escape hatches: torch.use_deterministic_algorithms(True, warn_only=True) to run it anyway "
        "with a warning, turn determinism off around that one operation, or replace the op (run it on the CPU, "
        "or use a deterministic formulation).",
        variants=((r"CuBLAS|CUBLAS_WORKSPACE_CONFIG",
                   "Deterministic mode is on and cuBLAS (CUDA >= 10.2) is only deterministic with a fixed "
                   "workspace, which must be configured before CUDA starts.",
                   "Set the environment variable before the process starts: CUBLAS_WORKSPACE_CONFIG=:4096:8 "
                   "(or :16:8), e.g. `CUBLAS_WORKSPACE_CONFIG=:4096:8 python train.py`; or use "
                   "torch.use_deterministic_algorithms(True, warn_only=True)."),)),
    Family(
        "inference-tensor", "a tensor made under torch.inference_mode() used by autograd",
        (r"Inference tensors can(?:not|'t) be saved for backward",
         r"Inplace update to inference tensor outside InferenceMode is not allowed",
         r"Setting requires_grad=True on inference tensor outside InferenceMode is not allowed",
         r"Inference tensors do not track version counter"),
        "A tensor created inside torch.inference_mode() (a cached embedding, a buffer or mask computed once "
        "under inference_mode, outputs of a generation or evaluation step, a function decorated with "
        "@torch.inference_mode()) reached code that autograd records: inference tensors can never join a "
        "graph.",
        "Create tensors that training will use under torch.no_grad() instead of torch.inference_mode(), or "
        "take a normal copy outside inference mode (t = t.clone()); keep @torch.inference_mode() off methods "
        "that training calls too.", check="inference-grad"),
    Family(
        "multi-output-view-inplace", "in-place change of a view returned by split/chunk/unbind",
        (r"Output \d+ of \w+ is a view and is being modified inplace\. This view is (?:the|an) output of a "
         r"function that returns multiple views",
         r"A view was created in no_grad mode and is being modified inplace with grad mode enabled",
         r"is a view and its base or another view of its base has been modified inplace"),
        "split(), chunk(), unbind() (and iterating a tensor) return several views of one tensor; autograd cannot "
        "track an in-place change of one of them (x1 *= 2, x1[...] = ..., relu_(x1)).",
        "Use the out-of-place form (x1 = x1 * 2), or .clone() the piece before changing it; to change the "
        "whole tensor, change it before splitting.", check="inplace-saved"),
    Family(
        "batchnorm-single-sample", "BatchNorm in training mode on a batch of one",
        (r"Expected more than 1 value per channel when training(?!, got input size \{)(?:, got input size (?:torch\.Size\()?\[?"
         r"(?P<shape>[\d, ]+))?",),
        "BatchNorm needs at least two values per channel to compute batch statistics; a batch of one "
        "sample reached it in training mode (usually the last, short batch of an epoch).",
        "Use DataLoader(..., drop_last=True) for training; call model.eval() for single-sample inference.",
        check="batchnorm-single-sample", detail=_batchnorm_detail,
        variants=((_DATA_PARALLEL,
                   "DataParallel splits each batch across the GPUs, so every replica's BatchNorm sees only its "
                   "share: a batch smaller than twice the number of GPUs (often the last one) gives some GPU a "
                   "single sample.",
                   "Make every batch at least 2 x the number of GPUs (batch_size a multiple of it, and "
                   "drop_last=True for the short last batch); better, use DistributedDataParallel with a "
                   "per-GPU batch size and SyncBatchNorm."),)),
)

FAMILY_IDS = tuple(f.id for f in FAMILIES)


# ------------------------------------------------------------------------------------------ matching
def _line_at(text: str, start: int, end: int) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line = text[line_start: line_end if line_end != -1 else len(text)].strip()
    return line if len(line) <= 300 else line[:297] + "..."


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_LIBRARY = re.compile(r"site-packages|dist-packages|[/\\]lib[/\\]python\d|[/\\]Lib[/\\]|^<")


def _user_frame_before(text: str, position: int) -> str | None:
    """'file:line' of the last traceback frame before ``position`` that is not library code."""
    found = None
    for frame in _FRAME.finditer(text, 0, position):
        if not _LIBRARY.search(frame.group("file")):
            found = f"{frame.group('file')}:{frame.group('line')}"
    return found


def _unwrap(text: str) -> tuple[str, str]:
    """The text with its line breaks removed: as a space, and (for words split by the wrap) as nothing."""
    return re.sub(r"[ \t]*\n[ \t]*", " ", text), re.sub(r"[ \t]*\n[ \t]*", "", text)


def explain_text(text: str, context: str = "") -> list[Explanation]:
    """Every error family recognised in ``text``, most specific first.

    A later family never re-explains a span an earlier one already explained. A message wrapped across
    lines (as pasted into an issue) is recognised too. ``context`` (e.g. the traceback's frames) is
    consulted by context-dependent patterns and causes, never matched as a message itself.
    """
    found: list[Explanation] = []
    spans: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}
    texts = (text, *_unwrap(text))
    background = f"{text}\n{context}"
    for family in FAMILIES:
        explanation = _match(family, texts, spans, background)
        if explanation is not None:
            found.append(explanation)
    return found


def _match(family: Family, texts: tuple[str, ...], spans: dict[int, list[tuple[int, int]]],
           background: str) -> Explanation | None:
    for index, candidate in enumerate(texts):
        seen = False
        for pattern, needs in family.compiled():
            match = pattern.search(candidate)
            if match is None or (needs is not None and needs.search(background) is None):
                continue
            seen = True
            start, end = match.span()
            if any(start < s_end and s_start < end for s_start, s_end in spans[index]):
                continue
            spans[index].append((start, end))
            read = [_words(match.group(0))]
            if needs is not None:
                read.append(_context_words(background, needs.search(background)))
            detail = family.detail(match) if family.detail else None
            cause, fix = family.cause, family.fix
            for context, variant_cause, variant_fix in family.variants:
                hint = re.search(context, background, _FLAGS)
                if hint:
                    cause, fix = variant_cause, variant_fix
                    read.append(_context_words(background, hint))
                    break
            override = family.case(match) if family.case else None
            if override:
                cause, fix = override
            location = _user_frame_before(candidate, start) if index == 0 else _user_frame_before(texts[0],
                                                                                                    len(texts[0]))
            read = [words for i, words in enumerate(read)
                    if words and not any(words in other or other in words for other in read[:i])]
            return Explanation(family.id, family.title, family.check, _line_at(candidate, start, end), cause, fix,
                               detail, location, tuple(read))
        if seen:  # found as written (already explained): its unwrapped copies are the same words
            return None
    return None


def _context_words(text: str, hint: re.Match[str] | None) -> str:
    """The line of ``text`` where a context pattern matched (a frame, a line of code), as words."""
    return _words(_line_at(text, hint.start(), hint.end())) if hint else ""


def _words(text: str, limit: int = 100) -> str:
    words = " ".join(text.split())
    return words if len(words) <= limit else words[: limit - 3] + "..."


def explain_exception(error: BaseException) -> Explanation | None:
    """The best explanation of an exception (its type and message, read with its traceback's frames), or None."""
    import traceback

    text = f"{type(error).__name__}: {error}"
    frames = "".join(traceback.format_tb(error.__traceback__)) if error.__traceback__ is not None else ""
    found = explain_text(text, context=frames)
    return found[0] if found else None


def family(family_id: str) -> Family:
    for item in FAMILIES:
        if item.id == family_id:
            return item
    raise KeyError(family_id)


# ------------------------------------------------------------------------------------------ CLI
def cli_main(args: argparse.Namespace) -> int:
    """``torchwork explain [FILE | -]``: 0 when something was recognised, 1 when nothing was."""
    from torchwork.errors import ConfigError

    source = args.file
    if source in (None, "-"):
        if sys.stdin.isatty():
            print("Paste the traceback or error message, then press Ctrl-D (Ctrl-Z Enter on Windows):",
                  file=sys.stderr)
        text = sys.stdin.read()
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"explain: no file {source!r}. Pass a file holding the traceback, or '-' "
                              "(or nothing) to read it from standard input.")
        text = path.read_text(encoding="utf-8", errors="replace")
    found = explain_text(text)
    if args.json:
        print(json.dumps({"explanations": [e.to_dict() for e in found]}, indent=2))
    elif not found:
        print("torchwork explain: no known PyTorch error in the text. Paste the whole traceback, "
              "including the last line (the exception and its message).")
    else:
        print("\n\n".join(e.format() for e in found))
    return 0 if found else 1


