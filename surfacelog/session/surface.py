"""The surface: one ordered list of seqs, folded incrementally from the log (docs/rules.md §5-6).

``SurfaceManager`` is the whole state: ``nodes`` (a list of ints) and
``replace_generation``. ``plan`` runs every check of docs/rules.md §6 on a candidate, in
order, without changing anything; ``sync`` folds the events committed to the log since
the last synchronisation, reusing the plan already made for a just-checked candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, overload

from msgspec import UNSET, Struct

from surfacelog.schema.dsh import PackedRun
from surfacelog.schema.errors import SurfaceError
from surfacelog.schema.events import EVENT_TYPES, MAX_SAFE_INT, Event
from surfacelog.session import shapes
from surfacelog.session.jsonvalue import json_equal


class Replacement(Struct, rename="camel", frozen=True):
    """One committed replace: ``{seq, start, end, shadowedSeqs}``."""

    seq: int
    start: int
    end: int
    shadowed_seqs: tuple[int, ...]


class SurfacePlan(NamedTuple):
    """A checked candidate: where it goes. ``first``..``last`` are node positions
    (both ``-1`` for an append)."""

    seq: int
    surface: bool
    first: int
    last: int


class _Undo(NamedTuple):
    """How to take one applied event back off the surface (``atomic`` rollback): the
    node position it took, the nodes it shadowed, and whether it was a replace."""

    position: int
    removed: list[int]
    was_replace: bool


# ``NamedTuple(...)`` goes through a Python-level ``__new__``; ``tuple.__new__`` builds the
# same object in C. These two are built once per appended event.
def _new_plan(seq: int, surface: bool, first: int, last: int) -> SurfacePlan:
    return tuple.__new__(SurfacePlan, (seq, surface, first, last))


def _new_undo(position: int, removed: list[int], was_replace: bool) -> _Undo:
    return tuple.__new__(_Undo, (position, removed, was_replace))


_NOT_A_NODE = _new_undo(-1, [], False)
"""The undo record of an event that did not touch the surface (shared: it is never
mutated)."""


def _plain_envelope(event: Event, seq: int) -> bool:
    """True when ``event`` is the next event at ``seq`` with an envelope that needs no
    further look: integer seq and time (in the safe range), and no ``surfaceOp``,
    ``sourceEventSeqs`` or ``ignorable``. The fast paths of ``plan`` and ``fold_batch``
    share this test, so they cannot drift apart."""
    t = event.time
    return (event.seq == seq and type(event.seq) is int and type(t) is int
            and -MAX_SAFE_INT <= t <= MAX_SAFE_INT and event.surface_op is UNSET
            and event.source_event_seqs is UNSET and event.ignorable is UNSET)
"""The undo entry of an event that is not a surface node (nothing to undo)."""


class EventLookup(Protocol):
    """What the checks read of the events already folded: the event at a seq (only
    ever a current surface node: rule 6.7 compares a rewrite with the tool/result it
    shadows). A ``list[Event]`` log is one; so is ``logcheck``'s node index."""

    def __getitem__(self, seq: int, /) -> Event: ...


class FoldLog(EventLookup, Protocol):
    """The log ``fold_batch`` appends to: ``extend`` is only ever given events that are
    not surface events (runs of plain log-only events), ``append`` any other checked
    event."""

    def append(self, event: Event, /) -> None: ...

    def extend(self, events: Sequence[Event], /) -> None: ...


T = TypeVar("T")


class ListView(Sequence[T], Generic[T]):
    """A read-only live view of a list owned elsewhere (the manager's nodes, a session's
    log), so readers can look without copying; it follows that list's changes."""

    __slots__ = ("_items",)

    def __init__(self, items: list[T]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        return self._items[i]

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ListView):
            return self._items == other._items
        if isinstance(other, list):
            return self._items == other
        if isinstance(other, tuple):
            return self._items == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._items!r})"


