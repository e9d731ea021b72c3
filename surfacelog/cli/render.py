"""Readable renderings for the terminal (rich): surfaces as trees, data as ``Text``.

Terminal safety: data (session ids, event types, message text, file names, error
messages quoting them) reaches rich only cleaned (``common.clean``) and as ``Text``
(``text``) or escaped markup (``markup_safe``), never as markup: a session id ``[/x]``
or ``[bold red]PWN[/bold red]`` prints as those characters. Plain lines go through
``common.echo``. Stored data is never changed: only what is printed.

Surfaces: each node with its seq, type and a short text; each replacement expandable
to the events it shadowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.markup import escape
from rich.text import Text
from rich.tree import Tree

from surfacelog.cli.common import clean
from surfacelog.schema.events import Event
from surfacelog.session.surface import Replacement

SHORT = 72


def text(value: object, style: str = "") -> Text:
    """``clean(value)`` as a rich ``Text``: printed as it is, never read as markup."""
    return Text(clean(value), style=style)


def markup_safe(value: object) -> str:
    """``clean(value)`` escaped for rich markup, to put data inside a markup string."""
    return escape(clean(value))


def _text_of(blocks: Any) -> str:
    parts = []
    if isinstance(blocks, list):
        for blk in blocks:
            if not isinstance(blk, dict):
                continue
            kind = blk.get("type")
            if kind in ("text", "reasoning"):
                parts.append(str(blk.get("text", "")))
            elif kind == "tool-call":
                parts.append(f"{blk.get('name')}({blk.get('arguments')})")
            elif kind == "tool-result":
                parts.append(_text_of(blk.get("content")))
            elif kind is not None:
                parts.append(f"[{kind}]")
    return " ".join(p for p in parts if p)


def short_text(event: Event, width: int = SHORT) -> str:
    """A one-line summary of an event's message text."""
    data = event.data
    message = data.get("message", data) if isinstance(data, dict) else {}
    text = _text_of(message.get("content")) if isinstance(message, dict) else ""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def node_label(event: Event) -> Text:
    """``seq  type  "text"`` for one node (terminal-safe ``Text``)."""
    return Text.assemble((clean(event.seq), "bold"), " ", (clean(event.type), "cyan"),
                         " ", clean(short_text(event)))


def surface_tree(title: str, nodes: Sequence[int], log: Sequence[Event],
                 replacements: Sequence[Replacement]) -> Tree:
    """A tree: one branch per node; a replacement node lists the nodes it shadowed,
    each expanded the same way when it was itself a replacement. ``title`` is plain
    text (cleaned, never markup)."""
    by_seq = {r.seq: r for r in replacements}
    tree = Tree(text(title))

    def add(parent: Tree, seq: int) -> None:
        branch = parent.add(node_label(log[seq]))
        rep = by_seq.get(seq)
        if rep is not None:
            hidden = branch.add(f"[dim]replaces {rep.start}..{rep.end}, shadowing "
                                f"{len(rep.shadowed_seqs)} node(s):[/]")
            for s in rep.shadowed_seqs:
                add(hidden, s)

    for seq in nodes:
        add(tree, seq)
    return tree
