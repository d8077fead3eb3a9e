"""broken-graph: trainable parameters that never receive a gradient, and where the chain broke.

After the first optimizer step the check knows which parameters got no gradient. From then on it watches
the operations that hand values out of autograd (``.detach()``, ``.data``, ``.item()``, ``float()``,
``.numpy()``, ``.tolist()``, ``torch.tensor(t)``) and modules running under ``no_grad``; a break is blamed
when the graph behind it reaches the missing parameters and the loss's graph does not. Of several such
breaks (a GAN detaches its fakes for the discriminator's step, rightly, and again for the generator's loss,
wrongly), the one made just before the last backward pass ahead of the starved optimizer's step is blamed:
that loss term is the one that should have reached it. A loss that is a leaf (``loss.requires_grad = True``
hiding a break) is reported at the backward call. A block under ``torch.utils.checkpoint(...,
use_reentrant=True)`` whose inputs do not require grad is run under no_grad and never replayed: its
parameters get nothing, and the finding says so (an error: PyTorch only warns).

A term can be cut while other terms still reach the parameters (a generator loss of an adversarial term on
``D(G(z).detach())`` plus an L1 term on ``G(z)``): every ``.detach()`` of a tensor computed from an
optimizer's parameters marks its result, the mark follows every operation made from it, a module called on
a marked tensor marks its output's graph node, and when the loss backpropagated before an optimizer's step
holds such a node, made from that optimizer's own parameters by a module it does not train, the term is
reported at the detach: it sent those parameters nothing.

The graph walk is :mod:`torchwork.inspect.walk`'s, shared with ``torchwork graph``, which draws the graph
and names every unreached parameter with its reason.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.findings import format_where
from torchwork.inspect.walk import CUT_LABELS, reached_leaves, walk_nodes

_MAX_NODES = 20000  # bounded walks: the check runs on every backward of a long training script
_SEE_GRAPH = "`torchwork graph SCRIPT.py` draws the graph of the first backward() and names each cut parameter."
Mark = tuple[tuple[str, int] | None, frozenset[int]]  # where the detach was, the parameter ids behind it


class BrokenGraph(Check, id="broken-graph", severity="error", requires=("grads",)):
    def setup(self) -> None:
        self.missing: dict[int, str] = {}  # id(param) -> name, for params with no gradient so far
        # (label, where, params reached, backward passes before it)
        self.breaks: list[tuple[str, tuple[str, int] | None, set[int], int]] = []
        self.backward_at: dict[int, tuple[str, int] | None] = {}  # backward pass number -> its line
        # id(param) -> (optimizer class, where it stepped, backward passes before that step)
        self.starved: dict[int, tuple[str, tuple[str, int] | None, int]] = {}
        self.starved_steps: set[int] = set()  # backward passes before each step of a starved optimizer
        # (module name, where it ran, its missing parameters, inside a reentrant checkpoint's no-grad forward)
        self.no_grad_modules: list[tuple[str, tuple[str, int] | None, set[int], bool]] = []
        self.loss_reached: set[int] = set()
        self.first_step_where: tuple[str, int] | None = None
        self.armed = False
        self.detaches = False  # break tracking armed for detached terms (after the first step)
        # id(tensor) -> (a weak reference to it, its mark): live tensors made from a detach. Kept here, not on
        # the tensors, so that a tensor the script saves carries nothing of the doctor's.
        self.marks: dict[int, tuple[weakref.ReferenceType[torch.Tensor], Mark]] = {}
        self.scoring: dict[int, list[Mark]] = {}  # id(module) -> marks of its running calls on marked input
        # id(node) -> (node, module name, its parameter ids, the mark, where it was called)
        self.scored: dict[int, tuple[Any, str, frozenset[int], Mark, tuple[str, int] | None]] = {}
        self.terms: list[tuple[str, frozenset[int], Mark, tuple[str, int] | None, tuple[str, int] | None]] = []
        self.cut_terms: set[tuple[str, int] | None] = set()

    # ----------------------------------------------------------------- which parameters are missing
    def _names(self) -> dict[int, str]:
        names: dict[int, str] = {}
        for item in self.session.models_seen():
            for name, param in item.named_parameters():
                names.setdefault(id(param), f"{type(item).__name__}.{name}")
        return names

    def on_step_pre(self, optimizer: Any) -> None:
        rec = self.helper("grads").record(optimizer)
        if self.first_step_where is None:
            self.first_step_where = self.session.where()
        if not self.detaches:
            self.detaches = True
            self.session.arm_break_tracking(self.on_break)
        self._judge_terms(optimizer, rec)
        missing = [p for p in rec.params if not p.received and p.param() is not None]
        if missing and not self.armed:
            names = self._names()
            for prec in missing:
                param = prec.param()
                self.missing[id(param)] = names.get(id(param), f"a {tuple(param.shape)} parameter")
            self.armed = True
            self.session.arm_break_tracking(self.on_break)
        for pid in [pid for pid in self.missing if self._received(pid)]:
            del self.missing[pid]
        if self.armed:
            held = {id(prec.param()) for prec in rec.params if prec.param() is not None}
            starved = held & set(self.missing)
            for pid in starved:
                self.starved.setdefault(pid, (type(optimizer).__name__, self.session.where(),
                                              self.session.backward_calls))
            if starved and len(self.starved_steps) < 256:
                self.starved_steps.add(self.session.backward_calls)

    def _received(self, pid: int) -> bool:
        for rec in self.helper("grads").optimizers.values():
            for prec in rec.params:
                param = prec.param()
                if param is not None and id(param) == pid:
                    return prec.received
        return False

    # ----------------------------------------------------------------- where the chain breaks
    def on_break(self, func: Any, tensor: torch.Tensor, out: Any = None) -> None:
        if not tensor.requires_grad:
            return
        name = getattr(func, "__name__", "") or ""
        if name == "__get__":
            name = getattr(getattr(func, "__self__", None), "__name__", name)
        if name in ("detach", "data") and isinstance(out, torch.Tensor) and tensor.grad_fn is not None:
            self._mark_detached(tensor, out)
        # a parameter detached itself (state_dict() at every checkpoint save, an EMA, a logged norm) cuts no
        # graph a loss was built on; a loss computed on such a copy is left to the "no loss was built on them"
        # finding of finish()
        if not self.missing or len(self.breaks) >= 16 or tensor.grad_fn is None:
            return
        reached = reached_leaves(tensor, set(self.missing), _MAX_NODES) & set(self.missing)
        if reached:
            self.breaks.append((CUT_LABELS.get(name, name), self.session.where(), reached,
                                self.session.backward_calls))

    # ----------------------------------------------------------------- a loss term cut by a detach
    def _optimizer_params(self) -> set[int]:
        return {id(p.param()) for rec in self.helper("grads").optimizers.values() for p in rec.params
                if p.param() is not None}

    def _mark(self, tensor: torch.Tensor, mark: Mark) -> None:
        key = id(tensor)
        marks = self.marks

        def forget(ref: weakref.ReferenceType[torch.Tensor]) -> None:
            if marks.get(key, (None,))[0] is ref:
                del marks[key]

        marks[key] = (weakref.ref(tensor, forget), mark)

    def _marked(self, args: Any) -> Mark | None:
        for arg in args:
            for item in (arg[:16] if isinstance(arg, (list, tuple)) else (arg,)):
                entry = self.marks.get(id(item)) if isinstance(item, torch.Tensor) else None
                if entry is not None and entry[0]() is item:
                    return entry[1]
        return None

    def _mark_detached(self, source: torch.Tensor, out: torch.Tensor) -> None:
        if len(self.marks) >= 4096:
            return
        params = self._optimizer_params()
        sources = reached_leaves(source, params, _MAX_NODES) & params
        if sources:
            self._mark(out, (self.session.where(), frozenset(sources)))
            self.session.arm_derivation(self.on_derived)

    def on_derived(self, args: tuple, out: Any) -> None:
        if not self.marks:
            self.session.disarm_derivation(self.on_derived)
            return
        mark = self._marked(args)
        if mark is None or len(self.marks) >= 4096:
            return
        inputs = {id(a) for a in args if isinstance(a, torch.Tensor)}
        for tensor in (out if isinstance(out, (tuple, list)) else (out,))[:16]:
            # never an input changed in place (an EMA copy_ into a parameter) nor a parameter: new results only
            if (isinstance(tensor, torch.Tensor) and not isinstance(tensor, torch.nn.Parameter)
                    and id(tensor) not in inputs and id(tensor) not in self.marks):
                self._mark(tensor, mark)

    def _score_pre(self, module: Any, args: tuple) -> None:
        mark = self._marked(args) if self.marks else None
        if mark is not None or id(module) in self.scoring:
            self.scoring.setdefault(id(module), []).append(mark)  # type: ignore[arg-type]

    def on_module_post(self, module: Any, args: tuple, output: Any, top: bool) -> None:
        marks = self.scoring.get(id(module))
        if not marks:
            return
        mark = marks.pop()
        if not marks:
            del self.scoring[id(module)]
        params = frozenset(id(p) for p in module.parameters())
        if mark is None or not params or len(self.scored) >= 32:  # a scorer has weights (a loss module has none)
            return
        from torchwork.doctor.tensor_values import tensors_in

        for tensor in tensors_in(output, limit=4):
            node = tensor.grad_fn
            known = self.scored.get(id(node)) if node is not None else None
            if node is not None and (known is None or params > known[2]):  # the outermost module names it
                self.scored[id(node)] = (node, self.session.module_name(module), params, mark, self.session.where())

    def _terms_in(self, loss: torch.Tensor) -> None:
        if not self.scored or loss.grad_fn is None:
            return
        for node in walk_nodes(loss.grad_fn, _MAX_NODES):
            found = self.scored.get(id(node))
            if found is not None and found[0] is node and len(self.terms) < 32:
                _, name, params, mark, called_at = found
                self.terms.append((name, params, mark, called_at, self.session.where()))

    def _judge_terms(self, optimizer: Any, rec: Any) -> None:
        terms, self.terms = self.terms, []
        self.scored.clear()
        if not terms:
            return
        held = {id(p.param()) for p in rec.params if p.param() is not None}
        reached = {id(p.param()) for p in rec.params if p.param() is not None and p.interval == rec.steps}
        for name, params, (cut_at, sources), called_at, backward_at in terms:
            starved = sources & held
            # the scorer is not trained by this step, the cut parameters are, and other terms reached them
            if not starved or params & held or not starved & reached or cut_at in self.cut_terms:
                continue
            self.cut_terms.add(cut_at)
            names = self._names()
            listed = sorted(names.get(pid, "a parameter") for pid in starved)
            shown = ", ".join(listed[:4]) + (f" and {len(listed) - 4} more" if len(listed) > 4 else "")
            self.report(
                f"The loss backpropagated at {format_where(backward_at)} has a term from {name}(...) at "
                f"{format_where(called_at)}, computed on a tensor detached here from {len(starved)} parameter "
                f"tensor(s) that {type(optimizer).__name__}.step() updates ({shown}): that term sends them no "
                "gradient, so the step follows the other terms only (a generator trained without its "
                "adversarial loss).",
                f"Compute that term on the tensor before .detach() ({name}(fake), not {name}(fake.detach())); keep "
                "the detached copy for the step of the module that scores it (the discriminator's). " + _SEE_GRAPH,
                where=cut_at)

    def on_step_post(self, optimizer: Any) -> None:
        self.scored.clear()
        self.terms.clear()

    def on_module_pre(self, module: Any, args: tuple, kwargs: dict, top: bool) -> None:
        self._score_pre(module, args)
        if not self.armed or not self.missing or torch.is_grad_enabled() or len(self.no_grad_modules) >= 8:
            return
        own = {id(p) for p in module.parameters(recurse=False)} & set(self.missing)
        if own:
            self.no_grad_modules.append((self.session.module_name(module), self.session.where(), own,
                                         _in_reentrant_checkpoint()))

    def on_backward_pre(self, tensor: Any) -> None:
        if not isinstance(tensor, torch.Tensor):
            return
        if tensor.requires_grad and tensor.grad_fn is None:
            self.report(
                "backward() was called on a leaf tensor (a tensor with requires_grad=True but no history): "
                "the loss was rebuilt from plain numbers (e.g. torch.tensor(loss.item(), requires_grad=True) "
                "or loss.requires_grad = True), so no gradient reaches the model.",
                "Compute the loss from the model's output with tensor operations only; remove the "
                "requires_grad=True workaround and the .item()/.detach()/torch.tensor(...) that broke the chain.")
        elif not tensor.requires_grad and tensor.grad_fn is None:
            self._frozen_models()  # PyTorch raises next ("element 0 of tensors does not require grad")
        self._terms_in(tensor)
        if self.armed and self.missing:
            self.loss_reached |= reached_leaves(tensor, set(self.missing), _MAX_NODES)
            if len(self.backward_at) < 64:
                self.backward_at[self.session.backward_calls + 1] = self.session.where()

    def _frozen_models(self) -> None:
        """A loss without history because every parameter of every model that ran is frozen: say so, not the
        list of everything else that can cut a graph (an adapter or LoRA that matched no layer does this)."""
        models = self.session.models_seen()
        params = [p for model in models for p in model.parameters()]
        if not params or any(p.requires_grad for p in params):
            return
        from torchwork.runs.checkpoint import unwrap_model  # a wrapper is named by the model it wraps

        names = " and ".join(sorted({type(unwrap_model(model)).__name__ for model in models})[:3])
        self.report(f"backward() on a loss with no autograd history: no parameter of {names} requires grad (all "
                    f"{len(params)} parameter tensors are frozen), so autograd recorded nothing the loss came from.",
                    "Make the layers that should learn trainable (requires_grad_(True)) and give them to the "
                    "optimizer. If a fine-tuning method marks the trainable ones (adapters, LoRA), check that it "
                    "found any: one whose layers or names match nothing in this model leaves all of it frozen.")

    # ----------------------------------------------------------------- conclusion
    def finish(self) -> None:
        missing = {pid: name for pid, name in self.missing.items()
                   if pid not in self.loss_reached and not self._received(pid)}
        for label, where, reached, term in sorted(self.breaks, key=self._blame_order):
            cut = {pid: missing.pop(pid) for pid in reached & set(missing)}  # one finding per cause
            if cut:
                self.report(f"{_head(cut)}: the graph is cut here by {label}; everything computed from its "
                            f"result is a constant for autograd.{self._starved_text(cut, term)}",
                            f"Keep tensors in the graph: drop {label} on the path from the model to the loss "
                            "(use it only for logging/metrics, after the loss is computed). " + _SEE_GRAPH, where=where)
        for name, where, reached, checkpointed in self.no_grad_modules:
            cut = {pid: missing.pop(pid) for pid in reached & set(missing)}
            if cut and checkpointed:
                self.report(f"{_head(cut)}: {name} ran inside torch.utils.checkpoint with use_reentrant=True, "
                            "whose forward runs under no_grad and is replayed in backward only when one of its "
                            "inputs requires grad; none did, so backward never reached these parameters.",
                            "Pass use_reentrant=False to checkpoint() (PyTorch recommends it), or give the "
                            "checkpointed block an input that requires grad. " + _SEE_GRAPH, where=where)
            elif cut:
                self.report(f"{_head(cut)}: {name} ran under torch.no_grad()/inference_mode, so autograd "
                            "recorded nothing for it.",
                            "Run the trainable part of the forward pass with autograd on; if the layer is "
                            "meant to be frozen, set requires_grad_(False) on it and leave it out of the "
                            "optimizer. " + _SEE_GRAPH, where=where, severity="warning")
        if missing:
            self.report(f"{_head(missing)}: they are in the optimizer but no loss was built on them (an unused "
                        "layer or output head, a branch never executed, or a value computed from them once, under "
                        "no_grad or in an earlier step, and reused from a cache).",
                        "Use the layer in forward(), and recompute what is cached from it in every training step "
                        "(a cache filled under no_grad or by an earlier step carries no graph back to it), or "
                        "freeze it (requires_grad_(False)) and leave it out of the optimizer; under DDP unused "
                        "parameters also stall training. " + _SEE_GRAPH,
                        where=self.first_step_where, severity="warning")


    def _blame_order(self, cut: tuple[str, Any, set[int], int]) -> tuple[int, int]:
        """Breaks feeding the last backward pass before a starved optimizer's step first, then in order."""
        _, _, reached, before = cut
        feeds_last = before + 1 in self.starved_steps and bool(reached & set(self.starved))
        return (0 if feeds_last else 1, self.breaks.index(cut))

    def _starved_text(self, cut: dict[int, str], before: int) -> str:
        starved = [self.starved[pid] for pid in cut if pid in self.starved]
        if not starved:
            return ""
        optimizer, step_at, _ = starved[0]
        term = self.backward_at.get(before + 1) if before + 1 in self.starved_steps else None
        loss = f"The loss term backpropagated at {format_where(term)}" if term else "The next loss"
        return (f" {loss} was computed from that result, so it sent nothing to these parameters, and "
                f"{optimizer}.step() at {format_where(step_at)}, which holds them, stepped on no gradient.")


def _in_reentrant_checkpoint() -> bool:
    """Whether the running code is inside the forward of torch.utils.checkpoint's reentrant function (it runs
    the block under no_grad; the block is replayed with autograd on in backward, if backward reaches it)."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "forward" and code.co_filename.replace(os.sep, "/").endswith("torch/utils/checkpoint.py"):
            return True
        frame = frame.f_back
    return False


def _head(params: dict[int, str]) -> str:
    names = sorted(params.values())
    listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"{len(names)} trainable parameter tensor(s) never received a gradient ({listed})"
