"""``DeferredErrors``: the part of an ``EventStore`` that backends applying each write
at once, in the caller's task (the memory store, the DSH root store), share: the closed
flag, the queue of non-durable batches' failures kept for ``flush``/``flush_session``
(as the SQLite store reports them, which learns of them only when its writer commits),
and the ``batches``/``events`` counters behind ``stats``.
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from surfacelog.store.base import EventStore
from surfacelog.store.errors import StoreError


class DeferredErrors(EventStore):
    """An ``EventStore`` base whose non-durable write failures wait for the next flush.
    A subclass calls ``__init__``, names itself in ``_store_name`` and wraps each write
    in ``_reported``."""

    def __init__(self) -> None:
        self._errors: deque[tuple[str, StoreError]] = deque()
        self._closed = False
        self._batches = self._events = 0

    @abc.abstractmethod
    def _store_name(self) -> str:
        """How errors name this store (``the memory store``)."""

    def _check_open(self) -> None:
        """Return when the store serves. Raises ``StoreError`` once it is closed."""
        if self._closed:
            raise StoreError(f"{self._store_name()} is closed")

    @contextmanager
    def _reported(self, session_id: str, durable: bool) -> Iterator[None]:
        """Run the block: a ``StoreError`` it raises is raised on when ``durable``, else
        kept as ``session_id``'s for the next ``flush``/``flush_session`` to raise (the
        caller of a non-durable write has already been answered)."""
        try:
            yield
        except StoreError as exc:
            if durable:
                raise
            self._errors.append((session_id, exc))

    def _count_batch(self, events: int) -> None:
        """Count one appended batch of ``events`` events in ``stats``."""
        self._batches += 1
        self._events += events

    async def flush(self) -> None:
        """Raise the oldest unreported failure of a non-durable batch (one per call).
        Raises ``StoreError`` when closed."""
        self._check_open()
        if self._errors:
            raise self._errors.popleft()[1]

    async def flush_session(self, session_id: str) -> None:
        """Raise the oldest unreported failure of a non-durable batch of ``session_id``.
        Raises ``StoreError`` when closed."""
        self._check_open()
        for index, (owner, error) in enumerate(self._errors):
            if owner == session_id:
                del self._errors[index]
                raise error

    def stats(self) -> dict[str, int]:
        """``batches`` and ``events`` appended (creates not counted)."""
        return {"batches": self._batches, "events": self._events}

    async def close(self) -> None:
        """Stop serving: every later call raises ``StoreError``. Nothing is pending (each
        write was applied, or fsynced, before its call returned). Closing twice is a
        no-op."""
        self._closed = True


__all__ = ["DeferredErrors"]
