"""Actor benchmark: sessions as Ray actors, each figure beside a baseline measured in
the same run, printed as a ratio.

    python benchmarks/bench_actors.py [--quick] [--only 1,2] [--packed-max 20000]
                                      [--dedicated 40]

Starts its own local Ray (``num_cpus=2``) and keeps every database in a temporary
directory. Measures:

1. one-event ``append`` round trip through a ``SessionHandle`` (buffered and durable)
   vs a no-op call (``ping``) on the same actor awaited the same way, in alternating
   blocks, medians (target: buffered <= 1.3x);
2. ``append_batch`` events/s into one session, one batch at a time (whole scripted
   turns, ~2k and ~4k events a batch), vs the in-process ``Session.append_batch`` of
   the same batches, and vs the wire's serialisation alone (target >= 100k events/s);
   again with the caller reading every returned event (the client makes them on first
   use, from its own request);
3. ``derive_messages`` latency through Ray at 1k and 100k events vs a no-op call; and
   activating that session again from the store (passivated, then a ``surface()``
   request) vs the in-process ``SqliteEventStore.load`` of it (read, decode, validate);
4. activation time (vs a no-op call, or vs starting an empty actor) and memory (USS,
   from ``actor_stats``) per session, ``dedicated`` and ``packed``, vs an empty actor's
   USS;
5. the most sessions held: ``packed`` activates sessions (one scripted turn each) up to
   ``--packed-max`` (target >= 10,000); ``dedicated`` is an estimate from the USS of
   ``--dedicated`` actors started for it;
6. journal commits/s and events per commit (the journal's counters) with 50 sessions
   appending at once vs one session appending alone;
7. CPU per durable one-event append call, summed over every process of the embedded Ray
   (psutil: driver, session actor, writer, raylet, GCS...), for ``writer="journal"`` and
   ``writer="owner"``, vs the CPU of a no-op call on a bare async actor with an argument
   of the same size (the append request's bytes) and a reply of the ack's size, in
   alternating blocks (target: <= 1.5x); with the share of the driver, the session
   actor and the writer.

The machine's speed drifts (shared cores): the footer prints a pure-Python reference
loop's time before and after, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psutil
import ray

from surfacelog.actors.client import Client, connect, init_ray
from surfacelog.actors.protocol import (
    decode_append,
    encode_append,
    pack_batch,
    unpack_batch,
)
from surfacelog.actors.script import AgentScript, ScriptConfig
from surfacelog.schema.codec import encode_json
from surfacelog.session import AppendSpec, Session
from surfacelog.store.rows import encode_batch

MB = 1024 * 1024
CHUNK = {"type": "text-delta", "index": 0, "text": "Surface log event "}


# -- results -------------------------------------------------------------------------------


@dataclass
class Result:
    """One figure beside its baseline. ``ratio`` = value / baseline."""

    section: str
    name: str
    value: float
    unit: str
    baseline_name: str = ""
    baseline: float | None = None
    target: str = ""
    ok: bool | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)

    def add(self, result: Result) -> Result:
        self.results.append(result)
        print(f"  {result.name}: {_fmt(result.value)} {result.unit}"
              + (f"  | {result.baseline_name}: {_fmt(result.baseline)} -> ratio "
                 f"{_ratio(result.ratio)}" if result.ratio is not None else "")
              + (f"  [{result.target}: {'ok' if result.ok else 'FAIL'}]"
                 if result.target else "")
              + (f"  ({result.note})" if result.note else ""), flush=True)
        return result

    def markdown(self) -> str:
        lines = ["| # | figure | value | baseline (same run) | ratio | target | notes |",
                 "|---|---|---:|---|---:|---|---|"]
        for r in self.results:
            base = "" if r.baseline is None else f"{r.baseline_name}: {_fmt(r.baseline)}"
            ratio = _ratio(r.ratio)
            target = "" if not r.target else f"{r.target} {'ok' if r.ok else '**FAIL**'}"
            lines.append(f"| {r.section} | {r.name} | {_fmt(r.value)} {r.unit} | {base} "
                         f"| {ratio} | {target} | {r.note} |")
        return "\n".join(lines)


def _ratio(x: float | None) -> str:
    if x is None:
        return ""
    return f"1/{1 / x:,.0f}" if 0 < x < 0.01 else f"{x:.2f}x"


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def _median_us(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1e6


# -- realistic events ------------------------------------------------------------------------


def turn_specs(script: AgentScript, turn: int, base: int) -> list[AppendSpec]:
    """The events of one scripted turn as one list, with the seqs its
    ``assistant/message`` and ``tool/result`` events cite computed from ``base`` (the
    session length when the list is appended)."""
    cfg = script.config
    specs = list(script.turn_open(turn))
    seq = base + len(specs)
    for step in range(1, cfg.steps + 1):
        stream = script.stream(turn, step, step == cfg.steps)
        specs.append(script.step_start(turn, step))
        seq += 1
        chunk_seqs = list(range(seq, seq + len(stream.chunks)))
        specs += stream.chunks
        seq += len(stream.chunks)
        specs.append(script.message(turn, step, stream, chunk_seqs))
        seq += 1
        call_seqs = []
        for call in stream.calls:
            specs.append(script.tool_call(turn, step, call))
            call_seqs.append(seq)
            seq += 1
        for call, call_seq in zip(stream.calls, call_seqs, strict=True):
            specs.append(script.tool_result(turn, step, call, call_seq))
            seq += 1
        specs.append(script.step_end(turn, step))
        seq += 1
    specs.append(script.turn_end(turn))
    return specs


class Batches:
    """Whole scripted turns cut into batches of at least ``size`` events, for a session
    that holds ``start`` events when the first batch is appended."""

    def __init__(self, session_id: str, size: int, config: ScriptConfig | None = None,
                 start: int = 0) -> None:
        self.script = AgentScript(session_id, config or ScriptConfig())
        self.size = size
        self.turn = 0
        self.length = start

    def next(self) -> list[AppendSpec]:
        batch: list[AppendSpec] = []
        while len(batch) < self.size:
            self.turn += 1
            batch += turn_specs(self.script, self.turn, self.length + len(batch))
        self.length += len(batch)
        return batch

    def take(self, events: int) -> list[list[AppendSpec]]:
        out: list[list[AppendSpec]] = []
        total = 0
        while total < events:
            out.append(self.next())
            total += len(out[-1])
        return out


# -- hosts ---------------------------------------------------------------------------------


def open_host(tmp: str, name: str, placement: str, durability: str, packs: int = 2,
              **kw: Any) -> Client:
    return connect(db=os.path.join(tmp, f"{name}.db"), placement=placement,  # type: ignore[arg-type]
                   durability=durability, packs=packs,  # type: ignore[arg-type]
                   idle_timeout_s=None, **kw)


def drop_host(host: Client) -> None:
    """Kill the host's actors and journal without flushing (benchmark data only)."""
    for actor in host._actors.values():
        ray.kill(actor, no_restart=True)
    ray.kill(host.writer, no_restart=True)
    host._actors.clear()


