"""Bearer tokens, and the session-id prefixes each may reach.

Tokens are configuration: a file (``--token-file``) or the environment variable
``SURFACELOG_GATEWAY_TOKENS``, in the same format: one grant per line (or per ``;`` in
the variable), ``TOKEN [PREFIX ...]``; ``#`` starts a comment line. A token with
prefixes reaches only the sessions whose id starts with one of them (403 elsewhere,
and the session list is filtered); a token without reaches every session.

Only SHA-256 digests of the tokens leave the process that read them (the Serve
deployment's arguments hold ``AuthConfig``, which Ray stores): a request's token is
hashed and compared with every digest in constant time (``hmac.compare_digest``, no
early exit). No token is logged or echoed: errors name a line number, never a value.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from msgspec import Struct

from surfacelog.gateway.errors import InvalidSessionId, TokenConfigError, Unauthorized
from surfacelog.gateway.ids import check_prefix

TOKENS_ENV: Final = "SURFACELOG_GATEWAY_TOKENS"
MIN_TOKEN_LENGTH: Final = 16


class Grant(Struct, frozen=True):
    """One configured token: its SHA-256 digest and, when limited, its prefixes."""

    digest: bytes
    prefixes: tuple[str, ...] | None = None

    def allows(self, session_id: str) -> bool:
        """Whether this token may reach ``session_id``."""
        return self.prefixes is None or session_id.startswith(self.prefixes)


OPEN_GRANT: Final = Grant(b"", None)
"""What a request is granted when authentication is off (``--insecure-no-auth``)."""


class AuthConfig(Struct, frozen=True):
    """The gateway's access rules: the grants, or none at all when ``insecure``."""

    grants: tuple[Grant, ...] = ()
    insecure: bool = False

    def authorize(self, authorization: str | None) -> Grant:
        """The grant of an ``Authorization`` header's bearer token. Raises
        ``Unauthorized`` when it is missing, not ``Bearer``, or matches no grant."""
        if self.insecure:
            return OPEN_GRANT
        if authorization is None:
            raise Unauthorized("this request needs an 'Authorization: Bearer <token>' header")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("the Authorization header is not 'Bearer <token>'")
        digest = hashlib.sha256(token.strip().encode()).digest()
        found: Grant | None = None
        for grant in self.grants:  # every one compared: the time does not tell which
            if hmac.compare_digest(digest, grant.digest):
                found = grant
        if found is None:
            raise Unauthorized("the bearer token is not valid")
        return found


def parse_grants(text: str, source: str, separators: str = "\n") -> tuple[Grant, ...]:
    """The grants of ``text`` (see the module). Raises ``TokenConfigError`` naming
    ``source`` and the line."""
    lines: Iterable[str] = [text]
    for sep in separators:
        lines = [part for line in lines for part in line.split(sep)]
    grants: list[Grant] = []
    seen: set[bytes] = set()
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        token, prefixes = words[0], words[1:]
        if len(token) < MIN_TOKEN_LENGTH:
            raise TokenConfigError(f"{source}, entry {number}: a token has at least "
                                   f"{MIN_TOKEN_LENGTH} characters")
        try:
            checked = tuple(check_prefix(p) for p in prefixes)
        except InvalidSessionId as exc:
            raise TokenConfigError(f"{source}, entry {number}: {exc}") from None
        digest = hashlib.sha256(token.encode()).digest()
        if digest in seen:
            raise TokenConfigError(f"{source}, entry {number}: the token is listed twice")
        seen.add(digest)
        grants.append(Grant(digest, checked or None))
    return tuple(grants)


def load_auth(token_file: Path | None = None, *, insecure: bool = False,
              environ: dict[str, str] | None = None) -> AuthConfig:
    """The access rules from ``token_file`` if given, else from ``SURFACELOG_GATEWAY_TOKENS``.
    ``insecure``: no authentication (the caller checks it binds to loopback only).
    Raises ``TokenConfigError`` when no token is configured (unless ``insecure``) or
    the configuration is malformed."""
    env = os.environ if environ is None else environ
    if insecure:
        if token_file is not None or env.get(TOKENS_ENV):
            raise TokenConfigError("--insecure-no-auth turns tokens off: configure none")
        return AuthConfig(insecure=True)
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise TokenConfigError(f"cannot read token file {token_file}: "
                                   f"{exc.strerror or type(exc).__name__}") from None
        grants = parse_grants(text, str(token_file))
    else:
        grants = parse_grants(env.get(TOKENS_ENV, ""), TOKENS_ENV, "\n;")
    if not grants:
        raise TokenConfigError(
            f"no token configured: give --token-file FILE or set {TOKENS_ENV} "
            "(or --insecure-no-auth, on loopback only)")
    return AuthConfig(grants)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost`` counts): the only hosts
    the gateway serves on without authentication."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
