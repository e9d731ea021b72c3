"""Shard configuration and rendezvous routing (pure: no Ray, no SQLite)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surfacelog.store.errors import ShardConfigError
from surfacelog.store.shardmap import DEFAULT_SHARD, Shard, ShardMap, load_shard_map


def _map(*names: str) -> ShardMap:
    return ShardMap(tuple(Shard(n, f"/data/{n}.db", f"r_{n}") for n in names))


ids = st.text(min_size=1, max_size=40)


@given(ids)
def test_preference_is_a_permutation_led_by_home(session_id: str) -> None:
    shards = _map("a", "b", "c", "d")
    order = shards.preference(session_id)
    assert sorted(s.name for s in order) == ["a", "b", "c", "d"]
    assert order[0] == shards.home(session_id)


@given(ids)
def test_routing_ignores_configuration_order(session_id: str) -> None:
    forward, backward = _map("a", "b", "c"), _map("c", "b", "a")
    assert forward.home(session_id).name == backward.home(session_id).name
    assert [s.name for s in forward.preference(session_id)] == \
        [s.name for s in backward.preference(session_id)]


@settings(max_examples=50)
@given(ids)
def test_adding_a_shard_keeps_the_relative_order_of_the_others(session_id: str) -> None:
    # Rendezvous: a new shard only inserts itself; an id it does not win keeps its home,
    # and lookup in preference order reaches every old home.
    old, new = _map("a", "b", "c"), _map("a", "b", "c", "d")
    old_order = [s.name for s in old.preference(session_id)]
    new_order = [s.name for s in new.preference(session_id) if s.name != "d"]
    assert old_order == new_order
    if new.home(session_id).name != "d":
        assert new.home(session_id).name == old.home(session_id).name


def test_homes_spread_over_shards_and_a_new_shard_takes_its_share() -> None:
    ids_ = [f"session-{k}" for k in range(4000)]
    three = Counter(_map("a", "b", "c").home(i).name for i in ids_)
    assert set(three) == {"a", "b", "c"}
    assert min(three.values()) > 4000 / 3 * 0.85
    four = _map("a", "b", "c", "d")
    moved = [i for i in ids_ if four.home(i).name != _map("a", "b", "c").home(i).name]
    assert all(four.home(i).name == "d" for i in moved)
    assert 4000 / 4 * 0.85 < len(moved) < 4000 / 4 * 1.15


def test_single_is_one_unpinned_default_shard(tmp_path: Path) -> None:
    m = ShardMap.single(tmp_path / "x.db")
    assert m.names == (DEFAULT_SHARD,)
    assert m.shards[0].path == str(tmp_path / "x.db")
    assert m.shards[0].pin == {}
    assert m.home("anything").name == DEFAULT_SHARD


@pytest.mark.parametrize(("shards", "fragment"), [
    ([], "$.shards = []: must list at least one shard"),
    ([{"name": "A", "path": "/a"}], "$.shards[0].name = 'A': must be 1-32 of a-z"),
    ([{"name": "a\n", "path": "/a"}], "$.shards[0].name = 'a\\n': must be 1-32"),
    ([{"name": "a", "path": "/a"}, {"name": "a", "path": "/b"}],
     "$.shards[1].name = 'a': shard 'a' is listed twice (first at $.shards[0])"),
    ([{"name": "a", "path": "/a"}, {"name": "b", "path": "/a"}],
     "$.shards[1].path = '/a' (shard 'b'): shares its path with shard 'a' ($.shards[0])"),
    ([{"name": "a", "path": ""}], "$.shards[0].path = '' (shard 'a'): must name the shard's"),
    ([{"name": "a", "path": "/a", "resource": ""}],
     "$.shards[0].resource = '' (shard 'a'): must name a Ray custom resource"),
    ([{"name": "a", "path": "/a", "disk": "ssd"}],
     "$.shards[0] (shard 'a'): Object contains unknown field `disk`"),
    ([{"name": "a"}], "$.shards[0] (shard 'a'): Object missing required field `path`"),
    ([{"name": "a", "path": "/a", "added": -1}],
     "$.shards[0].added = -1 (shard 'a'): must be a configuration generation, 0 or more"),
    ([{"name": "a", "path": "/a", "added": "1"}],
     "$.shards[0].added = '1' (shard 'a'): Expected `int`, got `str`; added must be"),
    ([{"name": "a", "path": "/a"}, 7], "$.shards[1]: Expected `object`, got `int`"),
    ("s0.db", "$.shards = 's0.db': Expected `array`, got `str`"),
])
def test_bad_configuration_is_refused_naming_the_file_path_value_and_rule(
        tmp_path: Path, shards: object, fragment: str) -> None:
    """The error names the file, the JSON path of the bad field, its value, its shard
    and the field's rule (msgspec's own words too when the value has the wrong type)."""
    file = tmp_path / "shards.json"
    file.write_text(json.dumps({"shards": shards}))
    with pytest.raises(ShardConfigError) as info:
        load_shard_map(file)
    assert str(info.value).startswith(f"{file}: $")
    assert fragment in str(info.value)


def test_a_bad_top_level_is_refused_naming_the_file(tmp_path: Path) -> None:
    file = tmp_path / "shards.json"
    for doc, fragment in [({"shards": [{"name": "a", "path": "/a"}], "extra": 1},
                           "$: Object contains unknown field `extra`"),
                          ({}, "$: Object missing required field `shards`"),
                          ([], "$: Expected `object`, got `array`")]:
        file.write_text(json.dumps(doc))
        with pytest.raises(ShardConfigError) as info:
            load_shard_map(file)
        assert str(info.value) == f"{file}: {fragment}"


def test_paths_that_resolve_to_one_file_are_refused_naming_the_file(tmp_path: Path) -> None:
    file = tmp_path / "shards.json"
    file.write_text(json.dumps({"shards": [{"name": "a", "path": "x.db"},
                                           {"name": "b", "path": "./x.db"}]}))
    with pytest.raises(ShardConfigError) as info:
        load_shard_map(file)
    assert str(info.value) == (f"{file}: $.shards[1].path = '{tmp_path / 'x.db'}' "
                               f"(shard 'b'): shares its path with shard 'a' ($.shards[0])")


@pytest.mark.parametrize(("shard", "message"), [
    (Shard("B", "/b"), "$.shards[1].name = 'B': must be 1-32"),
    (Shard("b", "/b", added=-2), "$.shards[1].added = -2 (shard 'b'): must be"),
    (Shard("b", "/b", added=True), "$.shards[1].added = True (shard 'b'): Expected `int`, "
                                   "got `bool`"),
    (Shard("b", "/a"), "$.shards[1].path = '/a' (shard 'b'): shares its path"),
])
def test_a_map_built_in_python_is_checked_by_the_same_rules(shard: Shard,
                                                            message: str) -> None:
    with pytest.raises(ShardConfigError) as info:
        ShardMap((Shard("a", "/a"), shard))
    assert str(info.value).startswith(f"shard map: {message}")
    with pytest.raises(ShardConfigError, match=r"^shard map: \$\.shards = \[\]: must list"):
        ShardMap(())


def test_the_rules_are_in_the_json_schema() -> None:
    shard = msgspec.json.schema(ShardMap)["$defs"]["Shard"]["properties"]
    assert shard["name"]["pattern"] == r"^[a-z0-9][a-z0-9_-]{0,31}\Z"
    assert shard["added"]["minimum"] == 0
    assert "must be 1-32" in shard["name"]["description"]


def test_not_json_and_oversized_files_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ShardConfigError, match="not JSON"):
        load_shard_map(bad)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * ((1 << 20) + 10))
    with pytest.raises(ShardConfigError, match="larger than"):
        load_shard_map(big)


def test_a_key_named_twice_is_refused_with_its_path(tmp_path: Path) -> None:
    """Another reader may take the first of two ``path`` keys where msgspec takes the
    last: a shard map whose meaning depends on the reader is refused."""
    file = tmp_path / "shards.json"
    file.write_text('{"shards": [{"name": "s0", "path": "/a.db"},'
                    ' {"name": "s1", "path": "/b.db", "path": "/c.db"}]}')
    with pytest.raises(ShardConfigError) as refused:
        load_shard_map(file)
    assert str(refused.value) == (f'{file}: duplicate key "path" in the object at '
                                  f'$.shards[1]')


def test_relative_paths_are_taken_from_the_files_folder(tmp_path: Path) -> None:
    file = tmp_path / "conf" / "shards.json"
    file.parent.mkdir()
    file.write_text(json.dumps({"shards": [
        {"name": "s0", "path": "data/s0.db", "resource": "surfacelog_shard_s0"},
        {"name": "s1", "path": "/abs/s1.db"}]}))
    m = load_shard_map(file)
    assert m.get("s0").path == str((tmp_path / "conf" / "data" / "s0.db").resolve())
    assert m.get("s0").pin == {"surfacelog_shard_s0": 0.001}
    assert m.get("s1").path == "/abs/s1.db"
    assert m.get("s1").resource is None
    with pytest.raises(KeyError):
        m.get("s2")


@given(ids)
def test_candidates_are_the_home_alone_until_a_shard_is_added(session_id: str) -> None:
    initial = _map("a", "b", "c")
    assert initial.candidates(session_id) == [initial.home(session_id)]
    grown = ShardMap((*initial.shards, Shard("d", "/data/d.db", "r_d", added=1)))
    found = grown.candidates(session_id)
    assert found[0] == grown.home(session_id)
    # The shard an id was created on before "d" existed is always a candidate.
    assert initial.home(session_id) in found
    assert len(found) == (2 if grown.home(session_id).name == "d" else 1)


def test_candidates_follow_each_generation() -> None:
    shards = ShardMap((Shard("a", "/a"), Shard("b", "/b", added=1), Shard("c", "/c", added=2)))
    for k in range(300):
        sid = f"x{k}"
        order = shards.preference(sid)
        expected = []
        for generation in (2, 1, 0):  # where an id created at each generation lives
            home = next(s for s in order if s.added <= generation)
            if home not in expected:
                expected.append(home)
        assert shards.candidates(sid) == sorted(expected, key=order.index)
