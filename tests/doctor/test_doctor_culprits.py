"""Issue 33: the doctor names the line where a problem starts, not the line where it shows.

* an overflow at the loss on finite but huge inputs is followed back to the layer whose output grew;
  a log of zero keeps its own advice (the operation itself is the culprit);
* zero_grad() inside the micro-batch loop of gradient accumulation, at its line;
* ``module.requires_grad = False`` (freezes nothing), at the assignment;
* a GAN generator loss on detached fakes, at that detach (not the discriminator's, which is right);
* sampling in training mode, at the line that calls the sampler.
"""

from __future__ import annotations

import torch
from marked_lines import lbfgs_steps, marked_line
from torch import nn

from torchwork.doctor.findings import format_where
from torchwork.doctor.session import diagnose


def _lineno(marker: str) -> int:
    return marked_line(__file__, marker)


class _Deep(nn.Module):
    """A stack of linear layers whose middle layer has weights 1e21 times too large."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.blow_up, self.head = nn.Linear(8, 64), nn.Linear(64, 64), nn.Linear(64, 1)
        with torch.no_grad():
            self.blow_up.weight.mul_(1e21)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.first(x))
        h = torch.relu(self.blow_up(h))  # line: grew
        return self.head(h)


def test_an_overflow_on_huge_inputs_blames_the_layer_that_grew_them() -> None:
    torch.manual_seed(0)
    model = _Deep()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    with diagnose() as session:
        optimizer.zero_grad()
        loss = ((model(torch.randn(4, 8)) - 1.0) ** 2).mean()
        loss.backward()
        optimizer.step()
    (finding,) = session.find("non-finite-loss")
    assert finding.line == _lineno("grew"), finding
    assert "_Deep.blow_up (Linear)" in finding.message and "grew upstream" in finding.message
    assert "clamp before log" not in finding.fix and "initialised" in finding.fix


def test_a_log_of_zero_is_still_the_operations_fault() -> None:
    torch.manual_seed(0)
    weight = torch.ones(3, requires_grad=True)
    with diagnose() as session:
        loss = torch.log(weight * torch.tensor([1.0, 0.0, 2.0])).sum()  # line: log
        loss.backward()
        torch.optim.SGD([weight], lr=0.1).step()
    (finding,) = session.find("non-finite-loss")
    assert finding.line == _lineno("log")
    assert "torch.log on this line, with finite inputs" in finding.message and "clamp before log" in finding.fix


def test_one_element_results_are_read_directly_and_still_blamed() -> None:
    """A one-element result (a loss, a sum) is read with item(), not reduced: NaN from 0/0 of two sums and
    -inf from a log of a one-element slice are each the first non-finite value, at their lines."""
    weight = torch.ones(3, requires_grad=True)
    with diagnose() as session:
        nothing = (weight * 0.0).sum()
        loss = nothing / nothing  # line: zero over zero
        loss.backward()
    (finding,) = session.find("non-finite-loss")
    assert finding.line == _lineno("zero over zero") and "nan" in finding.message.lower()
    with diagnose() as session:
        loss = torch.log(weight[:1] * 0.0).sum()  # line: log of a slice
        loss.backward()
    (finding,) = session.find("non-finite-loss")
    assert finding.line == _lineno("log of a slice") and "torch.log on this line" in finding.message


def test_huge_data_that_no_layer_grew_is_called_data() -> None:
    weight = torch.ones(2, requires_grad=True)
    with diagnose() as session:
        loss = ((weight * torch.tensor([3e20, 1.0])) ** 2).sum()  # line: data
        loss.backward()
        torch.optim.SGD([weight], lr=0.1).step()
    (finding,) = session.find("non-finite-loss")
    assert finding.line == _lineno("data") and "came in that large" in finding.message
    assert "Normalise the data" in finding.fix


# ------------------------------------------------------------------------------ gradient accumulation
def _accumulate(model: nn.Module, zero_inside: bool, steps: int = 3, k: int = 3) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(steps * k):
        if zero_inside:
            optimizer.zero_grad()  # line: zero inside
        (model(torch.randn(4, 4)).pow(2).mean() / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            if not zero_inside:
                optimizer.zero_grad()


def test_zero_grad_inside_the_micro_batch_loop_is_found_at_its_line() -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        _accumulate(nn.Linear(4, 2), zero_inside=True)
    (finding,) = session.find("zero-grad-in-accumulation")
    assert finding.line == _lineno("zero inside") and finding.severity == "error"
    assert "ran after 3 backward passes" in finding.message and "cleared the gradients of 2" in finding.message


def test_accumulation_done_right_an_lbfgs_closure_and_a_gan_are_not_found() -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        _accumulate(nn.Linear(4, 2), zero_inside=False)
        lbfgs_steps()
        gen, disc = nn.Linear(2, 2), nn.Linear(2, 1)
        opt_g, opt_d = torch.optim.SGD(gen.parameters(), lr=0.01), torch.optim.SGD(disc.parameters(), lr=0.01)
        for _ in range(3):  # the generator's loss reaches D too; D clears those gradients before its own step
            fake = gen(torch.randn(4, 2))
            disc.zero_grad()
            (disc(torch.randn(4, 2)).mean() - disc(fake.detach()).mean()).backward()
            opt_d.step()
            gen.zero_grad()
            disc(fake).mean().backward()
            opt_g.step()
    assert session.find("zero-grad-in-accumulation") == [], session.findings


# ------------------------------------------------------------------------------ freezing
def test_requires_grad_assigned_on_a_module_is_found_with_what_still_trains() -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        body, head = nn.Linear(4, 4), nn.Linear(4, 1)
        body.requires_grad = False  # line: attribute
        _train_pair(body, head)
    (finding,) = session.find("requires-grad-attribute")
    assert finding.line == _lineno("attribute")
    assert "(weight, bias) still have requires_grad=True" in finding.message and "requires_grad_(False)" in finding.fix


def test_freezing_done_right_is_not_found() -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        body, head = nn.Linear(4, 4), nn.Linear(4, 1)
        body.requires_grad_(False)
        other = nn.Linear(4, 4)
        other.requires_grad = False  # the attribute, but the parameters are frozen right after
        for p in other.parameters():
            p.requires_grad = False
        _train_pair(body, head)
    assert session.find("requires-grad-attribute") == []


def _train_pair(body: nn.Module, head: nn.Module) -> None:
    params = [p for p in [*body.parameters(), *head.parameters()] if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=0.01)
    for _ in range(2):
        optimizer.zero_grad()
        head(body(torch.randn(4, 4))).mean().backward()
        optimizer.step()


# ------------------------------------------------------------------------------ a detached loss term
def test_a_generator_loss_on_detached_fakes_is_blamed_at_its_own_detach() -> None:
    torch.manual_seed(0)
    gen, disc = nn.Linear(3, 2), nn.Linear(2, 1)
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
    with diagnose() as session:
        for _ in range(3):
            fake = gen(torch.randn(8, 3))
            opt_d.zero_grad()
            (disc(fake.detach()).mean() - disc(torch.randn(8, 2)).mean()).backward()  # right: D's step
            opt_d.step()
            opt_g.zero_grad()
            g_loss = -disc(fake.detach()).mean()  # line: cut
            g_loss.backward()  # line: term
            opt_g.step()  # line: starved
    (finding,) = session.find("broken-graph")
    assert finding.line == _lineno("cut"), finding
    assert f":{_lineno('term')} was computed from that result" in finding.message
    assert "Adam.step() at" in finding.message and f":{_lineno('starved')}, which holds them" in finding.message


# ------------------------------------------------------------------------------ sampling in train mode
def _sample(model: nn.Module, steps: int = 6) -> list[int]:
    tokens = [0, 0]
    for _ in range(steps):
        logits = model(torch.tensor([tokens[-2:]]))
        tokens.append(int(torch.multinomial(logits.softmax(-1), 1)))
    return tokens


def _token_model() -> nn.Module:
    return nn.Sequential(nn.Embedding(5, 4), nn.Flatten(), nn.Dropout(0.3), nn.Linear(8, 5))


def _fit(model: nn.Module) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(torch.randint(0, 5, (8, 2))), torch.randint(0, 5, (8,))).backward()
        optimizer.step()


def test_sampling_in_train_mode_is_found_at_the_line_that_calls_the_sampler() -> None:
    torch.manual_seed(0)
    model = _token_model()
    with diagnose() as session:
        _fit(model)
        _sample(model)  # line: sampler call
        _fit(model)
    (finding,) = session.findings
    assert finding.id == "eval-mode" and finding.line == _lineno("sampler call"), finding
    assert "_sample(...), called here" in finding.message and "autograd recording" in finding.message


def test_sampling_done_right_and_a_validation_function_keep_their_verdicts() -> None:
    torch.manual_seed(0)
    model = _token_model()

    def validate() -> None:
        with torch.no_grad():
            for _ in range(3):
                model(torch.randint(0, 5, (8, 2)))  # line: validate

    with diagnose() as session:
        _fit(model)
        model.eval()
        with torch.no_grad():
            _sample(model)
        model.train()
        _fit(model)
        validate()
        _fit(model)
    (finding,) = session.findings
    assert finding.id == "eval-mode" and finding.line == _lineno("validate"), finding


def test_one_helper_stepping_both_gan_losses_is_not_accumulation() -> None:
    def update(loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad()
        loss.backward()  # the same line for both losses: the call chains differ
        optimizer.step()

    torch.manual_seed(0)
    gen, disc = nn.Linear(2, 2), nn.Linear(2, 1)
    opt_g, opt_d = torch.optim.SGD(gen.parameters(), lr=0.01), torch.optim.SGD(disc.parameters(), lr=0.01)
    with diagnose() as session:
        for _ in range(4):
            fake = gen(torch.randn(4, 2))
            update(-disc(fake).mean(), opt_g)  # reaches D's parameters too
            update(disc(fake.detach()).mean() - disc(torch.randn(4, 2)).mean(), opt_d)
    assert session.find("zero-grad-in-accumulation") == [], session.findings


def test_a_masking_constant_is_not_a_magnitude_that_grew() -> None:
    weight = torch.ones(3, requires_grad=True)
    with diagnose() as session:
        scores = (weight * torch.tensor([1.0, 2.0, 3.0])).masked_fill(torch.tensor([False, False, True]), -1e9)
        loss = torch.log(scores + 1.0).sum()  # line: masked log
        loss.backward()
        torch.optim.SGD([weight], lr=0.1).step()
    (finding,) = session.find("non-finite-loss")
    assert finding.line == _lineno("masked log") and "torch.log on this line" in finding.message


def test_an_adversarial_term_on_detached_fakes_is_found_although_l1_still_trains() -> None:
    torch.manual_seed(0)
    gen, disc = nn.Linear(3, 2), nn.Linear(2, 1)
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
    with diagnose() as session:
        for _ in range(3):
            fake = gen(torch.randn(8, 3))
            opt_d.zero_grad()
            (disc(fake.detach()).mean() - disc(torch.randn(8, 2)).mean()).backward()
            opt_d.step()
            opt_g.zero_grad()
            scored = disc(fake.detach() * 1.0)  # line: term cut
            (-scored.mean() + (fake - 1.0).abs().mean()).backward()
            opt_g.step()
    (finding,) = session.find("broken-graph")
    assert finding.line == _lineno("term cut") and "follows the other terms only" in finding.message
    assert "Linear(...)" in finding.message and "Adam.step() updates" in finding.message


class _CharRNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.cell, self.drop, self.out = nn.Embedding(6, 8), nn.GRUCell(8, 8), nn.Dropout(0.2), nn.Linear(8, 6)

    def forward(self, token: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.cell(self.embed(token), hidden)
        return self.out(self.drop(hidden)), hidden


def _sample_chars(model: _CharRNN, steps: int = 5) -> list[int]:
    token, hidden, out = torch.tensor([0]), torch.zeros(1, 8), []
    for _ in range(steps):
        logits, hidden = model(token, hidden)
        token = torch.multinomial(logits.softmax(-1), 1)[0]
        out.append(int(token))
    return out


def test_a_recurrent_sampler_fed_its_own_hidden_state_is_generation() -> None:
    torch.manual_seed(0)
    model = _CharRNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose() as session:
        for _ in range(2):
            optimizer.zero_grad()
            logits, _ = model(torch.randint(0, 6, (4,)), torch.zeros(4, 8))
            nn.functional.cross_entropy(logits, torch.randint(0, 6, (4,))).backward()
            optimizer.step()
        with torch.no_grad():
            _sample_chars(model)  # line: char sampler
    (finding,) = session.findings
    assert finding.id == "eval-mode" and finding.line == _lineno("char sampler"), finding


def test_the_new_bookkeeping_survives_meta_sparse_and_integer_models() -> None:
    embed = nn.EmbeddingBag(10, 4, mode="sum", sparse=True)
    with diagnose() as session:
        optimizer = torch.optim.SGD(embed.parameters(), lr=0.1)
        for _ in range(3):
            optimizer.zero_grad()
            embed(torch.tensor([[1, 2], [3, 4]])).sum().backward()  # sparse gradients
            optimizer.step()
        meta = nn.Linear(4, 4, device="meta")
        for _ in range(2):
            meta(torch.empty(2, 4, device="meta"))
            nn.Embedding(5, 2)(torch.tensor([[1, 2]]))
    assert session.internal_errors == [], session.internal_errors


# ------------------------------------------------------------------------------ training in eval mode
def _epochs(model: nn.Module, evaluate: bool) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(2):
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.randn(4, 4)).pow(2).mean().backward()  # line: training forward
            optimizer.step()
        if evaluate:
            model.eval()  # line: evaluation
            with torch.no_grad():
                model(torch.randn(4, 4))


def test_training_in_eval_mode_names_the_eval_call_that_was_never_undone() -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        _epochs(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.2), nn.Linear(4, 1)), evaluate=True)
    (finding,) = session.find("train-mode")
    assert finding.line == _lineno("training forward")
    assert f"since the call at {format_where((__file__, _lineno('evaluation')))} switched it to eval mode" in finding.message


def test_a_model_loaded_by_from_pretrained_names_that_call(tmp_path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=40, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    torch.manual_seed(0)
    with diagnose() as session:
        model = BertForSequenceClassification.from_pretrained(tmp_path)  # line: loaded
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(2):
            model(input_ids=torch.randint(0, 40, (2, 6)), labels=torch.tensor([0, 1])).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    (finding,) = session.find("train-mode")
    assert f"since the call at {format_where((__file__, _lineno('loaded')))} switched it to eval mode" in finding.message
    assert "from_pretrained" in finding.fix


def test_eval_then_train_again_is_silent() -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.2), nn.Linear(4, 1))
        model.eval()
        model.train()
        _epochs(model, evaluate=False)
    assert session.find("train-mode") == [], session.findings

