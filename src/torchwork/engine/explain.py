"""``trainer.explain()``: the exact order of one training step for a Trainer's settings, as text.

Example:
    >>> import torch
    >>> from torch import nn
    >>> from torchwork import Trainer
    >>> model = nn.Linear(4, 2)
    >>> trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu")
    >>> print(explain_step(trainer, stepped_per_step=False, per_epoch=None))  # doctest: +ELLIPSIS
    One optimizer step on cpu (precision=32, accumulate=1):
      1. optimizer.zero_grad(set_to_none=True)
      2. for the batch:
         a. move the batch to cpu; outputs = model(inputs) in float32
         b. loss = loss_fn(outputs, targets)
         c. loss.backward()
      3. optimizer.step()
      every ... steps: log loss, lr
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchwork.engine.trainer import Trainer


def explain_step(trainer: Trainer, stepped_per_step: bool, per_epoch: str | None) -> str:
    """The step's order for ``trainer``'s settings; ``stepped_per_step``: the scheduler steps with each
    optimizer step; ``per_epoch``: what steps it once per epoch instead (None: nothing)."""
    p, k, device = trainer.precision, trainer.accumulate, trainer.device
    lines = [f"One optimizer step on {device} (precision={p.name}, accumulate={k}):",
             "  1. optimizer.zero_grad(set_to_none=True)"]
    each = "for each of the k micro-batches (fewer at the end of an epoch):" if k > 1 else "for the batch:"
    lines.append(f"  2. {each}")
    forward = f"under torch.autocast({p.device_type!r}, dtype={p.dtype})" if p.dtype else "in float32"
    lines.append(f"     a. move the batch to {device}; outputs = model(inputs) {forward}")
    loss = "step_fn(model, batch)" if trainer.step_fn else "loss_fn(outputs, targets)"
    if trainer.loss_weights:
        loss += f", named losses combined with weights {trainer.loss_weights}"
    lines.append(f"     b. loss = {loss}")
    if k > 1:
        lines.append("     c. loss *= samples in this micro-batch / samples in the window (exact mean)")
    scaler = trainer.scaler
    backward = "scaler.scale(loss).backward()" if scaler else "loss.backward()"
    lines.append(f"     {'d' if k > 1 else 'c'}. {backward}")
    after = []
    if scaler:
        after.append("scaler.unscale_(optimizer): gradients back to their true size")
    if trainer.clip_grad_norm is not None:
        after.append(f"clip_grad_norm_(max_norm={trainer.clip_grad_norm}); the pre-clip norm is logged")
    if trainer.clip_grad_value is not None:
        after.append(f"clip_grad_value_({trainer.clip_grad_value})")
    if scaler:
        after.append("scaler.step(optimizer): skipped when gradients hold inf/NaN")
        after.append("scaler.update(): shrink the scale after a skip, grow it after many good steps")
    else:
        after.append("optimizer.step()")
    if stepped_per_step:
        after.append("scheduler.step() (once per optimizer step)")
    lines.extend(f"  {number}. {text}" for number, text in enumerate(after, start=3))
    if per_epoch is not None:
        lines.append(f"  once per epoch: {per_epoch}")
    lines.append(f"  every {trainer.log_every_n_steps} steps: log loss, lr"
                 + (", grad_norm" if trainer.clip_grad_norm else "") + (", scale" if scaler else ""))
    return "\n".join(lines)
