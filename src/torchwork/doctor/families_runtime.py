"""Error families of autograd, devices, memory and the CUDA runtime: their messages, causes and fixes.

Part of the table :data:`torchwork.doctor.explain.FAMILIES` reads in order (this part first).
"""

from __future__ import annotations

import re

from torchwork.doctor.family import Family

# a traceback frame inside a validation/evaluation function of the user's (", line 12, in validate")
_EVAL_FRAME = r", line \d+, in (?:\w+_)?(?:valid\w*|val|evaluat\w*|eval)(?:_\w+)?\s*$"
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


def _device_detail(m: re.Match[str]) -> str | None:
    groups = {k: v for k, v in m.groupdict().items() if v}
    for first, second in (("a", "b"), ("c", "d")):
        if first in groups and second in groups:
            return f"Two devices met in one operation: {groups[first]} and {groups[second]}."
    return None


RUNTIME_FAMILIES: tuple[Family, ...] = (
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
)
