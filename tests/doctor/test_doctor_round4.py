"""Issue 51, the doctor's runtime checks of round 4, each at the user's line and silent on correct code.

* dropout-in-eval: F.scaled_dot_product_attention(dropout_p>0) and F.dropout(x, p) (training=True by
  default) reached inside a module in eval mode, during evaluation;
* eval-mode: evaluation in training mode counts functional dropout too;
* anomaly-mode: anomaly detection left on for a training loop;
* loss-on-probabilities: softmax/sigmoid outputs fed to the losses that apply them;
* the cause's line: an inplace=True layer's definition;
* notes rare on correct code: view-mutation only when the changed base is read again, unseeded only when
  runs are resumed or compared.
"""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from marked_lines import marked_line
from torch import nn

from torchwork.doctor.findings import format_where
from torchwork.doctor.session import diagnose


def _lineno(marker: str) -> int:
    return marked_line(__file__, marker)


def _found(session) -> list[tuple[str, int | None]]:
    return [(f.id, f.line) for f in session.findings]


# ------------------------------------------------------------------------------------ dropout-in-eval
class _Attention(nn.Module):
    def __init__(self, gated: bool) -> None:
        super().__init__()
        self.gated, self.dropout, self.qkv = gated, 0.2, nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 4).transpose(1, 3).unbind(2)
        if self.gated:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout)  # line: sdpa


class _Mlp(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how, self.fc = how, nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "default":
            return F.dropout(self.fc(x), 0.3)  # line: dropout
        if self.how == "mc":
            return F.dropout(self.fc(x), 0.3, training=True)  # Monte Carlo dropout, on purpose
        return F.dropout(self.fc(x), 0.3, training=self.training)


def _fit_then_evaluate(model: nn.Module, no_grad: bool = True) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 3, 8)
    for _ in range(2):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    model.eval()
    with torch.no_grad() if no_grad else torch.enable_grad():
        for _ in range(3):
            model(x).sum().item()


@pytest.mark.parametrize("model, line", [(_Attention(False), "sdpa"), (_Mlp("default"), "dropout")])
def test_functional_dropout_in_eval_mode_is_found_at_its_line(model: nn.Module, line: str) -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        _fit_then_evaluate(model)
    assert _found(session) == [("dropout-in-eval", _lineno(line))]
    (finding,) = session.findings
    assert "eval mode" in finding.message and "self.training" in finding.fix


def test_evaluation_without_no_grad_in_eval_mode_is_found_too() -> None:
    torch.manual_seed(0)
    with diagnose(["dropout-in-eval"]) as session:
        _fit_then_evaluate(_Attention(False), no_grad=False)
    assert _found(session) == [("dropout-in-eval", _lineno("sdpa"))]


@pytest.mark.parametrize("model", [_Attention(True), _Mlp("follows"), _Mlp("mc")], ids=["sdpa", "dropout", "mc"])
def test_functional_dropout_that_follows_the_mode_or_is_spelled_on_is_silent(model: nn.Module) -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        _fit_then_evaluate(model)
    assert session.findings == []


def test_training_a_model_kept_in_eval_mode_is_not_dropout_in_eval() -> None:
    """BatchNorm frozen by model.eval() while training: the functional dropout that still drops trains."""
    torch.manual_seed(0)
    model = _Mlp("default").eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with diagnose(["dropout-in-eval"]) as session:
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
    assert session.findings == []


def test_evaluation_in_training_mode_counts_functional_dropout() -> None:
    torch.manual_seed(0)
    model = _Mlp("follows")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with diagnose() as session:
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(4, 8))  # line: eval-loop
    assert _found(session) == [("eval-mode", _lineno("eval-loop"))]
    assert "F.dropout(p=0.3) in _Mlp" in session.findings[0].message


# ------------------------------------------------------------------------------------ anomaly-mode
def _steps(count: int) -> None:
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(count):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()


def test_anomaly_mode_left_on_is_found_where_it_was_switched_on_and_switched_off_after() -> None:
    torch.manual_seed(0)
    with diagnose(["anomaly-mode"]) as session:
        torch.autograd.set_detect_anomaly(True)  # line: anomaly
        _steps(3)
    assert not torch.is_anomaly_enabled()
    assert _found(session) == [("anomaly-mode", _lineno("anomaly"))]
    assert "3 optimizer steps" in session.findings[0].message and "x on a small" in session.findings[0].message


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_anomaly_mode_for_one_debugging_step_is_silent() -> None:
    torch.manual_seed(0)
    with diagnose(["anomaly-mode"]) as session:
        with torch.autograd.detect_anomaly():
            _steps(1)
        _steps(3)
    assert session.findings == []


# ------------------------------------------------------------------------------------ loss-on-probabilities
def _logits() -> torch.Tensor:
    return nn.Linear(4, 3)(torch.randn(8, 4))


def test_softmax_fed_to_cross_entropy_is_found_at_the_loss_line() -> None:
    torch.manual_seed(0)
    loss_fn = nn.CrossEntropyLoss()
    with diagnose(["loss-on-probabilities"]) as session:
        probs = nn.Softmax(dim=1)(_logits())  # line: softmax
        loss_fn(probs, torch.randint(0, 3, (8,))).backward()  # line: ce
    assert _found(session) == [("loss-on-probabilities", _lineno("ce"))]
    assert f":{_lineno('softmax')}" in session.findings[0].message and session.findings[0].severity == "warning"


