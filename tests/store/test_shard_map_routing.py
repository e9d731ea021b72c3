"""Shard configuration and rendezvous routing (pure: no Ray, no SQLite)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surfacelog.store.shardmap import (
    DEFAULT_SHARD,
    Shard,
    ShardConfigError,
    ShardMap,
    load_shard_map,
)


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
    ([], "no shards"),
    ([{"name": "A", "path": "/a"}], "shard name 'A'"),
    ([{"name": "a", "path": "/a"}, {"name": "a", "path": "/b"}], "listed twice"),
    ([{"name": "a", "path": "/a"}, {"name": "b", "path": "/a"}], "shares its path"),
    ([{"name": "a", "path": ""}], "empty path"),
    ([{"name": "a", "path": "/a", "resource": ""}], "empty resource"),
    ([{"name": "a", "path": "/a", "disk": "ssd"}], "disk"),
    ([{"name": "a"}], "path"),
    ([{"name": "a", "path": "/a", "added": -1}], "negative"),
])
def test_bad_configuration_is_refused_naming_the_file_and_rule(
        tmp_path: Path, shards: list[dict[str, str]], fragment: str) -> None:
    file = tmp_path / "shards.json"
    file.write_text(json.dumps({"shards": shards}))
    with pytest.raises(ShardConfigError) as info:
        load_shard_map(file)
    assert str(file) in str(info.value)
    assert fragment in str(info.value)


def test_not_json_and_oversized_files_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ShardConfigError, match="not JSON"):
        load_shard_map(bad)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * ((1 << 20) + 10))
    with pytest.raises(ShardConfigError, match="larger than"):
        load_shard_map(big)


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
