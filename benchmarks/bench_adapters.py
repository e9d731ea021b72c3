"""Framework adapters against the frameworks' own SQLite sessions (issue 14, item 4).

OpenAI Agents SDK: the workload of an SDK user — one session, ``--items`` items (2,000)
added one at a time (``add_items([item])``), a full ``get_items()`` every 100 — run in
the same process, against files in one temporary directory, on:

- ``sdk``: the SDK's own ``SQLiteSession`` (file-backed: WAL, every add committed);
- ``surfacelog``: ``SurfacelogSession`` over the embedded store, durable (every add
  committed and fsynced before it returns: the SDK's guarantee);
- ``surfacelog-buffered``: the same with ``durable=False`` (adds return once queued; the
  group writer commits them in the background, ``close()`` is the barrier).

The three run interleaved, item by item, so that a busy machine slows them alike.

Google ADK: the same workload as an ADK user's (``--items`` events appended one at a
time with ``append_event``, a full ``get_session`` every 100), on ADK's own
``SqliteSessionService`` (``sdk``) and ``SurfacelogSessionService`` over the embedded
store, durable and buffered, interleaved the same way.

Printed: the mean time of one add, and of a full read at ``--items`` items (the median
of ``--reads`` reads), for each, and each as a ratio of the SDK's (targets: add <= 0.5x,
read <= 0.2x). ``--json`` prints them as JSON.

    python benchmarks/bench_adapters.py [--items 2000] [--every 100] [--reads 5] [--json]
        [--only openai|adk]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from surfacelog.integrations.openai_agents import SurfacelogSession


def openai_items(n: int) -> list[dict[str, Any]]:
    """``n`` items as the SDK stores a tool-using conversation: per turn a user message,
    a reasoning item, a function call, its output and an assistant message."""
    out: list[dict[str, Any]] = []
    turn = 0
    while len(out) < n:
        turn += 1
        out += [
            {"role": "user", "content": f"question {turn}: what is {turn} plus {turn}?"},
            {"id": f"rs_{turn}", "type": "reasoning",
             "summary": [{"type": "summary_text", "text": f"I should call add for {turn}."}]},
            {"arguments": json.dumps({"a": turn, "b": turn}), "call_id": f"call_{turn}",
             "name": "add", "type": "function_call", "id": f"fc_{turn}",
             "status": "completed"},
            {"call_id": f"call_{turn}", "output": str(2 * turn),
             "type": "function_call_output"},
            {"id": f"msg_{turn}", "type": "message", "role": "assistant",
             "status": "completed",
             "content": [{"type": "output_text", "annotations": [], "logprobs": [],
                          "text": f"{turn} plus {turn} is {2 * turn}. " * 4}]},
        ]
    return out[:n]


class Figures:
    """One session's timings: mean add (s) and the median full read at the end (s)."""

    def __init__(self, add_s: float, read_s: float, reads_checked: int) -> None:
        self.add_s = add_s
        self.read_s = read_s
        self.reads_checked = reads_checked


class _Subject:
    """One session under test: its add and read, and the time they took."""

    def __init__(self, add: Callable[[list[dict[str, Any]]], Awaitable[None]],
                 get: Callable[[], Awaitable[list[dict[str, Any]]]]) -> None:
        self.add, self.get = add, get
        self.add_total = 0.0
        self.checked = 0
        self.final: list[float] = []


async def _run(items: list[dict[str, Any]], every: int, reads: int,
               subjects: dict[str, _Subject]) -> dict[str, Figures]:
    """The workload on every subject, interleaved item by item (each item is added to
    each session in turn, each read done on each in turn), so that the load of the
    machine at any moment weighs on all of them alike."""
    order = list(subjects.values())
    for k, item in enumerate(items, 1):
        for subject in order:
            t0 = time.perf_counter()
            await subject.add([item])
            subject.add_total += time.perf_counter() - t0
        if k % every == 0:
            for subject in order:
                got = await subject.get()
                if len(got) != k or got[-1] != item:
                    raise AssertionError(f"read at {k} items returned {len(got)} items")
                subject.checked += 1
        order.reverse()  # no session always goes first
    for _ in range(reads):
        for subject in order:
            t0 = time.perf_counter()
            got = await subject.get()
            subject.final.append(time.perf_counter() - t0)
            if got != items:
                raise AssertionError("the final read differs from the items added")
        order.reverse()
    return {name: Figures(s.add_total / len(items), statistics.median(s.final), s.checked)
            for name, s in subjects.items()}


