"""Static rules about the training loop: ``missing-zero-grad`` and ``scheduler-per-batch``.

A loop that calls ``backward()`` and ``optimizer.step()`` but clears no gradient (no ``zero_grad()``, no
``p.grad = None``, no call of a function of the same file that does) steps on the running sum of every
past gradient: the bug pytorch/examples#1424 fixed in ``distributed/tensor_parallelism``. Only the innermost
loop holding both calls is judged, so accumulation (``zero_grad`` under ``if (i + 1) % k == 0``) is fine.

Example:
    >>> from torchwork.doctor.static.syntax import FileIndex
    >>> code = "for x in data:\\n    model(x).sum().backward()\\n    optimizer.step()\\n"
    >>> [hit.node.lineno for hit in missing_zero_grad(FileIndex.parse(code), "t.py")]
    [3]
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from torchwork.doctor.static.results import Hit
from torchwork.doctor.static.syntax import (
    LOOPS,
    FileIndex,
    argument,
    dotted,
    last,
    local_calls,
    local_nodes,
    method,
    number,
    receiver,
)

_OPTIMIZER = re.compile(r"optimi[sz]er|^(?:\w+_)?opt(?:im)?(?:_?[a-z0-9]{1,3})?$", re.IGNORECASE)
_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD",
                         "Rprop", "LBFGS", "SparseAdam", "Adafactor", "Lion", "Muon", "ZeroRedundancyOptimizer"})
_ZEROING = re.compile(r"zero_?grad|clear_?grad|reset_?grad|_foreach_zero_", re.IGNORECASE)
_GRAD_RESET = ("zero_", "fill_", "detach_", "mul_")


def is_backward(call: ast.Call) -> bool:
    """``loss.backward()``, ``accelerator.backward(loss)``; not distributed autograd's
    ``dist_autograd.backward(context_id, ...)``, whose gradients live in a fresh context each iteration."""
    return method(call) in ("backward", "manual_backward") and not receiver(call).endswith(
        ("dist_autograd", "distributed.autograd"))


def is_optimizer_step(call: ast.Call, index: FileIndex | None = None) -> bool:
    """``optimizer.step()``, ``self.opt_d.step()``, ``scaler.step(optimizer)``; not ``env.step(action)``, not
    ``scheduler.step()``, not a DeepSpeed ``engine.step()`` (which clears the gradients itself)."""
    if method(call) != "step":
        return False
    owner = last(receiver(call))
    if "sched" in owner.lower():
        return False
    if "scaler" in owner.lower():
        return bool(call.args) and bool(_OPTIMIZER.search(last(dotted(call.args[0]))))
    built = [dotted(c.func) for c in index.bindings(owner)] if index is not None else []
    if any("optim" in name.lower() or last(name) in _OPTIMIZERS for name in built):
        return True  # the binding, not the name: sgd = torch.optim.SGD(...) is an optimizer
    return bool(_OPTIMIZER.search(owner))


def _clears_gradients(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        if _ZEROING.search(method(node)):
            return True
        return method(node) in _GRAD_RESET and ".grad" in "." + receiver(node)
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets)
    return isinstance(node, ast.Delete) and any(isinstance(t, ast.Attribute) and t.attr == "grad"
                                                 for t in node.targets)


def _zeroes(index: FileIndex, node: ast.AST, depth: int = 3, seen: set[str] | None = None) -> bool:
    """Whether ``node`` clears gradients itself or through a function of this file that it calls."""
    seen = set() if seen is None else seen
    for child in local_nodes(node):
        if _clears_gradients(child):
            return True
        if depth and isinstance(child, ast.Call) and method(child) not in seen:
            name = method(child)
            seen.add(name)
            if any(_zeroes(index, function, depth - 1, seen) for function in index.functions.get(name, [])):
                return True
    return False


def _trains(index: FileIndex, loop: ast.AST) -> tuple[list[ast.Call], list[ast.Call]]:
    calls = local_calls(loop)
    return [c for c in calls if is_backward(c)], [c for c in calls if is_optimizer_step(c, index)]


def missing_zero_grad(index: FileIndex, path: str) -> Iterator[Hit]:
    for loop in (n for n in index.nodes if isinstance(n, LOOPS)):
        backward, steps = _trains(index, loop)
        if not backward or not steps:
            continue
        inner = [n for n in local_nodes(loop) if isinstance(n, LOOPS) and all(_trains(index, n))]
        if inner or _zeroes(index, loop):
            continue  # the innermost training loop is judged; or the gradients are cleared
        step = steps[0]
        yield Hit(step, "error",
                  f"`{dotted(step.func)}()` runs in a loop that calls backward() (line {backward[0].lineno}) but "
                  "never clears the gradients (no zero_grad() or `p.grad = None` in the loop, nor in a function "
                  "of this file it calls): every step uses the sum of all past gradients.",
                  "Call optimizer.zero_grad() once per step, right after optimizer.step() (or before "
                  "loss.backward()); for gradient accumulation, after each step, not before every backward().")


# ------------------------------------------------------------------------------------------ schedulers
_EPOCH_SCHEDULES = ("StepLR", "MultiStepLR", "ExponentialLR")
_BATCHES = re.compile(r"load|batch|data|\bdl\b|iter|tqdm|enumerate", re.IGNORECASE)


def _epoch_sized(call: ast.Call) -> bool | None:
    """True when the constructor's literals size the schedule in epochs, False when in steps, None when
    they are not written as literals (``step_size=args.step``)."""
    kind = last(dotted(call.func))
    if kind == "StepLR":
        size = number(argument(call, 1, "step_size"))
        return None if size is None else size <= 100
    if kind == "MultiStepLR":
        milestones = argument(call, 1, "milestones")
        values = [number(e) for e in milestones.elts] if isinstance(milestones, (ast.List, ast.Tuple)) else [None]
        return None if not values or None in values else max(v for v in values if v is not None) <= 300
    gamma = number(argument(call, 1, "gamma"))
    return None if gamma is None else gamma <= 0.99


def _batch_loop(index: FileIndex, call: ast.Call) -> ast.AST | None:
    """The loop that steps ``call`` once per batch: the innermost loop around it also steps an optimizer,
    and it iterates over batches (or sits inside another loop); no ``if`` decides between them."""
    loops = index.enclosing_loops(call)
    if not loops or not isinstance(loops[0], (ast.For, ast.AsyncFor)) or index.conditions(call, loops[0]):
        return None
    loop = loops[0]
    if not any(is_optimizer_step(c, index) for c in local_calls(loop)):
        return None
    return loop if len(loops) > 1 or _BATCHES.search(ast.unparse(loop.iter)) else None


def scheduler_per_batch(index: FileIndex, path: str) -> Iterator[Hit]:
    for call in index.calls:
        if method(call) != "step" or call.args or not receiver(call):
            continue
        bound = index.constructors(receiver(call))
        if not bound or not bound <= set(_EPOCH_SCHEDULES):
            continue  # another kind (or an unknown value) is bound to the same name: undecidable
        sized = [_epoch_sized(c) for c in index.bindings(receiver(call))]
        if False in sized or _batch_loop(index, call) is None:
            continue
        kinds = "/".join(sorted(bound))
        certain = all(sized)
        yield Hit(call, "error" if certain else "warning",
                  f"`{receiver(call)}.step()` ({kinds}, a schedule counted in epochs"
                  f"{'' if certain else ' unless its size is in steps'}) runs once per batch, in the loop that "
                  "steps the optimizer: the learning rate decays per batch, over 100x before the first epoch "
                  "ends.",
                  "Step an epoch schedule once per epoch, after the batch loop; or size it in steps "
                  "(step_size/milestones times the batches per epoch) if it must step per batch.")
