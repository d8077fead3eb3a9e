"""`torchwork fit --model DIR` on tiny random-initialised BERT, DistilBERT, RoBERTa, ELECTRA and MPNet folders
(their tokenizers trained here), offline: the folder checked first (one clear error per fault), the cached-
features split found per architecture, training, exact resume, ONNX + INT8 export, verification and the
served artifact's answers; plus the whole `fit` command once, with every socket connection refused."""

from __future__ import annotations

import json
import math
import shutil
import socket
from pathlib import Path

import numpy
import pytest
import torch
from tiny_encoders import ARCHITECTURES, reviews, tiny_encoder, write_csv

from torchwork.errors import ConfigError

ROWS = reviews(240)
TEXTS = [text for text, _ in ROWS]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("encoders")
    return {name: tiny_encoder(root / name, name, TEXTS) for name in ARCHITECTURES}


def _copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def test_a_bad_model_folder_is_one_clear_error_before_any_work(folders, tmp_path) -> None:
    from torchwork.finetune.encoders import check_model_folder, check_weight_shapes

    folder = _copy(folders["bert"], tmp_path)
    (folder / "tokenizer.json").rename(folder / "vocab.txt")
    with pytest.raises(ConfigError, match=r"has vocab.txt but no tokenizer.json.*save_pretrained"):
        check_model_folder(folder)
    (folder / "vocab.txt").rename(folder / "tokenizer.json")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ConfigError, match=r"'gpt2': torchwork fine-tunes BERT, DistilBERT, RoBERTa, ELECTRA, MPNet"):
        check_model_folder(folder)
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 48, "intermediate_size": 96}))
    with pytest.raises(ConfigError, match=r"do not have the shapes .*config.json gives, e\.g\. .* is \[400, 32\] in "
                                          r"the file and \[400, 48\] by the config"):
        check_weight_shapes(check_model_folder(folder))
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ConfigError, match=r"only as pytorch_model.bin, a pickle.*save_file"):
        check_model_folder(folder)


def test_the_settings_refuse_a_bad_folder_when_fit_is_called(tmp_path) -> None:
    from torchwork.cli import main

    data = write_csv(tmp_path / "reviews.csv", ROWS[:40])
    assert main(["fit", str(data), "--model", str(tmp_path / "nowhere"), "--set", f"run_dir={tmp_path / 'runs'}"]) != 0
    assert not (tmp_path / "runs").exists()  # nothing half-written


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_split_is_found_per_architecture_and_resume_is_exact(folders, architecture, tmp_path) -> None:
    from torchwork import Trainer
    from torchwork.deploy.wordpiece import SubwordTokenizer
    from torchwork.finetune.encoder_model import EncoderClassifier
    from torchwork.finetune.encoders import check_model_folder

    folder = check_model_folder(folders[architecture])
    model = EncoderClassifier(folder, classes=2)
    assert model.load_report.problems == 0 and model.load_report.new == ["classifier.weight", "classifier.bias"]
    names = model.frozen_names(1)
    assert names[0] == "encoder.embeddings" and names[-1].endswith(".0") and model.num_layers == 2
    ids, mask = SubwordTokenizer.from_file(folder.tokenizer, max_length=24)(TEXTS[:6])
    model.eval()
    assert torch.allclose(model.top(*model.bottom(ids, mask, layers=1), start=1), model(ids, mask), atol=1e-5)
    batches = [((ids[i:i + 2], mask[i:i + 2]), torch.tensor([0, 1])) for i in range(0, 6, 2)]

    def train(run_dir: Path, steps: int | None, resume: Path | None = None) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        again = EncoderClassifier(folder, classes=2)
        trainer = Trainer(again, torch.optim.AdamW(again.parameters(), lr=1e-3), torch.nn.CrossEntropyLoss(),
                          run_dir=run_dir, threads=1)
        trainer.fit(batches, epochs=2, max_steps=steps, resume=resume)
        return again.state_dict()

    straight = train(tmp_path / "straight", None)
    train(tmp_path / "cut", 4)
    (cut,) = (tmp_path / "cut").iterdir()
    resumed = train(tmp_path / "cut", None, resume=cut)
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


