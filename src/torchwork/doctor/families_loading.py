"""Error families of state dicts and checkpoints, data loading, distributed training, downloads, installation and
export.

Part of the table :data:`torchwork.doctor.explain.FAMILIES` reads in order (after the shapes').
"""

from __future__ import annotations

import re

from torchwork.doctor.family import Family

_CHECKPOINT_ENTRIES = re.compile(r"^(?:epoch|iter\w*|step|global_step|best\w*|loss|optim\w*|sched\w*|lr\w*|scaler|"
                                 r"args|config|arch|amp|\w*state_dict\w*|model\w*|net\w*|network|weights|params)$",
                                 re.IGNORECASE)


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


LOADING_FAMILIES: tuple[Family, ...] = (
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
    # --------------------------------------------------------------- network
    Family(
        "download-unreachable", "a file downloaded at run time from a host this machine cannot reach",
        (r"We couldn't connect to '?https?://huggingface\.co", r"outgoing traffic has been disabled",
         r"cannot find the requested files in the (?:local|disk) cache", r"Failed to resolve '[^']+'",
         r"Name or service not known", r"Temporary failure in name resolution", r"Max retries exceeded with url",
         r"<urlopen error", r"Error downloading \S+"),
        "The script, or a library it calls (from_pretrained, load_dataset, torch.hub, a torchvision data set "
        "with download=True), downloads a file while it runs, and this machine cannot reach the host: no "
        "network, a firewall or proxy, or offline mode (HF_HUB_OFFLINE=1) with the file not in the cache.",
        "Download once on a machine with a network and point the script at the local copy: "
        "from_pretrained('/path/to/folder') with the folder `hf download NAME --local-dir FOLDER` wrote (a "
        "folder copied by hand under ~/.cache/huggingface is not found there), load_dataset on local files, "
        "a torchvision data set with its files under root= and download=False. Behind a proxy, set HTTPS_PROXY.",
        check=None),
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
)
