"""``torchwork export`` and ``torchwork verify``.

``torchwork export SOURCE`` takes the model from a factory: ``path/to/file.py:build`` or
``package.module:build``, a function of no arguments returning ``{"model": ..., "example_inputs": ...}``
(optionally ``preprocess``, ``labels``, ``softmax``, ``samples``, ``targets``, ``input_names``,
``output_names``, ``dynamic_length``, ``max_length``, ``output``) or a ``(model, example_inputs)`` pair.
With a checkpoint, ``torchwork export CHECKPOINT --model file.py:build`` loads the checkpoint's weights into
the model first (a state_dict, or a dict holding one under "model" / "state_dict" / "model_state_dict";
``.safetensors`` or ``torch.save`` files, read with ``weights_only=True``), through
:func:`~torchwork.finetune.load_pretrained` (strict, values checked); the DDP / torch.compile prefixes
``module.`` and ``_orig_mod.`` are stripped, another one with ``--strip-prefix gpt.`` (or ``auto``), and a
checkpoint whose keys differ from the model's by one prefix is refused with that prefix named. CHECKPOINT
may also be a run folder (or a run_dir: its latest run): its ``best.pt``, else its newest step checkpoint
that passes its checksum.

Example:
    $ torchwork export model.py:build --format onnx,pt2 --quantize int8 -o artifacts/digits
    $ torchwork export runs/x/checkpoints/best.pt --model model.py:build -o artifacts/digits
    $ torchwork export ckpt.pt --model gpt.py:build --strip-prefix gpt. --max-length 256 --select-output 0 -o a/gpt
    $ torchwork verify artifacts/digits --json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchwork.deploy.factory import build_from_factory
from torchwork.errors import CheckpointError, ConfigError
from torchwork.termination import sigterm_as_exit

STATE_KEYS = ("model", "state_dict", "model_state_dict", "weights")


def checkpoint_of_run(path: Path) -> Path:
    """The checkpoint to export from a run folder (or a run_dir: its latest run): best.pt, else the newest
    step checkpoint that passes its checksum."""
    try:
        from torchwork.runs.checkpoint import CheckpointManager, verify_checkpoint
        from torchwork.runs.folder import is_run_folder, latest_run
    except ImportError as error:
        raise ConfigError(f"{path} is a directory, and run folders need torchwork.runs ({error}). Pass a "
                          "checkpoint file with --model file.py:build.") from error
    run = path if is_run_folder(path) else latest_run(path)
    if run is None:
        raise ConfigError(f"{path} is neither a run folder (with checkpoints/) nor a run_dir holding one.")
    best = run / "checkpoints" / "best.pt"
    if best.is_file() and verify_checkpoint(best) is None:
        return best
    newest = CheckpointManager(run / "checkpoints").newest_valid()
    if newest is None:
        raise CheckpointError(f"run {run} has no valid checkpoint in checkpoints/.")
    return newest


def load_checkpoint_weights(path: Path) -> dict[str, Any]:
    """A state_dict from a checkpoint file (or a run folder), never unpickling arbitrary objects.

    A checkpoint written by a torchwork run (with its ``.sha256`` beside it) is checked against it first.
    """
    import torch

    if path.is_dir():
        path = checkpoint_of_run(path)
        print(f"exporting the weights of {path}", file=sys.stderr)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist.")
    try:
        if path.with_name(path.name + ".sha256").is_file():
            from torchwork.runs.checkpoint import load_checkpoint  # verifies the checksum

            data: Any = load_checkpoint(path)
        elif path.suffix == ".safetensors":
            from safetensors.torch import load_file

            data = load_file(str(path))
        else:
            data = torch.load(str(path), map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
    except Exception as error:
        raise CheckpointError(f"cannot read checkpoint {path} with weights_only=True ({type(error).__name__}: "
                              f"{error}). It is damaged, or holds pickled objects besides tensors.") from error
    if isinstance(data, Mapping) and not all(isinstance(v, torch.Tensor) for v in data.values()):
        data = next((data[k] for k in STATE_KEYS if isinstance(data.get(k), Mapping)), None)
    if not isinstance(data, Mapping) or not data or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise CheckpointError(f"checkpoint {path} holds no state_dict (a dict of tensors, or one under "
                              f"{'/'.join(STATE_KEYS)}).")
    return dict(data)


WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DDP and torch.compile: always stripped


def load_into(model: Any, state: Mapping[str, Any], source: Path, spec: str, strip_prefix: str | None) -> None:
    """Load ``state`` into the factory's ``model`` with :func:`~torchwork.finetune.load_pretrained` (strict,
    values checked): the wrapper prefixes stripped, plus ``strip_prefix`` (``"auto"``: the prefix found by
    matching the keys). A checkpoint whose keys differ from the model's by one prefix is refused with it named."""
    from torchwork.finetune.loading import load_pretrained
    from torchwork.prefixes import strip_given

    strip: Any = "auto" if strip_prefix == "auto" else [*WRAPPER_PREFIXES, *([strip_prefix] if strip_prefix else [])]
    report = load_pretrained(model, state, strip_prefixes=strip, strict=False)  # refused below: nothing exported
    if report.problems:
        hint = "" if strip == "auto" else prefix_hint([strip_given(k, strip)[0] for k in state], model)
        raise CheckpointError(f"checkpoint {source} does not {'fit' if report.mismatched else 'match'} the model "
                              f"from {spec}. {hint}{report.table()}")
    if any(report.prefix):
        print(f"{report.summary()} (checkpoint {source})", file=sys.stderr)


