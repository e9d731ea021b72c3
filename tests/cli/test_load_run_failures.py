"""Issue 12, ``surfacelog run``: every failure ends with its report or one line and a
documented exit status, never a traceback or a hang; ``--json`` keeps stdout for the
JSON document alone; ``--report`` goes through ``cli/outputs.py``.

The runs that start their own Ray (to kill its processes, or to find Ray missing) are
real ``surfacelog run`` processes; a run is waited for through what it prints or the
processes it starts, never for a fixed time."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from surfacelog.cli import app
from surfacelog.cli.errors import DatabaseInUse
from surfacelog.cli.runlock import RunLock

from support import paths
from support.disks import small_disk

REPO = paths.REPO
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
CLI = [sys.executable, "-m", "surfacelog.cli"]
runner = CliRunner()


def one_line_error(output: str, *needles: str) -> None:
    assert "Traceback" not in output, output
    lines = [line for line in output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, output
    for needle in needles:
        assert needle in lines[0], output


# -- refused before anything starts (no Ray) ------------------------------------------


def test_db_that_is_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--db", str(tmp_path)])
    assert result.exit_code == 2, result.output
    one_line_error(result.output, "usage error: surfacelog run:", "is a directory")


@pytest.mark.parametrize("content", [b"hello\n", b"SQLite format 3\x00" + b"\x01" * 200])
def test_db_that_is_a_foreign_file_is_a_usage_error(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "foreign.db"
    db.write_bytes(content)
    result = runner.invoke(app, ["run", "--db", str(db)])
    assert result.exit_code == 2, result.output
    one_line_error(result.output, "usage error: surfacelog run:", str(db))
    assert db.read_bytes() == content


def test_a_db_not_of_surfacelog_is_a_usage_error(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    before = db.read_bytes()
    result = runner.invoke(app, ["run", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "usage error" in result.output
    assert db.read_bytes() == before


@pytest.mark.parametrize("option", ["--sessions", "--turns", "--compact-at",
                                    "--prune-over"])
def test_negative_counts_are_usage_errors(option: str) -> None:
    result = runner.invoke(app, ["run", option, "-1"])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output


@pytest.mark.parametrize("option", ["--packs", "--drivers"])
def test_zero_actors_are_usage_errors(option: str) -> None:
    result = runner.invoke(app, ["run", option, "0"])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output


def test_report_never_over_the_database(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    for target in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        for extra in ([], ["--force"]):
            result = runner.invoke(app, ["run", "--db", str(db), "--report", str(target),
                                         *extra])
            assert result.exit_code == 2, result.output
            one_line_error(result.output, "refusing to write")
    notes = tmp_path / "notes.html"
    notes.write_text("keep me")
    result = runner.invoke(app, ["run", "--db", str(db), "--report", str(notes)])
    assert result.exit_code == 2 and "--force" in result.output
    assert notes.read_text() == "keep me"
    assert not db.exists()  # refused before anything was created


def test_a_second_run_on_a_held_database_is_refused(tmp_path: Path) -> None:
    """The lock a run holds (``RunLock``, the one ``run`` takes) refuses a second run
    on the same file before Ray starts; the run lock itself is tested below with a
    real concurrent run."""
    db = tmp_path / "held.db"
    with RunLock.acquire(db):
        with pytest.raises(DatabaseInUse):
            RunLock.acquire(db)
        result = runner.invoke(app, ["run", "--db", str(db)])
        assert result.exit_code == 4, result.output
        one_line_error(result.output, "run refused:", "in use by another surfacelog run")
    RunLock.acquire(db).release()


# -- real runs, each with its own Ray --------------------------------------------------


def test_an_unreachable_address_is_one_line_not_a_hang(tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "run", "--address", "127.0.0.1:1", "--db",
                           str(tmp_path / "a.db")], env=ENV, capture_output=True,
                          text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 4, output
    assert "Traceback" not in output
    failed = [line for line in output.splitlines() if "run failed" in line]
    assert len(failed) == 1 and "cannot reach Ray at 127.0.0.1:1 within 5 s" in failed[0]


def _children(pid: int) -> dict[psutil.Process, str]:
    out = {}
    for child in psutil.Process(pid).children(recursive=True):
        try:
            out[child] = " ".join(child.cmdline())
        except psutil.Error:
            continue  # ended meanwhile
    return out


def _await_process(pid: int, marker: str) -> psutil.Process:
    """The first descendant of ``pid`` whose command line holds ``marker``, once
    there is one (Ray titles an actor's process ``ray::ClassName``)."""
    while True:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            pytest.fail(f"the run ended before {marker} started")
        for proc, line in _children(pid).items():
            if marker in line:
                return proc
        psutil.wait_procs([psutil.Process(pid)], timeout=0.2)


def _await_appends(pid: int, wal: Path, size: int = 64_000) -> None:
    """Return once the run ``pid`` has written ``size`` bytes to its database's WAL file
    ``wal``: more than creating its sessions writes, so its agents are appending."""
    while not (wal.exists() and wal.stat().st_size > size):
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            pytest.fail("the run ended before its agents appended")
        psutil.wait_procs([psutil.Process(pid)], timeout=0.1)


NODE_LOSS_ENV = {
    # Ray's GCS declares a node dead after this many failed health checks in a row,
    # this far apart (by default 5, 3 s apart: 15 s). A killed raylet fails each at
    # once; a live one, however loaded, has Ray's 10 s timeout per check to answer.
    "RAY_health_check_period_ms": "250",
    "RAY_health_check_failure_threshold": "4",
    # The run's client then retries requests to actors that are all gone, for
    # ``Client.retry_for_s`` each time (30 s by default): flushing, reading the live
    # state, passivating. A short window ends them as they would end anyway.
    "SURFACELOG_RETRY_FOR_S": "1",
}
"""The environment of a run that loses its node: the same outcome, without waiting out
Ray's detection and whole retry windows after everything is gone."""


@pytest.fixture
def long_run(tmp_path: Path, request: pytest.FixtureRequest
             ) -> Iterator[subprocess.Popen[bytes]]:
    """A run that would go on for hours; its stderr (the live view) goes to the file
    ``stderr.txt`` (a pipe nobody reads would fill and stop it). Its environment is
    ``ENV`` with the variables of an indirect parameter, if any."""
    db = tmp_path / "long.db"
    env = {**ENV, **getattr(request, "param", {})}
    with (tmp_path / "stderr.txt").open("wb") as err:
        proc = subprocess.Popen([*CLI, "run", "--db", str(db), "--sessions", "4",
                                 "--turns", "100000", "--json"], env=env,
                                stdout=subprocess.PIPE, stderr=err)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=120)


