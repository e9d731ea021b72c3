"""OpenAI Responses items <-> DSH messages: the exact mapping of the adapter.

Pure and free of the SDK: items are the JSON objects (``dict``) the Agents SDK keeps in a
session (``TResponseInputItem``). Each item becomes exactly one surface event (one node);
the model-facing part of the item goes into ordinary DSH blocks, and whatever those
blocks cannot carry (the item's own ``id``/``status``/``type``, ``annotations``, a role
DSH lacks...) goes into a *residual* stored in the message's ``source`` under the key
``"openai"`` (DSH keeps unknown source keys). Reading the message back rebuilds the item
from the blocks plus the residual, so ``item_of(message_of(item)) == item``.

- ``message``, role ``user``: ``user/message``, source ``{kind: user}``; ``input_text``
  parts become ``text`` blocks.
- ``message``, role ``system``/``developer``: ``user/message`` with a plugin source
  (``plugin: openai-agents``; DSH has no such role, the role is in the residual).
- ``message``, role ``assistant``: ``assistant/message`` with a model source;
  ``output_text`` parts become ``text`` blocks (``annotations``, ``logprobs`` kept in the
  block's ``openai`` key).
- ``function_call``: ``assistant/message`` with one ``tool-call`` block (``call_id`` is
  the block's ``id``).
- ``function_call_output``: a log-only ``tool/call`` and a ``tool/result`` citing it,
  with one ``tool-result`` block (``toolCallId`` = ``call_id``).
- ``reasoning``: ``assistant/message`` with one ``reasoning`` block per summary part,
  then per content part.
- anything else (hosted tool calls, ``computer_call``, ``compaction``,
  ``item_reference``...): one opaque ``{"type": "openai/item", "item": <the item>}``
  block, in an ``assistant/message``, or for ``*_output`` and other user-side items in a
  ``user/message`` with a plugin source.

Content parts other than text (``input_image``, ``input_file``, ``input_audio``,
``refusal``...) are kept verbatim as opaque ``{"type": "openai/part", "part": ...}``
blocks: DSH ``image`` blocks reference attachments stored outside the log, and the
adapter has no attachment store, so an image's URL, data URL or file id stays in the log
as the SDK gave it. DSH passes unknown block types through untouched.

Exactness is checked, not hoped for: after mapping an item the adapter maps it back, and
when the result differs (an unusual shape the specific rules do not cover) it stores the
item opaquely instead, which is exact by construction. The only refusal is an item that
is not a JSON object or does not survive a JSON round trip unchanged (a tuple, NaN, a
non-string key...): ``UnmappableItem``.

A message without a residual was not written by the adapter (a DSH log, a compaction
checkpoint, a crash-repair closer): it is read with a best-effort mapping
(``foreign_items``) that may give several items for one message.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Container
from typing import Any, Final

from surfacelog.schema.codec import decode_json, encode_json
from surfacelog.schema.errors import LogError

Item = dict[str, Any]
Message = dict[str, Any]

RESIDUAL: Final = "openai"
"""The source key (and block key) holding what DSH blocks cannot carry."""
PROVIDER: Final = "openai-agents"
OPAQUE_ITEM: Final = "openai/item"
OPAQUE_PART: Final = "openai/part"

_TEXT_PARTS: Final = frozenset({"input_text", "output_text"})
_REASONING_PARTS: Final = frozenset({"summary_text", "reasoning_text"})
_USER_SIDE_TYPES: Final = frozenset({"mcp_approval_response", "item_reference"})


class UnmappableItem(LogError, TypeError):
    """An item the adapter cannot store exactly: not a JSON object, or a value a JSON
    round trip would change. Nothing was appended. Also a ``TypeError``: what
    ``SQLiteSession.add_items`` raises for an item JSON cannot encode. ``rule`` is
    ``"openai-item"``, ``event_type`` the item's ``type`` (or ``None``), ``seq``
    ``None`` (it was never logged); the message names the item's position in the
    ``add_items`` call."""


def _unmappable(detail: str, index: int | None, item_type: object) -> UnmappableItem:
    where = "" if index is None else f"item {index} of the call: "
    return UnmappableItem("openai-item", f"{where}{detail}",
                          item_type if isinstance(item_type, str) else None, None)


def new_message_id() -> str:
    """A fresh message id (minted once per item, never re-minted)."""
    return f"oa-{uuid.uuid4().hex}"


def _named(value: Any, names: Container[str]) -> bool:
    """Whether ``value`` is one of ``names``. A JSON value may be a list or an object
    (unhashable: looking it up in a set or dict raises), never one of them."""
    return isinstance(value, str) and value in names


# -- content parts <-> blocks -------------------------------------------------------------

def _to_block(part: Any, block_type: str, known: frozenset[str], default: str,
              slot: str | None = None) -> dict[str, Any]:
    """One content part as a block: a text-like part of a ``known`` type becomes a
    ``block_type`` block (its type recorded when not ``default``, its other keys kept);
    anything else an opaque part block. ``slot`` records which list of the item the
    part came from when an item has two."""
    extra: dict[str, Any] = {}
    if (isinstance(part, dict) and _named(part.get("type"), known)
            and type(part.get("text")) is str):
        block: dict[str, Any] = {"type": block_type, "text": part["text"]}
        rest = {k: v for k, v in part.items() if k != "type" and k != "text"}
        if part["type"] != default:
            extra["partType"] = part["type"]
        if rest:
            extra["partExtra"] = rest
    else:
        block = {"type": OPAQUE_PART, "part": part}
    if slot is not None:
        extra["slot"] = slot
    if extra:
        block[RESIDUAL] = extra
    return block


def _to_part(block: dict[str, Any], default: str) -> Any:
    if block.get("type") == OPAQUE_PART:
        return block["part"]
    extra = block.get(RESIDUAL, {})
    return {"type": extra.get("partType", default), "text": block["text"],
            **extra.get("partExtra", {})}


def _slot(block: dict[str, Any]) -> Any:
    extra = block.get(RESIDUAL)
    return extra.get("slot") if isinstance(extra, dict) else None


def _non_empty(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assistant message with no blocks projects nothing (docs/rules.md §7): keep a node's item
    visible with one empty placeholder block, dropped again when read back."""
    return blocks if blocks else [{"type": "text", "text": "", RESIDUAL: {"placeholder": True}}]


