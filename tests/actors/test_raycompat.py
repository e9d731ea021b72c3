"""Ray's private API, used only through ``surfacelog/actors/raycompat.py``: every name it
uses exists in the installed Ray and accepts the call made, and nothing else reaches
Ray's private modules. A Ray upgrade that removes or changes a name fails here, naming
it."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import psutil
import pytest

from surfacelog.actors import raycompat
from surfacelog.actors.errors import RayCompatError
from surfacelog.actors.raycompat import CHECKED_WITH, USED, PrivateName, check

ROOT = Path(__file__).resolve().parents[2]


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


@pytest.mark.parametrize("name", USED, ids=[n.qualified for n in USED])
def test_every_private_name_used_exists_and_takes_the_call_made(name: PrivateName) -> None:
    """On a Ray older than ``CHECKED_WITH`` a missing name may be expected (token
    authentication came late, and the code says ``unavailable`` then); from it on, any
    failure is a Ray upgrade that broke surfacelog, and ``RayCompatError`` names it."""
    if _release(raycompat.ray_version()) < _release(CHECKED_WITH):
        try:
            check(name)
        except RayCompatError as exc:
            pytest.skip(f"older than the release checked against: {exc}")
        return
    check(name)


def test_a_missing_name_is_refused_naming_it() -> None:
    with pytest.raises(RayCompatError, match=r"ray\._private\.worker\._gone_node is missing "
                                             r"\(no attribute '_gone_node'\).*2\.60\.0"):
        check(PrivateName("ray._private.worker", "_gone_node"))
    with pytest.raises(RayCompatError, match=r"ray\._private\.nowhere\.x cannot be imported"):
        check(PrivateName("ray._private.nowhere", "x"))
    with pytest.raises(RayCompatError, match=r"\.Node\.gone is missing \(no attribute 'gone'"):
        check(PrivateName("ray._private.node", "Node.gone"))


def test_a_changed_name_is_refused_naming_it_and_the_call() -> None:
    with pytest.raises(RayCompatError, match=r"ray\._private\.node\.Node\.kill_all_processes "
                                             r"no longer accepts the call "
                                             r"kill_all_processes\(check_alive=False, "
                                             r"gone=True\).*its signature is now"):
        check(PrivateName("ray._private.node", "Node.kill_all_processes",
                          call=((), {"check_alive": False, "gone": True}), method=True))
    with pytest.raises(RayCompatError, match="PROCESS_TYPE_GCS_SERVER is a str, not a int"):
        check(PrivateName("ray._private.ray_constants", "PROCESS_TYPE_GCS_SERVER", kind=int))
    with pytest.raises(RayCompatError, match="ENABLE_RAY_CLUSTER is not callable"):
        check(PrivateName("ray._private.ray_constants", "ENABLE_RAY_CLUSTER", call=((), {})))


@pytest.mark.usefixtures("ray_local")
def test_the_gcs_of_the_ray_started_here_is_found() -> None:
    pid = raycompat.gcs_server_pid()
    assert pid is not None
    assert "gcs_server" in psutil.Process(pid).name()


def test_the_cluster_switch_is_set_on_the_imported_constant() -> None:
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    try:
        raycompat.set_cluster_switch(not before)
        assert ray_constants.ENABLE_RAY_CLUSTER is (not before)
    finally:
        raycompat.set_cluster_switch(before)


def test_token_authentication_is_there() -> None:
    raycompat.require_token_auth()
    assert isinstance(raycompat.auth_mode(), str)


class _Plain:
    def __init__(self, base: int) -> None:
        self.base = base

    async def add(self, n: int) -> int:
        return self.base + n


async def test_a_class_traced_like_an_actor_wraps_each_method_and_still_answers() -> None:
    traced = raycompat.traced_like_an_actor(_Plain)
    assert issubclass(traced, _Plain) and traced.__name__ == "_Plain"
    # Wrapped as a Ray worker wraps an actor class's methods (functools.wraps), the
    # class itself untouched.
    assert traced.add is not _Plain.add and inspect.unwrap(traced.add) is _Plain.add
    assert not hasattr(_Plain.add, "__wrapped__")
    assert await traced(40).add(2) == 42


# -- nothing else reaches Ray's private modules -----------------------------------------


def _private_uses(file: Path) -> list[str]:
    """Where ``file`` reaches a private module or name of Ray: an import of one, a
    dotted name such as ``ray._private.worker``, or a string naming one (for
    ``importlib``)."""
    found = []
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if re.fullmatch(r"ray(\.\w+)+", node.value) else []
        elif isinstance(node, ast.Attribute):
            chain = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id == "ray":
                names = [".".join(["ray", *reversed(chain)])]
        for name in names:
            parts = name.split(".")
            if parts[0] == "ray" and any(p.startswith("_") and not p.startswith("__")
                                         for p in parts[1:]):
                found.append(f"{file.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}: "
                             f"{name}")
    return found


def test_only_raycompat_reaches_rays_private_api() -> None:
    """The package, its benchmarks and the tests' shared support code. (One cluster
    test validates the launcher configuration with Ray's own private validator, as
    ``ray up`` does: it is its subject, not a use.)"""
    files = [*(ROOT / "surfacelog").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "tests" / "support").rglob("*.py")]
    uses = [use for file in sorted(files) if file.name != "raycompat.py"
            for use in _private_uses(file)]
    assert uses == []
    assert _private_uses(ROOT / "surfacelog" / "actors" / "raycompat.py")  # it does look
