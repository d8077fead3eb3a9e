"""scheduler-per-batch: a learning-rate schedule sized in epochs, stepped after every batch.

``StepLR(step_size=1, gamma=0.7)``, ``MultiStepLR``, ``ExponentialLR`` or a cosine of ``T_max=epochs`` count
epochs; called once per batch, they run through the whole schedule in the first few batches: after 13
batches StepLR(1, 0.7) has cut the rate 100x, and the model stops learning early in the first epoch. Found
when such a scheduler (its length shorter than one epoch of the loader being read, or no length at all) is
stepped as often as its optimizer and its rate has fallen over 100x before the first epoch ended. A schedule
sized in steps (OneCycleLR, a warm-up, a cosine over all the steps) never falls that fast so early.

Short epochs (a loader of 4 batches) never reach 100x in the first epoch: there, a schedule whose unit is at
most a quarter of an epoch (``StepLR(step_size=1)`` on 4 batches), still stepped with every optimizer step
after a whole epoch, is found once its rate has fallen 10x. A schedule sized in steps with a longer unit
(``StepLR(step_size=500)`` on 1,000 batches) is left to the first rule.

A schedule that ends (a cosine, a linear or polynomial decay) and a run that ends with it is a schedule sized
to the run, even inside one epoch: litgpt's ``finetune_full --train.max_steps 6`` builds a cosine over its 6
steps. Such a schedule is reported at the end, only when the run went on past 1.5 times its length.
"""

from __future__ import annotations

from typing import Any

import torch

from torchwork.doctor.checks import Check

FALL = 100.0
FALL_AFTER_EPOCH = 10.0  # the short-epoch rule: a unit of at most a quarter epoch, per batch for a whole epoch
_NO_LENGTH = ("ExponentialLR",)
# schedules that end (the rate then stays at its floor): sized to the run when the run ends with them
_ENDING = ("CosineAnnealingLR", "LinearLR", "PolynomialLR")
OUTLIVED = 1.5  # the run went on this many times the schedule's length: it was not sized to the run


def _length(scheduler: Any) -> tuple[str, int] | None:
    """The setting that says how many calls the schedule lasts, and its value (None: it has no length)."""
    from torchwork.schedules import horizon

    return horizon(scheduler)


class SchedulerPerBatch(Check, id="scheduler-per-batch", severity="error"):
    def setup(self) -> None:
        self.optimizer_steps: dict[int, int] = {}
        self.reported: set[int] = set()
        # schedules with an end, found falling too fast: (optimizer id, their length, message, fix, line),
        # reported at the end unless the run stopped within their length (a schedule sized to a short run)
        self.held: list[tuple[int, int, str, str, tuple[str, int] | None]] = []

    def install(self) -> None:
        check = self

        def make(original: Any) -> Any:
            def step(scheduler: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(scheduler, *args, **kwargs)
                check.session.safely(check.after_scheduler_step, scheduler)
                return result
            return step

        self.session.patch(torch.optim.lr_scheduler.LRScheduler, "step", make)

    def on_step_post(self, optimizer: Any) -> None:
        self.optimizer_steps[id(optimizer)] = self.optimizer_steps.get(id(optimizer), 0) + 1

    def after_scheduler_step(self, scheduler: Any) -> None:
        calls = getattr(scheduler, "_step_count", 0) - 1  # the constructor steps it once
        optimizer = getattr(scheduler, "optimizer", None)
        if calls < 2 or optimizer is None or id(scheduler) in self.reported:
            return
        steps = self.optimizer_steps.get(id(optimizer), 0)
        loader = self.session.current_loader()
        batches = len(loader) if loader is not None and hasattr(loader, "__len__") else None
        horizon = _length(scheduler)
        epoch_sized = type(scheduler).__name__ in _NO_LENGTH or (
            horizon is not None and batches is not None and horizon[1] < batches)
        if not epoch_sized or calls < steps or batches is None or batches < 2:
            return  # not an epoch-sized schedule, or not per batch
        if steps < batches:
            fall = FALL
        elif horizon is None or horizon[1] * 4 <= batches:
            fall = FALL_AFTER_EPOCH  # per batch for a whole epoch (or more): a short epoch
        else:
            return
        group = optimizer.param_groups[0]
        start, now = group.get("initial_lr", group["lr"]), group["lr"]
        if not (start > 0 and now < start / fall):
            return
        self.reported.add(id(scheduler))
        name = type(scheduler).__name__
        sized = f"{name}({horizon[0]}={horizon[1]})" if horizon is not None else name
        fallen = f"{start / now:.0f}x below its start" if now > 0 else "down to 0 from its start"
        message = (f"{sized} is stepped after every batch: after {steps} batches ({batches} an epoch) the "
                   f"learning rate is {now:.3g}, {fallen} ({start:.3g}). Its counts are epochs: the whole "
                   "schedule runs in the first batches and training stalls.")
        fix = ("Call scheduler.step() once per epoch, after the loop over the batches (or size the schedule in "
               "steps: OneCycleLR(total_steps=epochs * len(loader))). torchwork's Trainer chooses the interval "
               "from the scheduler: scheduler_interval='auto'.")
        if name in _ENDING and horizon is not None:
            self.held.append((id(optimizer), horizon[1], message, fix, self.session.where()))
        else:
            self.report(message, fix)

    def finish(self) -> None:
        for optimizer_id, length, message, fix, where in self.held:
            if self.optimizer_steps.get(optimizer_id, 0) > length * OUTLIVED:
                self.report(message, fix, where=where)
