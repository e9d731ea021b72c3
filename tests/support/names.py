"""Names apart: a test that shares a deployment (or a store) with the other tests of its
module names its sessions and apps with a tag no other test uses, so that none sees
another's sessions, app state or user state."""

from __future__ import annotations

import itertools

_tags = itertools.count()


class Names:
    """A test's names: ``names("s1")`` is ``"s1"`` with this object's tag."""

    def __init__(self) -> None:
        self.tag = f"-{next(_tags)}"

    def __call__(self, name: str) -> str:
        return f"{name}{self.tag}"
