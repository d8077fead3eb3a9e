"""Static rules about modules: ``requires-grad-attribute`` and ``dropout-in-eval``.

``module.requires_grad = False`` is reported only where the object is provably a module (bound to an
``nn.Linear(...)``-like constructor, ``self.x = nn...`` in its class, a loop over ``model.modules()``):
``p.requires_grad = False`` over ``model.parameters()`` is the right way to freeze and stays silent.
Dropout that ``model.eval()`` cannot turn off: ``F.dropout(x, p)`` in a method without ``training=``, and
``F.scaled_dot_product_attention(..., dropout_p=0.1)`` not conditioned on ``self.training`` (timm #1978).

Example:
    >>> from torchwork.doctor.static.syntax import FileIndex
    >>> code = "import torch.nn.functional as F\\nclass M:\\n    def forward(self, x):\\n        return F.dropout(x, 0.5)\\n"
    >>> [(h.severity, h.node.lineno) for h in dropout_in_eval(FileIndex.parse(code), "m.py")]
    [('error', 4)]
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torchwork.doctor.static.results import Hit
from torchwork.doctor.static.syntax import (
    LOOPS,
    FileIndex,
    argument,
    dotted,
    has_star_kwargs,
    keyword,
    last,
    local_calls,
    local_nodes,
    mentions,
    number,
    parameters,
)

_MODULE_ITERATORS = ("modules", "children", "named_modules", "named_children")
_NOT_MODULES = ("Parameter", "Tensor", "tensor", "Buffer")


def _is_module_constructor(call: ast.Call, index: FileIndex) -> bool:
    name = dotted(call.func)
    short = last(name)
    if name.startswith(("nn.", "torch.nn.")) and short[:1].isupper() and short not in _NOT_MODULES:
        return True
    classes = {c.name: c for c in index.nodes if isinstance(c, ast.ClassDef)}
    if short in classes:
        return any(last(dotted(base)).endswith("Module") for base in classes[short].bases)
    return short == "from_pretrained" and "Model" in name


def _module_loop_target(index: FileIndex, name: str, node: ast.AST) -> bool | None:
    """True/False when ``name`` is the target of an enclosing loop over modules/parameters, None if not."""
    for loop in index.enclosing_loops(node):
        if not isinstance(loop, (ast.For, ast.AsyncFor)) or not isinstance(loop.iter, ast.Call):
            continue
        targets = loop.target.elts if isinstance(loop.target, ast.Tuple) else [loop.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return last(dotted(loop.iter.func)) in _MODULE_ITERATORS
    return None


def _is_module(index: FileIndex, target: ast.expr, node: ast.Assign) -> bool:
    if isinstance(target, ast.Name):
        looped = _module_loop_target(index, target.id, node)
        if looped is not None:
            return looped
        value = index.assigned_before(node, target.id)
        return isinstance(value, ast.Call) and _is_module_constructor(value, index)
    if isinstance(target, ast.Attribute) and dotted(target.value) == "self":
        owner = index.enclosing_class(node)
        if owner is None:
            return False
        values = [n.value for n in ast.walk(owner) if isinstance(n, ast.Assign)
                  for t in n.targets if dotted(t) == f"self.{target.attr}"]
        return bool(values) and all(isinstance(v, ast.Call) and _is_module_constructor(v, index) for v in values)
    return False


def requires_grad_attribute(index: FileIndex, path: str) -> Iterator[Hit]:
    for node in (n for n in index.nodes if isinstance(n, ast.Assign)):
        for target in node.targets:
            if isinstance(target, ast.Attribute) and target.attr == "requires_grad" and _is_module(
                    index, target.value, node):
                owner = dotted(target.value)
                yield Hit(node, "error",
                          f"`{owner}.requires_grad = ...` sets a plain attribute on a module: its parameters "
                          "keep requires_grad=True and keep training.",
                          f"Call {owner}.requires_grad_(False) (with the underscore), or set it on each "
                          f"parameter: for p in {owner}.parameters(): p.requires_grad = False.")


# ------------------------------------------------------------------------------------------ dropout
_FUNCTIONAL = ("F", "functional", "nn.functional", "torch.nn.functional")
_DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")


def _under_training_test(index: FileIndex, node: ast.AST) -> bool:
    return any(mentions(test, "training") for test in index.conditions(node))


def _functional_dropout(index: FileIndex, call: ast.Call) -> Hit | None:
    name = dotted(call.func)
    if last(name) not in _DROPOUTS or name.rsplit(".", 1)[0] not in _FUNCTIONAL or not index.is_method(call):
        return None
    if keyword(call, "training") is not None or len(call.args) >= 3 or has_star_kwargs(call):
        return None
    if number(argument(call, 1, "p")) == 0 or _under_training_test(index, call):
        return None
    return Hit(call, "error",
               f"`{name}(...)` without training= keeps dropping activations after model.eval(): the functional "
               "form defaults to training=True and never reads the module's mode, so evaluation and inference "
               "are noisy and worse.",
               f"Pass training=self.training: {name}(x, p, training=self.training); or use an nn.Dropout layer "
               "defined in __init__, which model.eval() turns off.")


def _training_aware(index: FileIndex, call: ast.Call, value: ast.expr) -> bool:
    """Whether the dropout value depends on ``self.training`` (or is the caller's to decide)."""
    if mentions(value, "training") or _under_training_test(index, call):
        return True
    scope = index.scope_of(call)
    if isinstance(value, ast.Name):
        if value.id in parameters(scope):
            return True
        assigned = index.assigned_before(call, value.id)
        return assigned is None or mentions(assigned, "training") or number(assigned) == 0
    return False


def _attention_dropout(index: FileIndex, call: ast.Call) -> Hit | None:
    if last(dotted(call.func)) != "scaled_dot_product_attention" or has_star_kwargs(call):
        return None
    value = argument(call, 4, "dropout_p")
    literal = number(value)
    if value is None or literal == 0 or _training_aware(index, call, value):
        return None
    written = ast.unparse(value)
    return Hit(call, "error" if literal is not None else "warning",
               f"scaled_dot_product_attention(..., dropout_p={written}) has no training flag: the attention "
               "dropout stays on after model.eval()"
               + ("." if literal is not None else f" whenever {written} > 0."),
               f"Pass dropout_p=({written} if self.training else 0.0).")


def dropout_in_eval(index: FileIndex, path: str) -> Iterator[Hit]:
    for call in index.calls:
        hit = _functional_dropout(index, call) or _attention_dropout(index, call)
        if hit is not None:
            yield hit


# ------------------------------------------------------------------------------------------ anomaly mode
def _anomaly_on(call: ast.Call) -> bool:
    name = dotted(call.func)
    if last(name) == "set_detect_anomaly":
        flag = argument(call, 0, "mode")
        return isinstance(flag, ast.Constant) and flag.value is True
    return last(name) == "detect_anomaly" and "autograd" in name


def _around_training(index: FileIndex, call: ast.Call) -> bool:
    """Whether a ``with detect_anomaly():`` sits in a loop, or holds a loop that calls backward()."""
    statement = index.parents.get(index.parents.get(call, call), call)  # the call, its withitem, the with
    if index.enclosing_loops(call):
        return True
    return any(isinstance(n, LOOPS) and any(last(dotted(c.func)) == "backward" for c in local_calls(n))
               for n in local_nodes(statement))


def detect_anomaly(index: FileIndex, path: str) -> Iterator[Hit]:
    """Anomaly mode switched on unconditionally in training code (not under an ``if args.debug:``)."""
    for call in (n for n in index.calls if _anomaly_on(n)):
        scope = index.scope_of(call)
        trains = any(last(dotted(n.func)) == "backward" for n in local_nodes(scope) if isinstance(n, ast.Call))
        if index.conditions(call) or not (scope is index.tree or trains):
            continue
        if last(dotted(call.func)) == "detect_anomaly" and not _around_training(index, call):
            continue  # `with detect_anomaly():` around one suspicious step is what it is for
        yield Hit(call, "warning",
                  f"`{dotted(call.func)}(...)` turns on autograd's anomaly mode for the training run: every "
                  "backward records and checks each operation (2-3x slower on small models, far more on large).",
                  "Remove it once the NaN is found, or switch it on only while debugging "
                  "(if args.debug: torch.autograd.set_detect_anomaly(True)).")
