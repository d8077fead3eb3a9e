"""The doctor's instrumentation: one session installs PyTorch's public hooks and dispatches to the checks.

Everything the checks see comes through PyTorch's public extension points: global module forward
(pre-)hooks, global optimizer step hooks, one ``TorchFunctionMode``, saved-tensor hooks (installed by the
``inplace-saved`` check), per-parameter gradient hooks, and a few thin wrappers (``DataLoader`` iteration,
``load_state_dict``, ``zero_grad``, ``GradScaler.update``, ``DataParallel``). Nothing in the user's code
is edited. The hooks are removed when the session ends.

Example:
    >>> import torch
    >>> from torchwork.doctor.session import diagnose
    >>> _ = torch.manual_seed(0)
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    >>> with diagnose() as session:
    ...     with torch.no_grad():
    ...         for _ in range(2):
    ...             _ = model(torch.randn(8, 4))  # evaluation, but the model is still in train mode
    >>> [f.id for f in session.findings]
    ['eval-mode']
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from torchwork.doctor.checks import CHECK_IDS, Check, load_checks
from torchwork.doctor.findings import Finding, Locator, display_path, sort_findings
from torchwork.doctor.op_categories import (
    ADD,
    ATTR,
    BACKWARD,
    BREAK,
    INPLACE,
    MAYBE_INPLACE,
    NAMED,
    NO_VALUES,
    RANDOM,
    category,
    inplace_flag,
)
from torchwork.doctor.tensor_values import first_tensor

Tensor = torch.Tensor
_UNKNOWN = object()  # Session._op_where before anyone asked

class _DoctorMode(TorchFunctionMode):
    """Sees every call of the torch API made while it is active, and hands the interesting ones on."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.categories: dict[Any, int] = {}
        self.inplace_positions: dict[Any, int | None] = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        session = self.session
        # a DataLoader worker or other child process: not the user's training loop; and code torch.compile
        # traces sees plain torch (the checks would otherwise break its graphs: see checks/graph_breaks.py)
        if session._forked or torch.compiler.is_compiling():
            return func(*args, **kwargs)
        try:
            cat = self.categories[func]
        except (KeyError, TypeError):
            name = getattr(func, "__name__", "") or ""
            cat = category(name)
            if name in session._named_callbacks:
                cat |= NAMED
            if cat & ATTR:
                owner = getattr(func, "__self__", None)
                if getattr(owner, "__name__", None) == "data":
                    cat |= BREAK
            try:
                self.categories[func] = cat
            except TypeError:
                pass
        if cat & ATTR and not cat & BREAK:
            return func(*args, **kwargs)
        if cat & BACKWARD:
            return session._backward(func, args, kwargs)
        session._op_where = _UNKNOWN  # the user's line, found once for this op if a hook inside asks for it
        try:
            out = func(*args, **kwargs)
        except Exception as error:
            session._op_where = None
            for callback in session._op_error_callbacks:
                session.safely(callback, func, args, kwargs, error)
            raise
        session._op_where = None
        if session._derive_callbacks:  # every result, views and copies included (armed on demand)
            for callback in session._derive_callbacks:
                session.safely(callback, args, out)
        if cat & NAMED:
            for callback in session._named_callbacks.get(getattr(func, "__name__", ""), ()):
                session.safely(callback, func, args, kwargs, out)
        if cat:
            if cat & MAYBE_INPLACE and inplace_flag(func, args, kwargs, self.inplace_positions):
                cat |= INPLACE
            if cat & INPLACE and args and isinstance(args[0], Tensor):
                for callback in session._inplace_callbacks:
                    session.safely(callback, func, args[0])
            if cat & ADD and session._add_callbacks:
                for callback in session._add_callbacks:
                    session.safely(callback, func, args, out)
            if cat & RANDOM:
                for callback in session._random_callbacks:
                    session.safely(callback, func, args, kwargs)
            if cat & BREAK and session._break_callbacks and args:
                source = args[0] if isinstance(args[0], Tensor) else first_tensor(args[0])
                if source is not None:
                    for callback in session._break_callbacks:
                        session.safely(callback, func, source, out)
            if cat & NO_VALUES:
                return out
        for callback in session._value_callbacks:  # the hottest loop: safely() inlined
            try:
                callback(func, args, out)
            except Exception as error:  # a bug in a check must not break the user's script
                session._internal_error(callback, error)
        return out


