"""``torchwork runs diff A B``: every difference between two runs, grouped, and nothing else.

Groups: settings (the resolved config and the Trainer's settings), code (commits, the files each patch
touches), data (per split: rows added, removed, relabelled, class balance, from the fingerprints),
environment (the ``torchwork env diff`` ranking, then the host), seed / threads / precision, the command
line, and the results a recipe recorded in its config (a baseline's scores, a precision probe's timings:
effects, never causes). Then the curves (:mod:`torchwork.runs.curves`) and the verdict
(:mod:`torchwork.runs.verdict`).

Example:
    >>> a = {"config": {"lr": 0.1, "epochs": 3, "seed": 0}, "seed": 0}
    >>> b = {"config": {"lr": 0.3, "epochs": 3, "seed": 0}, "seed": 0}
    >>> [(d["key"], d["a"], d["b"]) for d in settings_differences(a, b)]
    [('lr', 0.1, 0.3)]
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError
from torchwork.runs.folder_files import load_json, read_run_file
from torchwork.runs.readback import (
    MAX_MANIFEST_BYTES,
    RECORDED_RESULTS,
    field,
    number,
    read_manifest,
    read_metrics,
    recipe_of,
)

# Keys a recipe keeps in its config that are results of the run, not settings (recipes/recorded.py keeps
# them there so that a resume decides the same way).
# Settings read in their own group (seed / threads / precision), not among the settings.
OWN_GROUP = ("seed", "threads", "precision")
# What `torchwork fit` records of a user's data file (its fingerprint, columns, the data report's counts): a
# difference there is a data difference, listed with the splits' fingerprints, not a setting.
DATA_RECORD = ("data_source", "data_report_counts")
# Settings that change nothing before the monitored metric is measured (where runs go, what is done with
# the model after training): listed, but ranked last as causes.
DERIVED_SHAPE = ("model.parameters", "model.structure")  # follow from the settings, code or data
AFTER_TRAINING = ("run_dir", "export", "quantize", "int8", "serve", "report", "device")


def _flatten(value: dict[str, Any], prefix: str = "", into: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}`` (an empty dict stays a value)."""
    into = {} if into is None else into
    for key, inner in value.items():
        if isinstance(inner, dict) and inner:
            _flatten(inner, f"{prefix}{key}.", into)
        else:
            into[f"{prefix}{key}"] = inner
    return into


