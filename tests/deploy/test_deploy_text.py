"""A text classifier on real tweets: bundled preprocessing, dynamic batch and length, EmbeddingBag advice."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
import torch
from deploy_helpers import eager, text_classifier, tweets
from torch import nn

from torchwork.deploy import TokenIdsPreprocessor, export, load_artifact, read_manifest, verify
from torchwork.errors import ConfigError, ExportError


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    model, preprocess = text_classifier()
    data = tweets()
    out = tmp_path_factory.mktemp("text") / "tweets"
    report = export(model, preprocess(data["train"][:8]), out, preprocess=preprocess, samples=data["test"],
                    targets=data["y_test"], labels=["negative", "positive"], softmax=True, verify_rounds=2,
                    threads=1)
    return out, report


def test_manifest_has_dynamic_batch_and_length_and_the_preprocessor(artifact):
    out, report = artifact
    assert report["ok"], report["refused"]
    manifest = read_manifest(out).to_json()  # the typed manifest as written on disk
    assert manifest["inputs"] == [{"name": "ids", "dtype": "int64", "shape": ["batch", "length"]},
                                  {"name": "lengths", "dtype": "int64", "shape": ["batch"]}]
    assert manifest["preprocess"] == {"class": "torchwork.deploy.preprocess:TokenIdsPreprocessor",
                                      "dir": "preprocess"}
    assert (out / "preprocess" / "vocab.json").is_file()
    assert manifest["samples"]["kind"] == "texts" and manifest["samples"]["count"] == 500
    probes = json.loads((out / "parity.json").read_text())["probes"]
    assert any("length" in p for p in probes) and "batch 64" in probes


def test_load_artifact_takes_raw_texts(artifact):
    out, _ = artifact
    model, preprocess = text_classifier()
    texts = tweets()["test"][:50]
    for variant in ("onnx", "pt2"):
        probabilities = load_artifact(out, variant, threads=1)(texts)
        torch.testing.assert_close(probabilities, torch.softmax(eager(model, *preprocess(texts)), dim=1),
                                   atol=1e-5, rtol=1e-4)
    labels = load_artifact(out).classify(["I would never trust a driverless car", ""])
    assert {row["label"] for row in labels} <= {"negative", "positive"}


@pytest.mark.parametrize(("batch", "length"), [(1, 3), (1, 120), (64, 5), (64, 120)])
def test_onnx_accepts_any_batch_and_length(artifact, batch, length):
    out, _ = artifact
    model, preprocess = text_classifier()
    ids, lengths = preprocess(tweets()["test"][:batch], max_length=length)
    if ids.shape[1] < length:  # pad to the probed length: padding must not change the outputs
        ids = torch.cat([ids, ids.new_zeros(batch, length - ids.shape[1])], dim=1)
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"ids": ids.numpy(), "lengths": lengths.numpy()})[0]
    np.testing.assert_allclose(got, eager(model, ids, lengths).numpy(), atol=1e-4, rtol=1e-3)


def test_verify_goes_through_the_bundled_preprocessing(artifact):
    out, _ = artifact
    report = verify(out, rounds=1, threads=1)
    assert report["ok"] and report["inputs"]["preprocessed"] and report["inputs"]["count"] == 500
    assert report["variants"]["onnx"]["top1_agreement"] == 1.0
    assert report["variants"]["pt2"]["accuracy"] > 0.7
    # 500 tweets in two chunks, shortest first, each padded on its own; the targets follow the rows
    assert report["inputs"]["parity_padding"].startswith("each chunk of 256 rows preprocessed on its own")
    model, preprocess = text_classifier()
    data = tweets()
    predicted = eager(model, *preprocess(data["test"])).argmax(dim=1)  # one batch, in the given order
    expected = float((predicted == torch.as_tensor(data["y_test"])).double().mean())
    assert report["variants"]["pt2"]["accuracy"] == pytest.approx(expected, abs=1 / 500)
    assert report["inputs"]["timing_inputs"].startswith("10 held-out rows of about median size, each alone in turn")


def test_batch_one_is_timed_on_ten_rows_around_the_median_size_each_in_turn(artifact, monkeypatch):
    """One row timed alone stood for every row: when INT8's fallback re-ran it, every timed call paid for it."""
    from torchwork.deploy import verification

    out, _ = artifact
    seen: list[tuple[int, ...]] = []
    timed = verification.interleaved_samples

    def watched(calls, rounds, repeat=1, **kwargs):
        if repeat == 10:  # the batch-1 blocks: record which row each call of the reference runs
            hook = model.register_forward_pre_hook(lambda module, args: seen.append(tuple(args[0][0].tolist())))
            try:
                return timed(calls, rounds, repeat, **kwargs)
            finally:
                hook.remove()
        return timed(calls, rounds, repeat, **kwargs)

    model, preprocess = text_classifier()
    monkeypatch.setattr(verification, "interleaved_samples", watched)
    verify(out, model=model, rounds=1, threads=1)
    texts = list(tweets()["test"])
    sizes = sorted(int(n) for n in preprocess(texts)[1])
    assert len(seen) == 2 + 10 and len(set(seen)) == 10  # two warm-up calls, then a block: each row once
    lengths = sorted(len(row) for row in set(seen))  # alone, a row is not padded
    middle = len(sizes) // 2
    assert sizes[middle - 5] <= lengths[0] and lengths[-1] <= sizes[middle + 5]  # the 10 around the median