async def bench_openai(n: int, every: int, reads: int, root: Path) -> dict[str, Figures]:
    """The three sessions of the module docstring over the same ``n`` items."""
    from agents import SQLiteSession  # the SDK is needed only by this benchmark

    items = openai_items(n)
    sdk = SQLiteSession("bench", root / "sdk.db")
    durable = SurfacelogSession("bench", root / "surfacelog.db")
    buffered = SurfacelogSession("bench", root / "buffered.db", durable=False)
    try:
        return await _run(items, every, reads, {
            "sdk": _Subject(sdk.add_items, sdk.get_items),
            "surfacelog": _Subject(durable.add_items, durable.get_items),
            "surfacelog-buffered": _Subject(buffered.add_items, buffered.get_items)})
    finally:
        sdk.close()
        await durable.close()
        await buffered.close()


def adk_events(n: int) -> list[Any]:
    """``n`` ADK events of a tool-using conversation: per turn the user's message, the
    model's function call, the tool's response (with a state delta) and the answer."""
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    out: list[Any] = []
    turn = 0
    base = time.time()
    while len(out) < n:
        turn += 1
        call = types.FunctionCall(id=f"adk-call-{turn}", name="add",
                                  args={"a": turn, "b": turn})
        answer = types.FunctionResponse(id=f"adk-call-{turn}", name="add",
                                        response={"result": 2 * turn})
        contents = [
            ("user", types.Content(role="user", parts=[
                types.Part(text=f"question {turn}: what is {turn} plus {turn}?")]), {}),
            ("agent", types.Content(role="model", parts=[types.Part(function_call=call)]), {}),
            ("agent", types.Content(role="user", parts=[types.Part(function_response=answer)]),
             {"last_sum": 2 * turn, "user:sums": turn}),
            ("agent", types.Content(role="model", parts=[
                types.Part(text=f"{turn} plus {turn} is {2 * turn}. " * 4)]), {}),
        ]
        for author, content, delta in contents:
            out.append(Event(invocation_id=f"inv-{turn}", author=author, content=content,
                             actions=EventActions(state_delta=delta),
                             timestamp=base + len(out) * 0.001))
    return out[:n]


async def bench_adk(n: int, every: int, reads: int, root: Path) -> dict[str, Figures]:
    """ADK's ``SqliteSessionService`` and ours (durable, buffered) over the same events."""
    from google.adk.sessions import BaseSessionService
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    from surfacelog.integrations.adk import SurfacelogSessionService

    events = adk_events(n)
    services: dict[str, BaseSessionService] = {
        "sdk": SqliteSessionService(str(root / "adk.db")),
        "surfacelog": SurfacelogSessionService(path=root / "adk-surfacelog.db"),
        "surfacelog-buffered": SurfacelogSessionService(path=root / "adk-buffered.db",
                                                        durable=False)}

    def subject(svc: BaseSessionService, session: Any) -> _Subject:
        async def add(items: list[Any]) -> None:
            for item in items:
                await svc.append_event(session, item)

        async def get() -> list[Any]:
            got = await svc.get_session(app_name="bench", user_id="u", session_id="s")
            assert got is not None
            return list(got.events)

        return _Subject(add, get)

    subjects = {}
    for name, svc in services.items():
        session = await svc.create_session(app_name="bench", user_id="u", session_id="s")
        subjects[name] = subject(svc, session)
    try:
        return await _run(events, every, reads, subjects)
    finally:
        for svc in services.values():
            await svc.close()  # type: ignore[attr-defined]


def report(figures: dict[str, Figures], n: int) -> dict[str, Any]:
    base = figures["sdk"]
    return {name: {"add_ms": f.add_s * 1e3, f"read_at_{n}_ms": f.read_s * 1e3,
                   "add_ratio": f.add_s / base.add_s, "read_ratio": f.read_s / base.read_s,
                   "reads_checked": f.reads_checked}
            for name, f in figures.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--reads", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", choices=["openai", "adk"], default=None,
                        help="run one framework's section only")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-adapters-") as tmp:
        if args.only in (None, "openai"):
            out["openai_agents"] = report(asyncio.run(bench_openai(
                args.items, args.every, args.reads, Path(tmp))), args.items)
        if args.only in (None, "adk"):
            out["adk"] = report(asyncio.run(bench_adk(
                args.items, args.every, args.reads, Path(tmp))), args.items)
    if args.json:
        print(json.dumps(out, indent=2))
        return out
    titles = {"openai_agents": "OpenAI Agents SDK: {n} items added one at a time",
              "adk": "Google ADK: {n} events appended one at a time"}
    for section, rows in out.items():
        print(titles[section].format(n=args.items) + f", full read every {args.every}")
        print(f"{'session':<22}{'add ms':>9}{'read ms':>10}{'add x':>8}{'read x':>8}")
        for name, row in rows.items():
            print(f"{name:<22}{row['add_ms']:>9.3f}{row[f'read_at_{args.items}_ms']:>10.3f}"
                  f"{row['add_ratio']:>8.2f}{row['read_ratio']:>8.2f}")
    return out


if __name__ == "__main__":
    main()
