"""freeze / unfreeze / trainable_parameters, frozen BatchNorm through fit, and param_groups' real lrs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork.errors import ConfigError
from torchwork.finetune import freeze, keep_frozen_norms_in_eval, param_groups, trainable_parameters, unfreeze


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU())
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(6, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU()) for _ in range(3))
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x.mean(dim=(2, 3))))


def data(batches: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 1, 6, 6, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(batches)]


def test_freeze_by_glob_and_up_to_a_named_layer():
    model = Net()
    frozen = freeze(model, up_to="blocks.1")
    assert frozen == [n for n, _ in model.named_parameters() if n.startswith(("stem.", "blocks.0.", "blocks.1."))]
    assert unfreeze(model, "blocks.[01]") == [n for n in frozen if n.startswith("blocks.")]
    assert freeze(model, "blocks.*.1") == ["blocks.0.1.weight", "blocks.0.1.bias", "blocks.1.1.weight",
                                           "blocks.1.1.bias", "blocks.2.1.weight", "blocks.2.1.bias"]
    assert {id(p) for p in trainable_parameters(model)} == {id(p) for p in model.parameters() if p.requires_grad}
    with pytest.raises(ConfigError, match="no parameter lies in a module named"):
        freeze(model, "encoder")
    with pytest.raises(ConfigError, match="up_to='blocks.7'"):
        freeze(model, up_to="blocks.7")


def test_freeze_param_groups_and_one_step_change_exactly_the_trainable_tensors():
    torch.manual_seed(0)
    model = Net()
    freeze(model, "stem", "blocks.0")
    plan = param_groups(model, lr=1e-2, layer_decay=0.5, head="head", weight_decay=0.1)
    optimizer = torch.optim.AdamW(plan)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), device="cpu", progress=False, guard=False)
    trainer.fit(data(1), epochs=1)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    frozen_bn_buffers = {k for k in before if k.startswith(("stem.1.", "blocks.0.1.")) and "running" in k}
    # every trainable tensor moved, plus the running statistics of the BatchNorms still training
    live_buffers = {k for k in before if k.startswith(("blocks.1.1.", "blocks.2.1.")) and
                    k.rsplit(".", 1)[1] in ("running_mean", "running_var", "num_batches_tracked")}
    assert changed == trainable | live_buffers
    assert not changed & frozen_bn_buffers


def test_param_groups_gives_real_per_group_lrs_and_no_decay_for_bias_and_norm():
    model = Net()
    plan = param_groups(model, lr=1e-3, layer_decay=0.5, head="head", head_lr=5e-3, weight_decay=0.05)
    by_name = {g["name"]: g for g in plan if g["weight_decay"] > 0}
    # stem = layer 0, blocks.0..2 = 1..3, norm = 4, head = top (5)
    assert by_name["stem"]["lr"] == pytest.approx(1e-3 * 0.5 ** 5)
    assert by_name["blocks.2"]["lr"] == pytest.approx(1e-3 * 0.5 ** 2)
    assert by_name["head"]["lr"] == 5e-3
    no_decay = {id(p) for g in plan if g["weight_decay"] == 0 for p in g["params"]}
    for name, p in model.named_parameters():
        plain = name.endswith("bias") or name.split(".")[-2] == "1" or name.startswith("norm")  # BatchNorm: .1.
        assert (id(p) in no_decay) == plain, name
    optimizer = torch.optim.SGD(plan, lr=123.0)  # the default lr is never used: each group has its own
    assert sorted({g["lr"] for g in optimizer.param_groups}) == sorted({g["lr"] for g in plan})
    planned = [g["lr"] for g in optimizer.param_groups]
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 ** step)
    optimizer.step()
    scheduler.step()
    for group, lr in zip(optimizer.param_groups, planned):
        assert group["lr"] == pytest.approx(lr * 0.5)  # every group follows the schedule


def test_the_plan_table_counts_trainable_and_in_optimizer_by_identity():
    model = Net()
    freeze(model, "stem")
    plan = param_groups(model, lr=1e-3, head="head")
    optimizer = torch.optim.AdamW([g for g in plan if g["name"] != "blocks.2"])  # a group forgotten
    table = plan.table(optimizer)
    header, *rows = table.splitlines()
    assert header.split() == ["module", "parameters", "trainable", "in", "optimizer", "lr", "weight", "decay"]
    cells = {row.split()[0]: row.split() for row in rows}
    stem_params = sum(p.numel() for p in model.stem.parameters())
    assert cells["stem"][1:4] == [str(stem_params), "0", "0"]
    block = sum(p.numel() for p in model.blocks[2].parameters())
    assert cells["blocks.2"][1:4] == [str(block), str(block), "0"]
    assert cells["head"][1:4] == ["28", "28", "28"]
    with pytest.raises(ConfigError, match="every parameter is frozen"):
        param_groups(freeze(model) and model, lr=1e-3)


@pytest.mark.parametrize(("settings", "message"), [
    # each was planned into the groups: NaN or inf rates train to NaN weights (torch's optimizers accept them)
    ({"lr": float("nan")}, r"param_groups\(lr=nan\): use a positive finite number"),
    ({"lr": True}, r"param_groups\(lr=True\)"),
    ({"lr": 10**400}, r"param_groups\(lr=<an integer of 401 digits or so>\)"),  # OverflowError before
    ({"lr": 1e-3, "head_lr": float("inf")}, r"param_groups\(head_lr=inf\): use a positive finite number"),
    ({"lr": 1e-3, "head_lr": float("nan")}, r"param_groups\(head_lr=nan\)"),
    ({"lr": 1e-3, "weight_decay": float("nan")}, r"param_groups\(weight_decay=nan\): use a non-negative finite"),
    ({"lr": 1e-3, "layer_decay": float("nan")}, r"param_groups\(layer_decay=nan\): use a number in \(0, 1\]"),
    ({"lr": 0}, r"param_groups\(lr=0\): use a positive"),
], ids=["lr-nan", "lr-bool", "lr-401-digits", "head-inf", "head-nan", "decay-nan", "layer-decay-nan", "lr-0"])
def test_a_rate_that_is_no_finite_number_in_range_is_refused_before_planning(settings, message) -> None:
    with pytest.raises(ConfigError, match=message):
        param_groups(Net(), **settings)
    assert param_groups(Net(), lr=1e-3, weight_decay=0, head_lr=1e-2)  # zero decay and a head rate are fine


@pytest.mark.parametrize(("in_channels", "message"), [
    (2.5, r"in_channels=2\.5: a whole number of input channels from 1 to 4,096"),  # torch's TypeError before
    (10**9, r"in_channels=1000000000: a whole number"),  # asked the allocator for 288 GB
    (0, r"in_channels=0: a whole number"),
    (True, r"in_channels=True"),
])
def test_adapt_input_channels_takes_a_whole_number_of_channels(in_channels, message) -> None:
    from torchwork.finetune import adapt_input_channels

    conv = nn.Conv2d(3, 8, 3)
    with pytest.raises(ConfigError, match=message):
        adapt_input_channels(conv, in_channels)
    assert conv.weight.shape == (8, 3, 3, 3) and adapt_input_channels(conv, 4).weight.shape == (8, 4, 3, 3)


@pytest.mark.parametrize(("settings", "message"), [
    ({"classes": 10**9}, r"classes=1000000000\): a classifier needs a whole number of classes from 2 to 100,000"),
    ({"classes": 2.0}, r"classes=2\.0\)"),
    ({"classes": 1}, r"classes=1\)"),
    ({"classes": 3, "dropout": float("nan")}, r"dropout=nan\): use a probability from 0 up to \(not including\) 1"),
    ({"classes": 3, "dropout": 1.5}, r"dropout=1\.5\)"),  # torch's ValueError before
])
def test_a_classifier_heads_classes_and_dropout_are_checked_before_the_encoder_is_built(settings, message) -> None:
    from torchwork.finetune import MiniLMClassifier

    with pytest.raises(ConfigError, match=r"MiniLMClassifier\(" + message):
        MiniLMClassifier(**settings)


def test_frozen_batchnorm_stays_in_eval_through_fit_and_its_statistics_do_not_drift():
    torch.manual_seed(0)
    model = Net()
    freeze(model, "stem", "blocks")
    model.train()  # what users do: it puts every BatchNorm back in training mode
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=1e-2)
    seen = []

    class Watch:
        def on_step_end(self, trainer, logs):
            seen.append([m.training for m in model.modules() if isinstance(m, nn.BatchNorm2d)])

    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), device="cpu", progress=False, callbacks=[Watch()])
    trainer.fit(data(), data(1), epochs=2)  # an evaluation between the epochs too
    assert seen and all(modes == [False] * 4 for modes in seen)
    assert all(torch.equal(v, stats[k]) for k, v in model.state_dict().items() if "running" in k)
    assert model.head.training  # the rest trains as usual
    # unfrozen again, the layer trains again at the next epoch start
    unfreeze(model, "blocks.2")
    model.train()
    assert keep_frozen_norms_in_eval(model) == ["stem.1", "blocks.0.1", "blocks.1.1"]
    assert model.blocks[2][1].training
