"""Disks a test can fill: a small tmpfs mounted for the test's duration."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(target: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount``'s notation: ``1m``) mounted at ``target``, unmounted
    on leaving (root needed; the test is skipped without)."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                        str(target)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a small tmpfs here: {exc}")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False, capture_output=True)
