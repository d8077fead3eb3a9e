"""The doctor's instrumentation in-process: traps, false alarms, and leaving PyTorch as it found it."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_hooks
from torch.optim import optimizer as optimizer_hooks
from torch.overrides import _get_current_function_mode

from torchwork.doctor.findings import Finding, exit_code_for, format_report
from torchwork.doctor.op_categories import NO_VALUES, category
from torchwork.doctor.runner import DoctorResult
from torchwork.doctor.session import Session, diagnose
from torchwork.errors import ConfigError


def _ids(session: Session) -> list[str]:
    return [f.id for f in session.findings]


def _train(model: nn.Module, steps: int = 3, batch: int = 8) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(batch, 4)).pow(2).mean().backward()
        optimizer.step()


def test_inplace_error_still_raised_although_saved_tensor_hooks_disable_pytorchs_check() -> None:
    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"), diagnose() as session:
        w = torch.randn(4, requires_grad=True)
        y = torch.sigmoid(w)  # sigmoid saves its output
        y.mul_(2)
        y.sum().backward()
    (finding,) = session.find("inplace-saved")
    assert finding.severity == "error" and "`mul_`" in finding.message and "saved at" in finding.message


def test_legitimate_inplace_use_passes() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 1))
    with diagnose() as session:
        _train(model)
        w = torch.randn(4, requires_grad=True)
        y = torch.sigmoid(w).clone()
        y.add_(1)  # on a copy: fine
        y.sum().backward()
    assert session.findings == []


def test_pytorchs_own_version_check_is_back_after_the_session() -> None:
    with diagnose():
        pass
    w = torch.randn(3, requires_grad=True)
    y = w.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        y.sum().backward()


def test_uninitialised_empty_outputs_are_never_checked_for_nan() -> None:
    for name in ("empty", "empty_like", "empty_strided", "new_empty"):
        assert category(name) & NO_VALUES
    assert not category("log") & NO_VALUES


def test_benign_infinities_are_not_blamed_for_a_later_nan() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    mask = torch.zeros(4, 4).masked_fill(torch.eye(4, dtype=torch.bool), float("-inf"))
    with diagnose(["non-finite-loss"]) as session:
        for step in range(3):
            optimizer.zero_grad()
            scores = model(torch.randn(4, 4)) + mask  # -inf on purpose: masked attention
            attention = torch.softmax(scores, dim=-1)
            # the masked weights are exactly 0: log() of them is -inf, here at the third step only
            loss = attention.sum() if step < 2 else torch.log(attention).sum()
            loss.backward()
            optimizer.step()
    (finding,) = session.findings
    assert finding.id == "non-finite-loss" and "torch.log" in finding.message
    assert finding.line is not None and "optimizer step 3" in finding.message


def test_single_no_grad_forward_per_step_is_not_evaluation() -> None:
    """A GAN generating fakes under no_grad for its discriminator, with BatchNorm in training mode."""
    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(2, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    discriminator = nn.Linear(2, 1)
    opt_g = torch.optim.SGD(generator.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(discriminator.parameters(), lr=0.01)
    with diagnose() as session:
        for _ in range(4):
            with torch.no_grad():
                fake = generator(torch.randn(8, 2))
            opt_d.zero_grad()
            discriminator(fake).mean().backward()
            opt_d.step()
            opt_g.zero_grad()
            (-discriminator(generator(torch.randn(8, 2))).mean()).backward()
            opt_g.step()
    assert _ids(session) == []


def test_validation_without_eval_is_found_in_process() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 1))
    with diagnose() as session:
        _train(model)
        with torch.no_grad():
            for _ in range(3):
                model(torch.randn(8, 4))
    assert _ids(session) == ["eval-mode"]
    assert "Sequential.1 (Dropout)" in session.findings[0].message


def test_user_module_that_moves_its_input_is_not_a_device_mismatch() -> None:
    class Mover(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(3, device="meta"))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.to(self.weight.device) * self.weight

    torch.manual_seed(0)
    with diagnose(["device-mismatch"]) as session:
        Mover()(torch.randn(3))
    assert session.findings == []


def test_write_through_a_temporary_view_is_not_reported() -> None:
    """Issue 51: a view made in the writing statement names the tensor it changes: the change is the intent."""
    torch.manual_seed(0)
    with diagnose(["view-mutation"]) as session:
        flat = torch.randn(6).view(2, 3)  # nobody else holds the base
        flat.mul_(2)
        kept = torch.randn(6)
        kept[:3].mul_(2)  # an update through the view, on purpose: the statement names `kept`
        fresh = torch.empty(4, 2)
        fresh[:, 0].uniform_(-1, 1)  # a deliberate fill of a column (issue 21: not a surprise, not reported)
        fresh[:, 1].zero_()
        _ = kept.sum() + fresh.sum()  # both read again afterwards
    assert session.findings == []


def test_models_with_doctor_hooks_can_be_copied_and_saved() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    with diagnose():
        _train(model)
        clone = copy.deepcopy(model)
        buffer = io.BytesIO()
        torch.save(model, buffer)
        torch.save(model.state_dict(), buffer)
    assert torch.equal(clone.weight, model.weight)


def test_session_leaves_no_hook_behind() -> None:
    before = (len(module_hooks._global_forward_pre_hooks), len(module_hooks._global_forward_hooks),
              len(optimizer_hooks._global_optimizer_pre_hooks), len(optimizer_hooks._global_optimizer_post_hooks))
    originals = (torch.optim.Optimizer.zero_grad, nn.Module.load_state_dict, torch.utils.data.DataLoader.__iter__,
                 torch.manual_seed, nn.DataParallel.__init__, torch.amp.GradScaler.update)
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    with diagnose():
        assert _get_current_function_mode() is not None
        _train(model)
    after = (len(module_hooks._global_forward_pre_hooks), len(module_hooks._global_forward_hooks),
             len(optimizer_hooks._global_optimizer_pre_hooks), len(optimizer_hooks._global_optimizer_post_hooks))
    assert after == before
    assert (torch.optim.Optimizer.zero_grad, nn.Module.load_state_dict, torch.utils.data.DataLoader.__iter__,
            torch.manual_seed, nn.DataParallel.__init__, torch.amp.GradScaler.update) == originals
    assert _get_current_function_mode() is None
    assert not model.weight._backward_hooks


def test_exception_inside_diagnose_is_explained_and_propagates() -> None:
    torch.manual_seed(0)
    with pytest.raises(RuntimeError), diagnose() as session:
        nn.Linear(512, 10)(torch.randn(64, 784))
    (finding,) = session.findings
    assert finding.id == "exception" and "in_features=784" in finding.message
    assert finding.file is not None and finding.file.endswith("test_session.py")


def test_a_failing_check_is_an_internal_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchwork.doctor.checks.batchnorm_single_sample import BatchNormSingleSample

    def broken(self: object, *args: object) -> None:
        raise ZeroDivisionError("bug in a check")

    monkeypatch.setattr(BatchNormSingleSample, "on_module_pre", broken)
    torch.manual_seed(0)
    with diagnose(["batchnorm-single-sample"]) as session:
        out = nn.Linear(4, 1)(torch.randn(2, 4))  # the user's code still runs
    assert out.shape == (2, 1)
    assert session.internal_errors and "bug in a check" in session.internal_errors[0]
    assert DoctorResult(session.findings, 0, session.internal_errors).exit_code == 2


def test_unknown_check_id_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown doctor check"):
        diagnose(["no-such-check"])


def test_one_check_id_may_be_a_string_and_options_are_no_longer_swallowed() -> None:
    """diagnose("eval-mode") was refused as the ids 'e', 'v', 'a', ...; diagnose(bogus=1) was taken and the
    option dropped (the session kept **options and read none of them)."""
    assert [check.id for check in diagnose("batchnorm-single-sample").checks] == ["batchnorm-single-sample"]
    with pytest.raises(TypeError, match="bogus"):
        diagnose(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match=r"^checks=5: give a name or a list of names"):
        diagnose(5)  # type: ignore[arg-type]


def test_run_script_refuses_arguments_of_the_wrong_shape_before_running(tmp_path) -> None:
    from torchwork.doctor.runner import run_script

    script = tmp_path / "train.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    for settings, message in [({"args": "--epochs 3"}, r"^args='--epochs 3': give the script's arguments as a "
                                                       r"list of strings"),
                              ({"args": ["--epochs", 3]}, r"^args: 3 is no string"),
                              ({"quiet_stdout": "yes"}, r"^quiet_stdout='yes': pass True or False"),
                              ({"debug": 1}, r"^debug=1: pass True or False")]:
        with pytest.raises(ConfigError, match=message):
            run_script(script, **settings)
    assert not (tmp_path / "train.py.ran").exists()
    assert run_script(script, ("--epochs", "3"), user_code=str(tmp_path)).exit_code == 0
    assert (tmp_path / "train.py.ran").exists()


def test_exploding_gradients_is_not_fooled_by_a_healthy_run() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    with diagnose(["exploding-gradients", "non-finite-loss"]) as session:
        _train(model, steps=30)
    assert session.findings == []


def test_report_groups_by_severity_and_exit_code_counts_warnings() -> None:
    findings = [Finding("unseeded", "info", "t.py", 1, "m", "f"), Finding("eval-mode", "warning", "t.py", 9, "m", "f"),
                Finding("missing-zero-grad", "error", "t.py", 5, "m", "f")]
    text = format_report(findings, "t.py", 0)
    assert text.index("ERROR") < text.index("WARNING") < text.index("INFO")
    assert exit_code_for(findings) == 1 and exit_code_for(findings[:1]) == 0
    assert math.isfinite(len(text))


def test_broken_graph_names_each_cause_for_its_own_parameters() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone, self.unused, self.head = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                features = self.backbone(x)
            return self.head(features)

    torch.manual_seed(0)
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with diagnose(["broken-graph"]) as session:
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(4, 4)).sum().backward()
            optimizer.step()
    messages = sorted(f.message for f in session.findings)
    assert len(messages) == 2 and all(f.severity == "warning" for f in session.findings)
    assert "Model.backbone ran under torch.no_grad()" in messages[0] and "Model.unused" not in messages[0]
    assert "Model.unused.bias, Model.unused.weight" in messages[1] and "no loss was built on them" in messages[1]


def test_state_dict_diagnosis_names_prefixes_wrappers_and_heads() -> None:
    from torchwork.doctor.checks.state_dict_mismatch import diagnose_state_dict

    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3)).state_dict()
    compiled = {f"_orig_mod.{k}": v for k, v in model.items()}
    assert "'_orig_mod.'" in diagnose_state_dict(model, compiled)[0]
    assert "torch.compile" in diagnose_state_dict(model, compiled)[0]
    wrapped_model = {f"module.{k}": v for k, v in model.items()}
    what, fix = diagnose_state_dict(wrapped_model, model)
    assert "model's keys have the prefix 'module.'" in what and "model.module" in fix
    what, fix = diagnose_state_dict(model, {"model": model, "optimizer": {}, "epoch": 3})
    assert "checkpoint dictionary" in what and "checkpoint['model']" in fix
    head = dict(model, **{"2.weight": torch.zeros(10, 4), "2.bias": torch.zeros(10)})
    what, _ = diagnose_state_dict(model, head)
    assert "a head of another size" in what and "(10 vs 3)" in what


def test_optimizer_step_between_forward_and_backward_is_named() -> None:
    """The GAN mistake: the discriminator steps before the generator's loss is backpropagated through it."""
    torch.manual_seed(0)
    generator, discriminator = nn.Linear(4, 2), nn.Linear(2, 1)
    opt_g = torch.optim.SGD(generator.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(discriminator.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="modified by SGD.step"), diagnose(["inplace-saved"]) as session:
        fake = generator(torch.randn(8, 4))
        d_loss = discriminator(fake.detach()).mean()
        g_loss = -discriminator(fake).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()  # changes the weights g_loss's graph saved
        opt_g.zero_grad()
        g_loss.backward()
    (finding,) = session.findings
    assert finding.message.startswith("SGD.step() at ") and " changed a tensor" in finding.message


def test_nested_and_model_prefixes_are_found_by_matching_keys() -> None:
    from torchwork.doctor.checks.state_dict_mismatch import diagnose_state_dict

    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3)).state_dict()
    nested = {f"module._orig_mod.{k}": v for k, v in model.items()}  # DDP around a compiled model
    what, fix = diagnose_state_dict(model, nested)
    assert "'module._orig_mod.'" in what and "torch.compile" in what and "DataParallel" in what
    assert "removeprefix('module._orig_mod.')" in fix
    lightning = {f"model.{k}": v for k, v in model.items()}
    assert "'model.'" in diagnose_state_dict(model, lightning)[0]


