"""The choices a deployment and a load run are configured with, as ``Literal`` types,
in a module that imports nothing but the runtime's import-free ``choices``: the CLI
builds ``run``'s options from them (typer turns each into a validated choice) without
loading msgspec, the store or Ray.
``config`` and ``script`` use them from here."""

from __future__ import annotations

from typing import Literal

from surfacelog.runtime.choices import Durability as Durability

Placement = Literal["dedicated", "packed"]
"""How session actors hold sessions: one actor per session, or many per actor."""
Writer = Literal["journal", "owner"]
"""Who commits a shard's file: a journal actor, or the packed actor that owns it."""
AppendMode = Literal["batch", "chunk", "stream"]
"""How a driver appends a model step's chunks: in one ``append_batch``; one ``append``
each, each awaited before the next; or each written as it arrives through an
``AppendStream``, those that arrive while its append is in flight going together."""
