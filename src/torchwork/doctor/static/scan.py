"""``torchwork doctor --static``: the doctor's checks that the source alone decides, over whole folders.

Each file is parsed with :mod:`ast` (never imported, never run), every rule of :data:`RULES` reads it, and
findings on a line whose comment says ``# torchwork: ignore[id]`` are dropped. A finding whose check the
runtime doctor also has carries the command that confirms it (``torchwork doctor train.py``). torch is not
imported: a repository of a thousand files is scanned in seconds, in CI, without a GPU or the model's
dependencies.

Example:
    >>> import pathlib, tempfile
    >>> script = pathlib.Path(tempfile.mkdtemp()) / "train.py"
    >>> _ = script.write_text("for x, y in loader:\\n    loss_fn(model(x), y).backward()\\n    optimizer.step()\\n")
    >>> scan = scan_paths([script])
    >>> [(f.id, f.line, f.severity) for f in scan.findings], scan.exit_code
    ([('missing-zero-grad', 3, 'error')], 1)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from torchwork.doctor.static.files import python_files, read_source
from torchwork.doctor.static.ignores import ignored_lines, is_ignored
from torchwork.doctor.static.results import Rule, StaticFinding, StaticScan
from torchwork.doctor.static.rules_loop import missing_zero_grad, scheduler_per_batch
from torchwork.doctor.static.rules_losses import (
    ignored_strict_false,
    probabilities_into_loss,
    unsafe_torch_load,
)
from torchwork.doctor.static.rules_modules import detect_anomaly, dropout_in_eval, requires_grad_attribute
from torchwork.doctor.static.syntax import FileIndex, is_test_file
from torchwork.errors import ConfigError
from torchwork.locations import display_path

RULES: tuple[Rule, ...] = (
    Rule("missing-zero-grad", "optimizer steps on gradients never cleared", "error", missing_zero_grad),
    Rule("requires-grad-attribute", "module.requires_grad = False freezes nothing", "error",
         requires_grad_attribute),
    Rule("scheduler-per-batch", "an epoch schedule stepped once per batch", "error", scheduler_per_batch),
    Rule("dropout-in-eval", "dropout that model.eval() does not turn off", "error", dropout_in_eval),
    Rule("loss-on-probabilities", "softmax/sigmoid output given to a loss that applies it again", "error",
         probabilities_into_loss),
    Rule("state-dict-mismatch", "load_state_dict(strict=False) with its result ignored", "warning",
         ignored_strict_false, in_tests=False),
    Rule("unsafe-torch-load", "torch.load that may unpickle code", "warning", unsafe_torch_load),
    Rule("anomaly-mode", "autograd anomaly mode left on in training", "warning", detect_anomaly, in_tests=False),
)
RULE_IDS = tuple(rule.id for rule in RULES)


def select_rules(checks: Sequence[str] | None) -> tuple[Rule, ...]:
    """The rules named in ``checks`` (every rule when None); a ConfigError names the valid ids otherwise."""
    if not checks:
        return RULES
    unknown = [c for c in checks if c not in RULE_IDS]
    if unknown:
        raise ConfigError(f"doctor --static: no static check {', '.join(map(repr, unknown))}. The static "
                          f"checks are: {', '.join(RULE_IDS)}.")
    return tuple(rule for rule in RULES if rule.id in checks)


def _runtime_ids() -> frozenset[str]:
    from torchwork.doctor.checks import REGISTRY  # the table only: no check (and no torch) is imported

    return frozenset(REGISTRY)


def scan_source(source: bytes, path: str, rules: Sequence[Rule] = RULES) -> tuple[list[StaticFinding], int]:
    """The findings of ``rules`` in one file's ``source`` (shown as ``path``), and how many comments ignored.

    Raises SyntaxError (or ValueError for a NUL byte) when the source is not Python.
    """
    index = FileIndex.parse(source, filename=path)
    ignores = ignored_lines(source)
    runtime = _runtime_ids()
    findings: list[StaticFinding] = []
    ignored = 0
    seen: set[tuple[str, int]] = set()
    in_tests = is_test_file(path)
    for rule in rules:
        if in_tests and not rule.in_tests:
            continue
        for hit in rule.find(index, path):
            line, column = getattr(hit.node, "lineno", 1), getattr(hit.node, "col_offset", 0) + 1
            if (rule.id, line) in seen:
                continue
            seen.add((rule.id, line))
            if is_ignored(ignores, line, rule.id):
                ignored += 1
                continue
            confirm = f"torchwork doctor {path}" if rule.id in runtime else None
            findings.append(StaticFinding(rule.id, hit.severity, path, line, column, hit.message, hit.fix, confirm))
    findings.sort(key=lambda f: (f.line, f.column, f.id))
    return findings, ignored


def scan_paths(paths: Sequence[str | os.PathLike[str]], checks: Sequence[str] | None = None) -> StaticScan:
    """Scan every Python file under ``paths`` with the static rules (all, or those in ``checks``)."""
    rules = select_rules(checks)
    files, skipped = python_files([Path(p) for p in paths])
    findings: list[StaticFinding] = []
    ignored = read = 0
    for file in files:
        shown = display_path(str(file)) or str(file)
        try:
            found, silenced = scan_source(read_source(file), shown, rules)
        except (OSError, ValueError) as error:
            skipped.append((shown, str(error)))
            continue
        except (SyntaxError, RecursionError, MemoryError) as error:
            skipped.append((shown, f"not parsed ({type(error).__name__}: {getattr(error, 'msg', error)})"))
            continue
        read += 1
        findings.extend(found)
        ignored += silenced
    return StaticScan(findings, read, skipped, ignored)
