"""The doctor's checks: one module per check, each a :class:`Check` subclass with a stable id.

A check overrides the ``on_*`` hooks it needs; the session calls only those. Two private helpers
(``_forwards``: top-level forward passes and whether backward used them; ``_grads``: which parameters
received gradients and when) are shared by the checks that depend on them.

Example:
    >>> from torchwork.doctor.checks import CHECK_IDS
    >>> CHECK_IDS[:3]
    ('missing-zero-grad', 'broken-graph', 'eval-mode')
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.doctor.findings import Finding
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
}
CHECK_IDS: tuple[str, ...] = tuple(REGISTRY)
HELPERS: dict[str, str] = {"forwards": "_forwards:ForwardTracker", "grads": "_grads:GradTracker"}


class Check:
    """Base class: a check reports findings under its ``id`` and overrides the hooks it needs.

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

    def __init__(self, session: Session) -> None:
        self.session = session

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
