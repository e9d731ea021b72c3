"""The gateway's replicas: plain Ray actors, each serving the FastAPI app with uvicorn
on the gateway's ``host:port`` itself, the port shared by every replica of the node
(``SO_REUSEPORT``: the kernel spreads the connections).

Why not Ray Serve: measured under the load run (``surfacelog run --via http``), Serve's
HTTP proxy and its replica wrapper spent about 4 ms of CPU each per append request,
against well under 1 ms of our own code in the replica: two thirds of the gateway's
cost was the hop from proxy to replica and Serve's per-request bookkeeping. Here an
HTTP request reaches the process that holds the ``Client``, and from there one
coalesced Ray call reaches the session actor.

A replica serves from its constructor (a thread running uvicorn's own event loop), so
that when Ray restarts a dead replica it serves again with nothing else to call.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Final

import msgspec
import ray
import uvicorn

from surfacelog.actors.client import connect
from surfacelog.actors.config import HostingConfig
from surfacelog.gateway.app import build_app
from surfacelog.gateway.auth import AuthConfig
from surfacelog.gateway.errors import GatewayUnreachable

KEEP_ALIVE_S: Final = 30
"""How long an idle client connection is kept open (agents append again and again)."""
DIRECT_ENV: Final = "SURFACELOG_GATEWAY_DIRECT"
"""Set to ``0`` to serve every route through FastAPI (``build_app(direct=False)``), to
measure what ``direct.DirectRoutes`` gives; read by each replica when it starts,
inherited by the processes of a Ray this process starts."""


class ReplicaInfo(msgspec.Struct, frozen=True):
    """What ``GatewayReplica.ready`` answers: the process serving, and where."""

    pid: int
    host: str
    port: int


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` that other processes of this user may bind
    too (``SO_REUSEPORT``). Raises ``OSError`` when the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class AsgiThread:
    """``app`` served by uvicorn on a socket bound to ``host:port`` (``SO_REUSEPORT``),
    from a thread of this process running its own event loop. Raises ``OSError`` when
    the address cannot be bound."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._sock = listening_socket(host, port)
        config = uvicorn.Config(app, lifespan="off", access_log=False, log_config=None,
                                log_level="warning", timeout_keep_alive=KEEP_ALIVE_S,
                                server_header=False)
        self._server = uvicorn.Server(config)
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="gateway-http",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # kept for ``ready`` to raise, not swallowed
            self._failure = exc

    def ready(self, timeout_s: float) -> ReplicaInfo:
        """Once uvicorn accepts connections, where this process serves. Raises
        ``GatewayUnreachable`` when it stopped or did not start within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise GatewayUnreachable(f"the gateway replica stopped serving: "
                                         f"{self._failure!r}")
            if time.monotonic() > deadline:
                raise GatewayUnreachable(f"the gateway replica did not start serving "
                                         f"within {timeout_s} s")
            time.sleep(0.01)
        return ReplicaInfo(os.getpid(), self.host, self.port)

    def stop(self, timeout_s: float) -> bool:
        """Stop accepting connections, let the requests in flight finish (up to
        ``timeout_s``), and stop serving. True when it stopped within the time."""
        self._server.should_exit = True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


class GatewayReplica:
    """One replica: a ``Client`` of the deployment and the app over it, served on
    ``host:port`` by an ``AsgiThread`` (the Client's lines to the session actors live
    on that thread's event loop)."""

    def __init__(self, hosting: HostingConfig, auth: AuthConfig, host: str,
                 port: int) -> None:
        self._client = connect(config=hosting)
        direct = os.environ.get(DIRECT_ENV, "1") != "0"
        self._http = AsgiThread(build_app(self._client, auth, direct=direct), host, port)

    def ready(self, timeout_s: float) -> ReplicaInfo:
        """See ``AsgiThread.ready``."""
        return self._http.ready(timeout_s)

    def stop(self, timeout_s: float) -> bool:
        """See ``AsgiThread.stop``."""
        return self._http.stop(timeout_s)


RemoteReplica: Any = ray.remote(GatewayReplica)
