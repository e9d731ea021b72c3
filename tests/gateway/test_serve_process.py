"""``surfacelog serve`` as a process, the way an operator runs it: its embedded Ray's
processes never see the gateway's tokens."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from support import paths
from support.ports import free_port


def _wait_until_serving(proc: subprocess.Popen[bytes], url: str, token: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}")
        try:
            reply = httpx.get(f"{url}/v1/sessions", timeout=5,
                              headers={"Authorization": f"Bearer {token}"})
        except httpx.TransportError:
            time.sleep(0.2)
            continue
        assert reply.status_code == 200, reply.text
        return
    raise AssertionError("serve did not answer within 120 s")


def test_tokens_from_the_environment_reach_no_process_of_the_cluster(
        tmp_path: Path) -> None:
    token = f"env-token-{secrets.token_hex(16)}"
    port = free_port()
    env = {**os.environ, "SURFACELOG_GATEWAY_TOKENS": token}
    proc = subprocess.Popen(
        [sys.executable, "-m", "surfacelog.cli", "serve", "--db", str(tmp_path / "s.db"),
         "--port", str(port)], env=env, cwd=paths.REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        _wait_until_serving(proc, f"http://127.0.0.1:{port}", token)
        cluster = psutil.Process(proc.pid).children(recursive=True)
        # A Ray worker's title is ``ray::Class`` when idle and ``ray::Class.method``
        # while it runs one (the replica answering a health check, say).
        names = {p.name().split(".", 1)[0] for p in cluster}
        assert "ray::GatewayReplica" in names and "raylet" in names, names
        for child in cluster:
            try:
                seen = " ".join([*child.environ().values(), *child.cmdline()])
            except psutil.NoSuchProcess:
                continue  # ended meanwhile (a Ray helper): it holds nothing now
            assert token not in seen, f"the token is in {child.name()} ({child.pid})"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
