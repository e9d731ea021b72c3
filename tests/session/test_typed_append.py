"""Typed appends: mypy refuses a surface event without its marker, a replace without
its provenance and a marker on a log-only type, for ``Session.append`` and the Ray
handle's ``append`` alike; and the typed names are the registry's."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import get_args

import pytest
from mypy import api as mypy_api

from surfacelog.schema.events import (
    DSH_LOG_ONLY_TYPES,
    EVENT_TYPES,
    SURFACE_ELIGIBLE_TYPES,
    LogOnlyType,
    SurfaceType,
)

from support.paths import REPO


def test_typed_names_are_the_registry_s() -> None:
    assert set(get_args(SurfaceType)) == set(SURFACE_ELIGIBLE_TYPES)
    core_log_only = {n for n, spec in EVENT_TYPES.items() if not spec.eligible}
    assert set(get_args(LogOnlyType)) == core_log_only | set(DSH_LOG_ONLY_TYPES)
    assert len(get_args(LogOnlyType)) == len(set(get_args(LogOnlyType)))


SNIPPET = '''
from surfacelog.actors.client import SessionHandle
from surfacelog.schema.events import ExtensionType, ReplaceOp
from surfacelog.session import Session

MSG = {"id": "u", "role": "user", "source": {"kind": "user"}, "content": []}


def good(s: Session) -> None:
    s.append("turn/start", {"turn": 1})
    s.append("user/message", MSG, surface_op="append")
    s.append("user/message", MSG, surface_op="append", source_event_seqs=[0])
    s.append("user/message", MSG, surface_op=ReplaceOp(start=0, end=1),
             source_event_seqs=[0, 1])
    s.append(ExtensionType("my/event"), {"x": 1}, ignorable=True)


def bad(s: Session) -> None:
    s.append("user/message", MSG)  # BAD: no surface_op
    s.append("tool/result", MSG, surface_op=ReplaceOp(start=0, end=1))  # BAD: no seqs
    s.append("turn/start", {"turn": 1}, surface_op="append")  # BAD: marker on log-only
    s.append("turn/start", {"turn": 1}, source_event_seqs=[1])  # BAD: seqs on log-only
    s.append("user/message", MSG, surface_op="replace")  # BAD: not a marker
    s.append("no-such/type", {})  # BAD: unknown name not declared an extension


async def good_handle(h: SessionHandle) -> None:
    await h.append("assistant/message", {}, surface_op="append", expected_seq=3)
    await h.append("step/start", {"turn": 1, "step": 1}, expected_seq=4)


async def bad_handle(h: SessionHandle) -> None:
    await h.append("context/message", MSG, expected_seq=3)  # BAD: no surface_op
    await h.append("step/end", {}, surface_op="append")  # BAD: marker on log-only
'''


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """mypy --strict's errors on ``SNIPPET``, by line."""
    folder = tmp_path_factory.mktemp("typed")
    path = folder / "snippet.py"
    path.write_text(textwrap.dedent(SNIPPET), encoding="utf-8")
    cache = folder / ".mypy_cache"
    if (REPO / ".mypy_cache").is_dir():
        # A copy of the cache make lint just filled (same options): only the snippet is
        # checked anew. A copy, because mypy keeps the snippet's module in it, with its
        # path: a later run from another folder would get this one's errors back.
        shutil.copytree(REPO / ".mypy_cache", cache)
    out, err, status = mypy_api.run([
        "--strict", "--no-error-summary", "--show-error-codes", "--hide-error-context",
        "--cache-dir", str(cache), str(path)])
    assert status == 1, f"mypy did not run to its verdict (status {status}):\n{out}\n{err}"
    errors: dict[int, str] = {}
    for line in out.splitlines():
        parts = line.split(":", 3)
        if len(parts) == 4 and parts[0] == str(path) and "error" in parts[2]:
            errors.setdefault(int(parts[1]), parts[3])
    return errors


def _lines(marker: str) -> set[int]:
    return {n for n, line in enumerate(textwrap.dedent(SNIPPET).splitlines(), start=1)
            if marker in line}


def test_mypy_refuses_each_bad_append(mypy_errors: dict[int, str]) -> None:
    bad = _lines("# BAD")
    assert len(bad) == 8
    missing = sorted(bad - set(mypy_errors))
    assert not missing, f"mypy accepted lines {missing}: {mypy_errors}"
    for line in bad:
        assert "No overload variant" in mypy_errors[line] or "call-overload" in \
            mypy_errors[line], mypy_errors[line]


def test_mypy_accepts_the_good_appends(mypy_errors: dict[int, str]) -> None:
    unexpected = {n: e for n, e in mypy_errors.items() if n not in _lines("# BAD")}
    assert not unexpected


def test_run_time_still_checks_what_types_cannot(tmp_path: Path) -> None:
    """A caller without mypy still gets the session's error, naming the rule."""
    from typing import Any

    from surfacelog.schema.errors import SurfaceError
    from surfacelog.session import Session

    session = Session()
    untyped: Any = session
    with pytest.raises(SurfaceError, match="requires a surfaceOp marker"):
        untyped.append("user/message", {"id": "u", "role": "user",
                                        "source": {"kind": "user"}, "content": []})
    assert len(session.log) == 0
