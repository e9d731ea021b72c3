"""A read-only live view of a list, so readers can look without copying."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar, overload

T = TypeVar("T")


class ListView(Sequence[T], Generic[T]):
    """Reads through to a list owned elsewhere; it follows that list's changes."""

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
