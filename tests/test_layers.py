"""The package's layers point one way, and no module imports itself back.

Layers, lowest first: schema -> session -> store -> runtime (a live session's writer
lifecycle, no Ray) -> actors -> the ``surfacelog`` package itself (the public facade,
``surfacelog.connect``) -> gateway (HTTP) -> cli. A module
imports only its own layer and lower ones. Every import counts, wherever it is written
(top level, inside a function, under ``TYPE_CHECKING``): a lazy import is still a
dependency, and a circle through one is still a circle.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import surfacelog

PACKAGE = Path(surfacelog.__file__).parent
LAYERS = ("surfacelog.schema", "surfacelog.session", "surfacelog.store",
          "surfacelog.runtime", "surfacelog.actors", "surfacelog", "surfacelog.gateway",
          "surfacelog.cli", "surfacelog.integrations")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str:
    """The module ``name`` denotes: itself, or the package that holds the object."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str) -> set[str]:
    """Every surfacelog module that ``module`` imports, anywhere in its source."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(_resolve(a.name) for a in node.names
                         if a.name.split(".")[0] == "surfacelog")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "surfacelog":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else _resolve(base))
    found.discard(module)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _layer(module: str) -> int:
    """The index in ``LAYERS`` of the layer ``module`` belongs to."""
    if module == "surfacelog":
        return LAYERS.index("surfacelog")
    for k, layer in enumerate(LAYERS):
        if layer != "surfacelog" and (module == layer or module.startswith(layer + ".")):
            return k
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def test_every_module_is_in_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def test_layers_import_only_themselves_and_lower_layers() -> None:
    upward = [f"{m} imports {dep}" for m, deps in sorted(GRAPH.items()) for dep in sorted(deps)
              if _layer(dep) > _layer(m)]
    assert upward == []


def test_nothing_below_the_cli_imports_it() -> None:
    assert [m for m, deps in GRAPH.items() if not m.startswith("surfacelog.cli")
            and any(d.startswith("surfacelog.cli") for d in deps)] == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle in ``graph`` (its modules, the first repeated at the end), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        stack.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_nothing_outside_the_integrations_imports_them() -> None:
    """Adapters (``surfacelog.integrations``) are the top floor: they may import any
    layer, and no other module imports them (nor their frameworks)."""
    assert [m for m, deps in GRAPH.items() if not m.startswith("surfacelog.integrations")
            and any(d.startswith("surfacelog.integrations") for d in deps)] == []


def test_import_surfacelog_needs_no_agent_framework() -> None:
    """``import surfacelog`` and its adapters import no agent SDK (it is optional)."""
    probe = ("import sys, surfacelog, surfacelog.integrations.openai_agents; "
             "sys.exit('agents' in sys.modules or 'openai' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe]).returncode == 0


def test_no_module_imports_itself_back() -> None:
    circle = _cycle(GRAPH)
    assert circle is None, " -> ".join(circle or [])


def test_the_checks_see_circles_and_imports() -> None:
    """The checks are not vacuous: a circle is found, and the graph holds the imports
    written lazily or for type checking only."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"b"}}) == ["b", "c", "b"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert "surfacelog.actors.client" in GRAPH["surfacelog"]  # lazy, in __getattr__
    assert "surfacelog.actors.driver" in GRAPH["surfacelog.cli.runmodel"]  # TYPE_CHECKING
    # The HTML report and the workload share the run's data types, not each other.
    assert "surfacelog.cli.runmodel" in GRAPH["surfacelog.cli.report_html"]
    assert "surfacelog.cli.runmodel" in GRAPH["surfacelog.cli.loadrun"]
    assert "surfacelog.cli.loadrun" not in GRAPH["surfacelog.cli.report_html"]


CLI_MODULES = sorted(m for m in MODULES
                     if m.startswith("surfacelog.cli") and m != "surfacelog.cli.__main__")


