"""Hosting cost per event: the load run's workload hosted on a local Ray, beside the same
workload in process and beside a no-op Ray call, all measured in this run.

Rows (each hosted row with coalesced calls, and again with every request in a call of
its own, ``SURFACELOG_COALESCE=0``, the behaviour before coalescing):

1. floors: a no-op async-actor call, one at a time (calls/s and CPU per call over every
   process), and 50 at a time with and without Ray's task events (CPU per call, the
   methods timed in alternating blocks); the scripted workload appended in this
   process through ``LiveSession`` + the SQLite store (durable), no Ray (events/s, CPU
   per event); the same workload through the hosted path's own code in this process
   (``SessionHandle``s on a ``CallLine``, the calls pickled as they cross Ray, applied
   by an ``OwnerActor`` object's ``call_many``), no Ray (CPU per event beside the first):
   what hosting costs per event before Ray's calls; and the owner's side alone, per
   request: coalesced calls of one durable chunk append per session applied by an
   ``OwnerActor`` object whose class is wrapped as a Ray worker wraps it
   (``raycompat.traced_like_an_actor``), beside the same appends made through
   ``LiveSession.append_request`` (CPU per request, this process);
2. ``surfacelog run --mode chunk``, 50 sessions, durable (events/s, p50/p99, CPU per
   event over every process, Ray calls per event);
3. the same in batch mode;
4. chunk mode at 1 / 50 / 200 / 1,000 sessions, each session appending as fast as it
   is answered; then 50 / 200 / 1,000 sessions each appending once a second
   (``--chunk-every 1000``, one turn), the p50 at a load the node sustains, beside the
   closed loop's at as many sessions and turns;
5. one session's durable chunk appends, one at a time, beside the no-op call;
6. ``--via http``, 50 sessions, batch mode: the same agents through the HTTP gateway,
   beside row 3 (the same run through Ray), and beside the same through a gateway that
   serves every route with FastAPI (``SURFACELOG_GATEWAY_DIRECT=0``): events/s, p50, CPU
   per event, and the gateway replica's own CPU per event. ``--direct-pairs N`` runs
   only that comparison, N alternating pairs at 50 sessions x 30 turns;
7. ``--mode stream``, 50 sessions: a model attempt's start and chunks each written
   through an ``AppendStream`` as they arrive (unpaced: a model faster than the
   appends, so an attempt's writes travel together), beside the same workload in
   process and row 2's chunk run; then 1,000 sessions paced (``--chunk-every 1000``)
   beside chunk mode paced alike.

The floors run with the actors' collector setting (``tune_gc``). Each ``surfacelog
run`` is a child process with its own embedded Ray (as a user runs it);
the figures are its JSON report's. ``--quick`` runs rows 1 and 2 at tiny sizes (the
smoke test's).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_actors import Report, Result

from surfacelog.actors.client import Client, SessionHandle
from surfacelog.actors.coalesce import (
    CallLine,
    Outcome,
    Request,
    outcomes_from_wire,
    requests_to_wire,
)
from surfacelog.actors.config import HostingConfig, tune_gc
from surfacelog.actors.driver import DriverProgress, LocalHandle, SessionDriver
from surfacelog.actors.protocol import encode_append
from surfacelog.actors.raycompat import traced_like_an_actor
from surfacelog.actors.script import AgentScript, AppendMode, ScriptConfig
from surfacelog.actors.session_actor import OwnerActor
from surfacelog.gateway.ingress import DIRECT_ENV
from surfacelog.runtime.live import LiveSession
from surfacelog.session import AppendSpec
from surfacelog.store.shardmap import Shard, ShardMap
from surfacelog.store.sqlite import SqliteEventStore

JSON_PREFIX = "BENCH_HOSTING_JSON "


# -- the in-process floor ------------------------------------------------------------------


class _LocalClient:
    """What a ``SessionDriver`` asks of its client, for sessions in this process; with
    ``line``, also what a ``SessionHandle`` asks of its ``Client`` (every session's
    requests go on that one line)."""

    coalesce = True

    def __init__(self, line: CallLine | None = None) -> None:
        self.resent = 0
        self.retry_for_s = 30.0
        self._shard = ShardMap.single("in-process.db").shards[0]
        self._line = line

    async def shard_of(self, session_id: str) -> Shard:
        return self._shard

    def route(self, shard: Shard, session_id: str) -> tuple[None, CallLine]:
        if self._line is None:
            raise RuntimeError("this client has no line to an actor")
        return None, self._line

    # ``Client``'s own: a request as it goes on a line (``coalesce``), over ``route``.
    send = Client.send


class Floor(NamedTuple):
    """A floor's figures: events/s, events, and CPU milliseconds per event (this
    process, every thread: the driving, the session, the SQLite thread)."""

    rate: float
    events: int
    cpu_ms: float


async def _drive_floor(handles: Sequence[Any], mode: AppendMode, turns: int,
                       what: str) -> Floor:
    """The run's scripted agents (``SessionDriver``) driving ``handles`` at once."""
    progress = DriverProgress()
    config = ScriptConfig(mode=mode)
    drivers = [SessionDriver(handle, AgentScript(handle.session_id, config), progress,
                             time.time()) for handle in handles]
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(d.run(turns) for d in drivers))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if progress.errors:
        raise RuntimeError(f"{what}: {progress.last_error}")
    return Floor(progress.events / elapsed, progress.events,
                 1000 * cpu / max(progress.events, 1))


