"""`torchwork explain`, issue 33 §2: older wordings, export errors, and causes read from the traceback's frames.

Issue 51 adds the four texts round 3 still missed (cuBLAS's allocation failure after token ids, the ONNX
exporter's other adaptive-pooling refusals, a checkpoint wrapping the state dict, BatchNorm's batch of one in
a DataParallel replica), each with its own cause and fix. Where the error can be raised on a CPU the test
raises it and explains the traceback PyTorch (or NumPy) produced; a GPU-only message is raised from a frame of the shape it has in real tracebacks (a
``validate`` function, a forward that calls an embedding) with PyTorch's own wording. Every explanation
says which words it read.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchwork.doctor.explain import explain_exception, explain_text

REAL = Path(__file__).resolve().parent / "real"
SRC = Path(__file__).resolve().parents[2] / "src"


def _raised(trigger: Callable[[], object]) -> BaseException:
    try:
        trigger()
    except BaseException as error:  # noqa: BLE001 - the exception under test
        return error
    raise AssertionError("the trigger raised nothing")


def _traceback_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


# ------------------------------------------------------------------------------ older and other wordings
@pytest.mark.parametrize("text,family,fix", [
    ("RuntimeError: CUDA error: out of memory", "cuda-oom", "Lower the batch size"),
    ("RuntimeError: size mismatch, m1: [64 x 784], m2: [512 x 10] at /pytorch/aten/src/TH/generic/THTensorMath.cpp:41",
     "matmul-shape", "expects 512 input features but received 784"),
    ("RuntimeError: mat1 dim 1 must match mat2 dim 0", "matmul-shape", "in_features"),
    ('  File "train.py", line 40, in <module>\n    loss.backward()\nRuntimeError: Found dtype Double but expected Float',
     "float-target-dtype", "float32"),
])
def test_older_wordings_of_known_errors_are_explained(text: str, family: str, fix: str) -> None:
    best = explain_text(text)[0]
    assert best.family == family and fix in f"{best.fix} {best.detail}", best
    assert best.read and best.read[0] in text


def test_an_onnx_export_of_adaptive_pooling_that_does_not_divide_is_explained() -> None:
    pool = nn.AdaptiveAvgPool2d((3, 3))  # a 7x7 map to 3x3: the exporter has no fixed kernel for it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter, the one that raises this
        error = _raised(lambda: torch.onnx.export(pool, (torch.randn(1, 2, 7, 7),), io.BytesIO(), dynamo=False))
    best = explain_text(_traceback_text(error))[0]
    assert best.family == "onnx-unsupported-operator", best
    assert "output size divides" in best.cause and "nn.AvgPool2d" in best.fix
    assert any("adaptive_avg_pool2d" in words for words in best.read), best.read


# ------------------------------------------------------------------------------ causes read from the frames
def _oom() -> None:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
                                 "23.65 GiB of which 1.06 GiB is free.")


def validate(model: nn.Module) -> None:
    model(torch.randn(2, 2))
    _oom()


def train_step(model: nn.Module) -> None:
    model(torch.randn(2, 2))
    _oom()


def test_out_of_memory_inside_validate_is_evaluation_without_no_grad() -> None:
    model = nn.Linear(2, 2)
    inside = explain_exception(_raised(lambda: validate(model)))
    assert inside.family == "cuda-oom" and "torch.no_grad()" in inside.fix.split(";")[0]
    assert any("in validate" in words for words in inside.read), inside.read
    elsewhere = explain_exception(_raised(lambda: train_step(model)))
    assert elsewhere.family == "cuda-oom" and elsewhere.fix.startswith("Lower the batch size")
    pasted = explain_text(_traceback_text(_raised(lambda: validate(model))))[0]
    assert pasted.fix == inside.fix


def test_numpy_mean_over_gpu_losses_is_fixed_in_torch_not_with_cpu() -> None:
    losses = [torch.randn((), device="meta") for _ in range(3)]  # meta stands in for cuda: same refusal
    error = _raised(lambda: np.sum(losses))
    best = explain_text(_traceback_text(error))[0]
    assert best.family == "numpy-device", best
    assert "torch.stack(losses).mean().item()" in best.fix and ".item()" in best.fix
    assert any(hint in words for hint in ("np.sum(", "fromnumeric", "_wrapreduction") for words in best.read), best.read
    plain = explain_exception(_raised(lambda: losses[0].numpy()))
    assert plain.family == "numpy-device" and plain.fix == "t.detach().cpu().numpy()."


class _Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding, self.fc = nn.Embedding(10, 4), nn.Linear(4, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return _cublas(self.fc(self.embedding(ids)))


def _cublas(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, "
                       "n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`")


def test_a_cublas_failure_after_an_embedding_is_an_index_out_of_range() -> None:
    best = explain_exception(_raised(lambda: _Tagger()(torch.tensor([[1, 2]]))))
    assert best.family == "cublas-after-embedding", best
    assert "CUDA_LAUNCH_BLOCKING=1" in best.fix and "num_embeddings" in best.fix
    assert any("self.embedding(ids)" in words for words in best.read), best.read
    alone = explain_text("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")[0]
    assert alone.family == "cublas-alloc-failed"  # index or memory: the CPU run decides (issue 51)


# ------------------------------------------------------------------------------ the right family, this case's fix
_DDP = """
import os, torch, torch.distributed as dist
from torch import nn
os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", os.environ["PORT"]
dist.init_process_group("gloo", rank=0, world_size=1)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.forgotten = nn.Linear(4, 4), nn.Linear(4, 4)
    def forward(self, x):
        return self.used(x)