class SurfaceManager:
    """Owns the ordered node list of one session."""

    __slots__ = ("_generation", "_nodes", "_planned", "_planned_event", "_replacements",
                 "_rewrites", "_synced", "_undo")

    def __init__(self) -> None:
        self._nodes: list[int] = []
        self._generation = 0
        self._rewrites = 0
        self._synced = 0
        self._replacements: list[Replacement] = []
        self._planned: SurfacePlan | None = None
        self._planned_event: Event | None = None
        self._undo: list[_Undo] | None = None

    @classmethod
    def resume(cls, nodes: Sequence[int], generation: int, synced: int) -> SurfaceManager:
        """A manager that has folded a log's first ``synced`` events into ``nodes`` and
        ``generation`` (a checkpoint of a manager that did), ready to fold the rest.
        Its ``replacements`` start empty: only those folded from here are listed."""
        manager = cls()
        manager._nodes = list(nodes)
        manager._generation = generation
        manager._synced = synced
        return manager

    @property
    def nodes(self) -> ListView[int]:
        """The node seqs in surface order (a live read-only view)."""
        return ListView(self._nodes)

    @property
    def replace_generation(self) -> int:
        """How many replaces were committed."""
        return self._generation

    @property
    def rewrites(self) -> int:
        """How many times nodes already listed changed (a replace, a rollback): while it
        stays the same, the nodes only grow at the end."""
        return self._rewrites

    @property
    def synced(self) -> int:
        """How many log events are folded in (the next expected seq)."""
        return self._synced

    @property
    def replacements(self) -> Sequence[Replacement]:
        """Every committed replace, in log order."""
        return tuple(self._replacements)

    # -- checking ----------------------------------------------------------------------

    def plan(self, event: Event, log: EventLookup, *,
             payload_checked: bool = False) -> SurfacePlan:
        """Check ``event`` as the next event after ``log[:synced]``; change nothing.

        Runs, in the order of docs/rules.md §6: contiguity, envelope and registry,
        eligibility, marker shape, payload shape, range, provenance, coverage,
        tool/result rewrite. Raises
        ``SurfaceError`` for the first rule broken. ``payload_checked``: the payload of
        this log-only event was already found valid (``shapes.payloads_valid``).
        """
        etype = event.type
        if _plain_envelope(event, self._synced) and type(etype) is str:
            spec = EVENT_TYPES.get(etype)
            if spec is not None and not spec.eligible:
                # Most events (chunks, steps, tool calls) are registered log-only events
                # with a plain envelope: contiguity, envelope and eligibility hold by the
                # test above, so only the payload is left to check.
                if not payload_checked:
                    shapes.check_payload(event)
                plan = tuple.__new__(SurfacePlan, (event.seq, False, -1, -1))
                self._planned, self._planned_event = plan, event
                return plan
        shapes.check_contiguity(event, self._synced)
        shapes.check_envelope(event)
        if not shapes.check_eligibility(event):
            shapes.check_payload(event)
            plan = _new_plan(event.seq, False, -1, -1)
        else:
            op = shapes.check_marker(event)
            shapes.check_payload(event)
            if op is None:
                first = last = -1
            else:
                first, last = self._locate(event, op.start, op.end)
            _check_provenance(event)
            if op is not None:
                shadowed = self._nodes[first:last + 1]
                _check_coverage(event, shadowed)
                if event.type == "tool/result":
                    _check_rewrite(event, shadowed, log)
            plan = _new_plan(event.seq, True, first, last)
        self._planned, self._planned_event = plan, event
        return plan

    def _locate(self, event: Event, start: int, end: int) -> tuple[int, int]:
        nodes = self._nodes
        try:
            i = nodes.index(start)
        except ValueError:
            raise SurfaceError("range", f"surface replace: start seq {start} not found in "
                               "surface", event.type, event.seq) from None
        try:
            j = nodes.index(end, i)
        except ValueError:
            if end in nodes:
                j = nodes.index(end)
                raise SurfaceError(
                    "range", f"surface replace: start seq {start} (index {i}) is after end "
                    f"seq {end} (index {j})", event.type, event.seq) from None
            raise SurfaceError("range", f"surface replace: end seq {end} not found in "
                               "surface", event.type, event.seq) from None
        return i, j

    # -- committing --------------------------------------------------------------------

    def apply(self, plan: SurfacePlan) -> None:
        """Commit a plan made by ``plan`` for the event at seq ``synced``."""
        if plan.seq != self._synced:
            raise ValueError(f"plan for seq {plan.seq} applied at seq {self._synced}")
        if plan.surface:
            nodes = self._nodes
            if plan.first < 0:
                nodes.append(plan.seq)
                if self._undo is not None:
                    self._undo.append(_new_undo(len(nodes) - 1, [], False))
            else:
                shadowed = nodes[plan.first:plan.last + 1]
                nodes[plan.first:plan.last + 1] = [plan.seq]
                self._replacements.append(
                    Replacement(plan.seq, shadowed[0], shadowed[-1], tuple(shadowed)))
                self._generation += 1
                self._rewrites += 1
                if self._undo is not None:
                    self._undo.append(_new_undo(plan.first, shadowed, True))
        elif self._undo is not None:
            self._undo.append(_NOT_A_NODE)
        self._synced += 1
        self._planned = self._planned_event = None

    def sync(self, log: Sequence[Event]) -> int:
        """Fold ``log[synced:]``. O(1) when nothing is new. Returns how many events were
        folded. Raises ``SurfaceError`` for an event that breaks a rule (events before it
        stay folded)."""
        start = self._synced
        for k in range(start, len(log)):
            planned = self._planned
            event = log[k]
            if planned is not None and self._planned_event is event:
                self.apply(planned)
            else:
                self.apply(self.plan(event, log))
        return len(log) - start

    def fold_batch(self, events: Sequence[Event], log: FoldLog,
                   checked: Sequence[bool]) -> None:
        """Check and commit ``events`` one after another, appending each to ``log``
        (which must be the log this manager folded, ``synced`` events long). The same
        checks as ``plan`` then ``apply`` for each, in order; ``checked[k]``: the payload
        of ``events[k]`` is known valid (``shapes.payloads_valid``). Raises
        ``SurfaceError`` for the first bad event; the events before it stay appended and
        folded (inside ``begin``, ``rollback`` undoes them).

        Runs of plain log-only events (most of a turn: chunks, steps, tool calls) are
        checked in one loop and committed by one ``extend``: they never touch the nodes.
        """
        total, k = len(events), 0
        while k < total:
            run_start, seq = k, self._synced
            # ``checked`` already means a registered log-only type with a valid payload:
            # the envelope is all that is left to look at.
            while k < total and checked[k] and _plain_envelope(events[k], seq):
                k += 1
                seq += 1
            if k > run_start:
                log.extend(events[run_start:k])
                self._synced = seq
                if self._undo is not None:
                    self._undo.extend([_NOT_A_NODE] * (k - run_start))
            if k < total:
                event = events[k]
                plan = self.plan(event, log, payload_checked=checked[k])
                log.append(event)
                self.apply(plan)
                k += 1

    def fold_run(self, run: PackedRun, log: FoldLog) -> None:
        """Check and commit the events of a packed chunk row without building each:
        the same checks, with the same result, as ``fold_batch(run.events(), ...)``.

        Its first member is built and folded as any event (every check; it raises
        what that event breaks). The others differ from it only in their seq (the next
        one each: contiguous), their time (a safe integer each: ``PackedRun``'s
        invariant, checked when the row was decoded) and one string leaf of the
        chunk, where the payload rules ask only for a string (the row's members are
        decoded as strings): every rule the first passed, they pass. So once the first
        is folded, they are committed as a run of plain log-only events, which never
        touch the nodes. ``log.extend`` is given them lazily (a ``Sequence`` that
        builds an event when asked). The reasoning's premises are checked here, not
        taken from the decoder (a ``PackedRun`` can be built by hand): a run whose
        times are not all safe integers or whose members are not all strings is
        folded as its events, one by one."""
        times, members = run.times, run.members
        if not (members and len(times) == len(members)
                and all(type(t) is int for t in times)
                and min(times) >= -MAX_SAFE_INT and max(times) <= MAX_SAFE_INT
                and all(type(m) is str for m in members)):
            events = run.events()
            self.fold_batch(events, log, shapes.payloads_valid(events))
            return
        self.fold_batch([run.event(0)], log, [False])
        rest = len(run) - 1
        if rest:
            log.extend(_RunTail(run))
            self._synced += rest
            if self._undo is not None:
                self._undo.extend([_NOT_A_NODE] * rest)

    # -- all-or-nothing batches ----------------------------------------------------------

    def begin(self) -> None:
        """Start recording undo information for ``rollback``."""
        self._undo = []

    def commit(self) -> None:
        """Stop recording; keep what was applied since ``begin``."""
        self._undo = None

    def rollback(self) -> None:
        """Undo everything applied since ``begin``, newest first."""
        undo = self._undo or []
        if undo:
            self._rewrites += 1
        for entry in reversed(undo):
            if entry.position >= 0:
                if entry.was_replace:
                    self._nodes[entry.position:entry.position + 1] = entry.removed
                    self._replacements.pop()
                    self._generation -= 1
                else:
                    self._nodes.pop()
            self._synced -= 1
        self._undo = None
        self._planned = self._planned_event = None