async def timed(fn: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t0)
    return out


async def interleaved(a: Callable[[], Awaitable[Any]], b: Callable[[], Awaitable[Any]],
                      n: int, block: int = 50) -> tuple[list[float], list[float]]:
    """``n`` sequential calls of each, alternating in blocks so drift hits both."""
    xs: list[float] = []
    ys: list[float] = []
    while len(xs) < n:
        xs += await timed(a, block)
        ys += await timed(b, block)
    return xs, ys


# -- 1. one-event append round trip ------------------------------------------------------


async def bench_append_rtt(tmp: str, report: Report, n: int = 2000,
                           placement: str = "dedicated", block: int = 50) -> None:
    """``n`` pings and ``n`` appends, alternating in blocks of ``block`` (after a warm-up
    of ``min(n, 200)`` of each), per durability."""
    for durability in ("buffered", "durable"):
        host = open_host(tmp, f"rtt-{durability}", placement, durability)
        try:
            handle = host.session(f"rtt-{durability}")
            await handle.append("turn/start", {"turn": 1})
            actor = await host.actor(handle.session_id)
            data = {"turn": 1, "step": 1, "chunk": CHUNK}

            async def ping(actor: Any = actor) -> None:
                await actor.ping.remote()

            async def append(handle: Any = handle, data: Any = data) -> None:
                await handle.append("assistant/chunk", data)

            await interleaved(ping, append, min(n, 200), block)  # warm up
            pings, appends = await interleaved(ping, append, n, block)
            base = _median_us(pings)
            ok = None if durability == "durable" else _median_us(appends) <= 1.3 * base
            report.add(Result("1", f"append round trip, {durability}",
                              _median_us(appends), "us", "no-op call (ping)", base,
                              "<= 1.3x" if durability == "buffered" else "", ok,
                              f"median of {len(appends)}, {placement}"))
        finally:
            drop_host(host)


