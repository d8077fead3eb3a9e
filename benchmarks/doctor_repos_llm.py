"""Tiny language-model checkpoints and data for the trl and litgpt entry points ``doctor_repos.py`` runs.

Both repositories fine-tune a pretrained causal language model from a local folder; nothing is downloaded,
so each entry gets a small model with random weights, saved the way that repository loads it, a word-level
tokenizer over a 200-word vocabulary, and a few dozen synthetic rows:

* trl's ``trl/scripts/sft.py``: a 2-layer Llama saved with ``save_pretrained`` (``<base>/model``, read by
  ``--model_name_or_path ../model``) and a folder of JSON Lines rows with a ``text`` column
  (``<base>/sft-data``, read by ``--dataset_name ../sft-data``);
* litgpt's ``finetune_full`` / ``finetune_lora``: litgpt's own ``pythia-14m`` configuration cut to 2 layers,
  ``lit_model.pth``, ``model_config.yaml`` and the tokenizer files in ``<base>/checkpoint``, and Alpaca-style
  instruction rows in ``<base>/instructions.json`` (``--data JSON``).

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


def _word_tokenizer() -> object:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocabulary = {token: index for index, token in enumerate([*SPECIAL, *WORDS])}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def tiny_llama(base: Path, checkout: Path) -> None:
    """trl's SFT entry: ``<base>/model`` (a 2-layer Llama and its tokenizer) and ``<base>/sft-data``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = base / "model"
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=_word_tokenizer(), bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>", unk_token="<unk>")
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(vocab_size=len(SPECIAL) + len(WORDS), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=128, bos_token_id=2, eos_token_id=3, pad_token_id=0)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    rng = random.Random(2)
    data = base / "sft-data"
    data.mkdir()
    rows = (json.dumps({"text": _sentence(rng, 8, 40)}) for _ in range(64))
    (data / "train.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")


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
    config = Config.from_name("pythia-14m", n_layer=2, block_size=128)
    save_config(config, folder)
    torch.manual_seed(0)
    torch.save(GPT(config).state_dict(), folder / "lit_model.pth")
    rng = random.Random(3)
    rows = [{"instruction": _sentence(rng, 3, 10), "input": "", "output": _sentence(rng, 2, 8)} for _ in range(48)]
    (base / "instructions.json").write_text(json.dumps(rows), encoding="utf-8")
