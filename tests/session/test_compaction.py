"""Compaction and pruning in the pure core (SPEC 13), without Ray or a store: the range
choice, the batches a request becomes applied to a real ``Session``, the staleness
checks, and which turn a log is inside."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from surfacelog.actors.protocol import Conflict
from surfacelog.schema.events import Event, ReplaceOp
from surfacelog.session import (
    CHECKPOINT_INTRO,
    CHECKPOINT_OUTRO,
    PRUNE_MARKER,
    SUMMARY_NOT_SMALLER,
    Session,
    block_tokens,
    check_compaction,
    check_prune,
    choose_range,
    compaction_request,
    compaction_specs,
    event_tokens,
    extractive_summary,
    open_turn,
    oversized_results,
    prune_requests,
    prune_requests_for,
    prune_specs,
    safe_cuts,
)
from surfacelog.session.compaction import CompactionRequest, PruneRequest
from surfacelog.session.errors import SplitsToolCall, StaleRequest

from support.sessiongen import build_session, sessions

SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# -- building sessions whose token estimate is known by construction ----------------------
# Every surface message below has exactly ``4 * tokens`` characters of counted text, so
# its estimate is ``tokens`` without asking the code under test.

def user(s: Session, tokens: int) -> int:
    return s.append("user/message", {
        "id": f"u-{len(s)}", "role": "user", "source": {"kind": "user"},
        "content": [{"type": "text", "text": "u" * (4 * tokens)}]}, surface_op="append").seq


def assistant(s: Session, turn: int, step: int, tokens: int, calls: tuple[str, ...] = ()
              ) -> int:
    """An assistant message; each tool call counts its name and arguments (4 + 4
    characters, 2 tokens), the text the rest."""
    content: list[dict[str, Any]] = [{"type": "text", "text": "a" * (4 * tokens - 8 * len(calls))}]
    content += [{"type": "tool-call", "id": c, "name": "bash", "arguments": "{ls}"}
                for c in calls]
    return s.append("assistant/message", {
        "turn": turn, "step": step,
        "message": {"id": f"a-{len(s)}", "role": "assistant",
                    "source": {"kind": "model", "provider": "p", "model": "m"},
                    "content": content}},
        surface_op="append", source_event_seqs=[]).seq


def result(s: Session, turn: int, step: int, call_id: str, tokens: int) -> int:
    return s.append("tool/result", {
        "turn": turn, "step": step,
        "message": {"id": f"t-{call_id}", "role": "user",
                    "source": {"kind": "tool", "callId": call_id},
                    "content": [{"type": "tool-result", "toolCallId": call_id,
                                 "content": [{"type": "text", "text": "r" * (4 * tokens)}]}]}},
        surface_op="append").seq


def flat(count: int, tokens: int = 100) -> Session:
    """``count`` user messages of ``tokens`` each, outside any turn."""
    s = Session()
    for _ in range(count):
        user(s, tokens)
    return s


def with_call_at_the_cut() -> tuple[Session, list[int]]:
    """Surface: user 100, user 100, assistant 100 calling c1, its result 10, user 100."""
    s = Session()
    s.append("turn/start", {"turn": 1})
    u1, u2 = user(s, 100), user(s, 100)
    s.append("step/start", {"turn": 1, "step": 1})
    a = assistant(s, 1, 1, 100, calls=("c1",))
    r = result(s, 1, 1, "c1", 10)
    s.append("step/end", {"turn": 1, "step": 1})
    u3 = user(s, 100)
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return s, [u1, u2, a, r, u3]


def surface_events(s: Session) -> tuple[list[int], list[Event]]:
    nodes = list(s.surface.nodes)
    return nodes, [s.event(n) for n in nodes]


def request_for(s: Session, shadowed: list[int], summary: str = "the gist",
                error: str | None = None) -> CompactionRequest:
    return CompactionRequest(
        compaction_id="k1", generation=s.surface.replace_generation,
        shadowed=tuple(shadowed), summary=[{"type": "text", "text": summary}],
        shadowed_token_count=123, checkpoint_id="chk-1", error=error)


def compact(s: Session, request: CompactionRequest) -> list[Event]:
    check_compaction(s, request)
    return s.append_batch(compaction_specs(request, at=len(s), turn=s.open_turn()))


# -- the estimate --------------------------------------------------------------------------

def test_token_estimate_is_characters_over_four_rounded_up() -> None:
    assert block_tokens([]) == 0
    assert block_tokens([{"type": "text", "text": "x" * 8}]) == 2
    assert block_tokens([{"type": "text", "text": "x" * 9}]) == 3
    assert block_tokens([{"type": "text", "text": "x" * 3},
                         {"type": "tool-call", "id": "c", "name": "ab", "arguments": "cde"}]) == 2
    s = flat(1, 37)
    assert event_tokens(s.event(0)) == 37
    s.append("todo/write", {"todos": []})
    assert event_tokens(s.event(1)) == 0  # not a message: costs the model nothing


# -- choose_range ----------------------------------------------------------------------------

def test_nothing_is_chosen_at_or_under_the_threshold() -> None:
    nodes, events = surface_events(flat(10))  # 1000 tokens
    assert choose_range(nodes, events, compact_at=1000, retain_tokens=0) is None
    choice = choose_range(nodes, events, compact_at=999, retain_tokens=0)
    assert choice is not None and choice.total_tokens == 1000


def test_the_range_starts_at_the_first_node_and_leaves_retain_tokens() -> None:
    nodes, events = surface_events(flat(10))
    choice = choose_range(nodes, events, compact_at=0, retain_tokens=250)
    assert choice is not None
    # The tail must hold 250: three nodes (300); the other seven are replaced.
    assert choice.shadowed == tuple(nodes[:7])
    assert (choice.tokens, choice.total_tokens) == (700, 1000)
    exact = choose_range(nodes, events, compact_at=0, retain_tokens=300)
    assert exact is not None and exact.shadowed == tuple(nodes[:7])
    assert choose_range(nodes, events, compact_at=0, retain_tokens=901) is None
    assert choose_range(nodes, events, compact_at=0, retain_tokens=900,
                        min_nodes=2) is None
    one = choose_range(nodes, events, compact_at=0, retain_tokens=900, min_nodes=1)
    assert one is not None and one.shadowed == (nodes[0],)


def test_a_cut_never_separates_a_tool_call_from_its_result() -> None:
    s, (u1, u2, a, r, u3) = with_call_at_the_cut()
    nodes, events = surface_events(s)
    assert nodes == [u1, u2, a, r, u3]
    assert safe_cuts(events) == [True, True, True, False, True, True]
    # A tail of 110 would be reached right after the call (result 10 + user 100): that
    # cut splits the call from its result, so the range stops before the call.
    choice = choose_range(nodes, events, compact_at=0, retain_tokens=110)
    assert choice is not None and choice.shadowed == (u1, u2)
    assert choice.tokens == 200
    # A tail of 100 allows the cut after the result: call and result go together.
    choice = choose_range(nodes, events, compact_at=0, retain_tokens=100)
    assert choice is not None and choice.shadowed == (u1, u2, a, r)


def test_a_call_whose_result_never_came_is_never_compacted() -> None:
    s = Session()
    s.append("turn/start", {"turn": 1})
    u1 = user(s, 100)
    s.append("step/start", {"turn": 1, "step": 1})
    assistant(s, 1, 1, 100, calls=("lost",))
    user(s, 100)
    nodes, events = surface_events(s)
    assert safe_cuts(events) == [True, True, False, False]
    choice = choose_range(nodes, events, compact_at=0, retain_tokens=0, min_nodes=1)
    assert choice is not None and choice.shadowed == (u1,)


def _independently_safe(events: list[Event]) -> bool:
    """Every tool call opened by an assistant message in ``events`` has its result in
    ``events`` (read from the event data, not through ``safe_cuts``)."""
    opened = {b["id"] for e in events if e.type == "assistant/message"
              for b in e.data["message"]["content"] if b.get("type") == "tool-call"}
    closed = {e.data["message"]["source"]["callId"] for e in events if e.type == "tool/result"}
    return opened <= closed


@SETTINGS
@given(session=sessions(max_actions=8), compact_at=st.integers(0, 400),
       retain=st.integers(0, 400), min_nodes=st.integers(1, 4))
def test_choose_range_takes_the_longest_safe_prefix_leaving_retain_tokens(
        session: Session, compact_at: int, retain: int, min_nodes: int) -> None:
    nodes, events = surface_events(session)
    tokens = [event_tokens(e) for e in events]
    choice = choose_range(nodes, events, compact_at=compact_at, retain_tokens=retain,
                          min_nodes=min_nodes)

    def qualifies(k: int) -> bool:
        return (k >= min_nodes and sum(tokens[k:]) >= retain
                and _independently_safe(events[:k]))

    if sum(tokens) <= compact_at:
        assert choice is None
        return
    best = max((k for k in range(1, len(nodes) + 1) if qualifies(k)), default=None)
    if best is None:
        assert choice is None
        return
    assert choice is not None
    assert choice.shadowed == tuple(nodes[:best])
    assert choice.tokens == sum(tokens[:best])
    assert choice.total_tokens == sum(tokens)


# -- the compaction batch ----------------------------------------------------------------------

def test_a_compaction_replaces_the_range_with_a_checkpoint_citing_everything() -> None:
    s = build_session("c", 2)
    before = list(s.surface.nodes)
    shadowed = before[:3]
    request = request_for(s, shadowed, summary="the gist")
    length = len(s)
    start, summary, checkpoint, end = compact(s, request)

    assert [start.seq, summary.seq, checkpoint.seq, end.seq] == list(range(length, length + 4))
    assert [start.type, summary.type, checkpoint.type, end.type] == [
        "compaction/start", "compaction/summary", "user/message", "compaction/end"]
    assert list(s.surface.nodes) == [checkpoint.seq, *before[3:]]
    assert s.surface.replace_generation == 1
    assert checkpoint.surface_op == ReplaceOp(start=shadowed[0], end=shadowed[-1])
    assert checkpoint.source_event_seqs == (start.seq, summary.seq, *shadowed)
    assert summary.data["shadowedSeqs"] == shadowed
    assert summary.data["shadowedRange"] == {"start": shadowed[0], "end": shadowed[-1]}
    assert summary.data["shadowedTokenCount"] == 123
    assert start.data == {"compactionId": "k1", "turn": None}
    assert end.data == {"compactionId": "k1", "turn": None}
    texts = [b["text"] for b in checkpoint.data["content"]]
    assert texts == [CHECKPOINT_INTRO, "the gist", CHECKPOINT_OUTRO]
    assert checkpoint.data["id"] == "chk-1"
    assert checkpoint.data["source"] == {"kind": "plugin", "plugin": "compact",
                                         "compactionId": "k1"}
    # The model now sees the checkpoint first, then what followed the range.
    messages = s.derive_messages().to_list()
    assert messages[0]["content"][1]["text"] == "the gist"
    assert len(messages) == len(before) - 2


def test_a_compaction_inside_a_turn_records_that_turn() -> None:
    s = build_session("t", 1)
    s.append("turn/start", {"turn": 2})
    user(s, 10)
    nodes = list(s.surface.nodes)
    start, *_, end = compact(s, request_for(s, nodes[:3]))
    assert start.data["turn"] == 2 and end.data["turn"] == 2


def test_a_failed_compaction_is_start_and_end_with_the_error_and_changes_no_surface() -> None:
    s = build_session("f", 1)
    before = s.snapshot()
    logged = compact(s, request_for(s, list(before.nodes[:2]), error=SUMMARY_NOT_SMALLER))
    assert [e.type for e in logged] == ["compaction/start", "compaction/end"]
    assert logged[1].data == {"compactionId": "k1", "turn": None, "error": SUMMARY_NOT_SMALLER}
    after = s.snapshot()
    assert (after.nodes, after.replace_generation) == (before.nodes, before.replace_generation)


def test_compaction_request_fails_a_summary_that_is_not_smaller() -> None:
    s = flat(4, 100)
    nodes, events = surface_events(s)
    choice = choose_range(nodes, events, compact_at=0, retain_tokens=100)
    assert choice is not None and choice.tokens == 300
    snap = s.snapshot()
    small = compaction_request(snap, choice, events[:3], [{"type": "text", "text": "x" * 1196}])
    assert small.error is None  # 299 tokens
    assert small.generation == snap.replace_generation and small.shadowed == choice.shadowed
    same = compaction_request(snap, choice, events[:3], [{"type": "text", "text": "x" * 1200}])
    assert same.error == SUMMARY_NOT_SMALLER
    assert small.compaction_id != same.compaction_id


def test_extractive_summary_keeps_each_first_sentence_in_order() -> None:
    s = Session()
    s.append("user/message", {"id": "u", "role": "user", "source": {"kind": "user"},
                              "content": [{"type": "text", "text": "Fix the build. Then ship."}]},
             surface_op="append")
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    assistant(s, 1, 1, 2, calls=("c",))  # an empty text block and the call
    [block] = extractive_summary([s.event(0), s.event(3)])
    assert block["text"].split("\n") == ["- user: Fix the build", "- assistant: called bash"]
    cut = extractive_summary([s.event(0)] * 50, max_chars=100)[0]["text"]
    assert len(cut) == 100 and cut.endswith("…")


# -- the prune batch -----------------------------------------------------------------------

def test_a_prune_rewrites_only_the_content_of_one_result() -> None:
    s, (_, _, _, r, _) = with_call_at_the_cut()
    before = list(s.surface.nodes)
    original = s.event(r)
    request = PruneRequest(generation=0, target=r, shadowed_token_count=10,
                           content=[{"type": "text", "text": "short"}])
    target = check_prune(s, request)
    assert target is original
    length = len(s)
    prune, rewrite = s.append_batch(prune_specs(target, request, at=len(s)))
    assert (prune.seq, rewrite.seq) == (length, length + 1)
    assert prune.type == "compaction/prune"
    assert prune.data == {"shadowedRange": {"start": r, "end": r}, "shadowedSeqs": [r],
                          "shadowedTokenCount": 10}
    assert rewrite.surface_op == ReplaceOp(start=r, end=r)
    assert rewrite.source_event_seqs == (prune.seq, r)
    assert list(s.surface.nodes) == [rewrite.seq if n == r else n for n in before]
    # Everything but the block's content is the original's.
    block = rewrite.data["message"]["content"][0]
    assert block["content"] == [{"type": "text", "text": "short"}]
    old_block = original.data["message"]["content"][0]
    assert {k: v for k, v in block.items() if k != "content"} == {
        k: v for k, v in old_block.items() if k != "content"}
    assert {k: v for k, v in rewrite.data.items() if k != "message"} == {
        k: v for k, v in original.data.items() if k != "message"}
    assert {k: v for k, v in rewrite.data["message"].items() if k != "content"} == {
        k: v for k, v in original.data["message"].items() if k != "content"}
    assert original.data["message"]["content"][0]["content"][0]["text"] == "r" * 40


def test_prune_requests_keep_the_head_and_tail_of_long_results() -> None:
    s = Session()
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    assistant(s, 1, 1, 10, calls=("big", "small"))
    big = result(s, 1, 1, "big", 500)  # 2000 characters
    result(s, 1, 1, "small", 10)
    snap = s.snapshot()
    events = [s.event(n) for n in snap.nodes]
    [request] = prune_requests(snap, events, max_chars=1000, keep_chars=300)
    assert request.target == big and request.generation == snap.replace_generation
    assert request.shadowed_token_count == 500
    [block] = request.content
    text = block["text"]
    assert text.startswith("r" * 150 + "\n[") and text.endswith("]\n" + "r" * 150)
    assert text[150:-150] == PRUNE_MARKER.format(n=2000 - 300)
    assert "1700 characters pruned" in text


def test_oversized_results_are_the_tool_results_over_the_limit_in_surface_order() -> None:
    s = Session()
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    assistant(s, 1, 1, 10, calls=("a", "b", "c", "d"))
    over = result(s, 1, 1, "a", 251)  # 1004 characters
    result(s, 1, 1, "b", 250)  # exactly 1000: kept
    result(s, 1, 1, "c", 10)
    last = result(s, 1, 1, "d", 400)
    user(s, 2000)  # long, but not a tool result
    snap = s.snapshot()
    events = [s.event(n) for n in snap.nodes]
    surface = list(zip(snap.nodes, events, strict=True))
    found = oversized_results(snap.replace_generation, surface,
                              max_chars=1000)
    assert found.nodes == (over, last)
    assert [e.seq for e in found.events] == [over, last]
    assert found.replace_generation == snap.replace_generation
    # The requests built from the candidates are the ones built from the whole surface.
    assert prune_requests_for(found, keep_chars=300) == prune_requests(
        snap, events, max_chars=1000, keep_chars=300)
    assert oversized_results(0, surface, max_chars=10**6).nodes == ()


def test_a_results_length_counts_its_text_blocks_and_the_newlines_between_them() -> None:
    s = Session()
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    assistant(s, 1, 1, 10, calls=("a", "b"))

    def blocks(call_id: str, *sizes: int) -> int:
        inner: list[dict[str, object]] = [{"type": "text", "text": "r" * n} for n in sizes]
        inner.insert(1, {"type": "image", "data": "x" * 5000})  # not text: not counted
        return s.append("tool/result", {
            "turn": 1, "step": 1,
            "message": {"id": f"t-{call_id}", "role": "user",
                        "source": {"kind": "tool", "callId": call_id},
                        "content": [{"type": "tool-result", "toolCallId": call_id,
                                     "content": inner}]}}, surface_op="append").seq

    over = blocks("a", 500, 500)  # 500 + "\n" + 500 = 1001 characters
    blocks("b", 499, 500)  # exactly 1000
    snap = s.snapshot()
    surface = [(n, s.event(n)) for n in snap.nodes]
    assert oversized_results(0, surface, max_chars=1000).nodes == (over,)
    [request] = prune_requests_for(oversized_results(0, surface, max_chars=1000),
                                   keep_chars=100)
    assert PRUNE_MARKER.format(n=1001 - 100) in request.content[0]["text"]


# -- staleness ---------------------------------------------------------------------------

def test_a_request_from_an_older_generation_is_stale() -> None:
    s = build_session("g", 2)
    nodes = list(s.surface.nodes)
    first = request_for(s, nodes[:3])
    later = request_for(s, nodes[3:5])
    compact(s, first)
    with pytest.raises(StaleRequest, match="generation 0 is stale \\(now 1\\)"):
        check_compaction(s, first)
    # Its range is untouched, but the surface it was computed from is gone.
    assert set(later.shadowed) <= set(s.surface.nodes)
    with pytest.raises(StaleRequest, match="stale"):
        check_compaction(s, later)


@pytest.mark.parametrize("pick", [
    lambda nodes: (),                        # nothing to replace
    lambda nodes: (nodes[0], nodes[2]),      # not consecutive on the surface
    lambda nodes: (nodes[1], nodes[0]),      # out of order
    lambda nodes: (nodes[-1], nodes[-1] + 1),  # runs past the surface
    lambda nodes: (nodes[1] + 1,),           # the tool/call after a message: log only
])
def test_a_range_that_is_not_a_run_of_current_nodes_is_stale(pick: Any) -> None:
    s = build_session("r", 2)
    nodes = list(s.surface.nodes)
    assert s.event(nodes[1] + 1).type == "tool/call" and nodes[1] + 1 not in nodes
    shadowed = pick(nodes)
    with pytest.raises(StaleRequest, match="or its range moved"):
        check_compaction(s, request_for(s, list(shadowed)))
    assert len(s.surface.nodes) == len(nodes)


def test_a_range_moved_by_an_earlier_compaction_is_stale() -> None:
    s = build_session("m", 2)
    nodes = list(s.surface.nodes)
    compact(s, request_for(s, nodes[1:3]))
    # Same generation as now, but nodes[0] and nodes[3] are no longer neighbours.
    with pytest.raises(StaleRequest):
        check_compaction(s, request_for(s, [nodes[0], nodes[3]]))
    check_compaction(s, request_for(s, [nodes[0], s.surface.nodes[1], nodes[3]]))


def test_a_prune_target_that_is_no_longer_a_tool_result_node_is_stale() -> None:
    s, (u1, _, _, r, _) = with_call_at_the_cut()
    request = PruneRequest(generation=0, target=r, shadowed_token_count=1,
                           content=[{"type": "text", "text": "x"}])
    s.append_batch(prune_specs(check_prune(s, request), request, at=len(s)))
    with pytest.raises(StaleRequest, match=f"seq {r} is no longer a surface node"):
        check_prune(s, request)
    with pytest.raises(StaleRequest, match=f"seq {u1} is a user/message, not a tool/result"):
        check_prune(s, PruneRequest(generation=1, target=u1, content=[],
                                    shadowed_token_count=1))


def test_stale_request_pickles_and_conflict_is_one() -> None:
    exc = StaleRequest("request computed at generation 3 is stale")
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is StaleRequest and again.args == exc.args
    conflict = pickle.loads(pickle.dumps(Conflict("session 's': stale")))
    assert type(conflict) is Conflict and isinstance(conflict, StaleRequest)


def _parts_a_call(session: Session, run: list[int]) -> bool:
    """Naive reference for SPEC 13's rule: some tool call in ``run`` has its result
    elsewhere (or none yet), or some result in ``run`` answers a call made by a surface
    node outside ``run``."""
    def calls(seq: int) -> set[str]:
        event = session.event(seq)
        if event.type != "assistant/message":
            return set()
        return {b["id"] for b in event.data["message"]["content"]
                if b.get("type") == "tool-call"}

    def answers(seq: int) -> set[str]:
        event = session.event(seq)
        return ({event.data["message"]["source"]["callId"]}
                if event.type == "tool/result" else set())

    made = set().union(*(calls(n) for n in run))
    answered = set().union(*(answers(n) for n in run))
    outside = set().union(*(calls(n) for n in session.surface.nodes if n not in run))
    return bool(made - answered) or bool((answered - made) & outside)


@SETTINGS
@given(session=sessions(max_actions=8), data=st.data())
def test_every_current_run_compacts_to_a_checkpoint_unless_it_parts_a_call(
        session: Session, data: Any) -> None:
    nodes = list(session.surface.nodes)
    if not nodes:
        return
    i = data.draw(st.integers(0, len(nodes) - 1))
    j = data.draw(st.integers(i, len(nodes) - 1))
    generation, length = session.surface.replace_generation, len(session)
    request = request_for(session, nodes[i:j + 1])
    if _parts_a_call(session, nodes[i:j + 1]):
        with pytest.raises(SplitsToolCall, match="parts tool call"):
            compact(session, request)
        assert list(session.surface.nodes) == nodes and len(session) == length
        # A failed compaction replaces nothing, so any run may record one.
        check_compaction(session, request_for(session, nodes[i:j + 1], error="boom"))
        return
    _, _, checkpoint, _ = compact(session, request)
    assert list(session.surface.nodes) == [*nodes[:i], checkpoint.seq, *nodes[j + 1:]]
    assert session.surface.replace_generation == generation + 1
    assert checkpoint.source_event_seqs[2:] == tuple(nodes[i:j + 1])


# -- which turn is open ---------------------------------------------------------------------

def test_open_turn_of_an_empty_log_is_none() -> None:
    assert Session().open_turn() is None
    assert open_turn([]) is None


def test_open_turn_follows_turn_starts_and_ends() -> None:
    s = Session()
    user(s, 1)
    assert s.open_turn() is None
    s.append("turn/start", {"turn": 7})
    assert s.open_turn() == 7
    user(s, 1)
    s.append("todo/write", {"todos": []})
    assert s.open_turn() == 7
    s.append("turn/end", {"turn": 7, "reason": {"kind": "completed"}})
    assert s.open_turn() is None
    user(s, 1)
    assert s.open_turn() is None
    s.append("turn/start", {"turn": 8})
    assert s.open_turn() == 8
    log = list(s.log)
    assert open_turn(log) == 8
    assert open_turn(log, end=len(log) - 1) is None
    assert open_turn(log, end=3) == 7


def test_open_turn_forgets_what_a_rollback_removed() -> None:
    s = Session()
    s.append("turn/start", {"turn": 1})
    user(s, 1)
    assert s.open_turn() == 1
    with pytest.raises(RuntimeError), s.atomic():
        s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        assert s.open_turn() is None
        raise RuntimeError("write failed")
    assert s.open_turn() == 1
    # Same length as the rolled-back log, different events: the answer follows them.
    with pytest.raises(RuntimeError), s.atomic():
        s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        s.append("turn/start", {"turn": 2})
        assert s.open_turn() == 2
        raise RuntimeError("write failed")
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    user(s, 1)
    assert s.open_turn() is None


@SETTINGS
@given(session=sessions(max_actions=8))
def test_open_turn_agrees_with_a_forward_read_after_every_event(session: Session) -> None:
    replayed = Session()
    turn = None
    for event in session.log:
        replayed.append_event(event)
        if event.type == "turn/start":
            turn = event.data["turn"]
        elif event.type == "turn/end":
            turn = None
        assert replayed.open_turn() == turn
    assert session.open_turn() == turn


def test_a_range_that_parts_a_call_from_its_result_is_refused_whole() -> None:
    s, (u1, u2, a, r, u3) = with_call_at_the_cut()
    length = len(s)
    for run in ([u1, u2, a], [r], [r, u3], [a]):
        with pytest.raises(SplitsToolCall, match="parts tool call 'c1' from its result"):
            check_compaction(s, request_for(s, run))
    assert len(s) == length
    check_compaction(s, request_for(s, [a, r]))
    check_compaction(s, request_for(s, [u2, a, r, u3]))
    again = pickle.loads(pickle.dumps(SplitsToolCall("x")))
    assert type(again) is SplitsToolCall and again.args == ("x",)
