"""Limits on what the package accepts, the checks that enforce them, and what taking in
a large batch may cost.

**Nesting.** An event's ``data`` may nest JSON arrays and objects at most
``MAX_NESTING`` levels deep (a scalar is depth 0, ``{}`` and ``[1]`` are depth 1,
``{"a": [1]}`` depth 2). Deeper data is refused with a ``NestingError`` (rule
``nesting``) naming the event type and seq at every entry: decoding a JSONL line
(``fold``, ``repair``, ``import``), ``Session.append``/``append_batch``, the store's
``append``/``create``, ``SessionHandle.append``/``append_batch`` (checked before the
request leaves the client), and when stored rows are read back (a database written by an
older build: the session is reported as corrupt, the others are read normally). 128
levels is far beyond any DSH log and far below Python's recursion limit, so no reader
of ours can fail with a ``RecursionError``.

**Exact JSON.** A value given through the Python API must be one JSON carries exactly:
``dict`` with ``str`` keys, ``list``, ``str``, ``int``, finite
``float``, ``bool``, ``None``, and msgspec structs (encoded as their fields' types
say).
NaN, infinities, tuples, sets, bytes and other objects are refused with a
``JsonValueError`` (rule ``json-value``) instead of being turned into ``null``, lists
or base64 text.

**Line length.** JSONL input is read line by line; a line longer than
``MAX_LINE_BYTES`` (default, configurable per call and with ``--max-line-bytes``) is
refused with a ``LineTooLong`` error naming the file and line, after reading at most
that many bytes of it.

The fast path costs two C-level ``bytes.count`` calls and one equality test per value:
the expensive walk (``find_problem``) runs only when those say something may be wrong.

**Duplicate keys.** JSON allows an object to name a key twice, and readers disagree on
what it means (most, msgspec among them, keep the last value; some keep the first; some
refuse). A log line or a request body whose meaning depends on the reader is refused
instead: a ``DuplicateKeyError`` (rule ``duplicate-key``) names the key and the path of
the object holding it (``$.data.content[0]``).

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

**The collector, paused** (``gc_paused``). Held off while a batch is built or a log is
decoded: the JSONL decoder (``codec.decode_records``), ``Session.append_batch``, the
store's row decoding and the actors' wire decoding use it. Appending or decoding a batch
allocates thousands of acyclic containers (event data dicts and lists). With the
collector on, every 700 allocations start a collection, and the older generations are
scanned every tenth or hundredth time, which in a process holding a large log (or many
sessions) traverses all of it: about half the cost of a batch append, and about two
thirds of decoding a stored log. Paused, the batch is scanned once, as a whole, at the
next collection. Nesting is harmless; a collector that was already disabled is left
alone, and it is restored on exit, also on error.
"""

from __future__ import annotations

import gc
import json
import math
import re
from types import TracebackType
from typing import Any, Final, NamedTuple

import msgspec

from surfacelog.schema.errors import DuplicateKeyError, JsonValueError, NestingError

MAX_NESTING: Final = 128
"""The deepest nesting of arrays and objects an event's ``data`` may have."""

