"""The session header (SPEC section 11)."""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import UNSET, Struct, UnsetType

from surfacelog.schema.errors import DecodeError
from surfacelog.schema.payloads import SafeInt, SeqInt

SESSION_FORMAT_VERSION: Final = 0


class SessionHeader(Struct, rename="camel", omit_defaults=True, frozen=True):
    """``{"version":0,"id":...,"createdAt":ms,"cwd"?,"parentSession"?,"seedLength"?}``.

    DSH header lines also carry ``"type":"session"`` and ``delegationDepth``; those are
    read and written back, other header keys of DSH are not kept.
    """

    version: SafeInt
    id: str
    created_at: SafeInt
    cwd: str | UnsetType = UNSET
    parent_session: str | UnsetType = UNSET
    seed_length: SeqInt | UnsetType = UNSET
    delegation_depth: SafeInt | UnsetType = UNSET


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


def header_from_json(value: dict[str, Any]) -> SessionHeader:
    """Build a header from a decoded JSON object (a DSH header line or a stored header).

    Raises ``DecodeError`` (rule ``header``) when a field has the wrong type or the
    header is not readable by this build.
    """
    fields = {k: v for k, v in value.items() if k != "type"}
    try:
        header = msgspec.convert(fields, SessionHeader)
    except msgspec.ValidationError as exc:
        raise DecodeError("header", f"invalid session header: {exc}") from exc
    return check_header(header)


def header_to_json(header: SessionHeader, *, dsh_line: bool = False) -> dict[str, Any]:
    """The header as a JSON object; ``dsh_line`` adds ``"type":"session"`` first."""
    body: dict[str, Any] = msgspec.to_builtins(header)
    return {"type": "session", **body} if dsh_line else body
