"""recipes/sentiment_transformer.py, its cheap parts: the learning-rate shape (linear warm-up, then linear decay
to zero), the fused AdamW, and ``transformer_max_length=0`` (fit's default) chosen from the training texts'
token lengths under MiniLM's real tokenizer, said on one line; a length given is kept. The whole fine-tuning
runs in tests/recipes/test_recipes_transformer.py (slow, on the quickstart's fixture)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch

from torchwork.recipes.sentiment import SentimentConfig
from torchwork.recipes.sentiment_transformer import adamw, warmup_decay, with_max_length
from torchwork.recipes.transformer_settings import TransformerSettings


def test_the_learning_rate_warms_up_linearly_then_decays_to_zero_at_the_last_step() -> None:
    factor = warmup_decay(100, 0.1)
    assert [factor(s) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert factor(10) == 1.0 and factor(55) == 0.5 and factor(100) == 0.0 and factor(120) == 0.0
    assert warmup_decay(3, 0.0)(0) == 1.0  # at least one warm-up step: never a zero learning rate at the start


def test_adamw_is_fused_on_the_cpu_and_takes_parameter_groups() -> None:
    weights, bias = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.zeros(1))
    optimizer = adamw([{"params": [weights], "lr": 1e-3}, {"params": [bias], "lr": 1e-2}], torch.device("cpu"))
    assert optimizer.defaults["fused"] is True and [g["lr"] for g in optimizer.param_groups] == [1e-3, 1e-2]


def test_max_length_zero_is_chosen_from_the_training_texts_and_a_given_one_is_kept(capsys) -> None:
    settings = TransformerSettings.of(SentimentConfig(transformer_max_length=0))
    texts = ["a short review"] * 19 + ["word " * 300]  # one text in twenty far longer: cut, not padded for
    chosen = with_max_length(settings, SimpleNamespace(texts=texts)).transformer_max_length
    said = capsys.readouterr().out
    assert chosen == 16  # the 95th percentile (5 tokens), rounded up to the floor of 16
    assert "95th percentile of the 20 training texts" in said and "5.0% of the texts are cut" in said
    pinned = dataclasses.replace(settings, transformer_max_length=40)
    assert with_max_length(pinned, None) is pinned and capsys.readouterr().out == ""
