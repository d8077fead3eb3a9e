"""Issue 51, LLaMA-Factory's entry points: what they showed.

- Its reward-model stage wraps the language model in trl's ``AutoModelForCausalLMWithValueHead``, whose
  ``post_init`` offers the value head the whole language model's ``state_dict()`` with ``strict=False``, to pick
  up ``v_head.*`` keys if there are any. With none, nothing loads and the head keeps its fresh initialisation, as
  meant. "Loaded nothing" is a mistake when a checkpoint was read for it, or when the keys are the model's
  under another prefix; an unrelated state dict built in the process is a deliberate "take what fits".
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from torchwork.doctor.session import diagnose


def _language_model() -> nn.Module:
    return nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 8), nn.Linear(8, 20))


class ValueHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.summary = nn.Linear(8, 1)


def test_a_head_offered_another_models_live_state_dict_is_silent() -> None:
    head = ValueHead()
    with diagnose(["state-dict-mismatch"]) as session:
        head.load_state_dict(_language_model().state_dict(), strict=False)
    assert session.findings == []


def test_the_same_unrelated_keys_read_from_a_file_are_found(tmp_path: Path) -> None:
    torch.save(_language_model().state_dict(), tmp_path / "model.pt")
    head = ValueHead()
    with diagnose(["state-dict-mismatch"]) as session:
        saved = torch.load(tmp_path / "model.pt", weights_only=True)
        head.load_state_dict({k: v for k, v in saved.items() if k.startswith("2.")}, strict=False)
    assert [f.id for f in session.findings] == ["state-dict-mismatch"]
    assert "loaded nothing" in session.findings[0].message


def test_a_live_state_dict_under_a_wrappers_prefix_is_still_found() -> None:
    model = _language_model()
    wrapped = {"module." + k: v for k, v in _language_model().state_dict().items()}  # as DDP's state_dict() has it
    with diagnose(["state-dict-mismatch"]) as session:
        model.load_state_dict(wrapped, strict=False)
    assert [f.id for f in session.findings] == ["state-dict-mismatch"]
    assert "'module.'" in session.findings[0].message
