"""The suite's temp files: each test process's and its children's go to its pytest
basetemp (``conftest.temp_files_in_basetemp``), Ray's stay where Ray keeps them."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support import paths


def test_a_child_makes_its_temp_files_under_the_basetemp(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.getbasetemp()
    child = subprocess.run([sys.executable, "-c",
                            "import tempfile; print(tempfile.mkdtemp())"],
                           capture_output=True, text=True, timeout=60, check=True)
    made = Path(child.stdout.strip())
    assert made.parent == base == Path(tempfile.gettempdir())


def test_ray_keeps_its_own_folder_outside_the_basetemp(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # Ray's socket paths must stay short: its folder is not moved into the basetemp.
    assert tmp_path_factory.getbasetemp() not in paths.ray_temp_root().parents
