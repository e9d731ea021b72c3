"""The session header (docs/rules.md §11).

A header is kept exactly, as DSH writes it: besides the modelled fields, every other
key of a DSH header line (``origin``, ``agentPreset``, keys a later DSH adds) is kept
with its JSON value, stored with the session and written back on export.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import UNSET, Struct, UnsetType, field

from surfacelog.schema.errors import DecodeError
from surfacelog.schema.payloads import SafeInt, SeqInt

SESSION_FORMAT_VERSION: Final = 0

_EXTRA: Final = "otherKeys"
"""The JSON name of ``SessionHeader.other_keys`` in ``msgspec.to_builtins`` output; never
written as such (``header_to_json`` spreads its keys into the header)."""


class SessionHeader(Struct, rename="camel", omit_defaults=True, frozen=True):
    """``{"version":0,"id":...,"createdAt":ms,"cwd"?,"parentSession"?,"seedLength"?}``.

    DSH header lines also carry ``"type":"session"`` and ``delegationDepth`` (required
    there), and may carry ``origin``, ``agentPreset`` and keys this build does not know:
    ``origin`` and ``agentPreset`` are kept as the JSON values they are, any other key in
    ``other_keys`` (name -> JSON value, in file order), so that a header goes through
    import, storage and export unchanged.
    """

    version: SafeInt
    id: str
    created_at: SafeInt
    cwd: str | UnsetType = UNSET
    parent_session: str | UnsetType = UNSET
    seed_length: SeqInt | UnsetType = UNSET
    origin: Any = UNSET
    delegation_depth: SafeInt | UnsetType = UNSET
    agent_preset: Any = UNSET
    other_keys: dict[str, Any] = field(default_factory=dict)


_KNOWN: Final = frozenset({"version", "id", "createdAt", "cwd", "parentSession",
                           "seedLength", "origin", "delegationDepth", "agentPreset"})


def check_header(header: SessionHeader) -> SessionHeader:
    """Return ``header`` if this build can read it.

    Raises ``DecodeError`` (rule ``header``) for another format version, an empty id or
    a relative ``cwd``.
    """
    if header.version != SESSION_FORMAT_VERSION or type(header.version) is not int:
        raise DecodeError(
            "header",
            f"session format version {header.version!r} is not supported; "
            f"this build reads version {SESSION_FORMAT_VERSION}",
        )
    if not header.id:
        raise DecodeError("header", "session header id must be a non-empty string")
    if header.cwd is not UNSET and not header.cwd.startswith("/"):
        raise DecodeError("header", f"session header cwd {header.cwd!r} is not absolute")
    return header


def header_from_json(value: dict[str, Any], *, dsh_line: bool = False) -> SessionHeader:
    """Build a header from a decoded JSON object (a DSH header line or a stored header).
    Keys this build does not model are kept in ``other_keys``.

    ``dsh_line``: ``value`` is the first line of a DSH session file, where
    ``delegationDepth`` is required (DSH's reader calls a file without it corrupt); a
    stored header may lack it (sessions created through the API have none).

    Raises ``DecodeError`` (rule ``header``) when a field has the wrong type, the
    header is not readable by this build, or (``dsh_line``) ``delegationDepth`` is
    missing or not a non-negative safe integer.
    """
    fields = {k: v for k, v in value.items() if k in _KNOWN}
    other = {k: v for k, v in value.items() if k not in _KNOWN and k != "type"}
    try:
        header = msgspec.convert(fields, SessionHeader)
    except msgspec.ValidationError as exc:
        raise DecodeError("header", f"invalid session header: {exc}") from exc
    header = check_header(header)
    if dsh_line:
        depth = header.delegation_depth
        if depth is UNSET or type(depth) is not int or depth < 0:
            raise DecodeError("header", "corrupt session log: session header has no valid "
                                        "delegationDepth (a non-negative integer)")
    if other:
        header = msgspec.structs.replace(header, other_keys=other)
    return header


def header_to_json(header: SessionHeader, *, dsh_line: bool = False) -> dict[str, Any]:
    """The header as a JSON object, every kept key included; ``dsh_line`` makes it a
    DSH header line: ``"type":"session"`` first and ``delegationDepth`` always present
    (0 when the header has none, DSH's default)."""
    body: dict[str, Any] = msgspec.to_builtins(header)
    other = body.pop(_EXTRA, None) or {}
    if dsh_line and "delegationDepth" not in body:
        items = list(body.items())
        at = next((i for i, (k, _) in enumerate(items) if k == "agentPreset"), len(items))
        items.insert(at, ("delegationDepth", 0))
        body = dict(items)
    body.update(other)
    return {"type": "session", **body} if dsh_line else body