def prefix_hint(keys: list[str], model: Any) -> str:
    """What one prefix between the checkpoint's ``keys`` and the model's would fix, found as
    :func:`~torchwork.finetune.load_pretrained` finds it (:mod:`torchwork.prefixes`); "" when none would."""
    from torchwork.prefixes import describe_prefix, discover_prefix

    cut, add = discover_prefix(keys, list(model.state_dict()))
    if cut and not add:
        return (f"Every key of the checkpoint has the prefix {cut!r} ({describe_prefix(cut)}); without it the keys "
                f"match the model's. Pass --strip-prefix {cut} to strip it (or --strip-prefix auto, which finds "
                "it as load_pretrained does), or save the inner model's state_dict().\n")
    if add and not cut:
        return (f"The model's keys have the prefix {add!r} ({describe_prefix(add)}) that the checkpoint's lack: "
                f"let the factory return the inner model (model.{add.rstrip('.')}).\n")
    if cut:
        return (f"The checkpoint's keys start with {cut!r} where the model's start with {add!r}: load the weights "
                "in the factory with torchwork.finetune.load_pretrained(model, path, rename=...).\n")
    return ""


def cli_export(args: argparse.Namespace) -> int:
    from torchwork.deploy.pipeline import export
    from torchwork.deploy.verification import format_report

    source = args.source
    checkpoint = None
    if not args.model and (":" in source and not Path(source).exists()):
        spec = source
    elif args.model:
        spec, checkpoint = args.model, Path(source)
    else:
        raise ConfigError(f"{source}: pass a model factory (file.py:function), or a checkpoint with --model "
                          "file.py:function that builds the architecture and example inputs.")
    made = build_from_factory(spec)
    if checkpoint is not None:
        load_into(made["model"], load_checkpoint_weights(checkpoint), checkpoint, spec, args.strip_prefix)
    elif args.strip_prefix:
        raise ConfigError("--strip-prefix applies to a checkpoint's keys: pass CHECKPOINT --model file.py:build.")
    model, example = made.pop("model"), made.pop("example_inputs")
    for name in ("verify_rounds", "max_length"):
        if getattr(args, name) is not None:
            made[name] = getattr(args, name)
    if args.select_output is not None:
        made["output"] = int(args.select_output) if args.select_output.isdecimal() else args.select_output
    with sigterm_as_exit():  # a stopped export removes its temp folder, as after Ctrl-C
        report = export(model, example, args.output, formats=args.format, dynamic_batch=not args.static_batch,
                        quantize=args.quantize, strict=not args.allow_failed, overwrite=args.overwrite,
                        torchscript_method=args.torchscript_method, cpp=args.cpp, **made)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "parity"}, indent=2, default=str))
    else:
        print(f"wrote {report['artifact']}: variants {', '.join(report['variants'])}")
        for name, reason in report["refused"].items():
            print(f"refused {name}: {reason}")
        for advice in report["advice"]:
            print(f"advice: {advice}")
        if report["verify"]:
            print()
            print(format_report(report["verify"]))
        else:
            print("no held-out samples: the factory can return samples= and targets= so that export verifies "
                  "them; or run `torchwork verify` with a pt2 variant.")
    return 0 if report["ok"] else 1


def cli_verify(args: argparse.Namespace) -> int:
    from torchwork.deploy.progress import showing_progress
    from torchwork.deploy.verification import format_report, verify
    from torchwork.env.drift import warn_if_machine_differs

    warn_if_machine_differs(args.artifact)  # this machine against the exporting one: torch, build, ONNX Runtime
    variants = [v.strip() for v in args.variants.split(",")] if args.variants else None
    with showing_progress("verify"):
        report = verify(args.artifact, variants=variants, rounds=args.rounds, threads=args.threads,
                        tolerance=args.tolerance, atol=args.atol, rtol=args.rtol, trust=tuple(args.trust),
                        cpp=args.cpp, compile=args.compile)
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report))
    return 0 if report["ok"] else 1
