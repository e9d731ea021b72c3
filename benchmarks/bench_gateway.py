"""Gateway benchmark: appends over HTTP through the gateway, each figure beside a bare
echo endpoint served the same way, measured in the same run, printed as a ratio.

    python benchmarks/bench_gateway.py [--quick] [--clients 50]

Starts its own local Ray (``num_cpus=2``, loopback) and keeps the databases in a
temporary directory. Four replicas (``gateway.ingress``: a Ray actor serving a FastAPI
app with uvicorn on its own loopback port) serve: the gateway over a durable deployment
(``d``), over a buffered one (``b``) (both packed, the journal writing), over a durable
one whose session actor owns the file (``o``, ``writer="owner"``, what ``surfacelog
serve`` runs by default), and an echo endpoint (``echo``) of the same style (the body
read with msgspec into the gateway's own request struct, a reply of the same shape and
size) that touches no session. Every request carries the same bearer token and the
same one-event body (a ``user/message`` with ``expectedSeq``). Measures:

1. one append's HTTP round trip (keep-alive, one request at a time), gateway vs echo,
   in alternating blocks, medians (target: <= 1.3x);
2. appends/s with ``--clients`` concurrent clients (one session each, one request in
   flight each, every append with ``expectedSeq``) vs the echo endpoint under the same
   clients.

The load generator (httpx, one process) shares the machine's cores with Ray: figure 2 is
what this machine sustains with it, not the gateway's ceiling.
"""

# No ``from __future__ import annotations``: the echo actor is pickled by value, and
# FastAPI must read its route's annotations as objects, not names to look up.
import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
import ray
from fastapi import FastAPI, Request
from fastapi.responses import Response

from surfacelog.actors.client import connect, init_ray
from surfacelog.actors.config import Durability, HostingConfig, Writer
from surfacelog.gateway import wire
from surfacelog.gateway.auth import AuthConfig, parse_grants
from surfacelog.gateway.ingress import AsgiThread, RemoteReplica
from surfacelog.store.shardmap import ShardMap

TOKEN = "bench-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
TEXT = "Please look at the failing build and tell me what broke. " * 4


VARIANTS: list[tuple[str, Durability, Writer]] = [
    ("d", "durable", "journal"), ("b", "buffered", "journal"), ("o", "durable", "owner")]
"""The gateways deployed: route prefix, durability, writer."""
LABELS = {"d": "durable, journal", "b": "buffered, journal", "o": "durable, owner"}


def body(seq: int) -> dict[str, Any]:
    """The one-event append both endpoints get."""
    return {"type": "user/message", "surfaceOp": "append", "expectedSeq": seq,
            "data": {"id": f"u-{seq}", "role": "user", "source": {"kind": "user"},
                     "content": [{"type": "text", "text": TEXT}]}}


def echo_app() -> FastAPI:
    """A bare endpoint in the gateway's style: reads the body as the gateway does and
    answers an ``Events`` reply of the same shape, without any session."""
    app = FastAPI()
    encoder = msgspec.json.Encoder()

    @app.post("/v1/sessions/{session_id}/events")
    async def echo(session_id: str, request: Request) -> Response:
        spec: wire.AppendOne = msgspec.json.decode(await request.body(),
                                                   type=wire.AppendOne)
        seq = spec.expected_seq or 0
        event = {"type": spec.type, "seq": seq, "time": time.time_ns() // 1_000_000,
                 "data": spec.data, "surfaceOp": spec.surface_op}
        return Response(encoder.encode({"events": [event], "next": seq + 1}),
                        media_type="application/json")

    return app


