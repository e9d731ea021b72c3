"""Benchmark of the pure core: folding a log and appending with a derived history.

Run ``.venv/bin/python benchmarks/bench_surface.py [--quick]``.

Every figure is printed beside a baseline measured in the same run, and the headline
numbers are ratios, because the machines this runs on are small and noisy:

(a) ``fold_surface`` over a realistic generated log (100k and 1M events) beside the time
    to merely ``decode_log`` the same JSONL bytes, plus ``replay`` + ``derive_messages``.
(b) one ``Session.append`` of a realistic event + ``derive_messages()`` per operation at
    log sizes 1k, 10k, 100k, 1M, beside a naive full rebuild per append (append to a
    plain list, ``fold_surface`` the whole log, project every node from scratch). The
    flatness ratio cost(N) / cost(1k) of the incremental path should stay <= 1.5.
(c) time travel: ``derive_messages(as_of=k)`` at random k of a 100k-event log, resumed
    from the session's surface checkpoints, beside a fresh fold of the prefix and its
    derive (what every call cost before the checkpoints); also the one-off cost of the
    first call, which builds the checkpoints.
(d) what a compactor's and a pruner's pass read from a session (the surface's tokens, its
    tool results over 4,000 characters) after every append of a window, kept by
    ``SurfaceTally``s, beside walking the whole surface for them (what every pass did
    before) at log sizes 1k, 10k, 100k; both must agree.

The log is DSH-shaped and produced by driving a ``Session`` (so it is valid): turns and
steps, 10-20 ``assistant/chunk`` per ``assistant/message`` citing its chunks,
``tool/call`` + ``tool/result`` citing the call, user and plugin-context messages,
log-only plugin events, periodic compactions (``compaction/start``, ``compaction/summary``,
a checkpoint ``user/message`` replacing the oldest range and citing start, summary and
every shadowed node, ``compaction/end``) and tool-result prunes (``compaction/prune`` +
a content-only ``tool/result`` rewrite).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from surfacelog.schema import Event, ReplaceOp, decode_log, encode_log
from surfacelog.session import Session, derive_from_nodes, fold_surface, replay
from surfacelog.session.compaction_policy import (
    measure_result,
    oversized_among,
    oversized_results,
)
from surfacelog.session.pressure import count_tokens
from surfacelog.session.surface import SurfaceTally
from surfacelog.session.tokens import event_tokens

PROVIDER = "deepseek-official"
MODEL = "deepseek-v4-pro"
CONTEXT_WINDOW = 128_000

WORDS = (
    "request", "event", "table", "method", "number", "config", "over", "seq", "under",
    "delta", "patch", "to", "is", "check", "file", "token", "module", "method", "test",
    "header", "block", "in", "log", "cache", "retry", "step", "array", "schema", "next",
    "replace", "because", "after", "message", "the", "output", "but", "result", "commit",
    "from", "call", "then", "branch", "line", "window", "surface", "context", "write",
    "stream", "server", "client", "query", "path", "value", "string", "import", "function",
    "class", "handler", "parse", "export", "update", "object", "column", "summary",
)

TOOLS = ("bash", "read", "edit", "grep")

REQUEST_HEADER = {
    "header": {
        "config": {"provider": PROVIDER, "model": MODEL},
        "system": "You are an AI agent powered by DeepSeek Harness.\n\nYou are a coding "
                  "assistant. Verify your work by running the code or tests.",
        "tools": [
            {"name": name, "description": f"The {name} tool.",
             "parameters": {"type": "object", "properties": {"arg": {"type": "string"}},
                            "required": ["arg"], "additionalProperties": False}}
            for name in TOOLS
        ],
    },
    "reason": "initial",
}


# -- the log generator -------------------------------------------------------------------


@dataclass
class GenStats:
    """What the generator produced (to check the mix is realistic)."""

    turns: int = 0
    steps: int = 0
    assistant_messages: int = 0
    tool_results: int = 0
    compactions: int = 0
    prunes: int = 0
    counts: dict[str, int] = field(default_factory=dict)


PRUNED_PREFIX = "[tool output pruned:"


def _text_chars(event: Event) -> int:
    """Characters of text a surface event puts in front of the model."""
    data = event.data
    message = data if event.type in ("user/message", "context/message") else data["message"]
    total = 0
    for block in message["content"]:
        if block.get("type") == "tool-result":
            total += sum(len(b.get("text", "")) for b in block["content"])
        else:
            total += len(block.get("text", "")) + len(block.get("arguments", ""))
    return total


class LogGenerator:
    """Drives a ``Session`` with DSH-shaped traffic; ``step()`` appends one event.

    Deterministic for a given ``seed``. The traffic itself (turns, steps, chunks, tool
    calls, texts) draws from ``rng`` only; decisions that depend on the session's state
    (what to compact, what to prune, their ids and texts) draw from a second generator,
    so two generators with the same seed driving different sessions produce the same
    traffic. Everything about the surface is read from the session, so a generator can
    continue any valid session (``LogGenerator(replay(prefix), seed=...)``).

    Compaction runs between turns when the surface holds more than ``compact_tokens``
    (estimated as characters / 4); it replaces the oldest nodes (the previous checkpoint
    included, so replaces nest) and keeps about the newest ``keep_fraction`` of the
    surface, cutting only where every tool call before the cut has its result before it.
    After some steps a tool-result pruner rewrites one large old result.
    """

    def __init__(self, session: Session | None = None, *, seed: int = 7,
                 compact_tokens: int = 48_000, keep_fraction: float = 0.2,
                 prune_rate: float = 0.08) -> None:
        self.session = session if session is not None else Session()
        log = self.session.log
        self._time = log[-1].time if len(log) else 1_786_000_000_000
        self.rng = random.Random(seed)
        self.state_rng = random.Random(seed + 1_000_003)
        self.compact_tokens = compact_tokens
        self.keep_fraction = keep_fraction
        self.prune_rate = prune_rate
        self.stats = GenStats()
        self._tokens: dict[int, int] = {}  # cache: surface event seq -> estimated tokens
        self._turn = sum(1 for e in log if e.type == "turn/start")
        self._events = self._run()

    # -- helpers ---------------------------------------------------------------------

    def _id(self, rng: random.Random | None = None) -> str:
        return str(uuid.UUID(int=(rng or self.rng).getrandbits(128)))

    def _words(self, n: int, rng: random.Random | None = None) -> str:
        return " ".join((rng or self.rng).choices(WORDS, k=n))

    def _append(self, etype: str, data: Any, **kw: Any) -> Event:
        self._time += 7
        event = self.session.append(etype, data, time=self._time, **kw)
        counts = self.stats.counts
        counts[etype] = counts.get(etype, 0) + 1
        return event

    def _node_tokens(self, seq: int) -> int:
        tokens = self._tokens.get(seq)
        if tokens is None:
            tokens = self._tokens[seq] = max(1, _text_chars(self.session.event(seq)) // 4)
        return tokens

    def step(self) -> Event:
        """Append the next event and return it."""
        return next(self._events)

    def generate(self, n: int) -> None:
        """Append until the log holds ``n`` events."""
        session, events = self.session, self._events
        while len(session) < n:
            next(events)

    # -- the traffic -------------------------------------------------------------------

    def _run(self) -> Iterator[Event]:
        while True:
            yield from self._turn_events()
            nodes = self.session.surface.nodes
            if sum(self._node_tokens(s) for s in nodes) > self.compact_tokens:
                yield from self._compaction()

    def _turn_events(self) -> Iterator[Event]:
        rng = self.rng
        self._turn += 1
        turn = self._turn
        self.stats.turns += 1
        text = self._words(rng.randint(5, 60))
        user_msg = {"id": self._id(), "role": "user", "source": {"kind": "user"},
                    "content": [{"type": "text", "text": text}]}
        if rng.random() < 0.3:
            yield self._append("agent/inbox/spliced",
                               {"target": "next-turn", "start": 0, "inserted": [user_msg]})
        yield self._append("turn/start", {"turn": turn})
        yield self._append("step/start", {"turn": turn, "step": 1})
        e = self._append("user/message", user_msg, surface_op="append")
        yield e
        if rng.random() < 0.05:
            yield self._append("session/title", {"title": text[:40], "messageSeqs": [e.seq],
                                                 "source": {"kind": "fallback"}})
        if rng.random() < 0.15:
            ctx = f"Current DSH file policy: {self._words(12)}"
            yield self._append("user/message", {
                "id": self._id(), "role": "user",
                "source": {"kind": "plugin", "plugin": "@deepseek-ai/dsh-system-prompt",
                           "form": "snapshot",
                           "sections": [{"name": "sandbox:policy", "text": ctx}]},
                "content": [{"type": "text", "text": ctx}]}, surface_op="append")
        if rng.random() < 0.1:
            yield self._append("request/header", REQUEST_HEADER)
        n_steps = rng.choice((1, 2, 2, 3, 3, 4, 5, 6))
        for step in range(1, n_steps + 1):
            self.stats.steps += 1
            if step > 1:
                yield self._append("step/start", {"turn": turn, "step": step})
            yield self._append("request/context", {"provider": PROVIDER, "model": MODEL,
                                                   "contextWindow": CONTEXT_WINDOW})
            yield from self._model_step(turn, step, last=step == n_steps)
            yield self._append("step/end", {"turn": turn, "step": step})
            if rng.random() < 0.04:
                yield self._append("todo/write", {"todos": [
                    {"content": self._words(4), "status": "pending"} for _ in range(3)]})
            if rng.random() < self.prune_rate:
                yield from self._prune()
        reason: dict[str, Any] = {"kind": "completed"}
        if rng.random() < 0.03:
            reason = {"kind": "aborted", "reason": {"kind": "user"}}
        yield self._append("turn/end", {"turn": turn, "reason": reason})

    def _model_step(self, turn: int, step: int, *, last: bool) -> Iterator[Event]:
        rng = self.rng
        base = {"turn": turn, "step": step}
        chunk_seqs: list[int] = []
        blocks: list[dict[str, Any]] = []

        def chunk(c: dict[str, Any]) -> Event:
            e = self._append("assistant/chunk", {**base, "chunk": c})
            chunk_seqs.append(e.seq)
            return e

        def streamed(kind: str, min_parts: int, max_parts: int) -> Iterator[Event]:
            """A text or reasoning block streamed as deltas, then closed."""
            index = len(blocks)
            parts = [self._words(rng.randint(1, 4))
                     for _ in range(rng.randint(min_parts, max_parts))]
            yield chunk({"type": "block-start", "index": index, "blockType": kind})
            for part in parts:
                yield chunk({"type": f"{kind}-delta", "index": index, "text": " " + part})
            block = {"type": kind, "text": "".join(" " + p for p in parts)}
            yield chunk({"type": "block-end", "index": index, "block": block})
            blocks.append(block)

        if rng.random() < 0.6:
            yield from streamed("reasoning", 2, 6)
        n_calls = 0 if last else rng.choice((1, 1, 1, 2, 3))
        if n_calls == 0 or rng.random() < 0.3:
            yield from streamed("text", 3, 9)
        calls: list[dict[str, Any]] = []
        for _ in range(n_calls):
            index = len(blocks)
            call_id = f"call_{index:02d}_{rng.getrandbits(96):024x}"
            name = rng.choice(TOOLS)
            arguments = '{"arg":"' + self._words(rng.randint(2, 8)) + '"}'
            pieces = [arguments[k:k + 12] for k in range(0, len(arguments), 12)][:4]
            pieces[-1] += arguments[12 * len(pieces):]
            yield chunk({"type": "block-start", "index": index, "blockType": "tool-call"})
            for k, piece in enumerate(pieces):
                delta: dict[str, Any] = {"type": "tool-call-delta", "index": index,
                                         "id": call_id, "argumentsDelta": piece}
                if k == 0:
                    delta["name"] = name
                yield chunk(delta)
            block = {"type": "tool-call", "id": call_id, "name": name,
                     "arguments": arguments}
            yield chunk({"type": "block-end", "index": index, "block": block})
            blocks.append(block)
            calls.append(block)
        usage = {"inputTokens": rng.randint(1000, 90_000), "outputTokens": rng.randint(10, 3000)}
        yield chunk({"type": "usage", "usage": usage})
        yield chunk({"type": "finish",
                     "reason": {"kind": "tool-calls" if calls else "stop"}})
        yield self._append("assistant/message", {
            **base,
            "message": {"id": self._id(), "role": "assistant",
                        "source": {"kind": "model", "provider": PROVIDER, "model": MODEL},
                        "content": blocks},
            "usage": usage,
        }, surface_op="append", source_event_seqs=chunk_seqs)
        self.stats.assistant_messages += 1
        call_seqs = []
        for call in calls:
            e = self._append("tool/call", {**base, "callId": call["id"], "name": call["name"],
                                           "arguments": call["arguments"]})
            call_seqs.append(e.seq)
            yield e
        for call, call_seq in zip(calls, call_seqs, strict=True):
            n_lines = min(400, int(rng.lognormvariate(2.5, 1.0)) + 1)
            text = "\n".join(f"{i:6d}\t{self._words(rng.randint(2, 10))}"
                             for i in range(n_lines))
            yield self._append("tool/result", {
                **base,
                "message": {"id": self._id(), "role": "user",
                            "source": {"kind": "tool", "callId": call["id"]},
                            "content": [{"type": "tool-result", "toolCallId": call["id"],
                                         "content": [{"type": "text", "text": text}],
                                         "isError": False}]},
            }, surface_op="append", source_event_seqs=[call_seq])
            self.stats.tool_results += 1

    def _prune(self) -> Iterator[Event]:
        session = self.session
        nodes = session.surface.nodes
        candidates = []
        for seq in nodes[:-6]:
            event = session.event(seq)
            if event.type == "tool/result" and self._node_tokens(seq) > 400:
                candidates.append(seq)
        if not candidates:
            return
        target = self.state_rng.choice(candidates)
        original = session.event(target)
        tokens = self._node_tokens(target)
        p = self._append("compaction/prune", {
            "shadowedRange": {"start": target, "end": target}, "shadowedSeqs": [target],
            "shadowedTokenCount": tokens})
        yield p
        data = original.data
        message = data["message"]
        block = dict(message["content"][0])
        block["content"] = [{"type": "text", "text": f"{PRUNED_PREFIX} {tokens} tokens]"}]
        new_data = {**data, "message": {**message, "content": [block]}}
        yield self._append("tool/result", new_data,
                           surface_op={"op": "replace", "start": target, "end": target},
                           source_event_seqs=[p.seq, target])
        self.stats.prunes += 1

    def _safe_cuts(self, nodes: Sequence[int]) -> list[bool]:
        """For each node: may a compaction range end right after it (no tool call open)?"""
        open_calls: set[str] = set()
        out = []
        for seq in nodes:
            event = self.session.event(seq)
            if event.type == "assistant/message":
                open_calls.update(b["id"] for b in event.data["message"]["content"]
                                  if b.get("type") == "tool-call")
            elif event.type == "tool/result":
                open_calls.discard(event.data["message"]["source"]["callId"])
            out.append(not open_calls)
        return out

    def _compaction(self) -> Iterator[Event]:
        rng = self.state_rng
        nodes = list(self.session.surface.nodes)
        safe = self._safe_cuts(nodes)
        last = len(nodes) - max(2, int(len(nodes) * self.keep_fraction)) - 1
        while last >= 0 and not safe[last]:
            last -= 1
        if last < 1:
            return
        shadowed = nodes[:last + 1]
        tokens = sum(self._node_tokens(s) for s in shadowed)
        cid = self._id(rng)
        start = self._append("compaction/start", {"compactionId": cid, "turn": None})
        yield start
        summary_text = ("## Primary Request and Intent\n- " + self._words(30, rng)
                        + "\n\n## Current Work\n- " + self._words(40, rng)
                        + "\n\n## Next Step\n- " + self._words(20, rng))
        summary = [{"type": "text", "text": summary_text}]
        summ = self._append("compaction/summary", {
            "compactionId": cid, "summary": summary, "rawOutput": summary,
            "llmStreamCall": True,
            "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
            "shadowedSeqs": shadowed, "shadowedTokenCount": tokens,
            "provider": PROVIDER, "model": MODEL, "maxTokens": 8192,
            "usage": {"inputTokens": tokens, "outputTokens": len(summary_text) // 4}})
        yield summ
        yield self._append("user/message", {
            "id": self._id(rng), "role": "user",
            "source": {"kind": "plugin", "plugin": "compact", "compactionId": cid},
            "content": [
                {"type": "text", "text": "Checkpoint: a condensed account of an earlier "
                                         "part of this conversation follows.\n\n"
                                         "<compacted-summary>"},
                {"type": "text", "text": summary_text},
                {"type": "text", "text": "</compacted-summary>"}]},
            surface_op={"op": "replace", "start": shadowed[0], "end": shadowed[-1]},
            source_event_seqs=[start.seq, summ.seq, *shadowed])
        self.stats.compactions += 1
        yield self._append("compaction/end", {"compactionId": cid, "turn": None})


def generate_log(n: int, seed: int = 7) -> tuple[list[Event], GenStats]:
    """A valid DSH-shaped log of exactly ``n`` events (built by a ``Session``)."""
    gen = LogGenerator(seed=seed)
    gen.generate(n)
    return list(gen.session.log)[:n], gen.stats


def continuation(prefix: Sequence[Event], ops: int, seed: int = 1234) -> list[Event]:
    """``ops`` more events after ``prefix``: a fresh generator continuing a replay of it.

    The traffic (not the seqs it cites) is the same for every prefix, so windows after
    prefixes of different sizes cost the same work.
    """
    gen = LogGenerator(replay(prefix), seed=seed)
    gen.generate(len(prefix) + ops)
    return list(gen.session.events(len(prefix)))[:ops]


# -- timing helpers ----------------------------------------------------------------------


def _timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_time(fn: Callable[[], object], repeats: int, *, gc_paused: bool = False) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` (``gc.collect()`` before each).

    ``gc_paused`` disables the cyclic garbage collector while ``fn`` runs.
    """
    times = []
    for _ in range(repeats):
        if gc_paused:
            gc.disable()
        try:
            times.append(_timed(fn))
        finally:
            gc.enable()
    return statistics.median(times)


