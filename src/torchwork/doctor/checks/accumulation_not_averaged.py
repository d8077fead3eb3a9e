"""accumulation-not-averaged: gradient accumulation that adds up the micro-batches' mean losses.

k backward passes before an optimizer step add k gradients into ``.grad``. When each loss is a batch mean
not divided by k, the step gets k times the gradient of the window's mean loss: with SGD the learning rate
is k times the one set; adaptive optimizers (Adam, RMSprop) divide most of the scale out, but gradient
clipping (its threshold is k times tighter), weight decay's balance against the gradient and ``eps`` still
see it, and changing k changes the training.

Found when an optimizer steps after at least 2 backward passes that all ran from the same line (the same
chain of user frames: a loop), reached the same parameters, added to gradients the previous pass left (not
cleared between them), and each ran on a loss whose last operation is a mean: a loss function with
``reduction="mean"`` or ``.mean()``, seen through a GradScaler's multiply. A loss divided (``loss / k``),
multiplied by a constant, summed or normalised by a token count is not one; nor are losses backpropagated
from different lines (a GAN's real and fake halves) or reaching different parameters (the heads of a
multi-task loop); nor passes inside ``optimizer.step()`` (an L-BFGS closure).
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._grads import user_call_chain

# autograd nodes whose output is a mean over the batch (loss functions with reduction="mean" say so in
# their saved reduction: 1 is Reduction::Mean)
_MEAN_NODES = frozenset({"MeanBackward0", "MeanBackward1"})
_REDUCING_LOSS_NODES = frozenset({
    "NllLossBackward0", "NllLoss2DBackward0", "MseLossBackward0", "SmoothL1LossBackward0", "HuberLossBackward0",
    "BinaryCrossEntropyBackward0", "BinaryCrossEntropyWithLogitsBackward0", "SoftMarginLossBackward0",
    "MultiMarginLossBackward0", "MultilabelMarginLossBackward0"})
_MEAN_REDUCTION = 1
_ADAPTIVE = frozenset({"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "SparseAdam",
                       "Adafactor"})


class Pass:
    """One backward pass: where it ran from, whether its loss is an undivided mean, what it reached."""

    __slots__ = ("chain", "mean", "reached")

    def __init__(self, chain: tuple[tuple[str, int], ...], mean: str | None) -> None:
        self.chain, self.mean = chain, mean
        self.reached: dict[int, tuple[int, ...]] = {}  # id(optimizer) -> indexes of parameters reached


class AccumulationNotAveraged(Check, id="accumulation-not-averaged", severity="warning", requires=("grads",)):
    def setup(self) -> None:
        self.scaled: dict[int, Any] = {}  # id(grad_fn) of a GradScaler's output -> the node (kept alive)
        self.runs: dict[int, list[Pass]] = {}  # id(optimizer) -> the passes accumulating since its step
        self.current: Pass | None = None
        self.in_step = 0
        self.done = False

    def install(self) -> None:
        check = self

        def remembers(original: Any) -> Any:
            def scale(scaler: Any, outputs: Any) -> Any:
                result = original(scaler, outputs)
                node = getattr(result, "grad_fn", None)
                # a disabled scaler (no CUDA, enabled=False) hands the loss back unchanged: nothing to look through
                if result is not outputs and node is not None and not check.done and len(check.scaled) < 64:
                    check.scaled[id(node)] = node
                return result
            return scale

        self.session.patch(torch.amp.GradScaler, "scale", remembers)

    def mean_loss(self, tensor: Any) -> str | None:
        """The autograd node's name when ``tensor`` is an undivided batch mean (through a scaler's multiply)."""
        node = getattr(tensor, "grad_fn", None)
        if node is not None and id(node) in self.scaled:
            self.scaled.pop(id(node))
            node = node.next_functions[0][0]
        name = type(node).__name__ if node is not None else ""
        if name in _MEAN_NODES:
            return name
        if name in _REDUCING_LOSS_NODES and getattr(node, "_saved_reduction", None) == _MEAN_REDUCTION:
            return name
        return None

    def on_backward_pre(self, tensor: Any) -> None:
        self.current = None
        if self.done or self.in_step:
            return
        with torch._C.DisableTorchFunction():  # the doctor's own look, not the user's operation
            for key, rec in self.helper("grads").optimizers.items():
                if not _has_gradients(rec):
                    self.runs[key] = []  # cleared since the last pass: a new window starts here
        self.current = Pass(user_call_chain(self.session.locator, sys._getframe(1)), self.mean_loss(tensor))

    def on_backward_post(self, tensor: Any) -> None:
        run, self.current = self.current, None
        if run is None:
            return
        number = self.session.backward_calls  # this pass's: the grads helper marks each gradient with it
        for key, rec in self.helper("grads").optimizers.items():
            reached = tuple(i for i, p in enumerate(rec.params) if p.arrived_in == number)
            if reached:
                run.reached[key] = reached
                passes = self.runs.setdefault(key, [])
                if len(passes) < 256:
                    passes.append(run)

    def on_step_pre(self, optimizer: Any) -> None:
        self.helper("grads").record(optimizer)
        key = id(optimizer)  # as the grads helper keys its records
        passes = self.runs.pop(key, [])
        self.in_step += 1
        if self.done or len(passes) < 2:
            return
        first = passes[0]
        same = all(p.chain == first.chain and p.reached[key] == first.reached[key] for p in passes)
        if not same or not first.chain or any(p.mean is None for p in passes):
            return
        self.done = True
        k = len(passes)
        name = type(optimizer).__name__
        effect = _effect(optimizer, k)
        self.report(
            f"{name}.step() used the gradients of {k} backward passes from this line, each on a batch-mean loss "
            f"({first.mean}) not divided by {k}: the gradients add up, so the step got {k}x the gradient of the "
            f"mean loss over the {k} micro-batches. {effect}; and the training changes whenever the number of "
            "micro-batches does.",
            f"Divide each micro-batch's loss by the number of micro-batches before backward: `(loss / {k})."
            "backward()` (or normalise by the window's total count of examples or tokens). If the sum is meant, "
            "scale the learning rate for it and keep the number of micro-batches fixed.",
            where=first.chain[0])

    def on_step_post(self, optimizer: Any) -> None:
        self.in_step = max(0, self.in_step - 1)
        self.runs[id(optimizer)] = []  # passes inside step() (a closure) belong to no window


def _effect(optimizer: Any, k: int) -> str:
    """What k times the gradient does to this optimizer's step."""
    name = type(optimizer).__name__
    if name not in _ADAPTIVE:
        return f"{name} moved {k}x as far as its learning rate says"
    coupled = name != "AdamW" and any(group.get("weight_decay", 0) for group in optimizer.param_groups)
    decay = f", and its weight decay, added to the gradient, weighs {k}x less" if coupled else ""
    return (f"{name} divides most of that scale out (all but eps), but a gradient clipping threshold is {k}x "
            f"tighter{decay}")


def _has_gradients(rec: Any) -> bool:
    """Whether the optimizer's first parameter that has a ``.grad`` holds a non-zero one."""
    for prec in rec.params:
        param = prec.param()
        if param is not None and param.grad is not None:
            return bool(param.grad.any())
    return False