# -- 2. append_batch throughput ------------------------------------------------------------


def _wire_rate(session_id: str, before: Sequence[list[AppendSpec]],
               batches: Sequence[list[AppendSpec]]) -> float:
    """Events/s of only what the wire does to ``batches``: encode the request, decode
    it, encode the logged events to rows and pack them for the journal, unpack them as
    the journal does (all in this process; ``before`` are the batches appended
    earlier). The reply is two integers."""
    session = Session()
    for b in before:
        session.append_batch(b)
    logged = [session.append_batch(b) for b in batches]
    t0 = time.perf_counter()
    for specs, events in zip(batches, logged, strict=True):
        request = encode_append(session_id, specs, None)
        assert request is not None
        decode_append(request)
        unpack_batch(pack_batch(encode_batch(session_id, events)))
    return sum(len(b) for b in batches) / (time.perf_counter() - t0)


async def bench_append_batch(tmp: str, report: Report, batch: int = 2048,
                             events: int = 30_000, reps: int = 5,
                             placement: str = "dedicated",
                             durabilities: Sequence[str] = ("buffered", "durable"),
                             read: bool = False) -> None:
    """``reps`` rounds of ``events`` events in batches of ~``batch`` into one session,
    one ``append_batch`` at a time; each round beside the in-process
    ``Session.append_batch`` of the same batches (on a session in the same state).
    ``read``: the caller also makes every returned event (``to_list``), which the client
    otherwise does only on first use."""
    for durability in durabilities:
        sid = f"batch-{durability}-{batch}{'-read' if read else ''}"
        host = open_host(tmp, sid, placement, durability)
        try:
            gen = Batches(sid, batch)
            warm = gen.take(batch * 2)
            rounds = [gen.take(events) for _ in range(reps)]
            handle = host.session(sid)
            core = Session()
            for specs in warm:
                await handle.append_batch(specs)
                core.append_batch(specs)
            await handle.flush()
            rates, core_rates, flushes = [], [], []
            for batches in rounds:
                total = sum(len(b) for b in batches)
                # The pre-built input is not part of the measurement: keep the collector
                # from scanning it over and over.
                gc.collect()
                gc.freeze()
                t0 = time.perf_counter()
                for specs in batches:
                    logged = await handle.append_batch(specs)
                    if read:
                        logged.to_list()
                rates.append(total / (time.perf_counter() - t0))
                t1 = time.perf_counter()
                await handle.flush()
                flushes.append(time.perf_counter() - t1)
                t0 = time.perf_counter()
                for specs in batches:
                    core.append_batch(specs)
                core_rates.append(total / (time.perf_counter() - t0))
                gc.unfreeze()
            rate, core_rate = statistics.median(rates), statistics.median(core_rates)
            count = sum(len(b) for b in rounds[0])
            # The target is for buffered appends whose caller reads the seqs only.
            buffered = durability == "buffered" and not read
            what = ", every event read" if read else ""
            report.add(Result("2", f"append_batch, {durability}, ~{batch}-event batches{what}",
                              rate, "events/s", "in-process Session.append_batch",
                              core_rate, ">= 100k/s" if buffered else "",
                              rate >= 100_000 if buffered else None,
                              f"median of {reps} rounds of {count:,} events, best "
                              f"{max(rates):,.0f}; flush after a round: "
                              f"{statistics.median(flushes) * 1000:.0f} ms"))
            if buffered:
                report.add(Result("2", "wire alone (request encode+decode, rows pack+unpack)",
                                  _wire_rate(sid, warm, rounds[0]), "events/s",
                                  "in-process Session.append_batch", core_rate,
                                  note="the serialisation floor of the Ray path"))
        finally:
            drop_host(host)


# -- 3. derive_messages through Ray ---------------------------------------------------------


