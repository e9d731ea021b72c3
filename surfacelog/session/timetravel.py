"""Time travel: the surface of a log's prefix, without folding the whole prefix again.

``Session.surface_at(k)`` used to fold ``log[0..k]`` from scratch: O(k) per call, which
a user stepping through a long session (``fold --at``, ``derive_messages(as_of=k)``
for every k) pays again and again. ``SurfaceHistory`` keeps a checkpoint of the surface
every ``every`` events (its nodes and replace generation), built lazily the first time
a prefix that far is asked for; a call then resumes the fold from the checkpoint at or
before ``k``: at most ``every`` events are folded, and they are checked again exactly as
the first time (the same ``SurfaceManager``), so the answer is the full fold's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

from surfacelog.schema.events import Event
from surfacelog.session.surface import SurfaceManager

CHECKPOINT_EVERY = 1024
"""Events between two checkpoints: a call folds at most this many."""


class _Prefix(Sequence[Event]):
    """The first ``end`` events of a log, without copying them."""

    __slots__ = ("_end", "_log")

    def __init__(self, log: Sequence[Event], end: int) -> None:
        self._log, self._end = log, end

    def __len__(self) -> int:
        return self._end

    @overload
    def __getitem__(self, k: int) -> Event: ...

    @overload
    def __getitem__(self, k: slice) -> Sequence[Event]: ...

    def __getitem__(self, k: int | slice) -> Event | Sequence[Event]:
        if isinstance(k, slice):
            return list(self._log[: self._end])[k]
        if k < 0:
            k += self._end
        if not 0 <= k < self._end:
            raise IndexError(k)
        return self._log[k]

    def __iter__(self) -> Iterator[Event]:
        for k in range(self._end):
            yield self._log[k]


class Checkpoint(NamedTuple):
    """The surface after the log's first ``synced`` events."""

    synced: int
    nodes: tuple[int, ...]
    generation: int


class SurfaceHistory:
    """Checkpoints of one log's surface, every ``every`` events (``every >= 1``)."""

    def __init__(self, every: int = CHECKPOINT_EVERY) -> None:
        if every < 1:
            raise ValueError(f"checkpoints need every >= 1, not {every}")
        self.every = every
        self._points = [Checkpoint(0, (), 0)]
        self._builder = SurfaceManager()

    @property
    def checkpoints(self) -> int:
        """How many checkpoints are kept (the empty log's included)."""
        return len(self._points)

    def surface_at(self, log: Sequence[Event], end: int) -> tuple[tuple[int, ...], int]:
        """The nodes and replace generation of the surface of ``log[:end]`` (``0 <= end
        <= len(log)``). Raises ``SurfaceError`` if an event of the log breaks a rule
        (a log that was validated when appended never does)."""
        builder = self._builder
        while builder.synced + self.every <= end:
            target = builder.synced + self.every
            builder.sync(_Prefix(log, target))
            self._points.append(Checkpoint(target, tuple(builder.nodes),
                                           builder.replace_generation))
        point = self._points[end // self.every]
        manager = SurfaceManager.resume(point.nodes, point.generation, point.synced)
        manager.sync(_Prefix(log, end))
        return tuple(manager.nodes), manager.replace_generation

    def truncate(self, length: int) -> None:
        """Forget what was built past the log's first ``length`` events (they were
        rolled back)."""
        if self._builder.synced <= length:
            return
        del self._points[length // self.every + 1:]
        last = self._points[-1]
        self._builder = SurfaceManager.resume(last.nodes, last.generation, last.synced)


__all__ = ["CHECKPOINT_EVERY", "Checkpoint", "SurfaceHistory"]
