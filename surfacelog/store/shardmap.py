"""Shards: where each session lives when a deployment has more than one database file.

A shard is one SQLite file with exactly one writer, pinned to the node whose disk holds
the file by a Ray custom resource that only that node offers. The shard list is
configuration (``ShardMap``, read from JSON with ``load_shard_map``), never code.

Routing is rendezvous hashing over shard names: every shard scores the session id, and
the shards in descending score order are the id's *preference order*; the first is its
*home*, where a new session is created. Each shard records ``added``, the generation of
the configuration that introduced it (0 for the first ones). A session created under
generation g lives on the first shard of its order among those added by g, so the only
shards that can hold an id are its *candidates*: the shards of its order each added
earlier than every shard ranked before it. With no shard added later, that is the home
alone: finding a session costs no lookup, and losing one shard's node touches no other
shard's sessions. After shards are added, lookup asks the candidates in order, and an
id is created on its home only once every candidate has said it does not hold it, so it
never exists on two shards; old sessions stay where they are, reachable.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Annotated, Any, Final

import msgspec

from surfacelog.schema.limits import find_duplicate_key
from surfacelog.store.errors import ShardConfigError

DEFAULT_SHARD: Final = "default"
"""The name of the one shard of the embedded default (``./surfacelog.db``)."""

RESOURCE_PREFIX: Final = "surfacelog_shard_"
"""A shard's custom resource is this prefix and its name, unless configured."""

MAX_SHARD_CONFIG_BYTES: Final = 1 << 20
"""A shard configuration file larger than this is refused unread."""


# The rules of each field, checked by msgspec when a configuration is decoded (and by
# ``ShardMap`` when built in Python). Each ``description`` is the rule as the error
# states it (see ``_refusal``), and appears in ``msgspec.json.schema(ShardMap)``.
# ``\Z``, not ``$``: ``$`` would also accept a name that ends in a newline.
ShardName = Annotated[str, msgspec.Meta(
    pattern=r"^[a-z0-9][a-z0-9_-]{0,31}\Z",
    description="must be 1-32 of a-z, 0-9, '-', '_', starting with a letter or digit")]
ShardPath = Annotated[str, msgspec.Meta(
    min_length=1, description="must name the shard's SQLite file (not empty)")]
ShardResource = Annotated[str, msgspec.Meta(
    min_length=1, description="must name a Ray custom resource (not empty; leave it out "
                              "for no pinning)")]
Generation = Annotated[int, msgspec.Meta(
    ge=0, description="must be a configuration generation, 0 or more")]
ReplicaTarget = Annotated[str, msgspec.Meta(
    pattern=r"\S", description="must name a directory or an object-store URL (not blank)")]
SyncInterval = Annotated[float, msgspec.Meta(
    gt=0, le=3600, description="must be seconds in (0, 3600]")]


class Shard(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One shard: a name (lowercase letters, digits, ``-`` and ``_``, at most 32), the
    path of its SQLite file on the node that holds it, and the Ray custom resource that
    pins its writer there (``None``: no pinning, for one-node deployments). Its fields'
    rules are checked when a ``ShardMap`` holding it is built or decoded, not here."""

    name: ShardName
    path: ShardPath
    resource: ShardResource | None = None
    added: Generation = 0
    """The generation of the configuration that introduced this shard (0: from the
    start). Give every shard added later a higher number than all before it."""
    replica: ReplicaTarget | None = None
    """Where Litestream replicates this shard's file (``None``: nowhere): a directory
    (local and test use; a relative one is taken from the configuration file's folder)
    or an object-store URL such as ``s3://bucket/shards/s0`` (see
    ``surfacelog.store.replica``)."""
    replica_sync_s: SyncInterval = 1.0
    """How often Litestream ships the shard's new WAL frames to the replica: the bound,
    under load, of what a lost disk loses (its ``sync-interval``)."""

    @property
    def pin(self) -> dict[str, float]:
        """Ray ``resources=`` that place an actor on this shard's node (a sliver of the
        resource, so any number of actors fit)."""
        return {} if self.resource is None else {self.resource: 0.001}


Shards = Annotated[tuple[Shard, ...], msgspec.Meta(
    min_length=1, description="must list at least one shard")]


class ShardMap(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The shards of a deployment, in configuration order. Building one checks every
    field's rule and that no two shards share a name or a path; raises
    ``ShardConfigError`` (``shard map: $.shards[0].name = 'A': ...``)."""

    shards: Shards

    def __post_init__(self) -> None:
        # Decoding has already checked the fields' rules; a map built in Python has not
        # (msgspec checks constraints only when it decodes or converts), so they are
        # checked again here, at the cost of one conversion of a few small structs.
        _validate(self.shards, _IN_CODE)

    @classmethod
    def single(cls, path: str | os.PathLike[str] = "surfacelog.db") -> ShardMap:
        """The embedded default: one unpinned shard named ``default``."""
        return cls((Shard(DEFAULT_SHARD, os.path.abspath(path)),))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.shards)

    def get(self, name: str) -> Shard:
        """The shard called ``name``. Raises ``KeyError``."""
        for shard in self.shards:
            if shard.name == name:
                return shard
        raise KeyError(name)

    def preference(self, session_id: str) -> list[Shard]:
        """The shards in rendezvous order for ``session_id``: its home first."""
        return sorted(self.shards, key=lambda s: _score(s.name, session_id), reverse=True)

    def candidates(self, session_id: str) -> list[Shard]:
        """The shards that may hold ``session_id``, in lookup order: its home first,
        then each shard of its preference order added earlier than every shard before
        it. Just the home when no shard was added later."""
        out: list[Shard] = []
        for shard in self.preference(session_id):
            if not out or shard.added < min(s.added for s in out):
                out.append(shard)
        return out

    def home(self, session_id: str) -> Shard:
        """Where a new session ``session_id`` is created."""
        return max(self.shards, key=lambda s: _score(s.name, session_id))


