"""The quickstart's transformer: length buckets, the tokenizer artifact preprocessor, settings, the report parts,
and (slow) a shortened ``quickstart --model transformer`` on the real MiniLM weights end to end: every file,
the artifact served by a real server process that never imports transformers, the report in Chromium."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fifo_guard import returns_within

from torchwork.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inspect"))
from chromium_page import CHROMIUM, render_in_chromium  # noqa: E402
from transformer_quickstart import transformer_quickstart  # noqa: E402


def test_length_buckets_cover_every_index_once_with_similar_lengths_and_reshuffle():
    from torchwork.recipes.buckets import LengthBuckets

    lengths = [(i * 37) % 50 + 3 for i in range(200)]
    buckets = LengthBuckets(lengths, batch_size=16, shuffle=True, seed=1)
    first, second = list(buckets), list(buckets)
    for epoch in (first, second):
        assert sorted(i for batch in epoch for i in batch) == list(range(200)) and len(epoch) == len(buckets) == 13
        spread = max(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in epoch)
        assert spread <= 5  # random batches of 16 from 3..52 would spread ~40
    assert first != second  # another order (and other neighbours) every epoch
    assert list(LengthBuckets(lengths, 16, shuffle=True, seed=1)) == first  # seeded
    with pytest.raises(ConfigError, match="no lengths"):
        LengthBuckets([], 4)


def test_pad_and_trim_drop_unused_padding():
    from torchwork.recipes.buckets import pad_batch, trim_cached

    (ids, mask), labels = pad_batch([([101, 5, 6, 102], 1), ([101, 102], 0)])
    assert ids.shape == (2, 4) and mask.sum(dim=1).tolist() == [4, 2] and labels.tolist() == [1, 0]
    hidden = torch.randn(10, 8)
    short = torch.tensor([1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    (h, m), t = trim_cached([((hidden, short), torch.tensor(2)), ((hidden, short[[1, 0, 2, 3, 4, 5, 6, 7, 8, 9]]),
                                                                   torch.tensor(0))])
    assert h.shape == (2, 3, 8) and m.shape == (2, 3) and t.tolist() == [2, 0]
    assert torch.equal(h[0], hidden[:3])


def test_batches_only_predicted_are_padded_to_a_multiple_of_8_and_predict_the_same():
    """Validation and evaluation batches round their width up to 8 columns (fewer shapes, less memory kept):
    the padding is masked, so MiniLM's outputs on the real rows equal the exact width's."""
    from torchwork.finetune.minilm import MiniLMClassifier
    from torchwork.recipes.buckets import (
        PREDICT_WIDTH_MULTIPLE,
        pad_batch,
        trim_cached,
        trim_cached_for_prediction,
    )

    assert PREDICT_WIDTH_MULTIPLE == 8
    items = [([101, 7592, 2088, 102], 1), ([101, 2204, 102], 0)]
    (ids, mask), _ = pad_batch(items, multiple=8)
    assert ids.shape == (2, 8) and mask.sum(dim=1).tolist() == [4, 3] and int(ids[:, 4:].abs().sum()) == 0
    assert pad_batch(items, multiple=2)[0][0].shape == (2, 4)  # already a multiple: as exact
    torch.manual_seed(0)
    model = MiniLMClassifier(classes=3).eval()
    with torch.inference_mode():
        exact, rounded = model(*pad_batch(items)[0]), model(ids, mask)
    torch.testing.assert_close(rounded, exact, rtol=1e-4, atol=1e-5)
    hidden, short = torch.randn(5, 4), torch.tensor([1, 1, 1, 0, 0])
    (h, m), _ = trim_cached_for_prediction([((hidden, short), torch.tensor(1))])
    assert h.shape == (1, 8, 4) and m.tolist() == [[1, 1, 1, 0, 0, 0, 0, 0]]  # wider than the cached row
    assert torch.equal(h[0, :5], hidden) and int(h[0, 5:].abs().sum()) == 0
    assert trim_cached([((hidden, short), torch.tensor(1))])[0][0].shape == (1, 3, 4)


def test_subword_tokenizer_round_trips_and_refuses_bad_input(tmp_path):
    from torchwork.deploy.wordpiece import SubwordTokenizer
    from torchwork.finetune.minilm import minilm_folder, minilm_tokenizer

    texts = ["@united the flight was late AGAIN", "great crew!", "x " * 100]
    tokenizer = SubwordTokenizer.from_file(minilm_folder() / "tokenizer.json", max_length=32)
    ids, mask = tokenizer(texts)
    assert ids.shape == (3, 32) and mask[1].sum() < 8  # truncated at 32, padded to the longest only
    reference = minilm_tokenizer(max_length=32)(texts)  # the fine-tuning package's tokenizer agrees
    assert torch.equal(ids, reference["input_ids"]) and torch.equal(mask, reference["attention_mask"])
    tokenizer.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["subword.json", "tokenizer.json"]
    again = SubwordTokenizer.load(tmp_path)
    assert again.max_length == 32 and all(torch.equal(a, b) for a, b in zip(again(texts), (ids, mask)))
    with pytest.raises(ConfigError, match="takes texts"):
        tokenizer(["fine", 3])
    with pytest.raises(ConfigError, match="max_length"):
        SubwordTokenizer(tokenizer.tokenizer_json, max_length=1)
    with pytest.raises(ConfigError, match="does not hold a SubwordTokenizer"):
        SubwordTokenizer.load(tmp_path / "missing")


@pytest.mark.parametrize(("ragged", "storage"), [(False, "32"), (True, "32"), (True, "bf16")])
def test_cached_predictions_equal_the_whole_models_for_any_rows(ragged, storage):
    """The quickstart predicts train and validation rows through the top alone, from the features it cached
    for training: the same probabilities as the whole model on the same tweets, whichever rows are asked,
    from one padded tensor or from a ragged cache (batches of 4 rows, each as wide as its longest), and
    within bfloat16's rounding from a cache stored in bf16 (the quickstart's when its top trains in bf16)."""
    from torchwork.finetune import cache_features, freeze
    from torchwork.finetune.minilm import MiniLMClassifier, MiniLMTop
    from torchwork.recipes.buckets import pad_batch
    from torchwork.recipes.transformer_texts import (
        TokenTexts,
        bottom_module,
        cached_probabilities,
        length_loader,
        predict_probabilities,
        subword_tokenizer,
    )

    torch.set_num_threads(1)  # as the fused AdamW test below: small models, a busy machine
    torch.manual_seed(0)
    texts = ["@united the flight was late AGAIN and nobody helped", "great crew!", "ok", "lost my bag",
             "thanks for the upgrade, lovely flight from start to end", "meh", "on time", "why is the app down"] * 3
    data = TokenTexts(texts, [i % 3 for i in range(len(texts))], subword_tokenizer(40))
    model = MiniLMClassifier(classes=3).eval()
    freeze(model, "encoder.embeddings", *[f"encoder.encoder.layer.{i}" for i in range(5)])
    cache = cache_features(bottom_module(model, 5), length_loader(data, data.lengths, 4, False, 0, pad_batch),
                           progress=False, ragged=ragged, storage=storage)
    if ragged:
        assert len({batch[0].shape[1] for batch in cache.batches}) > 1  # the batches kept their own widths
    rows = [20, 3, 7, 11, 0]
    cached, labels = cached_probabilities(MiniLMTop(model, 5), cache, data.lengths, rows, batch_size=2)
    whole = predict_probabilities(model, data.subset(sorted(rows)))
    picked = sorted(rows)
    order = sorted(range(len(rows)), key=lambda i: data.lengths[picked[i]])  # the cache holds rows by length
    assert labels == [data.labels[picked[i]] for i in order]
    assert torch.allclose(cached, whole[order], atol=1e-5 if storage == "32" else 2e-3)
    assert torch.equal(cached.argmax(dim=1), whole[order].argmax(dim=1))
    everything, _ = cached_probabilities(MiniLMTop(model, 5), cache, data.lengths)
    assert everything.shape == (len(texts), 3)


def test_token_texts_tokenized_in_chunks_equal_one_encode_batch_of_all(monkeypatch):
    """TokenTexts tokenizes a chunk at a time into one int32 array: every row's ids equal what one
    ``encode_batch`` of all the texts gives (padding stripped), across chunk boundaries, and batch the same."""
    from torchwork.recipes.buckets import pad_batch
    from torchwork.recipes.transformer_texts import TokenTexts, subword_tokenizer

    texts = ["@united the flight was late AGAIN and nobody helped", "great crew!", "ok", "", "x " * 60,
             "thanks for the upgrade, lovely flight from start to end", "meh", "why is the app down"]
    tokenizer = subword_tokenizer(40)
    expected = [e.ids[:sum(e.attention_mask)] for e in tokenizer.tokenizer.encode_batch(texts)]
    monkeypatch.setattr(TokenTexts, "CHUNK", 3)
    data = TokenTexts(texts, [i % 3 for i in range(len(texts))], tokenizer)
    assert len(data) == 8 and data.lengths == [len(ids) for ids in expected] and max(data.lengths) == 40
    assert [data[i][0].tolist() for i in range(8)] == expected and data[-1][0].tolist() == expected[-1]
    assert data[2][0].dtype.name == "int32" and data[2][1] == 2
    part = data.subset([7, 0, 4])
    assert [part[i][0].tolist() for i in range(3)] == [expected[7], expected[0], expected[4]]
    assert part.labels == [1, 0, 1] and part.lengths == [len(expected[i]) for i in (7, 0, 4)]
    (ids, mask), _ = pad_batch([data[i] for i in (0, 1, 4)])
    (ids_list, mask_list), _ = pad_batch([(expected[i], 0) for i in (0, 1, 4)])
    assert ids.dtype == torch.long and torch.equal(ids, ids_list) and torch.equal(mask, mask_list)
    with pytest.raises(IndexError):
        data[8]


def test_the_fused_adamw_trains_the_top_as_the_default_one_does():
    """The quickstart's optimizer is fused AdamW on the CPU: given the same gradients (real bf16 backward passes
    on the MiniLM top, with layer-wise groups and weight decay), its weights after three steps agree with the
    default (per-tensor loop) AdamW's.

    Both optimizers take the gradients of one model. Each computing its own would compare bf16 chaos, not the
    optimizers: the two differ by float rounding after one step (1.5e-8), a bf16 forward rounds that into
    gradients up to 5e-4 apart, and Adam's normalised step carries it into the weights (2.6e-4 after two steps
    on an AMD EPYC, 7 Dec; other CPUs round the same way by luck)."""
    import copy

    from torchwork.finetune import freeze, param_groups
    from torchwork.finetune.minilm import MiniLMClassifier, MiniLMTop
    from torchwork.recipes.sentiment_transformer import adamw

    torch.set_num_threads(1)  # two threads beside a busy neighbour made each tiny bf16 step 1.5 s, not 0.05 s
    torch.manual_seed(0)
    model = MiniLMClassifier(classes=3)
    freeze(model, "encoder.embeddings", *[f"encoder.encoder.layer.{i}" for i in range(4)])
    fused_top = MiniLMTop(model, 4).train()
    loop_top = copy.deepcopy(fused_top)
    start = {name: p.detach().clone() for name, p in fused_top.named_parameters() if p.requires_grad}

    def optimizer(top: torch.nn.Module, fused: bool) -> torch.optim.Optimizer:
        groups = param_groups(top, lr=2e-4, layer_decay=0.8, head="model.classifier", weight_decay=0.01)
        return adamw(groups, torch.device("cpu")) if fused else torch.optim.AdamW(groups)

    fused_optimizer, loop_optimizer = optimizer(fused_top, True), optimizer(loop_top, False)
    assert fused_optimizer.defaults["fused"] is True and loop_optimizer.defaults["fused"] is None
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        hidden = torch.randn(8, 12, 384, generator=generator)
        mask = torch.ones(8, 12, dtype=torch.long)
        mask[4:, 9:] = 0
        target = torch.randint(0, 3, (8,), generator=generator)
        fused_optimizer.zero_grad()
        loop_optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.functional.cross_entropy(fused_top(hidden, mask).float(), target).backward()
        for mine, theirs in zip(loop_top.parameters(), fused_top.parameters()):
            mine.grad = None if theirs.grad is None else theirs.grad.clone()
        fused_optimizer.step()
        loop_optimizer.step()
    fused_weights = {name: p.detach() for name, p in fused_top.named_parameters() if p.requires_grad}
    loop_weights = {name: p.detach() for name, p in loop_top.named_parameters() if p.requires_grad}
    assert fused_weights.keys() == loop_weights.keys() and len(fused_weights) > 30
    assert all(not torch.equal(start[name], weight) for name, weight in fused_weights.items())  # every one moved
    for name, weight in fused_weights.items():
        torch.testing.assert_close(weight, loop_weights[name], atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("setting, message", [
    ({"model": "bert"}, "model='bert': use ngram, transformer"),
    ({"transformer_train_layers": "7"}, "MiniLM has 6 layers"),
    ({"transformer_strategy": "fast"}, "transformer_strategy='fast'"),
    ({"warmup": "1"}, "warm-up is a fraction"),
    ({"transformer_lr": "0"}, "transformer_lr=0.0: must be > 0"),
    ({"int8_smoothing": "1.5"}, "int8_smoothing=1.5: SmoothQuant's alpha, in (0, 1], or 0 for none"),
    ({"int8_smoothing": "-0.1"}, "int8_smoothing=-0.1"),
    ({"int8_fallback_agreement": "1.01"}, "int8_fallback_agreement=1.01: a share in (0, 1], or 0 for no float"),
    ({"int8_fallback_agreement": "nan"}, "int8_fallback_agreement"),
])
def test_transformer_settings_are_checked_before_any_work(setting, message):
    from torchwork.recipes.config import apply_overrides
    from torchwork.recipes.sentiment import SentimentConfig

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        apply_overrides(SentimentConfig(), setting)


def test_report_parts_misclassified_and_split_rows():
    from torchwork.recipes.sentiment_report_parts import misclassified, split_rows

    rows = misclassified(["a", "b", "c"], [0, 1, 2], [[0.9, 0.1, 0.0], [0.7, 0.2, 0.1], [0.1, 0.3, 0.6]],
                         ["neg", "neu", "pos"])
    assert rows == [["b", "neu", "neg", "neg 0.70 neu 0.20 pos 0.10"]]
    metrics = {"classes": ["a"], "accuracy": 0.5, "macro_f1": 0.4,
               "per_class": {"a": {"precision": 0.5, "recall": 0.5, "f1": 0.4, "support": 4}}}
    assert split_rows({"test": metrics}) == [["test", "a", 0.5, 0.5, 0.4, 4],
                                             ["test", "all (accuracy / macro-F1)", 0.5, "", 0.4, 4]]


@pytest.fixture(scope="module")
def transformer_run() -> tuple[subprocess.CompletedProcess, Path]:
    """The shortened transformer quickstart run once for the whole test run (transformer_quickstart.py), as the
    completed process it was and its run folder."""
    stdout, stderr, run = transformer_quickstart()
    return subprocess.CompletedProcess([], 0, stdout, stderr), run


@pytest.mark.slow(reason="a whole transformer quickstart (module fixture): caching, training, two exports")
def test_transformer_quickstart_produces_every_file(transformer_run):
    done, run = transformer_run
    (transformer_run_dir,) = list((run / "transformer").iterdir())
    for name in ("manifest.json", "report.html", "summary.json", "artifact/manifest.json",
                 "artifact/preprocess/tokenizer.json", "artifact/model.onnx"):
        assert (run / name).is_file(), name
    assert (transformer_run_dir / "checkpoints" / "best.pt").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary) >= {"test", "baseline", "artifact", "report", "models"} and summary["model"] == "transformer"
    assert set(summary["models"]) == {"baseline", "ngram", "transformer"}
    for scores in summary["models"].values():
        assert set(scores) == {"accuracy", "macro_f1", "training_seconds"} and 0 < scores["macro_f1"] <= 1
    assert summary["test"]["macro_f1"] == summary["models"]["transformer"]["macro_f1"]
    manifest = json.loads((run / "artifact" / "manifest.json").read_text())
    assert manifest["preprocess"]["class"] == "torchwork.deploy.wordpiece:SubwordTokenizer"
    assert [i["name"] for i in manifest["inputs"]] == ["input_ids", "attention_mask"]
    assert "onnx-int8" in manifest["variants"] or "onnx-int8" in manifest["refused"]
    if "onnx-int8" in manifest["variants"]:  # read from the verification table, not timed a second time
        assert set(summary["speed"]) == {"batch_1", "batch_64"}
        assert all(row["int8_speedup"] > 0 for row in summary["speed"].values())
        assert "INT8 timing" not in done.stdout + done.stderr and "INT8 against eager (from the table" in done.stdout
    assert "strategy: cached (as configured)" in done.stdout and "cached layer-5 features" in done.stdout
    html = (run / "report.html").read_text()
    for section in ("The models side by side", "rows per split and class", "misclassified test tweets",
                    "normalised", "Served model: transformer"):
        assert section in html, section
    assert html.count("data:image/png;base64,") >= 5  # loss, F1, lr with the best epoch, bars, confusion pair


@pytest.mark.slow
def test_served_transformer_answers_without_importing_transformers(transformer_run, monkeypatch):
    from torchwork.recipes.serve_demo import local_server

    _, run = transformer_run
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # the server logs every module it imports to stderr
    with local_server(run / "artifact", threads=1) as server:
        answers = server.predict(["@united thank you, the crew was wonderful!", "my bag is lost AGAIN"])
        imports = server.output()
    assert [set(a) >= {"label", "probabilities"} for a in answers] == [True, True]
    assert all(a["label"] in ("negative", "neutral", "positive") for a in answers)
    assert abs(sum(answers[0]["probabilities"].values()) - 1) < 1e-4
    modules = {line.rsplit("|", 1)[-1].strip() for line in imports.splitlines() if line.startswith("import time:")}
    assert "tokenizers" in modules and "onnxruntime" in modules  # the log is real
    assert not {m for m in modules if m == "transformers" or m.startswith("transformers.")}


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make installs it as root)")
def test_transformer_report_renders_in_headless_chromium(transformer_run, tmp_path):
    _, run = transformer_run
    screenshot, errors = render_in_chromium(run / "report.html", tmp_path, height=2400)
    assert screenshot.stat().st_size > 20_000 and not errors, errors


def test_seed_rows_gather_the_runs_beside_this_one_with_the_same_settings(tmp_path):
    import dataclasses

    from torchwork.recipes.sentiment import SentimentConfig
    from torchwork.recipes.sentiment_report_parts import seed_rows

    def run(name: str, seed: int, macro_f1: float, **changed) -> None:
        folder = tmp_path / name
        folder.mkdir()
        config = {**dataclasses.asdict(dataclasses.replace(SentimentConfig(seed=seed), **changed)),
                  "precision_chosen": "32"}
        config["export_formats"] = list(config["export_formats"])
        (folder / "manifest.json").write_text(json.dumps({"config": config}))
        (folder / "summary.json").write_text(json.dumps({"models": {"ngram": {"macro_f1": macro_f1 - 0.04},
                                                                    "transformer": {"macro_f1": macro_f1}}}))

    run("a", 1, 0.7865, run_dir="elsewhere")
    run("b", 2, 0.7800, threads=1)
    run("c", 3, 0.5, subset=200)  # other settings: not the same experiment
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "manifest.json").write_text("{not json")  # a broken run is skipped
    (tmp_path / "current").mkdir()
    config = dataclasses.asdict(SentimentConfig(seed=0))
    models = {"ngram": {"macro_f1": 0.7409}, "transformer": {"macro_f1": 0.7893}}
    rows = seed_rows(tmp_path, tmp_path / "current", config, models)
    assert [r["seed"] for r in rows] == [0, 1, 2, "max - min"]
    assert rows[-1] == {"seed": "max - min", "ngram macro-F1": 0.0065, "transformer macro-F1": 0.0093}
    assert seed_rows(tmp_path, tmp_path / "current", {**config, "epochs": 3}, models) == []  # one seed only


def test_seed_rows_skip_a_run_beside_whose_files_are_a_fifo_or_lead_out(tmp_path):
    from torchwork.recipes.sentiment_report_parts import seed_rows

    def run(name: str, seed: int) -> Path:
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"config": {"seed": seed, "epochs": 2}}))
        (tmp_path / name / "summary.json").write_text(json.dumps({"models": {"ngram": {"macro_f1": 0.7 + seed / 100}}}))
        return tmp_path / name

    run("a", 1)
    fifo = run("b", 2) / "summary.json"
    fifo.unlink()
    os.mkfifo(fifo)  # read as before, it would block the report for ever
    linked = run("c", 3) / "summary.json"
    linked.rename(tmp_path / "elsewhere.json")
    linked.symlink_to(tmp_path / "elsewhere.json")  # another folder's scores are not this run's
    (tmp_path / "current").mkdir()
    rows = returns_within(10, lambda: seed_rows(tmp_path, tmp_path / "current", {"seed": 0, "epochs": 2},
                                                {"ngram": {"macro_f1": 0.7}}), fifo)
    assert [r["seed"] for r in rows] == [0, 1, "max - min"]


def test_the_report_refuses_a_run_manifest_that_is_a_fifo_or_leads_out(tmp_path):
    from torchwork.recipes.sentiment_report import write_report

    classes = ["negative", "neutral", "positive"]
    metrics = {"accuracy": 0.5, "macro_f1": 0.5, "weighted_f1": 0.5, "classes": classes,
               "per_class": {c: {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2} for c in classes},
               "confusion_matrix": [[1, 1, 0], [0, 1, 1], [1, 0, 1]]}

    run = tmp_path / "run"
    run.mkdir()
    manifest = run / "manifest.json"

    def report() -> Path:
        history = [{"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_macro_f1": 0.5}]
        return write_report(run / "report.html", history=history, metrics=metrics, baseline=metrics,
                            verification=None, artifact=run / "artifact", run_path=run, summary={})

    os.mkfifo(manifest)  # read as before, it would block the report for ever
    with pytest.raises(ConfigError, match="manifest.json is a FIFO, not a regular file"):
        returns_within(30, report, manifest)
    manifest.unlink()
    (tmp_path / "other.json").write_text(json.dumps({"config": {"secret": "elsewhere"}}))
    manifest.symlink_to(tmp_path / "other.json")
    with pytest.raises(ConfigError, match="leading out of its run folder"):
        report()
    manifest.unlink()
    manifest.write_text(json.dumps({"config": {"seed": 0}}))
    assert "config.seed" in report().read_text()