# -- (a) fold vs decode --------------------------------------------------------------------


@dataclass
class FoldResultRow:
    """(a) at one size; every ``*_s`` list holds one time per round."""

    events: int
    jsonl_bytes: int
    decode_s: list[float]
    decode_nogc_s: list[float]
    fold_s: list[float]
    replay_derive_s: list[float]
    nodes: int
    replacements: int

    def rate(self, times: list[float]) -> float:
        """Events per second, from the median time."""
        return self.events / statistics.median(times)

    @staticmethod
    def ratio(num: list[float], den: list[float]) -> float:
        """Median over the rounds of the per-round time ratio."""
        return statistics.median(a / b for a, b in zip(num, den, strict=True))

    @property
    def fold_over_decode(self) -> float:
        return self.ratio(self.fold_s, self.decode_s)

    @property
    def fold_over_decode_nogc(self) -> float:
        return self.ratio(self.fold_s, self.decode_nogc_s)

    @property
    def replay_over_decode(self) -> float:
        return self.ratio(self.replay_derive_s, self.decode_s)


def bench_fold(events: Sequence[Event], repeats: int) -> FoldResultRow:
    """Encode ``events`` to JSONL; then, ``repeats`` rounds of: ``decode_log`` it, again
    with the garbage collector paused, ``fold_surface`` the decoded events, and
    ``replay`` + ``derive_messages()`` them. Interleaving the four in every round lets
    a noisy moment of the machine hit them alike."""
    content = encode_log(None, events)
    decoded = decode_log(content).events
    if len(decoded) != len(events):
        raise AssertionError("the JSONL did not decode to the same number of events")

    def replay_derive() -> None:
        replay(decoded).derive_messages()

    row = FoldResultRow(len(events), len(content), [], [], [], [], 0, 0)
    for _ in range(repeats):
        row.decode_s.append(median_time(lambda: decode_log(content), 1))
        row.decode_nogc_s.append(median_time(lambda: decode_log(content), 1, gc_paused=True))
        row.fold_s.append(median_time(lambda: fold_surface(decoded), 1))
        row.replay_derive_s.append(median_time(replay_derive, 1))
    folded = fold_surface(decoded)
    row.nodes, row.replacements = len(folded.nodes), len(folded.replacements)
    return row


