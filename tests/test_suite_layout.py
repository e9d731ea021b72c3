"""The suite's own layout: test folders mirror the package's layers, helpers live in
``tests/support``, every module named in ``conftest.SERIAL_GROUPS`` exists (a
renamed module would otherwise silently leave its group and run beside another), and
the modules whose tests share a module fixture are found (their tests then run on one
worker), and a test that hangs fails at its deadline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import SERIAL_GROUPS, SLOW_TIMEOUT_S, TIMEOUT_S, modules_with_shared_fixtures

import surfacelog

from support.paths import REPO, TESTS

PACKAGE = Path(surfacelog.__file__).parent
BEYOND_THE_PACKAGE = {
    "support": "helpers, generators and scenario scripts (no tests)",
    "cluster": "multi-node deployments and the deploy manifests",
    "benchmarks": "smoke runs of benchmarks/ at tiny sizes",
    "sdk": "make test-sdk: the agent SDKs' own session tests run against the adapters",
}
PACKAGE_WIDE = {"test_layers.py", "test_errors.py", "test_suite_layout.py",
                "test_temp_dirs.py"}


def _folders() -> set[str]:
    return {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}


def test_every_test_folder_is_a_layer_of_the_package_or_says_why_not() -> None:
    layers = {p.name for p in PACKAGE.iterdir()
              if p.is_dir() and (p / "__init__.py").exists()}
    assert _folders() - layers <= set(BEYOND_THE_PACKAGE), _folders() - layers
    # every layer but the small ones that have no tests of their own yet
    assert {"schema", "session", "store", "runtime", "actors", "gateway", "integrations",
            "cli"} <= _folders()


def test_only_package_wide_tests_sit_at_the_top() -> None:
    top = {p.name for p in TESTS.glob("test_*.py")}
    assert top == PACKAGE_WIDE


def test_support_holds_no_tests_and_test_files_have_unique_names() -> None:
    assert not list((TESTS / "support").glob("test_*.py"))
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_module_of_a_serial_group_exists() -> None:
    for group, modules in SERIAL_GROUPS.items():
        for module in modules:
            assert (REPO / module).is_file(), (group, module)


def test_modules_with_a_module_or_class_fixture_are_found(tmp_path: Path) -> None:
    found = modules_with_shared_fixtures(TESTS)
    assert "tests/gateway/test_http_gateway.py" in found
    assert "tests/actors/test_session_actors.py" in found  # a class-scoped one
    assert "tests/cli/test_load_run.py" not in found
    # Only a fixture's decorator counts: not other scopes, nor the text in a string.
    root = tmp_path / "tests"
    (root / "x").mkdir(parents=True)
    (root / "x" / "test_shared.py").write_text(
        "import pytest\n@pytest.fixture(scope='module')\ndef f(): ...\n")
    (root / "x" / "test_class.py").write_text(
        "import pytest\n@pytest.fixture(scope='class')\ndef f(): ...\n")
    (root / "x" / "test_alone.py").write_text(
        "import pytest\nSOURCE = '@pytest.fixture(scope=\"module\")'\n"
        "@pytest.fixture(scope='session')\ndef g(): ...\n")
    assert modules_with_shared_fixtures(root) == {"tests/x/test_shared.py",
                                                  "tests/x/test_class.py"}


DEADLINES = f"""
import asyncio

import pytest


@pytest.mark.timeout(2)
async def test_awaits_what_never_comes() -> None:
    await asyncio.Event().wait()


def test_default_deadline(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("timeout").args == ({TIMEOUT_S},)


@pytest.mark.slow
def test_slow_deadline(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("timeout").args == ({SLOW_TIMEOUT_S},)
"""


def test_each_test_has_a_deadline_and_a_hang_fails_at_it(tmp_path: Path) -> None:
    """Under the suite's configuration and conftest (as a plugin: the scratch file sits
    outside tests/), each test gets its deadline, a slow one the longer one, and an
    async test awaiting forever fails at its own (a mark of its own is kept)."""
    (tmp_path / "test_deadlines.py").write_text(DEADLINES, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO)])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
         "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-m", "slow or not slow", str(tmp_path / "test_deadlines.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 failed, 2 passed" in out, out
    assert "FAILED test_deadlines.py::test_awaits_what_never_comes - Failed: Timeout" in out, out
