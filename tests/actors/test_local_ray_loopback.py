"""The embedded local Ray listens on loopback only (``local_ray_on_loopback``)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import psutil
import pytest

from surfacelog.actors.client import connect

pytestmark = pytest.mark.usefixtures("ray_local")


def _listening(pids: set[int]) -> list[tuple[str, int, str]]:
    out = []
    for conn in psutil.net_connections("inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
            out.append((conn.laddr.ip, conn.laddr.port, psutil.Process(conn.pid).name()))
    return out


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


async def test_every_ray_process_of_the_local_instance_listens_on_loopback_only(
        tmp_path: Path) -> None:
    client = connect(db=str(tmp_path / "sec.db"), placement="packed", packs=1)
    try:
        await client.session("s").append("turn/start", {"turn": 1})
        # GCS and raylet are started by this process, workers by the raylet.
        pids = {p.pid for p in psutil.Process().children(recursive=True)}
        sockets = _listening(pids | {psutil.Process().pid})
        names = {name for _, _, name in sockets}
        assert any("gcs" in n for n in names) and any("raylet" in n for n in names), sockets
        assert [s for s in sockets if not _loopback(s[0])] == []
    finally:
        client.shutdown()


def _dashboard_served(db: Path, asked: str) -> str:
    """``DASHBOARD`` when the Ray that ``connect()`` starts in a process of its own (the
    test session's Ray is already up) listens on the dashboard's port, else ``NONE``."""
    import subprocess
    import sys

    script = (
        "import sys, psutil, surfacelog\n"
        "kw = {'include_dashboard': True} if sys.argv[2] == 'yes' else {}\n"
        "c = surfacelog.connect(db=sys.argv[1], **kw)\n"
        "kids = psutil.Process().children(recursive=True)\n"
        "ports = {k.laddr.port for p in kids for k in p.net_connections('inet')"
        " if k.status == 'LISTEN'}\n"
        "print('DASHBOARD' if 8265 in ports else 'NONE')\n"
        "c.shutdown()\n")
    done = subprocess.run([sys.executable, "-c", script, str(db), asked],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_connect_starts_no_dashboard_unless_asked(tmp_path: Path) -> None:
    assert _dashboard_served(tmp_path / "no.db", "no") == "NONE"


@pytest.mark.slow
def test_connect_starts_a_dashboard_when_asked(tmp_path: Path) -> None:
    assert _dashboard_served(tmp_path / "yes.db", "yes") == "DASHBOARD"
