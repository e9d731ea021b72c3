"""Where an imported session came from, and whether it still holds all of it.

An import records, in the transaction that stores the session, its source (as given),
how many events the source held and a digest of the rows stored for them. ``verify``
reads the record back and digests the session's first rows again: a session that
holds fewer of its source's events than the source held was cut short, one whose
rows digest differently no longer holds what was imported. Events appended after the
import are not the source's and are not digested.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Final

import msgspec
from msgspec import Struct

_ROW_ENCODER: Final = msgspec.json.Encoder()


class RowDigest:
    """SHA-256 over ``events`` rows in seq order, each as the JSON array of its stored
    columns without the session id (``seq, type, time, data, source_event_seqs,
    surface_op, ignorable``), one per line: the same digest whether the rows are the
    ones an import binds or the ones a later read selects."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.rows = 0

    def add(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Digest ``rows`` (each the stored columns, session id excluded), in order."""
        update, encode = self._hash.update, _ROW_ENCODER.encode
        count = 0
        for row in rows:
            update(encode(row))
            update(b"\n")
            count += 1
        self.rows += count

    def hexdigest(self) -> str:
        """The digest of every row added so far."""
        return self._hash.hexdigest()


class SourceCheck(Struct, frozen=True):
    """An imported session against its import record: imported from ``source`` with
    ``events`` events (rows digested as ``digest``); ``stored`` of them are stored now
    and ``matches`` says whether those rows digest as they did."""

    session_id: str
    source: str
    events: int
    stored: int
    matches: bool

    def problem(self) -> str | None:
        """One line saying how the session differs from its source; ``None`` when it
        holds every event of its source as imported."""
        if self.stored < self.events:
            return (f"cut short: imported from {self.source} with {self.events} events, "
                    f"only {self.stored} of them are stored")
        if not self.matches:
            return (f"differs from its source: its first {self.events} events are not "
                    f"those imported from {self.source}")
        return None


__all__ = ["RowDigest", "SourceCheck"]
