"""The gateway's OpenAPI document, as checked into ``deploy/openapi.json``.

``python -m surfacelog.gateway.openapi [FILE]`` writes it (stdout by default); the
served one (``GET /openapi.json``) must equal it (``tests/gateway/test_http_gateway.py``). Needs no
Ray: the app is built over a client that is never called.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from surfacelog.actors.client import Client
from surfacelog.actors.config import HostingConfig
from surfacelog.gateway.app import build_app, openapi_document
from surfacelog.gateway.auth import AuthConfig
from surfacelog.store.shardmap import ShardMap


def document() -> dict[str, Any]:
    """The OpenAPI document of the gateway's routes."""
    app = build_app(Client(HostingConfig(ShardMap.single("unused.db")), {}),
                    AuthConfig(insecure=True))
    return openapi_document(app)


def render(doc: dict[str, Any]) -> str:
    """``doc`` as the checked-in file has it: sorted keys, two-space indent."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> None:
    text = render(document())
    if argv:
        with open(argv[0], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
