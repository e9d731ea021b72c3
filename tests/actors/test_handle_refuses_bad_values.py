"""Issue 12 through a real local Ray: the handle's append refuses data nested past the
limit and values JSON cannot carry exactly, with the same typed errors as in-process,
and acknowledges nothing of them."""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from surfacelog.actors.client import connect
from surfacelog.schema.errors import JsonValueError, NestingError
from surfacelog.schema.events import Event
from surfacelog.schema.limits import MAX_NESTING
from surfacelog.session import AppendSpec

pytestmark = pytest.mark.usefixtures("ray_local")


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


class Scripted:
    """An object of a user's script (its class is made ``__main__``'s below): not JSON."""


async def _refused_inside_a_coalesced_call(host: Any) -> None:
    """A script's object in an append's data, sent in one coalesced call with other
    sessions' appends: that append alone is refused, as in process, and the others are
    appended (its class is ``__main__``'s, which the actor's process does not have)."""
    Scripted.__module__ = "__main__"
    sys.modules["__main__"].Scripted = Scripted  # type: ignore[attr-defined]
    try:
        others = [host.session(f"beside-{k}") for k in range(3)]
        bad = host.session("scripted")
        outcomes = await asyncio.gather(
            *(o.append("turn/start", {"turn": 1}, expected_seq=0) for o in others),
            bad.append_batch([AppendSpec("x/y", {"v": Scripted()}, ignorable=True)],
                             expected_seq=0),
            return_exceptions=True)
        assert all(isinstance(e, Event) and e.seq == 0 for e in outcomes[:3]), outcomes
        assert isinstance(outcomes[3], JsonValueError), outcomes[3]
        assert outcomes[3].seq == 0
        assert await bad.events() == []
    finally:
        del sys.modules["__main__"].Scripted  # type: ignore[attr-defined]
        Scripted.__module__ = __name__


async def test_the_handle_refuses_deep_and_inexact_data(tmp_path: Path) -> None:
    host = connect(db=str(tmp_path / "ray.db"), placement="packed", packs=1)
    try:
        s = host.session("deep")
        await s.append("turn/start", {"turn": 1}, expected_seq=0)
        for depth in (MAX_NESTING + 1, 975, 5000):
            with pytest.raises(NestingError) as info:
                await s.append("x/y", nested(depth), ignorable=True, expected_seq=1)
            assert info.value.rule == "nesting" and info.value.event_type == "x/y"
        for bad in ({"v": math.nan}, {"v": (1, 2)}, {"v": {1, 2}}, {"v": b"raw"}):
            with pytest.raises(JsonValueError) as err:
                await s.append_batch([AppendSpec("x/y", bad, ignorable=True)],
                                     expected_seq=1)
            assert err.value.rule == "json-value" and err.value.seq == 1
        await _refused_inside_a_coalesced_call(host)
        logged = await s.append("x/y", nested(MAX_NESTING), ignorable=True, expected_seq=1)
        assert logged.seq == 1
        await s.flush()
        assert [e.seq for e in await s.events()] == [0, 1]
    finally:
        host.shutdown()
