"""Property tests: generated valid sessions, folded four ways, derived two ways.

A program is a list of abstract events that cite each other by their index in the
program; ``materialize`` turns it into a log, optionally with log-only noise events
inserted anywhere (seqs are renumbered, citations follow). Invalid candidates are made by
breaking one rule of a valid next event.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from surfacelog.schema import (
    SURFACE_ELIGIBLE_TYPES,
    Event,
    ReplaceOp,
    SurfaceError,
    decode_log,
    encode_event,
    encode_log,
)
from surfacelog.session import AppendSpec, Session, fold_surface, replay

T0 = 1_700_000_000_000
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- the obviously-correct references -----------------------------------------------------------


def naive_fold(log: list[Event]) -> tuple[list[int], list[tuple[int, int, int, tuple[int, ...]]]]:
    nodes: list[int] = []
    replaced = []
    for e in log:
        if e.surface_op == "append":
            nodes.append(e.seq)
        elif isinstance(e.surface_op, ReplaceOp):
            i = nodes.index(e.surface_op.start)
            j = nodes.index(e.surface_op.end)
            assert i <= j
            replaced.append((e.seq, e.surface_op.start, e.surface_op.end, tuple(nodes[i:j + 1])))
            nodes[i:j + 1] = [e.seq]
    return nodes, replaced


def naive_project(log: list[Event], nodes: list[int]) -> list[dict[str, Any]]:
    out = []
    for n in nodes:
        e = log[n]
        if e.type in ("user/message", "context/message"):
            out.append(e.data)
        elif e.type == "assistant/message":
            if e.data["message"]["content"]:
                out.append(e.data["message"])
        elif e.type == "tool/result":
            out.append(e.data["message"])
    return out


# -- programs ------------------------------------------------------------------------------------


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


def state(s: Session) -> tuple[Any, ...]:
    return (len(s.log), list(s.surface.nodes), s.surface.replace_generation,
            list(s.replacements()), s.derive_messages().to_list(), s.log[-1] if s.log else None)


def assert_refused(s: Session, fragment: str, candidate: Event) -> None:
    before = state(s)
    try:
        s.append_event(candidate)
    except SurfaceError as exc:
        assert isinstance(exc, ValueError)
        message = str(exc)
        assert fragment in message, (fragment, message)
        assert candidate.type in message
        assert str(candidate.seq) in message
    else:
        raise AssertionError(f"accepted an invalid candidate ({fragment}): {candidate}")
    assert state(s) == before


# -- properties ----------------------------------------------------------------------------------


@SETTINGS
@given(program=programs(), data=st.data())
def test_incremental_fold_equals_fold_surface_equals_naive(program: list[Abs],
                                                           data: Any) -> None:
    log, _ = materialize(program, noise_for(data, program))
    every = Session()
    sometimes = Session()
    kept: list[tuple[Any, list[dict[str, Any]]]] = []
    for k, event in enumerate(log):
        if data.draw(st.integers(0, 3)) == 0:
            variants = invalid_variants(event, list(every.surface.nodes))
            fragment, bad = data.draw(st.sampled_from(variants))
            assert_refused(every, fragment, bad)
        every.append_event(event)
        sometimes.append_event(event)
        prefix = log[: k + 1]
        nodes, replaced = naive_fold(prefix)
        folded = fold_surface(prefix)
        assert list(every.surface.nodes) == list(folded.nodes) == nodes
        assert [(r.seq, r.start, r.end, r.shadowed_seqs) for r in every.replacements()] \
            == [(r.seq, r.start, r.end, r.shadowed_seqs) for r in folded.replacements] \
            == replaced
        assert every.surface.replace_generation == len(replaced)
        derived = every.derive_messages()
        assert derived.to_list() == naive_project(prefix, nodes)
        kept.append((derived, copy.deepcopy(derived.to_list())))
        if data.draw(st.booleans()):
            assert sometimes.derive_messages().to_list() == naive_project(prefix, nodes)
    assert sometimes.derive_messages() == every.derive_messages()
    for view, snapshot in kept:
        assert view.to_list() == snapshot and len(view) == len(snapshot)


@SETTINGS
@given(program=programs(), data=st.data())
def test_replay_of_replay_adds_nothing_and_json_round_trip_is_exact(program: list[Abs],
                                                                    data: Any) -> None:
    log, _ = materialize(program, noise_for(data, program))
    first = replay(log)
    second = replay(first.log)
    assert len(second.log) == len(first.log) == len(log)
    assert list(second.surface.nodes) == list(first.surface.nodes)
    assert second.derive_messages() == first.derive_messages()
    assert list(second.replacements()) == list(first.replacements())
    text = encode_log(None, first.log)
    decoded = decode_log(text)
    assert decoded.events == list(log)
    for line, event in zip(text.splitlines(), log, strict=True):
        assert json.loads(line) == json.loads(encode_event(event))
    third = replay(decoded.events)
    assert list(third.surface.nodes) == list(first.surface.nodes)
    assert third.derive_messages() == first.derive_messages()
    # a seeded session adds exactly one marker, and reopening it adds nothing
    seeded = Session(first.log)
    assert len(seeded.log) == len(log) + 1
    assert len(Session(seeded.log).log) == len(seeded.log)
    assert seeded.derive_messages() == first.derive_messages()


@SETTINGS
@given(program=programs(), data=st.data())
def test_non_surface_events_never_change_derived_messages(program: list[Abs],
                                                          data: Any) -> None:
    plain, plain_ids = materialize(program)
    noisy, noisy_ids = materialize(program, noise_for(data, program))
    dropped = frozenset(data.draw(st.lists(st.sampled_from(droppable(program)), unique=True))
                        if droppable(program) else [])
    thin_noise = noise_for(data, program)
    thin, thin_ids = materialize(program, thin_noise, dropped)
    assert len(thin) == len(plain) - len(dropped) + sum(thin_noise)
    results = []
    for log, ids in [(plain, plain_ids), (noisy, noisy_ids), (thin, thin_ids)]:
        s = replay(log)
        back = {seq: aid for aid, seq in enumerate(ids) if seq >= 0}
        results.append((s.derive_messages().to_list(), [back[n] for n in s.surface.nodes]))
        # time travel over this log agrees with the plain log's prefix
        for aid in range(0, len(program), max(1, len(program) // 5)):
            if ids[aid] >= 0:
                assert s.derive_messages(as_of=ids[aid]).to_list() == \
                    replay(plain[: plain_ids[aid] + 1]).derive_messages().to_list()
    assert results[0] == results[1] == results[2]


@SETTINGS
@given(program=programs(max_ops=30), data=st.data())
def test_invalid_batches_leave_nothing_behind(program: list[Abs], data: Any) -> None:
    log, _ = materialize(program)
    assume(log)
    cut = data.draw(st.integers(0, len(log) - 1))
    s = replay(log[:cut])
    s.derive_messages()
    before = state(s)
    variants = invalid_variants(log[cut], list(s.surface.nodes))
    fragment, bad = data.draw(st.sampled_from(variants))
    take = data.draw(st.integers(cut, len(log)))
    batch = [*log[cut:take], msgspec.structs.replace(bad, seq=bad.seq + take - cut)]
    try:
        s.append_batch(batch)
    except SurfaceError:
        pass
    else:  # a shifted variant may turn valid (e.g. a replace naming a later node)
        if take == cut:
            raise AssertionError(f"accepted {fragment}: {bad}")
        return
    assert state(s) == before
    s.append_batch(log[cut:])
    assert list(s.surface.nodes) == naive_fold(log)[0]
    assert s.derive_messages().to_list() == naive_project(log, naive_fold(log)[0])


def _spec(event: Event) -> AppendSpec:
    seqs = event.source_event_seqs
    return AppendSpec(event.type, copy.deepcopy(event.data), event.surface_op,
                      list(seqs) if isinstance(seqs, tuple) else seqs, event.ignorable)


def _clocked(log: list[Event]) -> Session:
    s = Session(clock=lambda: T0)
    for event in log:
        s.append_event(event)
    return s


@SETTINGS
@given(program=programs(max_ops=30), data=st.data())
def test_batch_of_specs_equals_appending_them_one_at_a_time(program: list[Abs],
                                                            data: Any) -> None:
    """``append_batch`` of specs (its batch fold) against ``append`` of each inside one
    ``atomic()`` block (the one-event path): the same events, or the same error and
    nothing left behind."""
    log, _ = materialize(program, noise_for(data, program))
    assume(log)
    cut = data.draw(st.integers(0, len(log) - 1))
    take = data.draw(st.integers(cut, len(log)))
    specs = [_spec(e) for e in log[cut:take]]
    if data.draw(st.booleans()):
        nodes = naive_fold(log[:take])[0]
        candidate = log[take] if take < len(log) else log[-1]
        candidate = msgspec.structs.replace(candidate, seq=take)
        op = candidate.surface_op
        # Past the end of the log the candidate is a copy of the last event: a replace
        # whose range that very event took off the surface has no variants to make.
        stale = isinstance(op, ReplaceOp) and not {op.start, op.end} <= set(nodes)
        variants = [] if stale else [bad for fragment, bad in
                                     invalid_variants(candidate, nodes)
                                     if "contiguous" not in fragment]
        if variants:
            specs.append(_spec(data.draw(st.sampled_from(variants))))
    batched, single = _clocked(log[:cut]), _clocked(log[:cut])
    before = state(batched)
    outcomes = []
    for session, run in ((batched, lambda: batched.append_batch(specs)),
                         (single, lambda: _one_at_a_time(single, specs))):
        try:
            outcomes.append(run())
        except SurfaceError as exc:
            outcomes.append((exc.rule, exc.seq, str(exc)))
            assert state(session) == before
    assert outcomes[0] == outcomes[1]
    assert state(batched) == state(single)
    assert list(batched.surface.nodes) == naive_fold(batched.log)[0]


def _one_at_a_time(s: Session, specs: list[AppendSpec]) -> list[Event]:
    with s.atomic():
        return [s.append(spec.type, spec.data, surface_op=spec.surface_op,
                         source_event_seqs=spec.source_event_seqs, ignorable=spec.ignorable)
                for spec in specs]


@SETTINGS
@given(program=programs(max_ops=40), data=st.data())
def test_every_invalid_variant_of_every_next_event_is_refused(program: list[Abs],
                                                              data: Any) -> None:
    log, _ = materialize(program, noise_for(data, program))
    s = Session()
    for event in log:
        for fragment, bad in invalid_variants(event, list(s.surface.nodes)):
            assert_refused(s, fragment, bad)
        s.append_event(event)
    assert list(s.surface.nodes) == naive_fold(log)[0]
    assert s.derive_messages().to_list() == naive_project(log, naive_fold(log)[0])
