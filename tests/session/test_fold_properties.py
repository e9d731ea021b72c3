"""Property tests: generated valid sessions, folded four ways, derived two ways.

A program is a list of abstract events that cite each other by their index in the
program; ``materialize`` turns it into a log, optionally with log-only noise events
inserted anywhere (seqs are renumbered, citations follow). Invalid candidates are made by
breaking one rule of a valid next event.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
from hypothesis import assume, given
from hypothesis import strategies as st

from surfacelog.schema import (
    Event,
    ReplaceOp,
    SurfaceError,
    decode_log,
    encode_event,
    encode_log,
)
from surfacelog.session import AppendSpec, Session, fold_surface, replay
from surfacelog.session.compaction_policy import (
    measure_result,
    oversized_among,
    oversized_results,
)
from surfacelog.session.pressure import count_tokens
from surfacelog.session.surface import SurfaceTally
from surfacelog.session.tokens import event_tokens

from support.programs import (
    SETTINGS,
    T0,
    Abs,
    droppable,
    invalid_variants,
    materialize,
    noise_for,
    programs,
)

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


class _Abandon(Exception):
    """Raised inside ``Session.atomic`` to roll a batch back on purpose."""


_INTERLOPER = AppendSpec("user/message", {
    "id": "interloper", "role": "user", "source": {"kind": "user"},
    "content": [{"type": "text", "text": "rolled back " * 40}]}, surface_op="append")


@SETTINGS
@given(program=programs(), data=st.data())
def test_a_tally_follows_the_surface_through_replaces_and_rollbacks(program: list[Abs],
                                                                      data: Any) -> None:
    """A ``SurfaceTally`` folds exactly the current nodes, in order, however the surface
    changed since its last update: appends, replaces, and batches rolled back after the
    tally had counted their nodes (a rolled-back node and the one appended in its place
    share a seq, a position and a generation)."""
    log, _ = materialize(program, noise_for(data, program))
    s = Session()
    seen = SurfaceTally(list, lambda acc, seq, e: [*acc, (seq, e)])
    tokens = SurfaceTally(int, count_tokens)
    sizes: SurfaceTally[list[tuple[int, int]]] = SurfaceTally(list, measure_result)

    def check() -> None:
        nodes = list(s.surface.nodes)
        assert s.tally(seen) == [(n, s.event(n)) for n in nodes]
        assert s.tally(tokens) == sum(event_tokens(s.event(n)) for n in nodes)
        for limit in (0, 100, 10**6):
            assert oversized_among(s.surface.replace_generation, s.tally(sizes), s.event,
                                   max_chars=limit) == oversized_results(
                s.surface.replace_generation, ((n, s.event(n)) for n in nodes),
                max_chars=limit)

    k = 0
    while k < len(log):
        step = data.draw(st.integers(1, 4))
        if data.draw(st.integers(0, 3)) == 0:
            try:
                with s.atomic():
                    s.append_batch(log[k:k + step])
                    s.append_batch([_INTERLOPER])
                    check()
                    raise _Abandon
            except (_Abandon, SurfaceError):
                pass
        s.append_batch(log[k:k + step])
        k += step
        if data.draw(st.booleans()):
            check()
    check()
