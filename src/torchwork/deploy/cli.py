"""``torchwork export`` and ``torchwork verify``.

``torchwork export SOURCE`` takes the model from a factory: ``path/to/file.py:build`` or
``package.module:build``, a function of no arguments returning ``{"model": ..., "example_inputs": ...}``
(optionally ``preprocess``, ``labels``, ``softmax``, ``samples``, ``targets``, ``input_names``,
``output_names``, ``dynamic_length``) or a ``(model, example_inputs)`` pair. With a checkpoint,
``torchwork export CHECKPOINT --model file.py:build`` loads the checkpoint's weights into the model first
(a state_dict, or a dict holding one under "model" / "state_dict" / "model_state_dict"; ``.safetensors``
or ``torch.save`` files, read with ``weights_only=True``). CHECKPOINT may also be a run folder (or a
run_dir: its latest run): its ``best.pt``, else its newest step checkpoint that passes its checksum.

Example:
    $ torchwork export model.py:build --format onnx,pt2 --quantize int8 -o artifacts/digits
    $ torchwork export runs/x/checkpoints/best.pt --model model.py:build -o artifacts/digits
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
    state = {}
    for key, value in data.items():
        for prefix in ("module.", "_orig_mod."):  # DDP and torch.compile wrappers
            key = key.removeprefix(prefix)
        state[key] = value
    return state


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
        state = load_checkpoint_weights(checkpoint)
        try:
            result = made["model"].load_state_dict(state, strict=False)
        except RuntimeError as error:  # shape mismatches
            raise CheckpointError(f"checkpoint {checkpoint} does not fit the model from {spec}: {error}") from error
        if result.missing_keys or result.unexpected_keys:
            raise CheckpointError(f"checkpoint {checkpoint} does not match the model from {spec}: missing "
                                  f"{result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}.")
    model, example = made.pop("model"), made.pop("example_inputs")
    if args.verify_rounds is not None:
        made["verify_rounds"] = args.verify_rounds
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
