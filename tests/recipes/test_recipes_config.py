"""Recipe configs: YAML + --set overrides, validated with clear errors."""

from __future__ import annotations

import pytest

from torchwork.errors import ConfigError
from torchwork.recipes.registry import resolve


def test_yaml_config_and_overrides(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("recipe: sentiment\nepochs: 7\nlr: 0.01\nexport_formats: [onnx]\n")
    name, config = resolve(str(path), ["batch_size=128", "chars=false"])
    assert name == "sentiment"
    assert (config.epochs, config.lr, config.batch_size, config.chars) == (7, 0.01, 128, False)
    assert config.export_formats == ("onnx",)


@pytest.mark.parametrize(("assignment", "message"), [
    ("epoch=3", "unknown setting 'epoch'.*Did you mean 'epochs'"),
    ("epochs=three", "epochs: expected int"),
    ("epochs=0", "must be >= 1"),
    ("chars=maybe", "expected true or false"),
    ("precision=fp8", "precision='fp8'"),
    ("export_formats=onnx,tflite", "tflite"),
    ("epochs", "key=value"),
])
def test_bad_settings_are_named(assignment, message):
    with pytest.raises(ConfigError, match=message):
        resolve("sentiment", [assignment])


def test_bad_files_and_recipes(tmp_path):
    with pytest.raises(ConfigError, match="unknown recipe 'poetry'"):
        resolve("poetry")
    missing = tmp_path / "none.yaml"
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(str(missing))
    bad = tmp_path / "bad.yaml"
    bad.write_text("epochs: 3\n")
    with pytest.raises(ConfigError, match="which recipe"):
        resolve(str(bad))
    broken = tmp_path / "broken.yaml"
    broken.write_text("recipe: sentiment\nepochs: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        resolve(str(broken))