class _EchoReplica:
    """The echo endpoint served as a gateway replica is (``AsgiThread``)."""

    def __init__(self, port: int) -> None:
        self._http = AsgiThread(echo_app(), "127.0.0.1", port)

    def ready(self, timeout_s: float) -> Any:
        return self._http.ready(timeout_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def hostings(tmp: str) -> dict[str, HostingConfig]:
    """The two deployments the gateways serve, by route prefix."""
    return {prefix: HostingConfig(ShardMap.single(os.path.join(tmp, f"{prefix}.db")),
                                  placement="packed", packs=2, durability=durability,
                                  writer=writer)
            for prefix, durability, writer in VARIANTS}


_replicas: list[Any] = []


async def undeploy(tmp: str) -> None:
    """Stop the replicas, then flush and stop the session actors and journals the
    gateways started."""
    for actor in _replicas:
        ray.kill(actor, no_restart=True)
    _replicas.clear()
    for hosting in hostings(tmp).values():
        client = connect(config=hosting)
        for info in await client.list_sessions():
            client.actor_on(hosting.shards.shards[0], info.id)
        client.shutdown()


def deploy(tmp: str) -> dict[str, str]:
    """Start the echo replica and a gateway replica over each deployment of
    ``VARIANTS``, each on its own free loopback port; returns each one's base URL by
    name (``echo`` and the variants' prefixes) once all of them serve. Ray must be
    initialised. They start together and are waited for at once; nothing is measured
    before all of them serve."""
    if __name__ != "__main__":  # imported (the smoke test): Ray pickles it by value
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    auth = AuthConfig(parse_grants(TOKEN, "bench"))
    ports = {name: free_port() for name in ("echo", *(v[0] for v in VARIANTS))}
    started = {"echo": ray.remote(_EchoReplica).options(num_cpus=0).remote(ports["echo"])}
    for prefix, hosting in hostings(tmp).items():
        started[prefix] = RemoteReplica.options(num_cpus=0).remote(
            hosting, auth, "127.0.0.1", ports[prefix])
    _replicas.extend(started.values())
    ray.get([a.ready.remote(60.0) for a in started.values()])
    return {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    baseline: float
    target: str = ""

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("nan")

    def row(self) -> str:
        return (f"| {self.name} | {self.value:,.2f} {self.unit} | {self.baseline:,.2f} "
                f"{self.unit} | {self.ratio:.2f}x | {self.target} |")


async def create(http: httpx.AsyncClient, base: str, session_id: str) -> None:
    r = await http.post(f"{base}/v1/sessions", json={"id": session_id})
    if r.status_code != 201:
        raise RuntimeError(f"create {session_id}: {r.status_code} {r.text}")


async def append(http: httpx.AsyncClient, path: str, seq: int) -> float:
    """One append's round trip in ms. Raises on anything but 200."""
    t0 = time.perf_counter()
    r = await http.post(path, json=body(seq))
    elapsed = (time.perf_counter() - t0) * 1000
    if r.status_code != 200:
        raise RuntimeError(f"{path}: {r.status_code} {r.text}")
    return elapsed


async def round_trip(base: dict[str, str], prefix: str, blocks: int, per_block: int) -> Figure:
    """Figure 1 for the gateway at ``prefix``: medians over alternating blocks."""
    session = f"rtt-{prefix}"
    gateway_ms: list[float] = []
    echo_ms: list[float] = []
    async with httpx.AsyncClient(headers=HEADERS, timeout=60) as http:
        await create(http, base[prefix], session)
        seq = 0
        for _ in range(3):  # warm both paths
            await append(http, f"{base['echo']}/v1/sessions/{session}/events", seq)
            await append(http, f"{base[prefix]}/v1/sessions/{session}/events", seq)
            seq += 1
        for _ in range(blocks):
            for k in range(per_block):
                echo_ms.append(await append(http, f"{base['echo']}/v1/sessions/{session}/events",
                                            seq + k))
            for k in range(per_block):
                gateway_ms.append(await append(
                    http, f"{base[prefix]}/v1/sessions/{session}/events", seq + k))
            seq += per_block
    return Figure(f"1: one append's round trip, {LABELS[prefix]} (median)",
                  statistics.median(gateway_ms), "ms", statistics.median(echo_ms), "<= 1.3x")


async def _client_loop(url: str, count: int) -> None:
    async with httpx.AsyncClient(headers=HEADERS, timeout=120) as http:
        for seq in range(count):
            await append(http, url, seq)


async def concurrent(base: dict[str, str], prefix: str, clients: int, per_client: int) -> Figure:
    """Figure 2: appends/s of ``clients`` clients, each on its own session."""
    ids = [f"load-{prefix}-{k}" for k in range(clients)]
    async with httpx.AsyncClient(headers=HEADERS, timeout=120) as http:
        await asyncio.gather(*(create(http, base[prefix], sid) for sid in ids))
    rates: dict[str, float] = {}
    for side in ("echo", prefix):
        t0 = time.perf_counter()
        await asyncio.gather(*(_client_loop(f"{base[side]}/v1/sessions/{sid}/events",
                                            per_client) for sid in ids))
        rates[side] = clients * per_client / (time.perf_counter() - t0)
    return Figure(f"2: appends/s, {clients} clients, {LABELS[prefix]}", rates[prefix],
                  "appends/s", rates["echo"])


async def run_all(base: dict[str, str], quick: bool, clients: int) -> list[Figure]:
    blocks, per_block, per_client = (2, 20, 4) if quick else (6, 50, 20)
    figures = []
    for prefix, _, _ in VARIANTS:
        figures.append(await round_trip(base, prefix, blocks, per_block))
    for prefix, _, _ in VARIANTS:
        figures.append(await concurrent(base, prefix, clients, per_client))
    return figures


def markdown(figures: Sequence[Figure]) -> str:
    head = "| figure | gateway | echo (bare replica) | ratio | target |\n|---|---:|---:|---:|---|"
    return "\n".join([head, *(f.row() for f in figures)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--clients", type=int, default=50,
                        help="concurrent clients of figure 2 (default 50)")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    init_ray(None, num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
            t0 = time.perf_counter()
            load = os.getloadavg()
            base = deploy(tmp)
            figures = asyncio.run(run_all(base, args.quick, args.clients))
            print(f"\n{markdown(figures)}\n\n({time.perf_counter() - t0:.0f} s; "
                  f"python {sys.version.split()[0]}, ray {ray.__version__}, "
                  f"{os.cpu_count()} cores; load average {load[0]:.1f} before, "
                  f"{os.getloadavg()[0]:.1f} after)")
            asyncio.run(undeploy(tmp))
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
