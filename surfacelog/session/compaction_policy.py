"""Deciding what to compact and prune, and with what (docs/rules.md §13): the requests a
compactor or pruner sends. Pure functions.

A compaction range starts at the surface's first node and ends at a safe cut: one that
splits no tool call from its result. Its summary is whatever a summariser makes of the
range (``extractive_summary`` is the deterministic default); a summary that would not
shrink the surface is sent as a failed compaction, so the log records the attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from msgspec import Struct

from surfacelog.schema.events import Event
from surfacelog.session.compaction import CompactionRequest, PruneRequest, safe_cuts
from surfacelog.session.derive import project
from surfacelog.session.session import SurfaceSnapshot
from surfacelog.session.tokens import block_tokens, event_tokens

SUMMARY_NOT_SMALLER = "summary is not smaller than the range"
"""The ``error`` of a compaction whose summary would not shrink the surface."""

PRUNE_MARKER = "\n[… {n} characters pruned by surfacelog …]\n"
"""Put where a pruned tool result lost its middle ``n`` characters."""


# -- deciding what to compact ------------------------------------------------------------

@dataclass(frozen=True)
class CompactionChoice:
    """The nodes to replace (the surface's first ``len(shadowed)``), their estimated
    tokens, and the whole surface's."""

    shadowed: tuple[int, ...]
    tokens: int
    total_tokens: int


def choose_range(nodes: Sequence[int], events: Sequence[Event], *, compact_at: int,
                 retain_tokens: int, min_nodes: int = 2) -> CompactionChoice | None:
    """The range to compact (``events[k]`` is the event of ``nodes[k]``), or ``None``.

    Only when the surface's estimate exceeds ``compact_at``: the range starts at the
    first node and ends at the last safe cut (``safe_cuts``) that still leaves at least
    ``retain_tokens`` in the tail and takes at least ``min_nodes`` nodes; ``None`` when
    no cut qualifies."""
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
    """A deterministic summary as one text block: the first sentence of each message's
    text (or the first tool it called), with its role, in order, cut to ``max_chars``.
    No model, no network."""
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
    """The replace request for ``choice`` with ``summary``, at the snapshot's
    generation, with fresh compaction and checkpoint ids; a failed one
    (``SUMMARY_NOT_SMALLER``) when the summary is not smaller than the range."""
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


# -- deciding what to prune ---------------------------------------------------------------

def _text_parts(event: Event) -> list[str] | None:
    """The texts of a tool result's text blocks (its text is them joined with
    newlines); ``None`` when its content is not a list of blocks."""
    block = event.data["message"]["content"][0]
    inner = block.get("content")
    if not isinstance(inner, list):
        return None
    return [str(b.get("text", "")) for b in inner
            if isinstance(b, dict) and b.get("type") == "text"]


def _result_text(event: Event) -> str | None:
    parts = _text_parts(event)
    return None if parts is None else "\n".join(parts)


def _result_chars(event: Event) -> int:
    """``len(_result_text(event) or "")`` without building the text: a pass measures
    every tool result on every session's surface, and prunes nearly none."""
    parts = _text_parts(event)
    return 0 if not parts else sum(map(len, parts)) + len(parts) - 1


class PruneCandidates(Struct, frozen=True):
    """The current tool results whose text exceeds a limit, as one read of a surface saw
    them (``oversized_results``): what a pruner needs from a session. A pruner asks for
    these instead of the whole surface and its events, which it would read on every
    pass of every session only to find, nearly always, nothing to prune."""

    replace_generation: int
    nodes: tuple[int, ...]
    """The surface seqs of the results, in surface order."""
    events: tuple[Event, ...]
    """The event of each of ``nodes``."""


def measure_result(sizes: list[tuple[int, int]], seq: int, event: Event
                   ) -> list[tuple[int, int]]:
    """A ``SurfaceTally`` step: ``sizes`` with, when ``event`` is a tool result, its
    node's seq and the length of its text."""
    if event.type == "tool/result":
        sizes.append((seq, _result_chars(event)))
    return sizes


def oversized_among(replace_generation: int, sizes: Iterable[tuple[int, int]],
                    event: Callable[[int], Event], *, max_chars: int) -> PruneCandidates:
    """The tool results of ``sizes`` (``measure_result``'s, in surface order) whose
    text exceeds ``max_chars`` characters, ``event(seq)`` giving each one's event."""
    nodes = tuple(seq for seq, chars in sizes if chars > max_chars)
    return PruneCandidates(replace_generation, nodes, tuple(map(event, nodes)))


def oversized_results(replace_generation: int, surface: Iterable[tuple[int, Event]], *,
                      max_chars: int) -> PruneCandidates:
    """The tool results among ``surface`` (each node's seq and its event, in surface
    order) whose text exceeds ``max_chars`` characters."""
    found = [(seq, event) for seq, event in surface if event.type == "tool/result"
             and _result_chars(event) > max_chars]
    return PruneCandidates(replace_generation, tuple(seq for seq, _ in found),
                           tuple(event for _, event in found))


def prune_requests_for(candidates: PruneCandidates, *, keep_chars: int
                       ) -> list[PruneRequest]:
    """One request per result of ``candidates``: keep its first and last
    ``keep_chars // 2`` characters with ``PRUNE_MARKER`` between them."""
    out = []
    head = keep_chars // 2
    for seq, event in zip(candidates.nodes, candidates.events, strict=True):
        text = _result_text(event) or ""
        cut = len(text) - 2 * head
        short = text[:head] + PRUNE_MARKER.format(n=cut) + text[len(text) - head:]
        out.append(PruneRequest(generation=candidates.replace_generation, target=seq,
                                content=[{"type": "text", "text": short}],
                                shadowed_token_count=event_tokens(event)))
    return out


def prune_requests(snapshot: SurfaceSnapshot, events: Sequence[Event], *, max_chars: int,
                   keep_chars: int) -> list[PruneRequest]:
    """One request per current tool result (``events[k]`` is the event of
    ``snapshot.nodes[k]``) whose text exceeds ``max_chars`` (``prune_requests_for``)."""
    surface = zip(snapshot.nodes, events, strict=True)
    return prune_requests_for(oversized_results(snapshot.replace_generation, surface,
                                                max_chars=max_chars),
                              keep_chars=keep_chars)


__all__ = [
    "PRUNE_MARKER",
    "SUMMARY_NOT_SMALLER",
    "CompactionChoice",
    "PruneCandidates",
    "choose_range",
    "compaction_request",
    "extractive_summary",
    "measure_result",
    "oversized_among",
    "oversized_results",
    "prune_requests",
    "prune_requests_for",
    "safe_cuts",
]
