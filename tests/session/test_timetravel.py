"""Time travel from checkpoints: ``surface_at(k)`` equals a fresh fold of ``log[:k+1]``
for every k, whatever the checkpoint interval, the order of the calls, or a rollback in
between."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from surfacelog.schema.errors import SurfaceError
from surfacelog.session import Session, replay
from surfacelog.session.surface import SurfaceManager
from surfacelog.session.timetravel import SurfaceHistory

from support.programs import SETTINGS, materialize, programs


def fresh(log: list[Any], end: int) -> tuple[tuple[int, ...], int]:
    """The naive reference: fold the prefix from nothing."""
    manager = SurfaceManager()
    for event in log[:end]:
        manager.apply(manager.plan(event, log[:end]))
    return tuple(manager.nodes), manager.replace_generation


@SETTINGS
@given(program=programs(max_ops=40), every=st.integers(1, 9), data=st.data())
def test_every_prefix_in_any_order_equals_a_fresh_fold(program: Any, every: int,
                                                       data: Any) -> None:
    log, _ = materialize(program)
    history = SurfaceHistory(every)
    ends = data.draw(st.permutations(range(len(log) + 1)))
    for end in ends:
        assert history.surface_at(log, end) == fresh(log, end), end
    assert history.checkpoints == len(log) // every + 1


@SETTINGS
@given(program=programs(max_ops=40), data=st.data())
def test_session_time_travel_survives_a_rollback(program: Any, data: Any) -> None:
    log, _ = materialize(program)
    if len(log) < 2:
        return
    cut = data.draw(st.integers(1, len(log) - 1))
    s = replay(log[:cut])
    s._history = SurfaceHistory(2)  # small, so that checkpoints lie past the cut
    with pytest.raises(RuntimeError), s.atomic():
        s.append_batch(log[cut:])
        # Checkpoints built over events about to be rolled back...
        assert s.surface_at(len(log) - 1).nodes == fresh(log, len(log))[0]
        raise RuntimeError("roll back")
    assert len(s.log) == cut
    # ...are forgotten: the same seqs now hold other events.
    other = replay(log[:cut])
    for k in range(cut):
        assert s.surface_at(k) == other.surface_at(k)
    s.append_batch(log[cut:])
    for k in range(len(log)):
        assert s.surface_at(k).nodes == fresh(log, k + 1)[0]


def test_a_call_folds_at_most_one_interval() -> None:
    """From a checkpoint, not from the start: a log whose early event is made invalid
    after the checkpoints were built is not looked at again."""
    s = Session()
    for k in range(10):
        s.append("turn/start", {"turn": k + 1})
        s.append("turn/end", {"turn": k + 1, "reason": {"kind": "completed"}})
    history = SurfaceHistory(4)
    log = list(s.log)
    assert history.surface_at(log, 20) == ((), 0)
    log[1] = log[3]  # seq 3 at position 1: a fold from the start would refuse it
    with pytest.raises(SurfaceError):
        fresh(log, 20)
    assert history.surface_at(log, 19) == ((), 0)
