"""Compaction and pruning policy: what to replace, and with what. Pure functions.

Token estimate: the length of a block's text divided by 4, rounded up, summed over the
blocks of a message (text, reasoning, a tool call's name and arguments, a tool result's
nested blocks; other blocks count 1 token). It is the usual rule of thumb for English and
code, deterministic, and needs no tokenizer; the actual model's count differs by tens of
percent, which only moves when the threshold trips.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from surfacelog.actors.protocol import CompactionRequest, PruneRequest
from surfacelog.schema.events import Event
from surfacelog.session.derive import project
from surfacelog.session.session import SurfaceSnapshot

SUMMARY_NOT_SMALLER = "summary is not smaller than the range"


def _block_chars(block: Any) -> int:
    if not isinstance(block, dict):
        return 4
    kind = block.get("type")
    if kind in ("text", "reasoning"):
        return len(str(block.get("text", "")))
    if kind == "tool-call":
        return len(str(block.get("name", ""))) + len(str(block.get("arguments", "")))
    if kind == "tool-result":
        inner = block.get("content")
        return sum(_block_chars(b) for b in inner) if isinstance(inner, list) else 4
    return 4


def block_tokens(blocks: Sequence[Any]) -> int:
    """Estimated tokens of a block list (characters / 4, rounded up)."""
    return -(-sum(_block_chars(b) for b in blocks) // 4)


def event_tokens(event: Event) -> int:
    """Estimated tokens the event's projected message costs (0 when it projects none)."""
    message = project(event)
    return 0 if message is None else block_tokens(message.get("content", []))


def _call_ids(event: Event) -> tuple[list[str], str | None]:
    """The tool-call ids an assistant message opens and the call id a tool result closes."""
    message = project(event)
    if message is None:
        return [], None
    if event.type == "tool/result":
        return [], str(message["source"].get("callId"))
    opened = [str(b.get("id")) for b in message.get("content", [])
              if isinstance(b, dict) and b.get("type") == "tool-call"]
    return opened, None


def safe_cuts(events: Sequence[Event]) -> list[bool]:
    """``cuts[k]`` is True when a cut before node k splits no tool call from its result:
    every tool call opened in ``events[:k]`` has its result in ``events[:k]``."""
    open_calls: set[str] = set()
    cuts = [True]
    for event in events:
        opened, closed = _call_ids(event)
        open_calls.update(opened)
        if closed is not None:
            open_calls.discard(closed)
        cuts.append(not open_calls)
    return cuts


@dataclass(frozen=True)
class CompactionChoice:
    """The nodes to replace (positions ``0..end``) and their estimated tokens."""

    shadowed: tuple[int, ...]
    tokens: int
    total_tokens: int


def choose_range(nodes: Sequence[int], events: Sequence[Event], *, compact_at: int,
                 retain_tokens: int, min_nodes: int = 2) -> CompactionChoice | None:
    """The range to compact, or ``None``: only when the surface estimate exceeds
    ``compact_at``; the range starts at the first node and ends at the last safe cut
    that still leaves at least ``retain_tokens`` in the tail."""
    tokens = [event_tokens(e) for e in events]
    total = sum(tokens)
    if total <= compact_at:
        return None
    cuts = safe_cuts(events)
    tail = 0
    # Walk from the end: the cut k keeps nodes[k:]; take the largest safe k whose tail
    # holds at least retain_tokens.
    for k in range(len(nodes), 0, -1):
        if k < len(nodes):
            tail += tokens[k]
        if tail >= retain_tokens and cuts[k] and k >= min_nodes:
            return CompactionChoice(tuple(nodes[:k]), total - tail, total)
    return None


def extractive_summary(events: Sequence[Event], max_chars: int = 1200) -> list[dict[str, Any]]:
    """A deterministic summary: the first sentence of each message's text, with its role,
    in order, cut to ``max_chars``. No model, no network."""
    lines: list[str] = []
    for event in events:
        message = project(event)
        if message is None:
            continue
        text = " ".join(str(b.get("text", "")) for b in message.get("content", [])
                        if isinstance(b, dict) and b.get("type") == "text")
        if not text:
            for b in message.get("content", []):
                if isinstance(b, dict) and b.get("type") == "tool-call":
                    text = f"called {b.get('name')}"
                    break
        first = " ".join(text.split()).split(". ")[0][:160]
        if first:
            lines.append(f"- {message.get('role')}: {first}")
    body = "\n".join(lines)
    if len(body) > max_chars:
        body = body[: max_chars - 1] + "…"
    return [{"type": "text", "text": body}]


def compaction_request(snapshot: SurfaceSnapshot, choice: CompactionChoice,
                       events: Sequence[Event], summary: list[dict[str, Any]]
                       ) -> CompactionRequest:
    """The replace request for ``choice``; a failed one when the summary is not smaller
    than the range it would replace."""
    error = None if block_tokens(summary) < choice.tokens else SUMMARY_NOT_SMALLER
    return CompactionRequest(
        compaction_id=str(uuid.uuid4()),
        generation=snapshot.replace_generation,
        shadowed=choice.shadowed,
        summary=summary,
        shadowed_token_count=choice.tokens,
        checkpoint_id=str(uuid.uuid4()),
        error=error,
    )


PRUNE_MARKER = "\n[… {n} characters pruned by surfacelog …]\n"


def _result_text(event: Event) -> str | None:
    block = event.data["message"]["content"][0]
    inner = block.get("content")
    if not isinstance(inner, list):
        return None
    return "\n".join(str(b.get("text", "")) for b in inner
                     if isinstance(b, dict) and b.get("type") == "text")


def prune_requests(snapshot: SurfaceSnapshot, events: Sequence[Event], *, max_chars: int,
                   keep_chars: int) -> list[PruneRequest]:
    """One request per current tool result whose text exceeds ``max_chars``: keep the
    first and last ``keep_chars // 2`` characters with a marker between them."""
    out = []
    head = keep_chars // 2
    for seq, event in zip(snapshot.nodes, events, strict=True):
        if event.type != "tool/result":
            continue
        text = _result_text(event)
        if text is None or len(text) <= max_chars:
            continue
        cut = len(text) - 2 * head
        short = text[:head] + PRUNE_MARKER.format(n=cut) + text[len(text) - head:]
        out.append(PruneRequest(generation=snapshot.replace_generation, target=seq,
                                content=[{"type": "text", "text": short}],
                                shadowed_token_count=event_tokens(event)))
    return out
