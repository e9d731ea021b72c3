"""Skip a test module when an optional library is not installed, without importing it."""

from __future__ import annotations

import importlib.util

import pytest


def require(module: str, reason: str) -> None:
    """Skip the calling test module (at collection) unless ``module`` can be imported.

    Unlike ``pytest.importorskip`` the module is not imported here: openai-agents takes
    about 1.4 s to import, which every xdist worker paid while collecting, whether or
    not it ran one of the module's tests (they import it where they use it)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(reason, allow_module_level=True)
