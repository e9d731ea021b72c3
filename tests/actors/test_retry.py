"""``Backoff``: the one exponential backoff of the package (no Ray needed)."""

from __future__ import annotations

import asyncio

import pytest

from surfacelog.actors.retry import FIRST_DELAY_S, MAX_DELAY_S, Backoff


def test_delays_double_up_to_the_cap_and_reset_starts_again() -> None:
    backoff = Backoff(first_s=0.5, max_s=10.0)
    assert [backoff.next_delay() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    backoff.reset()
    assert [backoff.next_delay() for _ in range(2)] == [0.5, 1.0]


def test_the_default_delays_are_the_handles() -> None:
    backoff = Backoff(60.0)
    delays = [backoff.next_delay() for _ in range(8)]
    assert delays[0] == FIRST_DELAY_S and delays[-1] == MAX_DELAY_S


def test_without_a_budget_it_is_never_exhausted() -> None:
    backoff = Backoff()
    for _ in range(100):
        backoff.next_delay()
    assert not backoff.exhausted()
    assert backoff.remaining() == float("inf")


def test_a_budget_runs_out() -> None:
    backoff = Backoff(0.0)
    assert backoff.exhausted()
    assert backoff.remaining() == FIRST_DELAY_S  # a last attempt still gets to run
    assert not Backoff(60.0).exhausted()
    assert 59.0 < Backoff(60.0).remaining() <= 60.0


def test_wait_sleeps_the_next_delay() -> None:
    async def main() -> float:
        backoff = Backoff(5.0, first_s=0.01, max_s=0.02)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await backoff.wait()
        await backoff.wait()
        return loop.time() - started
    assert asyncio.run(main()) >= 0.03 - 0.005


@pytest.mark.parametrize(("first_s", "max_s"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 1.0)])
def test_bad_delays_are_refused(first_s: float, max_s: float) -> None:
    with pytest.raises(ValueError, match="first_s"):
        Backoff(first_s=first_s, max_s=max_s)
