"""Session ids as the gateway accepts them, checked before they reach anything.

An id that crosses the gateway becomes part of a Ray actor name
(``session:<key>:<id>``), a SQL parameter and a URL path segment; so it is held to a
small alphabet: ASCII letters and digits first, then letters, digits, ``.``, ``_`` and
``-``, at most ``MAX_ID_LENGTH`` characters. Nothing is escaped because nothing needs
to be.
"""

from __future__ import annotations

import re
import secrets
from typing import Final

from surfacelog.gateway.errors import InvalidSessionId

MAX_ID_LENGTH: Final = 128
MAX_PREFIX_LENGTH: Final = 64
ID_PATTERN: Final = "^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""A session id's characters, as the OpenAPI document states them (with the length
bound ``MAX_ID_LENGTH``)."""
_ID: Final = re.compile(ID_PATTERN)
_PREFIX: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def valid_id(value: str) -> bool:
    """Whether ``value`` is a session id the gateway accepts."""
    return len(value) <= MAX_ID_LENGTH and _ID.fullmatch(value) is not None


def check_id(value: str) -> str:
    """``value`` when it is a valid session id; else raises ``InvalidSessionId`` (the
    message shows the id's length, not the id, which may be anything)."""
    if not valid_id(value):
        raise InvalidSessionId(
            f"a session id is 1 to {MAX_ID_LENGTH} characters of [A-Za-z0-9._-] starting "
            f"with a letter or digit (got {len(value)} characters)")
    return value


def check_prefix(value: str) -> str:
    """``value`` when it may limit a token (the charset of ids, at most
    ``MAX_PREFIX_LENGTH`` characters); else raises ``InvalidSessionId``."""
    if len(value) > MAX_PREFIX_LENGTH or _PREFIX.fullmatch(value) is None:
        raise InvalidSessionId(
            f"a session id prefix is 1 to {MAX_PREFIX_LENGTH} characters of [A-Za-z0-9._-] "
            f"starting with a letter or digit (got {len(value)} characters)")
    return value


def new_id(parent: str | None = None, *, prefix: str = "s-") -> str:
    """A fresh session id: ``prefix`` (a token's own prefix, so that the token may
    address it) and random hex; or (a fork's child) the parent's id, cut so that the
    result stays valid, followed by ``-fork-`` and random hex. A child's id starts with
    its parent's first ``MAX_PREFIX_LENGTH`` characters, so a token limited to a prefix
    of the parent may address it."""
    if parent is None:
        return f"{prefix}{secrets.token_hex(12)}"
    return f"{parent[:MAX_ID_LENGTH - 18]}-fork-{secrets.token_hex(6)}"
