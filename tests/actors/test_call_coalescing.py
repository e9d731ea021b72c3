"""``CallLine`` and ``run_coalesced`` (``surfacelog/actors/coalesce.py``) without Ray: an
idle line sends a request alone and at once, a busy one gathers what arrives into its
next call within its bounds, every request gets its own outcome, a failed call fails
each of its requests, and the actor side keeps each key's order while running keys
side by side."""

from __future__ import annotations

import asyncio
import gc
import pickle
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surfacelog.actors.client import within
from surfacelog.actors.coalesce import CallLine, Outcome, Request, run_coalesced
from surfacelog.actors.errors import RequestError


class FakeActor:
    """An actor whose calls the test releases: each call waits on its own gate."""

    def __init__(self) -> None:
        self.calls: list[list[Request]] = []
        self.gates: list[asyncio.Event] = []
        self.applied: list[tuple[Any, Any]] = []
        self.fail_call: BaseException | None = None

    async def _call(self, requests: Sequence[Request]) -> list[Outcome]:
        gate = asyncio.Event()
        self.calls.append(list(requests))
        self.gates.append(gate)
        await gate.wait()
        if self.fail_call is not None:
            raise self.fail_call

        async def apply(request: Request) -> Any:
            if request.method == "refuse":
                raise ValueError(f"refused {request.args[0]}")
            self.applied.append((request.key, request.args[0]))
            return ("done", request.args[0])
        return await run_coalesced(requests, apply)

    async def one(self, request: Request) -> Any:
        (outcome,) = await self._call([request])
        if outcome.error is not None:
            raise outcome.error
        return outcome.value

    async def many(self, requests: Sequence[Request]) -> list[Outcome]:
        return await self._call(requests)

    def line(self, **bounds: int) -> CallLine:
        return CallLine(self.one, self.many, **bounds)


async def until(predicate: Any) -> None:
    """Yield to the loop until ``predicate()`` holds (each step lets tasks run)."""
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def req(key: str, n: int, method: str = "append", size: int = 1) -> Request:
    return Request(method, (n,), key, size)


async def test_an_idle_line_sends_at_once_and_alone() -> None:
    actor = FakeActor()
    line = actor.line()
    task = asyncio.ensure_future(line.submit(req("a", 1)))
    await until(lambda: actor.calls)
    assert actor.calls == [[req("a", 1)]]
    actor.gates[0].set()
    assert await task == ("done", 1)
    assert (line.stats.calls, line.stats.coalesced_calls) == (1, 0)


async def test_requests_arriving_during_a_call_travel_together_in_the_next() -> None:
    actor = FakeActor()
    line = actor.line()
    first = asyncio.ensure_future(line.submit(req("a", 0)))
    await until(lambda: actor.calls)
    rest = [asyncio.ensure_future(line.submit(req(k, n))) for n, k in
            enumerate("abcab", start=1)]
    await until(lambda: line.queued == 5)
    assert len(actor.calls) == 1  # nothing else leaves while the first is in flight
    actor.gates[0].set()
    await until(lambda: len(actor.calls) == 2)
    assert [r.args[0] for r in actor.calls[1]] == [1, 2, 3, 4, 5]
    actor.gates[1].set()
    assert await first == ("done", 0)
    assert [await t for t in rest] == [("done", n) for n in range(1, 6)]
    # Each key's requests were applied in the order they were submitted.
    assert [n for k, n in actor.applied if k == "a"] == [0, 1, 4]
    assert line.stats.calls == 2 and line.stats.largest == 5


async def test_the_bounds_split_a_long_queue() -> None:
    actor = FakeActor()
    line = actor.line(max_items=3, max_bytes=10)
    first = asyncio.ensure_future(line.submit(req("a", 0)))
    await until(lambda: actor.calls)
    sizes = [4, 4, 4, 1, 1, 1, 1, 20]
    tasks = [asyncio.ensure_future(line.submit(req("k", n, size=s)))
             for n, s in enumerate(sizes, start=1)]
    await until(lambda: line.queued == len(sizes))
    for k in range(5):
        actor.gates[k].set()
        await until(lambda k=k: len(actor.calls) >= k + 2 or line.queued == 0)
    for gate in actor.gates:
        gate.set()
    await asyncio.gather(first, *tasks)
    # 8 bytes then 12 > 10: two requests; then 4+1+1 (3 items); then 1; then the
    # 20-byte request alone (larger than the bound, it still goes).
    assert [[r.size for r in call] for call in actor.calls[1:]] == \
        [[4, 4], [4, 1, 1], [1, 1], [20]]


