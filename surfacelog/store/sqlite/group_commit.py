"""Write-behind with group commit: one queue of batches for every session of a database,
committed by one background task in groups, one transaction (one fsync) per group.

Grouping rules:

- A group is a run of whole batches from the front of the queue holding at most
  ``max_events`` events (a single larger batch forms a group on its own).
- A batch appended while the queue is idle and nobody waits for durability lingers up
  to ``delay`` seconds so that more batches can join its group. A durable append, a
  ``flush``, or a queue reaching ``max_events`` commits at once: a writer that waits for
  each commit never pays the delay.
- Batches that arrive while a commit runs form the next group, committed as soon as the
  running one is done. This is where concurrent durable writers share commits.

Creating a session is queued the same way (a ``PendingBatch`` carrying the session row),
so that many sessions created at once share commits instead of paying an fsync each. So
is taking a session for writing that may not exist yet (``open_or_create``): in the
group's transaction, a stored session's writer epoch is bumped and its rows read, a
missing one is created. Sessions activated at once then share one transaction, and the
read needs no drain of the queue first: every batch queued before it is written earlier
in the same transaction or in an earlier one.

Within a group each batch runs in its own SAVEPOINT and checks, in the same transaction,
that its session exists, its writer epoch is current and it starts at the stored next
seq (a create: that the session does not exist yet). A batch that fails a check (or
whose rows SQLite refuses) is rolled back to its savepoint and fails alone; the others
of the group commit. When the COMMIT itself fails (disk I/O error, database locked...)
the whole group is rolled back, every batch stays queued in order, each waiter gets a
``CommitFailed``, and the next append or ``flush`` tries again (a create too: its
session may then exist after its creator was told the commit failed). A writer made
with ``keep_failed=False`` (the CLI's ``import``) drops the batches of a failed group
instead, so that what its caller reports is what is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Sequence
from functools import cache, partial
from itertools import chain
from typing import Final, NamedTuple, Protocol

from msgspec import Struct

from surfacelog.schema.errors import InvalidArgument
from surfacelog.store.errors import (
    BadEvent,
    CommitFailed,
    SeqMismatch,
    SessionDeleted,
    SessionExists,
    SessionNotFound,
    StoreError,
    WriterFenced,
)
from surfacelog.store.rows import NO_ROWS, EncodedBatch, Row
from surfacelog.store.sqlite.connection import ConnectionThread, in_transaction
from surfacelog.store.sqlite.scoped import StateWrite, write_state
from surfacelog.store.sqlite.statements import SELECT_EVENTS
from surfacelog.store.stored import StoredSession

_ADVANCE = (
    "UPDATE sessions SET next_seq = ?, last_time = ?"
    " WHERE id = ? AND writer_epoch = ? AND next_seq = ?"
)
CREATE_SESSION = (
    "INSERT INTO sessions (id, header, created_at, writer_epoch, next_seq, last_time)"
    " VALUES (?, ?, ?, 1, ?, ?)"
)
_ROW_ERRORS = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError,
               OverflowError)


log = logging.getLogger("surfacelog.store")
"""The store layer's logger: failed commits (warning). Never rows or payloads."""