def test_one_softmax_reaching_several_loss_calls_is_one_finding_naming_them() -> None:
    torch.manual_seed(0)
    head = nn.Sequential(nn.Linear(4, 3), nn.Softmax(dim=1))  # an ACGAN's auxiliary classifier
    with diagnose(["loss-on-probabilities"]) as session:
        for _ in range(2):
            real, fake = head(torch.randn(8, 4)), head(torch.randn(8, 4))  # line: head
            labels = torch.randint(0, 3, (8,))
            F.cross_entropy(real, labels).backward()  # line: real
            F.cross_entropy(fake, labels).backward()  # line: fake
    assert _found(session) == [("loss-on-probabilities", _lineno("real"))]
    finding = session.findings[0]
    assert f":{_lineno('head')}" in finding.message and finding.count == 4
    assert finding.message.endswith(f"reaches cross_entropy at {format_where((__file__, _lineno('fake')))} too.")


def test_sigmoid_fed_to_bce_with_logits_is_found_and_log_softmax_is_a_note() -> None:
    torch.manual_seed(0)
    with diagnose(["loss-on-probabilities"]) as session:
        scores = torch.sigmoid(_logits())
        F.binary_cross_entropy_with_logits(scores, torch.ones(8, 3))  # line: bce
        F.cross_entropy(F.log_softmax(_logits(), dim=1), torch.zeros(8, dtype=torch.long))  # line: log
    assert _found(session) == [("loss-on-probabilities", _lineno("bce")), ("loss-on-probabilities", _lineno("log"))]
    assert [f.severity for f in session.findings] == ["warning", "info"]


def test_probabilities_as_targets_and_logits_as_inputs_are_silent() -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        logits = _logits()
        F.cross_entropy(logits, F.softmax(_logits().detach(), dim=1))
        F.binary_cross_entropy_with_logits(logits, torch.sigmoid(logits.detach()))
        F.binary_cross_entropy(torch.sigmoid(logits), torch.ones(8, 3))
    assert [f for f in session.findings if f.id == "loss-on-probabilities"] == []


# ------------------------------------------------------------------------------------ the cause's line
class _Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = nn.ReLU(inplace=True)  # line: defined

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(torch.sigmoid(self.proj(x)))  # line: run


def test_an_inplace_layer_that_breaks_backward_is_found_where_it_was_built() -> None:
    torch.manual_seed(0)
    with diagnose(["inplace-saved"]) as session:
        gate = _Gate()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            gate(torch.randn(2, 4)).sum().backward()
    assert _found(session) == [("inplace-saved", _lineno("defined"))]
    assert "ReLU(inplace=True)`, built with inplace=True here and run at" in session.findings[0].message
    assert f":{_lineno('run')}" in session.findings[0].message


# ------------------------------------------------------------------------------------ notes rare on correct code
def test_a_synthetic_data_generator_writing_through_slices_gets_no_note() -> None:
    """The tutorial case of issue 51: 832 notes on `images[k, 0, r0:r1, c0:c1] += 0.9`; now none."""
    torch.manual_seed(0)
    with diagnose() as session:
        images = torch.zeros(64, 1, 8, 8)
        for k in range(len(images)):
            r0, c0 = torch.randint(0, 4, (2,)).tolist()
            images[k, 0, r0:r0 + 4, c0:c0 + 4] += 0.9
            images[k].mul_(0.5)
        _ = images.mean()
    assert session.findings == []


def test_a_named_view_changed_then_its_base_read_is_one_note_per_line() -> None:
    torch.manual_seed(0)
    with diagnose(["view-mutation"]) as session:
        for _ in range(3):
            targets = torch.randn(8, 2)
            scores = targets[:, 0]
            scores.clamp_(min=0)  # line: clamp
            _ = targets.sum()
        quiet = torch.randn(8, 2)
        column = quiet[:, 1]
        column.abs_()  # the base is never read again: nothing changed behind the user's back
    assert _found(session) == [("view-mutation", _lineno("clamp"))]
    assert session.findings[0].count == 3


def _train_once(model: nn.Module) -> torch.optim.Optimizer:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
    return optimizer


def test_unseeded_is_silent_on_a_run_that_is_neither_resumed_nor_compared() -> None:
    torch.seed()  # a fresh process's random seed
    with diagnose(["unseeded"]) as session:
        _train_once(nn.Linear(4, 1))
        buffer = io.BytesIO()
        torch.save(nn.Linear(4, 1).state_dict(), buffer)  # weights for inference: not a resume
    assert session.findings == []


def test_unseeded_is_silent_on_two_models_trained_in_turn_as_a_gan_trains() -> None:
    torch.seed()
    with diagnose(["unseeded"]) as session:
        generator, discriminator = nn.Sequential(nn.Linear(2, 2)), nn.Sequential(nn.Linear(2, 1))
        opt_g = torch.optim.SGD(generator.parameters(), lr=0.01)
        opt_d = torch.optim.SGD(discriminator.parameters(), lr=0.01)
        for _ in range(3):  # both nn.Sequential, both trained, one run: their steps interleave
            opt_d.zero_grad()
            discriminator(generator(torch.randn(4, 2)).detach()).mean().backward()
            opt_d.step()
            opt_g.zero_grad()
            (-discriminator(generator(torch.randn(4, 2)))).mean().backward()
            opt_g.step()
    assert session.findings == []


@pytest.mark.parametrize("signal", ["resume", "compare"])
def test_unseeded_is_a_note_when_runs_are_resumed_or_compared(signal: str) -> None:
    torch.seed()
    with diagnose(["unseeded"]) as session:
        model = nn.Linear(4, 1)  # line: first-draw
        optimizer = _train_once(model)
        if signal == "resume":
            optimizer.load_state_dict(optimizer.state_dict())
        else:
            _train_once(nn.Linear(4, 1))
    assert _found(session) == [("unseeded", _lineno("first-draw"))]
    assert ("resumes an optimizer's state" if signal == "resume" else "trains 2 Linear models") in (
        session.findings[0].message)