MAX_LINE_BYTES: Final = 64 * 1024 * 1024
"""The default longest JSONL line read (64 MiB), newline excluded."""

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()
_CONTAINERS: Final = (dict, list)


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """The nesting depth of a JSON value (plain dicts and lists), walked without
    recursion; stops and returns ``limit + 1`` as soon as it passes ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if type(item) is dict:
            items: Any = item.values()
        elif type(item) is list:
            items = item
        else:
            continue
        depth += 1
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        for child in items:
            if isinstance(child, _CONTAINERS):
                push((child, depth))
    return deepest


def may_nest_too_deep(raw: bytes | str) -> bool:
    """False when the JSON text ``raw`` certainly nests at most ``MAX_NESTING`` levels
    (it has no more opening brackets than that); true when it must be looked at."""
    if isinstance(raw, str):
        return raw.count("[") + raw.count("{") > MAX_NESTING
    return raw.count(b"[") + raw.count(b"{") > MAX_NESTING


def nesting_error(event_type: object, seq: object, depth: int | None = None,
                  prefix: str = "") -> NestingError:
    """The ``NestingError`` of an event whose data nests too deep."""
    levels = f"more than {MAX_NESTING}" if depth is None else str(depth)
    return NestingError("nesting", f"{prefix}data nests {levels} levels of arrays and "
                        f"objects; the nesting limit is {MAX_NESTING}", event_type, seq)


def check_nesting(value: Any, event_type: object, seq: object) -> None:
    """Raise ``NestingError`` when the decoded JSON ``value`` nests deeper than
    ``MAX_NESTING``."""
    if nesting_depth(value) > MAX_NESTING:
        raise nesting_error(event_type, seq)


def find_problem(value: Any) -> str | None:
    """Why ``value`` cannot be carried exactly by JSON (with where, as a path from
    ``data``), or ``None`` when it can. Walks without recursion; a msgspec struct is
    looked at as the JSON object it encodes to."""
    stack: list[tuple[Any, str, int]] = [(value, "data", 0)]
    while stack:
        item, path, depth = stack.pop()
        kind = type(item)
        if item is None or isinstance(item, (bool, str)):
            continue
        if isinstance(item, int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{path} is {item!r}, which JSON cannot carry"
            continue
        if depth >= MAX_NESTING:
            return f"{path} nests deeper than {MAX_NESTING} levels"
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"{path} has a {type(key).__name__} key {key!r}; object keys " \
                           f"must be strings"
                stack.append((child, f"{path}.{key}", depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))
        elif isinstance(item, msgspec.Struct):
            # A struct is encoded as its typed fields say (a tuple field as an array...):
            # look at what it encodes to.
            try:
                stack.append((msgspec.to_builtins(item), path, depth))
            except (TypeError, ValueError, msgspec.EncodeError) as exc:
                return f"{path} is a {kind.__name__} that JSON cannot carry: {exc}"
        else:
            return (f"{path} is a {kind.__name__}, which JSON cannot carry exactly "
                    f"(use a list, a dict with string keys, or a JSON scalar)")
    return None


def own_json(value: Any, event_type: object, seq: object) -> Any:
    """A private JSON copy of a caller's ``value`` after checking that JSON carries it
    exactly and that it nests at most ``MAX_NESTING`` levels. Raises
    ``JsonValueError`` or ``NestingError`` (naming ``event_type`` and ``seq``)."""
    try:
        raw = _ENCODER.encode(value)
    except (RecursionError, TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
        raise _refusal(value, event_type, seq, exc) from exc
    try:
        copy = _DECODER.decode(raw)
    except (RecursionError, msgspec.DecodeError) as exc:
        raise _refusal(value, event_type, seq, exc) from exc
    if may_nest_too_deep(raw) and nesting_depth(copy) > MAX_NESTING:
        raise nesting_error(event_type, seq)
    if copy != value:
        problem = find_problem(value)  # else a struct or a scalar subclass: exact
        if problem is not None:
            raise JsonValueError("json-value", problem, event_type, seq)
    return copy


def check_scalar(value: Any, event_type: object, seq: object) -> None:
    """Refuse a non-finite float given as the whole ``data`` (``JsonValueError``)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise JsonValueError("json-value", f"data is {value!r}, which JSON cannot carry",
                             event_type, seq)


def _refusal(value: Any, event_type: object, seq: object,
             exc: BaseException) -> JsonValueError | NestingError:
    problem = find_problem(value)
    if problem is None:
        problem = f"data cannot be encoded as JSON: {exc}"
    if "nests deeper" in problem:
        return nesting_error(event_type, seq)
    return JsonValueError("json-value", problem, event_type, seq)


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


class gc_paused:
    """Context manager: the collector is disabled inside, restored on exit."""

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        if self._was_enabled:
            gc.disable()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._was_enabled:
            gc.enable()


__all__ = [
    "MAX_LINE_BYTES",
    "MAX_NESTING",
    "DuplicateKey",
    "check_duplicate_keys",
    "check_nesting",
    "check_scalar",
    "find_duplicate_key",
    "find_problem",
    "gc_paused",
    "may_nest_too_deep",
    "may_repeat_keys",
    "nesting_depth",
    "nesting_error",
    "own_json",
]
