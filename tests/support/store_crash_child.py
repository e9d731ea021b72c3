"""Child process of ``test_store_crash``: take a stored session for writing and append to
it forever, printing ``ack <seq>`` each time a flush or a durable append returns (every
event up to ``seq`` is then durable). The parent SIGKILLs it at random moments.

    python store_crash_child.py DB SESSION SEED
"""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

from surfacelog.session import AppendSpec
from surfacelog.store import SqliteEventStore


def _text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def _turn(turn: int, rng: random.Random) -> list[list[AppendSpec]]:
    """A turn as the batches a host would persist: every batch is all or nothing, so
    ``turn/start`` always comes with its ``user/message``."""
    batches = [[AppendSpec("turn/start", {"turn": turn}),
                AppendSpec("user/message", {"id": f"u-{turn}", "role": "user",
                                            "source": {"kind": "user"},
                                            "content": [_text(f"request {turn}")]},
                           surface_op="append")]]
    for step in range(1, rng.randint(1, 3) + 1):
        call = f"call-{turn}-{step}"
        chunks = [AppendSpec("assistant/chunk", {"turn": turn, "step": step, "chunk": {
            "type": "text-delta", "index": 0, "text": "x" * rng.randint(1, 400)}})
            for _ in range(rng.randint(0, 4))]
        batches.append([AppendSpec("step/start", {"turn": turn, "step": step}), *chunks])
        batches.append([AppendSpec("assistant/message", {
            "turn": turn, "step": step,
            "message": {"id": f"a-{turn}-{step}", "role": "assistant",
                        "source": {"kind": "model", "provider": "p", "model": "m"},
                        "content": [_text("answer"), {"type": "tool-call", "id": call,
                                                      "name": "bash", "arguments": "{}"}]}},
            surface_op="append")])
        batches.append([AppendSpec("tool/call", {"turn": turn, "step": step, "callId": call,
                                                 "name": "bash", "arguments": "{}"})])
        batches.append([AppendSpec("tool/result", {
            "turn": turn, "step": step,
            "message": {"id": f"t-{call}", "role": "user",
                        "source": {"kind": "tool", "callId": call},
                        "content": [{"type": "tool-result", "toolCallId": call,
                                     "content": [_text("ok")]}]}},
            surface_op="append")])
        batches.append([AppendSpec("step/end", {"turn": turn, "step": step})])
    batches.append([AppendSpec("turn/end", {"turn": turn, "reason": {"kind": "completed"}})])
    return batches


def _ack(seq: int) -> None:
    sys.stdout.write(f"ack {seq}\n")
    sys.stdout.flush()


async def main(db: str, session_id: str, seed: int) -> None:
    rng = random.Random(seed)
    store = await SqliteEventStore.open(db, group_delay_ms=rng.choice([0.0, 0.5, 2.0]))
    opened = await store.open_session(session_id)
    session, epoch = opened.session, opened.epoch
    _ack(len(session) - 1)  # the repaired log is durable
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    turn = sum(1 for e in session.log if e.type == "turn/start")
    while True:
        turn += 1
        for specs in _turn(turn, rng):
            # Resolve each tool/result's provenance now that its tool/call has a seq.
            if specs[0].type == "tool/result":
                specs = [AppendSpec(specs[0].type, specs[0].data, specs[0].surface_op,
                                    [len(session) - 1])]
            events = session.append_batch(specs)
            durable = rng.random() < 0.3
            await store.append(session_id, events, epoch=epoch, durable=durable)
            if durable:
                _ack(events[-1].seq)
            elif rng.random() < 0.3:
                await store.flush()
                _ack(events[-1].seq)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
