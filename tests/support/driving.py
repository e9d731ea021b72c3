"""What a load driver (``actors.driver.SessionDriver``) asks of its client, for driving
a session in this process without Ray."""

from __future__ import annotations

from surfacelog.store.shardmap import Shard, ShardMap


class OneShardClient:
    """A driver's client whose every session lives on one shard (``db``'s), that
    resends nothing itself."""

    resent = 0
    retry_for_s = 30.0

    def __init__(self, db: str = "local.db") -> None:
        self._shard = ShardMap.single(db).shards[0]

    async def shard_of(self, session_id: str) -> Shard:
        return self._shard