class Session:
    """One doctor run: the checks, the hooks that feed them, and the findings they report.

    Use it as a context manager, or through :func:`diagnose` / ``torchwork doctor``.
    """

    def __init__(self, checks: Iterable[str] | None = None, *, locator: Locator | None = None) -> None:
        self.locator = locator or Locator()
        self._findings: dict[tuple[str, str | None, int | None], Finding] = {}
        self.internal_errors: list[str] = []
        self.optimizer_steps = 0
        self.backward_calls = 0
        # > 0 while backward() runs: the forwards inside it are activation checkpointing's recomputation
        self.backward_running = 0
        self.script_failed = False
        self._active = False
        self._forked = False
        self._mode: _DoctorMode | None = None
        self._op_where: Any = None  # op_where's cache: None outside an op, _UNKNOWN until asked
        self._op_thread = threading.get_ident()  # the thread the mode runs in (modes are per thread)
        self._handles: list[Any] = []
        self._patches: list[tuple[Any, str, Any]] = []
        self._depth = threading.local()
        self._running = threading.local()  # the modules whose forward is running, outermost first
        self._lock = threading.RLock()
        self._model_names: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
        self._models: dict[int, weakref.ReferenceType[torch.nn.Module]] = {}
        self.loader: weakref.ReferenceType[Any] | None = None  # the DataLoader that yielded last
        self.initial_seed = torch.initial_seed()
        self.helpers: dict[str, Check] = {}
        self.checks: list[Check] = load_checks(self, checks)
        self._collect_callbacks()

    # ------------------------------------------------------------------ findings
    @property
    def findings(self) -> list[Finding]:
        return sort_findings(self._findings.values())

    def find(self, check_id: str) -> list[Finding]:
        return [f for f in self._findings.values() if f.id == check_id]

    def add(self, check_id: str, severity: str, message: str, fix: str,
            where: tuple[str, int] | None = None) -> Finding:
        """Record a finding once per (id, file, line); repeats only raise its count."""
        file, line = (display_path(where[0]), where[1]) if where else (None, None)
        key = (check_id, file, line)
        with self._lock:
            existing = self._findings.get(key)
            if existing is not None:
                existing.count += 1
                return existing
            finding = Finding(check_id, severity, file, line, message, fix)
            self._findings[key] = finding
            return finding

    def where(self, skip: int = 1) -> tuple[str, int] | None:
        """The user's innermost frame above the caller."""
        return self.locator.here(skip + 1)

    def op_where(self) -> tuple[str, int] | None:
        """:meth:`where`, found once per torch operation for the hooks that run inside it (autograd's
        saved-tensor hooks fire once per saved input: two or three times for one ``F.linear``)."""
        cached = self._op_where
        if cached is None or self._op_thread != threading.get_ident():  # outside an op, or another thread
            return self.locator.here(2)
        if cached is _UNKNOWN:
            cached = self._op_where = self.locator.here(2)
        return cached

    def check(self, check_id: str) -> Check | None:
        for item in self.checks:
            if item.id == check_id:
                return item
        return None

    # ------------------------------------------------------------------ module names
    def module_name(self, module: torch.nn.Module) -> str:
        """The module's qualified name inside the outermost model seen running, else its class."""
        name = self._model_names.get(module)
        return name if name is not None else type(module).__name__

    def models_seen(self) -> list[torch.nn.Module]:
        """The models (outermost modules) that ran during the session and are still alive."""
        return [m for m in (ref() for ref in self._models.values()) if m is not None]

    def current_loader(self) -> Any:
        return self.loader() if self.loader is not None else None

    def _learn_names(self, root: torch.nn.Module) -> None:
        known = self._models.get(id(root))
        if known is not None and known() is root:
            return
        self._models[id(root)] = weakref.ref(root)
        label = type(root).__name__
        for name, sub in root.named_modules():
            if sub not in self._model_names or sub is root:
                self._model_names[sub] = f"{label}.{name}" if name else label

    # ------------------------------------------------------------------ dispatch plumbing
    def _collect_callbacks(self) -> None:
        def hooks(name: str) -> list[Callable[..., Any]]:
            return [getattr(c, name) for c in self.checks if getattr(type(c), name) is not getattr(Check, name)]

        self._module_pre_callbacks = hooks("on_module_pre")
        self._module_post_callbacks = hooks("on_module_post")
        self._inplace_callbacks = hooks("on_inplace")
        self._random_callbacks = hooks("on_random")
        self._add_callbacks = hooks("on_add")
        self._value_callbacks = hooks("on_values")
        self._op_error_callbacks = hooks("on_op_error")
        self._backward_pre_callbacks = hooks("on_backward_pre")
        self._backward_post_callbacks = hooks("on_backward_post")
        self._step_pre_callbacks = hooks("on_step_pre")
        self._step_post_callbacks = hooks("on_step_post")
        self._named_callbacks: dict[str, list[Callable[..., Any]]] = {}
        for item in self.checks:
            if type(item).on_op is not Check.on_op:
                for name in item.ops:
                    self._named_callbacks.setdefault(name, []).append(item.on_op)
        self._break_callbacks: list[Callable[..., Any]] = []  # armed on demand by broken-graph
        self._derive_callbacks: list[Callable[..., Any]] = []  # (args, out) of every op, armed on demand

    def arm_break_tracking(self, callback: Callable[..., Any]) -> None:
        if callback not in self._break_callbacks:
            self._break_callbacks.append(callback)

    def arm_derivation(self, callback: Callable[..., Any]) -> None:
        """Call ``callback(args, out)`` after every operation (views and copies too) until disarmed."""
        if callback not in self._derive_callbacks:
            self._derive_callbacks.append(callback)

    def disarm_derivation(self, callback: Callable[..., Any]) -> None:
        if callback in self._derive_callbacks:
            self._derive_callbacks.remove(callback)

    def stop_values(self, callback: Callable[..., Any]) -> None:
        """A check that needs no more per-operation values (it already reported) stops receiving them."""
        if callback in self._value_callbacks:
            self._value_callbacks.remove(callback)

    def stop_random(self, callback: Callable[..., Any]) -> None:
        if callback in self._random_callbacks:
            self._random_callbacks.remove(callback)

    def safely(self, callback: Callable[..., Any], *args: Any) -> Any:
        """``callback(*args)``, or None when it raises: a bug in a check must not break the user's script.

        The error is kept, once, in ``internal_errors`` as ``"<check id>: <error>"`` (``torchwork doctor``
        prints it and exits 2). Checks call their own callbacks through it from the wrappers they install.

        Example:
            >>> from torchwork.doctor.session import Session
            >>> session = Session(checks=[])
            >>> session.safely(int, "7"), session.safely(int, "seven"), session.internal_errors
            (7, None, ["int: ValueError: invalid literal for int() with base 10: 'seven'"])
        """
        try:
            return callback(*args)
        except Exception as error:  # a bug in a check must not break the user's script
            self._internal_error(callback, error)
            return None

    def _internal_error(self, where: Any, error: BaseException) -> None:
        owner = getattr(where, "__self__", where)
        check_id = getattr(owner, "id", None) or getattr(where, "__qualname__", repr(where))
        text = f"{check_id}: {type(error).__name__}: {error}"
        if text not in self.internal_errors:
            self.internal_errors.append(text)

    # ------------------------------------------------------------------ the mode
    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Run library internals (optimizer steps, data loading) without the per-op instrumentation."""
        mode = self._mode
        if mode is None or not self._mode_on_top():
            yield
            return
        mode.__exit__(None, None, None)
        try:
            yield
        finally:
            mode.__enter__()

    def _mode_on_top(self) -> bool:
        try:
            from torch.overrides import _get_current_function_mode
        except ImportError:  # pragma: no cover - older/newer torch without the helper
            return False
        return _get_current_function_mode() is self._mode

    def _backward(self, func: Any, args: tuple, kwargs: dict) -> Any:
        tensor = args[0] if args else None
        for callback in self._backward_pre_callbacks:
            self.safely(callback, tensor)
        self.backward_calls += 1
        self.backward_running += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.backward_running -= 1
            for callback in self._backward_post_callbacks:
                self.safely(callback, tensor)

    # ------------------------------------------------------------------ module and optimizer hooks
    def running_modules(self) -> list[torch.nn.Module]:
        """The modules whose forward is running in this thread, outermost first (empty outside any)."""
        stack: list[torch.nn.Module] | None = getattr(self._running, "stack", None)
        if stack is None:
            stack = self._running.stack = []
        return stack

    def _module_pre(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        if self._forked or torch.compiler.is_compiling():
            return
        self.running_modules().append(module)
        depth = getattr(self._depth, "value", 0)
        self._depth.value = depth + 1
        top = depth == 0
        # the checks' own look at tensors (`.device`, `.requires_grad`, a clone) is not the user's operation:
        # under the mode each attribute read would pay a Python dispatch (about 2.5 us instead of 0.07 us)
        with torch._C.DisableTorchFunction():
            if top:
                self._learn_names(module)
            for callback in self._module_pre_callbacks:  # safely() inlined: once per layer call
                try:
                    callback(module, args, kwargs, top)
                except Exception as error:
                    self._internal_error(callback, error)

    def _module_post(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        if self._forked or torch.compiler.is_compiling():
            return
        stack = self.running_modules()
        if stack and stack[-1] is module:
            stack.pop()
        elif module in stack:  # a forward that raised left inner modules behind (always_call runs this one)
            del stack[len(stack) - 1 - stack[::-1].index(module):]
        depth = getattr(self._depth, "value", 1) - 1
        self._depth.value = max(depth, 0)
        top = depth <= 0
        with torch._C.DisableTorchFunction():
            for callback in self._module_post_callbacks:
                try:
                    callback(module, args, output, top)
                except Exception as error:
                    self._internal_error(callback, error)

    def _step_pre(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        mode = self._mode
        if mode is not None and self._mode_on_top():
            mode.__exit__(None, None, None)  # optimizer internals are not the user's code: run them fast
            self._mode_paused = True
        for callback in self._step_pre_callbacks:
            self.safely(callback, optimizer)

    def _step_post(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        self.optimizer_steps += 1
        for callback in self._step_post_callbacks:  # before the mode resumes: the checks' reads are not the user's
            self.safely(callback, optimizer)
        self._resume_mode()

    def _resume_mode(self) -> None:
        if getattr(self, "_mode_paused", False) and self._mode is not None:
            self._mode_paused = False
            self._mode.__enter__()

    # ------------------------------------------------------------------ wrappers
    def patch(self, owner: Any, name: str, make_wrapper: Callable[[Any], Any]) -> None:
        """Replace ``owner.name`` by ``make_wrapper(original)`` until the session stops."""
        original = owner.__dict__.get(name, getattr(owner, name))
        wrapper = make_wrapper(original)
        try:
            wrapper.__wrapped__ = original
        except (AttributeError, TypeError):
            pass
        self._patches.append((owner, name, original))
        setattr(owner, name, wrapper)

    def _install_common_patches(self) -> None:
        session = self

        def quiet(original: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with session.suspended():
                    return original(*args, **kwargs)
            return wrapper

        self.patch(torch.optim.Optimizer, "zero_grad", quiet)
        self.patch(torch.nn.Module, "zero_grad", quiet)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Session:
        if self._active:
            return self
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._active = True
        self._mode_paused = False
        self.initial_seed = torch.initial_seed()
        self._install_common_patches()
        for item in self.checks:
            item.install()
        # always on: besides the checks' own hooks, they keep the stack of running modules
        self._handles.append(register_module_forward_pre_hook(self._module_pre_kwargs_adapter()))
        self._handles.append(register_module_forward_hook(self._module_post, always_call=True))
        self._handles.append(register_optimizer_step_pre_hook(self._step_pre))
        self._handles.append(register_optimizer_step_post_hook(self._step_post))
        self._mode = _DoctorMode(self)
        self._op_thread = threading.get_ident()
        self._mode.__enter__()
        _watch_forks(self)
        return self

    def _module_pre_kwargs_adapter(self) -> Callable[..., None]:
        # register_module_forward_pre_hook has no with_kwargs: forward kwargs are not visible; args are.
        def hook(module: torch.nn.Module, args: tuple) -> None:
            self._module_pre(module, args, {})
        return hook

    def stop(self, error: BaseException | None = None) -> None:
        """Remove every hook, then let each check draw its conclusions."""
        if not self._active:
            return
        self._active = False
        if self._mode is not None:
            self._resume_mode()
            with contextlib.suppress(Exception):
                if self._mode_on_top():
                    self._mode.__exit__(None, None, None)
            self._mode = None
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for item in reversed(self.checks):
            self.safely(item.uninstall)
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        self._patches.clear()
        self.script_failed = error is not None
        for item in self.checks:
            self.safely(item.finish)
        if error is not None:
            self.explain_error(error)

    def explain_error(self, error: BaseException) -> Finding:
        """Report an exception that ended the script: at the user's line, under the matching check."""
        from torchwork.doctor.explain import explain_exception

        where = self.locator.from_traceback(error.__traceback__)
        if where is None and isinstance(error, SyntaxError) and error.filename and error.lineno:
            where = (error.filename, error.lineno)
        explanation = explain_exception(error)
        first_line = (str(error).strip().splitlines() or [""])[0]
        headline = f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__
        check_id = explanation.check if explanation and explanation.check else "exception"
        existing = self.find(check_id) if check_id != "exception" else []
        if existing:  # the check saw it coming: keep its precise finding, and mark it fatal
            for finding in existing:
                finding.severity = "error"
            return existing[0]
        if explanation is not None:
            message = f"The script stopped with {headline}\n{explanation.cause}"
            if explanation.detail:
                message += f"\n{explanation.detail}"
            fix = explanation.fix
        else:
            message = f"The script stopped with {headline}"
            fix = "Read the traceback above; `torchwork explain` knows the common PyTorch errors."
        return self.add(check_id, "error", message, fix, where)

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.stop(exc if isinstance(exc, Exception) else None)


