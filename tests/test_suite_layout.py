"""The suite's own layout: test folders mirror the package's layers, helpers live in
``tests/support``, every module named in ``conftest.SERIAL_GROUPS`` exists (a
renamed module would otherwise silently leave its group and run beside another), and
the modules whose tests share a module fixture are found (their tests then run on one
worker)."""

from __future__ import annotations

from pathlib import Path

from conftest import SERIAL_GROUPS, modules_with_module_fixtures

import surfacelog

from support.paths import REPO, TESTS

PACKAGE = Path(surfacelog.__file__).parent
BEYOND_THE_PACKAGE = {
    "support": "helpers, generators and scenario scripts (no tests)",
    "cluster": "multi-node deployments and the deploy manifests",
    "benchmarks": "smoke runs of benchmarks/ at tiny sizes",
    "sdk": "make test-sdk: the agent SDKs' own session tests run against the adapters",
}
PACKAGE_WIDE = {"test_layers.py", "test_errors.py", "test_suite_layout.py"}


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


def test_modules_with_a_module_fixture_are_found(tmp_path: Path) -> None:
    found = modules_with_module_fixtures(TESTS)
    assert "tests/gateway/test_http_gateway.py" in found
    assert "tests/cli/test_load_run.py" not in found
    # Only a fixture's decorator counts: not other scopes, nor the text in a string.
    root = tmp_path / "tests"
    (root / "x").mkdir(parents=True)
    (root / "x" / "test_shared.py").write_text(
        "import pytest\n@pytest.fixture(scope='module')\ndef f(): ...\n")
    (root / "x" / "test_alone.py").write_text(
        "import pytest\nSOURCE = '@pytest.fixture(scope=\"module\")'\n"
        "@pytest.fixture(scope='session')\ndef g(): ...\n")
    assert modules_with_module_fixtures(root) == {"tests/x/test_shared.py"}