def _score(shard: str, session_id: str) -> int:
    # A keyed hash of both names: stable across processes and Python versions (unlike
    # hash()), and uniform enough that every shard wins ~1/S of the ids.
    digest = hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=8,
                             key=shard.encode()).digest()
    return int.from_bytes(digest, "big")


_IN_CODE: Final = "shard map"
"""What a ``ShardConfigError`` of a map built in Python names instead of a file."""

_AT: Final = re.compile(r"(?P<detail>.*) - at `(?P<path>\$[^`]*)`", re.DOTALL)
"""A ``msgspec.ValidationError`` message: what is wrong, then where (a JSON path).
msgspec gives the path only in the message; should its wording change, the error still
says the whole message, only without the value and the shard (the tests then fail)."""
_STEP: Final = re.compile(r"\.(\w+)|\[(\d+)\]")
_CONSTRAINT: Final = re.compile(r"Expected `\w+` (matching|of length|[<>]=?)")
"""msgspec's wording of a value of the right type that breaks a field's ``Meta``: the
field's own rule says it better."""
_SHOWN: Final = 80
"""The longest value an error quotes (longer ones are cut)."""


def _rules() -> dict[str, str]:
    """Each field's rule (its ``Meta`` description), by field name (the fields of
    ``Shard`` and ``ShardMap`` have distinct names)."""
    rules: dict[str, str] = {}
    for struct in (Shard, ShardMap):
        info = msgspec.inspect.type_info(struct)
        assert isinstance(info, msgspec.inspect.StructType)
        for field in info.fields:
            kinds = field.type.types if isinstance(field.type, msgspec.inspect.UnionType) \
                else (field.type,)
            for kind in kinds:
                if isinstance(kind, msgspec.inspect.Metadata) and kind.extra_json_schema:
                    rules[field.name] = str(kind.extra_json_schema["description"])
    return rules


_RULES: Final = _rules()


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


_MISSING: Final = object()


def _lookup(doc: Any, steps: list[str | int]) -> Any:
    """What ``doc`` holds at the JSON path ``steps``, else ``_MISSING``."""
    node = doc
    for step in steps:
        in_list = isinstance(step, int) and isinstance(node, (list, tuple)) \
            and step < len(node)
        in_object = isinstance(step, str) and isinstance(node, dict) and step in node
        held = in_list or in_object
        if not held:
            return _MISSING
        node = node[step]
    return node


def _refusal(where: str, exc: msgspec.ValidationError, doc: Any,
             root: str = "$") -> ShardConfigError:
    """``exc`` (raised decoding or converting ``doc``, the configuration as plain JSON
    values) as a ``ShardConfigError`` that says ``where`` (the file), the JSON path of
    the bad field, its value, the shard it belongs to and the field's rule. ``root``:
    the path, in the whole configuration, of what was converted (``$.shards`` when only
    the list was)."""
    text = str(exc)
    at = _AT.fullmatch(text)
    detail, path = (at["detail"], at["path"]) if at else (text, "$")
    path = root + path[1:]
    steps: list[str | int] = [name or int(index) for name, index in _STEP.findall(path)]
    field = steps[-1] if steps and isinstance(steps[-1], str) else None
    bad = _lookup(doc, steps)
    value = f" = {_shown(bad)}" if field is not None and bad is not _MISSING else ""
    shard = ""
    if len(steps) >= 2 and steps[0] == "shards" and (len(steps) == 2 or steps[2] != "name"):
        name = _lookup(doc, [*steps[:2], "name"])
        if isinstance(name, str):
            shard = f" (shard {_shown(name)})"
    rule = _RULES.get(field) if field is not None else None
    if rule is None:
        reason = detail
    elif _CONSTRAINT.match(detail):
        reason = rule
    else:
        reason = f"{detail}; {field} {rule}"
    return ShardConfigError(f"{where}: {path}{value}{shard}: {reason}")


