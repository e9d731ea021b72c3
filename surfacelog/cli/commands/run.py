"""``surfacelog run``: the load run, its options made from ``RunConfig``'s fields.

Registering it imports ``runmodel`` only (typer and ``actors.choices``: no msgspec, no
store, no Ray); the run itself imports the actors, Ray and the live view."""

from __future__ import annotations

import dataclasses
from inspect import Parameter, Signature
from pathlib import Path
from typing import Any, get_type_hints

import typer

from surfacelog.cli.common import refuse_unsafe_output, usage
from surfacelog.cli.runmodel import RunConfig


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app``, its options ``RunConfig``'s fields."""
    # typer reads a command's options from its signature: run's are RunConfig's fields,
    # so each option, its default and its help are spelled once, in RunConfig. Set
    # through vars() because a function's attributes are not declared to type checkers.
    vars(run)["__signature__"] = _fields_as_options(RunConfig)
    app.command()(run)


def run(**options: Any) -> None:
    """The load workload: host sessions as Ray actors, drive them with scripted agents
    while compaction and pruning actors work, report, then verify the database replays
    to exactly what the live actors reported.

    Exit statuses: 0 verification passed and nothing failed; 1 verification failed
    (the database does not replay to what the live actors reported, or an acknowledged
    durable event is missing); 2 usage error, nothing started (a bad option, a --db
    that is a directory or not a surfacelog database, a --shard-map that cannot be read
    or is malformed, a refused --report path); 3 the
    run verified but appends failed (e.g. the disk filled); 4 the run could not start
    or complete: Ray cannot be reached (--address is tried for 5 s) or did not start,
    another run holds --db, Ray (raylet, GCS) or one of the run's own actors (driver,
    compactor, pruner) was lost mid-run (the report is still printed, marked
    incomplete; after the loss of the GCS, one line), or the --report file could not
    be written; 5 with --strict, chaos was asked for and not performed (the table
    warns of it either way); 130 interrupted by Ctrl-C
    (what was acknowledged is kept; a rerun with the same --db resumes: the same
    session ids continue their logs, nothing is replayed or duplicated).

    One run per database: a second run on the same --db (or, with --local-nodes, the
    same shard map) is refused with exit 4 while the first holds it.

    With ``--local-nodes N`` the run starts its own Ray cluster on this machine: a head
    node (the GCS and the run's own actors; never killed) and N worker nodes hosting the
    shards, whose files sit next to ``--db`` (``X.db`` -> ``X.s0.db``...) with the shard
    map ``X.shards.json`` for ``verify``/``digest``/``inspect --shard-map``;
    ``--kill-node-every S`` removes a random worker node every S seconds and adds it
    back.

    With ``--address ADDR --shard-map FILE`` the run drives an existing cluster whose
    nodes hold the shards of FILE: each shard's writer is placed by the shard's
    resource on the node that offers it and opens the shard's path there; the run is
    verified by those writers, each replaying its shard on its node, so no shard file
    is opened (or needed) on this machine."""
    from surfacelog.actors.compactor import load_summariser
    from surfacelog.actors.errors import SummariserError

    try:
        config = RunConfig(**options)
    except typer.BadParameter as exc:
        raise usage("run", exc.format_message().replace("\n", " ")) from exc
    try:
        load_summariser(config.summariser)  # found before anything starts
    except SummariserError as exc:
        raise usage("run", str(exc)) from exc
    raise typer.Exit(_run_locked(config))


def _run_locked(config: RunConfig) -> int:
    """Check ``run``'s files before anything starts, then run holding the database's
    lock; returns the exit status (see ``run``)."""
    from surfacelog.cli.common import echo
    from surfacelog.cli.errors import DatabaseInUse
    from surfacelog.cli.localcluster import shard_files
    from surfacelog.cli.run_display import EXIT_FAILED, run_live
    from surfacelog.cli.runlock import RunLock

    if config.shard_map is not None:
        return _run_on_shard_map(config)
    db = config.db_path
    if config.local_nodes:
        files, lock_path = shard_files(db.absolute(), config.shard_count)
        databases = [str(f) for f in files]
        protected = [*databases, str(lock_path)]
    else:
        lock_path, databases = db, [str(db)]
        protected = databases
    if config.report is not None:
        refuse_unsafe_output(config.report, protected, config.force)
    if db.is_dir():
        raise usage("run", f"--db {db} is a directory, not a database file")
    try:
        lock = RunLock.acquire(lock_path)
    except DatabaseInUse as exc:
        echo(f"run refused: {exc}", err=True)
        return EXIT_FAILED
    except OSError as exc:
        raise usage("run", f"cannot open {lock_path}: {exc.strerror or exc}") from exc
    with lock:
        for database in databases:
            _check_store(database)
        return run_live(config)


def _run_on_shard_map(config: RunConfig) -> int:
    """``run --address ADDR --shard-map FILE``: the shard map is read here (exit 2,
    one line, when it cannot be read or is malformed); the shard files are not: they
    are on the cluster's nodes, opened by each shard's writer there. So nothing is
    checked or locked on this machine's disk (the writers refuse a foreign file when
    they open it, which fails the run with exit 4). Returns the exit status."""
    from surfacelog.cli.run_display import run_live
    from surfacelog.store.errors import ShardConfigError
    from surfacelog.store.shardmap import load_shard_map

    assert config.shard_map is not None
    try:
        shards = load_shard_map(config.shard_map)
    except ShardConfigError as exc:
        raise usage("run", f"--shard-map: {exc}") from exc
    except OSError as exc:
        raise usage("run", f"cannot read --shard-map {config.shard_map}: "
                           f"{exc.strerror or exc}") from exc
    if config.report is not None:
        # The shard paths are the nodes', but one may be this machine's too.
        refuse_unsafe_output(config.report, [s.path for s in shards.shards], config.force)
    return run_live(config, shards)


def _check_store(db: str) -> None:
    """Exit 2 (one line) unless ``db`` is a new or surfacelog database: a foreign file,
    another build's, a truncated one is refused before Ray starts (read-only check)."""
    from surfacelog.store.errors import VersionRefused
    from surfacelog.store.sqlite.file_format import inspect_file

    try:
        inspect_file(Path(db))
    except VersionRefused as exc:
        raise usage("run", f"--db {exc}") from exc
    except OSError as exc:
        raise usage("run", f"cannot read --db {db}: {exc.strerror or exc}") from exc


def _fields_as_options(config: type[Any]) -> Signature:
    """Keyword-only parameters named, annotated and defaulted as the dataclass
    ``config``'s fields, their ``Annotated`` typer metadata included."""
    hints = get_type_hints(config, include_extras=True)
    return Signature([Parameter(f.name, Parameter.KEYWORD_ONLY, default=f.default,
                                annotation=hints[f.name])
                      for f in dataclasses.fields(config)])