def test_verify_takes_reference_outputs_already_computed_after_checking_them(artifact):
    """The recipe's evaluation has the eager outputs on the test split already: verify uses them instead of
    running eager over every row again, once the reference agrees with them on the first rows; outputs in
    another order, or another model's, are refused."""
    out, _ = artifact
    model, preprocess = text_classifier()
    texts = list(tweets()["test"])
    outputs = eager(model, *preprocess(texts))  # one batch padded to the longest, in the given order
    batches: list[int] = []  # parity runs chunks of 256 rows, timing batches of 1 and 64
    hook = model.register_forward_pre_hook(lambda module, args: batches.append(int(args[0].shape[0])))
    plain = verify(out, model=model, rounds=1, threads=1)
    assert 256 in batches
    batches.clear()
    given = verify(out, model=model, rounds=1, threads=1, reference_outputs=outputs)
    hook.remove()
    assert 256 not in batches and 32 in batches  # no parity chunk of eager; the first 32 rows checked
    for name in ("eager", "pt2", "onnx"):
        assert given["variants"][name]["ok"] and given["variants"][name]["accuracy"] == plain["variants"][name]["accuracy"]
        assert given["variants"][name]["max_abs"] <= 1e-5
    with pytest.raises(ConfigError, match="differ from the reference model's own outputs on the first 32 rows"):
        verify(out, model=model, rounds=1, threads=1, reference_outputs=outputs.flip(0))
    with pytest.raises(ConfigError, match="one row per input"):
        verify(out, model=model, rounds=1, threads=1, reference_outputs=outputs[:10])
    with pytest.raises(ConfigError, match="pass the samples too"):
        export(model, preprocess(texts[:8]), out.parent / "unused", preprocess=preprocess, sample_outputs=outputs)


def test_text_rows_are_timed_as_a_server_pads_them(artifact):
    """Batch 1: the 10 tweets around the median length, each alone; batch 64: the first 64 tweets padded to
    their own longest, not every row padded to the longest of the whole split."""
    from torchwork.deploy.parity_inputs import length_ordered
    from torchwork.deploy.verification import _timing_inputs

    out, _ = artifact
    _, preprocess = text_classifier()
    texts = list(tweets()["test"])
    schema = read_manifest(out).inputs
    ones, many = _timing_inputs(texts, preprocess, schema, length_ordered(texts, preprocess, schema, 256))
    lengths = sorted(int(preprocess([text])[0].shape[1]) for text in texts)
    middle = len(lengths) // 2
    assert len(ones) == 10 and all(one[0].shape[0] == 1 for one in ones)
    assert sorted(int(one[0].shape[1]) for one in ones) == lengths[middle - 5:middle + 5]
    first = [int(preprocess([text])[0].shape[1]) for text in texts[:64]]
    assert tuple(many[0].shape) == (64, max(first)) and max(first) < int(preprocess(texts)[0].shape[1])


def test_preprocessor_round_trip_and_empty_text(tmp_path):
    preprocess = TokenIdsPreprocessor.fit(["a good car", "a bad car", "good"], max_length=4)
    preprocess.save(tmp_path)
    again = TokenIdsPreprocessor.load(tmp_path)
    texts = ["good car!", "", "an unknown word here and more"]
    for first, second in zip(preprocess(texts), again(texts)):
        assert torch.equal(first, second)
    ids, lengths = again(texts)
    assert lengths.tolist() == [3, 1, 4] and ids[1].tolist()[0] == 1  # empty -> one unknown token


