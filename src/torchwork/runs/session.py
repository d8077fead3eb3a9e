"""A run as the Trainer sees it: the folder, its manifest, loggers and checkpoints, and resuming one.

The Trainer calls :meth:`RunSession.open` at the start of ``fit`` with its typed :class:`RunOptions` and
a :class:`RunDescription` of what trains; it gets back the checkpoint to resume from, and hands each
checkpoint to :meth:`RunSession.save`. Nothing here knows the Trainer or runs per step.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

from torchwork.errors import CheckpointError
from torchwork.files import write_json
from torchwork.runs.checkpoint import CheckpointManager, load_checkpoint, remove_leftovers
from torchwork.runs.contents import check_contents
from torchwork.runs.folder import is_run_folder, latest_run, new_run_folder
from torchwork.runs.loggers import JsonlLogger, TensorBoardLogger
from torchwork.runs.manifest import RunDescription, build_manifest, format_summary
from torchwork.runs.options import RunOptions


def find_resume_checkpoint(resume: str | Path, run_dir: str | Path | None) -> tuple[Path | None, Path | None]:
    """Resolve ``resume`` ("latest", a run folder or a checkpoint file) to (run folder, checkpoint)."""
    if str(resume) == "latest":
        if run_dir is None:
            raise CheckpointError("resume='latest' needs run_dir= to know where runs live.")
        run = latest_run(run_dir)
        if run is None:
            return None, None
    else:
        path = Path(resume)
        if path.is_file():
            run = path.parent.parent if path.parent.name == "checkpoints" else None
            return run, path
        if not is_run_folder(path):
            raise CheckpointError(f"resume={str(resume)!r} is neither a checkpoint file nor a run folder "
                                  "(a folder holding checkpoints/).")
        run = path
    manager = CheckpointManager(run / "checkpoints")
    if not manager.step_checkpoints():
        return run, None
    checkpoint = manager.newest_valid()
    if checkpoint is None:
        raise CheckpointError(f"no valid checkpoint in {run / 'checkpoints'}: every one fails its checksum. "
                              "Start a new run (resume=None), or restore a copy of a checkpoint.")
    return run, checkpoint


class RunSession:
    """Owns one run folder while ``fit`` runs."""

    def __init__(self, path: Path, manager: CheckpointManager, loggers: list[Any],
                 resume_record: dict[str, Any] | None = None) -> None:
        self.path, self.manager, self.loggers = path, manager, loggers
        self._resume_record = resume_record  # written by record_resume(), once the state is restored

    def record_resume(self) -> None:
        """Add this resume to the manifest's ``resumes``: called after the checkpoint was restored, so a
        resume that failed is never recorded."""
        if self._resume_record is None:
            return
        manifest_path = self.path / "manifest.json"
        manifest = _read_manifest(manifest_path)
        manifest.setdefault("resumes", []).append(self._resume_record)
        write_json(manifest_path, manifest)
        self._resume_record = None

    @classmethod
    def open(cls, options: RunOptions, description: RunDescription, train_loader: Any, val_loader: Any,
             epochs: int, resume: str | Path | None, device: Any) -> tuple[RunSession, dict[str, Any] | None]:
        """Create (or, when resuming, reopen) the run folder; returns the session and the checkpoint
        (loaded onto ``device``)."""
        run, checkpoint = (None, None)
        if resume is not None:
            run, checkpoint = find_resume_checkpoint(resume, options.run_dir)
            if run is not None:
                _remove_leftovers(run)
            if run is not None and checkpoint is None:
                print(f"torchwork: {run} has no checkpoint yet: starting a new run.", file=sys.stderr)
                run = None
        state = load_checkpoint(checkpoint, map_location=device) if checkpoint else None
        if state is not None:
            check_contents(state, checkpoint)
        if run is None:
            run = new_run_folder(options.run_dir)
        resume_step = state["counters"]["global_step"] if state else None
        manifest_path = run / "manifest.json"
        record = None
        if state is None or not manifest_path.exists():
            manifest = build_manifest(description, train_loader, val_loader, epochs, options.config)
            manifest["started"] = _now()
            manifest["resumes"] = []
            write_json(manifest_path, manifest)
        else:
            manifest = _read_manifest(manifest_path)  # damaged: refused before anything is written
            record = {"at": _now(), "from": checkpoint.name, "step": resume_step}
        if state is None:
            print(format_summary(manifest, run), file=sys.stderr)
        else:
            print(f"torchwork: resuming {run} from {checkpoint.name} (step {resume_step}, epoch "
                  f"{state['counters']['epoch']}, batch {state['counters']['batch_in_epoch']}).",
                  file=sys.stderr)
        monitor, mode = options.checkpoint_monitor or ("val_loss" if val_loader is not None else "train_loss",
                                                       "min")
        manager = CheckpointManager(run / "checkpoints", keep=options.keep_checkpoints, monitor=monitor,
                                    mode=mode)
        if state is not None:
            manager.best_value = state.get("best_value")
        loggers = [JsonlLogger(run / "metrics.jsonl", resume_step=resume_step)]
        if options.tensorboard:
            loggers.append(TensorBoardLogger(run / "tensorboard", resume_step=resume_step))
        return cls(run, manager, loggers, record), state

    def save(self, state: dict[str, Any], metrics: dict[str, Any] | None = None) -> Path | None:
        state["best_value"] = self.manager.best_value
        if metrics and self.manager.monitor in metrics:
            # the best value this checkpoint would set, so that a resume continues the comparison
            value = float(metrics[self.manager.monitor])
            best = self.manager.best_value
            if best is None or (value < best if self.manager.mode == "min" else value > best):
                state["best_value"] = value
        return self.manager.save(state, state["counters"]["global_step"], metrics)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def _read_manifest(path: Path) -> dict[str, Any]:
    """A resumed run's manifest, refused with a message when it is not the JSON object torchwork wrote."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:  # bad JSON or UTF-8 (ValueError), unreadable
        raise CheckpointError(f"{path} is damaged ({str(error)[:120]}): the run's record cannot be extended. "
                              "Restore it from a copy, or start a new run (resume=None).") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("resumes", []), list):
        raise CheckpointError(f"{path} is damaged (not the JSON object torchwork writes, or 'resumes' is not a "
                              "list): restore it from a copy, or start a new run (resume=None).")
    return manifest


def _remove_leftovers(run: Path) -> None:
    removed = remove_leftovers(run)
    if removed:
        names = ", ".join(str(p.relative_to(run)) for p in removed[:5]) + (" ..." if len(removed) > 5 else "")
        print(f"torchwork: removed {len(removed)} leftover(s) of interrupted writes in {run}: {names}",
              file=sys.stderr)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
