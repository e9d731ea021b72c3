"""The served OpenAPI document states what the gateway enforces (issue 27 item 9):
schemathesis, run as a user runs it (``st run URL``, every check), against the
gateway's app served by uvicorn on loopback over a client of the test session's Ray,
with a valid token, finds nothing.

``tests/gateway/schemathesis.toml`` says which answers of an operation are a refusal
by the session's own rules (422) rather than by the document's limits (400), and keeps
the follow stream short. The default run is short: 3 examples per operation, in the
fuzzing and stateful phases (about 10 s; the coverage phase alone sends some 650
boundary cases whatever the number of examples, another 10 s). The ``slow`` run has
every phase and 100 examples per operation (a minute or two).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from surfacelog.actors.client import Client, connect
from surfacelog.actors.config import HostingConfig
from surfacelog.gateway.app import build_app
from surfacelog.gateway.auth import AuthConfig, parse_grants
from surfacelog.gateway.ingress import AsgiThread
from surfacelog.store.shardmap import ShardMap

from support.ports import free_port

pytestmark = pytest.mark.usefixtures("ray_local")

TOKEN = "conformance-token-0123456789abcdef"
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway's URL: its app on a loopback port, over a new store."""
    db = tmp_path_factory.mktemp("conformance") / "c.db"
    client: Client = connect(config=HostingConfig(ShardMap.single(str(db)),
                                                  placement="packed", packs=1))
    port = free_port()
    server = AsgiThread(build_app(client, AuthConfig(parse_grants(TOKEN, "test"))),
                        "127.0.0.1", port)
    server.ready(30.0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop(10.0)
        client.shutdown()


def schemathesis(url: str, tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``st run`` of the served document with every check and the token; its output
    (a report of every failure with a curl command to reproduce it) is in the result."""
    return subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "run",
         f"{url}/openapi.json", "--checks", "all", "-H", f"Authorization: Bearer {TOKEN}",
         "--generation-database", "none", "--no-color", "--report-dir", str(tmp_path),
         *options],
        capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path)


def test_schemathesis_finds_nothing_in_a_short_run(served: str, tmp_path: Path) -> None:
    run = schemathesis(served, tmp_path, "--phases", "examples,fuzzing,stateful",
                       "--max-examples", "3", "--seed", "27")
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]


@pytest.mark.slow
def test_schemathesis_finds_nothing_in_a_long_run(served: str, tmp_path: Path) -> None:
    run = schemathesis(served, tmp_path, "--max-examples", "100")
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
