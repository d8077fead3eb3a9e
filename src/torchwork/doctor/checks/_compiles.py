"""Shared by the ``recompiles`` and ``graph-breaks`` checks: a
:class:`~torchwork.doctor.compile_watch.CompileWatch` over the script's run, and where the script called
``torch.compile`` (the user's line for code that is not theirs, e.g. a compiled ``nn.Sequential``)."""

from __future__ import annotations

from typing import Any

import torch

from torchwork.doctor.checks import Check


def _code_of(target: Any) -> Any:
    if isinstance(target, torch.nn.Module):
        return getattr(type(target).forward, "__code__", None)
    return getattr(getattr(target, "__func__", target), "__code__", None)


class CompileWatching(Check):
    """Watches compiles while the script runs; ``compile_sites`` maps compiled code -> the user's line."""

    def setup(self) -> None:
        self.watch: Any = None
        self.compile_sites: dict[tuple[str, int], tuple[str, int]] = {}

    def install(self) -> None:
        from torchwork.doctor.compile_watch import CompileWatch

        self.watch = CompileWatch()
        self.watch.start()
        check = self

        def make(original: Any) -> Any:
            def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
                code, where = _code_of(model), check.session.where()
                if code is not None and where is not None:
                    check.compile_sites.setdefault((code.co_filename, code.co_firstlineno), where)
                return original(model, *args, **kwargs)
            return compile

        self.session.patch(torch, "compile", make)

    def uninstall(self) -> None:
        if self.watch is not None:
            self.watch.stop()