async def bench_derive(tmp: str, report: Report, sizes: Sequence[int] = (1_000, 100_000),
                       placement: str = "dedicated", calls: int | None = None,
                       reactivations: int | None = None) -> None:
    """Per size: ``calls`` derives and pings (default 200, 20 past 10k events) and
    ``reactivations`` passivate-and-activate rounds (default 10, 3 past 10k events)."""
    host = open_host(tmp, "derive", placement, "buffered")
    try:
        for size in sizes:
            handle = host.session(f"derive-{size}")
            gen = Batches(handle.session_id, min(2048, size))
            batches = gen.take(size)
            for specs in batches:
                await handle.append_batch(specs)
            length = (await handle.surface()).length
            actor = await host.actor(handle.session_id)

            async def ping(actor: Any = actor) -> None:
                await actor.ping.remote()

            async def derive(handle: Any = handle) -> None:
                await handle.derive_messages()

            n = calls if calls is not None else 200 if size <= 10_000 else 20
            await interleaved(ping, derive, 10, block=5)
            pings, derives = await interleaved(ping, derive, n, block=min(n, 20))
            messages = len(await handle.derive_messages())
            report.add(Result("3", f"derive_messages at {length:,} events",
                              _median_us(derives), "us", "no-op call (ping)",
                              _median_us(pings), note=f"{messages:,} messages returned"))
            reps = reactivations if reactivations is not None else 3 if size > 10_000 else 10
            await bench_reactivation(host, handle, report, length, reps=reps)
    finally:
        drop_host(host)


async def bench_reactivation(host: Client, handle: Any, report: Report, length: int,
                             reps: int) -> None:
    """Passivate the session and time the request that activates it again (journal
    read, rows to the session actor, decode, validate, seed marker) beside the
    in-process ``load`` of the same file, alternating."""
    from surfacelog.store.sqlite import SqliteEventStore

    await handle.flush()
    activations, loads = [], []
    for _ in range(reps):
        await handle.passivate()
        t0 = time.perf_counter()
        await handle.surface()
        activations.append(time.perf_counter() - t0)
        store = await SqliteEventStore.open(host.db, create=False)
        try:
            t0 = time.perf_counter()
            await store.load(handle.session_id)
            loads.append(time.perf_counter() - t0)
        finally:
            await store.close()
    report.add(Result("3", f"activation of a stored session of {length:,} events",
                      statistics.median(activations) * 1000, "ms",
                      "in-process SqliteEventStore.load", statistics.median(loads) * 1000,
                      note=f"passivated, then surface(); median of {reps}"))


# -- 4/5. activation and memory --------------------------------------------------------------


async def empty_actor_baseline(tmp: str, n: int = 5) -> tuple[float, float]:
    """An empty session actor (no session): its USS, and the time from creating it
    to the answer of its first call (a new worker process), medians of ``n`` started
    one after another."""
    from surfacelog.actors.session_actor import RemoteSessionActor

    host = open_host(tmp, "empty", "packed", "buffered")
    actors = []
    starts = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            actor = RemoteSessionActor.options(num_cpus=0).remote(
                host.config, host.config.shards.names[0])
            actors.append(actor)
            await actor.ping.remote()
            starts.append(time.perf_counter() - t0)
        stats = await asyncio.gather(*(a.actor_stats.remote() for a in actors))
        return float(statistics.median(s.uss_bytes for s in stats)), statistics.median(starts)
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
        drop_host(host)


