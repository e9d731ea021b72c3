"""``surfacelog serve``: the HTTP gateway, started by ``serving.serve_gateway``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from surfacelog.cli.common import usage


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""
    app.command()(serve)


def serve(db: Annotated[str | None, typer.Option(
              "--db", metavar="FILE", show_default=False,
              help="SQLite store file (default surfacelog.db)")] = None,
          shards: Annotated[Path | None, typer.Option(
              "--shard-map", metavar="FILE", show_default=False,
              help="shard map (JSON) to serve instead of --db: each shard's writer runs "
                   "on the node its resource names")] = None,
          host: Annotated[str, typer.Option("--host", help="address to listen on")
                          ] = "127.0.0.1",
          port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8000,
          token_file: Annotated[Path | None, typer.Option(
              "--token-file", metavar="FILE", show_default=False,
              help="bearer tokens, one 'TOKEN [PREFIX...]' per line (else the variable "
                   "SURFACELOG_GATEWAY_TOKENS)")] = None,
          insecure_no_auth: Annotated[bool, typer.Option(
              "--insecure-no-auth", help="serve without tokens (loopback only)")] = False,
          address: Annotated[str | None, typer.Option(
              "--address", help="join this Ray cluster instead of an embedded one")] = None,
          placement: Annotated[str, typer.Option(
              "--placement", help="packed or dedicated session actors")] = "packed",
          writer: Annotated[str, typer.Option(
              "--writer", help="auto (owner when packed), owner or journal")] = "auto",
          ) -> None:
    """Serve the sessions over HTTP (the gateway: uvicorn replicas in Ray actors) until Ctrl-C.

    Exit 2 on a usage error, a bad token or shard configuration, 1 when it cannot start.
    """
    from surfacelog.cli.serving import serve_gateway

    if placement not in ("packed", "dedicated") or writer not in ("auto", "owner", "journal"):
        raise usage("serve", "--placement is packed or dedicated, --writer auto, owner "
                             "or journal")
    raise typer.Exit(serve_gateway(db, shards, host, port, token_file, insecure_no_auth,
                                   address, placement, writer))
