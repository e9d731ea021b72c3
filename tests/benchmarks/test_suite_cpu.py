"""benchmarks/suite_cpu.py: the kinds it sorts processes into, and a tiny run of its own
(a pytest that starts one child process), no timing asserts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.benchmodules import load_bench

PYTHON_RAY = "/venv/lib/python3.11/site-packages/ray"


@pytest.mark.parametrize(("name", "cmdline", "kind"), [
    ("gcs_server", ["/x/gcs_server", "--gcs_server_port=0"], "Ray GCS"),
    ("raylet", ["/x/raylet", "--node_id=1"], "Ray raylet"),
    ("python", ["python", f"{PYTHON_RAY}/_private/workers/default_worker.py"], "Ray worker"),
    ("ray::SessionActor", ["ray::SessionActor.append"], "Ray worker"),
    ("python", ["python", "-u", f"{PYTHON_RAY}/dashboard/agent.py"], "Ray dashboard agent"),
    ("python", ["python", f"{PYTHON_RAY}/_private/log_monitor.py"], "Ray log monitor"),
    ("python", ["python", "-c", "import sys;exec(eval(sys.stdin.readline()))"],
     "pytest (tests in process)"),
    ("python", ["python", "-m", "surfacelog.cli", "run"], "surfacelog child (CLI, scenario)"),
    ("python", ["python", "-m", "surfacelog.cli", "run", "--db",
                "/tmp/pytest-of-root/pytest-1/popen-gw0/test_x0/kills.db"],
     "surfacelog child (CLI, scenario)"),
    ("python", ["python", "/repo/tests/support/cluster_scenario.py", "--out",
                "/tmp/pytest-of-root/pytest-1/r.json"], "surfacelog child (CLI, scenario)"),
    ("python", ["python", "-m", "pytest", "-q", "/tmp/pytest-of-root/x/test_tiny.py"],
     "pytest (tests in process)"),
    ("sleep", ["sleep", "1"], "other child"),
])
def test_each_process_gets_its_kind(name: str, cmdline: list[str], kind: str) -> None:
    assert load_bench("suite_cpu").kind_of(name, cmdline) == kind


def test_a_tiny_run_charges_the_child_it_starts(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "test_tiny.py"
    suite.write_text(
        "import subprocess, sys\n"
        "def test_spins_a_child():\n"
        "    code = 'import time\\nend = time.process_time() + 0.5\\n'"
        " 'while time.process_time() < end: pass'\n"
        "    subprocess.run([sys.executable, '-c', code], check=True)\n",
        encoding="utf-8")
    out = tmp_path / "figures.json"
    bench = load_bench("suite_cpu")
    result = bench.main(["--interval", "0.05", "--json", str(out), "--",
                         "-q", "-p", "no:cacheprovider", str(suite)])
    assert result["exit_code"] == 0
    kinds = {k["kind"]: k for k in result["kinds"]}
    assert kinds["pytest (tests in process)"]["starts"] == 1
    assert kinds["other child"]["starts"] == 1
    # The child spun half a second of CPU; sampling every 0.05 s sees most of it.
    assert kinds["other child"]["cpu_s"] >= 0.3
    assert sum(k["share"] for k in result["kinds"]) == pytest.approx(1, abs=0.01)
    assert result["sampled_cpu_s"] <= result["waited_children_cpu_s"] + 0.2
    assert json.loads(out.read_text(encoding="utf-8")) == result
    assert "| other child | 1 |" in capsys.readouterr().out
    # A second run never overwrites the figures of the first.
    with pytest.raises(SystemExit):
        bench.main(["--json", str(out), "--", str(suite)])