async def in_process_floor(folder: str, sessions: int, turns: int,
                           mode: AppendMode) -> Floor:
    """The run's scripted workload (``sessions`` sessions, ``turns`` turns, ``mode``)
    appended in this process through ``LiveSession`` and a durable
    ``SqliteEventStore``, every session at once."""
    store = await SqliteEventStore.open(os.path.join(folder, f"floor-{mode}.db"))
    try:
        client = _LocalClient()
        lives = [await LiveSession.activate(f"s{k:04d}", store) for k in range(sessions)]
        return await _drive_floor([LocalHandle(live, client) for live in lives], mode,
                                  turns, "in-process floor")
    finally:
        await store.close()


# -- the hosted path's own code, no Ray --------------------------------------------------


@contextlib.asynccontextmanager
async def _owner(path: str, cls: type[OwnerActor] = OwnerActor) -> AsyncIterator[OwnerActor]:
    """An ``OwnerActor`` object of ``cls`` in this process, the writer of the one shard
    at ``path``, ready; shut down and closed on leaving."""
    config = HostingConfig.single(path, placement="packed", writer="owner")
    owner = cls(config, config.shards.shards[0].name)
    await owner.ready()
    try:
        yield owner
    finally:
        await owner.shutdown()
        await owner.close()


async def hosted_code_floor(folder: str, sessions: int, turns: int,
                            mode: AppendMode) -> Floor:
    """The workload of ``in_process_floor`` through the hosted path's own code, in this
    process: ``SessionHandle``s whose requests go on a ``CallLine`` whose calls reach an
    ``OwnerActor`` object, the coalesced requests and outcomes pickled as a Ray
    call's argument and reply are, applied by the actor's own ``call_many``. What hosting
    costs beyond the session's work, Ray's calls and processes excepted."""
    async with _owner(os.path.join(folder, f"hosted-code-{mode}.db")) as owner:
        async def one(request: Request) -> Any:
            args = pickle.loads(pickle.dumps(request.args, protocol=5))
            return pickle.loads(pickle.dumps(await getattr(owner, request.method)(*args),
                                             protocol=5))

        async def many(requests: Sequence[Request]) -> Sequence[Outcome]:
            wire = pickle.loads(pickle.dumps(requests_to_wire(requests), protocol=5))
            reply = await owner.call_many(wire)
            return outcomes_from_wire(pickle.loads(pickle.dumps(reply, protocol=5)))

        client = _LocalClient(CallLine(one, many))
        handles = [SessionHandle(client, f"s{k:04d}")  # type: ignore[arg-type]
                   for k in range(sessions)]
        for handle in handles:  # activated before the clock starts, as in_process_floor
            await handle.surface()
        return await _drive_floor(handles, mode, turns, "hosted code floor")


# -- the owner's side of a coalesced call, per request ----------------------------------


def _opening() -> list[AppendSpec]:
    return [AppendSpec("turn/start", {"turn": 1}),
            AppendSpec("step/start", {"turn": 1, "step": 1}),
            AppendSpec("assistant/chunk", {"turn": 1, "step": 1, "chunk": {
                "type": "block-start", "index": 0, "blockType": "text"}})]


def _delta(k: int) -> AppendSpec:
    return AppendSpec("assistant/chunk", {"turn": 1, "step": 1, "chunk": {
        "type": "text-delta", "index": 0, "text": f"token {k} "}})