async def test_each_request_keeps_its_own_outcome() -> None:
    actor = FakeActor()
    line = actor.line()
    first = asyncio.ensure_future(line.submit(req("a", 0)))
    await until(lambda: actor.calls)
    ok = asyncio.ensure_future(line.submit(req("a", 1)))
    bad = asyncio.ensure_future(line.submit(req("b", 2, method="refuse")))
    after = asyncio.ensure_future(line.submit(req("b", 3)))
    await until(lambda: line.queued == 3)
    actor.gates[0].set()
    await until(lambda: len(actor.calls) == 2)
    actor.gates[1].set()
    assert await first == ("done", 0) and await ok == ("done", 1)
    with pytest.raises(RequestError) as refused:
        await bad
    assert isinstance(refused.value.error, ValueError)
    assert str(refused.value.error) == "refused 2"
    # A refusal fails that request only: the same key's next request still runs.
    assert await after == ("done", 3)


async def test_a_failed_call_fails_each_of_its_requests_and_the_line_goes_on() -> None:
    actor = FakeActor()
    line = actor.line()
    first = asyncio.ensure_future(line.submit(req("a", 0)))
    await until(lambda: actor.calls)
    carried = [asyncio.ensure_future(line.submit(req("a", n))) for n in (1, 2)]
    await until(lambda: line.queued == 2)
    actor.gates[0].set()
    await until(lambda: len(actor.calls) == 2)
    actor.fail_call = ConnectionError("actor died")
    actor.gates[1].set()
    assert await first == ("done", 0)
    for task in carried:
        with pytest.raises(ConnectionError, match="actor died"):
            await task
    actor.fail_call = None
    later = asyncio.ensure_future(line.submit(req("a", 3)))
    await until(lambda: len(actor.calls) == 3)
    actor.gates[2].set()
    assert await later == ("done", 3)


async def test_a_cancelled_caller_is_not_sent() -> None:
    actor = FakeActor()
    line = actor.line()
    first = asyncio.ensure_future(line.submit(req("a", 0)))
    await until(lambda: actor.calls)
    gone = asyncio.ensure_future(line.submit(req("a", 1)))
    kept = asyncio.ensure_future(line.submit(req("a", 2)))
    await until(lambda: line.queued == 2)
    gone.cancel()
    actor.gates[0].set()
    await until(lambda: len(actor.calls) == 2)
    actor.gates[1].set()
    assert await first == ("done", 0) and await kept == ("done", 2)
    assert [r.args[0] for r in actor.calls[1]] == [2]


def test_bounds_must_allow_a_request() -> None:
    actor = FakeActor()
    with pytest.raises(ValueError, match="max_items"):
        CallLine(actor.one, actor.many, max_items=0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.booleans(), st.integers(0, 3)),
                max_size=40))
def test_any_interleaving_answers_each_request_and_keeps_each_keys_order(
        plan: list[tuple[str, bool, int]]) -> None:
    """Requests submitted in bursts (``pause`` loop turns between them) while calls
    complete at their own pace: every caller gets exactly its own answer, and each
    key's applied order is its submission order (a naive reference: the plan itself)."""

    async def scenario() -> None:
        actor = FakeActor()
        line = actor.line(max_items=4)
        tasks = []

        async def releaser() -> None:
            released = 0
            while True:
                await asyncio.sleep(0)
                while released < len(actor.gates):
                    actor.gates[released].set()
                    released += 1

        rel = asyncio.ensure_future(releaser())
        for n, (key, refuse, pause) in enumerate(plan):
            tasks.append(asyncio.ensure_future(
                line.submit(req(key, n, "refuse" if refuse else "append"))))
            for _ in range(pause):
                await asyncio.sleep(0)
        results = await asyncio.gather(*tasks, return_exceptions=True)
        rel.cancel()
        for n, ((_key, refuse, _), result) in enumerate(zip(plan, results, strict=True)):
            if refuse:
                # Alone (an idle line), the error is the actor's own; coalesced, wrapped.
                error = result.error if isinstance(result, RequestError) else result
                assert isinstance(error, ValueError) and str(error) == f"refused {n}"
            else:
                assert result == ("done", n)
        for key in "abcd":
            expected = [n for n, (k, refuse, _) in enumerate(plan) if k == key and not refuse]
            assert [n for k, n in actor.applied if k == key] == expected
        assert sum(len(c) for c in actor.calls) == len(plan)
        assert all(len(c) <= 4 for c in actor.calls)

    asyncio.run(scenario())


def test_the_wire_form_is_one_pickle_and_keeps_requests_and_outcomes() -> None:
    """A coalesced call's requests and its reply cross Ray as one ``bytes`` each (pickled
    here, so Ray's slower serializer sees one value); nothing is lost either way."""
    from surfacelog.actors.coalesce import (
        outcomes_from_wire,
        outcomes_to_wire,
        requests_from_wire,
        requests_to_wire,
    )

    requests = [req("a", 1), Request("events_wire", ("b", 0, None), "b", 9)]
    wire = requests_to_wire(requests)
    assert isinstance(wire, bytes)
    back = requests_from_wire(pickle.loads(pickle.dumps(wire)))
    assert [(r.method, r.args, r.key) for r in back] == \
        [(r.method, r.args, r.key) for r in requests]
    outcomes = [Outcome(value=b"reply"), Outcome(error=ValueError("no"))]
    reply = outcomes_to_wire(outcomes)
    assert isinstance(reply, bytes)
    again = outcomes_from_wire(reply)
    assert again[0] == Outcome(value=b"reply")
    assert isinstance(again[1].error, ValueError) and str(again[1].error) == "no"


