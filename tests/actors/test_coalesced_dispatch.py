"""What an actor does with a coalesced call (``SessionActor.call_many``) and the appended
events it counts: each request is applied by the method as the class defines it, not
through the wrapper Ray puts around every method of an actor class, and the events of
requests answered together are recorded once. The owner actor's class in this process,
on a real SQLite file: no Ray."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from surfacelog.actors.coalesce import (
    Request,
    outcomes_from_wire,
    requests_to_wire,
)
from surfacelog.actors.config import HostingConfig
from surfacelog.actors.metrics import Recorder
from surfacelog.actors.protocol import Conflict, encode_append
from surfacelog.actors.session_actor import COALESCED, OwnerActor
from surfacelog.session import AppendSpec

WRAPPED: list[str] = []


def _traced(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A wrapper as Ray's tracing makes one (``functools.wraps``), which notes its calls."""
    @functools.wraps(method)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        WRAPPED.append(method.__name__)
        return await method(self, *args, **kwargs)
    return wrapper


class TracedOwner(OwnerActor):
    """An ``OwnerActor`` whose requests are wrapped, as Ray's subclass of an actor class
    wraps them."""


for _name in COALESCED:
    setattr(TracedOwner, _name, _traced(getattr(OwnerActor, _name)))


@pytest.fixture
async def owner(tmp_path: Path) -> AsyncIterator[TracedOwner]:
    config = HostingConfig.single(os.path.join(tmp_path, "dispatch.db"),
                                  placement="packed", writer="owner")
    actor = TracedOwner(config, config.shards.shards[0].name)
    await actor.ready()
    try:
        yield actor
    finally:
        await actor.shutdown()
        await actor.close()


def _append(session_id: str, turn: int, expected_seq: int | None) -> Request:
    payload = encode_append(session_id, [AppendSpec("turn/start", {"turn": turn})],
                            expected_seq)
    assert payload is not None
    return Request("append_wire", (payload,), session_id, len(payload))


async def test_a_coalesced_call_applies_each_request_without_the_wrapper(
        owner: TracedOwner) -> None:
    WRAPPED.clear()
    # Called from outside, a method goes through its wrapper...
    await owner.append_batch("a", [AppendSpec("turn/start", {"turn": 1})])
    assert WRAPPED == ["append_batch"]
    WRAPPED.clear()
    # ...but the requests of a coalesced call are applied by the methods themselves,
    # each keeping its own outcome and each session's order.
    requests = [_append("a", 2, 1), _append("b", 1, 0), _append("a", 3, 2),
                _append("b", 2, 5), Request("events_wire", ("a", 0, None), "a"),
                Request("derive_wire", ("b", None), "b")]
    outcomes = outcomes_from_wire(await owner.call_many(requests_to_wire(requests)))
    assert WRAPPED == []
    assert [o.error is None for o in outcomes] == [True, True, True, False, True, True]
    assert isinstance(outcomes[3].error, Conflict)
    assert [e.seq for e in (await owner.events("a"))] == [0, 1, 2]
    assert [e.seq for e in (await owner.events("b"))] == [0]


async def test_a_request_for_another_method_is_refused_alone(owner: TracedOwner) -> None:
    requests = [Request("close", (), None), _append("c", 1, 0)]
    outcomes = outcomes_from_wire(await owner.call_many(requests_to_wire(requests)))
    assert isinstance(outcomes[0].error, ValueError)
    assert "'close' is not a request a coalesced call carries" in str(outcomes[0].error)
    assert outcomes[1].error is None


class Counted:
    """Stands in for a Ray metric: notes each record."""

    def __init__(self) -> None:
        self.records: list[float] = []

    def inc(self, value: float, tags: dict[str, str]) -> None:
        self.records.append(value)

    def observe(self, value: float, tags: dict[str, str]) -> None:
        self.records.append(value)


def _recorder() -> tuple[Recorder, Counted, Counted]:
    recorder = Recorder("packed", "owner", "s0")
    events, latency = Counted(), Counted()
    metrics = type("M", (), {"append_events": events, "append_latency": latency})()
    recorder._m = metrics  # type: ignore[assignment]
    return recorder, events, latency


async def test_events_answered_in_one_step_of_the_loop_are_counted_once() -> None:
    recorder, events, latency = _recorder()
    recorder.appended(3, 0.001)
    recorder.appended(0, 0.002)  # a retry found in the log appends nothing
    recorder.appended(2, 0.003)
    assert events.records == [] and len(latency.records) == 3
    await asyncio.sleep(0)
    assert events.records == [5]
    recorder.appended(1, 0.001)
    await asyncio.sleep(0)
    assert events.records == [5, 1]
    await asyncio.sleep(0)
    assert events.records == [5, 1]


def test_outside_a_running_loop_events_are_counted_at_once() -> None:
    recorder, events, _ = _recorder()
    recorder.appended(4, 0.001)
    recorder.appended(2, 0.001)
    assert events.records == [4, 2]


def test_the_calls_that_carry_many_requests_report_no_task_events() -> None:
    """``call_many`` (drivers, gateway replicas and watchers to session actors) and
    ``append_many`` (session actors to a shard's journal) are declared without Ray's
    task events, as Ray Serve declares its replicas: at thousands of calls a second each
    call's events cost CPU in the caller, the actor and the GCS."""
    from surfacelog.actors.journal import JournalActor

    for method in (OwnerActor.call_many, JournalActor.append_many):
        assert getattr(method, "__ray_enable_task_events__", True) is False, method
