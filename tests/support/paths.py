"""Where things are, for tests in any folder: the repository, its benchmarks, the
support scripts, and the shared data beside the checkout (``../shared``)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

SUPPORT: Final = Path(__file__).resolve().parent
TESTS: Final = SUPPORT.parent
REPO: Final = TESTS.parent
BENCHMARKS: Final = REPO / "benchmarks"
SHARED: Final = REPO.parent / "shared"
