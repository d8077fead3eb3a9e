"""Tiny language-model checkpoints and data for the trl, litgpt and torchtune entry points ``doctor_repos.py`` runs.

Each repository fine-tunes a pretrained causal language model from a local folder; nothing is downloaded,
so each entry gets a small model with random weights, saved the way that repository loads it, a word-level
tokenizer over a 200-word vocabulary, and a few dozen synthetic rows:

* trl's ``trl/scripts/{sft,dpo,reward,kto,grpo}.py``: a 2-layer Llama saved with ``save_pretrained``
  (``<base>/model``, read by ``--model_name_or_path ../model``) and folders of JSON Lines rows: ``text``
  (``<base>/sft-data``), ``prompt``/``chosen``/``rejected`` (``<base>/preferences``, for DPO, the reward
  model and KTO) and ``prompt`` (``<base>/prompts``, for GRPO);
* litgpt's ``finetune_full``, ``finetune_lora``, ``finetune_adapter`` and ``finetune_adapter_v2``: litgpt's own
  ``pythia-14m`` configuration cut to 3 layers (its adapters start at layer 2: with 2, nothing would train),
  ``lit_model.pth``, ``model_config.yaml`` and the tokenizer files in ``<base>/checkpoint``, and Alpaca-style
  instruction rows in ``<base>/instructions.json`` (``--data JSON``);
* torchtune's single-device recipes (full, LoRA, knowledge distillation): a 2-layer ``llama2`` saved in Meta's
  format (``<base>/checkpoint/model.pth``, read by ``FullModelMetaCheckpointer``), a SentencePiece word model
  trained on the vocabulary (``<base>/tokenizer.model``), the same Alpaca-style rows, and one configuration per
  recipe (``<base>/full.yaml``, ``lora.yaml``, ``kd.yaml``), written in the keys the recipes read;
* LLaMA-Factory's ``llamafactory-cli train`` for the stages sft (LoRA and full), dpo and rm: trl's Llama, the
  Alpaca-style rows and preference pairs in ``<base>/data`` with its ``dataset_info.json``, and one configuration
  per stage (``<base>/sft_lora.yaml``, ...).

Example:
    >>> WORDS[:2], len(WORDS)
    (('w0', 'w1'), 200)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SPECIAL = ("<pad>", "<unk>", "<s>", "</s>")  # ids 0-3: padding, unknown, start and end of text
WORDS = tuple(f"w{i}" for i in range(200))  # the rest of the vocabulary


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _instruction_rows(rng: random.Random, count: int = 48) -> list[dict[str, str]]:
    """Alpaca-style rows (instruction, empty input, output) of random words."""
    return [{"instruction": _sentence(rng, 3, 10), "input": "", "output": _sentence(rng, 2, 8)} for _ in range(count)]


def _word_tokenizer() -> object:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocabulary = {token: index for index, token in enumerate([*SPECIAL, *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def _save_llama(folder: Path) -> None:
    """A 2-layer Llama with random weights and the word tokenizer, saved with ``save_pretrained`` in ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=_word_tokenizer(), bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>", unk_token="<unk>")
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(vocab_size=len(SPECIAL) + len(WORDS), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=128, bos_token_id=2, eos_token_id=3, pad_token_id=0)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)


def tiny_llama(base: Path, checkout: Path) -> None:
    """trl's entries: ``<base>/model`` (a 2-layer Llama and its tokenizer) and their data set folders."""
    _save_llama(base / "model")
    rng = random.Random(2)
    _json_lines(base / "sft-data", [{"text": _sentence(rng, 8, 40)} for _ in range(64)])
    pairs = [{"prompt": _sentence(rng, 3, 8), "chosen": _sentence(rng, 2, 6), "rejected": _sentence(rng, 2, 6)}
             for _ in range(32)]
    _json_lines(base / "preferences", pairs)
    _json_lines(base / "prompts", [{"prompt": _sentence(rng, 3, 8)} for _ in range(32)])


