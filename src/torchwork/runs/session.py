"""A run as the Trainer sees it: the folder, its manifest, loggers and checkpoints, and resuming one.

The Trainer calls :meth:`RunSession.open` at the start of ``fit`` with its typed :class:`RunOptions` and
a :class:`RunDescription` of what trains; it gets back the checkpoint to resume from, and hands each
checkpoint to :meth:`RunSession.save`. Nothing here knows the Trainer or runs per step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from torchwork.errors import CheckpointError
from torchwork.files import write_json
from torchwork.paths import read_regular
from torchwork.runs.checkpoint import CheckpointManager, load_checkpoint, remove_leftovers
from torchwork.runs.contents import check_contents
from torchwork.runs.folder import is_run_folder, latest_run, new_run_folder
from torchwork.runs.lineage import register
from torchwork.runs.loggers import JsonlLogger, TensorBoardLogger
from torchwork.runs.manifest import RunDescription, build_manifest, format_summary
from torchwork.runs.options import RunOptions
from torchwork.runs.readback import MAX_MANIFEST_BYTES
from torchwork.runs.record import now, record_end, record_start, running_fields
from torchwork.runs.sameness import differences, extension_problem, shape_differences


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
        self.final_value: float | None = None  # the monitored metric at the last checkpoint
        self.last_step: int | None = None
        self._error_at_open = sys.exc_info()[1]  # fit() may run inside a caller's except block
        self._resume_record = resume_record  # written by record_resume(), once the state is restored

    def record_resume(self) -> None:
        """Add this resume to the manifest's ``resumes``: called after the checkpoint was restored, so a
        resume that failed is never recorded."""
        if self._resume_record is None:
            return
        manifest_path = self.path / "manifest.json"
        manifest = _read_manifest(manifest_path)
        manifest.setdefault("resumes", []).append(self._resume_record)
        manifest.update(running_fields())  # running again, under this process
        for ended in ("ended", "error"):
            manifest.pop(ended, None)
        write_json(manifest_path, manifest)
        self._resume_record = None

    @classmethod
    def open(cls, options: RunOptions, description: RunDescription, train_loader: Any, val_loader: Any,
             epochs: int | None, resume: str | Path | None, device: Any) -> tuple[RunSession, dict[str, Any] | None]:
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
        current = build_manifest(description, train_loader, val_loader, epochs, options.config)
        splits = {"train": train_loader, "validation": val_loader, **options.data_splits}
        manifest_path = run / "manifest.json" if run is not None else None
        if state is not None and run is not None and manifest_path is not None and manifest_path.exists():
            recorded = _read_manifest(manifest_path)  # damaged: refused before anything is written
            if not _same_run(run, checkpoint, state, recorded, current, description, epochs,
                             latest=str(resume) == "latest", splits=splits):
                run, state, manifest_path = None, None, None
        if run is None:
            run = new_run_folder(options.run_dir)
            manifest_path = run / "manifest.json"
        assert manifest_path is not None
        lineage = register(run)
        resume_step = state["counters"]["global_step"] if state else None
        monitor, mode = options.checkpoint_monitor or ("val_loss" if val_loader is not None else "train_loss",
                                                       "min")
        record = None
        if state is None or not manifest_path.exists():
            manifest = {**current, "lineage": lineage, "started": now(), "resumes": []}
            manifest.update(record_start(run, splits, monitor, mode))
            write_json(manifest_path, manifest)
        else:
            manifest = _read_manifest(manifest_path)  # damaged: refused before anything is written
            # written by record_resume() once the state is restored: a resume that fails changes nothing
            record = {"at": now(), "from": checkpoint.name if checkpoint else None, "step": resume_step}
            if manifest.get("training", {}).get("epochs") != epochs:
                record["epochs"] = epochs  # extended (or shortened) when resumed
        if state is None:
            print(format_summary(manifest, run), file=sys.stderr)
        else:
            counters = state["counters"]
            where = (f"after epoch {counters['epoch']}" if counters["batch_in_epoch"] == 0 else
                     f"epoch {counters['epoch'] + 1}, after batch {counters['batch_in_epoch']}")  # 1-based, as read
            print(f"torchwork: resuming {run} from {checkpoint.name if checkpoint else '?'} (step {resume_step}, "
                  f"{where}).", file=sys.stderr)
        manager = CheckpointManager(run / "checkpoints", keep=options.keep_checkpoints, monitor=monitor,
                                    mode=mode)
        if state is not None and checkpoint is not None:
            manager.restore_best(state.get("best_value"), checkpoint, resume_step)
        loggers: list[Any] = [JsonlLogger(run / "metrics.jsonl", resume_step=resume_step)]
        if options.tensorboard:
            board = TensorBoardLogger(run / "tensorboard", resume_step=resume_step)
            board.declare_hparams(manifest)
            loggers.append(board)
        return cls(run, manager, loggers, record), state

    def save(self, state: dict[str, Any], metrics: dict[str, Any] | None = None) -> Path | None:
        state["best_value"] = self.manager.best_value
        state["run"] = self.path.name  # which run wrote it: a checkpoint copied into another run is refused
        self.last_step = state["counters"]["global_step"]
        if metrics and self.manager.monitor in metrics:
            self.final_value = float(metrics[self.manager.monitor])
            # the best value this checkpoint would set, so that a resume continues the comparison
            value = float(metrics[self.manager.monitor])
            if self.manager.improves(value):
                state["best_value"] = value
        return self.manager.save(state, state["counters"]["global_step"], metrics)

    def close(self) -> None:
        """Record how the run ended (state, the monitored metric's best and final) and close the loggers.
        Called from ``fit``'s ``finally``: an exception on its way out is what ended the run."""
        error = sys.exc_info()[1]
        error = None if error is self._error_at_open else error
        best = self.manager.best_value
        for logger in self.loggers:
            if hasattr(logger, "write_hparams"):
                logger.write_hparams(self.manager.monitor, best, self.final_value, self.last_step)
            logger.close()
        manifest_path = self.path / "manifest.json"
        try:
            # a resume that failed before its state was restored leaves the manifest as it was
            manifest = None if self._resume_record is not None else \
                json.loads(read_regular(manifest_path, MAX_MANIFEST_BYTES))
        except (OSError, ValueError, RecursionError):
            manifest = None  # removed or damaged meanwhile: nothing to add the end to
        if isinstance(manifest, dict):
            write_json(manifest_path, record_end(manifest, error, best, self.final_value, self.last_step))
        from torchwork.runs.checkpoint import disk_use

        checkpoints = self.manager.directory
        best_file = checkpoints / "best.pt"
        linked = best_file.exists() and best_file.stat().st_nlink > 1
        print(f"torchwork: run {self.path} takes {_size(disk_use(self.path))} on disk (checkpoints "
              f"{_size(disk_use(checkpoints))}: {len(self.manager.step_checkpoints())} kept"
              + (", best.pt a hard link to one, not a copy" if linked else "") + ")", file=sys.stderr)


def _same_run(run: Path, checkpoint: Path | None, state: dict[str, Any], recorded: dict[str, Any],
              current: dict[str, Any], description: RunDescription, epochs: int | None, latest: bool,
              splits: dict[str, Any]) -> bool:
    """Whether ``state`` (from ``run``) may be continued by this training: the same model, settings and data
    (each split's rows against the fingerprints the run recorded). With resume="latest" a different
    training starts a new run (said in one line); a run named explicitly that differs is an error."""
    from torchwork.runs.checkpoint import clean_state_dict, unwrap_model
    from torchwork.runs.fingerprint import changed_splits

    fingerprints = recorded.get("fingerprints")
    found = changed_splits(run, fingerprints, splits) if isinstance(fingerprints, dict) else []
    writer = state.get("run")
    if isinstance(writer, str) and writer != run.name:
        found.append(f"{checkpoint.name if checkpoint else 'the checkpoint'} was written by run {writer}, "
                     f"not by {run.name}")
    found += shape_differences(clean_state_dict(state["model"]), unwrap_model(description.model).state_dict())
    found += differences(recorded, current)
    problem = extension_problem(recorded, epochs)
    if problem and all(text.startswith("scheduler.") for text in found):
        # the same training, longer (its schedule rescaled or not): the checkpoint's schedule would end first
        raise CheckpointError(f"cannot resume {run} for {epochs} epochs: {problem}.")
    if found:
        shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
        if latest:
            print(f"torchwork: not resuming {run}: this training differs from it ({shown}); starting a new run.",
                  file=sys.stderr)
            return False
        raise CheckpointError(f"{run} is another training than this one ({shown}): a run resumes only itself. "
                              "Undo the change to continue it, or start a new run (resume=None; from the command "
                              "line, run the command without torchwork resume).")
    return True


def _read_manifest(path: Path) -> dict[str, Any]:
    """A resumed run's manifest, refused with a message when it is not the JSON object torchwork wrote."""
    try:
        manifest = json.loads(read_regular(path, MAX_MANIFEST_BYTES).decode("utf-8"))
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


def _size(size: int) -> str:
    """``1234567`` -> ``'1.2 MB'``."""
    value = float(size)
    for unit in ("bytes", "KB", "MB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"

