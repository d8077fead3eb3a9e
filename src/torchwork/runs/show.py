"""``torchwork runs show RUN``: one run read back: what defined it, how it went, what it recorded.

Example:
    >>> import json, pathlib, tempfile
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> (run / "checkpoints").mkdir()
    >>> _ = (run / "manifest.json").write_text(json.dumps({"seed": 1, "config": {"lr": 0.1}, "state": "finished"}))
    >>> print(format_description(describe_run(run)).splitlines()[2])
    state     finished
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torchwork.runs.listing import read_row
from torchwork.runs.readback import field, read_manifest


def describe_run(run: str | os.PathLike[str]) -> dict[str, Any]:
    """The facts ``runs show`` prints, as JSON-ready data."""
    path = Path(run)
    manifest = read_manifest(path)
    row = read_row(path, path)
    git = field(manifest, "git", dict) or {}
    return {"run": str(path), "recipe": row.recipe, "state": row.state_text, "started": row.started,
            "ended": field(manifest, "ended", str), "duration_s": row.duration_s,
            "error": field(manifest, "error", str),
            "monitor": {"metric": row.metric, "mode": row.mode, "best": row.best, "final": row.final},
            "seed": row.seed, "deterministic": field(manifest, "deterministic", bool),
            "torch_initial_seed": field(manifest, "torch_initial_seed", int),
            "model": {"class": field(manifest, "model.class", str),
                      "parameters": field(manifest, "model.parameters.total", int)},
            "training": field(manifest, "training", dict) or {}, "threads": field(manifest, "threads", dict) or {},
            "config": field(manifest, "config", dict) or {},
            "code": {"commit": git.get("commit"), "dirty": git.get("dirty"), "patch": git.get("patch"),
                     "patch_files": git.get("patch_files") or [], "patch_sha256": git.get("patch_sha256")},
            "data": field(manifest, "fingerprints", dict) or field(manifest, "data", dict) or {},
            "environment": {k: field(manifest, f"environment.{k}", str)
                            for k in ("python", "torch", "build", "platform")},
            "host": field(manifest, "host.hostname", str),
            "resumes": field(manifest, "resumes", list) or []}


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def format_description(description: dict[str, Any]) -> str:
    d = description
    monitor, code = d["monitor"], d["code"]
    lines = [f"run       {d['run']}", f"recipe    {d['recipe']}  (model {d['model']['class']}, "
             f"{d['model']['parameters']} parameters)" if d["model"]["class"] else f"recipe    {d['recipe']}",
             f"state     {d['state']}" + (f"  ({d['error']})" if d["error"] else ""),
             f"started   {d['started']}  ended {d['ended']}  ({_value(d['duration_s'])} s)"]
    if monitor["metric"]:
        lines.append(f"monitor   {monitor['metric']} ({monitor['mode']}): best {_value(monitor['best'])}, "
                     f"final {_value(monitor['final'])}")
    threads = d["threads"]
    unseeded = (f"; not seeded: torch's initial seed was {d['torch_initial_seed']}"
                if d["seed"] is None and d.get("torch_initial_seed") is not None else "")
    lines.append(f"seed      {d['seed']} (deterministic={d['deterministic']}{unseeded}); precision "
                 f"{d['training'].get('precision')}; threads {threads.get('torch')} "
                 f"(interop {threads.get('interop')})")
    commit = str(code["commit"])[:12] if code["commit"] else "not a git work tree"
    lines.append(f"code      {commit}" + (f" + patch {str(code['patch_sha256'])[:12]} touching "
                                          + ", ".join(code["patch_files"][:6]) if code["dirty"] else ""))
    for split, entry in d["data"].items():
        if isinstance(entry, dict):
            classes = entry.get("classes") or {}
            lines.append(f"data      {split}: {entry.get('rows')} rows"
                         + (f", classes {', '.join(f'{k}: {v}' for k, v in classes.items())}" if classes else "")
                         + (f", sha256 {str(entry.get('sha256'))[:12]}" if entry.get("sha256") else
                            f" ({entry.get('why')})" if entry.get("why") else ""))
    env = d["environment"]
    lines.append(f"env       python {env['python']}, torch {env['torch']} ({env['build']}), {env['platform']}, "
                 f"host {d['host']}")
    if d["config"]:
        lines.append("config    " + ", ".join(f"{k}={_value(v)}" for k, v in d["config"].items()
                                             if not isinstance(v, (dict, list)))[:600])
    for resume in d["resumes"]:
        if isinstance(resume, dict):
            lines.append(f"resumed   {resume.get('at')} from {resume.get('from')} (step {resume.get('step')})")
    return "\n".join(lines)
