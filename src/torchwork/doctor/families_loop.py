"""Error families of the training loop whose cause depends on the context: the optimizer, schedulers, AMP,
determinism, inference mode, views and BatchNorm.

Part of the table :data:`torchwork.doctor.explain.FAMILIES` reads in order (its last part).
"""

from __future__ import annotations

import re

from torchwork.doctor.family import Family

_DATA_PARALLEL = r"parallel_apply|data_parallel\.py|DataParallel|replicas?\b"
_AMP = r"GradScaler|scaler\.|\bamp\b|autocast|fp16|float16|Gradient overflow|mixed precision"


def _batchnorm_detail(m: re.Match[str]) -> str | None:
    shape = [int(v) for v in re.findall(r"\d+", m.groupdict().get("shape") or "")]
    if len(shape) > 2 and shape[0] == 1 and all(d == 1 for d in shape[2:]):
        return (f"The input is {shape}: one sample whose feature map was pooled to 1x1 (a BatchNorm after global "
                "pooling, such as an ASPP image-pooling branch), so each channel holds one value: every device "
                "needs at least 2 samples per step, whatever the image size.")
    if shape and shape[0] == 1:
        return f"The input is {shape}: a batch of one sample (on this device) reached BatchNorm in training mode."
    return None


LOOP_FAMILIES: tuple[Family, ...] = (
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