def test_preprocessor_vocabulary_names_match_the_text_preprocessor():
    texts = ["a a a b b c"]
    pre = TokenIdsPreprocessor.fit(texts, min_freq=2)
    assert pre.vocabulary == {"a": 2, "b": 3} and pre.vocab_size == 4
    assert TokenIdsPreprocessor.fit(texts, max_vocab=3).vocabulary == {"a": 2}  # padding, unknown, one word
    with pytest.warns(FutureWarning, match=r"max_words=N is max_vocab=N \+ 2"):
        old = TokenIdsPreprocessor.fit(texts, max_words=1)
    with pytest.warns(FutureWarning, match=r"write min_freq=\.\.\. instead \(same meaning\)"):
        old_count = TokenIdsPreprocessor.fit(texts, min_count=2)
    assert old.vocabulary == {"a": 2} and old_count.vocabulary == pre.vocabulary
    with pytest.raises(ConfigError, match="max_vocab=2 leaves no room"):
        TokenIdsPreprocessor.fit(texts, max_vocab=2)
    with pytest.raises(ConfigError, match="min_freq=0 must be at least 1"):
        TokenIdsPreprocessor.fit(texts, min_freq=0)


class LocalPreprocessor(TokenIdsPreprocessor):
    """A preprocessor outside the torchwork namespace: loading needs the caller's explicit trust."""


def test_preprocessors_outside_torchwork_need_trust(tmp_path):
    model, _ = text_classifier()
    texts = tweets()["test"][:20]
    local = LocalPreprocessor(text_classifier()[1].vocabulary, max_length=48)
    out = tmp_path / "local"
    export(model, local(texts[:4]), out, formats=("pt2",), preprocess=local)
    package = LocalPreprocessor.__module__.split(".")[0]  # how pytest imported this file
    with pytest.raises(ExportError, match=rf"outside the torchwork namespace.*trust=\('{package}',\)"):
        load_artifact(out)
    assert load_artifact(out, trust=(package,))(texts).shape == (20, 2)


class BagClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bag = nn.EmbeddingBag(1000, 16, mode="mean")
        self.classifier = nn.Linear(16, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.bag(ids))


def test_embedding_bag_gets_operator_advice_and_its_pt2_guard_is_caught(tmp_path):
    ids = torch.randint(0, 1000, (4, 12), generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match="written without"):
        report = export(BagClassifier(), ids, tmp_path / "bag", formats=("pt2", "onnx"), strict=False)
    # torch.export raises nothing, but its program carries a guard batch >= 2 that eager does not have.
    assert report["variants"] == ["onnx"]
    assert "batch 1" in report["refused"]["pt2"] and "Guard failed" in report["refused"]["pt2"]
    advice = " ".join(report["advice"])
    assert "EmbeddingBag 'bag' exports to an ONNX Loop" in advice and "Embedding + mean" in advice
    assert "The ONNX graph contains {'Loop'" in advice