# LLaMA-Factory's settings common to every stage: 6 steps of 2 micro-batches of 4 rows, fp32 on the CPU
_FACTORY = {"model_name_or_path": "../model", "do_train": True, "dataset_dir": "../data", "template": "default",
            "cutoff_len": 64, "overwrite_cache": True, "output_dir": "out", "overwrite_output_dir": True,
            "logging_steps": 3, "save_strategy": "no", "plot_loss": False, "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 2, "learning_rate": 1e-4, "max_steps": 6, "lr_scheduler_type": "cosine",
            "warmup_steps": 1, "report_to": "none", "bf16": False, "use_cpu": True, "seed": 0}
_FACTORY_LORA = {"finetuning_type": "lora", "lora_target": "all", "lora_rank": 4}
FACTORY_STAGES = {  # the configuration file's name: its stage, method and data set
    "sft_lora": {"stage": "sft", **_FACTORY_LORA, "dataset": "instructions"},
    "sft_full": {"stage": "sft", "finetuning_type": "full", "dataset": "instructions"},
    "dpo_lora": {"stage": "dpo", **_FACTORY_LORA, "dataset": "pairs"},
    "rm_lora": {"stage": "rm", **_FACTORY_LORA, "dataset": "pairs"},
}


def tiny_llamafactory(base: Path, checkout: Path) -> None:
    """LLaMA-Factory's ``llamafactory-cli train <base>/<stage>.yaml``: ``<base>/model`` (as trl's), Alpaca-style
    instruction rows and preference pairs in ``<base>/data`` with the ``dataset_info.json`` that names them, and one
    configuration per stage (JSON, which is YAML)."""
    _save_llama(base / "model")
    rng = random.Random(6)
    rows = _instruction_rows(rng)
    pairs = [{"instruction": _sentence(rng, 3, 8), "input": "", "chosen": _sentence(rng, 2, 6),
              "rejected": _sentence(rng, 2, 6)} for _ in range(32)]
    data = base / "data"
    data.mkdir()
    (data / "instructions.json").write_text(json.dumps(rows), encoding="utf-8")
    (data / "pairs.json").write_text(json.dumps(pairs), encoding="utf-8")
    columns = {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}
    catalogue = {"instructions": {"file_name": "instructions.json"},
                 "pairs": {"file_name": "pairs.json", "ranking": True, "columns": columns}}
    (data / "dataset_info.json").write_text(json.dumps(catalogue), encoding="utf-8")
    for name, stage in FACTORY_STAGES.items():
        (base / f"{name}.yaml").write_text(json.dumps({**_FACTORY, **stage}, indent=1), encoding="utf-8")


def _json_lines(folder: Path, rows: list[dict[str, str]]) -> None:
    """``folder/train.jsonl``: a data set folder as ``datasets.load_dataset(folder)`` reads it."""
    folder.mkdir(exist_ok=True)
    (folder / "train.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")


def tiny_litgpt(base: Path, checkout: Path) -> None:
    """litgpt's fine-tuning entries: ``<base>/checkpoint`` and ``<base>/instructions.json``."""
    import torch
    from litgpt import GPT, Config
    from litgpt.utils import save_config

    folder = base / "checkpoint"
    folder.mkdir()
    _word_tokenizer().save(str(folder / "tokenizer.json"))  # type: ignore[attr-defined]
    settings = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False,
                "tokenizer_class": "PreTrainedTokenizerFast"}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    config = Config.from_name("pythia-14m", n_layer=3, block_size=128)  # adapters start at layer 2
    save_config(config, folder)
    torch.manual_seed(0)
    torch.save(GPT(config).state_dict(), folder / "lit_model.pth")
    rng = random.Random(3)
    rows = _instruction_rows(rng)
    (base / "instructions.json").write_text(json.dumps(rows), encoding="utf-8")


_TUNE_LAYERS = {"num_layers": 2, "num_heads": 4, "num_kv_heads": 4, "embed_dim": 64, "max_seq_len": 128,
                "intermediate_dim": 128}


def _tune_tokenizer(base: Path) -> int:
    """``<base>/tokenizer.model``: a SentencePiece word model (ids 0-2: unknown, start, end); its vocabulary size."""
    import sentencepiece

    rng = random.Random(4)
    corpus = base / "corpus.txt"
    lines = [" ".join(WORDS)] * 3 + [_sentence(rng, 4, 20) for _ in range(200)]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    size = len(WORDS) + 3
    sentencepiece.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(base / "tokenizer"),
                                             vocab_size=size, model_type="word", unk_id=0, bos_id=1, eos_id=2,
                                             pad_id=-1, minloglevel=2)
    return size