def _real(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in blocks
            if not (isinstance(b.get(RESIDUAL), dict) and b[RESIDUAL].get("placeholder"))]


# -- items -> (event type, message) ------------------------------------------------------

class Mapped:
    """One item as the event it becomes: ``event_type`` and ``message`` (the DSH message
    the node projects)."""

    __slots__ = ("event_type", "message")

    def __init__(self, event_type: str, message: Message) -> None:
        self.event_type = event_type
        self.message = message


def _source(kind: str, model: str, residual: dict[str, Any],
            call_id: str | None = None) -> dict[str, Any]:
    if kind == "model":
        return {"kind": "model", "provider": PROVIDER, "model": model, RESIDUAL: residual}
    if kind == "tool":
        return {"kind": "tool", "callId": call_id, RESIDUAL: residual}
    if kind == "plugin":
        return {"kind": "plugin", "plugin": PROVIDER, RESIDUAL: residual}
    return {"kind": "user", RESIDUAL: residual}


def _with_fields(residual: dict[str, Any], item: Item, consumed: tuple[str, ...]
                 ) -> dict[str, Any]:
    fields = {k: v for k, v in item.items() if k not in consumed}
    if fields:
        residual["fields"] = fields
    return residual


def _map_message(item: Item, model: str) -> Mapped | None:
    role, content = item.get("role"), item.get("content")
    if role not in ("user", "system", "developer", "assistant"):
        return None
    if not isinstance(content, (str, list)):
        return None
    assistant = role == "assistant"
    default = "output_text" if assistant else "input_text"
    residual: dict[str, Any] = {"item": "message"}
    if isinstance(content, str):
        blocks = [{"type": "text", "text": content}]
        residual["contentString"] = True
    else:
        blocks = [_to_block(p, "text", _TEXT_PARTS, default) for p in content]
    if role in ("system", "developer"):
        residual["role"] = role
    _with_fields(residual, item, ("role", "content"))
    kind = "model" if assistant else ("user" if role == "user" else "plugin")
    message = {"id": new_message_id(), "role": "assistant" if assistant else "user",
               "source": _source(kind, model, residual), "content": _non_empty(blocks)}
    return Mapped("assistant/message" if assistant else "user/message", message)


def _nonempty_str(value: object) -> bool:
    return type(value) is str and value != ""


def _map_function_call(item: Item, model: str) -> Mapped | None:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not (_nonempty_str(call_id) and type(name) is str and type(arguments) is str):
        return None
    residual = _with_fields({"item": "function_call"}, item,
                            ("type", "call_id", "name", "arguments"))
    block = {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}
    message = {"id": new_message_id(), "role": "assistant",
               "source": _source("model", model, residual), "content": [block]}
    return Mapped("assistant/message", message)