class _RunTail(Sequence[Event]):
    """A packed run's members after the first, as a lazy sequence of events."""

    __slots__ = ("_run",)

    def __init__(self, run: PackedRun) -> None:
        self._run = run

    def __len__(self) -> int:
        return len(self._run) - 1

    @overload
    def __getitem__(self, k: int) -> Event: ...

    @overload
    def __getitem__(self, k: slice) -> Sequence[Event]: ...

    def __getitem__(self, k: int | slice) -> Event | Sequence[Event]:
        if isinstance(k, slice):
            return self._run.events()[1:][k]
        if not -len(self) <= k < len(self):
            raise IndexError(k)
        return self._run.event(k % len(self) + 1)


_NONE: Any = object()
"""No offender (``_check_provenance``)."""


def _check_provenance(event: Event) -> None:
    seqs = event.source_event_seqs
    if seqs is UNSET:
        return
    etype, seq = event.type, event.seq

    def fail(detail: str) -> SurfaceError:
        return SurfaceError("provenance", f"sourceEventSeqs {detail}", etype, seq)

    if not isinstance(seqs, (list, tuple)):
        raise fail("must be an array")
    if not seqs and etype != "assistant/message":
        raise fail("must not be empty except on assistant/message")
    # The first offender of each rule, as a loop with a call per seq would find it:
    # an assistant message cites every chunk of its step, so these run over many seqs.
    bad = next((s for s in seqs if type(s) is not int or not 0 <= s <= MAX_SAFE_INT),
               _NONE)
    if bad is not _NONE:
        raise fail(f"must densely contain non-negative safe integers; got {bad!r}")
    if len(set(seqs)) != len(seqs):
        raise fail("must not contain duplicates")
    if seqs and max(seqs) >= seq:
        late = next(s for s in seqs if s >= seq)
        raise fail(f"must reference earlier events: {late} >= current seq {seq}")


