"""deploy/pipeline.py: which dims an export makes dynamic (the batch; the length of token ids, or of any 2-D+
input when asked), the example widened so that torch.export does not specialise a dim of size 1, and an
``export`` refused before any work when the model or the output folder is wrong (nothing written). The
exports themselves run in the other tests of tests/deploy."""

from __future__ import annotations

import pytest
import torch

from torchwork.deploy.pipeline import dynamic_spec, export, widen
from torchwork.errors import ConfigError


def test_the_batch_is_dynamic_and_the_length_of_token_ids_by_default() -> None:
    ids, features, flags = torch.zeros(4, 7, dtype=torch.long), torch.zeros(4, 7), torch.zeros(4, 7, dtype=torch.bool)
    assert dynamic_spec([ids, features, flags], True, None) == [{0: "batch", 1: "length"}, {0: "batch"}, {0: "batch"}]
    assert dynamic_spec([ids], False, None) == [{1: "length"}]
    assert dynamic_spec([ids, features], True, False) == [{0: "batch"}, {0: "batch"}]
    assert dynamic_spec([features], True, True) == [{0: "batch", 1: "length"}]


def test_a_dynamic_length_without_a_second_dim_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="no input has a dim 1"):
        dynamic_spec([torch.zeros(3)], True, True)


def test_widen_doubles_a_batch_of_one_and_pads_a_length_of_one_leaving_the_rest() -> None:
    ids, lengths = torch.tensor([[5]]), torch.tensor([1])
    wide = widen((ids, lengths), [{0: "batch", 1: "length"}, {0: "batch"}])
    assert wide[0].tolist() == [[5, 0], [5, 0]] and wide[1].tolist() == [1, 1]
    kept = (torch.ones(3, 4),)
    assert widen(kept, [{0: "batch"}])[0] is kept[0]


def test_export_refuses_a_non_module_and_a_folder_that_is_not_an_artifact_writing_nothing(tmp_path) -> None:
    with pytest.raises(ConfigError, match="must be a torch.nn.Module"):
        export(lambda x: x, torch.ones(1, 2), tmp_path / "out")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="already exists and is not empty"):
        export(torch.nn.Linear(2, 2), torch.ones(1, 2), taken, formats=("onnx",))
    with pytest.raises(ConfigError, match="is not a torchwork artifact"):
        export(torch.nn.Linear(2, 2), torch.ones(1, 2), taken, formats=("onnx",), overwrite=True)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes.txt", "taken"]
