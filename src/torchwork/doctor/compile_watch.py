"""Watching torch.compile while code runs: every recompile (and Dynamo's recompile limit, past which it
silently runs eager) and every graph break, each with the user's file:line. The engine records what a
compiled run saw in its manifest; the doctor's ``recompiles`` and ``graph-breaks`` checks report it.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

import torch

_GRAPH_BREAK_LOGGERS = ("torch._dynamo.symbolic_convert.__graph_breaks", "torch._dynamo.convert_frame.__graph_breaks",
                        "torch._dynamo.exc.__graph_breaks")
_RECOMPILE_LIMIT_LOGGER = "torch._dynamo.convert_frame"
_USER_LINE = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_TORCH_DIR = str(Path(torch.__file__).parent)
_LIBRARY_DIRS = (_TORCH_DIR + "/", str(Path(__file__).resolve().parents[1]) + "/")  # torch, torchwork


def _is_library(file: str) -> bool:
    return file.startswith(_LIBRARY_DIRS) or file.startswith("<")


class _Records(logging.Handler):
    """Collects dynamo's graph-break records and its recompile-limit warnings."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks: dict[tuple[str, int, str], int] = {}
        self.limit_hits: list[str] = []
        self._user_frame: dict[tuple[str, int], tuple[str, int]] = {}  # innermost frame -> the user's

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.name == _RECOMPILE_LIMIT_LOGGER:
            if "recompile_limit" in text or "cache_size_limit" in text:
                self.limit_hits.append(" ".join(line.strip() for line in text.splitlines()[:2])[:300])
            return
        where = _USER_LINE.search(text)
        if where is None:
            return
        innermost = (where["file"], int(where["line"]))
        # The innermost frame is library code when the break is inside a hook or a TorchFunctionMode (the
        # doctor's): the user's line is the innermost one of theirs in the traceback (given once per break).
        frames = [(m["file"], int(m["line"])) for m in _FRAME.finditer(text) if not _is_library(m["file"])]
        if frames:
            self._user_frame[innermost] = frames[-1]
        file, line = self._user_frame.get(innermost, innermost)
        reason = next((line.strip() for line in text.splitlines()[1:] if line.strip()
                       and not line.startswith("Graph Break Reason: Encountered graph break")), "")
        key = (file, line, reason.removeprefix("Graph Break Reason: ")[:300])
        self.breaks[key] = self.breaks.get(key, 0) + 1


class CompileWatch:
    """Records graph breaks (user file:line, reason) and recompiles while compiled code runs.

    Example:
        >>> with CompileWatch() as watch:                             # doctest: +SKIP
        ...     torch.compile(model)(x)
        >>> watch.report()["graph_breaks"]                            # doctest: +SKIP
        [{'file': 'model.py', 'line': 12, 'reason': 'Unsupported Tensor.item() call ...', 'count': 1}]
    """

    def __init__(self) -> None:
        self._handler = _Records()
        self._saved: list[tuple[logging.Logger, int, bool]] = []
        self._metrics_before = 0

    def __enter__(self) -> CompileWatch:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        # Importing Dynamo takes a second or two: a script that never compiles (the doctor's usual case) has
        # compiled nothing before Dynamo is imported.
        if "torch._dynamo.utils" in sys.modules:
            self._metrics_before = len(sys.modules["torch._dynamo.utils"].get_compilation_metrics())
        for name in (*_GRAPH_BREAK_LOGGERS, _RECOMPILE_LIMIT_LOGGER):
            logger = logging.getLogger(name)
            self._saved.append((logger, logger.level, logger.propagate))
            logger.addHandler(self._handler)
            if name != _RECOMPILE_LIMIT_LOGGER and logger.level != logging.DEBUG:  # not TORCH_LOGS=graph_breaks
                logger.setLevel(logging.DEBUG)  # graph-break records are debug records, off by default
                logger.propagate = False  # ours to keep, not torch's to print

    def stop(self) -> None:
        self._compiles = self._compilations()
        for logger, level, propagate in self._saved:
            logger.removeHandler(self._handler)
            logger.setLevel(level)
            logger.propagate = propagate
        self._saved = []

    def _compilations(self) -> list[dict[str, Any]]:
        if "torch._dynamo.utils" not in sys.modules:
            return []
        found = []
        for metric in sys.modules["torch._dynamo.utils"].get_compilation_metrics()[self._metrics_before:]:
            if metric.co_name is None:  # the backward graphs' entries name no frame
                continue
            found.append({"function": metric.co_name, "file": metric.co_filename, "line": metric.co_firstlineno,
                          "seconds": metric.entire_frame_compile_time_s,
                          "recompile_reason": getattr(metric, "recompile_reason", None)})
        return found

    def report(self) -> dict[str, Any]:
        """Graph breaks on the user's lines, compiles per function, recompiles and recompile-limit hits."""
        compiles = self._compiles if not self._saved else self._compilations()
        per_frame: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
        for entry in compiles:
            per_frame.setdefault((entry["function"], entry["file"], entry["line"]), []).append(entry)
        recompiles = [{"function": f, "file": file, "line": line, "compiles": len(entries),
                       "reasons": sorted({str(e["recompile_reason"]).splitlines()[0][:200] for e in entries
                                          if e["recompile_reason"]})}
                      for (f, file, line), entries in per_frame.items() if len(entries) > 1]
        breaks = [{"file": file, "line": line, "reason": reason, "count": count}
                  for (file, line, reason), count in sorted(self._handler.breaks.items())
                  if not _is_library(file)]
        return {"compiles": len(compiles), "recompiles": sum(r["compiles"] - 1 for r in recompiles),
                "recompiled_functions": recompiles, "graph_breaks": breaks,
                "recompile_limit_hit": list(dict.fromkeys(self._handler.limit_hits)),
                "compile_seconds": round(sum(e["seconds"] or 0.0 for e in compiles), 2)}