def _check_coverage(event: Event, shadowed: list[int]) -> None:
    seqs = event.source_event_seqs
    cited = set() if seqs is UNSET else set(seqs)
    missing = [s for s in shadowed if s not in cited]
    if missing:
        raise SurfaceError(
            "coverage",
            "surface replace: sourceEventSeqs must include every shadowed surface node; "
            f"missing {', '.join(map(str, missing))}",
            event.type, event.seq,
        )


def _without_block_content(data: Any) -> Any:
    message = dict(data["message"])
    content = list(message["content"])
    block = dict(content[0])
    block.pop("content", None)
    content[0] = block
    message["content"] = content
    return {**data, "message": message}


def _check_rewrite(event: Event, shadowed: list[int], log: EventLookup) -> None:
    def fail(detail: str) -> SurfaceError:
        return SurfaceError("tool-result-rewrite",
                            f"tool/result surface replacement {detail}", event.type, event.seq)

    if len(shadowed) != 1:
        raise fail(f"must rewrite exactly one current node; it shadows {len(shadowed)}")
    original = log[shadowed[0]]
    if original.type != "tool/result":
        raise fail(f"must target a current tool/result; seq {shadowed[0]} is "
                   f"{original.type}")
    if not json_equal(_without_block_content(event.data),
                      _without_block_content(original.data)):
        raise fail("may change only content")


A = TypeVar("A")


class SurfaceTally(Generic[A]):
    """A running fold over the events of one surface's nodes, in surface order:
    ``step(acc, seq, event)`` for each node, from ``start()``.

    ``update`` folds only the nodes added since it last ran; when listed nodes changed
    meanwhile (``SurfaceManager.rewrites``), or it is given another manager, it starts
    over. What a watcher's pass asks of every session (the surface's tokens, its large
    tool results) then costs the nodes appended since the last pass, not the surface."""

    __slots__ = ("_acc", "_counted", "_manager", "_rewrites", "_start", "_step")

    def __init__(self, start: Callable[[], A], step: Callable[[A, int, Event], A]) -> None:
        self._start, self._step = start, step
        self._manager: SurfaceManager | None = None
        self._rewrites = self._counted = 0
        self._acc = start()

    def update(self, manager: SurfaceManager, event: Callable[[int], Event]) -> A:
        """The fold over ``manager``'s nodes now, ``event(seq)`` being a node's event:
        the accumulator itself, not a copy (a mutable one is the tally's own, to read
        and not to change). Raises what ``step`` or ``event`` raise; the next call then
        starts over."""
        if manager is not self._manager or manager.rewrites != self._rewrites:
            self._manager, self._rewrites = manager, manager.rewrites
            self._counted, self._acc = 0, self._start()
        nodes = manager._nodes
        acc, step = self._acc, self._step
        try:
            for seq in nodes[self._counted:]:
                acc = step(acc, seq, event(seq))
        except BaseException:
            self._manager = None  # ``acc`` may hold part of the new nodes
            raise
        self._acc, self._counted = acc, len(nodes)
        return acc


class FoldResult(Struct, frozen=True):
    """The surface of a whole log and its replacement history."""

    nodes: tuple[int, ...]
    replacements: tuple[Replacement, ...]


def fold_surface(events: Sequence[Event]) -> FoldResult:
    """Replay a whole log. Raises ``SurfaceError`` as append would, for the first event
    that breaks a rule."""
    manager = SurfaceManager()
    manager.sync(events)
    return FoldResult(tuple(manager.nodes), tuple(manager.replacements))