async def bench_dedicated(tmp: str, report: Report, empty: tuple[float, float],
                          sequential: int = 12, concurrent: int = 36) -> None:
    """``sequential`` actors activated one after another (cold: a worker process is
    started for each), then ``concurrent`` more at once; USS per actor process."""
    empty_uss, empty_start = empty
    host = open_host(tmp, "dedicated", "dedicated", "buffered")
    try:
        script = AgentScript("x", ScriptConfig())
        cold = []
        for k in range(sequential):
            t0 = time.perf_counter()
            await host.session(f"ded-{k}").append_batch(script.turn_open(1))
            cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await asyncio.gather(*(host.session(f"ded-{k}").append_batch(script.turn_open(1))
                               for k in range(sequential, sequential + concurrent)))
        wave = time.perf_counter() - t0
        ids = [f"ded-{k}" for k in range(sequential + concurrent)]
        inner = [(await host.session(s).stats()).activation_ms for s in ids]
        stats = await host.actor_stats()
        uss = statistics.median(s.uss_bytes for s in stats)  # type: ignore[type-var]
        rss = statistics.median(s.rss_bytes for s in stats)
        report.add(Result("4", "dedicated: activation, cold (new actor process)",
                          statistics.median(cold) * 1000, "ms",
                          "empty actor: start + first call", empty_start * 1000,
                          note=f"median of {sequential} sequential; "
                               f"{concurrent} at once took {wave:.1f} s "
                               f"({wave / max(concurrent, 1) * 1000:.0f} ms/actor); "
                               f"store load/create inside the actor: "
                               f"{statistics.median(inner):.1f} ms"))
        report.add(Result("4", "dedicated: USS per actor (1 session)", uss / MB, "MB",
                          "empty actor USS", empty_uss / MB,
                          note=f"median of {len(stats)} processes; RSS {rss / MB:.0f} MB"))
        avail = psutil.virtual_memory().available
        estimate = int((avail + uss * len(stats)) * 0.8 / uss)
        report.add(Result("5", "dedicated: sessions held (estimate)", estimate, "sessions",
                          note=f"estimate: 80% of available memory ({avail / 2**30:.1f} GiB "
                               f"free with {len(stats)} actors up) / {uss / MB:.0f} MB USS "
                               f"per actor; measured {len(stats)} actors"))
    finally:
        drop_host(host)


def _template_turns(count: int = 8) -> list[list[AppendSpec]]:
    """A few scripted first turns (``turn_specs`` at seq 0) to give sessions a
    realistic log without generating text for each of thousands of sessions."""
    return [turn_specs(AgentScript(f"template-{k}", ScriptConfig()), 1, 0)
            for k in range(count)]


async def bench_packed(tmp: str, report: Report, empty: tuple[float, float],
                       maximum: int = 20_000, packs: int = 2, wave: int = 500,
                       checkpoints: Sequence[int] = (2_000, 10_000, 20_000),
                       reserve_bytes: int = 4 << 30, budget_s: float = 900.0,
                       sequential: int = 50) -> None:
    """Activate sessions, each given one scripted turn, in concurrent waves until
    ``maximum`` (or the memory reserve or the time budget is reached); the pack actors'
    USS at each checkpoint."""
    empty_uss = empty[0]
    host = open_host(tmp, "packed", "packed", "buffered", packs=packs)
    try:
        turns = _template_turns()
        turn_events = statistics.mean(len(t) for t in turns)
        turn_kb = statistics.mean(len(encode_json([s.data for s in t])) for t in turns) / 1024
        # Resolve every pack actor first: their empty USS is the baseline.
        k = 0
        while len(host._actors) < packs:
            await host.actor(f"probe-{k}")
            k += 1
        base = sum(s.uss_bytes for s in await host.actor_stats())  # type: ignore[misc]
        # One after another: per-session activation latency.
        lat = []
        for k in range(sequential):
            t0 = time.perf_counter()
            await host.session(f"p-{k}").append_batch(turns[k % len(turns)])
            lat.append(time.perf_counter() - t0)
        # Passivated and activated again: the load path (read, validate, repair).
        for k in range(sequential):
            await host.session(f"p-{k}").passivate()
        reload = []
        for k in range(sequential):
            t0 = time.perf_counter()
            await host.session(f"p-{k}").surface()
            reload.append(time.perf_counter() - t0)
        actor = await host.actor("p-0")
        pings = await timed(lambda: actor.ping.remote(), max(sequential, 20))
        held = sequential
        started = time.perf_counter()
        rate = 0.0
        marks = sorted(set(checkpoints) | {maximum})
        points: list[tuple[int, float]] = [(0, float(base))]
        stopped = ""
        while held < maximum:
            n = min(wave, maximum - held)
            await asyncio.gather(*(host.session(f"p-{held + j}").append_batch(
                turns[(held + j) % len(turns)]) for j in range(n)))
            held += n
            elapsed = time.perf_counter() - started
            rate = (held - sequential) / elapsed
            if marks and held >= marks[0]:
                while marks and held >= marks[0]:
                    marks.pop(0)
                stats = await host.actor_stats()
                uss = float(sum(s.uss_bytes for s in stats))  # type: ignore[misc]
                active = sum(s.active_sessions for s in stats)
                (n0, u0) = points[-1]
                points.append((active, uss))
                report.add(Result(
                    "4", f"packed: USS per added session, {n0:,} -> {active:,}",
                    (uss - u0) / (active - n0) / 1024, "KB", "empty actor USS (KB)",
                    empty_uss / 1024,
                    note=f"{packs} pack actors, {uss / MB:,.0f} MB USS in all; each session "
                         f"holds one scripted turn ({turn_events:.0f} events, "
                         f"{turn_kb:.0f} KB of JSON data)"))
            if psutil.virtual_memory().available < reserve_bytes:
                stopped = "the memory reserve"
                break
            if time.perf_counter() - started > budget_s:
                stopped = "the time budget"
                break
        ping_ms = statistics.median(pings) * 1000
        report.add(Result("4", "packed: activation of a new session",
                          statistics.median(lat) * 1000, "ms", "no-op call (ping)", ping_ms,
                          note=f"create + first append_batch (one turn), median of "
                               f"{sequential} one after another; in waves of {wave} at "
                               f"once: {1000 / rate if rate else 0:.2f} ms/session "
                               f"({rate:,.0f} sessions/s)"))
        report.add(Result("4", "packed: activation of a stored session",
                          statistics.median(reload) * 1000, "ms", "no-op call (ping)",
                          ping_ms, note="passivated, then a surface() request: load, "
                                        f"validate, seed marker; median of {sequential}"))
        stats = await host.actor_stats()
        active = sum(s.active_sessions for s in stats)
        uss = float(sum(s.uss_bytes for s in stats))  # type: ignore[misc]
        avail = psutil.virtual_memory().available
        per = (uss - base) / max(active, 1)
        estimate = active + int(avail * 0.8 / per) if per > 0 else active
        checked = maximum >= 10_000
        report.add(Result("5", "packed: sessions held", active, "sessions",
                          target=">= 10,000" if checked else "",
                          ok=active >= 10_000 if checked else None,
                          note=f"measured, {packs} actors, stopped at "
                               f"{stopped or f'--packed-max {maximum:,}'}; "
                               f"{avail / 2**30:.1f} GiB still available: about "
                               f"{estimate:,} would fit (80% of it at {per / 1024:.0f} KB "
                               "per session, an estimate)"))
    finally:
        drop_host(host)