# -- (b) append + derive per operation ----------------------------------------------------


@dataclass
class AppendResultRow:
    size: int
    ops: int
    generation: int
    surface_nodes: int
    replaces_in_window: int
    incremental_us: float  # mean per op, median over the rounds
    incremental_best_us: float  # mean per op of the fastest round
    incremental_p50_us: float
    incremental_p99_us: float
    naive_ops: int
    naive_us: float  # median per op


def _append_args(e: Event) -> tuple[str, Any, dict[str, Any]]:
    kw = {"time": e.time, "surface_op": e.surface_op,
          "source_event_seqs": e.source_event_seqs}
    return e.type, e.data, kw


def incremental_ops(session: Session, window: Sequence[Event]) -> list[float]:
    """Append each event of ``window`` through ``Session.append`` (caller data copied,
    fully validated) and call ``derive_messages()`` after each; per-op seconds."""
    calls = [_append_args(e) for e in window]
    out: list[float] = []
    perf = time.perf_counter
    append, derive = session.append, session.derive_messages
    gc.collect()
    for etype, data, kw in calls:
        t0 = perf()
        append(etype, data, **kw)
        derive()
        out.append(perf() - t0)
    return out


def naive_ops(prefix: Sequence[Event], window: Sequence[Event]) -> list[float]:
    """The baseline: per append, a fresh fold of the whole log and a projection of every
    node from scratch; per-op seconds."""
    log = list(prefix)
    out: list[float] = []
    perf = time.perf_counter
    gc.collect()
    for event in window:
        t0 = perf()
        log.append(event)
        folded = fold_surface(log)
        derive_from_nodes(folded.nodes, log)
        out.append(perf() - t0)
    return out


