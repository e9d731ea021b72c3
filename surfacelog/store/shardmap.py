"""Shards: where each session lives when a deployment has more than one database file.

A shard is one SQLite file with exactly one writer, pinned to the node whose disk holds
the file by a Ray custom resource that only that node offers. The shard list is
configuration (``ShardMap``, read from JSON with ``load_shard_map``), never code.

Routing is rendezvous hashing over shard names: every shard scores the session id, and
the shards in descending score order are the id's *preference order*; the first is its
*home*, where a new session is created. Each shard records ``added``, the generation of
the configuration that introduced it (0 for the first ones). A session created under
generation g lives on the first shard of its order among those added by g, so the only
shards that can hold an id are its *candidates*: the shards of its order each added
earlier than every shard ranked before it. With no shard added later, that is the home
alone: finding a session costs no lookup, and losing one shard's node touches no other
shard's sessions. After shards are added, lookup asks the candidates in order, and an
id is created on its home only once every candidate has said it does not hold it, so it
never exists on two shards; old sessions stay where they are, reachable.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from surfacelog.schema.errors import SurfacelogError

DEFAULT_SHARD: Final = "default"
"""The name of the one shard of the embedded default (``./surfacelog.db``)."""

RESOURCE_PREFIX: Final = "surfacelog_shard_"
"""A shard's custom resource is this prefix and its name, unless configured."""

MAX_SHARD_CONFIG_BYTES: Final = 1 << 20
"""A shard configuration file larger than this is refused unread."""

_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


class ShardConfigError(ValueError, SurfacelogError):
    """A shard configuration is malformed: names the file, the shard and the rule."""


class Shard(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One shard: a name (lowercase letters, digits, ``-`` and ``_``, at most 32), the
    path of its SQLite file on the node that holds it, and the Ray custom resource that
    pins its writer there (``None``: no pinning, for one-node deployments)."""

    name: str
    path: str
    resource: str | None = None
    added: int = 0
    """The generation of the configuration that introduced this shard (0: from the
    start). Give every shard added later a higher number than all before it."""
    replica: str | None = None
    """Where Litestream replicates this shard's file (``None``: nowhere): a directory
    (local and test use; a relative one is taken from the configuration file's folder)
    or an object-store URL such as ``s3://bucket/shards/s0`` (see
    ``surfacelog.store.replica``)."""
    replica_sync_s: float = 1.0
    """How often Litestream ships the shard's new WAL frames to the replica: the bound,
    under load, of what a lost disk loses (its ``sync-interval``)."""

    @property
    def pin(self) -> dict[str, float]:
        """Ray ``resources=`` that place an actor on this shard's node (a sliver of the
        resource, so any number of actors fit)."""
        return {} if self.resource is None else {self.resource: 0.001}


class ShardMap(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The shards of a deployment, in configuration order."""

    shards: tuple[Shard, ...]

    def __post_init__(self) -> None:
        _check(self.shards, "shard map")

    @classmethod
    def single(cls, path: str | os.PathLike[str] = "surfacelog.db") -> ShardMap:
        """The embedded default: one unpinned shard named ``default``."""
        return cls((Shard(DEFAULT_SHARD, os.path.abspath(path)),))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.shards)

    def get(self, name: str) -> Shard:
        """The shard called ``name``. Raises ``KeyError``."""
        for shard in self.shards:
            if shard.name == name:
                return shard
        raise KeyError(name)

    def preference(self, session_id: str) -> list[Shard]:
        """The shards in rendezvous order for ``session_id``: its home first."""
        return sorted(self.shards, key=lambda s: _score(s.name, session_id), reverse=True)

    def candidates(self, session_id: str) -> list[Shard]:
        """The shards that may hold ``session_id``, in lookup order: its home first,
        then each shard of its preference order added earlier than every shard before
        it. Just the home when no shard was added later."""
        out: list[Shard] = []
        for shard in self.preference(session_id):
            if not out or shard.added < min(s.added for s in out):
                out.append(shard)
        return out

    def home(self, session_id: str) -> Shard:
        """Where a new session ``session_id`` is created."""
        return max(self.shards, key=lambda s: _score(s.name, session_id))