@pytest.mark.slow(reason="fine-tunes, exports to ONNX and INT8 and verifies a tiny model of each of 5 architectures")
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_each_architecture_trains_exports_verifies_and_serves(folders, architecture, tmp_path) -> None:
    from torchwork.data.datasets import TextDataset
    from torchwork.recipes.sentiment import SentimentConfig
    from torchwork.recipes.sentiment_transformer import transformer_sections
    from torchwork.recipes.transformer_settings import TransformerSettings
    from torchwork.serve.artifact import predictor_from_artifact

    config = SentimentConfig(model_dir=str(folders[architecture]), transformer_max_length=0, threads=1,
                             precision="32", transformer_strategy="cached", transformer_train_layers=1,
                             transformer_epochs=1, verify_rounds=5)
    labels = [int(label == "fresh") for _, label in ROWS]
    train, validation, test = (TextDataset(TEXTS[a:b], labels[a:b]) for a, b in ((0, 160), (160, 200), (200, 240)))
    served = transformer_sections(TransformerSettings.of(config), train, validation, test, ["rotten", "fresh"],
                                  tmp_path, {"ngram": {"macro_f1": 0.5}, "baseline": {"macro_f1": 0.3}})
    assert 16 <= served["max_length"] <= 128 and served["epoch_estimate"]["epoch_s"] > 0
    report = served["verify_report"]
    assert "onnx" in report["variants"] and ("onnx-int8" in report["variants"] or "onnx-int8" in report["refused"])
    assert report["verify"]["variants"]["onnx"]["ok"]
    predictor = predictor_from_artifact(tmp_path / "artifact", threads=1)
    rows = numpy.stack(predictor.predict_batch(["a warm, funny film", "dull and far too long"]))
    assert list(predictor.labels) == ["rotten", "fresh"] and rows.shape == (2, 2)
    assert numpy.allclose(rows.sum(axis=1), 1, atol=1e-4)


@pytest.mark.slow(reason="the whole fit command (data report, baselines, n-gram, the encoder, two exports)")
def test_fit_with_a_model_folder_runs_offline_inside_a_time_budget(folders, tmp_path, monkeypatch, capsys) -> None:
    from torchwork.cli import main

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a network connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refused)
    monkeypatch.setattr(socket.socket, "connect_ex", refused)
    data = write_csv(tmp_path / "reviews.csv", ROWS)
    code = main(["fit", str(data), "--model", str(folders["electra"]), "--set", f"run_dir={tmp_path / 'runs'}",
                 "--time-budget", "30s", *[part for s in ("epochs=1", "transformer_epochs=1", "verify_rounds=5", "export_formats=onnx",
                                  "threads=1", "precision=32", "transformer_strategy=cached") for part in ("--set", s)]])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert f"ELECTRA from {folders['electra']}" in out and "of 41 model tensors loaded" in out
    assert "max_length: " in out and "th percentile of the" in out and "estimated epoch: " in out
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["models"]) == {"baseline", "ngram", "transformer"}
    # the budget tunes the encoder: trial 0 is its own settings (the max length chosen from the data), the
    # served encoder is the best trial's model as trained (not trained again), compared with trial 0's (the
    # choice among several trials is the n-gram budget test's and the plan's clock tests', on the same study)
    plan = summary["time_budget"]
    first = plan["trials"][0]
    assert first["state"] == "COMPLETE" and first["params"]["epochs"] == 1 and 16 <= first["params"]["max_length"] <= 128
    best = max((t for t in plan["trials"] if t["state"] == "COMPLETE"), key=lambda t: (t["value"], -t["trial"]))
    assert plan["best_params"] == best["params"] and f"the served encoder is trial {best['trial']}'s model" in " ".join(
        plan["decisions"])
    assert set(plan["stages"]) == {"data report, baselines and the n-gram model", "tuning"}
    # 30 s cannot hold the export's planned 58 s besides the first trial: the defaults alone, and it says so
    assert [t["state"] for t in plan["trials"]] == ["COMPLETE", "NOT STARTED"]
    assert any(d.startswith("the budget is too small for this data") for d in plan["decisions"]), json.dumps(plan)[:4000]
    assert math.isclose(plan["tuned_against_default"]["a"]["macro_f1"], summary["models"]["transformer"]["macro_f1"],
                        abs_tol=1e-6)
    assert json.loads((Path(plan["study"]) / "trials" / "0" / "trial.json").read_text())["state"] == "COMPLETE"
