"""A deterministic scripted agent: real-shaped turns without a model or network.

Before a turn, the workspace context (``SessionHandle.set_context``: appended, replaced
when it changed, nothing when it did not). Per turn: ``turn/start``, a
``user/message``, then steps: ``step/start``, the model stream as
``assistant/chunk``s (a text block, tool-call blocks on tool steps, usage, finish), the
``assistant/message`` citing exactly its chunks, a ``tool/call`` per call, a
``tool/result`` per call citing its ``tool/call``, ``step/end``; the last step answers
without tools; ``turn/end``. The content comes from a generator seeded by the config's
seed and the session id, so one session always produces the same text.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from msgspec import Struct

from surfacelog.actors.choices import AppendMode as AppendMode
from surfacelog.session import AppendSpec

WORDS = (
    "surface", "log", "event", "replay", "seq", "turn", "step", "chunk", "tool", "result",
    "call", "compaction", "summary", "checkpoint", "provider", "model", "session", "actor",
    "journal", "commit", "batch", "query", "index", "table", "schema", "patch", "branch",
    "cache", "token", "window", "stream", "header", "cursor", "shard", "writer", "epoch",
)

TOOLS = ("bash", "read", "grep", "edit")


class ScriptConfig(Struct, frozen=True):
    """Sizes of the scripted agent's turns."""

    seed: int = 0
    steps: int = 3
    tool_calls: int = 2
    chunks: int = 8
    words: int = 40
    user_words: int = 24
    result_chars: int = 600
    big_result_every: int = 7
    big_result_chars: int = 9000
    mode: AppendMode = "batch"
    chunk_every_ms: float = 0.0
    """In chunk and stream modes, how far apart a session's appends arrive: its model stream's
    chunks as a model streams them, and between two streams the message, the tool
    calls and their results, as tools take time to run and a model to answer (and
    before a turn, its workspace context); 0: each as soon as the one before is
    acknowledged."""
    provider: str = "scripted"
    model: str = "scripted-1"
    outage_budget_s: float = 180.0
    """How long a driver keeps resending a request whose shard is unavailable before
    that session's agent gives up (``SessionDriver``)."""


@dataclass
class PlannedCall:
    call_id: str
    name: str
    arguments: str
    output: str


@dataclass
class PlannedStream:
    """One model attempt: its chunk events and the message they add up to."""

    chunks: list[AppendSpec]
    content: list[dict[str, Any]]
    calls: list[PlannedCall]
    usage: dict[str, int] = field(default_factory=dict)