def test_a_load_that_changes_nothing_is_caught_by_its_effect(tmp_path) -> None:
    """Issue 21 item 1: the filter-update-load idiom with a prefixed checkpoint loads the model's own tensors."""
    torch.manual_seed(0)
    path = tmp_path / "ckpt.pt"
    torch.save({f"module.{k}": v for k, v in nn.Linear(4, 2).state_dict().items()}, path)
    model = nn.Linear(4, 2)
    with diagnose(["state-dict-mismatch"]) as session:
        pretrained = torch.load(path, weights_only=True)
        own = model.state_dict()
        own.update({k: v for k, v in pretrained.items() if k in own})
        model.load_state_dict(own)
    (finding,) = session.findings
    assert "changed none of the model's 2 parameter tensors" in finding.message
    assert "'module.'" in finding.message and "removeprefix('module.')" in finding.fix
    with diagnose(["state-dict-mismatch"]) as session:  # the same idiom after stripping: loads, silent
        pretrained = {k.removeprefix("module."): v for k, v in torch.load(path, weights_only=True).items()}
        own = model.state_dict()
        own.update({k: v for k, v in pretrained.items() if k in own})
        model.load_state_dict(own)
        model.load_state_dict(model.state_dict())  # its own values, no checkpoint read for it: on purpose
    assert session.findings == []


