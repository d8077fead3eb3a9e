"""A study's ``report.html`` (one self-contained file) and the trials table ``torchwork tune show`` prints.

Example:
    >>> trial_rows({})
    []
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from torchwork.report.plots import figure_png, new_figure


def trial_rows(attempts: dict[int, Any]) -> list[list[Any]]:
    """Trials table: number, state, score, epochs run, seconds, attempts, run folder, params."""
    rows = []
    for number, frozen in sorted(attempts.items()):
        state = frozen.state.name
        if state == "FAIL" and "error" not in frozen.user_attrs:
            state = "INTERRUPTED"
        value = frozen.value if frozen.value is not None else (
            max(frozen.intermediate_values.values()) if frozen.intermediate_values else None)
        params = frozen.params or frozen.system_attrs.get("fixed_params", {})
        rows.append([number, state, "" if value is None else round(float(value), 4),
                     frozen.user_attrs.get("epochs", len(frozen.intermediate_values)),
                     frozen.user_attrs.get("seconds", ""), int(frozen.user_attrs.get("attempt", 0)) + 1,
                     f"trials/{number}/" + str(Path(frozen.user_attrs.get("run", "")).name),
                     ", ".join(f"{k}={_short(v)}" for k, v in sorted(params.items()))])
    return rows


COLUMNS = ["trial", "state", "score", "epochs", "seconds", "attempts", "run folder", "params"]


def format_table(attempts: dict[int, Any], summary: dict[str, Any] | None = None) -> str:
    """The trials table as plain text (``torchwork tune show``)."""
    rows = [[str(c) for c in row] for row in trial_rows(attempts)]
    widths = [max(len(COLUMNS[i]), *(len(r[i]) for r in rows)) if rows else len(COLUMNS[i])
              for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if summary and summary.get("best_trial") is not None:
        lines.append(f"best: trial {summary['best_trial']}, {summary['objective']} {summary['best_value']:.4f}, "
                     + ", ".join(f"{k}={_short(v)}" for k, v in sorted(summary["best_params"].items())))
    return "\n".join(lines)


def importances(attempts: dict[int, Any], study_direction: str) -> dict[str, float] | None:
    """Optuna's fANOVA parameter importances over the complete trials (None with fewer than 3)."""
    import optuna

    done = [t for t in attempts.values() if t.state.name == "COMPLETE" and t.value is not None]
    if len(done) < 3:
        return None
    study = optuna.create_study(direction=study_direction)
    study.add_trials(done)
    try:
        return dict(optuna.importance.get_param_importances(study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)))
    except (RuntimeError, ValueError):
        return None


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _figure(width: float, height: float, columns: int = 1) -> tuple[Any, Any]:
    """A figure of ``columns`` panels in a row; its axes always a 2-D array (``axes[0][i]``)."""
    return new_figure(width, height, 1, columns, squeeze=False)


def history_png(attempts: dict[int, Any], maximize: bool, metric: str) -> bytes:
    """Each complete trial's score by trial number, and the best so far."""
    fig, axes = _figure(6.5, 3.4)
    ax = axes[0][0]
    done = sorted((n, t.value) for n, t in attempts.items() if t.state.name == "COMPLETE" and t.value is not None)
    pruned = [n for n, t in attempts.items() if t.state.name == "PRUNED"]
    if done:
        ax.plot([n for n, _ in done], [v for _, v in done], "o", label="complete")
        best, running = [], -math.inf if maximize else math.inf
        for _, value in done:
            running = max(running, value) if maximize else min(running, value)
            best.append(running)
        ax.step([n for n, _ in done], best, where="post", label="best so far")
    if pruned:
        low = min((v for _, v in done), default=0.0)
        ax.plot(pruned, [low] * len(pruned), "x", color="grey", label="pruned")
    ax.set_xlabel("trial")
    ax.set_ylabel(metric, parse_math=False)
    ax.grid(alpha=0.3)
    if done or pruned:
        ax.legend()
    return figure_png(fig)