# -- 6. journal group commit -------------------------------------------------------------


async def _journal_run(host: Client, ids: Sequence[str], rounds: int, step_events: int
                       ) -> tuple[float, dict[str, Any], dict[str, Any], int]:
    config = ScriptConfig(steps=1, tool_calls=1)
    handles = [host.session(sid) for sid in ids]
    # Activate every session first (seq 0), then the measured turns follow.
    await asyncio.gather(*(h.append("session/title", {"title": h.session_id})
                           for h in handles))
    plans = {sid: [Batches(sid, step_events, config, start=1).next() for _ in range(rounds)]
             for sid in ids}
    await host.flush()
    before = await host.writer_stats()

    async def drive(handle: Any, specs: list[list[AppendSpec]]) -> None:
        for batch in specs:
            await handle.append_batch(batch)

    t0 = time.perf_counter()
    await asyncio.gather(*(drive(h, plans[h.session_id]) for h in handles))
    for h in handles:
        await h.flush()
    elapsed = time.perf_counter() - t0
    after = await host.writer_stats()
    events = sum(sum(len(b) for b in p) for p in plans.values())
    return elapsed, before, after, events


async def bench_journal(tmp: str, report: Report, sessions: int = 50, rounds: int = 20,
                        step_events: int = 1, placement: str = "packed") -> None:
    """``sessions`` sessions each append ``rounds`` batches (one scripted turn, ~``step_events``
    events or more) durably at once; commits/s and events/commit from the journal's
    counters, beside one session doing the same alone first, on the same journal (its
    counters read before and after each run)."""
    for durability in ("durable", "buffered"):
        results = {}
        host = open_host(tmp, f"journal-{durability}", placement, durability, packs=2)
        try:
            for count in (1, sessions):
                ids = [f"j{count}-{k}" for k in range(count)]
                results[count] = await _journal_run(host, ids, rounds, step_events)
        finally:
            drop_host(host)
        figures = {}
        for count, (elapsed, before, after, events) in results.items():
            commits = after["commits"] - before["commits"]
            written = after["events"] - before["events"]
            figures[count] = (commits / elapsed, written / max(commits, 1),
                              events / elapsed)
        one, many = figures[1], figures[sessions]
        report.add(Result("6", f"journal commits/s, {sessions} sessions, {durability}",
                          many[0], "commits/s", "1 session alone", one[0],
                          note=f"{placement}; {many[1]:.1f} events/commit "
                               f"(alone: {one[1]:.1f}); {many[2]:,.0f} events/s in all "
                               f"(alone: {one[2]:,.0f})"))
        report.add(Result("6", f"events per commit, {sessions} sessions, {durability}",
                          many[1], "events", "1 session alone", one[1]))


