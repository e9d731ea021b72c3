"""A compact, comparable account of a session's state: what two replays must agree on."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from msgspec import Struct

from surfacelog.schema.codec import encode_json


class SessionDigest(Struct, frozen=True):
    """Log length, nodes, generation, message ids, and a hash of the full messages."""

    length: int
    nodes: tuple[int, ...]
    replace_generation: int
    message_ids: tuple[str, ...]
    messages_sha256: str


def digest(length: int, nodes: Sequence[int], replace_generation: int,
           messages: Sequence[dict[str, Any]]) -> SessionDigest:
    """The digest of one session state; equal states give equal digests."""
    h = hashlib.sha256()
    for m in messages:
        h.update(encode_json(m))
        h.update(b"\n")
    return SessionDigest(length, tuple(nodes), replace_generation,
                         tuple(str(m.get("id")) for m in messages), h.hexdigest())
