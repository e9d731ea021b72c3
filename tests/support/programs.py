"""Generated valid sessions for the property tests of the fold, replay, time travel and
streamed import.

A program is a list of abstract events that cite each other by their index in the
program; ``materialize`` turns it into a log, optionally with log-only noise events
inserted anywhere (seqs are renumbered, citations follow). ``invalid_variants`` breaks
one rule of a valid next event.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from msgspec import UNSET

from surfacelog.schema import SURFACE_ELIGIBLE_TYPES, Event, ReplaceOp

T0 = 1_700_000_000_000
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@dataclass
class Abs:
    type: str
    data: Any
    src: list[int] | None = None          # abstract ids
    op: str | tuple[int, int] | None = None  # "append" | (start id, end id)


class Gen:
    """Builds a valid program, keeping the surface (of abstract ids) as it goes."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.events: list[Abs] = []
        self.nodes: list[int] = []
        self.chunks: list[int] = []
        self.pending: dict[str, int | None] = {}
        self.turn = 0
        self.in_turn = False
        self.step = 0
        self.in_step = False
        self.counter = 0

    def emit(self, a: Abs) -> int:
        aid = len(self.events)
        self.events.append(a)
        if a.op == "append":
            self.nodes.append(aid)
        elif isinstance(a.op, tuple):
            i, j = self.nodes.index(a.op[0]), self.nodes.index(a.op[1])
            self.nodes[i:j + 1] = [aid]
        return aid

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    def text(self) -> str:
        return str(self.draw(st.text(alphabet="abc xyz-0\n\u00e9\"", max_size=8)))

    def ids_subset(self) -> list[int]:
        if not self.events:
            return []
        picked = self.draw(st.lists(st.integers(0, len(self.events) - 1), max_size=4,
                                    unique=True))
        return list(picked)

    # operations
    def op_turn(self) -> None:
        if self.in_turn:
            self.emit(Abs("turn/end", {"turn": self.turn, "reason": {"kind": "completed"}}))
            self.in_turn = False
        else:
            self.turn += 1
            self.emit(Abs("turn/start", {"turn": self.turn}))
            self.in_turn = True

    def op_step(self) -> None:
        if self.in_step:
            self.emit(Abs("step/end", {"turn": self.turn, "step": self.step}))
            self.in_step = False
        else:
            self.step += 1
            self.emit(Abs("step/start", {"turn": self.turn, "step": self.step}))
            self.in_step = True

    def op_chunk(self) -> None:
        self.chunks.append(self.emit(Abs("assistant/chunk", {
            "turn": self.turn, "step": self.step,
            "chunk": {"type": "text-delta", "index": 0, "text": self.text()}})))

    def op_assistant(self) -> None:
        shape = self.draw(st.sampled_from(["empty", "text", "calls"]))
        content: list[dict[str, Any]] = []
        if shape != "empty":
            content.append({"type": "text", "text": self.text()})
        if shape == "calls":
            for _ in range(self.draw(st.integers(1, 2))):
                cid = self.fresh("call")
                self.pending[cid] = None
                content.append({"type": "tool-call", "id": cid, "name": "bash",
                                "arguments": json.dumps({"n": self.counter})})
        src = None if self.draw(st.integers(0, 5)) == 0 else list(self.chunks)
        self.chunks = []
        self.emit(Abs("assistant/message", {
            "turn": self.turn, "step": self.step,
            "message": {"id": self.fresh("a"), "role": "assistant",
                        "source": {"kind": "model", "provider": "p", "model": "m"},
                        "content": content},
            "usage": {"inputTokens": self.counter, "outputTokens": 1}}, src, "append"))

    def op_tool_call(self) -> None:
        unlogged = [c for c, at in self.pending.items() if at is None]
        if not unlogged:
            return
        cid = self.draw(st.sampled_from(unlogged))
        self.pending[cid] = self.emit(Abs("tool/call", {
            "turn": self.turn, "step": self.step, "callId": cid, "name": "bash",
            "arguments": "{}"}))

    def op_tool_result(self) -> None:
        if not self.pending:
            return
        cid = self.draw(st.sampled_from(sorted(self.pending)))
        at = self.pending.pop(cid)
        data: dict[str, Any] = {
            "turn": self.turn, "step": self.step,
            "message": {"id": self.fresh("t"), "role": "user",
                        "source": {"kind": "tool", "callId": cid},
                        "content": [{"type": "tool-result", "toolCallId": cid,
                                     "content": [{"type": "text", "text": self.text()}]}]},
            "meta": {"n": self.counter, "ok": self.draw(st.booleans())}}
        if self.draw(st.booleans()):
            data["message"]["content"][0]["isError"] = self.draw(st.booleans())
        self.emit(Abs("tool/result", data, None if at is None else [at], "append"))

    def op_user(self) -> None:
        etype = self.draw(st.sampled_from(["user/message", "context/message"]))
        source = ({"kind": "user"} if etype == "user/message"
                  else {"kind": "plugin", "plugin": "workspace"})
        src = self.ids_subset() if self.draw(st.booleans()) else None
        self.emit(Abs(etype, {"id": self.fresh("u"), "role": "user", "source": source,
                              "content": [{"type": "text", "text": self.text()}]},
                      src or None, "append"))

    def op_compact(self) -> None:
        if not self.nodes:
            return
        i = self.draw(st.integers(0, len(self.nodes) - 1))
        j = self.draw(st.integers(i, len(self.nodes) - 1))
        shadowed = self.nodes[i:j + 1]
        cid = self.fresh("cmp")
        extra: list[int] = []
        traced = self.draw(st.booleans())
        if traced:
            extra.append(self.emit(Abs("compaction/start", {"compactionId": cid,
                                                            "turn": None})))
            extra.append(self.emit(Abs("compaction/summary", {
                "compactionId": cid, "summary": [{"type": "text", "text": "s"}],
                "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
                "shadowedSeqs": shadowed, "shadowedTokenCount": 10})))
        src = self.draw(st.permutations([*extra, *shadowed]))
        self.emit(Abs("user/message", {
            "id": self.fresh("k"), "role": "user",
            "source": {"kind": "plugin", "plugin": "compaction"},
            "content": [{"type": "text", "text": f"summary of {len(shadowed)}"}]},
            list(src), (shadowed[0], shadowed[-1])))
        if traced:
            self.emit(Abs("compaction/end", {"compactionId": cid, "turn": None}))

    def op_prune(self) -> None:
        results = [n for n in self.nodes if self.events[n].type == "tool/result"]
        if not results:
            return
        target = self.draw(st.sampled_from(results))
        src = [target]
        if self.draw(st.booleans()):
            src.insert(0, self.emit(Abs("compaction/prune", {
                "shadowedRange": {"start": target, "end": target}, "shadowedSeqs": [target],
                "shadowedTokenCount": 5})))
        data = copy.deepcopy(self.events[target].data)
        data["message"]["content"][0]["content"] = [{"type": "text",
                                                     "text": f"[pruned {self.counter}]"}]
        self.emit(Abs("tool/result", data, src, (target, target)))