# -- 7. CPU per durable append call -------------------------------------------------------


def sink_actor() -> Any:
    """A bare async actor class: the baseline of a Ray call that carries bytes and does
    nothing. (Made here so that Ray ships it by value: workers cannot import this
    script.)"""

    class Sink:
        def __init__(self, reply_size: int) -> None:
            self._reply = b"\x00" * reply_size

        async def take(self, request: bytes) -> bytes:
            return self._reply

        async def pid(self) -> int:
            return os.getpid()

    return ray.remote(Sink)


def _cpu_all() -> dict[int, float]:
    from surfacelog.cli.loadrun import cpu_by_process

    return cpu_by_process()


async def bench_append_cpu(tmp: str, report: Report, n: int = 2000, block: int = 200,
                           warmup: int = 200) -> None:
    """Sequential durable one-event appends and no-op calls of the same argument size, in
    alternating blocks; CPU of every process of the embedded Ray read (psutil) around
    each block and summed per side. First ``min(n, warmup)`` of each, not measured, in
    blocks of at most 50."""
    from surfacelog.actors.protocol import AppendAck

    data = {"turn": 1, "step": 1, "chunk": CHUNK}
    for writer in ("journal", "owner"):
        sid = f"cpu-{writer}"
        host = open_host(tmp, sid, "packed", "durable", packs=1, writer=writer)
        sink = sink_actor().options(num_cpus=0, max_concurrency=10_000)
        bare = None
        try:
            handle = host.session(sid)
            await handle.append("turn/start", {"turn": 1})
            request = encode_append(sid, (AppendSpec("assistant/chunk", data),), None)
            assert request is not None
            reply = len(msgspec.msgpack.encode(AppendAck(1, time.time_ns() // 10**6)))
            bare = sink.remote(reply)
            actor = await host.actor(sid)
            pids = {"driver": os.getpid(), "session actor": await actor.pid.remote()}
            if writer == "journal":
                pids["journal"] = await host.writer.pid.remote()
            pids["no-op actor"] = await bare.pid.remote()

            async def noop(bare: Any = bare, request: bytes = request) -> None:
                await bare.take.remote(request)

            async def append(handle: Any = handle, data: Any = data) -> None:
                await handle.append("assistant/chunk", data)

            await interleaved(noop, append, min(n, warmup), min(50, warmup))  # warm up
            cpu = {"noop": 0.0, "append": 0.0}
            by_pid: dict[str, float] = {}
            lat: dict[str, list[float]] = {"noop": [], "append": []}
            while len(lat["append"]) < n:
                for side, fn in (("noop", noop), ("append", append)):
                    before = _cpu_all()
                    lat[side] += await timed(fn, block)
                    after = _cpu_all()
                    cpu[side] += sum(t - before.get(pid, 0.0) for pid, t in after.items())
                    for name, pid in pids.items():
                        if (name == "no-op actor") != (side == "noop") and \
                                name != "driver":
                            continue
                        key = f"{side}:{name}"
                        by_pid[key] = by_pid.get(key, 0.0) + \
                            after.get(pid, 0.0) - before.get(pid, 0.0)
            per = {side: cpu[side] / len(lat[side]) * 1e6 for side in cpu}
            count = len(lat["append"])
            def split(side: str, count: int = count, by_pid: dict[str, float] = by_pid,
                      per: dict[str, float] = per) -> tuple[str, float]:
                mine = {k.split(":", 1)[1]: t / count * 1e6 for k, t in by_pid.items()
                        if k.startswith(side + ":")}
                return (", ".join(f"{name} {t:,.0f}" for name, t in mine.items()),
                        per[side] - sum(mine.values()))

            shares, rest = split("append")
            noop_shares, noop_rest = split("noop")
            report.add(Result("7", f"CPU per durable append call, writer {writer}",
                              per["append"], "us", "no-op call, same argument size",
                              per["noop"], "<= 1.5x", per["append"] <= 1.5 * per["noop"],
                              f"every process of the embedded Ray, {count} calls each in "
                              f"alternating blocks of {block}; per append (us): {shares}, "
                              f"the rest (raylet, GCS, other workers) {rest:,.0f}; "
                              f"per no-op call: {noop_shares}, the rest {noop_rest:,.0f}; "
                              f"latency p50 {_median_us(lat['append']):,.0f} us vs "
                              f"{_median_us(lat['noop']):,.0f}; request {len(request)} B"))
        finally:
            drop_host(host)
            if bare is not None:
                ray.kill(bare, no_restart=True)


# -- main ------------------------------------------------------------------------------------


async def run_all(tmp: str, quick: bool, packed_max: int, dedicated: int,
                  only: set[str] | None = None) -> Report:
    report = Report()

    def wanted(section: str) -> bool:
        return only is None or section in only

    if wanted("1"):
        print("1. one-event append round trip", flush=True)
        await bench_append_rtt(tmp, report, n=300 if quick else 3000)
    if wanted("2"):
        print("2. append_batch throughput", flush=True)
        if quick:
            await bench_append_batch(tmp, report, events=6_000, reps=2)
        else:
            await bench_append_batch(tmp, report, batch=2048)
            await bench_append_batch(tmp, report, batch=2048, durabilities=("buffered",),
                                     read=True)
            await bench_append_batch(tmp, report, batch=4096, events=40_000,
                                     durabilities=("buffered",))
    if wanted("3"):
        print("3. derive_messages through Ray", flush=True)
        await bench_derive(tmp, report, sizes=(1_000, 10_000) if quick else (1_000, 100_000))
    if wanted("4") or wanted("5"):
        print("4/5. activation, memory, sessions held", flush=True)
        empty = await empty_actor_baseline(tmp)
        if quick:
            await bench_dedicated(tmp, report, empty, sequential=3, concurrent=3)
            await bench_packed(tmp, report, empty, maximum=1_000, checkpoints=(500, 1_000),
                               wave=250)
        else:
            await bench_dedicated(tmp, report, empty, sequential=12,
                                  concurrent=max(0, dedicated - 12))
            await bench_packed(tmp, report, empty, maximum=packed_max)
    if wanted("6"):
        print("6. journal group commit", flush=True)
        await bench_journal(tmp, report, sessions=10 if quick else 50,
                            rounds=5 if quick else 20)
    if wanted("7"):
        print("7. CPU per durable append call", flush=True)
        await bench_append_cpu(tmp, report, n=400 if quick else 3000,
                               block=100 if quick else 250)
    return report


def cpu_reference() -> float:
    """Seconds a pure-Python 10M-addition loop takes: how fast this machine is now."""
    t0 = time.perf_counter()
    x = 0
    for i in range(10_000_000):
        x += i
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a minute)")
    parser.add_argument("--packed-max", type=int, default=20_000,
                        help="stop activating packed sessions here (default 20,000)")
    parser.add_argument("--dedicated", type=int, default=40,
                        help="dedicated actors to start for the estimate (default 40)")
    parser.add_argument("--only", default=None,
                        help="comma-separated sections to run (1-7), default all")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # A new local Ray on loopback, never a cluster another process left running.
    init_ray(None, num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-actors-") as tmp:
            t0 = time.perf_counter()
            spin = cpu_reference()
            load = os.getloadavg()
            only = None if args.only is None else set(args.only.split(","))
            report = asyncio.run(run_all(tmp, args.quick, args.packed_max, args.dedicated,
                                         only))
            print(f"\n{report.markdown()}\n\n({time.perf_counter() - t0:.0f} s; "
                  f"python {sys.version.split()[0]}, ray {ray.__version__}, "
                  f"{os.cpu_count()} cores; CPU reference: 10M-add loop {spin:.2f} s before, "
                  f"{cpu_reference():.2f} s after; load average {load[0]:.1f} before, "
                  f"{os.getloadavg()[0]:.1f} after)")
    finally:
        ray.shutdown()
    failed = [r for r in report.results if r.ok is False]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