def test_the_data_text_preprocessor_travels_in_the_artifact(tmp_path):
    """torchwork.data's TextPreprocessor (cleaning + vocabulary), reloaded by load_artifact from JSON."""
    text = pytest.importorskip("torchwork.data.text")
    model, _ = text_classifier()
    data = tweets()
    preprocess = text.TextPreprocessor.fit(data["train"], max_length=48)
    preprocess.vocab = preprocess.vocab[: model.embedding.num_embeddings]  # ids must fit the embedding
    preprocess = text.TextPreprocessor(preprocess.vocab, preprocess.cleaning, preprocess.max_length)
    out = tmp_path / "data_text"
    report = export(model, preprocess(data["train"][:8]), out, preprocess=preprocess, samples=data["test"],
                    targets=data["y_test"], verify_rounds=1, threads=1)
    assert report["ok"] and read_manifest(out).preprocess.class_spec == "torchwork.data.text:TextPreprocessor"
    texts = ["@someone I LOVE my self-driving car http://example.com", ""]
    torch.testing.assert_close(load_artifact(out)(texts), eager(model, *preprocess(texts)), atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------------------------------------- links out
def _move_out_and_link(artifact_dir, relative, elsewhere):
    """Move a member out of the artifact and leave a symlink to it: every checksum still matches."""
    import os
    import shutil

    target = elsewhere / relative.replace("/", "_")
    shutil.move(str(artifact_dir / relative), str(target))
    os.symlink(target, artifact_dir / relative)


def _link_to(artifact_dir, relative, target):
    import os

    (artifact_dir / relative).unlink()
    os.symlink(target, artifact_dir / relative)


def _fifo_outside(artifact_dir, relative, elsewhere):
    import os

    os.mkfifo(elsewhere / "fifo")  # opening it for reading would block until a writer comes
    _link_to(artifact_dir, relative, elsewhere / "fifo")


def _fifo_inside(artifact_dir, relative, elsewhere):
    import os

    (artifact_dir / relative).unlink()
    os.mkfifo(artifact_dir / relative)


def _extra_file(artifact_dir, relative, elsewhere):
    (artifact_dir / "preprocess" / "extra.json").write_text("{}")


@pytest.mark.parametrize(("relative", "damage", "message"), [
    ("preprocess", _move_out_and_link, r"preprocess/vocab.json leads outside the folder"),
    ("manifest.json", _move_out_and_link, r"manifest.json leads outside the folder"),
    ("preprocess/vocab.json", lambda a, r, e: _link_to(a, r, "/etc/passwd"),
     r"preprocess/vocab.json leads outside the folder \(to /etc/passwd\)"),
    ("model.onnx", lambda a, r, e: _link_to(a, r, "/dev/zero"), r"model.onnx leads outside the folder"),
    ("preprocess/vocab.json", _fifo_outside, r"preprocess/vocab.json leads outside the folder"),
    ("preprocess/vocab.json", _fifo_inside, r"preprocess/vocab.json is not a regular file \(a FIFO\)"),
    ("preprocess/extra.json", _extra_file, r"preprocess/extra.json is not in the manifest's file table"),
], ids=["preprocess-folder", "manifest", "system-file", "dev-zero", "fifo-outside", "fifo-inside", "unlisted"])
def test_links_out_of_the_artifact_and_special_files_are_refused_before_reading(
        artifact, tmp_path, within, relative, damage, message):
    import shutil

    copy, elsewhere = tmp_path / "artifact", tmp_path / "elsewhere"
    shutil.copytree(artifact[0], copy)
    elsewhere.mkdir()
    damage(copy, relative, elsewhere)
    with within(20):
        with pytest.raises(ExportError, match=message):
            load_artifact(copy)
        with pytest.raises(ExportError, match=message):  # the server's path: the file table is checked later
            read_manifest(copy, check_files=False)
            load_artifact(copy)


def test_an_oversized_tokenizer_json_is_refused_before_it_is_read(tmp_path):
    import json as json_module
    import time as time_module

    from torchwork.deploy.wordpiece import (
        MAX_TOKENIZER_BYTES,
        SETTINGS_FILE,
        TOKENIZER_FILE,
        SubwordTokenizer,
    )

    (tmp_path / SETTINGS_FILE).write_text(json_module.dumps({"max_length": 64, "tokenizer": TOKENIZER_FILE}))
    with open(tmp_path / TOKENIZER_FILE, "wb") as handle:  # sparse: its size, without the bytes
        handle.truncate(MAX_TOKENIZER_BYTES + 1)
    started = time_module.perf_counter()
    with pytest.raises(ConfigError, match="it is not a tokenizer to load"):
        SubwordTokenizer.load(tmp_path)
    with pytest.raises(ConfigError, match="it is not a tokenizer to load"):
        SubwordTokenizer.from_file(tmp_path / TOKENIZER_FILE)
    assert time_module.perf_counter() - started < 5  # refused from its size, not parsed


class _PerToken(nn.Module):
    """One score per token: an output whose shape follows the padding."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, 4)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids).sum(dim=2)


def test_verify_of_per_token_outputs_goes_back_to_one_padded_batch(tmp_path):
    _, preprocess = text_classifier()
    texts = tweets()["test"][:300]
    torch.manual_seed(0)
    out = tmp_path / "tokens"
    export(_PerToken(preprocess.vocab_size), preprocess(texts[:8]), out, formats=("onnx", "pt2"),
           preprocess=preprocess, samples=texts, verify_rounds=1, threads=1)
    report = verify(out, rounds=1, threads=1)
    assert report["ok"] and report["inputs"]["parity_padding"] == "one batch"
    assert report["variants"]["onnx"]["max_abs"] < 1e-5
