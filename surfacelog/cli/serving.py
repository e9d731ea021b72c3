"""``surfacelog serve``: the HTTP gateway on an embedded local Ray (or a cluster), until
Ctrl-C.

Checks everything it can before starting Ray: the tokens (``--token-file`` or
``SURFACELOG_GATEWAY_TOKENS``; none only with ``--insecure-no-auth``, on loopback), the
shard configuration, and that the port is free on the host. Prints one line saying
where it serves; every failure is one line on stderr and a non-zero exit, no
traceback.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Final

import typer

from surfacelog.gateway.auth import TOKENS_ENV, AuthConfig, is_loopback, load_auth
from surfacelog.gateway.errors import TokenConfigError
from surfacelog.schema.errors import SurfacelogError
from surfacelog.store.errors import ShardConfigError
from surfacelog.store.shardmap import ShardMap, load_shard_map

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


def _port_free(host: str, port: int) -> str | None:
    """``None`` when ``host:port`` can be bound now, else why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} is in use on {host}"
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def _say(message: str) -> None:
    typer.echo(message.replace("\n", " "), err=True)


def serve_gateway(db: str | None, shards: Path | None, host: str, port: int,
                  token_file: Path | None, insecure: bool, address: str | None,
                  placement: str, writer: str = "auto") -> int:
    """Run the gateway until interrupted; returns the exit status."""

    if db is not None and shards is not None:
        _say("usage error: surfacelog serve: give either --db or --shard-map, not both")
        return EXIT_USAGE
    try:
        auth = load_auth(token_file, insecure=insecure)
    except TokenConfigError as exc:
        _say(f"cannot serve: {exc}")
        return EXIT_USAGE
    # Read: from here on only their digests travel. Every process the embedded Ray
    # starts inherits this environment, so the tokens leave it before Ray starts.
    os.environ.pop(TOKENS_ENV, None)
    if insecure and not is_loopback(host):
        _say(f"cannot serve: --insecure-no-auth serves on loopback only, not on {host}")
        return EXIT_USAGE
    try:
        shard_map = (load_shard_map(shards) if shards is not None
                     else ShardMap.single(db or "surfacelog.db"))
    except (ShardConfigError, OSError) as exc:
        _say(f"bad shard configuration: {exc}")
        return EXIT_USAGE
    busy = _port_free(host, port)
    if busy is not None:
        _say(f"cannot serve: {busy}")
        return EXIT_FAILED
    return _run(shard_map, host, port, auth, address, placement, writer,
                "--shard-map " + str(shards) if shards is not None else shard_map.shards[0].path)


def _run(shard_map: ShardMap, host: str, port: int, auth: AuthConfig, address: str | None,
         placement: str, writer: str, where: str) -> int:
    import ray

    from surfacelog.actors.client import connect, init_ray
    from surfacelog.actors.config import HostingConfig
    from surfacelog.gateway.deployment import start_gateway, stop_gateway

    logging.getLogger("ray").setLevel(logging.WARNING)
    packed = placement == "packed"
    hosting = HostingConfig(
        shard_map, placement="packed" if packed else "dedicated",
        writer="owner" if writer == "owner" or (writer == "auto" and packed) else "journal")
    embedded = address is None
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        init_ray(address, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, logging_level=logging.WARNING)
        client = connect(config=hosting)
        try:
            url = start_gateway(hosting, auth, host=host, port=port)
            typer.echo(f"surfacelog gateway: serving {url} over {where} "
                       f"({'NO AUTHENTICATION' if auth.insecure else 'bearer tokens'}); "
                       "Ctrl-C stops")
            try:
                while not stop.wait(0.5):
                    pass
            except KeyboardInterrupt:
                typer.echo("stopping…", err=True)
            stop_gateway()
        finally:
            if embedded:
                failures = client.shutdown()
                for line in failures:
                    _say(f"write failed: {line}")
    except KeyboardInterrupt:
        _say("interrupted while starting")
        return EXIT_INTERRUPTED
    except (SurfacelogError, OSError, RuntimeError) as exc:
        _say(f"cannot serve: {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGTERM, previous)
        if embedded and ray.is_initialized():
            ray.shutdown()
    return EXIT_OK
