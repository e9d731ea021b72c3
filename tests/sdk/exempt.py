"""What both SDK plugins share: skipping the upstream tests exempt for a replacement."""

from __future__ import annotations

import pytest


def mark_exempt(items: list[pytest.Item], exempt: dict[str, str], backend: str) -> None:
    """Skip, with its reason, every test of ``exempt`` (upstream name without
    parameters -> why); none for the SDK's own class (``backend`` ``sdk``)."""
    if backend == "sdk":
        return
    for item in items:
        name = getattr(item, "originalname", item.name)
        if name in exempt:
            item.add_marker(pytest.mark.skip(reason=f"exempt: {exempt[name]}"))
