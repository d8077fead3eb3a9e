"""device-mismatch: a module or an operation receives tensors on different devices.

Built-in ``torch.nn`` layers are checked before they run (their inputs against their own parameters),
which names the layer and the argument; any other operation is diagnosed when PyTorch refuses it.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.explain import family

_DEVICE_FAMILY = family("device-mismatch")


def _argument_names(cls: type) -> list[str]:
    try:
        params = list(inspect.signature(cls.forward).parameters)
    except (TypeError, ValueError):
        return []
    return [p for p in params if p != "self"]


class DeviceMismatch(Check, id="device-mismatch", severity="error"):
    def setup(self) -> None:
        self._names: dict[type, list[str]] = {}

    def on_module_pre(self, module: Any, args: tuple, kwargs: dict, top: bool) -> None:
        if not type(module).__module__.startswith("torch.nn"):
            return  # user modules may move their inputs themselves
        reference = next(iter(module._parameters.values()), None)
        if reference is None:
            reference = next(iter(module._buffers.values()), None)
        if reference is None:
            return
        device = reference.device
        for index, arg in enumerate(args):
            if isinstance(arg, torch.Tensor) and arg.device != device:
                names = self._names.get(type(module))
                if names is None:
                    names = self._names[type(module)] = _argument_names(type(module))
                label = f"argument '{names[index]}'" if index < len(names) else f"argument {index}"
                self.report(
                    f"{self.session.module_name(module)} ({type(module).__name__}) has its parameters on "
                    f"{device} but its {label} is on {arg.device}.", _DEVICE_FAMILY.fix)
                return

    def on_op_error(self, func: Any, args: tuple, kwargs: dict, error: BaseException) -> None:
        if not any(p.search(str(error)) for p, _ in _DEVICE_FAMILY.compiled()):
            return
        where = self.session.where()
        if any(f.file is not None and where and f.line == where[1] for f in self.session.find(self.id)):
            return  # the module check already named this one
        devices = []
        for index, arg in enumerate(list(args) + list(kwargs.values())):
            if isinstance(arg, torch.Tensor):
                devices.append(f"argument {index} on {arg.device}")
        name = getattr(func, "__name__", "an operation")
        self.report(f"`{name}` received tensors on different devices ({', '.join(devices)}).",
                    _DEVICE_FAMILY.fix, where=where)
