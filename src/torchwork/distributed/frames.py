"""The user's line in a stack: what setup's error messages and the collective checker both name.

Example:
    >>> import traceback
    >>> user_call_site(traceback.extract_stack()) is None or ":" in user_call_site(traceback.extract_stack())
    True
"""

from __future__ import annotations

import os
import traceback

import torch

# torchwork/__init__.py, found from this file rather than by importing the package (a lower layer never
# imports the public API above it).
TORCHWORK_INIT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__init__.py")


def user_call_site(frames: list[traceback.FrameSummary]) -> str | None:
    """``file:line (code)`` of the innermost frame that is neither torch's nor torchwork's code."""
    library_dirs = tuple(os.path.dirname(m) + os.sep for m in (torch.__file__, TORCHWORK_INIT))
    for frame in reversed(frames):
        if frame.filename.startswith(library_dirs) or frame.filename.startswith("<"):
            continue
        return f"{frame.filename}:{frame.lineno} ({(frame.line or '').strip()})"
    return None
