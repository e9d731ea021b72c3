"""benchmarks/suite_cpu.py: the kinds it sorts processes into, and a tiny run of its own
(a pytest that starts one child process), no timing asserts."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from support.benchmodules import load_bench

PYTHON_RAY = "/venv/lib/python3.11/site-packages/ray"


@pytest.mark.parametrize(("name", "cmdline", "kind"), [
    ("gcs_server", ["/x/gcs_server", "--gcs_server_port=0"], "Ray GCS"),
    ("raylet", ["/x/raylet", "--node_id=1"], "Ray raylet"),
    ("python", ["python", f"{PYTHON_RAY}/_private/workers/default_worker.py"], "Ray worker"),
    ("ray::SessionActor", ["ray::SessionActor.append"], "Ray worker"),
    ("python", ["python", "-u", f"{PYTHON_RAY}/dashboard/agent.py"], "Ray dashboard agent"),
    # The agents' own titles, once set (seen in a run of the suite): not workers.
    ("python", ["ray::DashboardAgent", "", ""], "Ray dashboard agent"),
    ("python", ["ray::RuntimeEnvAgent                        "], "Ray runtime-env agent"),
    ("ray::IDLE", ["ray::IDLE", "", ""], "Ray worker"),
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
    with pytest.raises(SystemExit):
        bench.main(["--by-test", "-1", "--", str(suite)])
    assert "--by-test -1: a number of tests" in capsys.readouterr().err


def test_a_process_first_seen_before_its_exec_is_charged_to_what_it_became() -> None:
    tally = load_bench("suite_cpu").Tally()
    pytest_line = ["python", "-m", "pytest", "-q"]
    # Seen mid-exec (no command line yet), then as the pytest it became, then exiting
    # (its memory released: no command line again).
    for cmdline, spent in (([], 0.02), (pytest_line, 0.5), ([], 0.75)):
        tally.observe((41, 1.0), "python", cmdline, spent)
    tally.observe((42, 1.0), "python", ["python", "-c", "pass"], 0.3)
    assert tally.starts["pytest (tests in process)"] == 1
    assert tally.starts["other child"] == 1
    assert tally.cpu["pytest (tests in process)"] == pytest.approx(0.75)
    assert tally.cpu["other child"] == pytest.approx(0.3)


def test_the_plugin_moves_a_count_when_a_forked_process_execs() -> None:
    counter = load_bench("ray_starts_by_test").StartCounter(psutil.Process())
    raylet = ["/x/raylet", "--node_id=1"]
    counter.test = "t.py::test_a"
    # A raylet between fork and exec shows the test process's command line.
    counter.observe((51, 1.0), "python", ["python", "-c",
                                          "import sys;exec(eval(sys.stdin.readline()))"])
    counter.test = "t.py::test_b"
    counter.observe((51, 1.0), "raylet", raylet)
    counter.observe((51, 1.0), "raylet", raylet)
    # A worker the raylet forked, seen first as its parent, then exiting (no command line).
    worker = ["python", f"{PYTHON_RAY}/_private/workers/default_worker.py"]
    for name, cmdline in (("raylet", raylet), ("python", worker), ("python", [])):
        counter.observe((52, 1.0), name, cmdline)
    assert counter.rows() == [["t.py::test_a", "Ray raylet", 1],
                              ["t.py::test_b", "Ray worker", 1]]


TINY_SUITE = '''
import subprocess, sys
import pytest

CHILDREN = []

@pytest.fixture(scope="module", autouse=True)
def ended():
    yield
    for child in CHILDREN:
        child.kill()
        child.wait()

def worker_like():
    # Alive until the module ends: the plugin's look at the test's end sees it, however
    # loaded the machine. Its command line names Ray's worker script.
    CHILDREN.append(subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "default_worker.py"]))

def test_one():
    worker_like()

def test_two():
    worker_like()
    worker_like()

def test_none():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_by_test_charges_each_ray_process_to_the_test_that_started_it(
        tmp_path: Path, workers: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "test_tiny_starts.py"
    suite.write_text(TINY_SUITE, encoding="utf-8")
    result = load_bench("suite_cpu").main(["--by-test", "5", "--", "-q", "-p",
                                           "no:cacheprovider", *workers, str(suite)])
    assert result["exit_code"] == 0
    # Under xdist the controlling process, whose descendants are every worker's, counts
    # nothing: each process is counted once.
    assert result["ray_starts_counted"] == {"Ray worker": 3, "Ray raylet": 0}
    by_test = {r["test"].rsplit("::", 1)[-1]: r["Ray worker"] for r in result["by_test"]}
    assert by_test == {"test_two": 2, "test_one": 1}
    assert result["by_test"][0]["test"].endswith("::test_two")
    out = capsys.readouterr().out
    assert "3 workers and 0 raylets seen in all" in out
    assert f"| {result['by_test'][0]['test']} | 2 | 0 |" in out
