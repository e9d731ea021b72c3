"""The gateway as a Ray Serve application: one FastAPI ingress deployment whose
replicas each hold a ``Client`` of the same deployment (``HostingConfig``) and so reach
the same session actors as any Python client of the cluster.

``start_gateway`` starts Serve's HTTP proxy on the given host and port (loopback by
default) and deploys the app; ``stop_gateway`` removes it. The replicas get the
``HostingConfig`` and the ``AuthConfig`` (token digests, never tokens) as arguments.
"""

from __future__ import annotations

import time
from typing import Any, Final

import httpx
from fastapi import FastAPI
from ray import serve

from surfacelog.actors.client import connect
from surfacelog.actors.config import HostingConfig
from surfacelog.gateway.app import build_app
from surfacelog.gateway.auth import AuthConfig, is_loopback
from surfacelog.gateway.errors import GatewayUnreachable, InsecureBind

APP_NAME: Final = "surfacelog-gateway"
DEPLOYMENT_NAME: Final = "Gateway"
MAX_ONGOING_REQUESTS: Final = 1_000
"""Requests one replica serves at once: each mostly awaits a session actor."""


READY_TIMEOUT_S: Final = 30.0


class _Gateway:
    """A replica: its client, and the app built over it (``__serve_build_asgi_app__``,
    called by Serve after the constructor)."""

    def __init__(self, hosting: HostingConfig, auth: AuthConfig) -> None:
        self._client = connect(config=hosting)
        self._auth = auth

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_app(self._client, self._auth)


def gateway_app(hosting: HostingConfig, auth: AuthConfig, *, replicas: int = 1) -> Any:
    """The Serve application (bound deployment) of the gateway."""
    deployment = serve.deployment(
        name=DEPLOYMENT_NAME, num_replicas=replicas,
        max_ongoing_requests=MAX_ONGOING_REQUESTS,
        ray_actor_options={"num_cpus": 0},
    )(serve.ingress()(_Gateway))
    return deployment.bind(hosting, auth)


def start_gateway(hosting: HostingConfig, auth: AuthConfig, *, host: str = "127.0.0.1",
                  port: int = 8000, replicas: int = 1) -> str:
    """Start Serve's HTTP proxy on ``host:port`` and deploy the gateway; returns its
    URL. Ray must be initialised. Raises ``InsecureBind`` when authentication is off and
    ``host`` is not loopback."""
    if auth.insecure and not is_loopback(host):
        raise InsecureBind(f"--insecure-no-auth serves on loopback only, not on {host}")
    serve.start(http_options={"host": host, "port": port})
    serve.run(gateway_app(hosting, auth, replicas=replicas), name=APP_NAME,
              route_prefix="/")
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    _wait_until_answering(url)
    return url


def _wait_until_answering(url: str) -> None:
    """Return once the gateway answers at ``url`` (its OpenAPI route: 200, or 401
    without a token); raises ``GatewayUnreachable`` after ``READY_TIMEOUT_S``."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer"
    with httpx.Client(timeout=5.0) as http:
        while time.monotonic() < deadline:
            try:
                reply = http.get(f"{url}/openapi.json")
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if reply.status_code in (200, 401) and reply.headers.get(
                        "content-type", "").startswith(("application/json",
                                                        "application/problem+json")):
                    return
                last = f"HTTP {reply.status_code}"
            time.sleep(0.2)
    raise GatewayUnreachable(
        f"the gateway does not answer at {url} ({last}): Serve may already run in this "
        "cluster with other HTTP options, which apply only when Serve starts")


def stop_gateway() -> None:
    """Shut Serve down (its proxy and every application)."""
    serve.shutdown()  # type: ignore[no-untyped-call]
