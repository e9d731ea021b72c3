"""Full re-validation of every stored session (``surfacelog verify``)."""

from __future__ import annotations

from msgspec import Struct

from surfacelog.store.base import CorruptStore, EventStore


class VerifyFailure(Struct, frozen=True):
    """A session that does not load: where (``seq`` is ``None`` when the problem is not
    one event's) and why."""

    session_id: str
    seq: int | None
    message: str


async def verify_store(store: EventStore) -> tuple[int, list[VerifyFailure]]:
    """Load every stored session through the core's full validation (header, row
    decoding, contiguity, row count, every rule of the log), read-only.

    Returns how many sessions were checked and one failure per session that does not
    load, in session id order (the first failing seq of a session hides later ones).
    Raises ``StoreError`` for a failure of the database itself.
    """
    failures = []
    sessions = await store.list_sessions()
    for info in sessions:
        try:
            await store.load(info.id)
        except CorruptStore as exc:
            failures.append(VerifyFailure(info.id, exc.seq, str(exc)))
    return len(sessions), failures
