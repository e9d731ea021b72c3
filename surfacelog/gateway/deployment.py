"""Starting and stopping the gateway: ``start_gateway`` starts its replicas
(``ingress.GatewayReplica``, plain Ray actors on this node sharing one ``host:port``)
and returns once it answers there; ``stop_gateway`` stops them. The replicas get the
``HostingConfig`` and the ``AuthConfig`` (token digests, never tokens) as arguments;
they belong to the process that started them (they end with it).
"""

from __future__ import annotations

import time
from typing import Any, Final

import httpx
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from surfacelog.actors.config import NAMESPACE, HostingConfig
from surfacelog.gateway.auth import AuthConfig, is_loopback
from surfacelog.gateway.errors import GatewayUnreachable, InsecureBind
from surfacelog.gateway.ingress import RemoteReplica

REPLICA_PREFIX: Final = "surfacelog-gateway-"
"""Each replica's actor name is this and its index (in the hosting namespace)."""

READY_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 10.0

_started: list[Any] = []
"""The handles of the replicas this process started: an actor that is not detached
lives while a handle to it does, so they are held here until ``stop_gateway``."""


def replica_names() -> list[str]:
    """The names of the gateway replicas running in this cluster."""
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == NAMESPACE
                  and a["name"].startswith(REPLICA_PREFIX))


def start_gateway(hosting: HostingConfig, auth: AuthConfig, *, host: str = "127.0.0.1",
                  port: int = 8000, replicas: int = 1) -> str:
    """Start ``replicas`` gateway replicas on this node, serving ``host:port``; return
    the URL once the gateway answers there. Ray must be initialised. Raises
    ``InsecureBind`` when authentication is off and ``host`` is not loopback,
    ``GatewayUnreachable`` when a gateway already runs in this cluster or the replicas
    do not answer within ``READY_TIMEOUT_S`` (they are stopped again), ``ValueError``
    for ``replicas < 1``."""
    if auth.insecure and not is_loopback(host):
        raise InsecureBind(f"--insecure-no-auth serves on loopback only, not on {host}")
    if replicas < 1:
        raise ValueError(f"a gateway needs at least one replica, not {replicas}")
    running = replica_names()
    if running:
        raise GatewayUnreachable(f"a gateway already runs in this cluster "
                                 f"({', '.join(running)}): stop it first")
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                          soft=False)
    actors: list[Any] = [
        RemoteReplica.options(name=f"{REPLICA_PREFIX}{i}", namespace=NAMESPACE,
                              max_restarts=-1, max_task_retries=0, num_cpus=0,
                              scheduling_strategy=here).remote(hosting, auth, host, port)
        for i in range(replicas)]
    try:
        ray.get([a.ready.remote(READY_TIMEOUT_S) for a in actors],
                timeout=READY_TIMEOUT_S + 30)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}"
        _wait_until_answering(url)
    except BaseException:
        _stop(actors)
        raise
    _started.extend(actors)
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
    raise GatewayUnreachable(f"the gateway does not answer at {url} ({last})")


def _stop(actors: list[Any]) -> None:
    """Let each replica finish its requests in flight, then end it (no restart)."""
    pending = [a.stop.remote(STOP_TIMEOUT_S) for a in actors]
    ray.wait(pending, num_returns=len(pending), timeout=STOP_TIMEOUT_S + 5)
    for actor in actors:
        ray.kill(actor, no_restart=True)
    _started.clear()


def stop_gateway() -> None:
    """Stop every gateway replica of this cluster (none running: nothing to do)."""
    actors = []
    for name in replica_names():
        try:
            actors.append(ray.get_actor(name, namespace=NAMESPACE))
        except ValueError:  # it ended after it was listed: already stopped
            continue
    _stop(actors)
