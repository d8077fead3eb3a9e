"""graph-breaks: torch.compile split the user's function into several graphs, and where and why.

Each graph break ends one compiled graph, runs the offending Python eagerly, and starts another: the
fusion torch.compile was asked for stops at that line. Dynamo logs every break (with the user's file:line
and the reason) on its ``graph_breaks`` log, which is off by default; the check listens to it while the
script runs (:class:`~torchwork.doctor.compile_watch.CompileWatch`) and reports each break on the user's line.
"""

from __future__ import annotations

from torchwork.doctor.checks._compiles import CompileWatching

_FIXES = (
    ("item()", "Keep the value a tensor: branch with torch.where(cond, a, b) instead of `if t.item() > x:`, or "
               "set torch._dynamo.config.capture_scalar_outputs = True when the scalar feeds only tensor code."),
    ("print", "Move print() and logging out of the compiled function (or log detached values after it)."),
    ("numpy", "Stay in torch inside the compiled function: torch ops instead of .numpy() / NumPy calls."),
    ("tolist", "Keep the values a tensor instead of .tolist() inside the compiled function."),
)
_GENERIC = ("Rewrite the line with tensor operations (no Python on tensor values, no unsupported calls), or "
            "compile a smaller function that excludes it (torch.compiler.disable on the part that must stay Python).")


class GraphBreaks(CompileWatching, id="graph-breaks", severity="warning"):
    def finish(self) -> None:
        if self.watch is None:
            return
        for found in self.watch.report()["graph_breaks"]:
            if not self.session.locator.is_user_file(found["file"]):
                continue
            reason = found["reason"] or "a construct Dynamo cannot trace"
            fix = next((text for key, text in _FIXES if key in reason), _GENERIC)
            times = f" ({found['count']} times)" if found["count"] > 1 else ""
            self.report(f"torch.compile breaks the graph here{times}: {reason}. The code before and after runs as "
                        "separate graphs, with this line in eager Python between them, so nothing fuses across it.",
                        fix, where=(found["file"], found["line"]))
