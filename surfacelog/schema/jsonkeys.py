"""Duplicate object keys in JSON text: refused wherever JSON comes in.

JSON allows an object to name a key twice, and readers disagree on what it means (most,
msgspec among them, keep the last value; some keep the first; some refuse). A log line
or a request body whose meaning depends on the reader is refused instead: a
``DuplicateKeyError`` (rule ``duplicate-key``) names the key and the path of the object
holding it (``$.data.content[0]``).

msgspec cannot see duplicates, so the check is made beside it, in two steps:

- ``may_repeat_keys``, the fast path: every member of an object is written with one
  ``:`` outside strings, and msgspec never writes a ``:`` escaped. So the ``:`` of
  the text and the ``:`` of msgspec's encoding of what it decoded to are equally many
  when no key was dropped, unless the text writes a ``:`` inside a string as the
  escape ``\\u003a``. A comparison, or two ``bytes.count`` calls and one search, all
  in C, over text msgspec has already decoded (and, for a whole block of lines,
  encodes again in one call: about 40% of the decoding's time, where parsing each
  block again with ``object_pairs_hook`` cost 240%).
- ``find_duplicate_key``, the exact path, only when the fast one says a key may be
  repeated: the text parsed again with the standard library, keeping every pair.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, NamedTuple

from surfacelog.schema.errors import DuplicateKeyError

_ESCAPED_COLON: Final = re.compile(rb"\\u003[aA]")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class DuplicateKey(NamedTuple):
    """A key an object of a JSON document has more than once, and where that object is
    (``$`` the document, ``$.data.content[0]`` deeper)."""

    key: str
    path: str

    def describe(self) -> str:
        """``duplicate key "a" in the object at $.data`` (the key as a JSON string, so
        that any character in it is visible)."""
        return f"duplicate key {json.dumps(self.key)} in the object at {self.path}"


def may_repeat_keys(text: bytes, canonical: bytes) -> bool:
    """False when the JSON ``text`` certainly has no object with a key twice, given
    ``canonical``, msgspec's encoding of the value msgspec decoded ``text`` to (which
    holds every member of ``text`` but the repeated ones, and no more); true when
    ``find_duplicate_key`` must decide."""
    if text == canonical:  # as msgspec writes it (our own files, DSH's): no counting
        return False
    if text.count(b":") != canonical.count(b":"):
        return True
    return text.find(b"\\u003") >= 0 and _ESCAPED_COLON.search(text) is not None


class _Repeated(dict[str, Any]):
    """An object that named ``key`` more than once (its last value kept, as a dict)."""

    key: str = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    repeated = _Repeated(value)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            repeated.key = key
            break
        seen.add(key)
    return repeated


def _member(path: str, key: str) -> str:
    return f"{path}.{key}" if _NAME.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def find_duplicate_key(text: bytes | str) -> DuplicateKey | None:
    """The first object of the JSON ``text`` (outer objects before inner ones, then in
    document order) that has a key more than once, or ``None`` when none has. Slow
    (every object is built as a list of pairs first): for the texts ``may_repeat_keys``
    cannot clear. Raises ``ValueError`` for text that is not JSON, ``RecursionError``
    for JSON nested beyond Python's own limit."""
    root = json.loads(text, object_pairs_hook=_pairs)
    stack: list[tuple[Any, str]] = [(root, "$")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            if type(value) is _Repeated:
                return DuplicateKey(value.key, path)
            stack.extend((child, _member(path, key))
                         for key, child in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((child, f"{path}[{k}]")
                         for k, child in reversed(list(enumerate(value))))
    return None


def check_duplicate_keys(text: bytes, canonical: bytes, where: str = "",
                         event_type: object = None, seq: object = None) -> None:
    """Refuse JSON ``text`` that has an object with a key twice; ``canonical`` as for
    ``may_repeat_keys``. The error's message starts with ``where`` (``line 5: ``) and
    names ``event_type`` and ``seq`` when given. Raises ``DuplicateKeyError``;
    ``RecursionError`` for JSON nested beyond Python's own limit."""
    if not may_repeat_keys(text, canonical):
        return
    try:
        found = find_duplicate_key(text)
    except ValueError:  # msgspec read it; a text the standard library refuses repeats
        return          # nothing the check could name (a lone surrogate, say)
    if found is not None:
        raise DuplicateKeyError("duplicate-key", f"{where}{found.describe()}",
                                event_type, seq)


__all__ = ["DuplicateKey", "check_duplicate_keys", "find_duplicate_key", "may_repeat_keys"]
