"""The terminal side of ``surfacelog run``: Ray start-up, the rich live display, the
report table or JSON, and the exit status."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import sys
import threading
from typing import Any

import ray
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from surfacelog.actors.client import init_ray
from surfacelog.actors.raycompat import gcs_server_pid, kill_local_ray_processes
from surfacelog.cli.common import clean
from surfacelog.cli.errors import OutputError, RayUnreachable
from surfacelog.cli.loadrun import describe_error, run_workload
from surfacelog.cli.localcluster import LocalCluster, make_shard_map, write_shard_map
from surfacelog.cli.report_html import summary_rows, write_html
from surfacelog.cli.runmodel import RunConfig, Sample
from surfacelog.schema.codec import encode_json
from surfacelog.store.shardmap import ShardMap

EXIT_OK, EXIT_VERIFY_FAILED, EXIT_ERRORS, EXIT_FAILED = 0, 1, 3, 4
EXIT_CHAOS_NOT_PERFORMED = 5  # only with --strict
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
CONNECT_TIMEOUT_S = 5.0
"""How long ``--address HOST:PORT`` is tried before the run gives up (exit 4): Ray's
own connect retries for minutes."""


def probe_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Open (and close) a TCP connection to ``address`` (``HOST:PORT``; anything else,
    such as ``auto`` or ``ray://``, is left to Ray). Raises ``RayUnreachable``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)),
                                      timeout=timeout_s):
            return
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or exc)
        raise RayUnreachable(f"cannot reach Ray at {address} within {timeout_s:g} s: "
                             f"{reason}") from exc


class GcsWatch:
    """Watches the GCS of the Ray this run started: when it dies, Ray's core worker
    would end this process 60 s later with a log line and status 1, no report. The
    watch instead prints one line, stops the run's Ray processes and exits with
    ``EXIT_FAILED`` at once. ``stop`` it before shutting Ray down."""

    POLL_S = 0.5

    def __init__(self, pid: int, db: str) -> None:
        self.pid = pid
        self.db = db
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gcs-watch", daemon=True)

    @classmethod
    def start(cls, db: str) -> GcsWatch | None:
        """Watch the GCS of the Ray started in this process (``None`` when there is
        none here: a joined cluster's GCS is another machine's)."""
        pid = gcs_server_pid()
        if pid is None:
            return None
        watch = cls(pid, db)
        watch._thread.start()
        return watch

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _alive(self) -> bool:
        import psutil

        try:
            return bool(psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    def _watch(self) -> None:
        while not self._stopped.wait(self.POLL_S):
            if self._alive():
                continue
            sys.stderr.write(f"run failed: Ray's GCS (process {self.pid}) died: the run "
                             f"cannot complete (every acknowledged durable event is in "
                             f"{self.db}; not verified)\n")
            sys.stderr.flush()
            try:
                kill_local_ray_processes()
            except Exception as exc:  # reported; the exit below happens regardless
                sys.stderr.write(f"run: stopping Ray's processes: {_one_line(exc)}\n")
            os._exit(EXIT_FAILED)


def _stdout_is_fd_1() -> bool:
    """Whether ``sys.stdout`` writes to file descriptor 1 (not when a test captures
    it in memory)."""
    try:
        return sys.stdout.fileno() == 1
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False  # an in-memory stream: nothing Ray writes to fd 1 reaches it


def _report_table(report: dict[str, Any]) -> Table:
    table = Table("metric", "value", title="surfacelog run")
    rows = summary_rows(report)
    for name, shard in report["shards"].items():
        if len(report["shards"]) == 1 and not report["local_nodes"]:
            break  # one shard: the figures above are its own
        lat, rec = shard["append_latency_ms"], shard["recovery_s"]
        recovery = (f", recovery p50 {rec['p50']} / max {rec['max']} s" if rec["count"]
                    else "")
        # A joined cluster's nodes are not numbered by the run: the shard alone.
        where = "" if shard["node"] is None else f" (node {shard['node']})"
        rows.append((f"shard {name}{where}",
                     f"{shard['events_per_s']} events/s, p50 {lat['p50']} / p99 {lat['p99']} "
                     f"ms, {shard['unavailable']} refused, {shard['node_kills']} kills"
                     + recovery))
    for k, v in rows:
        table.add_row(k, v)
    return table


def run_live(cfg: RunConfig, shards: ShardMap | None = None) -> int:
    """Run the workload of ``cfg`` on Ray (started here unless already initialised; with
    ``cfg.local_nodes``, on a local cluster started here and always stopped; with
    ``shards``, the shard map read from ``cfg.shard_map``, on the shards of the cluster
    at ``cfg.address``), showing
    its progress; print the report (``cfg.as_json``: as JSON on stdout, the live view
    going to stderr) and write the HTML report when ``cfg.report`` is set. Returns the
    exit status: 0 only when verification passed and nothing failed, 1 when
    verification failed, 3 when appends failed, 4 when the run could not start or
    complete (the reason on one line), 130 when interrupted. Raises nothing else."""
    console = Console(stderr=cfg.as_json)
    started_ray = not ray.is_initialized()
    report_fd = None
    if cfg.as_json and (cfg.local_nodes or _stdout_is_fd_1()):
        # Ray's processes inherit file descriptor 1 and write to it (a killed raylet's
        # last log lines, "A worker died..."), one node or several: the JSON report
        # alone goes to the real stdout, everything else to stderr.
        sys.stdout.flush()
        report_fd = os.dup(1)
        os.dup2(2, 1)
    try:
        return _run(cfg, console, started_ray, report_fd, shards)
    finally:
        if report_fd is not None:
            os.dup2(report_fd, 1)
            os.close(report_fd)


def _run(cfg: RunConfig, console: Console, started_ray: bool, report_fd: int | None,
         shards: ShardMap | None) -> int:
    """``run_live``'s body; the JSON report goes to ``report_fd`` when given."""
    cluster: LocalCluster | None = None
    watch: GcsWatch | None = None
    try:
        if cfg.local_nodes:
            if not started_ray:
                raise RuntimeError("Ray is already initialised in this process: a local "
                                   "cluster cannot be started")
            local_shards, map_path = make_shard_map(cfg.db_path, cfg.shard_count,
                                                    cfg.replica)
            write_shard_map(local_shards, map_path)
            console.print(f"starting a local cluster: a head node and {cfg.local_nodes} "
                          f"worker nodes, {cfg.shard_count} shards (shard map {map_path})…",
                          markup=False)
            cluster = LocalCluster.start(local_shards, cfg.local_nodes)
            init_ray(cluster.address, log_to_driver=False, configure_logging=False)
        elif started_ray:
            console.print("starting Ray…" if cfg.address is None
                          else f"joining Ray at {cfg.address}…")
            if cfg.address is not None:
                probe_address(cfg.address)
            init_ray(cfg.address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            watch = GcsWatch.start(cfg.stored_in)
    except Exception as exc:
        console.print(f"run failed: cannot start Ray: {_one_line(exc)}", markup=False,
                      soft_wrap=True)
        if watch is not None:
            watch.stop()
        _stop(cluster, started_ray, console)
        return EXIT_FAILED
    progress = Progress(TextColumn("turns"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console)
    task = progress.add_task("turns", total=cfg.sessions * cfg.turns)
    line = ["waiting for the first turn…"]

    def view() -> Group:
        return Group(progress, line[0])

    def on_sample(sample: Sample, extra: dict[str, Any]) -> None:
        progress.update(task, completed=sample.turns)
        rate = sample.events / sample.t if sample.t > 0 else 0.0
        p50 = "-" if sample.p50_ms is None else f"{sample.p50_ms:.2f} ms"
        line[0] = (f"events {sample.events}  ({rate:,.0f}/s)   append p50 {p50}   "
                   f"compactions {sample.compactions}   prunes {sample.prunes}   "
                   f"conflicts {sample.conflicts}   errors {sample.errors}")
        if cluster is not None:
            shards = "   ".join(
                f"{name} {fig['events']} ev ({fig['events'] / sample.t:,.0f}/s, "
                f"{fig['unavailable']} refused)" if sample.t > 0 else name
                for name, fig in sorted(extra.get("shards", {}).items()))
            down = extra.get("node_down")
            line[0] += (f"\nshards: {shards}\nnode kills {extra.get('node_kills', 0)}"
                        + ("" if down is None else f"   node {down} is down"))
        if extra.get("last_error") and sample.errors:
            line[0] += f"\nlast error: {extra['last_error']}"
        live.update(view())

    try:
        with Live(view(), console=console, refresh_per_second=8, transient=cfg.as_json) as live:
            result = asyncio.run(run_workload(cfg, on_sample, cluster, shards))
            final = result.progress
            progress.update(task, completed=final.turns_done + final.turns_interrupted)
            live.update(view())
    except KeyboardInterrupt:
        # asyncio.run cancelled the workload, whose cleanup flushed and stopped the
        # actors: what was acknowledged is stored, and the next run resumes from it.
        where = cfg.stored_in if cluster is None else \
            f"the shards of {make_shard_map(cfg.db_path, cfg.shard_count)[1]}"
        again = "--shard-map" if cfg.shard_map is not None else "--db"
        console.print(f"\ninterrupted: every acknowledged event is in {where}; run again "
                      f"with the same {again} to resume (not verified)", markup=False)
        return EXIT_INTERRUPTED
    except Exception as exc:  # reported on one line, with the exit status that says so
        console.print(f"run failed: {_one_line(exc)}", markup=False, soft_wrap=True)
        return EXIT_FAILED
    finally:
        if watch is not None:
            watch.stop()
        _stop(cluster, started_ray, console)
    data = result.report()
    report_failed = None
    if cfg.report is not None:
        try:
            write_html(cfg.report, result)
        except OutputError as exc:
            report_failed = str(exc)
    if cfg.as_json and report_fd is not None:
        os.write(report_fd, encode_json(data) + b"\n")
    elif cfg.as_json:
        sys.stdout.write(encode_json(data).decode() + "\n")
    else:
        console.print(_report_table(data))
        for problem in data["verification"]["mismatches"]:
            console.print(problem, style="red", markup=False, soft_wrap=True)
        if cfg.report is not None and report_failed is None:
            console.print(f"HTML report: {cfg.report}")
    if report_failed is not None:
        console.print(f"run failed: {report_failed}", markup=False, soft_wrap=True)
    for problem in result.incomplete:
        console.print(f"run incomplete: {problem}", markup=False, soft_wrap=True)
    if result.incomplete or report_failed is not None:
        return EXIT_FAILED
    if not result.verified:
        return EXIT_VERIFY_FAILED
    if data["errors"]:
        return EXIT_ERRORS
    if cfg.strict and data["chaos_not_performed"]:
        return EXIT_CHAOS_NOT_PERFORMED
    return EXIT_OK


def _one_line(exc: BaseException) -> str:
    """``exc`` as one line safe to print on a terminal (its control characters shown as
    escapes: an error's message may quote a session id or a payload)."""
    return clean(describe_error(exc, 500))


def _stop(cluster: LocalCluster | None, started_ray: bool, console: Console) -> None:
    """Disconnect from Ray when this run connected, then stop ``cluster``'s nodes;
    prints the problems the stop met."""
    if started_ray and ray.is_initialized():
        ray.shutdown()
    if cluster is not None:
        for problem in cluster.shutdown():
            console.print(f"local cluster: {problem}", markup=False, soft_wrap=True)
