"""Where the shared example logs are: ``../shared/examples`` beside the repository (as CI
lays it out), else ``$SURFACELOG_EXAMPLES``, else ``/work/shared/examples``."""

from __future__ import annotations

import os
from pathlib import Path


def _examples() -> Path:
    candidates = [Path(__file__).resolve().parents[2] / "shared" / "examples"]
    if os.environ.get("SURFACELOG_EXAMPLES"):
        candidates.insert(0, Path(os.environ["SURFACELOG_EXAMPLES"]))
    candidates.append(Path("/work/shared/examples"))
    for path in candidates:
        if (path / "README.md").exists():
            return path
    raise RuntimeError(f"the shared example logs are not found in any of {candidates}")


EXAMPLES = _examples()
