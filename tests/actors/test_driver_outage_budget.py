"""A driver resends through an outage for as long as its script's outage budget, then
gives up with the last refusal (``run --outage-budget``). The retry policy alone: no Ray."""

from __future__ import annotations

import time
from typing import Any

import pytest

from surfacelog.actors.driver import DriverProgress, SessionDriver
from surfacelog.actors.errors import ShardUnavailable
from surfacelog.actors.script import AgentScript, ScriptConfig


def _driver(budget_s: float) -> SessionDriver:
    script = AgentScript("s", ScriptConfig(outage_budget_s=budget_s))
    return SessionDriver(handle=None, script=script,  # type: ignore[arg-type]
                         progress=DriverProgress(), started=time.monotonic())


async def test_an_outage_longer_than_the_budget_ends_with_the_last_refusal() -> None:
    driver = _driver(0.3)
    calls = 0

    async def refused() -> Any:
        nonlocal calls
        calls += 1
        raise ShardUnavailable(f"refusal {calls}")

    started = time.monotonic()
    with pytest.raises(ShardUnavailable) as info:
        await driver._through_outage(refused)
    assert time.monotonic() - started >= 0.3
    assert str(info.value) == f"refusal {calls}" and calls >= 2
    assert driver.shard.unavailable == calls


async def test_an_outage_within_the_budget_is_waited_out_and_timed() -> None:
    driver = _driver(30.0)
    answers: list[Any] = [ShardUnavailable("down"), ShardUnavailable("down"), "ok"]

    async def flaky() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert await driver._through_outage(flaky) == "ok"
    assert driver.shard.unavailable == 2 and len(driver.shard.outages_s) == 1