@pytest.mark.parametrize("module", CLI_MODULES)
def test_each_cli_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    """Imported first, each module loads: no circle that only an import order hides."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)


def test_the_offline_commands_do_not_import_ray() -> None:
    """Ray is imported by ``run`` alone: ``fold``, ``inspect``, ``digest``... start fast."""
    probe = ("import sys, typer; from surfacelog.cli import app; "
             "typer.main.get_command(app); sys.exit('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe]).returncode == 0


def _loaded_by(args: list[str], modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` (or their submodules) ``surfacelog ARGS`` imports, run
    through the console script's ``main`` in a fresh interpreter."""
    probe = ("import sys, json\n"
             "from surfacelog.cli import main\n"
             f"sys.argv = ['surfacelog', *{args!r}]\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             f"wanted = {modules!r}\n"
             "found = sorted({w for w in wanted for m in sys.modules\n"
             "                if m == w or m.startswith(w + '.')})\n"
             "sys.stderr.write(json.dumps(found))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    return list(json.loads(done.stderr.strip().splitlines()[-1]))


STARTUP_HEAVY = ("rich", "ray", "aiosqlite", "msgspec", "pydantic", "surfacelog.session",
                 "surfacelog.store", "surfacelog.actors.client", "surfacelog.gateway")
"""What start-up must not load before a command needs it (pydantic: typer 0.29 and
later coerce every option through it, see pyproject.toml)."""


def test_help_imports_none_of_the_commands_work() -> None:
    """``surfacelog --help`` (and a command's ``--help``) only builds the commands:
    each group imports the store, the core, rich and Ray inside its commands, and the
    help is plain (typer's rich panels would import rich). ``msgspec`` comes only with
    ``schema.limits`` for ``--max-line-bytes``'s default."""
    assert _loaded_by(["--help"], STARTUP_HEAVY) == ["msgspec"]
    assert _loaded_by(["import", "--help"], STARTUP_HEAVY) == ["msgspec"]


def test_fold_imports_the_core_but_no_store_and_no_ray(tmp_path: Path) -> None:
    """``fold`` of a small file loads the codec, the core and (for its tree) rich, never
    the store, Ray, or the gateway; ``--json`` not even rich."""
    log = tmp_path / "small.jsonl"
    log.write_text('{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}\n')
    assert _loaded_by(["fold", str(log)], STARTUP_HEAVY) == [
        "msgspec", "rich", "surfacelog.session"]
    assert _loaded_by(["fold", "--json", str(log)], STARTUP_HEAVY) == [
        "msgspec", "surfacelog.session"]


def test_a_command_loads_its_own_group_of_commands_alone(tmp_path: Path) -> None:
    """``surfacelog fold`` builds the app with ``logs`` alone: the modules of ``import``,
    ``serve`` and ``run`` (and ``run``'s configuration) stay unloaded; ``--help`` loads
    every group, in the order it lists them."""
    from surfacelog.cli.application import GROUPS

    log = tmp_path / "small.jsonl"
    log.write_text('{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}\n')
    groups = (*(f"surfacelog.cli.commands.{g}" for g in GROUPS), "surfacelog.cli.runmodel")
    assert _loaded_by(["fold", str(log)], groups) == ["surfacelog.cli.commands.logs"]
    assert _loaded_by(["verify", "--help"], groups) == ["surfacelog.cli.commands.database"]
    assert _loaded_by(["--help"], groups) == sorted(groups)
    listed = subprocess.run([sys.executable, "-m", "surfacelog.cli", "--help"],
                            capture_output=True, text=True, check=True).stdout
    commands = [line.split()[0] for line in listed.split("Commands:")[1].splitlines()
                if line.startswith("  ")]
    assert commands == [name for names in GROUPS.values() for name in names]


WEB_STACK = ("fastapi", "starlette", "uvicorn", "httptools", "aiohttp",
             "surfacelog.gateway.app", "surfacelog.gateway.deployment",
             "surfacelog.gateway.httpclient", "surfacelog.gateway.keepalive")
"""What only ``run --via http`` (and ``serve``) needs: about 0.3 s of CPU at the start."""


def test_run_loads_the_web_stack_only_for_via_http() -> None:
    """The modules of ``surfacelog run`` (its workload and its display) import none of
    the gateway's web stack: a run over Ray starts without it, ``--via http`` imports
    it where it starts the gateway and its drivers."""
    probe = ("import sys, json\n"
             "import surfacelog.cli.loadrun, surfacelog.cli.run_display\n"
             f"wanted = {WEB_STACK!r}\n"
             "print(json.dumps(sorted({w for w in wanted for m in sys.modules\n"
             "                         if m == w or m.startswith(w + '.')})))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_python_m_surfacelog_cli_runs_the_app() -> None:
    """``run`` verifies through ``python -m surfacelog.cli digest``."""
    out = subprocess.run([sys.executable, "-m", "surfacelog.cli", "--help"],
                         capture_output=True, text=True, check=True)
    assert "digest" in out.stdout