async def _owner_side(path: str, ids: list[str], rounds: int, warm: int) -> float:
    """CPU microseconds per request of ``owner_requests``'s first measure."""
    async with _owner(path, traced_like_an_actor(OwnerActor)) as owner:
        seqs = {sid: (await owner.append_batch(sid, _opening()))[-1].seq + 1 for sid in ids}
        calls = []
        for r in range(warm + rounds):
            requests = []
            for sid in ids:
                wire = encode_append(sid, [_delta(r)], seqs[sid])
                assert wire is not None
                requests.append(Request("append_wire", (wire,), sid, len(wire)))
                seqs[sid] += 1
            calls.append(requests_to_wire(requests))
        cpu = 0.0
        for r, call in enumerate(calls):
            if r == warm:
                cpu = time.process_time()
            failed = [o.error for o in outcomes_from_wire(await owner.call_many(call))
                      if o.error is not None]
            if failed:
                raise RuntimeError(f"owner requests: {failed[0]!r}")
        return 1e6 * (time.process_time() - cpu) / (rounds * len(ids))


async def _session_side(path: str, ids: list[str], rounds: int, warm: int) -> float:
    """CPU microseconds per request of ``owner_requests``'s baseline."""
    store = await SqliteEventStore.open(path)
    try:
        lives = [await LiveSession.activate(sid, store) for sid in ids]
        for live in lives:
            await live.append_request(_opening())
        cpu = 0.0
        for r in range(warm + rounds):
            if r == warm:
                cpu = time.process_time()
            await asyncio.gather(*(live.append_request([_delta(r)], len(live.session))
                                   for live in lives))
        return 1e6 * (time.process_time() - cpu) / (rounds * len(ids))
    finally:
        await store.close()