def _validate(shards: tuple[Shard, ...], where: str) -> None:
    """Check ``shards`` as a configuration's ``shards`` list: every field's rule (by
    converting them as msgspec decodes them), then the rules msgspec cannot state
    (names and paths unique). Raises ``ShardConfigError`` naming ``where``."""
    doc = list(msgspec.to_builtins(shards))  # as decoded JSON would be: a list
    try:
        msgspec.convert(doc, Shards)
    except msgspec.ValidationError as exc:
        raise _refusal(where, exc, {"shards": doc}, root="$.shards") from None
    names: dict[str, int] = {}
    paths: dict[str, int] = {}
    for k, shard in enumerate(shards):
        first = names.setdefault(shard.name, k)
        if first != k:
            raise ShardConfigError(
                f"{where}: $.shards[{k}].name = {_shown(shard.name)}: shard "
                f"{_shown(shard.name)} is listed twice (first at $.shards[{first}])")
        first = paths.setdefault(shard.path, k)
        if first != k:
            raise ShardConfigError(
                f"{where}: $.shards[{k}].path = {_shown(shard.path)} (shard "
                f"{_shown(shard.name)}): shares its path with shard "
                f"{_shown(shards[first].name)} ($.shards[{first}])")


def _in_file(file: Path, exc: ShardConfigError) -> ShardConfigError:
    """``exc``, raised by ``ShardMap`` (``shard map: ...``), as the error of ``file``."""
    text = str(exc)
    if text.startswith(_IN_CODE + ": "):
        text = text[len(_IN_CODE) + 2:]
    return ShardConfigError(f"{file}: {text}")


def default_resource(name: str) -> str:
    """The custom resource of shard ``name`` when the configuration names none."""
    return RESOURCE_PREFIX + name


def load_shard_map(path: str | os.PathLike[str]) -> ShardMap:
    """Read a shard configuration file: ``{"shards": [{"name": ..., "path": ...,
    "resource": ...}, ...]}`` (JSON). Relative paths are taken from the file's folder.
    A ``replica`` that is a relative directory is taken from the file's folder too (a
    URL, ``scheme://...``, is kept as it is). Raises ``ShardConfigError`` naming the file
    and what is wrong (the JSON path of a bad field, its value, its shard and its rule;
    a key an object names twice), ``OSError`` when it cannot be read."""
    file = Path(path)
    with file.open("rb") as f:
        raw = f.read(MAX_SHARD_CONFIG_BYTES + 1)
    if len(raw) > MAX_SHARD_CONFIG_BYTES:
        raise ShardConfigError(f"{file}: larger than {MAX_SHARD_CONFIG_BYTES} bytes")
    try:
        loaded = msgspec.json.decode(raw, type=ShardMap)
    except msgspec.ValidationError as exc:  # before DecodeError: it is one
        if isinstance(exc.__cause__, ShardConfigError):  # raised by ShardMap's checks
            raise _in_file(file, exc.__cause__) from None
        raise _refusal(str(file), exc, msgspec.json.decode(raw)) from None
    except msgspec.DecodeError as exc:
        raise ShardConfigError(f"{file}: not JSON: {exc}") from exc
    try:
        repeated = find_duplicate_key(raw)  # msgspec keeps a repeated key's last value
    except ValueError:  # JSON msgspec reads and the standard library does not: nothing
        repeated = None  # the check could name
    if repeated is not None:
        raise ShardConfigError(f"{file}: {repeated.describe()}")
    base = file.parent

    def resolve(where: str) -> str:
        return str(where if os.path.isabs(where) else (base / where).resolve())

    try:
        # Two relative paths may resolve to one file: checked again once resolved.
        return ShardMap(tuple(
            Shard(s.name, resolve(s.path), s.resource, s.added,
                  s.replica if s.replica is None or is_url(s.replica) else resolve(s.replica),
                  s.replica_sync_s)
            for s in loaded.shards))
    except ShardConfigError as exc:
        raise _in_file(file, exc) from None


_URL: Final = re.compile(r"[a-z][a-z0-9+.-]*://")


def is_url(replica: str) -> bool:
    """Whether a shard's ``replica`` is a URL (``scheme://...``) rather than a
    directory."""
    return _URL.match(replica) is not None


__all__ = ["DEFAULT_SHARD", "Shard", "ShardConfigError", "ShardMap", "default_resource",
           "is_url", "load_shard_map"]
