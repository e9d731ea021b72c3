"""Where the shared example logs are: ``../shared/examples`` beside the repository (as CI
lays it out), else ``$SURFACELOG_EXAMPLES``, else ``/work/shared/examples``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from support.paths import SHARED


def _examples() -> Path:
    candidates = [SHARED / "examples"]
    if os.environ.get("SURFACELOG_EXAMPLES"):
        candidates.insert(0, Path(os.environ["SURFACELOG_EXAMPLES"]))
    candidates.append(Path("/work/shared/examples"))
    for path in candidates:
        if (path / "README.md").exists():
            return path
    raise RuntimeError(f"the shared example logs are not found in any of {candidates}")


EXAMPLES = _examples()


def blank_texts(value: Any) -> Any:
    """``value`` with every ``text`` emptied: crash-repair closers' wording is ours to
    choose, everything else must match the expected closers."""
    if isinstance(value, dict):
        return {k: ("" if k == "text" else blank_texts(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [blank_texts(v) for v in value]
    return value
