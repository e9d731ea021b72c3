"""Compaction and pruning (docs/rules.md §13): the requests, and the batches they become.

A compactor never edits the log. It reads the surface, decides what to replace
(``compaction_policy``) and sends a request; the session checks that the request still
fits its surface (``check_compaction``, ``check_prune``) and appends the batch the
request stands for (``compaction_specs``, ``prune_specs``) as one unit:

* a compaction: ``compaction/start``, ``compaction/summary``, the checkpoint (a
  ``user/message`` from the ``compact`` plugin replacing the shadowed range and citing
  the start, the summary and every shadowed seq), ``compaction/end``; a failed one is
  ``compaction/start`` then ``compaction/end`` with its ``error``;
* a prune: ``compaction/prune``, then a ``tool/result`` replacing exactly the target
  node, identical to it except for the block's ``content``.

Pure: no I/O, no asyncio, no Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from msgspec import Struct

from surfacelog.schema.events import Event, ReplaceOp
from surfacelog.session.derive import project
from surfacelog.session.errors import SplitsToolCall, StaleRequest
from surfacelog.session.session import AppendSpec, Session

CHECKPOINT_INTRO = ("Checkpoint: a condensed account of an earlier part of this "
                    "conversation follows.\n\n<compacted-summary>")
CHECKPOINT_OUTRO = "</compacted-summary>"
"""The checkpoint's text is the summary's blocks between these two."""


# -- requests --------------------------------------------------------------------------

class CompactionRequest(Struct, frozen=True):
    """Replace ``shadowed`` (a contiguous run of current nodes) with a checkpoint.

    ``generation`` and ``shadowed`` are what the compactor read; the session refuses the
    request (``StaleRequest``; ``Conflict`` through the actors) when its surface moved
    on. With ``error`` set the session records a failed compaction (start and end, no
    checkpoint).
    """

    compaction_id: str
    generation: int
    shadowed: tuple[int, ...]
    summary: list[dict[str, Any]]
    shadowed_token_count: int
    checkpoint_id: str
    provider: str = "surfacelog"
    model: str = "extractive-v1"
    error: str | None = None


class PruneRequest(Struct, frozen=True):
    """Shorten the tool result at seq ``target``: a ``compaction/prune`` then a
    content-only ``tool/result`` rewrite with ``content``."""

    generation: int
    target: int
    content: list[dict[str, Any]]
    shadowed_token_count: int


# -- safe cuts ---------------------------------------------------------------------------

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
    """``cuts[k]`` (k in ``0..len(events)``) is True when a cut before node k splits no
    tool call from its result: every tool call opened in ``events[:k]`` has its result
    in ``events[:k]``."""
    open_calls: set[str] = set()
    cuts = [True]
    for event in events:
        opened, closed = _call_ids(event)
        open_calls.update(opened)
        if closed is not None:
            open_calls.discard(closed)
        cuts.append(not open_calls)
    return cuts


# -- staleness ---------------------------------------------------------------------------

def check_compaction(session: Session, request: CompactionRequest) -> None:
    """Return when ``request`` still fits ``session``: its ``generation`` is the
    surface's ``replace_generation`` and its ``shadowed`` is a non-empty run of
    consecutive current nodes. Raises ``StaleRequest`` otherwise, and
    ``SplitsToolCall`` when a successful compaction's range would split a tool call
    from its result (a failed one replaces nothing and is not checked)."""
    surface = session.surface
    generation, shadowed = request.generation, request.shadowed
    stale = generation != surface.replace_generation or not shadowed
    if not stale:
        nodes = surface.nodes
        try:
            i = nodes.index(shadowed[0])
        except ValueError:
            stale = True
        else:
            stale = list(nodes[i:i + len(shadowed)]) != list(shadowed)
    if stale:
        raise StaleRequest(
            f"request computed at generation {generation} is stale (now "
            f"{surface.replace_generation}) or its range moved")
    if request.error is None:
        _check_no_split(session, shadowed)


def _check_no_split(session: Session, shadowed: Sequence[int]) -> None:
    """Raise ``SplitsToolCall`` when hiding ``shadowed`` would part a tool call from its
    result: a call in the range whose result is not in it (outside, or still to come),
    or a result in the range whose call is a surface node outside it."""
    opened: set[str] = set()
    closed: set[str] = set()
    for seq in shadowed:
        calls, result = _call_ids(session.event(seq))
        opened.update(calls)
        if result is not None:
            closed.add(result)
    parted = opened - closed
    orphans = closed - opened
    if orphans:
        inside = set(shadowed)
        for seq in session.surface.nodes:
            if seq not in inside:
                parted.update(orphans.intersection(_call_ids(session.event(seq))[0]))
    if parted:
        raise SplitsToolCall(
            f"compaction range {shadowed[0]}..{shadowed[-1]} parts tool call "
            f"{sorted(parted)[0]!r} from its result")


def check_prune(session: Session, request: PruneRequest) -> Event:
    """The tool result ``request`` prunes. Raises ``StaleRequest`` when its target is
    no longer a surface node, or is not a ``tool/result``."""
    # The generation is not compared: any replace may have run since the pruner read
    # the surface, and what matters is only that the target is still a current node.
    if request.target not in session.surface.nodes:
        raise StaleRequest(f"seq {request.target} is no longer a surface node")
    target = session.event(request.target)
    if target.type != "tool/result":
        raise StaleRequest(f"seq {request.target} is a {target.type}, not a tool/result")
    return target


# -- the batches ------------------------------------------------------------------------

def compaction_specs(request: CompactionRequest, *, at: int,
                     turn: int | None) -> list[AppendSpec]:
    """The events ``request`` stands for when appended from seq ``at`` inside ``turn``
    (``None``: outside a turn): start, summary, checkpoint, end; or, with
    ``request.error``, start and end with the error. Checks nothing: run
    ``check_compaction`` first (the checkpoint's replace needs ``shadowed`` to be a
    non-empty run of current nodes)."""
    cid = request.compaction_id
    start = AppendSpec("compaction/start", {"compactionId": cid, "turn": turn})
    if request.error is not None:
        return [start, AppendSpec("compaction/end", {"compactionId": cid, "turn": turn,
                                                     "error": request.error})]
    shadowed = list(request.shadowed)
    summary = AppendSpec("compaction/summary", {
        "compactionId": cid,
        "summary": request.summary,
        "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
        "shadowedSeqs": shadowed,
        "shadowedTokenCount": request.shadowed_token_count,
        "provider": request.provider,
        "model": request.model,
    })
    checkpoint = AppendSpec(
        "user/message",
        {
            "id": request.checkpoint_id,
            "role": "user",
            "source": {"kind": "plugin", "plugin": "compact", "compactionId": cid},
            "content": [{"type": "text", "text": CHECKPOINT_INTRO},
                        *request.summary,
                        {"type": "text", "text": CHECKPOINT_OUTRO}],
        },
        surface_op=ReplaceOp(start=shadowed[0], end=shadowed[-1]),
        source_event_seqs=(at, at + 1, *shadowed),
    )
    end = AppendSpec("compaction/end", {"compactionId": cid, "turn": turn})
    return [start, summary, checkpoint, end]


def prune_specs(target: Event, request: PruneRequest, *, at: int) -> list[AppendSpec]:
    """The events ``request`` stands for when appended from seq ``at``: a
    ``compaction/prune`` and a copy of the tool result ``target`` with the block's
    ``content`` replaced, replacing ``target`` and citing the prune event and
    ``target``. ``target`` is what ``check_prune`` returned."""
    message = dict(target.data["message"])
    message["content"] = [{**message["content"][0], "content": request.content}]
    return [
        AppendSpec("compaction/prune", {
            "shadowedRange": {"start": target.seq, "end": target.seq},
            "shadowedSeqs": [target.seq],
            "shadowedTokenCount": request.shadowed_token_count,
        }),
        AppendSpec("tool/result", {**target.data, "message": message},
                   surface_op=ReplaceOp(start=target.seq, end=target.seq),
                   source_event_seqs=(at, target.seq)),
    ]


__all__ = [
    "CHECKPOINT_INTRO",
    "CHECKPOINT_OUTRO",
    "CompactionRequest",
    "PruneRequest",
    "SplitsToolCall",
    "StaleRequest",
    "check_compaction",
    "check_prune",
    "compaction_specs",
    "prune_specs",
    "safe_cuts",
]
