"""Top-level forward passes of trainable models, and whether a backward pass ever used them.

For each call of a model (a module with trainable parameters called outside any other module) the
tracker records the line, the training flag, the Dropout/BatchNorm layers and whether autograd was
recording. When autograd recorded, a tiny hook on the output's ``grad_fn`` tells whether backward reached
it; when the graph is freed without that, the forward was evaluation-like. Evaluation-like forwards are
grouped per model between optimizer steps: a group is *evaluation* when it holds two or more of them, or
when no optimizer step follows it. That rule keeps one-off no-grad forwards inside a training step (a
GAN generating fakes for its discriminator) out of the findings. Two refinements keep a GAN's training
forwards out too: forwards whose graph was recorded but never used (no ``no_grad``) count as evaluation
only when two of them come from one line (a loop), not from two lines that each run once a step (a
generator's step whose output was detached, beside its preview: the detach is ``broken-graph``'s); and a
line whose forwards, with autograd recording, were one-offs inside the training steps (a preview drawn every
other iteration) is not evaluation when it happens to run once more after the last step.

Each forward also records whether its input continues the previous input of the same model by one token
(the sequence grown by one, or its window slid by one: autoregressive sampling), or is a single step fed
with a tensor the previous forward returned (a recurrent sampler's hidden state), and the user's line that
called the function running the forwards. A group of such forwards made inside one call of a user
function is *generation*, and :func:`evaluation_site` puts its finding at the line that called that
function (the sampling call in the training loop), not at the model call inside it.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._dropout import FUNCTIONAL_DROPOUT, FunctionalDropout, active_rate
from torchwork.doctor.tensor_values import tensors_in

_STOCHASTIC = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)


@dataclasses.dataclass
class ForwardInfo:
    model: weakref.ReferenceType[nn.Module]
    model_id: int
    name: str
    where: tuple[str, int] | None
    training: bool
    active_layers: list[str]  # Dropout/BatchNorm layers in training mode during this forward
    layer_count: int  # Dropout/BatchNorm layers in the model
    grad_enabled: bool
    steps_at: int
    kind: str = ""  # "no-grad" | "unused" | "used"
    continues: bool = False  # the input extends the previous input of this model by one step
    rows: int = 0  # the first dimension of the first input tensor (0: none)
    call: int = 0  # id of the frame of the user function that ran this forward (0: module level)
    function: str = ""  # that function's name
    caller: tuple[str, int] | None = None  # the user's line that called that function
    functional: list[FunctionalDropout] = dataclasses.field(default_factory=list)  # F.dropout/SDPA that dropped


class _Usage:
    """Hook object hung on the output's grad_fn: called when backward reaches it; freed with the graph (its
    ``__del__``: a tenth of what a ``weakref.finalize`` per forward costs)."""

    __slots__ = ("info", "used", "tracker", "__weakref__")

    def __init__(self, info: ForwardInfo, tracker: ForwardTracker) -> None:
        self.info, self.used, self.tracker = info, False, tracker

    def __call__(self, grad_outputs: Any) -> None:
        if not self.used:
            self.used = True
            self.tracker._used(self.info)

    def __del__(self) -> None:  # safely(): a bug in a check must not print from the garbage collector
        self.tracker.session.safely(self.tracker._freed, self.info)


ONE_OFF_ROWS = 64  # a single forward after the last step is a final test from this many rows (a batch's worth)


class ForwardTracker(Check, ops=FUNCTIONAL_DROPOUT):
    def setup(self) -> None:
        self.used_listeners: list[Callable[[ForwardInfo], None]] = []
        self.evaluation_listeners: list[Callable[[list[ForwardInfo]], None]] = []
        self._layers: dict[int, tuple[weakref.ReferenceType[nn.Module], list[tuple[str, nn.Module]]]] = {}
        self._pending: dict[int, list[ForwardInfo]] = {}
        self._groups: dict[tuple[int, int], list[ForwardInfo]] = {}
        self._alive: weakref.WeakSet[_Usage] = weakref.WeakSet()
        self._last_input: dict[int, torch.Tensor] = {}  # model id -> a copy of its last (small) input
        self._last_output: dict[int, list[weakref.ReferenceType[torch.Tensor]]] = {}  # model id -> its outputs
        self._dropout_sites: dict[tuple[int, str], tuple[str, int] | None] = {}  # (module id, op) -> user's line
        self._one_off_lines: set[tuple[str, int] | None] = set()  # one-off recorded forwards inside steps
        self.stopped = False

    # ----------------------------------------------------------------- helpers
    def _stochastic_layers(self, model: nn.Module) -> list[tuple[str, nn.Module]]:
        cached = self._layers.get(id(model))
        if cached is not None and cached[0]() is model:
            return cached[1]
        label = type(model).__name__
        layers = [(f"{label}.{name} ({type(m).__name__})" if name else f"{label} ({type(m).__name__})", m)
                  for name, m in model.named_modules() if isinstance(m, _STOCHASTIC)]
        self._layers[id(model)] = (weakref.ref(model), layers)
        return layers

    @staticmethod
    def _trainable(model: nn.Module) -> bool:
        # the model's own parameters and its children's first: usually decided there, without the generator
        # machinery of parameters() (5 us on every call of a small model)
        for module in (model, *model._modules.values()):
            if module is not None and any(p is not None and p.requires_grad for p in module._parameters.values()):
                return True
        return next((True for p in model.parameters() if p.requires_grad), False)

    # ----------------------------------------------------------------- events
    def on_module_pre(self, module: nn.Module, args: tuple, kwargs: dict, top: bool) -> None:
        if not top or self.session.backward_running or not self._trainable(module):
            return
        layers = self._stochastic_layers(module)
        active = [label for label, m in layers if m.training]
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        where, info_call = self._calling_function()
        info = ForwardInfo(weakref.ref(module), id(module), self.session.module_name(module),
                           where, module.training, active, len(layers), grad, self.session.optimizer_steps)
        info.call, info.function, info.caller = info_call
        info.continues = self._continues(id(module), args) or self._fed_back(id(module), args)
        if args and isinstance(args[0], torch.Tensor):
            with torch._C.DisableTorchFunction():  # the doctor's own look, not the user's operation
                info.rows = args[0].shape[0] if args[0].dim() else 1
        self._pending.setdefault(id(module), []).append(info)

    def on_op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Record functional dropout that dropped something (rate > 0) in the running forward pass."""
        running = self.session.running_modules()
        stack = self._pending.get(id(running[0])) if running else None
        module = running[-1] if running else None
        if not stack or module is None or isinstance(module, nn.modules.dropout._DropoutNd):
            return  # no tracked model, or an nn.Dropout layer (counted among the layers already)
        name = getattr(func, "__name__", "")
        info = stack[-1]
        if len(info.functional) >= 8 or any(c.name == name and c.module_id == id(module) for c in info.functional):
            return
        rate = active_rate(name, args, kwargs)
        if rate <= 0:
            return
        site = (id(module), name)
        if site not in self._dropout_sites:
            self._dropout_sites[site] = self.session.where()
        info.functional.append(FunctionalDropout(name, rate, f"{self.session.module_name(module)} "
                                                 f"({type(module).__name__})", module.training,
                                                 self._dropout_sites[site], id(module)))

    def _calling_function(self) -> tuple[tuple[str, int] | None, tuple[int, str, tuple[str, int] | None]]:
        """One walk up the stack: (the user's line, i.e. ``session.where()``; (id of the user's innermost frame,
        its function, the user's line that called it), or (0, '', None) at module level)."""
        locator = self.session.locator
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None and not locator.is_user_file(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return None, (0, "", None)
        where = (frame.f_code.co_filename, frame.f_lineno)
        if frame.f_code.co_name == "<module>":
            return where, (0, "", None)
        return where, (id(frame), frame.f_code.co_name, locator.from_frame(frame.f_back))

    def _fed_back(self, model_id: int, args: tuple) -> bool:
        """One step of one sequence (a token, a one-hot row) with a tensor the model's previous call returned."""
        step = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if step is None or step.dim() == 0 or step.numel() != step.shape[-1]:
            return False
        previous = [ref() for ref in self._last_output.get(model_id, ())]
        return any(arg is out for arg in args[1:] if isinstance(arg, torch.Tensor) for out in previous)

    def _remember_outputs(self, module: nn.Module, output: Any) -> None:
        found = [weakref.ref(t) for t in tensors_in(output, limit=4)]
        if found:
            self._last_output[id(module)] = found

    def _continues(self, model_id: int, args: tuple) -> bool:
        current = args[0] if args and isinstance(args[0], torch.Tensor) else None
        previous = self._last_input.pop(model_id, None)
        if (current is None or current.numel() > 4096 or current.is_floating_point() or current.dim() > 2
                or current.layout != torch.strided or current.device.type == "meta"):
            return False
        with torch._C.DisableTorchFunction():
            current = current.detach().clone()
            self._last_input[model_id] = current
            return previous is not None and continues_by_one(previous, current)

    def on_module_post(self, module: nn.Module, args: tuple, output: Any, top: bool) -> None:
        if not top or self.session.backward_running:
            return
        stack = self._pending.get(id(module))
        if not stack:
            return
        info = stack.pop()
        self._remember_outputs(module, output)
        if not info.grad_enabled:
            info.kind = "no-grad"
            self._evaluation_like(info)
            return
        nodes = [t.grad_fn for t in tensors_in(output, limit=4) if t.grad_fn is not None]
        if not nodes:
            return
        usage = _Usage(info, self)
        for node in nodes:
            node.register_prehook(usage)
        self._alive.add(usage)

    def _used(self, info: ForwardInfo) -> None:
        info.kind = "used"
        for listener in self.used_listeners:
            self.session.safely(listener, info)

    def _freed(self, info: ForwardInfo) -> None:
        if info.kind != "used" and not self.stopped:
            info.kind = "unused"
            self._evaluation_like(info)

    # ----------------------------------------------------------------- grouping
    def _evaluation_like(self, info: ForwardInfo) -> None:
        key = (info.model_id, info.steps_at)
        self._groups.setdefault(key, []).append(info)
        if len(self._groups) > 256:  # settle old groups so memory stays bounded on long runs
            for old in sorted(self._groups)[:128]:
                self._settle(old, final_steps=None)

    def _settle(self, key: tuple[int, int], final_steps: int | None) -> None:
        group = self._groups.pop(key)
        no_step_after = final_steps is not None and key[1] >= final_steps
        if self._is_evaluation(group, no_step_after):
            for listener in self.evaluation_listeners:
                self.session.safely(listener, group)
        elif len(group) == 1 and group[0].kind == "unused":  # a no_grad forward stays an evaluation's
            self._one_off_lines.add(group[0].where)

    def _is_evaluation(self, group: list[ForwardInfo], no_step_after: bool) -> bool:
        if no_step_after:  # a final test, unless each forward's line ran once inside the training steps before
            if len(group) >= 2:
                return True
            # one forward on a few rows after training (plotting a fitted line: `model(x).detach()`) keeps a
            # graph of a few rows for a moment: not worth a finding, unless it ran in training mode with
            # dropout or BatchNorm active, or under no_grad (then it is a test, and its mode matters)
            last = group[0]
            small = (last.kind == "unused" and last.rows < ONE_OFF_ROWS and not last.active_layers
                     and not last.functional)
            return last.where not in self._one_off_lines and not small
        if len(group) < 2:
            return False
        if any(info.kind == "no-grad" for info in group):
            return True
        lines = [info.where for info in group]
        return len(set(lines)) < len(lines)  # graphs never used: evaluation when one line ran twice (a loop)

    def finish(self) -> None:
        # Graphs still alive at the end were never used by a backward pass (unless the script crashed).
        if not self.session.script_failed:
            for usage in list(self._alive):
                if not usage.used and usage.info.kind == "":
                    usage.info.kind = "unused"
                    self._evaluation_like(usage.info)
        self.stopped = True
        final = self.session.optimizer_steps
        for key in sorted(self._groups):
            self._settle(key, final_steps=final)


def continues_by_one(previous: torch.Tensor, current: torch.Tensor) -> bool:
    """Whether ``current`` is ``previous`` grown by one step, or its window slid by one (along the last dim)."""
    if previous.dim() != current.dim() or current.shape[-1] < 2 or previous.shape[:-1] != current.shape[:-1]:
        return False
    head = current[..., :-1]
    if current.shape[-1] == previous.shape[-1] + 1:
        return bool(torch.equal(head, previous))
    if current.shape[-1] == previous.shape[-1]:
        return bool(torch.equal(head, previous[..., 1:]))
    return False


def evaluation_site(group: list[ForwardInfo]) -> tuple[tuple[str, int] | None, str | None]:
    """Where a group of evaluation-like forwards is reported, and the generation function when it is one.

    Forwards made inside one call of a user function, each input continuing the previous one, are
    autoregressive generation: reported at the line that called that function.
    """
    first = group[0]
    same_call = first.call != 0 and first.caller is not None and all(info.call == first.call for info in group)
    if len(group) >= 2 and same_call and sum(info.continues for info in group) >= len(group) // 2:
        return first.caller, first.function
    return first.where, None


def describe_forwards(group: list[ForwardInfo]) -> str:
    """'model(x) ran 12 times' style phrase for a group of forwards."""
    first = group[0]
    times = f"{len(group)} times" if len(group) > 1 else "once"
    return f"{first.name}(...) ran {times}"


def optimizer_holds(optimizer: torch.optim.Optimizer, model: nn.Module) -> bool:
    ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
    return any(id(p) in ids for p in model.parameters())