def test_graph_kept_alive_across_steps_but_not_within_one() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with diagnose(["graph-kept-alive"]) as session:
        for _ in range(4):  # gradient accumulation: a sum within one optimizer step is fine
            optimizer.zero_grad()
            total = 0
            for _ in range(3):
                total = total + model(torch.randn(8, 4)).pow(2).mean()
            total.backward()
            optimizer.step()
    assert session.findings == []
    with diagnose(["graph-kept-alive"]) as session:
        running = 0
        for _ in range(4):
            optimizer.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            optimizer.step()
            running += loss
    (finding,) = session.findings
    assert finding.severity == "warning" and "4 steps" in finding.message and "autograd nodes" in finding.message


def test_a_shared_term_used_once_more_after_another_models_step_is_not_a_running_total() -> None:
    """eriklindernoren/PyTorch-GAN's softmax_gan: D steps between its loss and G's, both built on one log(Z)."""
    torch.manual_seed(0)
    generator, discriminator = nn.Linear(2, 2), nn.Linear(2, 1)
    opt_g = torch.optim.SGD(generator.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(discriminator.parameters(), lr=0.01)
    with diagnose(["graph-kept-alive"]) as session:
        for _ in range(4):
            opt_g.zero_grad()
            opt_d.zero_grad()
            d_real, d_fake = discriminator(torch.randn(4, 2)), discriminator(generator(torch.randn(4, 2)))
            z = torch.exp(-d_real).sum() + torch.exp(-d_fake).sum()
            (d_real.sum() + torch.log(z + 1e-8)).backward(retain_graph=True)
            opt_d.step()
            g_loss = d_fake.sum() + torch.log(z + 1e-8)  # its backward would fail: D changed under the graph
            del g_loss
            opt_g.step()
    assert session.findings == [], session.findings


def test_int_targets_are_read_from_the_frames() -> None:
    """Issue 21 item 5: 'expected scalar type Long but found Int' inside nll_loss is a class target: .long()."""
    from torchwork.doctor.explain import explain_exception

    def nll_loss() -> None:
        raise RuntimeError("expected scalar type Long but found Int")

    try:
        nll_loss()
    except RuntimeError as error:
        explanation = explain_exception(error)
    assert explanation is not None and explanation.family == "class-target-dtype" and ".long()" in explanation.fix