def _pairs(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    missing = object()
    found = []
    for key in list(dict.fromkeys([*a, *b])):
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            found.append((key, None if va is missing else va, None if vb is missing else vb))
    return found


def _difference(group: str, key: str, a: Any, b: Any, note: str = "", **extra: Any) -> dict[str, Any]:
    return {"group": group, "key": key, "a": a, "b": b, "note": note, **extra}


def _config(manifest: dict[str, Any]) -> dict[str, Any]:
    return field(manifest, "config", dict) or {}


def settings_differences(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """The resolved config's and the Trainer's settings that differ (seed, threads, precision and the
    recorded results are left to their own groups)."""
    ca, cb = _config(a), _config(b)

    def settings(manifest: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        flat = _flatten({k: v for k, v in config.items() if k not in RECORDED_RESULTS + OWN_GROUP + DATA_RECORD})
        training = field(manifest, "training", dict) or {}
        flat.update({f"training.{k}": v for k, v in _flatten(training).items() if k != "precision"})
        if not config:  # no resolved config recorded: the optimizer's settings are the settings
            groups = field(manifest, "optimizer.param_groups", list) or [{}]
            first = groups[0] if isinstance(groups[0], dict) else {}
            flat.update({f"optimizer.{k}": v for k, v in first.items()
                         if k not in ("params", "num_params", "initial_lr", "max_lr", "min_lr")})
            # The learning rate as configured, not where the scheduler had moved it when the manifest was
            # written: OneCycleLR's and CyclicLR's max_lr, else the optimizer's lr before any scheduler.
            flat["optimizer.lr"] = first.get("max_lr", first.get("initial_lr", first.get("lr")))
            flat["optimizer.class"] = field(manifest, "optimizer.class", str)
        flat["model.class"] = field(manifest, "model.class", str)
        flat["model.parameters"] = field(manifest, "model.parameters.total", int)
        if flat.get("epochs") == flat.get("training.epochs"):
            flat.pop("training.epochs", None)  # the config's epochs, as the Trainer got them
        return flat

    found = []
    for key, va, vb in _pairs(settings(a, ca), settings(b, cb)):
        after = any(part in key for part in AFTER_TRAINING)
        found.append(_difference("settings", key, va, vb, "acts after training (not on the monitored metric)"
                                 if after else "", after_training=after))
    sa, sb = field(a, "model.structure", str), field(b, "model.structure", str)
    if sa != sb and not any(d["key"] in ("model.class", "model.parameters") for d in found):
        found.append(_difference("settings", "model.structure", _first_line_apart(sa, sb, 0),
                                 _first_line_apart(sa, sb, 1), "the model's layers differ"))
    return found


def _first_line_apart(a: str | None, b: str | None, side: int) -> str | None:
    la, lb = (a or "").splitlines(), (b or "").splitlines()
    for x, y in zip(la, lb):
        if x != y:
            return (x, y)[side].strip()
    longer = (la, lb)[side][min(len(la), len(lb)):]
    return longer[0].strip() if longer else None


def _patch_by_file(run: Path, git: dict[str, Any]) -> dict[str, str]:
    """Each file's part of the run's saved patch (empty when the tree was clean or it is missing)."""
    from torchwork.runs.code import MAX_PATCH_BYTES

    name = git.get("patch")
    if not isinstance(name, str) or Path(name).is_absolute() or ".." in Path(name).parts:
        return {}
    try:
        text = read_run_file(run, name, MAX_PATCH_BYTES).decode("utf-8", errors="replace")
    except (OSError, ConfigError):
        return {}  # missing, or refused (not a regular file of the run, over 32 MiB): the files are compared
    # Each file's lines gathered in a list and joined once: adding to a string kept in a dict copies it
    # every time (a 4 MB patch took 41 s that way; this takes a fraction of a second).
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("diff --git a/"):
            current = parts[line.rstrip("\n").split(" b/", 1)[-1]] = []
        if current is not None:
            current.append(line)
    return {name: "".join(lines) for name, lines in parts.items()}


def code_differences(a: dict[str, Any], b: dict[str, Any], run_a: Path, run_b: Path) -> list[dict[str, Any]]:
    """The commits, the patches (by file: changed in A only, in B only, or differently in both), and
    torchwork's own version."""
    ga, gb = field(a, "git", dict) or {}, field(b, "git", dict) or {}
    found = []
    if ga.get("commit") != gb.get("commit"):
        found.append(_difference("code", "commit", ga.get("commit"), gb.get("commit"),
                                 "git log A..B shows what changed between them"))
    if ga.get("patch_sha256") != gb.get("patch_sha256") or ga.get("dirty") != gb.get("dirty"):
        pa, pb = _patch_by_file(run_a, ga), _patch_by_file(run_b, gb)
        fa = [f for f in (ga.get("patch_files") or []) if isinstance(f, str)] or list(pa)
        fb = [f for f in (gb.get("patch_files") or []) if isinstance(f, str)] or list(pb)
        files = []
        for name in dict.fromkeys([*fa, *fb]):
            if name in fa and name in fb:
                if pa.get(name) != pb.get(name) or not pa:
                    files.append({"file": name, "patched": "differently in A and B"})
            else:
                files.append({"file": name, "patched": "in A only" if name in fa else "in B only"})
        found.append(_difference("code", "patch", _patch_label(ga), _patch_label(gb),
                                 "; ".join(f"{f['file']} ({f['patched']})" for f in files) or
                                 "the patches differ", files=files))
    va, vb = field(a, "torchwork_version", str), field(b, "torchwork_version", str)
    if va != vb:
        found.append(_difference("code", "torchwork version", va, vb))
    return found


def _patch_label(git: dict[str, Any]) -> str:
    if git.get("commit") is None:
        return "not a git work tree"
    if not git.get("dirty"):
        return "clean"
    files = git.get("patch_files") or []
    return f"patch {str(git.get('patch_sha256'))[:12]} ({len(files)} file{'s' if len(files) != 1 else ''})"


def data_differences(a: dict[str, Any], b: dict[str, Any], run_a: Path, run_b: Path) -> list[dict[str, Any]]:
    """The data file ``torchwork fit`` recorded, if it differs; per split whose fingerprint differs: rows,
    class counts, and rows added / removed / relabelled."""
    recorded = [_difference("data", key, va, vb, "the data file or its report differs")
                for key, va, vb in _pairs(*({k: v for k, v in _flatten(_config(m)).items()
                                             if k.split(".")[0] in DATA_RECORD} for m in (a, b)))]
    return recorded + _split_differences(a, b, run_a, run_b)


def _split_differences(a: dict[str, Any], b: dict[str, Any], run_a: Path, run_b: Path) -> list[dict[str, Any]]:
    from torchwork.runs.fingerprint import class_shift, compare_rows, read_rows

    fa, fb = field(a, "fingerprints", dict), field(b, "fingerprints", dict)
    if fa is None or fb is None:
        missing = [side for side, f in (("A", fa), ("B", fb)) if f is None]
        sizes_a, sizes_b = field(a, "data", dict) or {}, field(b, "data", dict) or {}
        found = [_difference("data", "fingerprints", "recorded" if fa else "not recorded",
                             "recorded" if fb else "not recorded",
                             f"run {' and '.join(missing)} recorded no data fingerprint (made before torchwork "
                             "kept them): only the sizes compare", unknown=True)]
        for key, va, vb in _pairs(sizes_a, sizes_b):
            found.append(_difference("data", key, va, vb, "the sizes differ"))
        return found
    found = []
    for split in dict.fromkeys([*fa, *fb]):
        ea, eb = fa.get(split), fb.get(split)
        if not isinstance(ea, dict) or not isinstance(eb, dict):
            found.append(_difference("data", split, "recorded" if isinstance(ea, dict) else None,
                                     "recorded" if isinstance(eb, dict) else None,
                                     f"the {split} split is fingerprinted in one run only"))
            continue
        if ea.get("sha256") == eb.get("sha256") and ea.get("sha256") is not None:
            continue
        if ea.get("sha256") is None and eb.get("sha256") is None:
            if ea.get("rows") != eb.get("rows"):
                found.append(_difference("data", split, ea.get("rows"), eb.get("rows"),
                                         "rows (not fingerprinted: " + str(ea.get("why") or eb.get("why")) + ")"))
            continue
        detail: dict[str, Any] = {"rows": (ea.get("rows"), eb.get("rows"))}
        shift = class_shift(ea.get("classes") or {}, eb.get("classes") or {})
        if shift:
            detail["classes"] = shift
        rows_a, rows_b = read_rows(run_a, ea), read_rows(run_b, eb)
        if rows_a is not None and rows_b is not None:
            detail.update(compare_rows(rows_a, rows_b))
        found.append(_difference("data", split, ea.get("sha256", "")[:12], eb.get("sha256", "")[:12],
                                 _data_note(detail), **detail))
    return found


def _data_note(detail: dict[str, Any]) -> str:
    rows_a, rows_b = detail["rows"]
    parts = [f"{rows_a} -> {rows_b} rows" if rows_a != rows_b else f"{rows_a} rows"]
    if "added" in detail:
        counts = [f"{detail[k]} {k}" for k in ("added", "removed", "relabelled") if detail.get(k)]
        if detail.get("relabelled") and rows_b:
            counts[-1] += f" ({100 * detail['relabelled'] / max(1, rows_b):.1f}% of B's rows)"
        if detail.get("reordered"):
            counts.append("the same rows in another order")
        parts.append(", ".join(counts) or "the same rows")
    else:
        parts.append("the row files are missing: which rows changed is unknown")
    if detail.get("classes"):
        parts.append("classes " + ", ".join(f"{k}: {x} -> {y}" for k, (x, y) in detail["classes"].items()))
    return "; ".join(parts)


def environment_differences(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``torchwork env diff`` ranking of the two runs' snapshots, then the host and world size."""
    from torchwork.env.diff import diff_profiles
    from torchwork.env.sources import profile_from_manifest

    found = []
    for d in diff_profiles(profile_from_manifest(a, "A", "run"), profile_from_manifest(b, "B", "run")):
        found.append(_difference("environment", d.what, d.a, d.b, d.why if d.rank < 9 else "", env_rank=d.rank))
    for key in ("host.hostname", "host.cpu_count", "world_size"):
        va, vb = field(a, key, (str, int)), field(b, key, (str, int))
        if va != vb:
            found.append(_difference("environment", key, va, vb, env_rank=10 if key == "host.hostname" else 8))
    return found


def run_differences(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Seed, determinism, threads and precision."""
    found = []
    seed_a, seed_b = field(a, "seed", int), field(b, "seed", int)
    if seed_a is None:
        seed_a = field(a, "config.seed", int)
    if seed_b is None:
        seed_b = field(b, "config.seed", int)
    if seed_a != seed_b:
        found.append(_difference("seed / threads / precision", "seed", seed_a, seed_b))
    elif seed_a is None:  # neither run was seeded: torch's own draw is what differs between them
        initial_a, initial_b = field(a, "torch_initial_seed", int), field(b, "torch_initial_seed", int)
        if initial_a != initial_b:
            found.append(_difference("seed / threads / precision", "seed", initial_a, initial_b,
                                     "neither run called seed_everything: torch's initial seeds differ"))
    for key in ("deterministic", "training.precision", "threads.torch", "threads.interop",
                "threads.environment"):
        va, vb = field(a, key, (bool, str, int, dict)), field(b, key, (bool, str, int, dict))
        if va != vb:
            found.append(_difference("seed / threads / precision", key.replace("training.", ""), va, vb))
    return found


def command_differences(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for key in ("argv", "executable", "cwd"):
        va, vb = field(a, f"command.{key}", (list, str)), field(b, f"command.{key}", (list, str))
        if va != vb:
            found.append(_difference("command", key, _command_text(va), _command_text(vb)))
    return found


def _command_text(value: Any) -> Any:
    """A recorded command line as one string, its secrets masked (a manifest recorded before masking)."""
    from torchwork.masking import mask_argv

    return " ".join(mask_argv(list(map(str, value)))) if isinstance(value, list) else value


def result_differences(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One line per result the recipe recorded in its config that differs (its first values shown)."""
    ca, cb = _config(a), _config(b)
    found = []
    for key in RECORDED_RESULTS:
        va, vb = ca.get(key), cb.get(key)
        if va == vb:
            continue
        inner = _pairs(_flatten(va), _flatten(vb)) if isinstance(va, dict) and isinstance(vb, dict) else []
        shown = ", ".join(f"{k} {_short(x, 12)} -> {_short(y, 12)}" for k, x, y in inner[:3])
        note = f"{len(inner)} values differ: {shown}{', ...' if len(inner) > 3 else ''}; " if inner else ""
        found.append(_difference("recorded results", key, "recorded" if inner else va, "recorded" if inner else vb,
                                 note + "an effect of the run, not a cause"))
    return found


def _summary(run: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    test = None
    try:
        summary = load_json(read_run_file(run, "summary.json", MAX_MANIFEST_BYTES), run / "summary.json")
        test = number(summary.get("test", {}).get("macro_f1")) if isinstance(summary, dict) else None
    except (OSError, ValueError, AttributeError):
        pass  # missing, damaged or refused: no test score shown
    return {"path": str(run), "recipe": recipe_of(manifest), "model": field(manifest, "model.class", str),
            "started": field(manifest, "started", str), "state": field(manifest, "state", str),
            "seed": field(manifest, "seed", int), "metric": field(manifest, "monitor.metric", str),
            "mode": field(manifest, "monitor.mode", str), "best": number(field(manifest, "monitor.best", float)),
            "final": number(field(manifest, "monitor.final", float)), "test_macro_f1": test}


def compare_runs(run_a: str | os.PathLike[str], run_b: str | os.PathLike[str]) -> dict[str, Any]:
    """The whole comparison as JSON-ready data (what ``runs diff --json`` prints)."""
    from torchwork.runs.curves import compare_curves
    from torchwork.runs.verdict import rank_causes

    path_a, path_b = Path(run_a), Path(run_b)
    a, b = read_manifest(path_a), read_manifest(path_b)
    summary_a, summary_b = _summary(path_a, a), _summary(path_b, b)
    if summary_a["recipe"] != summary_b["recipe"]:
        raise ConfigError(f"{path_a} is a run of {summary_a['recipe']!r}, {path_b} of {summary_b['recipe']!r}: "
                          "runs of different recipes share no settings or curves to compare. Diff two runs of "
                          "one recipe (`torchwork runs ls` shows each run's recipe).")
    if path_a.resolve() == path_b.resolve():
        raise ConfigError(f"{path_a} and {path_b} are the same run folder: pass two runs.")
    for summary in (summary_a, summary_b):
        if summary["best"] is None and summary["metric"]:
            from torchwork.runs.listing import read_row

            row = read_row(Path(summary["path"]), Path(summary["path"]))
            summary["best"], summary["final"] = row.best, row.final
    groups = [*settings_differences(a, b), *code_differences(a, b, path_a, path_b),
              *data_differences(a, b, path_a, path_b), *environment_differences(a, b), *run_differences(a, b),
              *command_differences(a, b), *result_differences(a, b)]
    causes = [d for d in groups if d["group"] in ("settings", "code", "data") and d["key"] not in DERIVED_SHAPE]
    for d in groups:
        if d["key"] in DERIVED_SHAPE and causes:
            d["note"] = "follows from the differences in settings, code or data (e.g. a vocabulary built from other rows)"
            d["derived"] = True
    if any(d["key"] == "seed" for d in groups):
        for d in groups:
            if d["group"] == "data" and "added" in d and not d.get("relabelled"):
                d["note"] += "; the rows a seeded split or subset draws: the seed's doing"
    metric = summary_a["metric"] if summary_a["metric"] == summary_b["metric"] else None
    curves = compare_curves(read_metrics(path_a), read_metrics(path_b), metric)
    comparison = {"a": summary_a, "b": summary_b, "differences": groups, "curves": curves}
    comparison["verdict"] = rank_causes(comparison, a, b, path_a, path_b)
    return comparison


def format_comparison(comparison: dict[str, Any]) -> str:
    """The terminal form of :func:`compare_runs`."""
    from torchwork.runs.curves import format_curves
    from torchwork.runs.verdict import format_verdict

    a, b = comparison["a"], comparison["b"]
    lines = [f"A: {a['path']}  ({a['recipe']}, {a['model']}, seed {a['seed']}, {a['state']})",
             f"B: {b['path']}  ({b['recipe']}, {b['model']}, seed {b['seed']}, {b['state']})"]
    differences = comparison["differences"]
    if not differences:
        lines.append("\nno differences in settings, code, data, environment, seed, threads or precision")
    group = None
    for d in differences:
        if d["group"] != group:
            group = d["group"]
            count = sum(1 for x in differences if x["group"] == group)
            lines.append(f"\n{group} ({count})")
        lines.append(f"  {d['key']}: A {_short(d['a'])}  ->  B {_short(d['b'])}"
                     + (f"\n      {d['note']}" if d["note"] else ""))
    lines.append("")
    lines.append(format_curves(comparison["curves"]))
    lines.append("")
    lines.append(format_verdict(comparison["verdict"]))
    return "\n".join(lines)


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."