class _Refuses(Exception):
    """An error the standard pickler cannot take (it holds a lambda); cloudpickle can."""

    def __init__(self, message: str, hook: Any = None) -> None:
        super().__init__(message)
        self.hook = hook if hook is not None else (lambda: message)

    def __reduce__(self) -> Any:
        return (_Refuses, (str(self), self.hook))


def test_what_the_standard_pickler_refuses_travels_as_the_list_for_rays_serializer(
) -> None:
    """A request argument or an outcome the standard pickler refuses (a lambda, here)
    leaves the call or the reply as the list of tuples, which Ray's own serializer
    (cloudpickle) takes, as before: the request still gets its own outcome."""
    from ray import cloudpickle

    from surfacelog.actors.coalesce import (
        outcomes_from_wire,
        outcomes_to_wire,
        requests_from_wire,
        requests_to_wire,
    )

    requests = [req("a", 1), Request("fold", (lambda: "hook",), "b")]
    wire = requests_to_wire(requests)
    assert isinstance(wire, list)
    back = requests_from_wire(cloudpickle.loads(cloudpickle.dumps(wire)))
    assert back[0].args == (1,) and back[1].args[0]() == "hook"
    outcomes = [Outcome(value=b"ok"), Outcome(error=_Refuses("refused"))]
    reply = outcomes_to_wire(outcomes)
    assert isinstance(reply, list)
    again = outcomes_from_wire(cloudpickle.loads(cloudpickle.dumps(reply)))
    assert again[0].value == b"ok"
    assert isinstance(again[1].error, _Refuses) and str(again[1].error) == "refused"
    assert again[1].error.hook() == "refused"


class _Scripted:
    """Stands for a class of a user's script: its module is ``__main__``."""

    def __init__(self, n: int) -> None:
        self.n = n


def test_a_class_of_main_travels_as_the_list_for_rays_serializer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The standard pickler refers to a class of ``__main__`` by name, which the actor's
    process would not find; cloudpickle sends it whole. So a call holding one (or the
    text ``__main__``, which costs it only the slower serializer) goes as the list."""
    import sys

    from ray import cloudpickle

    from surfacelog.actors.coalesce import requests_from_wire, requests_to_wire

    monkeypatch.setattr(_Scripted, "__module__", "__main__")
    monkeypatch.setattr(sys.modules["__main__"], "_Scripted", _Scripted, raising=False)
    assert pickle.loads(pickle.dumps(_Scripted(1))).n == 1  # the standard pickler takes it
    wire = requests_to_wire([req("a", 1), Request("append_batch", (_Scripted(7),), "b")])
    assert isinstance(wire, list)
    assert requests_from_wire(cloudpickle.loads(cloudpickle.dumps(wire)))[1].args[0].n == 7
    text = requests_to_wire([Request("append_wire", (b'if __name__ == "__main__":',), "c")])
    assert isinstance(text, list)
    assert requests_from_wire(text)[0].args == (b'if __name__ == "__main__":',)


# -- within: a request's deadline, as a client waits on it ------------------------------

async def test_within_returns_the_value_or_the_error_when_it_comes() -> None:
    loop = asyncio.get_running_loop()
    later: asyncio.Future[int] = loop.create_future()
    loop.call_soon(later.set_result, 7)
    assert await within(later, 5) == 7
    done: asyncio.Future[int] = loop.create_future()
    done.set_exception(ValueError("refused"))
    with pytest.raises(ValueError, match="refused"):
        await within(done, 5)

    async def coroutine() -> str:
        await asyncio.sleep(0)
        return "from a coroutine"

    assert await within(coroutine(), 5) == "from a coroutine"


async def test_within_times_out_and_leaves_the_request_running() -> None:
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[int] = loop.create_future()
    with pytest.raises(asyncio.TimeoutError):
        await within(pending, 0.01)
    assert not pending.done() and not pending.cancelled()
    # Its late failure is read by within's callback: asyncio reports no exception
    # "never retrieved" for it, as it does for a future nobody reads (the control).
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        control: asyncio.Future[int] = loop.create_future()
        for future in (pending, control):
            future.set_exception(RuntimeError("late"))
        await asyncio.sleep(0)
        del pending, control, future
        gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert len(reported) == 1 and "never retrieved" in reported[0]["message"]


async def test_cancelling_the_caller_of_within_does_not_cancel_the_request() -> None:
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[int] = loop.create_future()
    waiting = asyncio.ensure_future(within(pending, 60))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not pending.done()
    pending.set_result(1)  # its own waiter's callback was removed: nothing to wake
    await asyncio.sleep(0)
    assert pending.result() == 1