@pytest.mark.parametrize(("victim", "long_run"), [
    # The compactor's and the pruner's loss end the run the same way as the driver's
    # (one path in the run's supervision): they run under -m slow.
    ("ray::DriverActor", {}),
    pytest.param("ray::CompactionActor", {}, marks=pytest.mark.slow),
    pytest.param("ray::PrunerActor", {}, marks=pytest.mark.slow),
    ("raylet/raylet", NODE_LOSS_ENV)],
    ids=["ray::DriverActor", "ray::CompactionActor", "ray::PrunerActor", "raylet/raylet"],
    indirect=["long_run"])
def test_losing_a_run_actor_or_the_raylet_ends_with_a_report_and_exit_4(
        tmp_path: Path, long_run: subprocess.Popen[bytes], victim: str) -> None:
    """A second run on the same --db is refused while this one holds it; killing one
    of the run's own actors (or the raylet) ends the run with its report, marked
    incomplete, and exit 4; stdout carries the JSON document alone (Ray's lines about
    the dead worker go to stderr)."""
    _await_process(long_run.pid, "ray::DriverActor")
    if victim == "ray::DriverActor":
        second = subprocess.run([*CLI, "run", "--db", str(tmp_path / "long.db")],
                                env=ENV, capture_output=True, text=True, timeout=120)
        assert second.returncode == 4, second.stderr
        one_line_error(second.stdout + second.stderr, "in use by another surfacelog run")
    # Lost while the agents append (the run's clock starts once its drivers are up).
    _await_appends(long_run.pid, tmp_path / "long.db-wal")
    proc = _await_process(long_run.pid, victim)
    proc.send_signal(signal.SIGKILL)
    out, _ = long_run.communicate(timeout=600)
    err = (tmp_path / "stderr.txt").read_bytes()
    assert long_run.returncode == 4, err.decode()[-3000:]
    assert b"Traceback" not in err
    report = json.loads(out)  # the whole of stdout is the document
    assert report["incomplete"], report
    assert not report["verification"]["passed"]
    assert "run incomplete:" in err.decode()


