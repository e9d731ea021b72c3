"""Loading a benchmark script (``benchmarks/`` is not a package) for its smoke test."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from support.paths import BENCHMARKS


def load_bench(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while executing it
    spec.loader.exec_module(module)
    return module