def _map_function_call_output(item: Item, model: str) -> Mapped | None:
    call_id, output = item.get("call_id"), item.get("output")
    if not _nonempty_str(call_id) or not isinstance(output, (str, list)):
        return None
    residual: dict[str, Any] = {"item": "function_call_output"}
    if isinstance(output, str):
        inner = [{"type": "text", "text": output}]
        residual["outputString"] = True
    else:
        inner = [_to_block(p, "text", _TEXT_PARTS, "input_text") for p in output]
    _with_fields(residual, item, ("type", "call_id", "output"))
    block = {"type": "tool-result", "toolCallId": call_id, "content": inner}
    message = {"id": new_message_id(), "role": "user",
               "source": _source("tool", model, residual, call_id), "content": [block]}
    return Mapped("tool/result", message)


def _map_reasoning(item: Item, model: str) -> Mapped | None:
    summary = item.get("summary")
    has_content = "content" in item
    content = item.get("content")
    if not isinstance(summary, list) or (has_content and not isinstance(content, list)):
        return None
    blocks = [_to_block(p, "reasoning", _REASONING_PARTS, "summary_text") for p in summary]
    if has_content:
        assert isinstance(content, list)
        blocks += [_to_block(p, "reasoning", _REASONING_PARTS, "reasoning_text", "content")
                   for p in content]
    residual: dict[str, Any] = {"item": "reasoning"}
    if has_content:
        residual["hasContent"] = True
    _with_fields(residual, item, ("type", "summary", "content"))
    message = {"id": new_message_id(), "role": "assistant",
               "source": _source("model", model, residual), "content": _non_empty(blocks)}
    return Mapped("assistant/message", message)


def _user_side(item: Item) -> bool:
    itype = item.get("type")
    if isinstance(itype, str) and (itype.endswith("_output") or itype in _USER_SIDE_TYPES):
        return True
    return item.get("role") in ("user", "system", "developer")


def map_opaque(item: Item, model: str) -> Mapped:
    """The item kept whole in one opaque block (exact by construction)."""
    block = {"type": OPAQUE_ITEM, "item": item}
    residual = {"item": "opaque"}
    if _user_side(item):
        message = {"id": new_message_id(), "role": "user",
                   "source": _source("plugin", model, residual), "content": [block]}
        return Mapped("user/message", message)
    message = {"id": new_message_id(), "role": "assistant",
               "source": _source("model", model, residual), "content": [block]}
    return Mapped("assistant/message", message)


_MAPPERS: Final[dict[Any, Callable[[Item, str], Mapped | None]]] = {
    "message": _map_message,
    "function_call": _map_function_call,
    "function_call_output": _map_function_call_output,
    "reasoning": _map_reasoning,
}


def map_item(item: Any, model: str, index: int | None = None) -> Mapped:
    """The event ``item`` becomes; ``model`` names the model source of assistant-side
    events. Raises ``UnmappableItem`` for an item that is not a JSON object surviving a
    JSON round trip unchanged."""
    if not isinstance(item, dict):
        raise _unmappable(f"an item must be a JSON object (dict), got "
                          f"{type(item).__name__}", index, None)
    itype = item.get("type")
    try:
        same = decode_json(encode_json(item)) == item
    except (TypeError, ValueError) as exc:
        raise _unmappable(f"item is not JSON-encodable: {exc}", index, itype) from exc
    if not same:
        raise _unmappable("item changes in a JSON round trip (a tuple, NaN, a "
                          "non-string key...?)", index, itype)
    # A "type" that is not a string (a list, an object: JSON allows it) names no mapper:
    # such an item is kept opaque, like one of a type this adapter does not know.
    key = "message" if itype is None and "role" in item else itype
    mapper = _MAPPERS[key] if _named(key, _MAPPERS) else None
    mapped = mapper(item, model) if mapper is not None else None
    if mapped is None or items_of(mapped.message) != [item]:
        mapped = map_opaque(item, model)
    return mapped


# -- (message) -> items ------------------------------------------------------------------

def _item_message(message: Message, residual: dict[str, Any]) -> Item:
    role = residual.get("role", message["role"])
    blocks = _real(message["content"])
    content: Any
    if residual.get("contentString"):
        content = blocks[0]["text"]
    else:
        default = "output_text" if role == "assistant" else "input_text"
        content = [_to_part(b, default) for b in blocks]
    return {**residual.get("fields", {}), "role": role, "content": content}


