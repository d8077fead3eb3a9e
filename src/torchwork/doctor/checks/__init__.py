"""The doctor's checks: one module per check, each a :class:`Check` subclass with a stable id.

A check names its id, severity and helpers in its class statement, sets its own fields in ``setup`` and
overrides the ``on_*`` hooks it needs; the session calls only those. Two private helpers (``_forwards``:
top-level forward passes and whether backward used them; ``_grads``: which parameters received gradients
and when) are shared by the checks that depend on them.

Example:
    >>> from torchwork.doctor.checks import CHECK_IDS, Check
    >>> CHECK_IDS[:3]
    ('missing-zero-grad', 'broken-graph', 'eval-mode')
    >>> class Steps(Check, id="steps", severity="info", requires=("grads",)):
    ...     def setup(self) -> None:
    ...         self.count = 0
    ...
    ...     def on_step_post(self, optimizer) -> None:
    ...         self.count += 1
    >>> Steps.id, Steps.severity, Steps.requires
    ('steps', 'info', ('grads',))
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from torchwork.doctor.findings import SEVERITIES, Finding

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.doctor.session import Session

# check id -> "module:Class" (imported only when the check runs). A new check: one module here with a Check
# subclass, one line below, one example in examples/mistakes/ marked `# doctor: <id>`.
REGISTRY: dict[str, str] = {
    "missing-zero-grad": "missing_zero_grad:MissingZeroGrad",
    "broken-graph": "broken_graph:BrokenGraph",
    "eval-mode": "eval_mode:EvalMode",
    "train-mode": "train_mode:TrainMode",
    "inference-grad": "inference_grad:InferenceGrad",
    "non-finite-loss": "non_finite_loss:NonFiniteLoss",
    "exploding-gradients": "exploding_gradients:ExplodingGradients",
    "inplace-saved": "inplace_saved:InplaceSaved",
    "inplace-leaf": "inplace_leaf:InplaceLeaf",
    "view-mutation": "view_mutation:ViewMutation",
    "state-dict-mismatch": "state_dict_mismatch:StateDictMismatch",
    "batchnorm-single-sample": "batchnorm_single_sample:BatchNormSingleSample",
    "data-bound": "data_bound:DataBound",
    "device-mismatch": "device_mismatch:DeviceMismatch",
    "data-parallel": "data_parallel:DataParallelUse",
    "unseeded": "unseeded:Unseeded",
    "amp-scale-collapse": "amp_scale_collapse:AmpScaleCollapse",
    "graph-kept-alive": "graph_kept_alive:GraphKeptAlive",
    "not-in-optimizer": "not_in_optimizer:NotInOptimizer",
    "frozen-batchnorm-drift": "frozen_batchnorm_drift:FrozenBatchNormDrift",
    "recompiles": "recompiles:Recompiles",
    "graph-breaks": "graph_breaks:GraphBreaks",
    "zero-grad-in-accumulation": "zero_grad_in_accumulation:ZeroGradInAccumulation",
    "requires-grad-attribute": "requires_grad_attribute:RequiresGradAttribute",
    "scheduler-per-batch": "scheduler_interval:SchedulerPerBatch",
    "dropout-in-eval": "dropout_in_eval:DropoutInEval",
    "anomaly-mode": "anomaly_mode:AnomalyMode",
    "loss-on-probabilities": "loss_on_probabilities:LossOnProbabilities",
    "accumulation-not-averaged": "accumulation_not_averaged:AccumulationNotAveraged",
}
CHECK_IDS: tuple[str, ...] = tuple(REGISTRY)
HELPERS: dict[str, str] = {"forwards": "_forwards:ForwardTracker", "grads": "_grads:GradTracker"}


class Check:
    """Base class: a check reports findings under its ``id`` and overrides the hooks it needs.

    Declared in the class statement: ``class TrainMode(Check, id="train-mode", severity="warning",
    requires=("forwards",)):``. ``id`` is the check's stable id (helpers and shared bases leave it out),
    ``severity`` one of :data:`~torchwork.doctor.findings.SEVERITIES`, ``requires`` names from ``HELPERS``
    and ``ops`` a frozenset of torch function names handed to ``on_op``. Each stays readable as a class
    attribute (``TrainMode.id``); a wrong one is a ``TypeError``/``ValueError`` when the class is created.
    A check sets its own fields in ``setup()``, called at the end of ``__init__``.

    Hooks (all optional): ``on_module_pre(module, args, kwargs, top)``,
    ``on_module_post(module, args, output, top)``, ``on_inplace(func, tensor)``,
    ``on_add(func, args, out)`` (sums and differences), ``on_random(func, args, kwargs)``, ``on_values(func, args, out)``,
    ``on_op_error(func, args, kwargs, error)``, ``on_backward_pre(tensor)``, ``on_backward_post(tensor)``,
    ``on_step_pre(optimizer)``, ``on_step_post(optimizer)``, ``on_op(func, args, kwargs, out)`` (after each call
    of a torch function whose name is in the check's ``ops``); plus ``install``, ``uninstall`` and
    ``finish`` (called once the script has ended and every hook is removed).
    """

    id: str = ""
    severity: str = "warning"
    requires: tuple[str, ...] = ()  # helper names from HELPERS
    ops: frozenset[str] = frozenset()  # names of torch functions handed to on_op

    def __init_subclass__(cls, *, id: str | None = None, severity: str | None = None,
                          requires: tuple[str, ...] | None = None, ops: frozenset[str] | None = None,
                          **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if id is not None:
            cls.id = id
        if severity is not None:
            cls.severity = severity
        if requires is not None:
            cls.requires = requires
        if ops is not None:
            cls.ops = ops
        _validate(cls, named=id is not None)

    def __init__(self, session: Session) -> None:
        self.session = session
        self.setup()

    def setup(self) -> None:
        """Set the check's own fields (called once, at the end of ``__init__``, before ``install``)."""

    def helper(self, name: str) -> Any:
        return self.session.helpers[name]

    def report(self, message: str, fix: str, *, where: tuple[str, int] | None = None,
               severity: str | None = None, skip: int = 1) -> Finding:
        if where is None:
            where = self.session.where(skip + 1)
        return self.session.add(self.id, severity or self.severity, message, fix, where)

    def install(self) -> None: ...

    def uninstall(self) -> None: ...

    def finish(self) -> None: ...

    def on_module_pre(self, module: Any, args: tuple, kwargs: dict, top: bool) -> None: ...

    def on_module_post(self, module: Any, args: tuple, output: Any, top: bool) -> None: ...

    def on_inplace(self, func: Any, tensor: Any) -> None: ...

    def on_random(self, func: Any, args: tuple, kwargs: dict) -> None: ...

    def on_add(self, func: Any, args: tuple, out: Any) -> None: ...

    def on_values(self, func: Any, args: tuple, out: Any) -> None: ...

    def on_op_error(self, func: Any, args: tuple, kwargs: dict, error: BaseException) -> None: ...

    def on_backward_pre(self, tensor: Any) -> None: ...

    def on_backward_post(self, tensor: Any) -> None: ...

    def on_step_pre(self, optimizer: Any) -> None: ...

    def on_step_post(self, optimizer: Any) -> None: ...

    def on_op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None: ...


def _validate(cls: type[Check], *, named: bool) -> None:
    """One clear error for a check declared wrongly, raised when its class is created."""
    name = cls.__name__
    if not isinstance(cls.id, str):
        raise TypeError(f"{name}: id must be a string such as 'train-mode', not {cls.id!r}")
    if named and not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", cls.id):
        raise ValueError(f"{name}: id must be a non-empty lowercase name with hyphens, such as 'train-mode', "
                         f"not {cls.id!r}")
    if cls.severity not in SEVERITIES:
        raise ValueError(f"{name}: severity must be one of {', '.join(SEVERITIES)}, not {cls.severity!r}")
    if not isinstance(cls.requires, tuple):
        raise TypeError(f"{name}: requires must be a tuple of helper names, such as ('forwards',), "
                        f"not {cls.requires!r}")
    unknown = [helper for helper in cls.requires if helper not in HELPERS]
    if unknown:
        raise ValueError(f"{name}: requires names unknown helper(s) {unknown}; the helpers are "
                         f"{', '.join(HELPERS)}")
    if not isinstance(cls.ops, frozenset) or not all(isinstance(op, str) for op in cls.ops):
        raise TypeError(f"{name}: ops must be a frozenset of torch function names, such as "
                        f"frozenset({{'dropout'}}), not {cls.ops!r}")


def _load(target: str) -> type[Check]:
    module_name, class_name = target.split(":")
    module = importlib.import_module(f"torchwork.doctor.checks.{module_name}")
    return getattr(module, class_name)


def load_checks(session: Session, ids: Iterable[str] | None = None) -> list[Check]:
    """Instantiate the selected checks (all by default), helpers first so that they see events first."""
    selected = list(CHECK_IDS) if ids is None else [i for i in CHECK_IDS if i in set(ids)]
    classes = [_load(REGISTRY[i]) for i in selected]
    session.helpers = {}
    helpers: list[Check] = []
    for cls in classes:
        for name in cls.requires:
            if name not in session.helpers:
                helper = _load(HELPERS[name])(session)
                session.helpers[name] = helper
                helpers.append(helper)
    return helpers + [cls(session) for cls in classes]
