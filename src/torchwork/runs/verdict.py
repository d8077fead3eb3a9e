"""The verdict of ``runs diff``: the differences ranked by how likely each explains the change in the
monitored metric, and whether a seed-only change is within the seed spread.

The ranking is a prior over kinds of cause, most direct first: the training data (relabelled or changed
rows move a model more than anything else), the validation data (the metric is computed on it), the code
(a patch to a ``.py`` file can change anything), the model and training settings, precision, the
environment in ``env diff``'s own risk order, the seed, threads, and last what acts only after training
(export, serving, where runs go). When the seed differs, rows that moved between splits without changing
labels are what the seed draws (a seeded split or subset), so they count with the seed, not as a cause
of their own; and the model's size, when other differences explain it (a vocabulary built from other rows
is another number of parameters), is their effect. A seed-only difference is "within noise" when the change is no larger than the spread of
the monitored metric over the runs beside these made with the same settings and code but other seeds
(the spread ``report.html`` shows), or when only these two seeds exist and nothing else differs.

Example:
    >>> score({"group": "data", "key": "train", "relabelled": 10}, seed_differs=False, metric="val_loss")
    95
    >>> score({"group": "seed / threads / precision", "key": "threads.torch"}, False, "val_loss")
    25
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchwork.runs.readback import MANIFEST, RECORDED_RESULTS, field, load_manifest_file, number

CODE_SUFFIXES = (".py", ".pyx", ".c", ".cc", ".cpp", ".cu", ".h", ".yaml", ".yml", ".json", ".toml", ".cfg",
                 ".ini", ".txt")
SEED_FREE = ("seed", "run_dir", "threads")  # settings that may differ between runs of one seed sweep
NEGLIGIBLE = 5  # a score at or below this is not a candidate cause


def _drawn_by_seed(d: dict[str, Any], seed_differs: bool) -> bool:
    return seed_differs and d["group"] == "data" and not d.get("relabelled") and "added" in d


def score(d: dict[str, Any], seed_differs: bool, metric: str | None) -> int:
    """How likely the difference ``d`` explains the change (0-100, a prior by kind; see the module)."""
    group, key = d["group"], d["key"]
    if group == "data":
        if d.get("unknown") or _drawn_by_seed(d, seed_differs):
            return 0
        on_metric = key == "validation" and (metric or "").startswith("val")
        base = {"train": 90, "validation": 88 if on_metric else 60, "test": 20}.get(key, 50)
        return base + (5 if d.get("relabelled") else 0)
    if group == "code":
        if key == "patch":
            files = [f["file"] for f in d.get("files", [])]
            return 85 if not files or any(f.endswith(CODE_SUFFIXES) for f in files) else 15
        return 85 if key == "commit" else 70
    if group == "settings":
        if d.get("after_training"):
            return 3
        return 82 if key.startswith("model.") else 80
    if group == "seed / threads / precision":
        return {"seed": 40, "precision": 70, "deterministic": 30}.get(key, 25)
    if group == "environment":
        rank = d.get("env_rank", 9)
        return 65 if rank <= 4 else 45 if rank <= 8 else 15 if rank == 9 else 2
    return 0  # the command line (its settings are above) and recorded results (effects)


def _value(summary: dict[str, Any]) -> float | None:
    return summary["best"] if summary["best"] is not None else summary["final"]


def _sweep_key(manifest: dict[str, Any]) -> str:
    config = field(manifest, "config", dict) or {}
    same = {k: v for k, v in config.items() if k not in SEED_FREE + RECORDED_RESULTS}
    git = field(manifest, "git", dict) or {}
    return json.dumps([same, git.get("commit"), git.get("patch_sha256"), field(manifest, "monitor.metric", str)],
                      sort_keys=True, default=str)


def seed_spread(paths: list[Path], manifests: list[dict[str, Any]], values: list[float | None]) -> dict[str, Any]:
    """The monitored metric's best over one value per seed: these runs', then their sibling folders' made
    with the same settings and code (``max - min``; None with fewer than two seeds)."""
    key = _sweep_key(manifests[0])
    by_seed: dict[Any, float] = {}
    for manifest, value in zip(manifests, values):
        seed = field(manifest, "seed", int)
        if value is not None and _sweep_key(manifest) == key and seed not in by_seed:
            by_seed[seed] = value
    seen = {p.resolve() for p in paths}
    for parent in dict.fromkeys(p.parent for p in paths):
        try:
            siblings = sorted(parent.iterdir())
        except OSError:
            continue
        for folder in siblings:
            if folder.resolve() in seen or not (folder / MANIFEST).is_file():
                continue
            try:
                manifest = load_manifest_file(folder / MANIFEST)
            except (OSError, ValueError):
                continue  # a damaged neighbour says nothing about the spread
            seed, value = field(manifest, "seed", int), number(field(manifest, "monitor.best", float))
            if value is not None and seed not in by_seed and _sweep_key(manifest) == key:
                by_seed[seed] = value
    spread = max(by_seed.values()) - min(by_seed.values()) if len(by_seed) >= 2 else None
    return {"seeds": len(by_seed), "spread": spread, "values": {str(k): v for k, v in by_seed.items()}}


def _describe(d: dict[str, Any]) -> str:
    def text(value: Any) -> str:
        shown = value if isinstance(value, str) else json.dumps(value, default=str)
        return shown if len(shown) <= 40 else shown[:37] + "..."

    if d["group"] == "data":
        return f"data: the {d['key']} split changed ({d['note']})"
    if d["group"] == "code" and d["key"] == "patch":
        return f"code: {d['note']}"
    return f"{d['group']}: {d['key']} {text(d['a'])} -> {text(d['b'])}"


def rank_causes(comparison: dict[str, Any], a: dict[str, Any], b: dict[str, Any], path_a: Path,
                path_b: Path) -> dict[str, Any]:
    """The verdict: the change, the candidate causes most likely first, and the seed noise."""
    summary_a, summary_b = comparison["a"], comparison["b"]
    metric = summary_a["metric"] if summary_a["metric"] == summary_b["metric"] else None
    va, vb = _value(summary_a), _value(summary_b)
    change = None if va is None or vb is None else vb - va
    differences = comparison["differences"]
    seed_differs = any(d["key"] == "seed" for d in differences)
    causes = []
    for d in differences:
        if d.get("derived"):  # the model's size, following from the other differences
            continue
        points = score(d, seed_differs, metric)
        if points > NEGLIGIBLE:
            causes.append({"score": points, "group": d["group"], "key": d["key"], "what": _describe(d)})
    drawn = [d for d in differences if _drawn_by_seed(d, seed_differs)]
    for cause in causes:
        if cause["key"] == "seed" and drawn:
            cause["what"] += " (and the " + ", ".join(d["key"] for d in drawn) + " rows it draws)"
    causes.sort(key=lambda c: -c["score"])
    noise = seed_spread([path_a, path_b], [a, b], [va, vb])
    seed_only = bool(causes) and all(c["key"] == "seed" for c in causes)
    verdict: dict[str, Any] = {"metric": metric, "mode": summary_a["mode"], "a": va, "b": vb, "change": change,
                               "causes": causes, "seed_spread": noise, "seed_only": seed_only}
    verdict["conclusion"] = _conclusion(verdict, comparison["curves"].get("divergence"))
    return verdict


def _conclusion(verdict: dict[str, Any], divergence: dict[str, Any] | None) -> str:
    change, causes, noise = verdict["change"], verdict["causes"], verdict["seed_spread"]
    metric = verdict["metric"] or "the monitored metric"
    if change is None:
        head = f"{metric} is not recorded in both runs: the causes are ranked by kind alone"
    elif change == 0 and divergence is None:
        head = f"{metric} did not change and the curves are identical: none of the differences touched training"
    else:
        head = f"{metric} changed by {change:+.4f} ({verdict['a']:.4f} -> {verdict['b']:.4f})"
    if not causes:
        return head + "; no difference between the runs explains it (nondeterminism? compare threads and the " \
                      "deterministic flag)" if change else head
    spread = noise["spread"]
    if verdict["seed_only"]:
        if change is None or spread is None or noise["seeds"] < 2:
            return head + "; only the seed differs: within noise"
        if abs(change) <= spread + 1e-12:
            if noise["seeds"] == 2:
                return head + "; only the seed differs: within noise (only these two seeds measured: run more " \
                              "seeds to measure the spread)"
            return head + f"; only the seed differs: within noise (seed spread {spread:.4f} over " \
                          f"{noise['seeds']} seeds)"
        return head + f"; only the seed differs, yet by more than the seed spread ({spread:.4f} over " \
                      f"{noise['seeds']} seeds): run more seeds before trusting it"
    top = causes[0]["what"]
    tail = ""
    if change is not None and spread is not None and noise["seeds"] >= 2 and abs(change) <= spread:
        tail = f"; but the change is within the seed spread ({spread:.4f} over {noise['seeds']} seeds): it may be noise"
    return head + f"; most likely cause: {top}" + tail


def format_verdict(verdict: dict[str, Any]) -> str:
    lines = ["verdict: " + verdict["conclusion"]]
    for number_, cause in enumerate(verdict["causes"], 1):
        lines.append(f"  {number_}. {cause['what']}")
    noise = verdict["seed_spread"]
    if noise["spread"] is not None:
        lines.append(f"  seed spread of {verdict['metric']}: {noise['spread']:.4f} over {noise['seeds']} seeds "
                     f"({', '.join(f'seed {s}: {v:.4f}' for s, v in noise['values'].items())})")
    return "\n".join(lines)
