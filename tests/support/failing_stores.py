"""Real stores that fail on purpose where a test needs an unknown write outcome."""

from __future__ import annotations

from surfacelog.store.errors import CommitFailed
from surfacelog.store.rows import EncodedBatch
from surfacelog.store.sqlite import SqliteEventStore


class LostAckStore(SqliteEventStore):
    """The real store, except that the next append (once ``lose_next`` is set) commits
    and then reports a failure: a journal that died after its commit, a lost reply."""

    lose_next = False

    async def append_stored(self, session_id: str, batch: EncodedBatch, *, epoch: int,
                            durable: bool = True, resend: bool = False) -> None:
        await super().append_stored(session_id, batch, epoch=epoch, durable=durable,
                                    resend=resend)
        if self.lose_next:
            self.lose_next = False
            raise CommitFailed("the commit's acknowledgement was lost")
