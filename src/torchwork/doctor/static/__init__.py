"""The doctor's static scan: the checks the source alone decides, over a whole repository, without running
it and without importing torch (``torchwork doctor --static PATH...``).

Example:
    >>> import pathlib, tempfile
    >>> from torchwork.doctor.static import scan_paths
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "model.py").write_text("import torch\\nsd = torch.load('w.pt', weights_only=True)\\n")
    >>> scan_paths([folder]).findings
    []
"""

from __future__ import annotations

from torchwork.doctor.static.results import StaticFinding, StaticScan
from torchwork.doctor.static.scan import RULE_IDS, RULES, scan_paths, scan_source

__all__ = ["RULES", "RULE_IDS", "StaticFinding", "StaticScan", "scan_paths", "scan_source"]
