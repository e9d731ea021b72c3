"""JSON value equality with JSON's types (docs/rules.md §6.7): ``true != 1``, ``1 == 1.0`` only as
numbers, object key order ignored."""

from __future__ import annotations

from typing import Any


def json_equal(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same JSON value."""
    if a is b:
        return True
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta in (int, float) and tb in (int, float):
        return bool(a == b)
    if ta is dict and tb is dict:
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if ta in (list, tuple) and tb in (list, tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if ta is str and tb is str:
        return bool(a == b)
    return a is None and b is None