def naive_budget(size: int) -> int:
    """How many naive (O(N)) operations to time at ``size``."""
    if size <= 1_000:
        return 200
    if size <= 10_000:
        return 30
    if size <= 100_000:
        return 5
    return 3


@dataclass
class AppendCase:
    """One log size of (b): the prefix to replay and the window of events to append."""

    size: int
    prefix: Sequence[Event]
    window: list[Event]
    means: list[float] = field(default_factory=list)
    p50s: list[float] = field(default_factory=list)
    p99s: list[float] = field(default_factory=list)
    generation: int = 0
    nodes: int = 0


def run_incremental(case: AppendCase) -> None:
    """One timed run of ``case``: replay the prefix, derive once (warm cache), then
    append + derive every window event. Records mean / p50 / p99 µs per op."""
    session = replay(case.prefix)
    session.derive_messages()
    case.generation = session.surface.replace_generation
    case.nodes = len(session.surface.nodes)
    times = incremental_ops(session, case.window)
    if len(session) != case.size + len(case.window):
        raise AssertionError("the window did not append cleanly")
    times_us = sorted(t * 1e6 for t in times)
    case.means.append(statistics.fmean(times_us))
    case.p50s.append(times_us[len(times_us) // 2])
    case.p99s.append(times_us[min(len(times_us) - 1, int(len(times_us) * 0.99))])


def bench_append(log: Sequence[Event], sizes: Sequence[int], ops: int, repeats: int,
                 naive_counts: Sequence[int] | None = None,
                 progress: Callable[[str], None] | None = None) -> list[AppendResultRow]:
    """(b) for every size: prefill with ``log[:size]``, then ``ops`` operations of
    append + ``derive_messages()`` with a window of traffic that is the same for every
    size (``continuation``). The runs go round-robin over the sizes, ``repeats`` rounds,
    so a noisy moment of the machine hits every size alike; each figure is the median
    over the rounds. Then the naive baseline over the first events of each window.
    """
    cases = []
    for size in sizes:
        if len(log) < size:
            raise ValueError(f"log of {len(log)} events is shorter than {size}")
        prefix = log[:size]
        cases.append(AppendCase(size, prefix, continuation(prefix, ops)))
    for round_ in range(repeats):
        for case in cases:
            run_incremental(case)
        if progress is not None:
            progress(f"  round {round_ + 1}/{repeats}: " + ", ".join(
                f"{_n(c.size)} {c.means[-1]:.1f}" for c in cases) + " µs/op")
    rows = []
    for k, case in enumerate(cases):
        count = naive_budget(case.size) if naive_counts is None else naive_counts[k]
        count = max(1, min(count, ops))
        naive = naive_ops(case.prefix, case.window[:count])
        rows.append(AppendResultRow(
            size=case.size, ops=ops, generation=case.generation, surface_nodes=case.nodes,
            replaces_in_window=sum(1 for e in case.window
                                   if isinstance(e.surface_op, ReplaceOp)),
            incremental_us=statistics.median(case.means),
            incremental_best_us=min(case.means),
            incremental_p50_us=statistics.median(case.p50s),
            incremental_p99_us=statistics.median(case.p99s),
            naive_ops=count, naive_us=statistics.median(naive) * 1e6,
        ))
        if progress is not None:
            progress(f"  naive {_n(case.size)}: {rows[-1].naive_us:,.0f} µs/op "
                     f"({count} ops)")
    return rows


@dataclass
class TimeTravelRow:
    events: int
    calls: int
    first_call_ms: float
    checkpoint_us: float
    fresh_us: float


def bench_time_travel(log: Sequence[Event], calls: int, seed: int) -> TimeTravelRow:
    """Per-call cost of ``derive_messages(as_of=k)`` at ``calls`` random k, with the
    checkpoints and by a fresh fold of the prefix (the baseline), on the same session
    and the same k; the results must agree."""
    session = replay(log)
    rng = random.Random(seed)
    points = [rng.randrange(len(log)) for _ in range(calls)]
    t0 = time.perf_counter()
    session.derive_messages(as_of=len(log) - 1)  # builds every checkpoint
    first_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    with_checkpoints = [session.derive_messages(as_of=k).to_list() for k in points]
    checkpoint_us = (time.perf_counter() - t0) / calls * 1e6
    t0 = time.perf_counter()
    fresh = [derive_from_nodes(fold_surface(log[: k + 1]).nodes, log) for k in points]
    fresh_us = (time.perf_counter() - t0) / calls * 1e6
    if with_checkpoints != fresh:
        raise AssertionError("time travel from checkpoints differs from a fresh fold")
    return TimeTravelRow(len(log), calls, first_ms, checkpoint_us, fresh_us)


@dataclass
class PassReadRow:
    size: int
    ops: int
    tally_us: float
    walk_us: float


PRUNE_OVER = 4_000


def bench_pass_reads(log: Sequence[Event], size: int, ops: int) -> PassReadRow:
    """Per append of a window of ``ops`` events after ``log[:size]``: the time to read
    the surface's tokens and oversized tool results through tallies, and by walking
    the surface (the baseline), on the same session; the results must agree."""
    session = replay(log[:size])
    window = continuation(log[:size], ops)
    tokens = SurfaceTally(int, count_tokens)
    sizes: SurfaceTally[list[tuple[int, int]]] = SurfaceTally(list, measure_result)
    # The first pass walks the whole surface once; the timed ones take the new nodes.
    session.tally(tokens)
    session.tally(sizes)
    tally_s = walk_s = 0.0
    for event in window:
        session.append_event(event)
        generation = session.surface.replace_generation
        t0 = time.perf_counter()
        found = (session.tally(tokens), oversized_among(
            generation, session.tally(sizes), session.event, max_chars=PRUNE_OVER))
        t1 = time.perf_counter()
        nodes = session.surface.nodes
        walked = (sum(event_tokens(session.event(n)) for n in nodes), oversized_results(
            generation, ((n, session.event(n)) for n in nodes), max_chars=PRUNE_OVER))
        t2 = time.perf_counter()
        if found != walked:
            raise AssertionError(f"the tallies differ from a walk at seq {event.seq}")
        tally_s += t1 - t0
        walk_s += t2 - t1
    return PassReadRow(size, ops, tally_s / ops * 1e6, walk_s / ops * 1e6)


# -- reporting ---------------------------------------------------------------------------


def _n(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def fold_table(rows: Sequence[FoldResultRow]) -> str:
    lines = [
        "| events | JSONL MB | decode ev/s | decode ev/s (GC paused) | fold ev/s "
        "| replay+derive ev/s | fold / decode (time) | fold / decode GC paused "
        "| replay+derive / decode | nodes | replaces |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {_n(r.events)} | {r.jsonl_bytes / 1e6:.0f} | {r.rate(r.decode_s):,.0f} "
            f"| {r.rate(r.decode_nogc_s):,.0f} "
            f"| {r.rate(r.fold_s):,.0f} | {r.rate(r.replay_derive_s):,.0f} "
            f"| {r.fold_over_decode:.2f}x | {r.fold_over_decode_nogc:.2f}x "
            f"| {r.replay_over_decode:.2f}x "
            f"| {r.nodes} | {r.replacements} |")
    return "\n".join(lines)


def append_table(rows: Sequence[AppendResultRow]) -> str:
    if not rows:
        return ""
    first = rows[0]
    lines = [
        f"| log size | incremental µs/op (mean) | flatness vs {_n(first.size)} "
        "| best round µs/op | flatness (best) | p50 µs | p99 µs "
        "| naive µs/op | naive / incremental | naive ops | generation | nodes "
        "| replaces in window |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {_n(r.size)} | {r.incremental_us:.1f} "
            f"| {r.incremental_us / first.incremental_us:.2f}x "
            f"| {r.incremental_best_us:.1f} "
            f"| {r.incremental_best_us / first.incremental_best_us:.2f}x "
            f"| {r.incremental_p50_us:.1f} | {r.incremental_p99_us:.1f} "
            f"| {r.naive_us:,.0f} | {r.naive_us / r.incremental_us:,.0f}x | {r.naive_ops} "
            f"| {r.generation} | {r.surface_nodes} | {r.replaces_in_window} |")
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    """``"1k,10k,1M"`` -> ``[1000, 10000, 1000000]``."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = {"k": 1_000, "m": 1_000_000}.get(part[-1:], 1)
        out.append(int(part[:-1] if scale > 1 else part) * scale)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (1k, 10k, 100k) for a CI smoke run")
    parser.add_argument("--ops", type=int, default=2000,
                        help="timed append+derive operations per size (default 2000)")
    parser.add_argument("--repeats", type=int, default=7,
                        help="runs per figure; the median is reported (default 7)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sizes", type=_sizes, default=None,
                        help="log sizes of (b), comma-separated (overrides --quick)")
    parser.add_argument("--fold-sizes", type=_sizes, default=None,
                        help="log sizes of (a), comma-separated (overrides --quick)")
    args = parser.parse_args(argv)

    sizes = args.sizes or ([1_000, 10_000, 100_000] if args.quick
                           else [1_000, 10_000, 100_000, 1_000_000])
    fold_sizes = args.fold_sizes or ([10_000, 100_000] if args.quick
                                     else [100_000, 1_000_000])
    total = max(*sizes, *fold_sizes)

    print(f"python {sys.version.split()[0]}; generating a {total:,}-event log ...",
          flush=True)
    t0 = time.perf_counter()
    log, stats = generate_log(total, seed=args.seed)
    gen_s = time.perf_counter() - t0
    print(f"  {gen_s:.1f}s ({total / gen_s:,.0f} appends/s while generating); "
          f"{stats.turns} turns, {stats.steps} steps, {stats.assistant_messages} "
          f"assistant/message, {stats.tool_results} tool/result, {stats.compactions} "
          f"compactions, {stats.prunes} prunes", flush=True)
    kinds = sorted(stats.counts.items(), key=lambda kv: -kv[1])
    print("  mix: " + ", ".join(f"{k} {v / len(log):.1%}" for k, v in kinds), flush=True)

    print("\n(a) fold_surface vs decode_log of the same JSONL", flush=True)
    fold_rows = []
    for n in fold_sizes:
        reps = args.repeats if n < 1_000_000 else max(1, min(args.repeats, 3))
        fold_rows.append(bench_fold(log[:n], reps))
        print(fold_table(fold_rows[-1:]).splitlines()[-1], flush=True)

    print("\n(b) append + derive_messages() per operation", flush=True)
    append_rows = bench_append(log, sizes, args.ops, args.repeats,
                               progress=lambda line: print(line, flush=True))
    print(append_table(append_rows), flush=True)

    print("\n(c) time travel: derive_messages(as_of=k) at random k", flush=True)
    tt_size = min(total, 10_000 if args.quick else 100_000)
    tt = bench_time_travel(log[:tt_size], 20 if args.quick else 50, args.seed)

    print("\n(d) a watcher's reads after each append: tallies vs a walk of the surface",
          flush=True)
    reads = [bench_pass_reads(log, n, min(args.ops, 500)) for n in sizes
             if n <= 100_000]

    print("\n## Surface (bench_surface.py)\n")
    print(fold_table(fold_rows))
    print()
    print(append_table(append_rows))
    last, first = append_rows[-1], append_rows[0]
    flat = last.incremental_us / first.incremental_us
    flat_best = last.incremental_best_us / first.incremental_best_us
    flat_p50 = last.incremental_p50_us / first.incremental_p50_us
    verdict = "OK" if flat <= 1.5 else "FAIL"
    print(f"\nflatness cost({_n(last.size)}) / cost({_n(first.size)}) = {flat:.2f} "
          f"(target <= 1.5): {verdict}; best rounds {flat_best:.2f}, p50 {flat_p50:.2f}")
    print(f"\ntime travel over {_n(tt.events)} events ({tt.calls} calls): "
          f"{tt.checkpoint_us:,.0f} µs/call from checkpoints vs {tt.fresh_us:,.0f} µs/call "
          f"by a fresh fold = {tt.checkpoint_us / tt.fresh_us:.3f}x; the first call, "
          f"which builds the checkpoints, {tt.first_call_ms:,.0f} ms")
    print()
    for r in reads:
        print(f"a watcher's reads of a {_n(r.size)}-event session after each of {r.ops} "
              f"appends: {r.tally_us:,.1f} µs tallied vs {r.walk_us:,.0f} µs walking its "
              f"surface = {r.tally_us / r.walk_us:.4f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
