"""Compaction triggers as DSH has them: request-context pressure (window x 0.8), a
provider's context overflow, and the fixed estimate as the fallback; through the pure
tracker and a real compactor over a Ray session handle."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surfacelog.actors.client import connect
from surfacelog.actors.compactor import Compactor
from surfacelog.actors.config import HostingConfig
from surfacelog.session import AppendSpec, Session
from surfacelog.session.pressure import (
    PressureTracker,
    compaction_threshold,
    context_tokens,
    is_context_overflow,
)
from surfacelog.session.tokens import event_tokens


def user(k: int, words: int = 50) -> dict:  # type: ignore[type-arg]
    return {"id": f"u{k}", "role": "user", "source": {"kind": "user"},
            "content": [{"type": "text", "text": " ".join(["word"] * words)}]}


def turn(s: Session, k: int, *, window: int | None = None, error: dict | None = None,  # type: ignore[type-arg]
         input_tokens: int | None = None) -> None:
    s.append("turn/start", {"turn": k})
    if window is not None:
        s.append("request/context", {"provider": "p", "model": "m", "contextWindow": window})
    s.append("user/message", user(k), surface_op="append")
    if input_tokens is not None:
        s.append("assistant/message", {
            "turn": k, "step": 1, "usage": {"inputTokens": input_tokens, "outputTokens": 1},
            "message": {"id": f"a{k}", "role": "assistant",
                        "source": {"kind": "model", "provider": "p", "model": "m"},
                        "content": [{"type": "text", "text": "ok"}]}},
            surface_op="append")
    reason = {"kind": "error", "error": error} if error else {"kind": "completed"}
    s.append("turn/end", {"turn": k, "reason": reason})


def pressure_of(s: Session) -> tuple[int, int]:
    tracker = PressureTracker()
    tracker.observe(s.log)
    p = tracker.pressure(sum(event_tokens(s.event(n)) for n in s.surface.nodes))
    return compaction_threshold(p, fallback=8000), context_tokens(p)


def test_without_a_window_the_fixed_threshold_holds() -> None:
    s = Session()
    turn(s, 1)
    assert pressure_of(s)[0] == 8000


def test_the_latest_window_times_0_8_is_the_threshold() -> None:
    s = Session()
    turn(s, 1, window=1000)
    turn(s, 2, window=500)
    assert pressure_of(s)[0] == 400


def test_reported_input_tokens_count_when_larger_than_the_estimate() -> None:
    s = Session()
    turn(s, 1, window=1000, input_tokens=950)
    threshold, tokens = pressure_of(s)
    assert tokens == 950 > threshold == 800


@pytest.mark.parametrize("error", [
    {"message": "This model's maximum context length is 128000 tokens",
     "code": "context_length_exceeded"},
    {"message": "prompt is too long: 210000 tokens > 200000 maximum"},
    {"message": "x", "code": "context-overflow"},
])
def test_an_overflow_forces_compaction_until_one_succeeds(error: dict) -> None:  # type: ignore[type-arg]
    s = Session()
    turn(s, 1, window=100000, error=error)
    assert pressure_of(s)[0] == 0
    s.append("compaction/start", {"compactionId": "c", "turn": None,
                                  "shadowedRange": {"start": 2, "end": 2}})
    s.append("compaction/end", {"compactionId": "c", "turn": None, "error": "x"})
    assert pressure_of(s)[0] == 0  # a failed compaction does not relieve it
    s.append("compaction/end", {"compactionId": "c2", "turn": None})
    assert pressure_of(s)[0] == 80000


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_other_errors_are_not_overflows(message: str) -> None:
    words = message.lower()
    expected = any(k in words.replace("_", " ").replace("-", " ") for k in (
        "context length", "context window", "context overflow", "contextlength",
        "contextwindow", "contextoverflow", "maximum context", "prompt is too long",
        "too many tokens", "token limit", "input is too long"))
    assert is_context_overflow({"message": message}) == expected


def test_incremental_observation_equals_one_pass() -> None:
    s = Session()
    whole = PressureTracker()
    step = PressureTracker()
    for k in range(1, 6):
        turn(s, k, window=1000 * k, input_tokens=10 * k,
             error={"message": "maximum context"} if k == 3 else None)
        step.observe(s.events(step.seen))
    whole.observe(s.log)
    assert (whole.context_window, whole.input_tokens, whole.overflow_seq, whole.seen) == \
        (step.context_window, step.input_tokens, step.overflow_seq, step.seen)


@pytest.mark.usefixtures("ray_local")
async def test_the_compactor_follows_the_window_and_the_overflow(tmp_path: Path) -> None:
    client = connect(config=HostingConfig.single(str(tmp_path / "p.db")))
    try:
        handle = client.session("p")
        compactor = Compactor(compact_at=100_000, retain_tokens=20)
        seq = 0

        async def add_turn(k: int, **kw: object) -> None:
            nonlocal seq
            s = Session()
            for e in (await handle.events()):
                s.append_event(e)
            turn(s, k, **kw)  # type: ignore[arg-type]
            specs = [AppendSpec(e.type, e.data, e.surface_op, e.source_event_seqs)
                     for e in s.events(seq)]
            seq += len((await handle.append_batch(specs, seq)).seqs)

        for k in range(1, 5):
            await add_turn(k)
        # 4 turns of ~63 estimated tokens: far below the fixed 100k threshold.
        assert await compactor.compact(handle) == "skipped"
        await add_turn(5, window=300)  # 0.8 x 300 = 240 < ~315 tokens on the surface
        assert await compactor.compact(handle) == "committed"
        generation = (await handle.surface()).replace_generation
        assert await compactor.compact(handle) == "skipped"
        seq = (await handle.surface()).length
        await add_turn(6, window=100_000, error={"message": "prompt is too long"})
        assert await compactor.compact(handle) == "committed"
        assert (await handle.surface()).replace_generation == generation + 1
        assert (await handle.pressure()).overflow_seq is None
    finally:
        client.shutdown()


def test_summarisers_load_by_import_path() -> None:
    from surfacelog.actors.compactor import load_summariser
    from surfacelog.actors.errors import SummariserError
    from surfacelog.session.compaction_policy import extractive_summary

    assert load_summariser("extractive") is extractive_summary
    assert load_summariser("surfacelog.session.compaction_policy:extractive_summary") \
        is extractive_summary
    assert load_summariser("support.summarisers.by_model").__name__ == "by_model"
    for bad, why in [("no_such_module_x:f", "cannot import"),
                     ("support.summarisers:missing", "no callable"),
                     ("support.summarisers:NOT_CALLABLE", "no callable"),
                     ("justaname", "expected module:function")]:
        with pytest.raises(SummariserError, match=why):
            load_summariser(bad)


@pytest.mark.usefixtures("ray_local")
async def test_an_async_summariser_loaded_by_path_writes_the_summary(
        tmp_path: Path) -> None:
    from surfacelog.actors.compactor import load_summariser

    client = connect(config=HostingConfig.single(str(tmp_path / "sum.db")))
    try:
        handle = client.session("sum")
        s = Session()
        for k in range(1, 5):
            turn(s, k, window=200)
        await handle.append_batch([AppendSpec(e.type, e.data, e.surface_op,
                                              e.source_event_seqs) for e in s.log], 0)
        compactor = Compactor(compact_at=100_000, retain_tokens=20,
                              summariser=load_summariser("support.summarisers:by_model"))
        assert await compactor.compact(handle) == "committed"
        texts = [b.get("text", "") for m in await handle.derive_messages()
                 for b in m["content"]]
        assert any(t.startswith("model summary of ") for t in texts), texts
    finally:
        client.shutdown()
