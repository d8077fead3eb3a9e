"""The training entry points of real repositories that ``benchmarks/doctor_precision.py`` runs, on the CPU,
their code unmodified, with tiny synthetic data: what each one reads is written for it before it runs
(MNIST's idx files where ``datasets.MNIST`` looks for them, a word corpus where ``--data`` points), and its
command-line settings make it small (one epoch, small batches, small layers).

The two tensor-parallel examples (where pytorch/examples#1424, the missing ``zero_grad``, is) run as
``torchrun --nproc-per-node 2`` on the CPU: each rank runs ``doctor_rank.py``, which tells the script that
the CPU is its accelerator (``torch.accelerator`` answers "cpu", 2 devices) so that its GPU check passes and
its device mesh is made on the CPU (gloo); the script itself is unchanged.

The repositories are the 7 torch-preflight scanned (its spike 0002): pytorch/examples, pytorch/tutorials,
torchtune, litgpt, trl, LLaMA-Factory, transformers' ``examples/pytorch``. :data:`NOT_RUN` says, for each
entry point that is not run, why. Nothing here fetches anything: the benchmark is given local checkouts.
trl's and litgpt's are their packages as pip installs them, which hold the repositories' files at those tags
(``pip install --target DIR --no-deps trl==1.16.0 litgpt==0.5.13 datasets accelerate lightning
pytorch-lightning lightning-utilities torchmetrics jsonargparse docstring-parser typeshed-client dill
multiprocess xxhash fsspec``: no torch pulled in; the benchmark is given ``--site DIR``); litgpt is run
through the console script pip writes (``bin/litgpt``), as its README runs it. torchtune's is its wheel too,
whose ``recipes/`` folder is the repository's (``pip install --target DIR --no-deps torchtune==0.6.1
torchdata==0.11.0 torchao==0.10.0 omegaconf antlr4-python3-runtime==4.9.3 sentencepiece tiktoken blobfile``;
torchtune 0.6.1 imports ``torchao.dtypes.nf4tensor``, which torchao 0.11 and later no longer have); each recipe
is run as ``tune run`` runs it, the file with ``--config``. LLaMA-Factory 0.9.5 pins transformers <= 5.6, trl <=
0.24, datasets <= 4.0 and accelerate <= 1.11, older than what the other entries import, so its folder is a
``pip install --target DIR --no-deps llamafactory==0.9.5 transformers==5.6.0 trl==0.24.0 datasets==4.0.0
accelerate==1.11.0 peft==0.18.1 huggingface-hub==1.5.0 tokenizers==0.22.2 tyro==0.8.14 torchaudio==2.11.1 fire
omegaconf antlr4-python3-runtime==4.9.3 einops dill==0.3.8 multiprocess==0.70.16 xxhash fsspec==2025.3.0
torchdata==0.11.0 sentencepiece tiktoken`` of its own, and its entries are measured in a child process with that
folder first on the path (``doctor_apart.py``; never ``--site``). torchaudio 2.11.1, the newest on PyPI, has no
build for torch 2.13: delete its compiled libraries (``DIR/torchaudio/lib/*.so``) and it imports as Python alone;
LLaMA-Factory imports it at start and its text stages never call it. Each stage is run as its README runs it,
``llamafactory-cli train <stage>.yaml`` (the console script, ``bin/llamafactory-cli``). Their tiny models and
data: ``doctor_repos_llm.py``.

Example:
    >>> sorted({entry.repo for entry in ENTRIES})
    ['examples', 'litgpt', 'llamafactory', 'torchtune', 'trl', 'tutorials']
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.machinery
import importlib.util
import os
import random
import runpy
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from doctor_repos_llm import FACTORY_STAGES, tiny_litgpt, tiny_llama, tiny_llamafactory, tiny_torchtune


@dataclasses.dataclass(frozen=True)
class Entry:
    """One training entry point: ``python SCRIPT ARGS`` run in ``<base>/run`` after ``prepare(base, checkout)``."""

    repo: str  # the NAME of a NAME=PATH checkout
    name: str
    script: str  # relative to the checkout
    args: tuple[str, ...]
    prepare: Callable[[Path, Path], None]
    needs: str = ""  # a module that must be importable (else the entry is not run, and the table says why)
    ranks: int = 0  # > 0: launched by torchrun with that many CPU ranks (doctor_rank.py), each doctored
    apart: bool = False  # measured in a child process with the checkout first on its path (doctor_apart.py)
    # the repository's own packages, relative to the checkout: installed with pip --target, they would be library
    # code to the doctor (torchwork doctor --user-code), as a package in site-packages is; here they are the code
    # under diagnosis, as in the repository's own checkout
    user_code: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.repo}/{self.name}"


def _mnist(folder: Path, train: int = 320, test: int = 128, name: str = "MNIST") -> None:
    """MNIST's four idx files as torchvision's ``datasets.MNIST`` reads them (random pixels and labels); with
    ``name="FashionMNIST"``, where ``datasets.FashionMNIST`` reads the same four files."""
    raw = folder / name / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for prefix, count in (("train", train), ("t10k", test)):
        pixels = bytes(rng.randrange(256) for _ in range(count * 28 * 28))
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, count, 28, 28) + pixels)
        labels = bytes(rng.randrange(10) for _ in range(count))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, count) + labels)


def _mnist_above(base: Path, checkout: Path) -> None:  # datasets.MNIST('../data') from the working folder
    _mnist(base / "data")


def _mnist_here(base: Path, checkout: Path) -> None:  # MNIST("./data/")
    _mnist(base / "run" / "data")


def _fashion_here(base: Path, checkout: Path) -> None:  # datasets.FashionMNIST(root="data", download=True)
    _mnist(base / "run" / "data", name="FashionMNIST")


def _vae(base: Path, checkout: Path) -> None:
    _mnist(base / "data")
    (base / "run" / "results").mkdir()  # save_image('results/...') expects the folder the repository ships


def _words(base: Path, checkout: Path) -> None:
    rng = random.Random(1)
    vocabulary = [f"w{i}" for i in range(60)]
    folder = base / "run" / "words"
    folder.mkdir()
    for split, lines in (("train", 300), ("valid", 60), ("test", 60)):
        text = "\n".join(" ".join(rng.choice(vocabulary) for _ in range(rng.randint(4, 14))) for _ in range(lines))
        (folder / f"{split}.txt").write_text(text + "\n", encoding="utf-8")


def _sine_waves(base: Path, checkout: Path) -> None:
    """traindata.pt as the repository makes it: its own generate_sine_wave.py, run in the working folder."""
    with working_folder(base / "run"), contextlib.redirect_stdout(None):
        runpy.run_path(str(checkout / "time_sequence_prediction" / "generate_sine_wave.py"), run_name="__main__")


def _nothing(base: Path, checkout: Path) -> None:
    pass


_SMALL = ("--epochs", "1", "--batch-size", "32", "--log-interval", "1000")
# trl's scripts: steps of 2 micro-batches of 4 rows, fp32 on the CPU, nothing saved or reported
_TRL = ("--model_name_or_path", "../model", "--output_dir", "out", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "2", "--report_to", "none", "--save_strategy", "no", "--seed", "0",
        "--use_cpu", "--bf16", "false")
# litgpt's CLI (the console script pip writes, bin/litgpt, is the entry: `litgpt finetune_full ...`):
# 6 optimizer steps of 2 micro-batches of 2 rows, a validation every 3 steps
_LITGPT = ("../checkpoint", "--data", "JSON", "--data.json_path", "../instructions.json",
           "--data.val_split_fraction", "0.1", "--train.max_steps", "6", "--train.global_batch_size", "4",
           "--train.micro_batch_size", "2", "--train.lr_warmup_steps", "1", "--train.max_seq_length", "64",
           "--eval.interval", "3", "--eval.max_iters", "2", "--eval.max_new_tokens", "4", "--out_dir", "out",
           "--precision", "32-true", "--devices", "1", "--logger_name", "csv")
# pytorch/tutorials (5.3 GB) is over the fetch tool's limit: its checkout here is these files, each read from the
# search index at the commit given (the one find_files lists for it) and written to the same path
TUTORIALS = {
    "beginner_source/basics/quickstart_tutorial.py": "afcd669d56554c2ef46f2da92edbfaf8c54043ec",
    "beginner_source/basics/optimization_tutorial.py": "802d68671f544c32347a2f1e780b80fcc2d8c9e7",
    "beginner_source/examples_nn/polynomial_nn.py": "90fb0068a1941e996b100fd9b4e05dbaa497076e",
    "beginner_source/examples_nn/polynomial_optim.py": "96efa19f4e1be1b64c5474c1f3ae18a47d98aa90",
    "beginner_source/examples_nn/polynomial_module.py": "c53e7d4efc0e39e455c531d21ec7db28ba220214",
}
_FASHION = {"quickstart_tutorial", "optimization_tutorial"}  # datasets.FashionMNIST(root="data", download=True)
ENTRIES: tuple[Entry, ...] = (
    Entry("examples", "mnist", "mnist/main.py", (*_SMALL, "--test-batch-size", "128", "--no-accel"), _mnist_above,
          "torchvision"),
    Entry("examples", "mnist_rnn", "mnist_rnn/main.py", (*_SMALL, "--test-batch-size", "128"), _mnist_above,
          "torchvision"),
    Entry("examples", "mnist_forward_forward", "mnist_forward_forward/main.py",
          ("--epochs", "20", "--train_size", "256", "--test_size", "128", "--no_accel", "--log-interval", "1000"),
          _mnist_here, "torchvision"),
    Entry("examples", "siamese_network", "siamese_network/main.py", (*_SMALL, "--no-accel"), _mnist_above,
          "torchvision"),
    Entry("examples", "vae", "vae/main.py", (*_SMALL, "--no-accel"), _vae, "torchvision"),
    Entry("examples", "dcgan", "dcgan/main.py",
          ("--dataset", "fake", "--batchSize", "16", "--imageSize", "64", "--niter", "1", "--workers", "0",
           "--ngf", "8", "--ndf", "8", "--nz", "16", "--outf", "out", "--manualSeed", "1"), _nothing, "torchvision"),
    Entry("examples", "regression", "regression/main.py", (), _nothing),
    Entry("examples", "word_language_model", "word_language_model/main.py",
          ("--data", "words", "--epochs", "1", "--emsize", "16", "--nhid", "16", "--nlayers", "1", "--bptt", "10",
           "--batch_size", "8", "--log-interval", "1000", "--save", "model.pt"), _words),
    Entry("examples", "tensor_parallel", "distributed/tensor_parallelism/tensor_parallel_example.py", (), _nothing,
          ranks=2),
    Entry("examples", "sequence_parallel", "distributed/tensor_parallelism/sequence_parallel_example.py", (),
          _nothing, ranks=2),
    Entry("examples", "time_sequence_prediction", "time_sequence_prediction/train.py", ("--steps", "1"),
          _sine_waves, "matplotlib"),
    Entry("trl", "sft", "trl/scripts/sft.py",
          ("--dataset_name", "../sft-data", "--max_steps", "8", "--max_length", "64", "--logging_steps", "4", *_TRL),
          tiny_llama, "trl", user_code=("trl",)),
    *(Entry("trl", name, f"trl/scripts/{name}.py",
            ("--dataset_name", "../preferences", "--max_steps", "6", "--max_length", "64", "--logging_steps", "3",
             *_TRL), tiny_llama, "trl", user_code=("trl",))
      for name in ("dpo", "reward", "kto")),
    Entry("trl", "grpo", "trl/scripts/grpo.py",  # the same tiny model scores the completions as a reward model
          ("--dataset_name", "../prompts", "--max_steps", "4", "--num_generations", "2", "--max_completion_length",
           "8", "--logging_steps", "2", "--reward_model_name_or_path", "../model", *_TRL), tiny_llama, "trl",
          user_code=("trl",)),
    *(Entry("litgpt", command, "bin/litgpt", (command, *_LITGPT), tiny_litgpt, "litgpt", user_code=("litgpt",))
      for command in ("finetune_full", "finetune_lora", "finetune_adapter", "finetune_adapter_v2")),
    *(Entry("torchtune", recipe, f"recipes/{recipe}.py", ("--config", f"../{settings}.yaml"), tiny_torchtune,
            "torchtune", user_code=("torchtune", "recipes"))
      for recipe, settings in (("full_finetune_single_device", "full"), ("lora_finetune_single_device", "lora"),
                               ("knowledge_distillation_single_device", "kd"))),
    *(Entry("tutorials", Path(path).stem, path, (), _fashion_here if Path(path).stem in _FASHION else _nothing,
            "torchvision" if Path(path).stem in _FASHION else "")
      for path in TUTORIALS),
    *(Entry("llamafactory", stage, "bin/llamafactory-cli", ("train", f"../{stage}.yaml"), tiny_llamafactory,
            "llamafactory", apart=True, user_code=("llamafactory",))
      for stage in FACTORY_STAGES),
)

# entry points of the 7 repositories not run here, and why (the report's table lists them)
NOT_RUN: dict[str, str] = {
    "examples/imagenet": "--dummy reads 1,281,167 fake images per epoch and no option makes an epoch shorter",
    "examples/fast_neural_style": "trains against VGG16's pretrained weights, a download",
    "examples/super_resolution, gcn, gat": "download their data sets at run time (not synthesised here)",
    "examples/reinforcement_learning": "needs gym, not installed",
    "examples/mnist_hogwild": "trains in worker processes (the runtime doctor watches its own process)",
    "examples/language_translation": "needs torchtext and spaCy models",
    "examples/distributed/tensor_parallelism/fsdp_tp_example.py": "fails on the CPU without the doctor too: "
                                                                  "CPU attention has no DTensor sharding strategy",
    "examples/distributed (ddp, rpc, FSDP2, ...)": "not tried: multi-process on GPUs",
    "pytorch/tutorials, the rest": "not run: those that download data or weights at run time (cifar10, transfer "
                                   "learning, fgsm, dcgan_faces, seq2seq, char_rnn's names; char_rnn also runs "
                                   "100,000 steps), GPU recipes, and those whose index copies are old versions: "
                                   "nlp/*.py of 2017-18 (autograd.Variable, test loops without no_grad that the "
                                   "repository has since fixed; advanced_tutorial's torch.cat of 0-d tensors fails "
                                   "on torch 2.13), examples_nn/dynamic_net (loss.data[0])",
    "transformers' examples/pytorch": "not run: the repository is over the fetch tool's size limit and its wheel has "
                                      "no examples; the search index holds 2021-22 copies (run_clm_no_trainer "
                                      "imports transformers.AdamW and huggingface_hub.Repository, both removed; "
                                      "run_glue loads its metric from the Hub), and that era's pins (tokenizers < "
                                      "0.13) have no wheel for Python 3.11",
    "LLaMA-Factory ppo, kto, multimodal stages": "not tried: PPO needs a trained reward model, KTO its own data "
                                                  "format, the multimodal plugins images and audio; sft (LoRA, full), "
                                                  "dpo and rm run",
    "torchtune distributed recipes, DPO, PPO, QAT": "not tried: multi-process on GPUs, reward models, torchao's "
                                                     "quantised training; the three single-device recipes run",
    "litgpt pretrain": "its data modules stream through litdata's optimize step (worker processes); the two "
                       "fine-tuning entries run",
}


@contextlib.contextmanager
def working_folder(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def forget_modules_under(folder: Path) -> None:
    """Drop the modules a run imported from its script's folder (``model``, ``data``: other entries have their own)."""
    root = str(folder.resolve()) + os.sep
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(root):
            del sys.modules[name]


_STAND_IN: list[Any] = []  # the torch.library.Library that must outlive the import


def importable(module: str, apart: Path | None = None) -> bool:
    """Whether ``module`` imports (found in the folder ``apart`` alone, when given). torchvision's wheel here is a CUDA build whose C++ operators cannot load
    against a CPU torch; its Python (datasets, transforms, models) works once the two operators it registers
    fakes for at import (``nms``, ``qnms``) are declared, so they are, and nothing calls them."""
    if apart is not None:
        return importlib.machinery.PathFinder.find_spec(module, [str(apart)]) is not None
    if importlib.util.find_spec(module) is None:
        return False
    if module != "torchvision":
        return True
    import torch

    try:
        import torchvision  # noqa: F401
    except RuntimeError as error:
        if "torchvision::" not in str(error):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        library = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _STAND_IN.append(library)
        import torchvision  # noqa: F401
    return True