OPS = ["turn", "step", "chunk", "chunk", "assistant", "assistant", "assistant", "tool_call",
       "tool_call", "tool_result", "tool_result", "tool_result", "user", "user", "compact",
       "compact", "prune", "prune"]


@st.composite
def programs(draw: Any, max_ops: int = 60) -> list[Abs]:
    gen = Gen(draw)
    for _ in range(draw(st.integers(1, max_ops))):
        getattr(gen, f"op_{draw(st.sampled_from(OPS))}")()
    return gen.events


NOISE_KINDS: list[tuple[str, Any, Any]] = [
    ("todo/write", lambda k: {"todos": [{"content": f"n{k}", "status": "pending"}]}, UNSET),
    ("session/title", lambda k: {"title": f"t{k}"}, UNSET),
    ("acme/unknown-noise", lambda k: {"k": k, "nested": [k, None]}, True),
    ("llm/retry", lambda k: {"attempt": k}, UNSET),
    ("request/context", lambda k: {"provider": "p", "model": "m", "contextWindow": k}, UNSET),
]


def materialize(program: list[Abs], noise: list[int] | None = None,
                drop: frozenset[int] = frozenset()) -> tuple[list[Event], list[int]]:
    """The log of ``program``, ``noise[k]`` log-only events inserted before event k (and
    ``noise[-1]`` at the end), without the (uncited, log-only) events of ``drop``.
    Returns the events and the seq of each abstract id (-1 for a dropped one)."""
    counts = noise or [0] * (len(program) + 1)
    events: list[Event] = []
    id2seq: list[int] = []

    def add_noise(count: int) -> None:
        for _ in range(count):
            seq = len(events)
            etype, make, ignorable = NOISE_KINDS[seq % len(NOISE_KINDS)]
            events.append(Event(type=etype, seq=seq, time=T0 + seq, data=make(seq),
                                ignorable=ignorable))

    for k, a in enumerate(program):
        add_noise(counts[k])
        if k in drop:
            id2seq.append(-1)
            continue
        seq = len(events)
        id2seq.append(seq)
        src: Any = UNSET if a.src is None else tuple(id2seq[x] for x in a.src)
        op: Any = (UNSET if a.op is None else "append" if a.op == "append"
                   else ReplaceOp(start=id2seq[a.op[0]], end=id2seq[a.op[1]]))
        events.append(Event(type=a.type, seq=seq, time=T0 + seq, data=a.data,
                            source_event_seqs=src, surface_op=op))
    add_noise(counts[-1])
    return events, id2seq


