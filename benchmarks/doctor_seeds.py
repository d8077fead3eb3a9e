"""The seeded-bug corpus of ``benchmarks/doctor_precision.py``: one classic mistake planted in a clean script.

Each :class:`Seed` names a correct script of ``tests/doctor/real/correct/`` and a few text edits; each edit's
``old`` text must occur exactly once in the script, and the planted script differs from the clean one by
those edits only. ``culprit`` is text that occurs exactly once in the planted script, on the line the doctor
must name (the contract of each check, in docs/doctor.md): the ``step()`` that used uncleared gradients, the
evaluation loop's forward call, the ``.detach()`` that starved the generator, the ``requires_grad``
assignment, the in-place write, the ``zero_grad()`` inside the window, the dropout call, the per-batch
``scheduler.step()``, the ``load_state_dict``, the DataLoader that makes the batch of one (the cause), the
loss call, and the backward of an undivided micro-batch mean. The planted scripts are written to a temporary
folder when the benchmark runs: no copies are kept. ``tests/doctor/test_doctor_seeds.py`` checks that every edit applies and every culprit is found.

Example:
    >>> seed = Seed("digits_train_test_loops", "softmax-before-cross-entropy",
    ...             (("loss_fn(model(xb), yb)", "loss_fn(model(xb).softmax(dim=1), yb)"),),
    ...             "loss = loss_fn(model(xb).softmax(dim=1), yb)")
    >>> text, line = plant(seed, "x = 1\\n        loss = loss_fn(model(xb), yb)\\n")
    >>> line, seed.check
    (2, 'loss-on-probabilities')
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

CORRECT = Path(__file__).resolve().parents[1] / "tests" / "doctor" / "real" / "correct"

# the mistake -> the check that must find it
KINDS: dict[str, str] = {
    "missing-zero-grad": "missing-zero-grad",
    "eval-missing": "eval-mode",
    "detach-in-generator-step": "broken-graph",
    "module-requires-grad-false": "requires-grad-attribute",
    "inplace-on-saved-tensor": "inplace-saved",
    "zero-grad-inside-accumulation": "zero-grad-in-accumulation",
    "dropout-on-in-eval": "dropout-in-eval",
    "steplr-per-batch": "scheduler-per-batch",
    "prefix-mismatch-strict-false": "state-dict-mismatch",
    "batchnorm-batch-of-one": "batchnorm-single-sample",
    "softmax-before-cross-entropy": "loss-on-probabilities",
    "loss-not-averaged-in-accumulation": "accumulation-not-averaged",
}


class PlantError(ValueError):
    """An edit of a seed does not apply exactly once, or its culprit is not on exactly one line."""


@dataclasses.dataclass(frozen=True)
class Seed:
    script: str  # a stem of tests/doctor/real/correct/
    kind: str  # a key of KINDS
    edits: tuple[tuple[str, str], ...]  # (old, new), applied in order
    culprit: str  # occurs once in the planted script, on the line the finding must name

    @property
    def check(self) -> str:
        return KINDS[self.kind]

    @property
    def name(self) -> str:
        return f"{self.script}__{self.kind}"


def plant(seed: Seed, source: str) -> tuple[str, int]:
    """The planted script's text and its culprit's line (1-based)."""
    text = source
    for old, new in seed.edits:
        if text.count(old) != 1:
            raise PlantError(f"{seed.name}: {old!r} occurs {text.count(old)} times in the script (must be once); "
                             "the clean script changed: update the seed's edit.")
        text = text.replace(old, new)
    if text.count(seed.culprit) != 1:
        raise PlantError(f"{seed.name}: the culprit {seed.culprit!r} occurs {text.count(seed.culprit)} times in the "
                         "planted script (must be once): make it longer.")
    return text, text[:text.index(seed.culprit)].count("\n") + 1


def _drop(line: str) -> tuple[str, str]:
    return line, ""


def _after(anchor: str, added: str) -> tuple[str, str]:
    return anchor, anchor + added


def _before(anchor: str, added: str) -> tuple[str, str]:
    return anchor, added + anchor


SEEDS: tuple[Seed, ...] = (
    # -- missing zero_grad: the step (or the hand-written update) that used the summed gradients
    Seed("mnist_style_cnn", "missing-zero-grad", (_drop("        optimizer.zero_grad()\n"),), "        optimizer.step()"),
    Seed("digits_train_test_loops", "missing-zero-grad", (_drop("        optimizer.zero_grad()\n"),),
         "        optimizer.step()"),
    Seed("cnn_resume_checkpoint", "missing-zero-grad", (_drop("        opt.zero_grad()\n"),), "        opt.step()"),
    Seed("vae_reparam", "missing-zero-grad", (_drop("        optimizer.zero_grad()\n"),), "        optimizer.step()"),
    Seed("finetune_clean_prefixes", "missing-zero-grad", (_drop("    optimizer.zero_grad()\n"),), "    optimizer.step()"),
    Seed("addition_gpt_trainer", "missing-zero-grad", (_drop("    model.zero_grad(set_to_none=True)\n"),),
         "    optimizer.step()"),
    Seed("char_gpt_accumulation", "missing-zero-grad", (_drop("    optimizer.zero_grad(set_to_none=True)\n"),),
         "    scaler.step(optimizer)"),
    Seed("gan_bce_detached_fakes", "missing-zero-grad", (_drop("        generator.zero_grad()\n"),), "        opt_g.step()"),
    Seed("reinforce_policy_gradient", "missing-zero-grad", (_drop("    optimizer.zero_grad()\n"),), "    optimizer.step()"),
    Seed("sine_lstmcell_lbfgs", "missing-zero-grad", (_drop("        optimizer.zero_grad()\n"),),
         "optimizer.step(closure)"),
    Seed("lstm_lm_truncated_bptt", "missing-zero-grad", (_drop("        model.zero_grad()\n"),),
         "            p.data.add_(p.grad, alpha=-lr)"),
    Seed("poly_regression_manual_sgd", "missing-zero-grad", (_drop("    layer.zero_grad()\n"),),
         "        param.data.add_(param.grad, alpha=-0.05)"),
    # -- model.eval() missing: the evaluation loop's forward call (models with Dropout or BatchNorm only)
    Seed("mnist_style_cnn", "eval-missing", (_drop("    model.eval()\n"),), "            log_probs = model(x)"),
    Seed("cnn_resume_checkpoint", "eval-missing", (_drop("    net.eval()\n"),), "accuracy.add(top_k(net(x), y)"),
    Seed("char_gpt_accumulation", "eval-missing", (_drop("    model.eval()\n"),),
         "    result = {split: sum(model(*batch_of(split))"),
    Seed("lstm_lm_truncated_bptt", "eval-missing", (_drop("    model.eval()\n"),),
         "            log_probs, state = model(x, state)"),
    # -- detach in the generator's step: the .detach() that fed the generator's loss
    Seed("gan_bce_detached_fakes", "detach-in-generator-step",
         (("loss_g = bce(discriminator(fakes), target)", "loss_g = bce(discriminator(fakes.detach()), target)"),),
         "loss_g = bce(discriminator(fakes.detach()), target)"),
    Seed("gan_bce_detached_fakes", "detach-in-generator-step",
         (("fakes = generator(torch.randn(n, LATENT, 1, 1))", "fakes = generator(torch.randn(n, LATENT, 1, 1)).detach()"),),
         "fakes = generator(torch.randn(n, LATENT, 1, 1)).detach()"),
    # -- module.requires_grad = False: the assignment
    Seed("mnist_style_cnn", "module-requires-grad-false",
         (_after("    model = Digits()\n", "    model.features.requires_grad = False  # freeze the convolutions\n"),),
         "model.features.requires_grad = False"),
    Seed("digits_train_test_loops", "module-requires-grad-false",
         (_before("loss_fn = nn.CrossEntropyLoss()\n", "model[1].requires_grad = False  # keep the first layer\n"),),
         "model[1].requires_grad = False"),
    Seed("cnn_resume_checkpoint", "module-requires-grad-false",
         (_before("best = 0.0\n", "net[0].requires_grad = False  # the stem stays as initialised\n"),),
         "net[0].requires_grad = False"),
    Seed("vae_reparam", "module-requires-grad-false",
         (_before("optimizer = torch.optim.Adam(", "model.enc.requires_grad = False  # a fixed encoder\n"),),
         "model.enc.requires_grad = False"),
    Seed("finetune_clean_prefixes", "module-requires-grad-false",
         (_before("optimizer = torch.optim.AdamW(", "model.body.requires_grad = False  # fine-tune the head only\n"),),
         "model.body.requires_grad = False"),
    Seed("addition_gpt_trainer", "module-requires-grad-false",
         (_before("optimizer = model.optimizer(", "model.embed.requires_grad = False  # fixed digit embeddings\n"),),
         "model.embed.requires_grad = False"),
    Seed("char_gpt_accumulation", "module-requires-grad-false",
         (_after("model = TinyGPT()\n", "model.positions.requires_grad = False  # fixed positions\n"),),
         "model.positions.requires_grad = False"),
    Seed("gan_bce_detached_fakes", "module-requires-grad-false",
         (_before("        generator.zero_grad()\n", "        discriminator.requires_grad = False  # D is fixed while G learns\n"),),
         "discriminator.requires_grad = False"),
    # -- in place on a tensor saved for backward: the in-place write
    Seed("vae_reparam", "inplace-on-saved-tensor",
         (_after("        h = F.relu(self.enc(x))\n", "        h += 0.1  # a floor under the hidden code\n"),),
         "        h += 0.1"),
    Seed("addition_gpt_trainer", "inplace-on-saved-tensor",
         (("x = x + self.attn(self.pre_attn(x))", "x += self.attn(self.pre_attn(x))"),),
         "x += self.attn(self.pre_attn(x))"),
    Seed("char_gpt_accumulation", "inplace-on-saved-tensor",
         (("x = x + self.attend(self.norm_a(x))", "x += self.attend(self.norm_a(x))"),),
         "x += self.attend(self.norm_a(x))"),
    # -- zero_grad inside gradient accumulation: the zero_grad() inside the window
    Seed("mnist_style_cnn", "zero-grad-inside-accumulation",
         (("        optimizer.step()\n", "        if i % 2 == 1:  # two batches per step\n            optimizer.step()\n"),),
         "        optimizer.zero_grad()"),
    Seed("digits_train_test_loops", "zero-grad-inside-accumulation",
         (("        loss = loss_fn(model(xb), yb)\n        loss.backward()\n        optimizer.step()\n"
           "        optimizer.zero_grad()\n",
           "        optimizer.zero_grad()\n        loss = loss_fn(model(xb), yb)\n        loss.backward()\n"
           "        if i % 4 == 3:  # four batches per step\n            optimizer.step()\n"),),
         "        optimizer.zero_grad()"),
    Seed("cnn_resume_checkpoint", "zero-grad-inside-accumulation",
         (("    for x, y in loader:\n        out = net(x)", "    for i, (x, y) in enumerate(loader):\n        out = net(x)"),
          ("        opt.step()\n", "        if i % 2 == 1:  # two batches per step\n            opt.step()\n")),
         "        opt.zero_grad()"),
    Seed("vae_reparam", "zero-grad-inside-accumulation",
         (("    for (x,) in train_loader:\n", "    for i, (x,) in enumerate(train_loader):\n"),
          ("        optimizer.step()\n", "        if i % 2 == 1:  # two batches per step\n            optimizer.step()\n")),
         "        optimizer.zero_grad()"),
    Seed("char_gpt_accumulation", "zero-grad-inside-accumulation",
         (_after("    for _ in range(micro_steps):\n", "        optimizer.zero_grad(set_to_none=True)\n"),),
         "        optimizer.zero_grad(set_to_none=True)"),
    # -- gradient accumulation of undivided batch means: the backward call
    Seed("char_gpt_accumulation", "loss-not-averaged-in-accumulation",
         (("scaler.scale(loss / micro_steps).backward()", "scaler.scale(loss).backward()"),),
         "scaler.scale(loss).backward()"),
    Seed("digits_train_test_loops", "loss-not-averaged-in-accumulation",
         (("        optimizer.step()\n        optimizer.zero_grad()\n",
           "        if i % 4 == 3:  # four batches per step\n            optimizer.step()\n"
           "            optimizer.zero_grad()\n"),),
         "        loss.backward()"),
    Seed("mnist_style_cnn", "loss-not-averaged-in-accumulation",
         (("        optimizer.zero_grad()\n        loss = F.nll_loss(model(x), y)\n        loss.backward()\n"
           "        optimizer.step()\n",
           "        loss = F.nll_loss(model(x), y)\n        loss.backward()\n"
           "        if i % 2 == 1:  # two batches per step\n            optimizer.step()\n"
           "            optimizer.zero_grad()\n"),),
         "        loss.backward()"),
    # -- dropout left on in eval: the functional dropout (or attention) call
    Seed("mnist_style_cnn", "dropout-on-in-eval",
         (("F.log_softmax(self.classify(self.features(x)), dim=1)",
           "F.log_softmax(self.classify(F.dropout(self.features(x), 0.25)), dim=1)"),),
         "F.dropout(self.features(x), 0.25)"),
    Seed("vae_reparam", "dropout-on-in-eval",
         (("        h = F.relu(self.enc(x))\n", "        h = F.dropout(F.relu(self.enc(x)), 0.2)\n"),),
         "        h = F.dropout(F.relu(self.enc(x)), 0.2)"),
    Seed("char_gpt_accumulation", "dropout-on-in-eval",
         (("dropout_p=P_DROP if self.training else 0.0)", "dropout_p=P_DROP)"),),
         "mixed = F.scaled_dot_product_attention("),
    Seed("lstm_lm_truncated_bptt", "dropout-on-in-eval",
         (("self.out(self.drop(hidden))", "self.out(nn.functional.dropout(hidden, 0.3))"),),
         "        return torch.log_softmax(self.out("),
    # -- StepLR(step_size=1, gamma=0.7) (pytorch/examples mnist's schedule) stepped per batch: its step()
    Seed("digits_train_test_loops", "steplr-per-batch",
         (_after("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
                 "scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)\n"),
          _after("        optimizer.zero_grad()\n", "        scheduler.step()\n")),
         "        scheduler.step()"),
    Seed("vae_reparam", "steplr-per-batch",
         (_after("optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)\n",
                 "scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)\n"),
          _after("        optimizer.step()\n", "        scheduler.step()\n")),
         "        scheduler.step()"),
    Seed("gan_bce_detached_fakes", "steplr-per-batch",
         (_after("fixed_noise = torch.randn(8, LATENT, 1, 1)\n",
                 "schedule_g = torch.optim.lr_scheduler.StepLR(opt_g, step_size=1, gamma=0.7)\n"),
          _after("        opt_g.step()\n", "        schedule_g.step()\n")),
         "        schedule_g.step()"),
    # -- a checkpoint whose keys carry a wrapper's prefix, loaded with strict=False: the load
    Seed("cnn_resume_checkpoint", "prefix-mismatch-strict-false",
         (('"model": net.state_dict(), "optimizer"',
           '"model": {"module." + k: v for k, v in net.state_dict().items()}, "optimizer"'),  # as DDP saves
          ('net.load_state_dict(state["model"])', 'net.load_state_dict(state["model"], strict=False)')),
         'net.load_state_dict(state["model"], strict=False)'),
    Seed("finetune_clean_prefixes", "prefix-mismatch-strict-false",
         (("saved = without_wrappers(torch.load(file, map_location=\"cpu\", weights_only=True)[\"state_dict\"])",
           "saved = torch.load(file, map_location=\"cpu\", weights_only=True)[\"state_dict\"]"),
          ("model.load_state_dict(own)", "model.load_state_dict(saved, strict=False)")),
         "model.load_state_dict(saved, strict=False)"),
    Seed("char_gpt_accumulation", "prefix-mismatch-strict-false",
         (('"model": model.state_dict(), "optimizer"',
           '"model": {"_orig_mod." + k: v for k, v in model.state_dict().items()}, "optimizer"'),
          _before('print("saved at step"', 'model.load_state_dict(saved["model"], strict=False)\n')),
         'model.load_state_dict(saved["model"], strict=False)'),
    # -- BatchNorm given a batch of one: the DataLoader whose last batch holds one sample
    Seed("mnist_style_cnn", "batchnorm-batch-of-one",
         (("nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 10)", "nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10)"),
          ("TensorDataset(x[:48], y[:48]), batch_size=16", "TensorDataset(x[:49], y[:49]), batch_size=16")),
         "    train_loader = DataLoader("),
    Seed("cnn_resume_checkpoint", "batchnorm-batch-of-one",
         (("TensorDataset(x_all[:48], y_all[:48]), batch_size=12", "TensorDataset(x_all[:49], y_all[:49]), batch_size=12"),),
         "train_data = DataLoader("),
    Seed("gan_bce_detached_fakes", "batchnorm-batch-of-one",
         (("torch.rand(32, CHANNELS, 32, 32)", "torch.rand(33, CHANNELS, 32, 32)"),),
         "images = DataLoader("),
    # -- softmax before CrossEntropyLoss: the loss call
    Seed("digits_train_test_loops", "softmax-before-cross-entropy",
         (("loss_fn(model(xb), yb)", "loss_fn(model(xb).softmax(dim=1), yb)"),),
         "loss = loss_fn(model(xb).softmax(dim=1), yb)"),
    Seed("cnn_resume_checkpoint", "softmax-before-cross-entropy",
         (("        loss = loss_fn(out, y)", "        loss = loss_fn(out.softmax(dim=1), y)"),),
         "loss = loss_fn(out.softmax(dim=1), y)"),
    Seed("finetune_clean_prefixes", "softmax-before-cross-entropy",
         (("cross_entropy(model(x), y)", "cross_entropy(model(x).softmax(dim=-1), y)"),),
         "cross_entropy(model(x).softmax(dim=-1), y)"),
    Seed("addition_gpt_trainer", "softmax-before-cross-entropy",
         (("F.cross_entropy(logits.reshape(", "F.cross_entropy(logits.softmax(-1).reshape("),),
         "F.cross_entropy(logits.softmax(-1).reshape("),
    Seed("char_gpt_accumulation", "softmax-before-cross-entropy",
         (("F.cross_entropy(logits.flatten(0, 1)", "F.cross_entropy(logits.softmax(-1).flatten(0, 1)"),),
         "F.cross_entropy(logits.softmax(-1).flatten(0, 1)"),
)


def named_seeds() -> dict[str, Seed]:
    """Every seed by a unique name (``script__kind``, with ``_2`` for a second seed of the same pair)."""
    names: dict[str, Seed] = {}
    for seed in SEEDS:
        name, n = seed.name, 1
        while name in names:
            n += 1
            name = f"{seed.name}_{n}"
        names[name] = seed
    return names


def write_planted(folder: Path) -> dict[str, tuple[Seed, Path, int]]:
    """Plant every seed into ``folder``: name -> (seed, planted script, culprit line)."""
    planted = {}
    for name, seed in named_seeds().items():
        text, line = plant(seed, (CORRECT / f"{seed.script}.py").read_text(encoding="utf-8"))
        path = folder / f"{name}.py"
        path.write_text(text, encoding="utf-8")
        planted[name] = (seed, path, line)
    return planted