def _tune_checkpointer(base: Path, out: str) -> dict[str, object]:
    return {"_component_": "torchtune.training.FullModelMetaCheckpointer", "checkpoint_dir": str(base / "checkpoint"),
            "checkpoint_files": ["model.pth"], "recipe_checkpoint": None, "output_dir": out, "model_type": "LLAMA2"}


def _tune_settings(base: Path, vocabulary: int) -> dict[str, object]:
    """full_finetune_single_device's settings: 6 steps of 2 micro-batches of 2 rows, fp32 on the CPU, with
    activation checkpointing (the recipes' default for large models)."""
    out = str(base / "run" / "out")
    return {
        "output_dir": out, "seed": 0, "shuffle": True, "resume_from_checkpoint": False,
        "tokenizer": {"_component_": "torchtune.models.llama2.llama2_tokenizer", "path": str(base / "tokenizer.model"),
                      "max_seq_len": 64},
        "dataset": {"_component_": "torchtune.datasets.alpaca_dataset", "source": "json", "split": "train",
                    "data_files": str(base / "instructions.json"), "packed": False},
        "model": {"_component_": "torchtune.models.llama2.llama2", "vocab_size": vocabulary, **_TUNE_LAYERS},
        "checkpointer": _tune_checkpointer(base, out),
        "batch_size": 2, "epochs": 1, "max_steps_per_epoch": 6, "gradient_accumulation_steps": 2,
        "optimizer": {"_component_": "torch.optim.AdamW", "lr": 1e-4, "fused": False},
        "lr_scheduler": {"_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
                         "num_warmup_steps": 1},
        "optimizer_in_bwd": False, "clip_grad_norm": None, "compile": False,
        "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
        "device": "cpu", "dtype": "fp32", "enable_activation_checkpointing": True,
        "enable_activation_offloading": False,
        "metric_logger": {"_component_": "torchtune.training.metric_logging.DiskLogger", "log_dir": f"{out}/logs"},
        "log_every_n_steps": 1, "log_peak_memory_stats": False,
        "profiler": {"_component_": "torchtune.training.setup_torch_profiler", "enabled": False},
    }


def tiny_torchtune(base: Path, checkout: Path) -> None:
    """torchtune's recipes: ``<base>/checkpoint``, ``<base>/tokenizer.model``, ``<base>/instructions.json`` and
    ``<base>/{full,lora,kd}.yaml`` (JSON, which is YAML; the recipes take ``--config ../full.yaml``)."""
    import torch
    from torchtune.models.convert_weights import tune_to_meta
    from torchtune.models.llama2 import llama2

    base = base.resolve()
    vocabulary = _tune_tokenizer(base)
    (base / "checkpoint").mkdir()
    torch.manual_seed(0)
    model = llama2(vocab_size=vocabulary, **_TUNE_LAYERS)
    torch.save(tune_to_meta(model.state_dict()), base / "checkpoint" / "model.pth")
    rng = random.Random(5)
    rows = _instruction_rows(rng)
    (base / "instructions.json").write_text(json.dumps(rows), encoding="utf-8")
    full = _tune_settings(base, vocabulary)
    lora = {**full, "model": {**full["model"], "_component_": "torchtune.models.llama2.lora_llama2",  # type: ignore[dict-item]
                              "lora_attn_modules": ["q_proj", "v_proj"], "apply_lora_to_mlp": True,
                              "apply_lora_to_output": False, "lora_rank": 4, "lora_alpha": 8, "lora_dropout": 0.1},
            "save_adapter_weights_only": False}
    distil = {**lora, "teacher_model": full["model"], "kd_ratio": 0.5,
              "teacher_checkpointer": _tune_checkpointer(base, f"{full['output_dir']}/teacher"),
              "kd_loss": {"_component_": "torchtune.modules.loss.ForwardKLWithChunkedOutputLoss"}}
    for name, settings in (("full", full), ("lora", lora), ("kd", distil)):
        (base / f"{name}.yaml").write_text(json.dumps(settings, indent=1), encoding="utf-8")