def droppable(program: list[Abs]) -> list[int]:
    """Abstract ids of log-only events no other event cites."""
    cited = set()
    for a in program:
        cited.update(a.src or ())
        if isinstance(a.op, tuple):
            cited.update(a.op)
    return [k for k, a in enumerate(program)
            if a.op is None and k not in cited]


def noise_for(data: Any, program: list[Abs]) -> list[int]:
    return list(data.draw(st.lists(st.integers(0, 2), min_size=len(program) + 1,
                                   max_size=len(program) + 1)))


# -- invalid candidates --------------------------------------------------------------------------


def invalid_variants(event: Event, nodes: list[int]) -> list[tuple[str, Event]]:
    """Each variant breaks exactly one rule of ``event`` (valid as the next event)."""
    rep = msgspec.structs.replace
    seq = event.seq
    out = [("is not contiguous; expected", rep(event, seq=seq + 1))]
    if seq > 0:
        out.append(("is not contiguous; expected", rep(event, seq=seq - 1)))
    if event.type not in SURFACE_ELIGIBLE_TYPES:
        out += [("cannot carry surfaceOp", rep(event, surface_op="append")),
                ("cannot carry surfaceOp", rep(event, surface_op=None)),
                ("cannot carry sourceEventSeqs", rep(event, source_event_seqs=(0,)))]
        return out
    out.append(("requires a surfaceOp marker", rep(event, surface_op=UNSET)))
    for bad in [None, 5, [], 1.5, True, "prepend"]:
        out.append(("invalid surfaceOp", rep(event, surface_op=bad)))
    for bad_op in [{"op": "replace", "start": seq - 1, "end": seq - 1, "x": 0},
                   ReplaceOp(start=-1, end=0), ReplaceOp(start=True, end=True),
                   ReplaceOp(start=0.0, end=0)]:
        out.append(("invalid replace surfaceOp", rep(event, surface_op=bad_op)))
    out.append(("not found in surface", rep(event, surface_op=ReplaceOp(start=seq, end=seq))))
    if nodes:
        out.append(("not found in surface",
                    rep(event, surface_op=ReplaceOp(start=nodes[0], end=seq))))
    out.append(("must reference earlier events", rep(event, source_event_seqs=(seq,))))
    out.append(("must densely contain", rep(event, source_event_seqs=(True,))))
    out.append(("must be an array", rep(event, source_event_seqs=5)))
    if seq > 0:
        out.append(("must not contain duplicates", rep(event, source_event_seqs=(0, 0))))
    if event.type != "assistant/message":
        out.append(("must not be empty except on assistant/message",
                    rep(event, source_event_seqs=())))
    op = event.surface_op
    if isinstance(op, ReplaceOp):
        i, j = nodes.index(op.start), nodes.index(op.end)
        if i < j:
            out.append(("is after end seq",
                        rep(event, surface_op=ReplaceOp(start=op.end, end=op.start))))
        src = tuple(event.source_event_seqs)  # type: ignore[arg-type]
        for dropped in nodes[i:j + 1]:
            rest = tuple(s for s in src if s != dropped)
            fragment = ("must include every shadowed surface node" if rest
                        else "must not be empty")
            out.append((fragment, rep(event, source_event_seqs=rest)))
        out.append(("must include every shadowed surface node",
                    rep(event, source_event_seqs=UNSET)))
        if event.type == "tool/result":
            for mutate in [lambda d: d.update(meta={"changed": 1}),
                           lambda d: d["message"].update(id="other"),
                           lambda d: d.update(turn=d["turn"] + 1),
                           lambda d: d["meta"].update(ok=int(d["meta"]["ok"]))]:
                data = copy.deepcopy(event.data)
                mutate(data)
                out.append(("may change only content", rep(event, data=data)))
    if event.type == "tool/result" and len(nodes) > 1:
        out.append(("must rewrite exactly one current node",
                    rep(event, surface_op=ReplaceOp(start=nodes[0], end=nodes[-1]),
                        source_event_seqs=tuple(nodes))))
    return out
