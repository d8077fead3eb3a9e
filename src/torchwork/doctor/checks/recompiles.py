"""recompiles: a compiled function that recompiles on most steps, or hit Dynamo's recompile limit and
silently went back to eager.

torch.compile guards each graph on what it assumed (shapes, Python values, attributes); a step that breaks
a guard compiles again, which costs seconds to minutes. After ``torch._dynamo.config.recompile_limit``
compiles of one function (8 by default) Dynamo stops compiling it and runs it eagerly from then on, with one
log warning: the script is as slow as eager plus every compile. The check reads Dynamo's compilation records
(:class:`~torchwork.doctor.compile_watch.CompileWatch`) when the script ends, and reports the function, how many
times it compiled against the optimizer steps, and the guard that failed (on the user's line when the
guard names one).
"""

from __future__ import annotations

import os
import re
from typing import Any

from torchwork.doctor.checks._compiles import CompileWatching

_GUARD_LINE = re.compile(r"#\s*(?P<file>[^\s#]+\.py):(?P<line>\d+)")


class Recompiles(CompileWatching, id="recompiles", severity="warning"):
    def _where(self, entry: dict[str, Any]) -> tuple[str, int] | None:
        """The user's line the failed guard names, else where they compiled this code, else its own line."""
        user = self.session.locator.is_user_file
        for reason in entry["reasons"]:
            match = _GUARD_LINE.search(reason)  # Dynamo may shorten the path: only a real file counts
            if match and os.path.isfile(match["file"]) and user(match["file"]):
                return match["file"], int(match["line"])
        site = self.compile_sites.get((entry["file"], entry["line"]))
        if site is not None:
            return site
        if entry["file"] and user(entry["file"]):
            return entry["file"], int(entry["line"])
        return next(iter(self.compile_sites.values()), None)

    def finish(self) -> None:
        if self.watch is None:
            return
        report = self.watch.report()
        steps = self.session.optimizer_steps
        limit_hit = " ".join(report["recompile_limit_hit"])
        for entry in report["recompiled_functions"]:
            compiles, function = entry["compiles"], entry["function"]
            hit = bool(limit_hit) and f"'{function}'" in limit_hit
            user_code = bool(entry["file"]) and self.session.locator.is_user_file(entry["file"])
            name = f"{function}()" if user_code else "the model compiled here"
            if not hit and not (compiles >= 3 and compiles * 2 >= max(steps, 1)):
                continue
            where = self._where(entry)
            if where is None:
                continue
            why = f" The guard that failed: {entry['reasons'][-1]}." if entry["reasons"] else ""
            against = f" in {steps} optimizer steps" if steps else ""
            if hit:
                message = (f"torch.compile compiled {name} {compiles} times{against}, hit Dynamo's recompile limit "
                           f"and silently runs it in eager from then on: slower than never compiling.{why}")
            else:
                message = f"torch.compile recompiled {name} {compiles - 1} times{against}: each costs seconds.{why}"
            self.report(message,
                        "Make what the guard checks stable: bucket or pad varying shapes to a few sizes (or "
                        "torch.compile(dynamic=True) / torch._dynamo.mark_dynamic), pass changing numbers as "
                        "tensors rather than Python ints/floats or module attributes; TORCH_LOGS=recompiles "
                        "prints every reason.", where=where)