async def owner_requests(folder: str, sessions: int, rounds: int) -> tuple[float, float]:
    """CPU microseconds (this process, every thread) per durable one-chunk append, each
    of ``rounds`` rounds appending once to each of ``sessions`` sessions, after a fifth
    as many rounds to warm up: (1) each round one coalesced call of the wire requests
    (made before the clock starts, as a client makes them) applied by an ``OwnerActor``
    whose class is wrapped as a Ray worker wraps it; (2) each round the same appends made
    through ``LiveSession.append_request`` on a durable SQLite store, gathered."""
    ids, warm = [f"o{k:04d}" for k in range(sessions)], max(2, rounds // 5)
    return (await _owner_side(os.path.join(folder, "owner-requests.db"), ids, rounds, warm),
            await _session_side(os.path.join(folder, "live-requests.db"), ids, rounds, warm))


# -- the no-op call ---------------------------------------------------------------------------


class NoopFloor(NamedTuple):
    """``noop_call``'s figures."""

    rate: float
    """Calls/s, one at a time."""
    cpu_ms: float
    """CPU ms per call over every process, one at a time."""
    busy_cpu_ms: float
    """CPU ms per call over every process, ``IN_FLIGHT`` calls at a time."""
    quiet_cpu_ms: float
    """The same for a method declared ``enable_task_events=False`` (as ``call_many``)."""


IN_FLIGHT: Final = 50
"""Calls in flight at once in ``noop_call``'s task-events comparison: a hosting actor
serves many callers' calls side by side."""


def noop_call(n: int, blocks: int = 4) -> NoopFloor:
    """A no-op async-actor call made one at a time from this process: calls/s and the
    CPU per call summed over every process of the Ray it starts. Then the CPU per call
    with ``IN_FLIGHT`` calls at a time, of that method and of one that reports no task
    events to Ray's GCS, timed in ``blocks`` alternating blocks of ``n / blocks`` calls
    each, on the same actor."""
    import ray

    from surfacelog.actors.client import init_ray
    from surfacelog.cli.loadrun import cpu_by_process, cpu_spent

    # A Ray of its own, as each hosted run starts one: never a cluster another process
    # left as this machine's "current" one (ray.init() would join that).
    init_ray(None, num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        @ray.remote(num_cpus=0)
        class Noop:
            async def ping(self) -> None:
                return None

            @ray.method(enable_task_events=False)
            async def quiet(self) -> None:
                return None

        actor = Noop.remote()  # type: ignore[attr-defined]

        async def calls(method: Any, count: int, at_once: int = 1) -> float:
            started = time.perf_counter()
            for _ in range(max(1, count // at_once)):
                await asyncio.gather(*(method.remote() for _ in range(at_once)))
            return time.perf_counter() - started

        def measured(method: Any, count: int, at_once: int = 1) -> tuple[float, float]:
            before = cpu_by_process()
            elapsed = asyncio.run(calls(method, count, at_once))
            return elapsed, cpu_spent(before, cpu_by_process())

        asyncio.run(calls(actor.ping, max(10, n // 10)))
        elapsed, cpu = measured(actor.ping, n)
        per_block = max(IN_FLIGHT, n // blocks)
        asyncio.run(calls(actor.quiet, per_block, IN_FLIGHT))
        busy = {"ping": 0.0, "quiet": 0.0}
        for _ in range(blocks):
            for name in busy:
                busy[name] += measured(getattr(actor, name), per_block, IN_FLIGHT)[1]
        done = blocks * (per_block // IN_FLIGHT) * IN_FLIGHT
        return NoopFloor(n / elapsed, 1000 * cpu / n, 1000 * busy["ping"] / done,
                         1000 * busy["quiet"] / done)
    finally:
        ray.shutdown()


# -- hosted runs --------------------------------------------------------------------------------


def hosted_run(folder: str, name: str, args: Sequence[str], coalesce: bool,
               timeout_s: float = 1800, direct: bool = True) -> dict[str, Any]:
    """The JSON report of ``surfacelog run --json ARGS`` in a child process (its own
    embedded Ray), with coalescing on or off, and (``--via http``) the gateway's direct
    routes on or off."""
    db = os.path.join(folder, f"{name}-{'c' if coalesce else 'n'}{'' if direct else '-f'}.db")
    env = {**os.environ, "SURFACELOG_COALESCE": "1" if coalesce else "0",
           DIRECT_ENV: "1" if direct else "0"}
    proc = subprocess.run([sys.executable, "-m", "surfacelog.cli", "run", "--db", db,
                           "--json", *args], capture_output=True, text=True, env=env,
                          timeout=timeout_s, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"surfacelog run {' '.join(args)}: exit {proc.returncode}\n"
                           f"{proc.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(lines[-1])
    if report["errors"] or not report["verification"]["passed"]:
        raise RuntimeError(f"surfacelog run {' '.join(args)}: {report['last_error']}")
    return report


def _row(report: Report, section: str, label: str, run: dict[str, Any], before: dict[str, Any],
         floor: float | None, noop_rate: float) -> None:
    lat, was = run["append_latency_ms"], before["append_latency_ms"]
    note = (f"p50 {lat['p50']} / p99 {lat['p99']} ms (uncoalesced {was['p50']} / "
            f"{was['p99']}); CPU/event {run['cpu_ms_per_event']} ms (uncoalesced "
            f"{before['cpu_ms_per_event']}); Ray calls/event {run['ray_calls_per_event']} "
            f"(uncoalesced {before['ray_calls_per_event']})")
    report.add(Result(section, f"{label}: events/s", run["events_per_s"], "events/s",
                      "uncoalesced", before["events_per_s"], note=note))
    report.add(Result(section, f"{label}: events/s vs no-op calls/s", run["events_per_s"],
                      "events/s", "no-op calls/s", noop_rate, ">= 10x",
                      run["events_per_s"] >= 10 * noop_rate))
    if floor is not None:
        report.add(Result(section, f"{label}: events/s vs in process", run["events_per_s"],
                          "events/s", "in process", floor, ">= 0.25x",
                          run["events_per_s"] >= 0.25 * floor))
    report.add(Result(section, f"{label}: p50", lat["p50"], "ms", "uncoalesced",
                      was["p50"], "<= 10 ms", lat["p50"] <= 10))
    if run["cpu_ms_per_event"] is not None:
        report.add(Result(section, f"{label}: CPU per event", run["cpu_ms_per_event"], "ms",
                          "uncoalesced", before["cpu_ms_per_event"], "<= 0.1 ms",
                          run["cpu_ms_per_event"] <= 0.1))


SPLIT: Final = ("OwnerActor", "DriverActor")
"""The processes whose CPU rows 2 and 3 show apart (the run's ``cpu_s_by_process``): the
shard's owner actor, which hosts every session and commits, and the agents' drivers."""


def _split_rows(report: Report, section: str, label: str, run: dict[str, Any],
                floor_ms: float) -> None:
    """``run``'s CPU per event by process (its ``cpu_s_by_process``): each of ``SPLIT``,
    then every other process together (this command, the compactor and pruner, Ray's
    own), each beside the in-process floor's CPU per event (``floor_ms``: the agents'
    and the owner's work in one process, no Ray)."""
    spent = run["cpu_s_by_process"]
    parts = {kind: spent.get(kind, 0.0) for kind in SPLIT}
    parts["every other process"] = sum(s for kind, s in spent.items() if kind not in SPLIT)
    total = sum(parts.values())
    for part, seconds in parts.items():
        report.add(Result(section, f"{label}: CPU per event, {part}",
                          1000 * seconds / run["events"], "ms", "in process, all of it",
                          floor_ms, note=f"{100 * seconds / total:.0f}% of the run's CPU"))


def run_all(folder: str, quick: bool) -> Report:
    report = Report()
    sessions, turns = (4, 1) if quick else (50, 4)
    print("1. floors", flush=True)
    noop = noop_call(200 if quick else 3000)
    report.add(Result("1", "no-op async-actor call, one at a time", noop.rate, "calls/s",
                      note=f"CPU {noop.cpu_ms:.3f} ms per call, all processes"))
    report.add(Result("1", f"no-op call, {IN_FLIGHT} in flight, without Ray's task events: "
                      "CPU per call", noop.quiet_cpu_ms, "ms", "with task events",
                      noop.busy_cpu_ms, note="all processes; as call_many and append_many "
                      "are declared"))
    floors, floor_cpu = {}, {}
    for mode in ("chunk",) if quick else ("chunk", "batch", "stream"):
        floor = asyncio.run(in_process_floor(folder, sessions, turns, mode))  # type: ignore[arg-type]
        floors[mode], floor_cpu[mode] = floor.rate, floor.cpu_ms
        report.add(Result("1", f"in process, {mode} mode, {sessions} sessions", floor.rate,
                          "events/s", note=f"{floor.events:,} events, durable SQLite, no "
                          f"Ray; CPU {floor.cpu_ms:.4f} ms per event"))
        code = asyncio.run(hosted_code_floor(folder, sessions, turns, mode))  # type: ignore[arg-type]
        report.add(Result("1", f"hosted path's code in process, {mode} mode: CPU per event",
                          code.cpu_ms, "ms", "in process", floor.cpu_ms,
                          note=f"{code.rate:,.0f} events/s; the owner actor's class, "
                          "coalesced wire requests, no Ray"))
    actor_us, live_us = asyncio.run(owner_requests(folder, sessions, 40 if quick else 250))
    report.add(Result("1", "the owner's side of a coalesced append, in process: CPU per "
                      "request", actor_us, "us", "LiveSession.append_request", live_us,
                      note=f"{sessions} sessions, one durable chunk append each per call; "
                      "the class wrapped as in a Ray worker"))
    base = ["--sessions", str(sessions), "--turns", str(turns)]
    hosted: dict[str, dict[str, Any]] = {}
    # --quick (the smoke test) skips the batch row: its path is the chunk row's.
    for section, mode in (("2", "chunk"),) if quick else (("2", "chunk"), ("3", "batch")):
        print(f"{section}. {mode} mode, {sessions} sessions", flush=True)
        args = [*base, "--mode", mode]
        after = hosted_run(folder, f"{mode}-{sessions}", args, True)
        before = hosted_run(folder, f"{mode}-{sessions}", args, False)
        _row(report, section, f"{mode}, {sessions} sessions", after, before, floors[mode],
             noop.rate)
        _split_rows(report, section, f"{mode}, {sessions} sessions", after,
                    floor_cpu[mode])
        hosted[mode] = after
    if quick:  # the smoke test: rows 4 to 7 run the same code as row 2
        return report
    print("4. sessions", flush=True)
    for count in (1, 50, 200, 1000):
        args = ["--sessions", str(count), "--turns", str(turns if count <= 200 else 2),
                "--mode", "chunk"]
        after = hosted_run(folder, f"scale-{count}", args, True)
        lat = after["append_latency_ms"]
        report.add(Result("4", f"chunk, {count} session(s): events/s", after["events_per_s"],
                          "events/s", note=f"p50 {lat['p50']} / p99 {lat['p99']} ms, "
                          f"Ray calls/event {after['ray_calls_per_event']}"))
    # The rows above are closed loops: each session sends its next append as soon as
    # the last is answered, so p50 is about sessions / (events/s), queueing at the most
    # the node takes. Paced, each session appends once a second (its model's chunks,
    # its tool calls and results), a load the node sustains up to 1,000 sessions here:
    # p50 is then the time an append takes, beside the closed loop's at as many
    # sessions.
    for count in (50, 200, 1000):
        args = ["--sessions", str(count), "--turns", "1", "--mode", "chunk"]
        closed = hosted_run(folder, f"closed-{count}", args, True)
        paced = hosted_run(folder, f"paced-{count}", [*args, "--chunk-every", "1000"], True)
        lat, was = paced["append_latency_ms"], closed["append_latency_ms"]
        report.add(Result("4", f"chunk, {count:,} sessions, an append a second each: p50",
                          lat["p50"], "ms", "closed loop", was["p50"],
                          "<= 50 ms" if count == 1000 else "<= 10 ms",
                          lat["p50"] <= (50 if count == 1000 else 10),
                          note=f"p99 {lat['p99']} ms; {paced['events_per_s']:,.0f} "
                          f"events/s (closed loop {closed['events_per_s']:,.0f}); "
                          f"CPU/event {paced['cpu_ms_per_event']} ms, Ray calls/event "
                          f"{paced['ray_calls_per_event']}"))
    print("5. one append alone", flush=True)
    alone = hosted_run(folder, "alone", ["--sessions", "1", "--turns", str(turns),
                                         "--mode", "chunk", "--drivers", "1"], True)
    p50 = alone["append_latency_ms"]["p50"]
    noop_ms = 1000 / noop.rate
    # No target: each of these appends waits for its durable commit (an fsync), which
    # the no-op call does not; bench_actors' section 1 compares like with like.
    report.add(Result("5", "one session's durable chunk appends, one at a time: p50", p50,
                      "ms", "no-op call", noop_ms,
                      note="the p50 of a one-session chunk run, commit included"))
    print("6. via http", flush=True)
    via_ray = hosted_run(folder, "http-ray", [*base, "--mode", "batch"], True)
    via_http = hosted_run(folder, "http", [*base, "--mode", "batch", "--via", "http"], True)
    lat = via_http["append_latency_ms"]
    report.add(Result("6", f"--via http, batch, {sessions} sessions: events/s",
                      via_http["events_per_s"], "events/s", "via Ray",
                      via_ray["events_per_s"], ">= 5,000 events/s",
                      via_http["events_per_s"] >= 5000,
                      note=f"p50 {lat['p50']} / p99 {lat['p99']} ms (via Ray "
                      f"{via_ray['append_latency_ms']['p50']} / "
                      f"{via_ray['append_latency_ms']['p99']}); CPU/event "
                      f"{via_http['cpu_ms_per_event']} ms (via Ray "
                      f"{via_ray['cpu_ms_per_event']})"))
    report.add(Result("6", f"--via http, batch, {sessions} sessions: p50", lat["p50"], "ms",
                      "via Ray", via_ray["append_latency_ms"]["p50"], "<= 20 ms",
                      lat["p50"] <= 20))
    # The same through a gateway whose routes are all FastAPI's (no DirectRoutes).
    fastapi = hosted_run(folder, "http", [*base, "--mode", "batch", "--via", "http"], True,
                         direct=False)
    _direct_rows(report, "6", f"--via http, batch, {sessions} sessions", via_http, fastapi)
    _stream_rows(report, folder, base, sessions, floors["stream"], floor_cpu["stream"],
                 noop.rate, hosted["chunk"])
    return report


def _stream_rows(report: Report, folder: str, base: list[str], sessions: int,
                 floor: float, floor_ms: float, noop_rate: float,
                 chunked: dict[str, Any]) -> None:
    """Row 7: ``--mode stream`` (coalesced and not, beside its in-process floor), its
    figures against row 2's chunk run (``chunked``), and 1,000 sessions paced at a
    chunk a second in both modes."""
    print(f"7. stream mode, {sessions} sessions", flush=True)
    args = [*base, "--mode", "stream"]
    after = hosted_run(folder, f"stream-{sessions}", args, True)
    before = hosted_run(folder, f"stream-{sessions}", args, False)
    label = f"stream, {sessions} sessions"
    _row(report, "7", label, after, before, floor, noop_rate)
    _split_rows(report, "7", label, after, floor_ms)
    report.add(Result("7", f"{label}: events/s vs chunk mode", after["events_per_s"],
                      "events/s", "chunk (row 2)", chunked["events_per_s"]))
    report.add(Result("7", f"{label}: CPU per event vs chunk mode",
                      after["cpu_ms_per_event"], "ms", "chunk (row 2)",
                      chunked["cpu_ms_per_event"],
                      note=f"Ray calls/event {after['ray_calls_per_event']} (chunk "
                      f"{chunked['ray_calls_per_event']})"))
    paced_args = ["--sessions", "1000", "--turns", "1", "--chunk-every", "1000"]
    paced = {mode: hosted_run(folder, f"paced-{mode}", [*paced_args, "--mode", mode], True)
             for mode in ("chunk", "stream")}
    lat, was = (paced[m]["append_latency_ms"] for m in ("stream", "chunk"))
    report.add(Result("7", "stream, 1,000 sessions, a chunk a second each: p50", lat["p50"],
                      "ms", "chunk mode, paced alike", was["p50"], "<= 50 ms",
                      lat["p50"] <= 50,
                      note=f"p99 {lat['p99']} ms (chunk {was['p99']}); CPU/event "
                      f"{paced['stream']['cpu_ms_per_event']} ms (chunk "
                      f"{paced['chunk']['cpu_ms_per_event']})"))


REPLICA = "GatewayReplica"
"""The gateway replica's kind in a run's ``cpu_s_by_process`` (its actor class,
``gateway.ingress.GatewayReplica``)."""


def _direct_rows(report: Report, section: str, label: str, direct: dict[str, Any],
                 fastapi: dict[str, Any]) -> None:
    """A ``--via http`` run with the direct routes against one with FastAPI for every
    route: the replica's CPU per event is its share of the run's (``REPLICA`` in the
    report's ``cpu_s_by_process``, over the same window as ``cpu_s``)."""
    def replica_ms(run: dict[str, Any]) -> float:
        return float(1000 * run["cpu_s_by_process"][REPLICA] / run["events"])

    versus = "FastAPI for every route"
    report.add(Result(section, f"{label}: replica CPU per event, direct routes",
                      replica_ms(direct), "ms", versus, replica_ms(fastapi)))
    report.add(Result(section, f"{label}: events/s, direct routes", direct["events_per_s"],
                      "events/s", versus, fastapi["events_per_s"]))
    report.add(Result(section, f"{label}: p50, direct routes",
                      direct["append_latency_ms"]["p50"], "ms", versus,
                      fastapi["append_latency_ms"]["p50"]))
    report.add(Result(section, f"{label}: CPU per event (every process), direct routes",
                      direct["cpu_ms_per_event"], "ms", versus, fastapi["cpu_ms_per_event"]))


def direct_pairs(folder: str, pairs: int, sessions: int = 50, turns: int = 30) -> Report:
    """``pairs`` alternating pairs of ``surfacelog run --via http --mode batch``: the
    gateway's direct routes on and off (``SURFACELOG_GATEWAY_DIRECT``), the order
    swapped in every other pair."""
    report = Report()
    args = ["--sessions", str(sessions), "--turns", str(turns), "--mode", "batch",
            "--via", "http"]
    for k in range(pairs):
        print(f"pair {k + 1}", flush=True)
        runs = {direct: hosted_run(folder, f"pair-{k}", args, True, direct=direct)
                for direct in ((True, False) if k % 2 == 0 else (False, True))}
        _direct_rows(report, f"pair {k + 1}", f"{sessions} sessions x {turns} turns",
                     runs[True], runs[False])
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    parser.add_argument("--direct-pairs", type=int, metavar="N", default=0,
                        help="only N alternating pairs of --via http runs (50 sessions x "
                        "30 turns), the gateway's direct routes on and off")
    args = parser.parse_args(argv)
    # The floors in this process run with the collector setting of the actors'
    # processes, so that each ratio compares the same work done the same way.
    tune_gc()
    with tempfile.TemporaryDirectory(prefix="bench-hosting-") as folder:
        report = (direct_pairs(folder, args.direct_pairs) if args.direct_pairs
                  else run_all(folder, args.quick))
    print()
    print(report.markdown())
    print(JSON_PREFIX + json.dumps([{"section": r.section, "name": r.name, "value": r.value,
                                     "baseline": r.baseline, "ratio": r.ratio}
                                    for r in report.results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
