"""The JSON bodies of the gateway's requests and replies (camelCase, as DSH writes).

Requests are read with msgspec into the structs below, then turned into the core's own
values (``AppendSpec``, ``CompactionRequest``, ``PruneRequest``): an event's fields are
taken as sent and judged by the session, which names the rule it breaks. Replies are
events exactly as logged (``Event`` encodes to DSH JSON). ``schemas()`` gives every
body's JSON Schema for the OpenAPI document.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from surfacelog.gateway.errors import BadRequest
from surfacelog.schema.codec import JSON_ENCODER
from surfacelog.schema.events import MAX_SAFE_INT, Event, surface_op_from_json
from surfacelog.schema.header import SessionHeader
from surfacelog.schema.limits import check_duplicate_keys, nesting_error
from surfacelog.session import AppendSpec, SurfaceSnapshot
from surfacelog.session.compaction import CompactionRequest, PruneRequest
from surfacelog.session.context import DEFAULT_PLUGIN, context_message
from surfacelog.store.base import SessionInfo

MAX_BATCH: Final = 10_000


class EventSpec(Struct, rename="camel", forbid_unknown_fields=True,
                omit_defaults=True):
    """One event to append: its type, data and markers; the session assigns seq and
    time."""

    type: str
    data: Any = UNSET
    surface_op: Any = UNSET
    source_event_seqs: Any = UNSET
    ignorable: Any = UNSET

    def spec(self) -> AppendSpec:
        seqs = self.source_event_seqs
        op = self.surface_op
        return AppendSpec(self.type, self.data,
                          UNSET if op is UNSET else surface_op_from_json(op),
                          tuple(seqs) if isinstance(seqs, list) else seqs, self.ignorable)


class AppendOne(EventSpec, rename="camel", forbid_unknown_fields=True,
                omit_defaults=True):
    """``POST /v1/sessions/{id}/events``: one event, and the seq it must get."""

    expected_seq: int | None = None


class AppendBatch(Struct, rename="camel", forbid_unknown_fields=True,
                  omit_defaults=True):
    """``POST /v1/sessions/{id}/events:batch``: events appended all or nothing, the
    first at ``expectedSeq`` when given (a retry of the same batch is answered with the
    events it logged, nothing appended twice)."""

    # The limit is the type's: decoding refuses an empty or oversized batch (400, at
    # ``$.events``) and the JSON Schema states it (minItems, maxItems).
    events: Annotated[list[EventSpec], Meta(min_length=1, max_length=MAX_BATCH)]
    expected_seq: int | None = None


class ContextBody(Struct, rename="camel", forbid_unknown_fields=True,
                  omit_defaults=True):
    """``POST /v1/sessions/{id}/context``: the workspace context the model sees, as a
    text (wrapped as ``plugin``'s context message) or a context message. It replaces
    the plugin's previous context node; sending the same context again appends
    nothing."""

    text: str | None = None
    message: dict[str, Any] | None = None
    plugin: str = DEFAULT_PLUGIN

    def payload(self) -> dict[str, Any]:
        """The context message. Raises ``BadRequest`` unless exactly one of ``text``
        and ``message`` is given."""
        if (self.text is None) == (self.message is None):
            raise BadRequest("a context body has exactly one of text and message")
        if self.message is not None:
            return self.message
        assert self.text is not None
        return context_message(self.text, plugin=self.plugin)


class CreateSession(Struct, rename="camel", forbid_unknown_fields=True,
                    omit_defaults=True):
    """``POST /v1/sessions``: the new session's id (a random one when absent)."""

    id: str | None = None


class ForkBody(Struct, rename="camel", forbid_unknown_fields=True,
               omit_defaults=True):
    """``POST /v1/sessions/{id}/fork``: the child seeded with ``log[0..boundary]``
    (the whole log when absent), under ``childId`` (derived from the parent's when
    absent)."""

    boundary: int | None = None
    child_id: str | None = None


class CompactBody(Struct, rename="camel", forbid_unknown_fields=True,
                  omit_defaults=True):
    """``POST /v1/sessions/{id}/compact``: replace ``shadowed`` (contiguous current
    nodes, as read at ``generation``) with a checkpoint of ``summary``."""

    compaction_id: str
    generation: int
    shadowed: list[int]
    summary: list[dict[str, Any]]
    shadowed_token_count: int
    checkpoint_id: str
    provider: str = "surfacelog"
    model: str = "extractive-v1"
    error: str | None = None

    def request(self) -> CompactionRequest:
        return CompactionRequest(self.compaction_id, self.generation, tuple(self.shadowed),
                                 self.summary, self.shadowed_token_count, self.checkpoint_id,
                                 self.provider, self.model, self.error)


class PruneBody(Struct, rename="camel", forbid_unknown_fields=True,
                omit_defaults=True):
    """``POST /v1/sessions/{id}/prune``: shorten the tool result at ``target`` (as read
    at ``generation``) to ``content``."""

    generation: int
    target: int
    content: list[dict[str, Any]]
    shadowed_token_count: int

    def request(self) -> PruneRequest:
        return PruneRequest(self.generation, self.target, self.content,
                            self.shadowed_token_count)


# -- replies ---------------------------------------------------------------------------

class Events(Struct, rename="camel"):
    """Events as logged; ``next`` is the seq after the last one (where to read on)."""

    events: list[Event]
    next: int


class Surface(Struct, rename="camel"):
    """The surface: its nodes (seqs), replace generation and the log's length."""

    nodes: list[int]
    replace_generation: int
    length: int

    @classmethod
    def of(cls, snap: SurfaceSnapshot) -> Surface:
        return cls(list(snap.nodes), snap.replace_generation, snap.length)


class Messages(Struct, rename="camel"):
    """The messages the model sees (now, or as of a seq)."""

    messages: list[dict[str, Any]]


class SessionSummary(Struct, rename="camel"):
    """One stored session."""

    id: str
    created_at: int
    length: int
    last_time: int | None

    @classmethod
    def of(cls, info: SessionInfo) -> SessionSummary:
        return cls(info.id, info.created_at, info.length, info.last_time)


class SessionPage(Struct, rename="camel"):
    """A page of sessions ordered by id; ``next`` is the ``after`` of the next page
    (``null`` on the last)."""

    sessions: list[SessionSummary]
    next: str | None


class Created(Struct, rename="camel"):
    """A session just created (or forked): its id and length."""

    id: str
    length: int


class Problem(Struct, rename="camel", omit_defaults=True):
    """An error (RFC 9457): ``type``, ``title``, ``status``, ``detail``; ``rule``,
    ``eventType``, ``seq`` for a refused event, ``code`` for a refused fork."""

    type: str
    title: str
    status: int
    detail: str
    rule: str | UnsetType = UNSET
    event_type: Any = UNSET
    seq: Any = UNSET
    code: str | UnsetType = UNSET


REQUESTS: Final = (AppendOne, AppendBatch, ContextBody, CreateSession, ForkBody, CompactBody,
                   PruneBody)
REPLIES: Final = (Events, Surface, Messages, SessionPage, Created, Problem, SessionHeader)


def decode(body: bytes, kind: type[Any]) -> Any:
    """``body`` read as ``kind`` (one of ``REQUESTS``). Raises ``BadRequest`` naming
    what is wrong; ``DuplicateKeyError`` (rule ``duplicate-key``) naming the key and the
    path of an object that has a key twice, at any depth; ``NestingError`` (rule
    ``nesting``) for JSON nested too deep for msgspec to read at all (far past
    ``MAX_NESTING``, which the session checks on what it decodes)."""
    try:
        try:
            value = msgspec.json.decode(body, type=kind)
        except msgspec.ValidationError as exc:
            value = _with_integral_floats(body, kind, exc)
        # The request structs omit their defaults when encoded, so encoding the value
        # writes every member the body has but a repeated key's other values, and no
        # more: what ``check_duplicate_keys`` compares the body with.
        check_duplicate_keys(body, JSON_ENCODER.encode(value), f"the {kind.__name__} body "
                             "has a ")
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid {kind.__name__} body: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    except RecursionError as exc:
        raise nesting_error(None, None, prefix=f"the {kind.__name__} body's ") from exc
    return value


_INT_GOT_FLOAT: Final = re.compile(r"Expected `int(?: \| null)?`, got `float` - at `\$(.*)`$")
_STEP: Final = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def _with_integral_floats(body: bytes, kind: type[Any], error: msgspec.ValidationError
                          ) -> Any:
    """``body`` read as ``kind`` where an integer field of the request holds a number
    written with a fraction of zero (``3.0``): JSON Schema, and so the OpenAPI
    document, calls that an integer, as JavaScript does. Only the request's own integer
    fields are read so (``expectedSeq``, ``boundary``, ``generation``...): an event's
    fields are values of the log, judged by its rules (docs/rules.md: ``1.0`` is not a
    seq). Raises ``error`` again when something else is wrong, or a float is not a
    whole safe integer."""
    value = msgspec.json.decode(body)
    for _ in range(1_000):  # one field per round: msgspec names the first it refuses
        match = _INT_GOT_FLOAT.search(str(error))
        if match is None:
            raise error
        parent: Any = None
        step: str | int | None = None
        leaf: Any = value
        for name, index in _STEP.findall(match.group(1)):
            parent, step = leaf, (name if name else int(index))
            leaf = leaf[step]
        if parent is None or type(leaf) is not float or not leaf.is_integer() \
                or abs(leaf) > MAX_SAFE_INT:
            raise error
        parent[step] = int(leaf)
        try:
            return msgspec.convert(value, type=kind)
        except msgspec.ValidationError as exc:
            error = exc
    raise error


def batch_specs(batch: AppendBatch) -> list[AppendSpec]:
    """The batch's specs (1 to ``MAX_BATCH``: its type's limit, checked by ``decode``)."""
    return [e.spec() for e in batch.events]


def schemas() -> dict[str, Any]:
    """The JSON Schema of every request and reply body, by struct name, with references
    in OpenAPI's form (``#/components/schemas/NAME``)."""
    _, components = msgspec.json.schema_components(
        (*REQUESTS, *REPLIES), ref_template="#/components/schemas/{name}")
    return components