def _score(shard: str, session_id: str) -> int:
    # A keyed hash of both names: stable across processes and Python versions (unlike
    # hash()), and uniform enough that every shard wins ~1/S of the ids.
    digest = hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=8,
                             key=shard.encode()).digest()
    return int.from_bytes(digest, "big")


def _check(shards: Sequence[Shard], where: str) -> None:
    if not shards:
        raise ShardConfigError(f"{where}: no shards")
    seen_names: set[str] = set()
    seen_paths: set[str] = set()
    for shard in shards:
        if not _NAME.fullmatch(shard.name):
            raise ShardConfigError(
                f"{where}: shard name {shard.name!r} must be 1-32 of a-z, 0-9, '-', '_'"
                " starting with a letter or digit")
        if shard.name in seen_names:
            raise ShardConfigError(f"{where}: shard {shard.name!r} is listed twice")
        if not shard.path:
            raise ShardConfigError(f"{where}: shard {shard.name!r} has an empty path")
        if shard.path in seen_paths:
            raise ShardConfigError(f"{where}: shard {shard.name!r} shares its path "
                                   f"{shard.path!r} with another shard")
        if shard.resource is not None and not shard.resource:
            raise ShardConfigError(f"{where}: shard {shard.name!r} has an empty resource")
        if shard.added < 0:
            raise ShardConfigError(f"{where}: shard {shard.name!r} has a negative 'added'")
        if shard.replica is not None and not shard.replica.strip():
            raise ShardConfigError(f"{where}: shard {shard.name!r} has an empty replica")
        if not 0 < shard.replica_sync_s <= 3600:
            raise ShardConfigError(f"{where}: shard {shard.name!r}: replica_sync_s must be "
                                   f"in (0, 3600], got {shard.replica_sync_s}")
        seen_names.add(shard.name)
        seen_paths.add(shard.path)


def default_resource(name: str) -> str:
    """The custom resource of shard ``name`` when the configuration names none."""
    return RESOURCE_PREFIX + name


def load_shard_map(path: str | os.PathLike[str]) -> ShardMap:
    """Read a shard configuration file: ``{"shards": [{"name": ..., "path": ...,
    "resource": ...}, ...]}`` (JSON). Relative paths are taken from the file's folder.
    A ``replica`` that is a relative directory is taken from the file's folder too (a
    URL, ``scheme://...``, is kept as it is). Raises ``ShardConfigError`` naming the file
    and what is wrong, ``OSError`` when it cannot be read."""
    file = Path(path)
    with file.open("rb") as f:
        raw = f.read(MAX_SHARD_CONFIG_BYTES + 1)
    if len(raw) > MAX_SHARD_CONFIG_BYTES:
        raise ShardConfigError(f"{file}: larger than {MAX_SHARD_CONFIG_BYTES} bytes")
    try:
        loaded = msgspec.json.decode(raw, type=ShardMap)
    except msgspec.ValidationError as exc:
        raise ShardConfigError(f"{file}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ShardConfigError(f"{file}: not JSON: {exc}") from exc
    except ShardConfigError as exc:
        raise ShardConfigError(f"{file}: {exc}") from exc
    base = file.parent

    def resolve(where: str) -> str:
        return str(where if os.path.isabs(where) else (base / where).resolve())

    return ShardMap(tuple(
        Shard(s.name, resolve(s.path), s.resource, s.added,
              s.replica if s.replica is None or is_url(s.replica) else resolve(s.replica),
              s.replica_sync_s)
        for s in loaded.shards))


_URL: Final = re.compile(r"[a-z][a-z0-9+.-]*://")


def is_url(replica: str) -> bool:
    """Whether a shard's ``replica`` is a URL (``scheme://...``) rather than a
    directory."""
    return _URL.match(replica) is not None


__all__ = ["DEFAULT_SHARD", "Shard", "ShardConfigError", "ShardMap", "default_resource",
           "is_url", "load_shard_map"]