class AgentScript:
    """Builds the events of one session's scripted turns."""

    def __init__(self, session_id: str, config: ScriptConfig) -> None:
        self.session_id = session_id
        self.config = config
        self._rng = random.Random(f"{config.seed}:{session_id}")
        self._ids = 0
        self._results = 0

    def _id(self, kind: str) -> str:
        self._ids += 1
        return f"{kind}-{self.session_id}-{self._ids}-{self._rng.randrange(1 << 30):08x}"

    def _sentence(self, n: int) -> str:
        # One ``choices`` call, not a ``choice`` per word: the tool results are made of
        # these, and a word at a time a turn's events cost 11.4-12.3 us each to make,
        # 7.5-7.7 us so (the in-process floor spends 79-136 us per event in all).
        return " ".join(self._rng.choices(WORDS, k=max(1, n))).capitalize() + "."

    def phase(self) -> float:
        """Where in ``chunk_every_ms`` this session's agent starts, in [0, 1): paced
        sessions started together would otherwise append in step, every session's
        events arriving at the same instants, a burst no fleet of agents makes. Seeded
        by the config's seed and the session id, apart from the content's generator."""
        return random.Random(f"{self.config.seed}:{self.session_id}:phase").random()

    def workspace(self, turn: int) -> str:
        """The workspace context the agent shows the model before ``turn``: it changes
        every second turn, so a run both replaces the context and finds it current."""
        phase = turn // 2
        rng = random.Random(f"{self.config.seed}:{self.session_id}:ws:{phase}")
        files = sorted({rng.choice(WORDS) + ".py" for _ in range(3)})
        return (f"<workspace>\ncwd: /work/{self.session_id}\nbranch: task-{phase}\n"
                f"changed: {', '.join(files)}\n</workspace>")

    def turn_open(self, turn: int) -> list[AppendSpec]:
        """``turn/start`` and the user's message."""
        user = {"id": self._id("u"), "role": "user", "source": {"kind": "user"},
                "content": [{"type": "text",
                             "text": self._sentence(self.config.user_words)}]}
        return [AppendSpec("turn/start", {"turn": turn}),
                AppendSpec("user/message", user, surface_op="append")]

    def step_start(self, turn: int, step: int) -> AppendSpec:
        return AppendSpec("step/start", {"turn": turn, "step": step})

    def step_end(self, turn: int, step: int) -> AppendSpec:
        return AppendSpec("step/end", {"turn": turn, "step": step})

    def turn_end(self, turn: int) -> AppendSpec:
        return AppendSpec("turn/end", {"turn": turn, "reason": {"kind": "completed"}})

    def _chunk(self, turn: int, step: int, chunk: dict[str, Any]) -> AppendSpec:
        return AppendSpec("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})

    def stream(self, turn: int, step: int, final: bool) -> PlannedStream:
        """The chunks of one model attempt and what they add up to."""
        cfg = self.config
        text = self._sentence(cfg.words)
        pieces = _split(text, cfg.chunks)
        chunks = [self._chunk(turn, step, {"type": "block-start", "index": 0,
                                           "blockType": "text"})]
        chunks += [self._chunk(turn, step, {"type": "text-delta", "index": 0, "text": p})
                   for p in pieces]
        text_block = {"type": "text", "text": text}
        chunks.append(self._chunk(turn, step, {"type": "block-end", "index": 0,
                                               "block": text_block}))
        content: list[dict[str, Any]] = [text_block]
        calls: list[PlannedCall] = []
        for index in range(1, 0 if final else cfg.tool_calls + 1):
            call = self._call()
            calls.append(call)
            block = {"type": "tool-call", "id": call.call_id, "name": call.name,
                     "arguments": call.arguments}
            chunks.append(self._chunk(turn, step, {"type": "block-start", "index": index,
                                                   "blockType": "tool-call"}))
            chunks.append(self._chunk(turn, step, {
                "type": "tool-call-delta", "index": index, "id": call.call_id,
                "name": call.name, "argumentsDelta": call.arguments}))
            chunks.append(self._chunk(turn, step, {"type": "block-end", "index": index,
                                                   "block": block}))
            content.append(block)
        usage = {"inputTokens": 1000 + 40 * turn + step, "outputTokens": len(text) // 4}
        chunks.append(self._chunk(turn, step, {"type": "usage", "usage": usage}))
        chunks.append(self._chunk(turn, step, {
            "type": "finish", "reason": {"kind": "stop" if final else "tool-calls"}}))
        return PlannedStream(chunks, content, calls, usage)

    def _call(self) -> PlannedCall:
        cfg = self.config
        self._results += 1
        name = self._rng.choice(TOOLS)
        arguments = json.dumps({"command": self._sentence(4)}, separators=(",", ":"))
        size = (cfg.big_result_chars
                if cfg.big_result_every and self._results % cfg.big_result_every == 0
                else cfg.result_chars)
        lines = []
        total = 0
        while total < size:
            line = self._sentence(8)
            lines.append(line)
            total += len(line) + 1
        return PlannedCall(self._id("call"), name, arguments, "\n".join(lines)[:size])

    def message(self, turn: int, step: int, stream: PlannedStream,
                chunk_seqs: list[int]) -> AppendSpec:
        """The ``assistant/message`` citing exactly the chunks it was streamed from."""
        cfg = self.config
        message = {"id": self._id("a"), "role": "assistant",
                   "source": {"kind": "model", "provider": cfg.provider, "model": cfg.model},
                   "content": stream.content}
        return AppendSpec("assistant/message",
                          {"turn": turn, "step": step, "message": message,
                           "usage": stream.usage},
                          surface_op="append", source_event_seqs=list(chunk_seqs))

    def tool_call(self, turn: int, step: int, call: PlannedCall) -> AppendSpec:
        return AppendSpec("tool/call", {"turn": turn, "step": step, "callId": call.call_id,
                                        "name": call.name, "arguments": call.arguments})

    def tool_result(self, turn: int, step: int, call: PlannedCall, call_seq: int) -> AppendSpec:
        """The ``tool/result`` citing its ``tool/call``."""
        message = {"id": self._id("t"), "role": "user",
                   "source": {"kind": "tool", "callId": call.call_id},
                   "content": [{"type": "tool-result", "toolCallId": call.call_id,
                                "content": [{"type": "text", "text": call.output}],
                                "isError": False}]}
        return AppendSpec("tool/result", {"turn": turn, "step": step, "message": message},
                          surface_op="append", source_event_seqs=[call_seq])


def _split(text: str, parts: int) -> list[str]:
    parts = max(1, min(parts, len(text)))
    size = -(-len(text) // parts)
    return [text[k:k + size] for k in range(0, len(text), size)]