_SESSIONS: weakref.WeakSet[Session] = weakref.WeakSet()
_FORK_HOOK_INSTALLED = False


def _watch_forks(session: Session) -> None:
    """Forked children (DataLoader workers) inherit the hooks: make them pass everything straight through."""
    global _FORK_HOOK_INSTALLED
    _SESSIONS.add(session)
    if not _FORK_HOOK_INSTALLED and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_mark_forked)
        _FORK_HOOK_INSTALLED = True


def _mark_forked() -> None:
    for session in list(_SESSIONS):
        session._forked = True


def diagnose(checks: Iterable[str] | None = None) -> Session:
    """A doctor session for code you run yourself: ``with diagnose() as s: train()``; then ``s.findings``.

    ``checks`` limits the session to some check ids (default: all of them); one id may be given as a string.
    (It took ``**options`` and used none of them: a misspelt option was silently dropped.)
    """
    from torchwork.arguments import name_list

    chosen = name_list(checks, "checks")  # "eval-mode" was the ids 'e', 'v', 'a', ...
    unknown = set(chosen or ()) - set(CHECK_IDS)
    if unknown:
        from torchwork.errors import ConfigError

        raise ConfigError(f"unknown doctor check(s) {sorted(unknown)}; known: {', '.join(CHECK_IDS)}.")
    return Session(chosen)