def test_gcs_loss_is_one_line_and_exit_4(tmp_path: Path,
                                         long_run: subprocess.Popen[bytes]) -> None:
    _await_process(long_run.pid, "ray::DriverActor")
    _await_process(long_run.pid, "gcs_server").send_signal(signal.SIGKILL)
    out, _ = long_run.communicate(timeout=600)
    err = (tmp_path / "stderr.txt").read_bytes()
    assert long_run.returncode == 4, err.decode()[-3000:]
    assert out == b""
    assert b"Traceback" not in err
    assert "run failed: Ray's GCS" in err.decode()


@pytest.mark.slow  # about 4 minutes: the failing commits are retried for 30 s windows
def test_a_full_disk_during_the_run_ends_with_its_report(tmp_path: Path) -> None:
    """The database on a 1 MB tmpfs fills during the run. (``RLIMIT_FSIZE`` cannot
    stand for a full disk here: it limits the Ray the run starts as well, whose object
    store then cannot even start.) The run ends with its report, the failed commits
    counted, and exit 3 (appends failed) or 4 (it could not complete its
    verification); what it stored still verifies."""
    with small_disk(tmp_path / "disk", "1m") as disk:
        db = disk / "full.db"
        with (tmp_path / "stderr.txt").open("wb") as err_file:
            done = subprocess.run([*CLI, "run", "--db", str(db), "--sessions", "1",
                                   "--turns", "100", "--json"], env=ENV,
                                  stdout=subprocess.PIPE, stderr=err_file, timeout=900)
        err = (tmp_path / "stderr.txt").read_text()
        assert "Traceback" not in err, err[-3000:]
        assert done.returncode in (3, 4), err[-3000:]
        report = json.loads(done.stdout)
        assert report["errors"] or report["incomplete"]
        assert "disk is full" in json.dumps(report)
        verified = subprocess.run([*CLI, "verify", str(db)], env=ENV,
                                  capture_output=True, text=True, timeout=120)
        assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_actors_error_is_named_by_its_own_type_and_message() -> None:
    """What a run prints on one line for an error an actor raised: the actor's own
    error, not Ray's wrapping of it (the remote traceback, terminal colours)."""
    from ray.exceptions import RayActorError, RayTaskError

    from surfacelog.cli.loadrun import describe_error
    from surfacelog.store.errors import CommitFailed

    wrapped = RayTaskError("close", "Traceback (most recent call last):\n  File \"x\"",
                           CommitFailed("group commit failed: database or disk is full"))
    assert 'File "x"' in str(wrapped) and "\x1b[" in str(wrapped)
    assert describe_error(wrapped) == ("CommitFailed: group commit failed: database or "
                                       "disk is full")
    # A journal's error relayed by a session actor: wrapped twice, named once.
    relayed = RayTaskError("shutdown", "Traceback (most recent call last):", wrapped)
    assert describe_error(relayed) == describe_error(wrapped)
    looped = RayTaskError("close", "Traceback (most recent call last):", ValueError("x"))
    looped.cause = looped  # never unwrapped forever
    assert describe_error(looped).startswith("RayTaskError")
    assert describe_error(RayActorError()).startswith("RayActorError: ")
    assert describe_error(ValueError("a\nb" + "c" * 500), 40) == "ValueError: a b" + "c" * 25


def test_the_runs_one_line_messages_are_safe_on_a_terminal() -> None:
    from surfacelog.cli.run_display import _one_line

    assert _one_line(ValueError("session 'a\x1b[2Jb'")) == \
        "ValueError: session 'a\\x1b[2Jb'"
