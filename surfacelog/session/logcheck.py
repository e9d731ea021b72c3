"""``LogCheck``: validate a log streamed batch by batch, without holding it.

``replay`` validates a log by building a ``Session`` that holds every event. An import
only needs the verdict, and the rules of docs/rules.md §6 look back at very little: the
next seq, the surface nodes (range, coverage) and, for a ``tool/result`` rewrite, the
event it shadows, which is a current node. So ``LogCheck`` folds each batch through the
same ``SurfaceManager.fold_batch`` as ``replay`` (every check, in the same order, with
the same errors) but keeps, besides the manager's nodes, only what those checks read
of the current nodes (a ``tool/result``'s data, any other node's type): memory is one
batch plus the surface, whatever the log's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from msgspec import UNSET

from surfacelog.schema.dsh import PackedRun
from surfacelog.schema.errors import LogError
from surfacelog.schema.events import Event
from surfacelog.schema.limits import gc_paused
from surfacelog.session import shapes
from surfacelog.session.surface import Replacement, SurfaceManager


class _NodeIndex:
    """The ``FoldLog`` of a ``LogCheck``: counts the events folded and keeps, by seq,
    what the checks may read of the ones that can be surface nodes (those with a
    ``surfaceOp``): a ``tool/result`` whole (a rewrite compares its data), any other
    type by its type alone (a rewrite of it is refused naming the type). ``prune``
    drops those no longer on the surface."""

    __slots__ = ("_kept", "length")

    def __init__(self) -> None:
        self._kept: dict[int, Event | str] = {}
        self.length = 0

    def append(self, event: Event, /) -> None:
        if event.surface_op is not UNSET:
            self._kept[event.seq] = event if event.type == "tool/result" else event.type
        self.length += 1

    def extend(self, events: Sequence[Event], /) -> None:
        # ``fold_batch`` extends with plain log-only events only: none can be a node.
        self.length += len(events)

    def __getitem__(self, seq: int, /) -> Event:
        kept = self._kept[seq]
        if isinstance(kept, Event):
            return kept
        # Only the type of a node that is not a tool/result is ever read.
        return Event(type=kept, seq=seq, time=0)

    def prune(self, nodes: Sequence[int]) -> None:
        """Keep only the entries of ``nodes`` (once the index holds twice as many)."""
        if len(self._kept) > 2 * len(nodes) + 256:
            kept = self._kept
            self._kept = {seq: kept[seq] for seq in nodes}


class LogCheck:
    """The verdict of ``replay`` on a log given in consecutive batches: ``feed`` each
    batch in order; it raises the error ``replay`` of the whole log would raise for the
    first bad event (``invalid seed event at index N: ...``), and once it has raised,
    the check is over (feed nothing more). Holds the surface (nodes, replacements) and
    the events that are nodes, never the rest of the log."""

    __slots__ = ("_failed", "_index", "_manager")

    def __init__(self) -> None:
        self._manager = SurfaceManager()
        self._index = _NodeIndex()
        self._failed = False

    def __len__(self) -> int:
        """How many events were found valid."""
        return self._index.length

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(self._manager.nodes)

    @property
    def replacements(self) -> Sequence[Replacement]:
        return self._manager.replacements

    def feed(self, events: Sequence[Event | PackedRun]) -> None:
        """Validate ``events`` as the log's next events (``events[0].seq`` must be
        ``len(self)`` for a valid log). An item may be a packed row's ``PackedRun``
        standing for its events (``LogStream(runs=True)``): it is checked as them
        without building them (``SurfaceManager.fold_run``). Raises ``LogError`` naming
        the index of the first event that breaks a rule; ``ValueError`` when fed after
        a failure."""
        if self._failed:
            raise ValueError("this LogCheck already refused the log")
        if not events:
            return
        manager = self._manager
        try:
            with gc_paused():
                start = 0
                for k, item in enumerate(events):
                    if type(item) is PackedRun:
                        self._fold(events[start:k])
                        manager.fold_run(item, self._index)
                        start = k + 1
                self._fold(events[start:] if start else events)
        except LogError as exc:
            self._failed = True
            raise exc.with_prefix(f"invalid seed event at index {manager.synced}: ") \
                from exc
        self._index.prune(manager.nodes)

    def _fold(self, events: Sequence[Event | PackedRun]) -> None:
        plain = cast(Sequence[Event], events)  # no PackedRun: ``feed`` took them out
        if plain:
            self._manager.fold_batch(plain, self._index, shapes.payloads_valid(plain))


__all__ = ["LogCheck"]
