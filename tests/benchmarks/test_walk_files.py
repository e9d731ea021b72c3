"""Smoke test of benchmarks/walk_files.py: each in-process walk (a child process, with
the profile hook) lists the files its path runs code in, and its count is that list's
length. The Ray walks run the same hook in Ray's workers; they are not run here."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support import paths

WALK = paths.BENCHMARKS / "walk_files.py"


def _walk(name: str) -> dict[str, str]:
    proc = subprocess.run([sys.executable, str(WALK), "--walk", name], cwd=paths.REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    count = re.fullmatch(rf"{name}: (\d+) files", lines[-1])
    assert count is not None, lines[-1]
    files = dict(m.groups() for m in map(re.compile(r"([\w/]+\.py): (.+)").fullmatch,
                                           lines) if m is not None)
    assert len(files) == int(count.group(1)), proc.stdout
    return files


@pytest.mark.parametrize(("walk", "expected"), [
    ("append-in-process", {"runtime/live.py": "append_batch",
                           "session/session.py": "append_batch",
                           "store/sqlite/group_commit.py": "commit_group"}),
    ("import", {"store/importing.py": "", "store/sqlite/store.py": ""}),
])
def test_a_walk_lists_the_files_its_path_runs(walk: str, expected: dict[str, str]) -> None:
    files = _walk(walk)
    for path, function in expected.items():
        assert path in files, (path, sorted(files))
        assert function in files[path].split(", ") or not function, (path, files[path])
    # Code run only while a module is imported does not count: no package __init__
    # body, and nothing of a module the path imports without calling it.
    assert "schema/__init__.py" not in files