model = nn.parallel.DistributedDataParallel(Net())
try:
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
except RuntimeError as error:
    print("RuntimeError: " + str(error))
dist.destroy_process_group()
"""


def _ddp_message(debug: bool, port: int) -> str:
    env = {**os.environ, "PORT": str(port), "OMP_NUM_THREADS": "1"}
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    if debug:
        env["TORCH_DISTRIBUTED_DEBUG"] = "INFO"
    run = subprocess.run([sys.executable, "-c", _DDP], capture_output=True, text=True, env=env, timeout=120)
    assert "Expected to have finished reduction" in run.stdout, run.stderr[-2000:]
    return run.stdout


def test_ddp_unused_layer_is_named_and_removing_it_comes_first() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    plain = explain_text(_ddp_message(debug=False, port=port))[0]
    assert plain.family == "ddp-unused-parameters"
    assert plain.fix.index("delete it or use it") < plain.fix.index("find_unused_parameters=True")
    assert "Parameters 2 3" in plain.detail
    named = explain_text(_ddp_message(debug=True, port=port))[0]
    assert "forgotten.weight" in named.detail and "the layer(s) forgotten" in named.detail, named.detail


def test_a_training_checkpoint_loaded_as_weights_is_told_to_load_its_entry() -> None:
    model = nn.Linear(3, 2)
    checkpoint = {"epoch": 7, "model_state_dict": model.state_dict(), "optimizer_state_dict": {}, "loss": 0.1}
    best = explain_exception(_raised(lambda: model.load_state_dict(checkpoint)))
    assert best.family == "state-dict-keys"
    assert "model.load_state_dict(checkpoint['model_state_dict'])" in best.detail, best.detail


class _Patches(nn.Module):
    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, 8))
        self.head = nn.Linear(8, 2)


def test_a_position_embedding_of_another_size_is_interpolated_not_a_new_head() -> None:
    saved = _Patches(tokens=17).state_dict()  # 4x4 patches + a class token
    best = explain_exception(_raised(lambda: _Patches(tokens=50).load_state_dict(saved)))  # 7x7 + 1
    assert best.family == "state-dict-size"
    assert "position embedding" in best.detail and "interpolate" in best.detail, best.detail
    head = explain_exception(_raised(lambda: nn.Linear(3, 2).load_state_dict(nn.Linear(3, 5).state_dict())))
    assert "number of classes" in head.detail


def test_batchnorm_on_one_sample_under_data_parallel_is_the_split_batch() -> None:
    # DataParallel splits only across GPUs; the frames are those of a real DataParallel traceback
    text = ('  File "train.py", line 52, in <module>\n    out = model(x)\n'
            '  File ".../site-packages/torch/nn/parallel/data_parallel.py", line 193, in forward\n'
            '    outputs = self.parallel_apply(replicas, inputs, module_kwargs)\n'
            '  File ".../site-packages/torch/nn/parallel/parallel_apply.py", line 108, in parallel_apply\n'
            '    output.reraise()\n'
            "ValueError: Caught ValueError in replica 1 on device 1.\n"
            "ValueError: Expected more than 1 value per channel when training, got input size torch.Size([1, 64])")
    best = explain_text(text)[0]
    assert best.family == "batchnorm-single-sample" and "2 x the number of GPUs" in best.fix
    alone = explain_exception(_raised(lambda: nn.BatchNorm1d(4)(torch.randn(1, 4))))
    assert "drop_last=True" in alone.fix and "GPUs" not in alone.fix


# ------------------------------------------------------------------------------ no new false match
def test_the_corpus_errors_keep_their_families_and_say_what_they_read() -> None:
    for error in json.loads((REAL / "errors.json").read_text(encoding="utf-8")):
        best = explain_text(error["text"])[0]
        assert best.family == error["family"], error["source"]
        assert best.read and all(words for words in best.read)
        assert "read:" in best.format()


@pytest.mark.parametrize("function,validation", [("val_epoch", True), ("valid_one_epoch", True),
                                                 ("evaluation_loop", True), ("train_one_epoch", False),
                                                 ("interval_step", False)])
def test_which_frames_count_as_validation(function: str, validation: bool) -> None:
    text = (f'  File "train.py", line 88, in {function}\n    out = model(x)\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB")
    best = explain_text(text)[0]
    assert best.family == "cuda-oom" and ("torch.no_grad()" in best.fix.split(";")[0]) == validation


# ------------------------------------------------------------------------------ issue 51: the texts round 3 missed
# cuBLAS after GPT-2's wte (PyTorch's wording, as pasted in huggingface/transformers#12935)
class _GPT2(nn.Module):
    """GPT-2's shape: the ids go through `wte`, and the first cuBLAS call is the attention's c_attn."""

    def __init__(self) -> None:
        super().__init__()
        self.wte, self.c_attn = nn.Embedding(10, 4), nn.Linear(4, 12)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden_states = self.wte(input_ids)
        return _addmm(self.c_attn, hidden_states)


def _addmm(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")


def test_cublas_alloc_failed_when_token_ids_go_in_is_the_index_not_memory() -> None:
    gpt_model = _GPT2()
    input_ids = torch.randint(0, 10, (4, 8))  # the ids ran to 100_000 with a vocabulary of 50_257
    best = explain_exception(_raised(lambda: gpt_model(input_ids=input_ids)))
    assert best.family == "cublas-after-embedding", best
    assert "num_embeddings" in best.fix and "not a memory problem" in best.fix
    assert "resize_token_embeddings" in best.fix


def test_cublas_alloc_failed_alone_names_the_index_before_memory() -> None:
    best = explain_text("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")[0]
    assert best.family == "cublas-alloc-failed"
    assert best.fix.index("num_embeddings") < best.fix.index("lower the batch size")
    assert "CUDA_LAUNCH_BLOCKING=1" in best.fix
    true_oom = explain_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB")[0]
    assert true_oom.family == "cuda-oom" and true_oom.fix.startswith("Lower the batch size")


# ------------------------------------------------------------------------------ ONNX export of adaptive pooling
class _Pool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


class _PoolToHalf(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x, (x.shape[2] // 2, x.shape[3] // 2))


def _export(model: nn.Module, **options: object) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation: it is the one that raises these
        error = _raised(lambda: torch.onnx.export(model, (torch.randn(1, 2, 12, 12),), io.BytesIO(), dynamo=False,
                                                  input_names=["x"], **options))
    return _traceback_text(error)


@pytest.mark.parametrize("model,axes,cause,fix", [
    (_Pool, {0: "batch", 2: "height", 3: "width"}, "dynamic_axes", "dynamic_axes only for the batch"),
    (_PoolToHalf, {2: "height", 3: "width"}, "computed from a tensor's shape", "constant output size"),
])
def test_onnx_adaptive_pooling_failures_get_their_own_cause(model: type[nn.Module], axes: dict[int, str], cause: str,
                                                           fix: str) -> None:
    best = explain_text(_export(model(), dynamic_axes={"x": axes}))[0]
    assert best.family == "onnx-unsupported-operator", best
    assert cause in best.cause and fix in best.fix, best
    assert "divides" not in best.cause


def test_the_oldest_adaptive_pooling_wording_is_explained() -> None:
    # https://github.com/pytorch/pytorch/issues/19954 (PyTorch 1.0/1.1: global pooling only)
    best = explain_text("RuntimeError: Only output_size=[1, 1] is supported")[0]
    assert best.family == "onnx-unsupported-operator" and "nn.AvgPool2d" in best.fix


# ------------------------------------------------------------------------------ a checkpoint wrapping the state dict
@pytest.mark.parametrize("wrapper,entry", [
    (lambda sd: {"state_dict": sd, "epoch": 3}, "state_dict"),
    (lambda sd: {"epoch": 90, "arch": "resnet18", "state_dict": sd, "best_acc1": 0.7, "optimizer": {}}, "state_dict"),
    (lambda sd: {"epoch": 4, "global_step": 800, "pytorch-lightning_version": "2.4.0", "state_dict": sd,
                 "optimizer_states": [], "lr_schedulers": []}, "state_dict"),
])
def test_a_checkpoint_wrapping_the_state_dict_gets_the_load_of_its_entry_as_the_fix(
        wrapper: Callable[[dict[str, torch.Tensor]], dict[str, object]], entry: str) -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    best = explain_text(_traceback_text(_raised(lambda: model.load_state_dict(wrapper(model.state_dict())))))[0]
    assert best.family == "state-dict-keys"
    assert f"checkpoint[{entry!r}]" in best.fix and "weights_only=True" in best.fix, best.fix
    assert "wraps the state dict" in best.cause and "module." not in best.fix
    prefixed = {f"module.{k}": v for k, v in model.state_dict().items()}
    other = explain_text(_traceback_text(_raised(lambda: model.load_state_dict(prefixed))))[0]
    assert "wraps the state dict" not in other.cause  # a prefix is not a wrapped checkpoint


# ------------------------------------------------------------------------------ BatchNorm's batch of one under DataParallel
_REPLICA = ('Traceback (most recent call last):\n  File "train.py", line 88, in <module>\n    outputs = model(images)\n'
            '  File ".../site-packages/torch/nn/parallel/data_parallel.py", line 171, in forward\n'
            "    outputs = self.parallel_apply(replicas, inputs, kwargs)\n"
            '  File ".../site-packages/torch/_utils.py", line 425, in reraise\n    raise self.exc_type(msg)\n'
            "ValueError: Caught ValueError in replica 1 on device 1.\nOriginal Traceback (most recent call last):\n"
            '  File ".../site-packages/torch/nn/parallel/parallel_apply.py", line 60, in _worker\n'
            "    output = module(*input, **kwargs)\n"
            '  File "network/aspp.py", line 167, in forward\n    img_features = self.img_conv(img_features)\n'
            '  File ".../site-packages/torch/nn/functional.py", line 2448, in batch_norm\n'
            "    raise ValueError('Expected more than 1 value per channel when training, got input size {}'"
            ".format(size))\n")


def test_batchnorm_batch_of_one_in_a_data_parallel_replica_gets_the_split_and_its_fix() -> None:
    error = _raised(lambda: nn.BatchNorm2d(256).train()(torch.randn(1, 256, 1, 1)))
    best = explain_text(_REPLICA + f"{type(error).__name__}: {error}\n")[0]
    assert best.family == "batchnorm-single-sample"
    assert "splits each batch across the GPUs" in best.cause
    assert "2 x the number of GPUs" in best.fix and "drop_last=True" in best.fix
    assert best.detail and "pooled to 1x1" in best.detail, best  # read from the real message, not the raise line
    assert "[1, 256, 1, 1]" in best.matched