PLOTTED_SETTINGS = 12  # panels of the settings plot (the first, by name); the trials table lists them all
LABELLED_CHOICES = 40  # more choices are plotted by their index, unlabelled


def params_png(attempts: dict[int, Any], space: Any, metric: str) -> bytes:
    """Each setting against the score (complete trials)."""
    settings = space.settings[:PLOTTED_SETTINGS]
    fig, axes = _figure(min(3.2 * len(settings), 12.0), 3.0, columns=len(settings))
    done = [t for t in attempts.values() if t.state.name == "COMPLETE" and t.value is not None]
    for ax, setting in zip(axes[0], settings):
        xs = [t.params.get(setting.name) for t in done]
        if setting.choices is not None:
            labels = [str(c) for c in setting.choices]
            where = {label: index for index, label in enumerate(labels)}
            xs = [where[str(x)] for x in xs]
            if len(labels) <= LABELLED_CHOICES:
                ax.set_xticks(range(len(labels)), labels, parse_math=False)
        ax.plot(xs, [t.value for t in done], "o")
        if setting.log:
            ax.set_xscale("log")
        # names and choices are the user's text, shown as written: "$" would start matplotlib's mathtext,
        # whose parser refuses most of what it is given (and the report, after every trial, with it)
        ax.set_xlabel(setting.name, parse_math=False)
        ax.set_ylabel(metric, parse_math=False)
        ax.grid(alpha=0.3)
    return figure_png(fig)


def write_report(path: Path, summary: dict[str, Any], attempts: dict[int, Any], space: Any) -> Path:
    from torchwork.report.html import Report

    metric, maximize = summary["objective"], summary["direction"] == "maximize"
    report = Report(f"Study {summary['study']}")
    report.paragraph(f"Objective: {metric}, {summary['direction']}d ({summary.get('objective_description', '')}). "
                     "The trials read the training and validation splits only: the test split is never read by "
                     "the tuner; the best trial's test score is computed once, at the end, by the recipe itself.",
                     "note")
    counts = summary["trials"]
    report.table("Study", ["what", "value"], [
        ["storage", summary["storage"]], ["trials", ", ".join(f"{k} {v}" for k, v in counts.items())],
        ["workers x threads", f"{summary['workers']} x {summary['threads_per_worker']}"],
        ["pruner", summary.get("pruner")], ["seed", summary.get("seed")],
        ["epochs trained", summary.get("epochs_trained")], ["seconds", summary.get("seconds")]])
    report.heading("Best settings against the recipe's defaults")
    rows = []
    if summary.get("best_trial") is not None:
        rows.append([f"best (trial {summary['best_trial']})", summary["best_value"],
                     summary.get("best_rerun", {}).get("test", {}).get("macro_f1", "not run")])
    if summary.get("defaults"):
        rows.append(["defaults", summary["defaults"]["value"], "not read"])
    report.table(None, ["settings", f"validation {metric}", "test macro-F1"], rows)
    if "gain_over_defaults" in summary:
        report.paragraph(f"Gain of the best settings over the defaults on validation: "
                         f"{summary['gain_over_defaults']:+.4f}.", "good" if summary["gain_over_defaults"] > 0 else "bad")
    if summary.get("best_params"):
        report.code(summary["best_params"])
    report.heading("Optimization history")
    report.image(history_png(attempts, maximize, metric), "score by trial")
    report.heading("Each setting against the score")
    report.image(params_png(attempts, space, metric), "settings against the score")
    report.heading("Parameter importances (fANOVA)")
    found = importances(attempts, summary["direction"])
    if found:
        report.table(None, ["setting", "importance"], [[k, round(v, 4)] for k, v in found.items()])
    else:
        report.paragraph("Fewer than 3 complete trials: no importances yet.", "note")
    report.heading("Trials")
    report.table(None, COLUMNS, trial_rows(attempts))
    return report.write(path)
