"""Workspace context: at most one current context node per plugin on the surface.

A context producer (the workspace plugin, say) tells the model about its environment
with a ``context/message``. ``context_spec`` turns "the context is now M" into the one
append that makes it so: nothing when the surface already shows M, an append when the
plugin has no context node on the surface (none yet, or compaction hid it in a summary),
else a replace of the plugin's current node by M citing it in ``sourceEventSeqs``. The
log only grows, the old context stays in it, and the model sees the current context
once, where the previous one was.
"""

from __future__ import annotations

import hashlib
from typing import Any

from surfacelog.schema.events import Event, ReplaceOp
from surfacelog.schema.messages import TextBlock, message
from surfacelog.session.errors import ContextError
from surfacelog.session.jsonvalue import json_equal
from surfacelog.session.session import AppendSpec, Session

CONTEXT_TYPE = "context/message"
DEFAULT_PLUGIN = "workspace"


def context_message(body: str, *, plugin: str = DEFAULT_PLUGIN) -> dict[str, Any]:
    """A ``context/message`` payload from ``plugin`` holding ``body`` as text. Its id is
    derived from the plugin and the text, so the same context is the same message."""
    digest = hashlib.sha256(f"{plugin}\0{body}".encode()).hexdigest()[:16]
    return message(f"ctx-{plugin}-{digest}", "user", {"kind": "plugin", "plugin": plugin},
                   [TextBlock(text=body)])


def plugin_of(payload: Any) -> str | None:
    """The plugin a context payload comes from, or ``None`` when it names none."""
    if isinstance(payload, dict):
        source = payload.get("source")
        if isinstance(source, dict) and source.get("kind") == "plugin":
            name = source.get("plugin")
            return name if isinstance(name, str) else None
    return None


def current_context(session: Session, plugin: str) -> Event | None:
    """The event of ``plugin``'s context node on the surface (the last one, should a
    log hold several), or ``None``."""
    for seq in reversed(session.surface.nodes):
        event = session.event(seq)
        if event.type == CONTEXT_TYPE and plugin_of(event.data) == plugin:
            return event
    return None


def context_spec(session: Session, payload: dict[str, Any]) -> AppendSpec | None:
    """The append that makes ``payload`` (a context message with a plugin source) the
    surface's current context of its plugin, or ``None`` when it already is. Raises
    ``ContextError`` when ``payload`` names no plugin: without one there is no
    "previous context" to replace. The spec is checked like any append when it is appended."""
    plugin = plugin_of(payload)
    if plugin is None:
        raise ContextError("a context/message needs source {'kind': 'plugin', 'plugin': NAME}")
    current = current_context(session, plugin)
    if current is None:
        return AppendSpec(CONTEXT_TYPE, payload, surface_op="append")
    if json_equal(current.data, payload):
        return None
    return AppendSpec(CONTEXT_TYPE, payload, surface_op=ReplaceOp(current.seq, current.seq),
                      source_event_seqs=(current.seq,))