def _item_function_call(message: Message, residual: dict[str, Any]) -> Item:
    block = message["content"][0]
    return {**residual.get("fields", {}), "type": "function_call", "call_id": block["id"],
            "name": block["name"], "arguments": block["arguments"]}


def _item_function_call_output(message: Message, residual: dict[str, Any]) -> Item:
    block = message["content"][0]
    inner = block["content"]
    output: Any = (inner[0]["text"] if residual.get("outputString")
                   else [_to_part(b, "input_text") for b in inner])
    return {**residual.get("fields", {}), "type": "function_call_output",
            "call_id": block["toolCallId"], "output": output}


def _item_reasoning(message: Message, residual: dict[str, Any]) -> Item:
    blocks = _real(message["content"])
    item: Item = {**residual.get("fields", {}), "type": "reasoning",
                  "summary": [_to_part(b, "summary_text") for b in blocks
                              if _slot(b) != "content"]}
    if residual.get("hasContent"):
        item["content"] = [_to_part(b, "reasoning_text") for b in blocks
                           if _slot(b) == "content"]
    return item


def _item_opaque(message: Message, residual: dict[str, Any]) -> Item:
    item: Item = message["content"][0]["item"]
    return item


_READERS: Final[dict[Any, Callable[[Message, dict[str, Any]], Item]]] = {
    "message": _item_message,
    "function_call": _item_function_call,
    "function_call_output": _item_function_call_output,
    "reasoning": _item_reasoning,
    "opaque": _item_opaque,
}


def residual_of(message: Message) -> dict[str, Any] | None:
    """The adapter's residual of ``message``, or ``None`` (a message it did not write)."""
    source = message.get("source")
    residual = source.get(RESIDUAL) if isinstance(source, dict) else None
    if isinstance(residual, dict) and _named(residual.get("item"), _READERS):
        return residual
    return None


def items_of(message: Message) -> list[Item]:
    """The items a projected message stands for: exactly one for a message the adapter
    wrote, ``foreign_items`` otherwise. The items share structure with ``message``:
    copy them (``get_items`` decodes a fresh JSON copy) before handing them out."""
    residual = residual_of(message)
    if residual is None:
        return foreign_items(message)
    return [_READERS[residual["item"]](message, residual)]


def _block_text(block: Any) -> str:
    if isinstance(block, dict) and isinstance(block.get("text"), str):
        return str(block["text"])
    if isinstance(block, dict) and block.get("type") == "image":
        attachment = block.get("attachment") or {}
        return f"[image {attachment.get('attachmentId', '?')}]"
    return encode_json(block).decode()


def foreign_items(message: Message) -> list[Item]:
    """Best-effort items of a message the adapter did not write (DSH logs, compaction
    checkpoints, crash-repair closers): a user message -> one user message item of
    ``input_text`` parts; a tool result -> a ``function_call_output`` (its text blocks
    joined); an assistant message -> per block, a ``reasoning`` item, an assistant
    message item or a ``function_call``. Not round-trip exact (they were never items)."""
    content = message.get("content") or []
    if message.get("role") == "assistant":
        out: list[Item] = []
        for k, block in enumerate(content):
            btype = block.get("type") if isinstance(block, dict) else None
            if btype == "tool-call":
                out.append({"type": "function_call", "call_id": block["id"],
                            "name": block["name"], "arguments": block["arguments"]})
            elif btype == "reasoning":
                out.append({"type": "reasoning", "id": f"{message['id']}-{k}",
                            "summary": [{"type": "summary_text", "text": block["text"]}]})
            else:
                out.append({"role": "assistant", "content": _block_text(block)})
        return out
    if content and isinstance(content[0], dict) and content[0].get("type") == "tool-result":
        inner = content[0].get("content") or []
        return [{"type": "function_call_output", "call_id": content[0]["toolCallId"],
                 "output": "\n".join(_block_text(b) for b in inner)}]
    return [{"role": "user",
             "content": [{"type": "input_text", "text": _block_text(b)} for b in content]}]


__all__ = [
    "OPAQUE_ITEM",
    "OPAQUE_PART",
    "PROVIDER",
    "RESIDUAL",
    "Item",
    "Mapped",
    "UnmappableItem",
    "foreign_items",
    "items_of",
    "map_item",
    "map_opaque",
    "new_message_id",
    "residual_of",
]
