"""The terminal side of ``surfacelog run``: Ray start-up, the rich live display, the
report table or JSON, and the exit status."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import ray
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from surfacelog.actors.journal import NAMESPACE
from surfacelog.cli.loadrun import run_workload
from surfacelog.cli.report_html import write_html
from surfacelog.cli.runmodel import RunConfig, Sample
from surfacelog.schema.codec import encode_json

EXIT_OK, EXIT_VERIFY_FAILED, EXIT_ERRORS = 0, 1, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _report_table(report: dict[str, Any]) -> Table:
    lat = report["append_latency_ms"]
    comp, prunes = report["compactions"], report["prunes"]
    table = Table("metric", "value", title="surfacelog run")
    rows = [
        ("sessions", f"{report['sessions']} ({report['placement']}, {report['durability']})"),
        ("turns done / interrupted", f"{report['turns_done']} / {report['turns_interrupted']}"),
        ("events appended", str(report["events"])),
        ("events/s", str(report["events_per_s"])),
        ("append latency p50 / p95 / p99 (ms)", f"{lat['p50']} / {lat['p95']} / {lat['p99']}"),
        ("compactions committed / failed", f"{comp['committed']} / {comp['failed']}"),
        ("prunes committed", str(prunes["committed"])),
        ("conflicts retried", str(report["conflicts_retried"])),
        ("actor kills (chaos) / requests resent after", f"{report['actor_kills']} / "
                                                        f"{report['resent']}"),
        ("acknowledged events lost (buffered only)", str(report["lost_acknowledged"])),
        ("errors", str(report["errors"])),
        ("store size (bytes)", str(report["store_bytes"])),
        ("wall time (s)", str(report["wall_s"])),
        ("verification", "passed" if report["verification"]["passed"] else "FAILED"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    return table


def run_command(*, sessions: int, turns: int, placement: str, packs: int, drivers: int,
                compact_at: int, prune_over: int, durability: str, mode: str, db: str,
                address: str | None, report: str | None, seed: int, as_json: bool,
                kill_every_s: float = 0.0, kill_journal: bool = False) -> int:
    """Run the workload; print the report; return the exit status (0 only when
    verification passed and nothing failed)."""
    cfg = RunConfig(db=db, address=address, sessions=sessions, turns=turns,
                    placement=placement,  # type: ignore[arg-type]
                    packs=packs, drivers=drivers,
                    durability=durability,  # type: ignore[arg-type]
                    compact_at=compact_at, prune_over=prune_over, mode=mode, seed=seed,
                    kill_every_s=kill_every_s, kill_journal=kill_journal)
    console = Console(stderr=as_json)
    started_ray = not ray.is_initialized()
    if started_ray:
        console.print("starting Ray…" if address is None else f"joining Ray at {address}…")
        ray.init(address=address, namespace=NAMESPACE, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    progress = Progress(TextColumn("turns"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console)
    task = progress.add_task("turns", total=sessions * turns)
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
        if extra.get("last_error") and sample.errors:
            line[0] += f"\nlast error: {extra['last_error']}"
        live.update(view())

    try:
        with Live(view(), console=console, refresh_per_second=8, transient=as_json) as live:
            result = asyncio.run(run_workload(cfg, on_sample))
            final = result.progress
            progress.update(task, completed=final.turns_done + final.turns_interrupted)
            live.update(view())
    except KeyboardInterrupt:
        # asyncio.run cancelled the workload, whose cleanup flushed and stopped the
        # actors: what was acknowledged is stored, and the next run resumes from it.
        console.print(f"\ninterrupted: every acknowledged event is in {db}; run again "
                      "with the same --db to resume (not verified)")
        return EXIT_INTERRUPTED
    finally:
        if started_ray:
            ray.shutdown()
    data = result.report()
    if report is not None:
        write_html(report, result)
    if as_json:
        sys.stdout.write(encode_json(data).decode() + "\n")
    else:
        console.print(_report_table(data))
        for problem in data["verification"]["mismatches"]:
            console.print(f"[red]{problem}[/]")
        if report is not None:
            console.print(f"HTML report: {report}")
    if not result.verified:
        return EXIT_VERIFY_FAILED
    return EXIT_ERRORS if data["errors"] else EXIT_OK