INSERT_EVENTS: Final = (
    "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op,"
    " ignorable) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
ROWS_PER_STATEMENT: Final = 64
"""Rows per multi-row INSERT: 512 parameters, well under SQLite's limit of 32766."""


@cache
def _insert_sql(rows: int) -> str:
    """``INSERT_EVENTS`` with ``rows`` value tuples."""
    return INSERT_EVENTS + ", (?, ?, ?, ?, ?, ?, ?, ?)" * (rows - 1)


def insert_rows(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    """Insert ``rows`` (inside the caller's transaction) with multi-row INSERT
    statements of ``ROWS_PER_STATEMENT`` rows: one statement step per 64 rows instead of
    one per row, which costs less than ``executemany``'s per-row loop by about as much
    as encoding the rows costs. Raises ``sqlite3.Error`` (rows inserted before the error
    stay in the transaction: the caller rolls back)."""
    per = ROWS_PER_STATEMENT
    full = len(rows) - len(rows) % per
    if full:
        sql = _insert_sql(per)
        params = list(chain.from_iterable(rows[:full]))
        width = per * len(rows[0])
        for start in range(0, len(params), width):
            conn.execute(sql, params[start:start + width])
    if full < len(rows):
        conn.execute(_insert_sql(len(rows) - full), list(chain.from_iterable(rows[full:])))


class CommitObserver(Protocol):
    """Told about every group commit (metrics, say), on the writer's event loop; must
    be cheap and must not raise."""

    def committed(self, batches: int, events: int, seconds: float, queued: int) -> None:
        """A group of ``batches`` holding ``events`` committed in ``seconds``;
        ``queued`` batches remain queued."""

    def commit_failed(self, batches: int, error: BaseException) -> None:
        """The commit of a group of ``batches`` failed with ``error``."""


class NewSession(NamedTuple):
    """The ``sessions`` row of a session being created: its header as JSON text.
    ``or_open``: when the session is stored already, take it for writing instead (bump
    its writer epoch and read it whole) rather than refuse with ``SessionExists``."""

    header_json: str
    created_at: int
    or_open: bool = False


class PendingBatch:
    """A queued batch: its rows, where it must go, and who waits for it. With
    ``create``, the batch creates its session (writer epoch 1) and holds its first
    events, if any. With ``resend``, the batch may already be stored (see
    ``GroupWriter.submit``). ``written``: its rows went into the last transaction that
    tried it (false for a resend found already stored). ``opened``: for a create
    ``or_open`` that found its session stored, what the transaction read."""

    __slots__ = ("batch", "create", "epoch", "id", "opened", "resend", "session_id",
                 "state", "waiter", "written")

    def __init__(self, id: int, session_id: str, epoch: int, batch: EncodedBatch,
                 waiter: asyncio.Future[None] | None,
                 create: NewSession | None = None, resend: bool = False,
                 state: StateWrite | None = None) -> None:
        self.id = id
        self.session_id = session_id
        self.epoch = epoch
        self.batch = batch
        self.waiter = waiter
        self.create = create
        self.resend = resend
        self.written = False
        self.opened: StoredSession | None = None
        self.state = state


class WriterStats(Struct, frozen=True):
    """Counters of one writer since it started."""

    commits: int
    batches: int
    events: int
    failed_commits: int
    queued_batches: int


# -- the transaction (runs on the connection thread) -----------------------------------


def _refusal(conn: sqlite3.Connection, item: PendingBatch) -> StoreError | None:
    """Why the batch cannot advance its session; ``None`` for a resend whose seqs the
    session already holds under the batch's own epoch: only that writer stores under
    its epoch and it sends each seq once, so they hold this very batch."""
    row = conn.execute("SELECT writer_epoch, next_seq FROM sessions WHERE id = ?",
                       (item.session_id,)).fetchone()
    sid = item.session_id
    if row is None:
        return SessionNotFound(f"session {sid!r} is not stored; nothing written")
    epoch, next_seq = row
    if epoch != item.epoch:
        return WriterFenced(f"session {sid!r}: writer epoch {item.epoch} is stale, the "
                            f"session was taken by epoch {epoch}; nothing written")
    if item.resend and next_seq >= item.batch.start + len(item.batch.rows):
        return None
    return SeqMismatch(f"session {sid!r}: batch starts at seq {item.batch.start}, the stored "
                       f"next seq is {next_seq}; nothing written")


def _row_error(item: PendingBatch, exc: Exception) -> StoreError:
    sid, start = item.session_id, item.batch.start
    if getattr(exc, "sqlite_errorname", None) == "SQLITE_CONSTRAINT_PRIMARYKEY":
        error: StoreError = SeqMismatch(
            f"session {sid!r}: rows of the batch starting at seq {start} are already "
            f"stored; nothing written")
    else:
        error = BadEvent(f"session {sid!r}: the batch starting at seq {start} cannot be "
                         f"stored: {exc}; nothing written")
    error.__cause__ = exc
    return error


def _write_batch(conn: sqlite3.Connection, item: PendingBatch) -> StoreError | None:
    batch = item.batch
    item.written = False
    conn.execute("SAVEPOINT batch")
    try:
        if item.create is not None:
            outcome = _create_session(conn, item, item.create)
            write = outcome is None and item.opened is None
        else:
            cursor = conn.execute(_ADVANCE, (batch.start + len(batch.rows),
                                             batch.last_time, item.session_id, item.epoch,
                                             batch.start))
            write = cursor.rowcount == 1
            outcome = None if write else _refusal(conn, item)
        if write and batch.rows:
            insert_rows(conn, batch.rows)
        if write and item.state is not None:
            outcome = write_state(conn, item.session_id, item.state)
            write = outcome is None
        item.written = write
    except _ROW_ERRORS as exc:
        conn.execute("ROLLBACK TO batch")
        outcome = _row_error(item, exc)
    else:
        if outcome is not None:
            conn.execute("ROLLBACK TO batch")
    conn.execute("RELEASE batch")
    return outcome


def _create_session(conn: sqlite3.Connection, item: PendingBatch,
                    new: NewSession) -> StoreError | None:
    item.opened = None
    exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?",
                          (item.session_id,)).fetchone()
    if exists is not None and new.or_open and conn.execute(
            "SELECT 1 FROM tombstones WHERE session_id = ?", (item.session_id,)
    ).fetchone() is not None:
        return SessionDeleted(f"session {item.session_id!r} is deleted")
    if exists is not None and new.or_open:
        # Taken for writing as ``read_stored(bump=True)`` does, in this transaction.
        sid = item.session_id
        conn.execute("UPDATE sessions SET writer_epoch = writer_epoch + 1 WHERE id = ?",
                     (sid,))
        header, epoch, next_seq = conn.execute(
            "SELECT header, writer_epoch, next_seq FROM sessions WHERE id = ?",
            (sid,)).fetchone()
        rows = conn.execute(SELECT_EVENTS, (sid, 0, -1)).fetchall()
        item.opened = StoredSession(header, epoch, next_seq, rows)
        return None
    if exists is not None:
        return SessionExists(f"session {item.session_id!r} is already stored")
    conn.execute(CREATE_SESSION, (item.session_id, new.header_json, new.created_at,
                           len(item.batch.rows), item.batch.last_time))
    return None


def commit_group(items: Sequence[PendingBatch], conn: sqlite3.Connection
                 ) -> list[StoreError | None]:
    """Write ``items`` in one ``BEGIN IMMEDIATE`` transaction; return each batch's
    outcome (``None`` = written). Raises the SQLite error that made the transaction
    fail, after rolling it back."""
    return in_transaction(conn, "BEGIN IMMEDIATE",
                          lambda: [_write_batch(conn, item) for item in items])


# -- the queue (runs on the event loop) ------------------------------------------------


def _fail(future: asyncio.Future[None] | None, error: BaseException) -> None:
    if future is not None and not future.done():
        future.set_exception(error)


class GroupWriter:
    """The queue and its background commit task. Use from one event loop."""

    def __init__(self, conn: ConnectionThread, *, max_events: int, delay: float,
                 keep_failed: bool = True) -> None:
        if max_events < 1:
            raise InvalidArgument(f"group_max_events must be >= 1, got {max_events}")
        if delay < 0:
            raise InvalidArgument(f"group delay must be >= 0, got {delay}")
        self._conn = conn
        self._keep_failed = keep_failed
        self._max_events = max_events
        self._delay = delay
        self._queue: deque[PendingBatch] = deque()
        self._queued_events = 0
        self._next_id = 0
        self._done_id = -1
        self._barriers: list[tuple[int, asyncio.Future[None]]] = []
        self._errors: deque[tuple[str, StoreError]] = deque()
        self._kick = asyncio.Event()
        self._urgent = asyncio.Event()
        self._closing = False
        self._broken: BaseException | None = None
        self._commits = self._batches = self._events = self._failed_commits = 0
        self.observer: CommitObserver | None = None
        """Told about each group commit (``CommitObserver``)."""
        self._task = asyncio.get_running_loop().create_task(self._loop())
        self._task.add_done_callback(self._on_task_done)

    def stats(self) -> WriterStats:
        """Counters: successful group commits, batches and events they wrote, failed
        commits, batches queued now."""
        return WriterStats(self._commits, self._batches, self._events, self._failed_commits,
                           len(self._queue))

    def open_or_create(self, session_id: str, new: NewSession
                       ) -> tuple[PendingBatch, asyncio.Future[None]]:
        """Queue the creation of ``session_id`` (``new``, with ``or_open``) that takes
        it for writing instead when it is stored. Returns the queued item and the
        future that completes when its group is committed: the item's ``opened`` is
        then the read of a stored session (its epoch bumped), or ``None`` for a new one
        (writer epoch 1). The future fails with ``CommitFailed`` (the item stays queued
        and is tried again with the next group, as every batch is) or ``StoreError``.
        Raises ``StoreError`` once closed."""
        if not new.or_open:
            new = new._replace(or_open=True)
        self._check_open()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        item = PendingBatch(self._next_id, session_id, 1, NO_ROWS, waiter, new)
        self._queue.append(item)
        self._next_id += 1
        self._urgent.set()
        self._kick.set()
        return item, waiter

    def submit(self, session_id: str, epoch: int, batch: EncodedBatch, *,
               durable: bool, create: NewSession | None = None, resend: bool = False,
               state: StateWrite | None = None) -> asyncio.Future[None] | None:
        """Queue ``batch`` (with ``create``: the session's creation, epoch 1, and its
        first events). With ``durable`` return a future that completes when the batch
        is committed (or fails with its ``StoreError``); otherwise return ``None`` and
        keep a failure for ``flush`` to raise. ``resend``: the batch was sent before
        with an unknown outcome (the process that took it died); when the session
        already holds its seqs under the batch's epoch it counts as written, since that
        earlier send stored it. ``state``: a state delta of the session written in the
        batch's own savepoint (all or nothing with its rows). Raises ``StoreError`` once
        closed."""
        self._check_open()
        waiter = asyncio.get_running_loop().create_future() if durable else None
        self._queue.append(PendingBatch(self._next_id, session_id, epoch, batch, waiter,
                                        create, resend, state))
        self._next_id += 1
        self._queued_events += len(batch.rows)
        if durable or self._queued_events >= self._max_events:
            self._urgent.set()
        self._kick.set()
        return waiter

    async def drain(self) -> None:
        """Wait until every batch submitted so far is committed or has failed on its own.

        Raises ``CommitFailed`` when a commit attempt fails meanwhile (the batches stay
        queued); a batch's own failure (``SeqMismatch``...) is not raised here."""
        self._check_open()
        target = self._next_id - 1
        if self._done_id >= target:
            return
        barrier: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._barriers.append((target, barrier))
        self._urgent.set()
        self._kick.set()
        await barrier

    async def flush(self, session_id: str | None = None) -> None:
        """``drain``, then raise the oldest failure of a non-durable batch not yet
        reported (of ``session_id`` only, when given): one per call, later calls raise
        the next ones."""
        await self.drain()
        for index, (owner, error) in enumerate(self._errors):
            if session_id is None or owner == session_id:
                del self._errors[index]
                raise error

    async def close(self) -> None:
        """Drain, then stop the task. Raises, after the task has stopped: the commit
        error when draining failed (the batches it left queued are dropped, never having
        been acknowledged as durable, and their waiters fail), else the unreported
        failure of a non-durable batch (a ``StoreError`` listing them all when there
        are several)."""
        if self._closing:
            return
        try:
            await self.drain()
            errors = [error for _, error in self._errors]
            self._errors.clear()
            if len(errors) == 1:
                raise errors[0]
            if errors:
                raise StoreError(f"{len(errors)} buffered batches failed and were not "
                                 f"reported before close: "
                                 + "; ".join(f"{type(e).__name__}: {e}" for e in errors)
                                 ) from errors[0]
        finally:
            self._closing = True
            self._kick.set()
            await asyncio.gather(self._task, return_exceptions=True)
            closed = StoreError("the store was closed before this batch was committed")
            for item in self._queue:
                _fail(item.waiter, closed)
            for _, barrier in self._barriers:
                _fail(barrier, closed)

    # -- internals -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._broken is not None:
            raise StoreError(f"the store's writer stopped: {self._broken!r}") \
                from self._broken
        if self._closing:
            raise StoreError("the store is closed")

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            error: BaseException = StoreError("the store's writer task was cancelled")
        elif task.exception() is not None:
            error = StoreError(f"the store's writer task failed: {task.exception()!r}")
            error.__cause__ = task.exception()
        else:
            return
        self._broken = error
        for item in self._queue:
            _fail(item.waiter, error)
        for _, barrier in self._barriers:
            _fail(barrier, error)

    async def _loop(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            if self._closing:
                return
            if not self._queue:
                self._settle_barriers()
                continue
            await self._linger()
            while self._queue:
                group = self._take_group()
                started = time.perf_counter()
                try:
                    outcomes = await self._conn.run(partial(commit_group, group))
                except Exception as exc:  # every failure of the commit is reported
                    self._commit_failed(group, exc)
                    break
                self._committed(group, outcomes)
                if self.observer is not None:
                    self.observer.committed(
                        len(group), sum(len(item.batch.rows) for item in group),
                        time.perf_counter() - started, len(self._queue))
            else:
                self._urgent.clear()  # all committed: the next batch may linger again

    async def _linger(self) -> None:
        if self._delay <= 0 or self._urgent.is_set():
            self._urgent.clear()
            return
        # A timeout only means the delay is over: commit what has gathered.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._urgent.wait(), self._delay)
        self._urgent.clear()

    def _take_group(self) -> list[PendingBatch]:
        group: list[PendingBatch] = []
        count = 0
        for item in self._queue:
            size = len(item.batch.rows)
            if group and count + size > self._max_events:
                break
            group.append(item)
            count += size
        return group

    def _committed(self, group: list[PendingBatch], outcomes: list[StoreError | None]) -> None:
        for item, outcome in zip(group, outcomes, strict=True):
            self._queue.popleft()
            self._queued_events -= len(item.batch.rows)
            if outcome is None:
                if item.written:
                    self._batches += 1
                    self._events += len(item.batch.rows)
                if item.waiter is not None and not item.waiter.done():
                    item.waiter.set_result(None)
            elif item.waiter is not None:
                _fail(item.waiter, outcome)
            else:
                self._errors.append((item.session_id, outcome))
        self._commits += 1
        self._done_id = group[-1].id
        self._settle_barriers()

    def _commit_failed(self, group: list[PendingBatch], exc: Exception) -> None:
        self._failed_commits += 1
        log.warning("a group commit of %d batches failed: %s", len(group),
                    type(exc).__name__)
        if self.observer is not None:
            self.observer.commit_failed(len(group), exc)
        message = (f"group commit of {len(group)} batch(es) failed: {exc}; the batches stay "
                   f"queued in order and are retried at the next append or flush"
                   if self._keep_failed else
                   f"group commit of {len(group)} batch(es) failed: {exc}; nothing of "
                   f"them was stored, and they are not retried")

        def error() -> CommitFailed:
            failure = CommitFailed(message)
            failure.__cause__ = exc
            return failure

        for item in self._queue:
            _fail(item.waiter, error())
        for _, barrier in self._barriers:
            _fail(barrier, error())
        self._barriers.clear()
        if not self._keep_failed:
            # Dropped, not retried: the commit was rolled back, so nothing of these
            # batches is stored, and nothing of them ever will be (their waiters were
            # told so above).
            dropped = {item.id for item in group}
            self._queue = deque(i for i in self._queue if i.id not in dropped)
            self._queued_events = sum(len(i.batch.rows) for i in self._queue)
            self._done_id = max(self._done_id, group[-1].id)

    def _settle_barriers(self) -> None:
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for target, barrier in self._barriers:
            if target <= self._done_id:
                if not barrier.done():
                    barrier.set_result(None)
            else:
                keep.append((target, barrier))
        self._barriers = keep

