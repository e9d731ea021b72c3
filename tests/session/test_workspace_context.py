"""Workspace context: one current context node per plugin on the surface, replaced
with provenance when it changes, never edited in the log; through the pure core and a
real Ray session handle."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surfacelog.actors.client import connect
from surfacelog.actors.config import HostingConfig
from surfacelog.schema.events import ReplaceOp
from surfacelog.session import Session, replay
from surfacelog.session.context import context_message, context_spec, current_context
from surfacelog.session.errors import ContextError

USER = {"id": "u", "role": "user", "source": {"kind": "user"},
        "content": [{"type": "text", "text": "hi"}]}


def set_context(session: Session, body: str, plugin: str = "workspace") -> None:
    spec = context_spec(session, context_message(body, plugin=plugin))
    if spec is not None:
        session.append_batch([spec])


def shown(session: Session) -> list[tuple[str, str]]:
    """The (plugin, text) of every context message the model sees, in order."""
    out = []
    for m in session.derive_messages():
        source = m["source"]
        if source.get("kind") == "plugin":
            out.append((source["plugin"], m["content"][0]["text"]))
    return out


def test_first_context_is_appended_then_replaced_in_place_with_provenance() -> None:
    s = Session()
    s.append("user/message", USER, surface_op="append")
    set_context(s, "cwd: /a")
    first = current_context(s, "workspace")
    assert first is not None and first.surface_op == "append"
    s.append("user/message", {**USER, "id": "u2"}, surface_op="append")
    set_context(s, "cwd: /b")
    second = current_context(s, "workspace")
    assert second is not None
    assert second.surface_op == ReplaceOp(first.seq, first.seq)
    assert second.source_event_seqs == (first.seq,)
    # The model sees the new context once, where the old one was; the log keeps both.
    assert [m["id"] for m in s.derive_messages()][:2] == ["u", second.data["id"]]
    assert shown(s) == [("workspace", "cwd: /b")]
    assert s.event(first.seq).data["content"][0]["text"] == "cwd: /a"


def test_the_same_context_again_appends_nothing() -> None:
    s = Session()
    set_context(s, "cwd: /a")
    length = len(s.log)
    assert context_spec(s, context_message("cwd: /a")) is None
    assert len(s.log) == length


def test_plugins_keep_their_own_context() -> None:
    s = Session()
    set_context(s, "w1", "workspace")
    set_context(s, "g1", "git")
    set_context(s, "w2", "workspace")
    assert shown(s) == [("workspace", "w2"), ("git", "g1")]


def test_a_context_without_a_plugin_is_refused() -> None:
    with pytest.raises(ContextError, match="needs source"):
        context_spec(Session(), USER)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["workspace", "git"]),
                          st.sampled_from(["a", "b", "c"])), max_size=12))
def test_the_model_sees_each_plugin_s_latest_context_once(
        changes: list[tuple[str, str]]) -> None:
    s = Session()
    latest: dict[str, str] = {}
    order: list[str] = []
    for plugin, body in changes:
        set_context(s, body, plugin)
        if plugin not in latest:
            order.append(plugin)
        latest[plugin] = body
    # A naive reference: each plugin once, at its first position, with its last text.
    assert shown(s) == [(p, latest[p]) for p in order]
    # Replaying the log gives the same surface.
    again = replay(s.log)
    assert again.derive_messages() == s.derive_messages()


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("placement", ["dedicated", "packed"])
async def test_set_context_through_the_handle_survives_reactivation(
        tmp_path: Path, placement: str) -> None:
    client = connect(config=HostingConfig.single(
        str(tmp_path / f"ctx-{placement}.db"), placement=placement,  # type: ignore[arg-type]
        packs=2))
    try:
        handle = client.session("ctx")
        first = await handle.set_context("cwd: /a")
        assert first is not None and first.type == "context/message"
        assert await handle.set_context("cwd: /a") is None
        second = await handle.set_context("cwd: /b")
        assert second is not None and second.source_event_seqs == (first.seq,)
        await handle.flush()
        assert await client.passivate_all() == []
        messages = await handle.derive_messages()
        assert [m["content"][0]["text"] for m in messages] == ["cwd: /b"]
        # After reactivation from the store the current context is still found.
        assert await handle.set_context("cwd: /b") is None
    finally:
        client.shutdown()


def test_inspect_shows_the_context_the_model_sees(tmp_path: Path) -> None:
    import asyncio

    from typer.testing import CliRunner

    from surfacelog.cli import app
    from surfacelog.schema.header import SessionHeader
    from surfacelog.store.sqlite import SqliteEventStore

    s = Session(header=SessionHeader(version=0, id="ws", created_at=1_700_000_000_000))
    s.append("user/message", USER, surface_op="append")
    set_context(s, "cwd: /a [bold]x[/bold]")
    first = len(s.log) - 1
    set_context(s, "cwd: /b")
    db = tmp_path / "ctx.db"

    async def store_it() -> None:
        store = await SqliteEventStore.open(str(db))
        try:
            await store.create(s.header, list(s.log))  # type: ignore[arg-type]
            await store.flush()
        finally:
            await store.close()

    asyncio.run(store_it())
    runner = CliRunner()
    now = runner.invoke(app, ["inspect", str(db), "ws"], terminal_width=200)
    assert now.exit_code == 0, now.output
    assert f"context from workspace (seq {first + 1}): cwd: /b" in now.output
    assert "/a" not in now.output.split("context from")[-1]
    past = runner.invoke(app, ["inspect", str(db), "ws", "--at", str(first)],
                         terminal_width=200)
    assert past.exit_code == 0, past.output
    # Data is shown as it is, never as markup.
    assert f"context from workspace (seq {first}): cwd: /a [bold]x[/bold]" in past.output
