"""``replay`` folds in chunks through the batch path: it must accept and refuse exactly
what appending the events one by one does, with the same message and index."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from surfacelog.schema.errors import LogError
from surfacelog.schema.events import Event
from surfacelog.session import Session, replay, shapes
from surfacelog.session import session as session_module

from support.programs import SETTINGS, materialize, programs


def one_by_one(events: list[Event]) -> tuple[Session | None, str | None]:
    """The naive reference: ``append_event`` each, the error prefixed with its index."""
    s = Session()
    for index, event in enumerate(events):
        try:
            s.append_event(event)
        except LogError as exc:
            return None, f"invalid seed event at index {index}: {exc}"
    return s, None


def by_replay(events: list[Event]) -> tuple[Session | None, str | None]:
    try:
        return replay(events), None
    except LogError as exc:
        return None, str(exc)


BREAKS = [
    lambda e: msgspec.structs.replace(e, seq=e.seq + 1),
    lambda e: msgspec.structs.replace(e, data={"nonsense": True}),
    lambda e: msgspec.structs.replace(e, surface_op="append"),
    lambda e: msgspec.structs.replace(e, type="no/such-type"),
    lambda e: msgspec.structs.replace(e, source_event_seqs=(10**6,)),
]


@SETTINGS
@given(program=programs(max_ops=40), chunk=st.integers(1, 9), data=st.data())
def test_replay_agrees_with_appending_one_by_one(program: Any, chunk: int,
                                                  data: Any) -> None:
    log, _ = materialize(program)
    if data.draw(st.booleans()) and log:
        k = data.draw(st.integers(0, len(log) - 1))
        log = [*log[:k], data.draw(st.sampled_from(BREAKS))(log[k]), *log[k + 1:]]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(session_module, "_REPLAY_CHUNK", chunk)
        got, error = by_replay(log)
    want, expected = one_by_one(log)
    assert error == expected
    if want is not None:
        assert got is not None
        assert list(got.surface.nodes) == list(want.surface.nodes)
        assert got.derive_messages() == want.derive_messages()
        assert got.replacements() == want.replacements()


@SETTINGS
@given(program=programs(max_ops=40), window=st.integers(1, 5), data=st.data())
def test_payload_check_windows_agree_with_appending_one_by_one(
        program: Any, window: int, data: Any) -> None:
    # ``payloads_valid`` checks payloads a window at a time: a bad payload must leave
    # only its own window's group unmarked, and be named as appending names it.
    log, _ = materialize(program)
    if log:
        k = data.draw(st.integers(0, len(log) - 1))
        log = [*log[:k], data.draw(st.sampled_from(BREAKS))(log[k]), *log[k + 1:]]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(shapes, "_WINDOW", window)
        got, error = by_replay(log)
        ok = shapes.payloads_valid(log)
    want, expected = one_by_one(log)
    assert error == expected
    for event, marked in zip(log, ok, strict=True):
        if marked:
            shapes.check_payload(event)  # raises for a payload marked valid wrongly
    if want is not None:
        assert got is not None
        assert list(got.surface.nodes) == list(want.surface.nodes)
