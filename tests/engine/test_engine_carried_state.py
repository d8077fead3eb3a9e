"""State a step_fn carries across batches (truncated BPTT's hidden state): a step_fn object with
state_dict/load_state_dict resumes bit for bit; a closure that carries it is named in a warning at the
first checkpoint, and its resume is not exact (what the warning says)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from torchwork import Trainer

VOCAB, STEPS = 12, 8


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.rnn, self.head = nn.Embedding(VOCAB, 8), nn.GRU(8, 16, batch_first=True), nn.Linear(16, VOCAB)


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One long text cut into consecutive windows, read in order (the hidden state runs across them)."""
    tokens = torch.randint(0, VOCAB, (4, STEPS * 6 + 1), generator=torch.Generator().manual_seed(0))
    return [(tokens[:, i:i + 6], tokens[:, i + 1:i + 7]) for i in range(0, STEPS * 6, 6)]


def _loss(model: TinyLM, batch, hidden):
    x, y = batch
    out, hidden = model.rnn(model.embed(x), hidden)
    return nn.functional.cross_entropy(model.head(out).flatten(0, 1), y.flatten()), hidden.detach()


class TBPTTStep:
    """The documented shape: a callable object whose state_dict holds what it carries."""

    def __init__(self) -> None:
        self.hidden: torch.Tensor | None = None

    def __call__(self, model: TinyLM, batch):
        loss, self.hidden = _loss(model, batch, self.hidden)
        return loss

    def state_dict(self) -> dict:
        return {"hidden": self.hidden}

    def load_state_dict(self, state: dict) -> None:
        self.hidden = state["hidden"]


def closure_step():
    hidden = None

    def step(model: TinyLM, batch):
        nonlocal hidden
        loss, hidden = _loss(model, batch, hidden)
        return loss

    return step


def _run(tmp_path, make_step, resume=None) -> Trainer:
    torch.manual_seed(0)
    model = TinyLM()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.5), step_fn=make_step(), device="cpu",
                      threads=1, progress=False, run_dir=tmp_path / "runs", checkpoint_every_n_steps=3)
    trainer.fit(_batches(), epochs=1, resume=resume)
    return trainer


def _same(a: Trainer, b: Trainer) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))


def test_a_step_fn_with_state_dict_resumes_truncated_bptt_bit_for_bit(tmp_path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: its state is saved
        whole = _run(tmp_path, TBPTTStep)
    checkpoint = sorted((whole.run_path / "checkpoints").glob("step-*.pt"))[0]  # step 3 of 8
    resumed = _run(tmp_path, TBPTTStep, resume=checkpoint)
    assert resumed.global_step == STEPS and _same(whole, resumed)


def test_a_closure_carrying_the_hidden_state_is_named_and_its_resume_is_not_exact(tmp_path) -> None:
    with pytest.warns(UserWarning, match=r"step_fn carries hidden from batch to batch.*will not be exact"):
        whole = _run(tmp_path, closure_step)
    checkpoint = sorted((whole.run_path / "checkpoints").glob("step-*.pt"))[0]
    with pytest.warns(UserWarning):
        resumed = _run(tmp_path, closure_step, resume=checkpoint)
    assert resumed.global_step == STEPS and not _same(whole, resumed)  # the hidden state restarted from None


def test_a_constant_in_a_closure_is_not_state(tmp_path) -> None:
    scale = 1.0

    def step(model: TinyLM, batch):
        return _loss(model, batch, None)[0] * scale

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run(tmp_path, lambda: step)
