"""``gc_paused``: hold the cyclic garbage collector off while a batch is built or a log
is decoded. The package's one such helper: it lives in the lowest layer that uses it
(the JSONL decoder, ``codec.decode_records``); the core's ``Session.append_batch``, the
store's row decoding and the actors' wire decoding use it too.

Appending or decoding a batch allocates thousands of acyclic containers (event data
dicts and lists). With the collector on, every 700 allocations start a collection, and
the older generations are scanned every tenth or hundredth time, which in a process
holding a large log (or many sessions) traverses all of it: about half the cost of a
batch append, and about two thirds of decoding a stored log. Paused, the batch is
scanned once, as a whole, at the next collection. Nesting is harmless; a collector that
was already disabled is left alone, and it is restored on exit, also on error.
"""

from __future__ import annotations

import gc
from types import TracebackType


class gc_paused:
    """Context manager: the collector is disabled inside, restored on exit."""

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        if self._was_enabled:
            gc.disable()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._was_enabled:
            gc.enable()


__all__ = ["gc_paused"]
